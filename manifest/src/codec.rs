//! The integrity envelope of every JSON object segmirror writes to the
//! bucket (partition manifests, sealed pages and heads) and of the
//! applier's local mirror record (`mirror_record`).
//!
//! The objects are compact JSON, and JSON alone does not detect damage: a
//! flipped bit in a digit or in a topic id character still parses and
//! validates, and would then be applied. So, since schema 1.1, every such
//! object ends with a CRC-32C (Castagnoli) of its own bytes:
//!
//! ```text
//! {"schema":{"major":1,"minor":1},...all fields...,"crc32c":<u32 decimal>}
//! `------------------- covered bytes --------------'`----- trailer -------'
//! ```
//!
//! - The encoder serialises the object (fields in declaration order, no
//!   whitespace, so encoding is deterministic), drops the closing `}`,
//!   computes the CRC-32C of everything that is left (the *covered bytes*)
//!   and appends the *trailer* `,"crc32c":<n>}` where `<n>` is the CRC in
//!   canonical decimal (no sign, no leading zero, at most 10 digits).
//! - The decoder looks for that exact trailer at the very end of the bytes
//!   (nothing may follow the `}`, not even whitespace). When it is there,
//!   the CRC of the covered bytes must equal `<n>`, or the object is refused
//!   with [`ManifestFormatError::ChecksumMismatch`] before anything else is
//!   read. Only then is the JSON parsed; the `crc32c` member is an unknown
//!   field to the object's schema and ignored.
//! - When there is no well-formed trailer, the object's `schema` decides:
//!   from the kind's [`ObjectKind::checksummed_since`] on (1.1 for the
//!   bucket's objects, 1.2 for the mirror record, whose version numbers
//!   are its own) a trailer is required, and the object is refused with
//!   [`ManifestFormatError::MissingChecksum`]; older objects (written
//!   before checksums existed) are still accepted, with a `tracing` warning
//!   per decode of a bucket object, since corruption in them cannot be
//!   detected.
//! - A newer major version is refused with
//!   [`ManifestFormatError::UnsupportedSchema`] as before; a newer minor is
//!   read (its unknown fields ignored) when its trailer verifies.
//!
//! So any single-bit flip in a 1.1 object is refused: a flip in the covered
//! bytes changes their CRC (CRC-32C detects every error burst of up to 32
//! bits); a flip in the trailer's digits changes the expected CRC (or makes
//! the trailer malformed); a flip anywhere else in the trailer makes it
//! malformed, and the covered bytes still say 1.1, which requires one. A flip
//! that turns `"minor":1` into `"minor":0` is in the covered bytes.
//!
//! The envelope is part of the 1.x format: a future major version may only
//! drop or change it together with the key layout's format dir
//! (`segmirror/v1`, see `layout`).
//!
//! Decoded values always carry [`SchemaVersion::CURRENT`] in their `schema`
//! field: it is the version they are encoded as (this build writes what it
//! knows, whatever it read), so `decode(encode(x)) == x` for every decoded
//! `x`. The version and integrity an object was found with are what
//! [`verify`] returns.

use std::fmt;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// Current major version of the manifest format.
pub const SCHEMA_MAJOR: u32 = 1;
/// Current minor version of the manifest, page and head formats (1: with
/// the CRC-32C trailer of `codec`).
pub const SCHEMA_MINOR: u32 = 1;
/// Format version of a persisted object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SchemaVersion {
    /// Incompatible changes.
    pub major: u32,
    /// Compatible additions.
    pub minor: u32,
}

impl SchemaVersion {
    /// The version this build writes.
    pub const CURRENT: SchemaVersion = SchemaVersion {
        major: SCHEMA_MAJOR,
        minor: SCHEMA_MINOR,
    };
}

/// What is wrong with a manifest.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ManifestFormatError {
    /// The object is not valid JSON of the expected shape.
    #[error("not a valid manifest: {0}")]
    Malformed(String),
    /// The object was written by a newer, incompatible version.
    #[error(
        "manifest schema {major}.{minor} is newer than this build understands ({SCHEMA_MAJOR}.x): upgrade segmirror"
    )]
    UnsupportedSchema {
        /// Major version found.
        major: u32,
        /// Minor version found.
        minor: u32,
    },
    /// An invariant does not hold.
    #[error("inconsistent manifest: {0}")]
    Invalid(String),
    /// The object's CRC-32C trailer does not match its bytes: it was damaged
    /// after it was written.
    #[error(
        "{object} checksum mismatch: the object says CRC-32C {expected:#010x}, its bytes have {actual:#010x} (damaged in storage or transit)"
    )]
    ChecksumMismatch {
        /// The kind of object.
        object: ObjectKind,
        /// The CRC the trailer states.
        expected: u32,
        /// The CRC of the covered bytes.
        actual: u32,
    },
    /// An object whose schema version requires a CRC-32C trailer has none
    /// (or a damaged one).
    #[error(
        "{object} schema {major}.{minor} requires a CRC-32C trailer (`,\"crc32c\":<n>}}` at the very end) and it is missing or malformed (damaged in storage or transit)"
    )]
    MissingChecksum {
        /// The kind of object.
        object: ObjectKind,
        /// Major version found.
        major: u32,
        /// Minor version found.
        minor: u32,
    },
}

/// The first schema version whose manifests, pages and heads carry the
/// CRC-32C trailer.
pub const CHECKSUMMED_SINCE: SchemaVersion = SchemaVersion { major: 1, minor: 1 };

/// The first version of the applier's mirror record (its own versions,
/// `mirror_record::RECORD_SCHEMA`) that carries the CRC-32C trailer.
pub const MIRROR_RECORD_CHECKSUMMED_SINCE: SchemaVersion = SchemaVersion { major: 1, minor: 2 };

/// What precedes the CRC digits at the end of a checksummed object.
const TRAILER_KEY: &[u8] = b",\"crc32c\":";

/// Most decimal digits of a `u32`.
const MAX_DIGITS: usize = 10;

/// The kinds of checksummed objects, for error messages and logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ObjectKind {
    /// A partition manifest version (`manifest/<version>.json`).
    Manifest,
    /// A sealed page of old ranges (`pages/<first>-<last>.json`).
    Page,
    /// A change feed head (`head/<seq>.json`).
    Head,
    /// The applier's mirror record of a local partition
    /// (`segmirror-mirror.json` in the partition dir).
    MirrorRecord,
    /// A delta of a cluster's group offsets (`groups/delta/<version>.json`).
    GroupsDelta,
    /// A snapshot of a cluster's group offsets
    /// (`groups/snapshot/<version>.json`).
    GroupsSnapshot,
}

impl ObjectKind {
    /// The kind's name: `manifest`, `page`, `head` or `mirror record`.
    pub fn as_str(self) -> &'static str {
        match self {
            ObjectKind::Manifest => "manifest",
            ObjectKind::Page => "page",
            ObjectKind::Head => "head",
            ObjectKind::MirrorRecord => "mirror record",
            ObjectKind::GroupsDelta => "group offsets delta",
            ObjectKind::GroupsSnapshot => "group offsets snapshot",
        }
    }

    /// The first schema version of this kind whose objects carry the
    /// trailer: [`CHECKSUMMED_SINCE`] for the bucket's objects,
    /// [`MIRROR_RECORD_CHECKSUMMED_SINCE`] for the mirror record.
    pub fn checksummed_since(self) -> SchemaVersion {
        match self {
            ObjectKind::Manifest
            | ObjectKind::Page
            | ObjectKind::Head
            | ObjectKind::GroupsDelta
            | ObjectKind::GroupsSnapshot => CHECKSUMMED_SINCE,
            ObjectKind::MirrorRecord => MIRROR_RECORD_CHECKSUMMED_SINCE,
        }
    }
}

impl fmt::Display for ObjectKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How an object's integrity was established by [`verify`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Integrity {
    /// The trailer is present and matches the covered bytes.
    Verified {
        /// The schema version the object declares.
        schema: SchemaVersion,
        /// Its CRC-32C.
        crc32c: u32,
    },
    /// An object written before checksums existed (schema below
    /// [`CHECKSUMMED_SINCE`]): accepted, but damage cannot be detected.
    Unchecked {
        /// The schema version the object declares.
        schema: SchemaVersion,
    },
}

#[derive(serde::Deserialize)]
struct Probe {
    schema: SchemaVersion,
}

/// CRC-32C (Castagnoli), the checksum of the envelope.
pub fn crc32c(bytes: &[u8]) -> u32 {
    kafkalog::batch::crc32c(bytes)
}

/// Adds the trailer to the compact JSON of an object (`{...}` with at
/// least one member), as described in the module docs.
pub fn seal(kind: ObjectKind, mut json: Vec<u8>) -> Result<Vec<u8>, ManifestFormatError> {
    let is_object = json.first() == Some(&b'{') && json.last() == Some(&b'}') && json.len() > 2;
    if !is_object {
        return Err(ManifestFormatError::Malformed(format!(
            "a {kind} must encode as a non-empty JSON object"
        )));
    }
    json.pop();
    let crc = crc32c(&json);
    json.extend_from_slice(TRAILER_KEY);
    json.extend_from_slice(crc.to_string().as_bytes());
    json.push(b'}');
    Ok(json)
}

/// Splits a well-formed trailer off: the covered bytes and the CRC the
/// trailer states. None when the bytes do not end with one.
fn split_trailer(bytes: &[u8]) -> Option<(&[u8], u32)> {
    let inner = bytes.strip_suffix(b"}")?;
    let digits_at = inner
        .iter()
        .rposition(|b| !b.is_ascii_digit())
        .map_or(0, |i| i + 1);
    let digits = inner.get(digits_at..)?;
    let canonical = !digits.is_empty()
        && digits.len() <= MAX_DIGITS
        && (digits.len() == 1 || digits.first() != Some(&b'0'));
    if !canonical {
        return None;
    }
    let covered = inner.get(..digits_at)?.strip_suffix(TRAILER_KEY)?;
    let value = digits.iter().try_fold(0u64, |acc, d| {
        acc.checked_mul(10)?.checked_add(u64::from(d - b'0'))
    })?;
    Some((covered, u32::try_from(value).ok()?))
}

/// The schema version of an object that starts `{"schema":{...}` (as every
/// object segmirror writes does), read without parsing the rest.
fn leading_schema(bytes: &[u8]) -> Option<SchemaVersion> {
    let rest = bytes.strip_prefix(b"{\"schema\":")?;
    serde_json::Deserializer::from_slice(rest)
        .into_iter::<SchemaVersion>()
        .next()?
        .ok()
}

/// Checks an object's envelope and version without decoding its fields:
/// a trailer that is present must match (else
/// [`ManifestFormatError::ChecksumMismatch`]); a newer major is refused; an
/// object of schema 1.1 or later without a well-formed trailer is refused
/// ([`ManifestFormatError::MissingChecksum`], whether or not the rest is
/// valid JSON: a damaged trailer or a torn object; from 1.2 for the mirror
/// record, see [`ObjectKind::checksummed_since`]); older objects are
/// [`Integrity::Unchecked`] (their fields are not checked here).
pub fn verify(kind: ObjectKind, bytes: &[u8]) -> Result<Integrity, ManifestFormatError> {
    let trailer = split_trailer(bytes);
    if let Some((covered, expected)) = trailer {
        let actual = crc32c(covered);
        if actual != expected {
            return Err(ManifestFormatError::ChecksumMismatch {
                object: kind,
                expected,
                actual,
            });
        }
    }
    // Without a trailer the rest may be damaged JSON; the version this
    // build's writers put first still says whether a trailer was required.
    let leading = match trailer {
        Some(_) => None,
        None => leading_schema(bytes),
    };
    let schema = match leading {
        Some(schema) => schema,
        None => {
            let probe: Probe = serde_json::from_slice(bytes)
                .map_err(|e| ManifestFormatError::Malformed(e.to_string()))?;
            probe.schema
        }
    };
    if schema.major > SCHEMA_MAJOR {
        return Err(ManifestFormatError::UnsupportedSchema {
            major: schema.major,
            minor: schema.minor,
        });
    }
    let since = kind.checksummed_since();
    match trailer {
        Some((_, crc32c)) => Ok(Integrity::Verified { schema, crc32c }),
        None if (schema.major, schema.minor) >= (since.major, since.minor) => {
            Err(ManifestFormatError::MissingChecksum {
                object: kind,
                major: schema.major,
                minor: schema.minor,
            })
        }
        None => Ok(Integrity::Unchecked { schema }),
    }
}

/// Encodes `value` as a sealed object of `kind`.
pub(crate) fn encode<T: Serialize>(
    kind: ObjectKind,
    value: &T,
) -> Result<Vec<u8>, ManifestFormatError> {
    let json =
        serde_json::to_vec(value).map_err(|e| ManifestFormatError::Malformed(e.to_string()))?;
    seal(kind, json)
}

/// Verifies and decodes an object of `kind` (read from `key`, when known,
/// for the warning about unchecked objects).
pub(crate) fn decode<T: DeserializeOwned>(
    kind: ObjectKind,
    key: Option<&str>,
    bytes: &[u8],
) -> Result<T, ManifestFormatError> {
    let integrity = verify(kind, bytes)?;
    let value =
        serde_json::from_slice(bytes).map_err(|e| ManifestFormatError::Malformed(e.to_string()))?;
    if let Integrity::Unchecked { schema } = integrity {
        tracing::warn!(
            object = kind.as_str(),
            key = key.unwrap_or("(unknown)"),
            schema = %format_args!("{}.{}", schema.major, schema.minor),
            "accepted a {kind} written before checksums (schema below {}.{}): damage to it cannot be detected",
            kind.checksummed_since().major,
            kind.checksummed_since().minor,
        );
    }
    Ok(value)
}

/// Test support shared by the object modules.
#[cfg(test)]
pub(crate) mod testing {
    use super::*;

    /// Flips every bit of `bytes` in turn and checks that `decode` refuses
    /// each result with a checksum error (never a value, never a panic).
    pub(crate) fn every_bit_flip_is_refused<T: std::fmt::Debug>(
        bytes: &[u8],
        decode: impl Fn(&[u8]) -> Result<T, ManifestFormatError>,
    ) {
        let mut flipped = bytes.to_vec();
        for i in 0..bytes.len() {
            for bit in 0..8 {
                flipped[i] ^= 1 << bit;
                match decode(&flipped) {
                    Err(
                        ManifestFormatError::ChecksumMismatch { .. }
                        | ManifestFormatError::MissingChecksum { .. },
                    ) => {}
                    other => panic!(
                        "flipping bit {bit} of byte {i} ({:?}) gave {other:?}",
                        char::from(bytes[i])
                    ),
                }
                flipped[i] ^= 1 << bit;
            }
        }
    }

    /// Replaces the trailer of a sealed object by a fresh one over `edit`
    /// applied to the covered text (an object some other writer could have
    /// written), for tests of versions and unknown fields.
    pub(crate) fn reseal(bytes: &[u8], edit: impl Fn(&str) -> String) -> Vec<u8> {
        let (covered, _) = split_trailer(bytes).expect("a sealed object");
        let text = std::str::from_utf8(covered).expect("utf-8");
        seal(
            ObjectKind::Manifest,
            format!("{}}}", edit(text)).into_bytes(),
        )
        .expect("seal")
    }

    /// The covered bytes of a sealed object plus `}`: what schema 1.0
    /// looked like, with the version left as it is.
    pub(crate) fn strip_trailer(bytes: &[u8]) -> Vec<u8> {
        let (covered, _) = split_trailer(bytes).expect("a sealed object");
        let mut v = covered.to_vec();
        v.push(b'}');
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const V11: &str = r#"{"schema":{"major":1,"minor":1},"x":1"#;

    fn sealed(body: &str) -> Vec<u8> {
        seal(ObjectKind::Head, format!("{body}}}").into_bytes()).expect("seal")
    }

    #[test]
    fn the_trailer_is_the_crc_of_the_covered_bytes() {
        let bytes = sealed(V11);
        let text = String::from_utf8(bytes.clone()).expect("utf-8");
        assert_eq!(
            text,
            format!("{V11},\"crc32c\":{}}}", crc32c(V11.as_bytes()))
        );
        assert_eq!(
            verify(ObjectKind::Head, &bytes),
            Ok(Integrity::Verified {
                schema: CHECKSUMMED_SINCE,
                crc32c: crc32c(V11.as_bytes())
            })
        );
        // The CRC-32C check value ("123456789" -> 0xE3069283).
        assert_eq!(crc32c(b"123456789"), 0xe306_9283);
    }

    #[test]
    fn malformed_trailers_are_not_trailers() {
        let crc = crc32c(V11.as_bytes());
        for bad in [
            format!("{V11},\"crc32c\":{crc}}} "),
            format!("{V11},\"crc32c\":0{crc}}}"),
            format!("{V11},\"crc32c\": {crc}}}"),
            format!("{V11},\"crc32c\":-{crc}}}"),
            format!("{V11},\"crc32c\":\"{crc}\"}}"),
            format!("{V11},\"crc32c\":99999999999}}"),
            format!("{V11},\"crc32c\":}}"),
            format!("{V11}}}"),
        ] {
            assert_eq!(split_trailer(bad.as_bytes()), None, "{bad}");
            assert!(
                verify(ObjectKind::Head, bad.as_bytes()).is_err(),
                "{bad} is refused"
            );
        }
        assert_eq!(split_trailer(b""), None);
        assert_eq!(split_trailer(b"}"), None);
        assert_eq!(split_trailer(b",\"crc32c\":0}"), Some((&b""[..], 0)));
        assert_eq!(
            split_trailer(b"{,\"crc32c\":4294967295}").map(|t| t.1),
            Some(u32::MAX)
        );
        assert_eq!(split_trailer(b"{,\"crc32c\":4294967296}"), None);
    }

    #[test]
    fn versions_decide_when_there_is_no_trailer() {
        assert!(matches!(
            verify(
                ObjectKind::Page,
                br#"{"schema":{"major":1,"minor":0},"x":1}"#
            ),
            Ok(Integrity::Unchecked { .. })
        ));
        assert_eq!(
            verify(
                ObjectKind::Page,
                br#"{"schema":{"major":1,"minor":4},"x":1}"#
            ),
            Err(ManifestFormatError::MissingChecksum {
                object: ObjectKind::Page,
                major: 1,
                minor: 4
            })
        );
        assert_eq!(
            verify(ObjectKind::Page, br#"{"schema":{"major":2,"minor":0}}"#),
            Err(ManifestFormatError::UnsupportedSchema { major: 2, minor: 0 })
        );
        let newer = sealed(r#"{"schema":{"major":2,"minor":0}"#);
        assert_eq!(
            verify(ObjectKind::Page, &newer),
            Err(ManifestFormatError::UnsupportedSchema { major: 2, minor: 0 })
        );
    }

    #[test]
    fn a_torn_1_1_object_is_missing_its_checksum() {
        let whole = sealed(V11);
        for len in 32..whole.len() {
            assert_eq!(
                verify(ObjectKind::Head, &whole[..len]),
                Err(ManifestFormatError::MissingChecksum {
                    object: ObjectKind::Head,
                    major: 1,
                    minor: 1
                }),
                "{len}"
            );
        }
        assert_eq!(
            leading_schema(br#"{"schema":{"major":1,"minor":1}"#),
            Some(CHECKSUMMED_SINCE)
        );
        assert_eq!(leading_schema(br#"{"schema":{"major":1,"minor":1"#), None);
        assert_eq!(
            leading_schema(br#"{"x":1,"schema":{"major":1,"minor":1}}"#),
            None
        );
        // Not leading: the whole object is read for its version.
        assert!(matches!(
            verify(
                ObjectKind::Head,
                br#"{"x":1,"schema":{"major":1,"minor":0}}"#
            ),
            Ok(Integrity::Unchecked { .. })
        ));
        assert!(matches!(
            verify(
                ObjectKind::Head,
                br#"{"x":1,"schema":{"major":1,"minor":2}}"#
            ),
            Err(ManifestFormatError::MissingChecksum { .. })
        ));
    }

    #[test]
    fn only_objects_are_sealed() {
        for bad in [&b""[..], b"{}", b"[1]", b"1", b"{\"a\":1"] {
            assert!(seal(ObjectKind::Manifest, bad.to_vec()).is_err());
        }
    }

    #[test]
    fn mismatch_names_the_kind_and_both_crcs() {
        let mut bytes = sealed(V11);
        bytes[3] ^= 0x01;
        let err = verify(ObjectKind::Manifest, &bytes).expect_err("flipped");
        let text = err.to_string();
        assert!(text.contains("manifest checksum mismatch"), "{text}");
        let expected = crc32c(V11.as_bytes());
        assert!(text.contains(&format!("{expected:#010x}")), "{text}");
    }

    proptest::proptest! {
        #[test]
        fn verify_never_panics(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..200)) {
            let _ = verify(ObjectKind::Head, &bytes);
            let _ = split_trailer(&bytes);
        }

        #[test]
        fn verify_never_panics_on_trailer_shapes(
            body in "[{}\",:0-9a-z]{0,20}",
            digits in "[0-9]{0,12}",
            tail in "[}\\] ]{0,2}",
        ) {
            let text = format!("{body},\"crc32c\":{digits}{tail}");
            let _ = verify(ObjectKind::Head, text.as_bytes());
        }
    }
}
