//! Topic-partition names and topic ids, validated as Kafka does.
//!
//! Formats:
//!
//! - A topic name is 1 to 249 characters of `[A-Za-z0-9._-]` and is neither
//!   `.` nor `..` (Kafka's `Topic.validate`). Such a name can never contain a
//!   path separator nor climb out of a directory.
//! - A partition directory is named `<topic>-<partition>` with the partition
//!   in decimal without sign or leading zeros (Kafka's
//!   `LocalLog.logDirName`); it is parsed by splitting at the *last* `-`,
//!   since topics may contain `-`. Kafka also keeps
//!   `<topic>-<partition>.<uuid>-delete`, `-future` and `-stray` directories
//!   next to live ones; [`parse_dir_name`] refuses them
//!   ([`is_special_dir_name`] tells them apart).
//! - A topic id is a 128-bit UUID ([`TopicId`]) written as Kafka's
//!   `Uuid.toString`: the 16 bytes in URL-safe base64 without padding, 22
//!   characters (`partition.metadata`, admin tools). The hyphenated hex form
//!   `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx` is also accepted on input.
//!
//! Invariants: a [`TopicPartition`] can only be built with a valid topic and a
//! partition `>= 0`, so its [`TopicPartition::dir_name`] is always a single,
//! safe path component that [`parse_dir_name`] maps back to it. Nothing here
//! panics on any input.

use std::fmt;
use std::io::Read;
use std::str::FromStr;

use base64::Engine as _;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};

use crate::error::{Error, Result};

/// Longest topic name Kafka accepts (`Topic.MAX_NAME_LENGTH`).
pub const MAX_TOPIC_NAME_LENGTH: usize = 249;
/// Suffix of a partition directory scheduled for deletion.
pub const DELETE_DIR_SUFFIX: &str = "-delete";
/// Suffix of a partition directory being moved in from another log dir.
pub const FUTURE_DIR_SUFFIX: &str = "-future";
/// Suffix of a partition directory the broker no longer owns.
pub const STRAY_DIR_SUFFIX: &str = "-stray";

/// Checks a topic name exactly as Kafka's `Topic.validate` does.
///
/// Fails with [`Error::InvalidName`] (`what` = `"topic"`) when the name is
/// empty, `.`, `..`, longer than [`MAX_TOPIC_NAME_LENGTH`], or contains a
/// character outside `[A-Za-z0-9._-]`.
pub fn validate_topic_name(name: &str) -> Result<()> {
    let reason = if name.is_empty() {
        "the empty string is not allowed"
    } else if name == "." {
        "'.' is not allowed"
    } else if name == ".." {
        "'..' is not allowed"
    } else if name.len() > MAX_TOPIC_NAME_LENGTH {
        "longer than the max allowed length 249"
    } else if !name.bytes().all(is_legal_topic_byte) {
        "contains characters other than ASCII alphanumerics, '.', '_' and '-'"
    } else {
        return Ok(());
    };
    Err(Error::InvalidName {
        what: "topic",
        name: name.to_owned(),
        reason,
    })
}

fn is_legal_topic_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-')
}

/// True for internal topics: names starting with `__` (`__consumer_offsets`,
/// `__transaction_state`, `__cluster_metadata`, ...).
pub fn is_internal_topic(name: &str) -> bool {
    name.starts_with("__")
}

/// True for Kafka Streams internal topics: names ending in `-changelog` or
/// `-repartition`.
pub fn is_streams_internal_topic(name: &str) -> bool {
    name.ends_with("-changelog") || name.ends_with("-repartition")
}

/// True when a directory name is one of Kafka's special partition
/// directories: `...-delete`, `...-future` or `...-stray`. These hold data
/// of a partition being deleted or moved, never a live partition.
pub fn is_special_dir_name(name: &str) -> bool {
    name.ends_with(DELETE_DIR_SUFFIX)
        || name.ends_with(FUTURE_DIR_SUFFIX)
        || name.ends_with(STRAY_DIR_SUFFIX)
}

/// A topic name and a partition number, both valid.
#[derive(
    Clone, Debug, PartialEq, Eq, Hash, Ord, PartialOrd, serde::Serialize, serde::Deserialize,
)]
#[serde(try_from = "RawTopicPartition")]
pub struct TopicPartition {
    /// The topic name (valid per [`validate_topic_name`]).
    pub topic: String,
    /// The partition number (`>= 0`).
    pub partition: i32,
}

/// Unvalidated serde form of [`TopicPartition`]; deserializing validates.
#[derive(serde::Deserialize)]
struct RawTopicPartition {
    topic: String,
    partition: i32,
}

impl TryFrom<RawTopicPartition> for TopicPartition {
    type Error = Error;
    fn try_from(raw: RawTopicPartition) -> Result<Self> {
        TopicPartition::new(raw.topic, raw.partition)
    }
}

impl TopicPartition {
    /// Builds a topic-partition, validating the topic name and refusing a
    /// negative partition.
    pub fn new(topic: impl Into<String>, partition: i32) -> Result<TopicPartition> {
        let topic = topic.into();
        validate_topic_name(&topic)?;
        if partition < 0 {
            return Err(Error::InvalidName {
                what: "partition",
                name: format!("{topic}-{partition}"),
                reason: "the partition number is negative",
            });
        }
        Ok(TopicPartition { topic, partition })
    }

    /// The partition directory name, `<topic>-<partition>`.
    pub fn dir_name(&self) -> String {
        format!("{}-{}", self.topic, self.partition)
    }

    /// Parses a partition directory name `<topic>-<partition>`, splitting at
    /// the last `-`.
    ///
    /// Refuses Kafka's special directories ([`is_special_dir_name`]), invalid
    /// topics, and partition numbers that are negative, signed, padded with
    /// zeros or out of range (so that `dir_name()` of the result is `name`).
    pub fn parse_dir_name(name: &str) -> Result<TopicPartition> {
        parse_dir_name(name)
    }
}

/// Parses a partition directory name; see [`TopicPartition::parse_dir_name`].
pub fn parse_dir_name(name: &str) -> Result<TopicPartition> {
    let refuse = |reason: &'static str| Error::InvalidName {
        what: "partition directory",
        name: name.to_owned(),
        reason,
    };
    if is_special_dir_name(name) {
        return Err(refuse(
            "a Kafka -delete, -future or -stray directory, not a live partition",
        ));
    }
    let (topic, partition) = name
        .rsplit_once('-')
        .ok_or_else(|| refuse("not in the form topic-partition"))?;
    if partition.is_empty() || !partition.bytes().all(|b| b.is_ascii_digit()) {
        return Err(refuse(
            "the partition after the last '-' is not a decimal number",
        ));
    }
    if partition.len() > 1 && partition.starts_with('0') {
        return Err(refuse("the partition number has leading zeros"));
    }
    let partition: i32 = partition
        .parse()
        .map_err(|_| refuse("the partition number is out of range"))?;
    if validate_topic_name(topic).is_err() {
        return Err(refuse("the topic part is not a valid topic name"));
    }
    Ok(TopicPartition {
        topic: topic.to_owned(),
        partition,
    })
}

impl fmt::Display for TopicPartition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.topic, self.partition)
    }
}

/// A topic id: a 128-bit UUID, as Kafka's `org.apache.kafka.common.Uuid`.
///
/// Displayed as Kafka does (URL-safe base64 without padding, 22 chars);
/// parsed from that form or from the hyphenated hex form. Ordered as Kafka
/// orders ids (unsigned, most significant bits first). Serialized with serde
/// as its display string.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopicId([u8; 16]);

/// Base64 engine for Kafka's `Uuid`: URL-safe alphabet, no padding written.
/// Like Java's `Base64.getUrlDecoder()`, decoding ignores the unused low bits
/// of the last character.
const KAFKA_BASE64: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::URL_SAFE,
    GeneralPurposeConfig::new()
        .with_encode_padding(false)
        .with_decode_padding_mode(DecodePaddingMode::RequireNone)
        .with_decode_allow_trailing_bits(true),
);

impl TopicId {
    /// Kafka's `Uuid.ZERO_UUID`: "no id". Never a valid topic id.
    pub const ZERO: TopicId = TopicId([0; 16]);
    /// Kafka's `Uuid.METADATA_TOPIC_ID` (`ONE_UUID`), reserved for
    /// `__cluster_metadata`.
    pub const METADATA: TopicId = TopicId([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);

    /// The id with these 16 bytes (big-endian: most significant first).
    pub const fn from_bytes(bytes: [u8; 16]) -> TopicId {
        TopicId(bytes)
    }

    /// The 16 bytes, most significant first.
    pub const fn as_bytes(&self) -> &[u8; 16] {
        &self.0
    }

    /// True for ids Kafka never generates: [`TopicId::ZERO`] and
    /// [`TopicId::METADATA`].
    pub fn is_reserved(&self) -> bool {
        *self == TopicId::ZERO || *self == TopicId::METADATA
    }

    /// A new random version-4 UUID from `/dev/urandom`, drawn again (as
    /// Kafka's `Uuid.randomUuid` does) while it is reserved or its string
    /// form starts with `-`.
    pub fn random() -> Result<TopicId> {
        const SOURCE: &str = "/dev/urandom";
        let mut file = std::fs::File::open(SOURCE).map_err(Error::io("open", SOURCE))?;
        loop {
            let mut bytes = [0u8; 16];
            file.read_exact(&mut bytes)
                .map_err(Error::io("read", SOURCE))?;
            let id = TopicId::version4_from_random(bytes);
            if id.is_acceptable_random() {
                return Ok(id);
            }
        }
    }

    /// Stamps version 4 and the IETF variant into random bytes, as
    /// `java.util.UUID.randomUUID` does.
    fn version4_from_random(mut bytes: [u8; 16]) -> TopicId {
        bytes[6] = (bytes[6] & 0x0f) | 0x40;
        bytes[8] = (bytes[8] & 0x3f) | 0x80;
        TopicId(bytes)
    }

    /// Kafka's acceptance rule for random ids: not reserved, and the string
    /// form does not start with `-` (the first six bits are not 62).
    fn is_acceptable_random(&self) -> bool {
        !self.is_reserved() && self.0[0] >> 2 != 62
    }

    /// The hyphenated lower-case hex form,
    /// `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`.
    pub fn to_hyphenated(&self) -> String {
        let mut s = String::with_capacity(36);
        for (i, b) in self.0.iter().enumerate() {
            if matches!(i, 4 | 6 | 8 | 10) {
                s.push('-');
            }
            s.push_str(&format!("{b:02x}"));
        }
        s
    }

    /// Parses Kafka's form only, exactly as `Uuid.fromString` accepts it: 22
    /// URL-safe base64 characters, optionally followed by `==`.
    pub fn parse_kafka(s: &str) -> Result<TopicId> {
        let bad =
            |reason: &str| Error::InvalidArgument(format!("invalid topic id {s:?}: {reason}"));
        let body = match s.len() {
            22 => s,
            24 => s
                .strip_suffix("==")
                .ok_or_else(|| bad("24 characters but not ending in \"==\""))?,
            _ => return Err(bad("a Kafka topic id has 22 base64 characters")),
        };
        let bytes = KAFKA_BASE64
            .decode(body)
            .map_err(|e| bad(&format!("not URL-safe base64: {e}")))?;
        let bytes: [u8; 16] = bytes
            .try_into()
            .map_err(|_| bad("does not decode to 16 bytes"))?;
        Ok(TopicId(bytes))
    }

    /// Parses the hyphenated hex form (either case).
    pub fn parse_hyphenated(s: &str) -> Result<TopicId> {
        let bad =
            || Error::InvalidArgument(format!("invalid topic id {s:?}: not a hyphenated UUID"));
        let raw = s.as_bytes();
        if raw.len() != 36 {
            return Err(bad());
        }
        let mut bytes = [0u8; 16];
        let mut nibbles = 0usize;
        for (i, &c) in raw.iter().enumerate() {
            if matches!(i, 8 | 13 | 18 | 23) {
                if c != b'-' {
                    return Err(bad());
                }
                continue;
            }
            let v = (c as char).to_digit(16).ok_or_else(bad)? as u8;
            let slot = bytes.get_mut(nibbles / 2).ok_or_else(bad)?;
            *slot = (*slot << 4) | v;
            nibbles += 1;
        }
        Ok(TopicId(bytes))
    }
}

impl fmt::Display for TopicId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&KAFKA_BASE64.encode(self.0))
    }
}

impl fmt::Debug for TopicId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TopicId({self})")
    }
}

impl FromStr for TopicId {
    type Err = Error;

    /// Parses Kafka's base64 form or the hyphenated hex form.
    fn from_str(s: &str) -> Result<TopicId> {
        if s.len() == 36 {
            TopicId::parse_hyphenated(s)
        } else {
            TopicId::parse_kafka(s)
        }
    }
}

impl serde::Serialize for TopicId {
    fn serialize<S: serde::Serializer>(
        &self,
        serializer: S,
    ) -> std::result::Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for TopicId {
    fn deserialize<D: serde::Deserializer<'de>>(
        deserializer: D,
    ) -> std::result::Result<TopicId, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn topic_names_as_kafka_validates_them() {
        for ok in [
            "a",
            "foo.bar",
            "foo_bar-1",
            "__consumer_offsets",
            "...",
            ".a",
            &"x".repeat(249),
        ] {
            validate_topic_name(ok).unwrap_or_else(|e| panic!("{ok:?}: {e}"));
        }
        for bad in [
            "",
            ".",
            "..",
            "a/b",
            "a b",
            "ä",
            "a\0",
            "../x",
            &"x".repeat(250),
        ] {
            assert!(
                matches!(
                    validate_topic_name(bad),
                    Err(Error::InvalidName { what: "topic", .. })
                ),
                "{bad:?} accepted"
            );
        }
    }

    #[test]
    fn new_refuses_bad_topic_and_negative_partition() {
        assert!(TopicPartition::new("t", 0).is_ok());
        assert!(matches!(
            TopicPartition::new("t", -1),
            Err(Error::InvalidName {
                what: "partition",
                ..
            })
        ));
        assert!(matches!(
            TopicPartition::new("a/b", 0),
            Err(Error::InvalidName { what: "topic", .. })
        ));
    }

    #[test]
    fn dir_names_split_at_last_dash() {
        let tp = parse_dir_name("my-topic-12").expect("valid");
        assert_eq!(tp, TopicPartition::new("my-topic", 12).expect("valid"));
        assert_eq!(tp.dir_name(), "my-topic-12");
        assert_eq!(tp.to_string(), "my-topic-12");
        assert_eq!(
            TopicPartition::parse_dir_name("t--1").expect("valid"),
            TopicPartition::new("t-", 1).expect("v")
        );
        assert_eq!(
            parse_dir_name("__consumer_offsets-49")
                .expect("valid")
                .partition,
            49
        );
        for bad in [
            "",
            "-",
            "topic",
            "topic-",
            "-3",
            "topic-x",
            "topic-+3",
            "topic-03",
            "topic-2147483648",
            "..-0",
            "a b-0",
            "t-0.e4c1d9d1b0a54a8d9f7b4b1f0c3f2a11-delete",
            "t-0.e4c1d9d1b0a54a8d9f7b4b1f0c3f2a11-future",
            "t-0.e4c1d9d1b0a54a8d9f7b4b1f0c3f2a11-stray",
        ] {
            assert!(
                matches!(
                    parse_dir_name(bad),
                    Err(Error::InvalidName {
                        what: "partition directory",
                        ..
                    })
                ),
                "{bad:?} accepted"
            );
        }
        assert!(is_special_dir_name("t-0.abc-delete") && !is_special_dir_name("t-delete-0"));
    }

    #[test]
    fn internal_topic_predicates() {
        assert!(is_internal_topic("__consumer_offsets") && !is_internal_topic("_x"));
        assert!(is_streams_internal_topic("app-store-changelog"));
        assert!(is_streams_internal_topic(
            "app-KSTREAM-0000000001-repartition"
        ));
        assert!(!is_streams_internal_topic("changelog"));
    }

    #[test]
    fn topic_partition_serde_validates() {
        let tp = TopicPartition::new("t", 3).expect("valid");
        let json = serde_json::to_string(&tp).expect("ser");
        assert_eq!(json, r#"{"topic":"t","partition":3}"#);
        assert_eq!(
            serde_json::from_str::<TopicPartition>(&json).expect("de"),
            tp
        );
        assert!(
            serde_json::from_str::<TopicPartition>(r#"{"topic":"../x","partition":0}"#).is_err()
        );
        assert!(serde_json::from_str::<TopicPartition>(r#"{"topic":"t","partition":-1}"#).is_err());
    }

    #[test]
    fn topic_id_golden_forms() {
        // java.util.UUID.fromString("a5c3a9ee-3b4f-4d5e-9a0b-2f6e1c7d8e9f") printed by Kafka's Uuid.
        let id: TopicId = "a5c3a9ee-3b4f-4d5e-9a0b-2f6e1c7d8e9f"
            .parse()
            .expect("hyphenated");
        assert_eq!(id.to_string(), "pcOp7jtPTV6aCy9uHH2Onw");
        assert_eq!(id.to_hyphenated(), "a5c3a9ee-3b4f-4d5e-9a0b-2f6e1c7d8e9f");
        assert_eq!(
            "pcOp7jtPTV6aCy9uHH2Onw".parse::<TopicId>().expect("kafka"),
            id
        );
        assert_eq!(
            "pcOp7jtPTV6aCy9uHH2Onw=="
                .parse::<TopicId>()
                .expect("padded"),
            id
        );
        assert_eq!(
            "A5C3A9EE-3B4F-4D5E-9A0B-2F6E1C7D8E9F"
                .parse::<TopicId>()
                .expect("upper"),
            id
        );
        assert_eq!(TopicId::ZERO.to_string(), "AAAAAAAAAAAAAAAAAAAAAA");
        assert_eq!(TopicId::METADATA.to_string(), "AAAAAAAAAAAAAAAAAAAAAQ");
        // Java's decoder ignores the unused low bits of the last character.
        assert_eq!(
            "AAAAAAAAAAAAAAAAAAAAAR"
                .parse::<TopicId>()
                .expect("lenient"),
            TopicId::METADATA
        );
        assert_eq!(format!("{id:?}"), "TopicId(pcOp7jtPTV6aCy9uHH2Onw)");
    }

    #[test]
    fn topic_id_refuses_malformed() {
        for bad in [
            "",
            "AAAAAAAAAAAAAAAAAAAAA",
            "AAAAAAAAAAAAAAAAAAAAAAA",
            "AAAAAAAAAAAAAAAAAAAAAA=",
            "AAAAAAAAAAAAAAAAAAAAAA=A",
            "AAAAAAAAAAAAAAAAAAAA+/",
            "AAAAAAAAAAAAAAAAAAAA A",
            "a5c3a9ee-3b4f-4d5e-9a0b-2f6e1c7d8e9g",
            "a5c3a9ee-3b4f-4d5e-9a0b_2f6e1c7d8e9f",
            "a5c3a9ee3b4f4d5e9a0b2f6e1c7d8e9f",
            "ééééééééééé",
        ] {
            assert!(bad.parse::<TopicId>().is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn topic_id_serde_is_the_string_form() {
        let id = TopicId::from_bytes([7; 16]);
        let json = serde_json::to_string(&id).expect("ser");
        assert_eq!(json, format!("\"{id}\""));
        assert_eq!(serde_json::from_str::<TopicId>(&json).expect("de"), id);
        assert!(serde_json::from_str::<TopicId>("\"nope\"").is_err());
    }

    #[test]
    fn random_ids_are_version_4_and_acceptable() {
        for _ in 0..64 {
            let id = TopicId::random().expect("urandom");
            let b = id.as_bytes();
            assert_eq!(b[6] >> 4, 4);
            assert_eq!(b[8] >> 6, 0b10);
            assert!(!id.is_reserved());
            assert!(!id.to_string().starts_with('-'));
        }
        // The '-' rule: first six bits 62 give a leading '-'.
        let dash = TopicId::version4_from_random([0xf8; 16]);
        assert!(dash.to_string().starts_with('-') && !dash.is_acceptable_random());
        assert!(!TopicId::ZERO.is_acceptable_random() && !TopicId::METADATA.is_acceptable_random());
    }

    #[test]
    fn ordering_is_unsigned_msb_first() {
        let lo = TopicId::from_bytes([0x7f; 16]);
        let hi = TopicId::from_bytes([0x80; 16]);
        assert!(lo < hi && TopicId::ZERO < TopicId::METADATA);
    }

    proptest! {
        #[test]
        fn topic_id_round_trips(bytes in proptest::array::uniform16(any::<u8>())) {
            let id = TopicId::from_bytes(bytes);
            let s = id.to_string();
            prop_assert_eq!(s.len(), 22);
            prop_assert_eq!(s.parse::<TopicId>().expect("parse"), id);
            prop_assert_eq!(id.to_hyphenated().parse::<TopicId>().expect("parse"), id);
        }

        #[test]
        fn dir_names_round_trip(topic in "[A-Za-z0-9._-]{1,40}", partition in 0i32..=i32::MAX) {
            if let Ok(tp) = TopicPartition::new(topic, partition) {
                prop_assert_eq!(parse_dir_name(&tp.dir_name()).expect("parse"), tp);
            }
        }

        #[test]
        fn random_text_never_panics(s in "\\PC{0,40}", t in "[A-Za-z0-9+/=_-]{0,26}") {
            let _ = parse_dir_name(&s);
            let _ = validate_topic_name(&s);
            let _ = s.parse::<TopicId>();
            let _ = t.parse::<TopicId>();
        }
    }
}
