//! Object layout, epoch manifest, epoch lineage and the mirror state machine (issue 3; not built yet).
