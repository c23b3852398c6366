//! The configuration loaders on arbitrary text:
//! `applier::config::ApplierConfig::from_toml` and
//! `shipper::config::ShipperConfig::from_toml`, then `merge` and
//! `validate` on what parses. Nothing may panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    if let Ok(c) = applier::config::ApplierConfig::from_toml(text) {
        let _ = c.clone().merge(c.clone());
        let _ = c.validate(true);
        let _ = c.validate(false);
    }
    if let Ok(c) = shipper::config::ShipperConfig::from_toml(text) {
        let _ = c.clone().merge(c.clone());
        let _ = c.validate();
    }
});
