//! An independent encoder for metadata records and files, for tests.
//!
//! It does not call the `kraft` crate's decoder or codec: records are
//! written by one generic flexible-message writer driven by field lists
//! transcribed from Kafka's `metadata/src/main/resources/common/metadata/
//! *.json` (name, type, versions, tag, default), as a JSON-schema-driven
//! encoder would: a regular field is written when its versions include the
//! record's version, a tagged field only when its value differs from the
//! default, tags in increasing order. Batches are real magic-2 batches from
//! `kafkalog::builder`; files are laid out as a broker lays them out.

#![allow(dead_code, unreachable_pub, missing_docs)]

use std::path::{Path, PathBuf};

use kafkalog::TopicId;
use kafkalog::builder::{BatchSpec, RecordInput, build_batch};

/// A field type of the schemas.
#[derive(Clone, Copy)]
pub enum Ty {
    I8,
    I16,
    I32,
    I64,
    U16,
    Bool,
    Uuid,
    Str,
    I32s,
    Uuids,
    Structs(&'static [Field]),
}

/// One field of a schema: name, type, first version, tag (None for
/// regular fields), whether null is allowed, and the default.
#[derive(Clone, Copy)]
pub struct Field {
    pub name: &'static str,
    pub ty: Ty,
    pub since: u32,
    pub tag: Option<u32>,
    pub default: Def,
}

/// A schema default.
#[derive(Clone, Copy, PartialEq)]
pub enum Def {
    /// Zero / empty / false (no declared default).
    Zero,
    /// An integer default.
    Int(i64),
    /// null.
    Null,
    /// true.
    True,
}

/// A field value.
#[derive(Clone, PartialEq, Debug)]
pub enum V {
    Int(i64),
    Bool(bool),
    Uuid(TopicId),
    Str(Option<String>),
    I32s(Option<Vec<i32>>),
    Uuids(Option<Vec<TopicId>>),
    Structs(Vec<Vec<(&'static str, V)>>),
}

const fn f(name: &'static str, ty: Ty, since: u32) -> Field {
    Field {
        name,
        ty,
        since,
        tag: None,
        default: Def::Zero,
    }
}
const fn t(name: &'static str, ty: Ty, since: u32, tag: u32, default: Def) -> Field {
    Field {
        name,
        ty,
        since,
        tag: Some(tag),
        default,
    }
}
const fn d(name: &'static str, ty: Ty, since: u32, default: Def) -> Field {
    Field {
        name,
        ty,
        since,
        tag: None,
        default,
    }
}

// Field lists from the JSON schemas (Kafka 3.7-4.0).
pub const TOPIC_RECORD: &[Field] = &[f("Name", Ty::Str, 0), f("TopicId", Ty::Uuid, 0)];
pub const PARTITION_RECORD: &[Field] = &[
    d("PartitionId", Ty::I32, 0, Def::Int(-1)),
    f("TopicId", Ty::Uuid, 0),
    f("Replicas", Ty::I32s, 0),
    f("Isr", Ty::I32s, 0),
    f("RemovingReplicas", Ty::I32s, 0),
    f("AddingReplicas", Ty::I32s, 0),
    d("Leader", Ty::I32, 0, Def::Int(-1)),
    t("LeaderRecoveryState", Ty::I8, 0, 0, Def::Int(0)),
    d("LeaderEpoch", Ty::I32, 0, Def::Int(-1)),
    d("PartitionEpoch", Ty::I32, 0, Def::Int(-1)),
    f("Directories", Ty::Uuids, 1),
    t("EligibleLeaderReplicas", Ty::I32s, 2, 1, Def::Null),
    t("LastKnownElr", Ty::I32s, 2, 2, Def::Null),
];
pub const PARTITION_CHANGE_RECORD: &[Field] = &[
    d("PartitionId", Ty::I32, 0, Def::Int(-1)),
    f("TopicId", Ty::Uuid, 0),
    t("Isr", Ty::I32s, 0, 0, Def::Null),
    t("Leader", Ty::I32, 0, 1, Def::Int(-2)),
    t("Replicas", Ty::I32s, 0, 2, Def::Null),
    t("RemovingReplicas", Ty::I32s, 0, 3, Def::Null),
    t("AddingReplicas", Ty::I32s, 0, 4, Def::Null),
    t("LeaderRecoveryState", Ty::I8, 0, 5, Def::Int(-1)),
    t("Directories", Ty::Uuids, 1, 8, Def::Null),
    t("EligibleLeaderReplicas", Ty::I32s, 2, 6, Def::Null),
    t("LastKnownElr", Ty::I32s, 2, 7, Def::Null),
];
pub const CONFIG_RECORD: &[Field] = &[
    f("ResourceType", Ty::I8, 0),
    f("ResourceName", Ty::Str, 0),
    f("Name", Ty::Str, 0),
    d("Value", Ty::Str, 0, Def::Null),
];
pub const REMOVE_TOPIC_RECORD: &[Field] = &[f("TopicId", Ty::Uuid, 0)];
pub const FEATURE_LEVEL_RECORD: &[Field] = &[f("Name", Ty::Str, 0), f("FeatureLevel", Ty::I16, 0)];
pub const BROKER_ENDPOINT: &[Field] = &[
    f("Name", Ty::Str, 0),
    f("Host", Ty::Str, 0),
    f("Port", Ty::U16, 0),
    f("SecurityProtocol", Ty::I16, 0),
];
pub const BROKER_FEATURE: &[Field] = &[
    f("Name", Ty::Str, 0),
    f("MinSupportedVersion", Ty::I16, 0),
    f("MaxSupportedVersion", Ty::I16, 0),
];
pub const REGISTER_BROKER_RECORD: &[Field] = &[
    f("BrokerId", Ty::I32, 0),
    f("IsMigratingZkBroker", Ty::Bool, 2),
    f("IncarnationId", Ty::Uuid, 0),
    f("BrokerEpoch", Ty::I64, 0),
    f("EndPoints", Ty::Structs(BROKER_ENDPOINT), 0),
    f("Features", Ty::Structs(BROKER_FEATURE), 0),
    d("Rack", Ty::Str, 0, Def::Null),
    d("Fenced", Ty::Bool, 0, Def::True),
    f("InControlledShutdown", Ty::Bool, 1),
    t("LogDirs", Ty::Uuids, 3, 0, Def::Zero),
];
pub const BROKER_REGISTRATION_CHANGE_RECORD: &[Field] = &[
    f("BrokerId", Ty::I32, 0),
    f("BrokerEpoch", Ty::I64, 0),
    t("Fenced", Ty::I8, 0, 0, Def::Int(0)),
    t("InControlledShutdown", Ty::I8, 1, 1, Def::Int(0)),
    t("LogDirs", Ty::Uuids, 2, 2, Def::Zero),
];
pub const BEGIN_TRANSACTION_RECORD: &[Field] = &[t("Name", Ty::Str, 0, 0, Def::Null)];
pub const ABORT_TRANSACTION_RECORD: &[Field] = &[t("Reason", Ty::Str, 0, 0, Def::Null)];
pub const EMPTY: &[Field] = &[];
pub const PRODUCER_IDS_RECORD: &[Field] = &[
    f("BrokerId", Ty::I32, 0),
    f("BrokerEpoch", Ty::I64, 0),
    f("NextProducerId", Ty::I64, 0),
];

fn uvarint(mut v: u64, out: &mut Vec<u8>) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn default_value(field: &Field) -> V {
    match (field.ty, field.default) {
        (_, Def::Null) => match field.ty {
            Ty::Str => V::Str(None),
            Ty::Uuids => V::Uuids(None),
            _ => V::I32s(None),
        },
        (Ty::Bool, Def::True) => V::Bool(true),
        (Ty::Bool, _) => V::Bool(false),
        (Ty::Uuid, _) => V::Uuid(TopicId::ZERO),
        (Ty::Str, _) => V::Str(Some(String::new())),
        (Ty::I32s, _) => V::I32s(Some(vec![])),
        (Ty::Uuids, _) => V::Uuids(Some(vec![])),
        (Ty::Structs(_), _) => V::Structs(vec![]),
        (_, Def::Int(i)) => V::Int(i),
        (_, _) => V::Int(0),
    }
}

fn write_value(ty: Ty, value: &V, version: u32, out: &mut Vec<u8>) {
    match (ty, value) {
        (Ty::I8, V::Int(i)) => out.push(*i as i8 as u8),
        (Ty::I16, V::Int(i)) => out.extend_from_slice(&(*i as i16).to_be_bytes()),
        (Ty::U16, V::Int(i)) => out.extend_from_slice(&(*i as u16).to_be_bytes()),
        (Ty::I32, V::Int(i)) => out.extend_from_slice(&(*i as i32).to_be_bytes()),
        (Ty::I64, V::Int(i)) => out.extend_from_slice(&i.to_be_bytes()),
        (Ty::Bool, V::Bool(b)) => out.push(u8::from(*b)),
        (Ty::Uuid, V::Uuid(id)) => out.extend_from_slice(id.as_bytes()),
        (Ty::Str, V::Str(s)) => match s {
            None => out.push(0),
            Some(s) => {
                uvarint(s.len() as u64 + 1, out);
                out.extend_from_slice(s.as_bytes());
            }
        },
        (Ty::I32s, V::I32s(a)) => match a {
            None => out.push(0),
            Some(a) => {
                uvarint(a.len() as u64 + 1, out);
                for i in a {
                    out.extend_from_slice(&i.to_be_bytes());
                }
            }
        },
        (Ty::Uuids, V::Uuids(a)) => match a {
            None => out.push(0),
            Some(a) => {
                uvarint(a.len() as u64 + 1, out);
                for id in a {
                    out.extend_from_slice(id.as_bytes());
                }
            }
        },
        (Ty::Structs(fields), V::Structs(items)) => {
            uvarint(items.len() as u64 + 1, out);
            for item in items {
                out.extend_from_slice(&encode_struct(fields, version, item, &[]));
            }
        }
        _ => panic!("value does not match its field type"),
    }
}

/// Writes a struct of `fields` at `version` with `values` (missing values
/// take the schema default), then its tagged fields plus `extra_tags`
/// (unknown tags a newer writer might add).
pub fn encode_struct(
    fields: &[Field],
    version: u32,
    values: &[(&'static str, V)],
    extra_tags: &[(u32, Vec<u8>)],
) -> Vec<u8> {
    for (name, _) in values {
        assert!(
            fields.iter().any(|f| f.name == *name),
            "no field {name} in the schema"
        );
    }
    let value_of = |field: &Field| {
        values
            .iter()
            .find(|(n, _)| *n == field.name)
            .map(|(_, v)| v.clone())
            .unwrap_or_else(|| default_value(field))
    };
    let mut out = Vec::new();
    let mut tagged: Vec<(u32, Vec<u8>)> = extra_tags.to_vec();
    for field in fields.iter().filter(|f| version >= f.since) {
        let value = value_of(field);
        match field.tag {
            None => write_value(field.ty, &value, version, &mut out),
            Some(tag) => {
                if value != default_value(field) {
                    let mut bytes = Vec::new();
                    write_value(field.ty, &value, version, &mut bytes);
                    tagged.push((tag, bytes));
                }
            }
        }
    }
    tagged.sort_by_key(|(tag, _)| *tag);
    uvarint(tagged.len() as u64, &mut out);
    for (tag, bytes) in tagged {
        uvarint(u64::from(tag), &mut out);
        uvarint(bytes.len() as u64, &mut out);
        out.extend_from_slice(&bytes);
    }
    out
}

/// A framed metadata record value: frame version 1, apiKey, version, body.
pub fn frame(api_key: u32, version: u32, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    uvarint(1, &mut out);
    uvarint(u64::from(api_key), &mut out);
    uvarint(u64::from(version), &mut out);
    out.extend_from_slice(body);
    out
}

/// A record of `fields` as `api_key` at `version`.
pub fn record(
    api_key: u32,
    fields: &[Field],
    version: u32,
    values: &[(&'static str, V)],
) -> Vec<u8> {
    frame(
        api_key,
        version,
        &encode_struct(fields, version, values, &[]),
    )
}

pub fn id(n: u8) -> TopicId {
    TopicId::from_bytes([
        n, 0x11, 0x22, 0x33, 0x44, 0x55, 0x46, 0x77, 0x88, 0x99, 0, 0, 0, 0, 0, n,
    ])
}

pub fn s(v: &str) -> V {
    V::Str(Some(v.to_string()))
}
pub fn ints(v: &[i32]) -> V {
    V::I32s(Some(v.to_vec()))
}

pub fn topic(name: &str, topic_id: TopicId) -> Vec<u8> {
    record(
        2,
        TOPIC_RECORD,
        0,
        &[("Name", s(name)), ("TopicId", V::Uuid(topic_id))],
    )
}

/// A PartitionRecord at `version` (directories only written from v1).
#[allow(clippy::too_many_arguments)]
pub fn partition(
    version: u32,
    topic_id: TopicId,
    partition: i32,
    replicas: &[i32],
    isr: &[i32],
    leader: i32,
    leader_epoch: i32,
    partition_epoch: i32,
    directories: &[TopicId],
) -> Vec<u8> {
    record(
        3,
        PARTITION_RECORD,
        version,
        &[
            ("PartitionId", V::Int(partition.into())),
            ("TopicId", V::Uuid(topic_id)),
            ("Replicas", ints(replicas)),
            ("Isr", ints(isr)),
            ("Leader", V::Int(leader.into())),
            ("LeaderEpoch", V::Int(leader_epoch.into())),
            ("PartitionEpoch", V::Int(partition_epoch.into())),
            ("Directories", V::Uuids(Some(directories.to_vec()))),
        ],
    )
}

/// A PartitionChangeRecord at `version` with only the given tagged fields.
pub fn change(
    version: u32,
    topic_id: TopicId,
    partition: i32,
    tags: &[(&'static str, V)],
) -> Vec<u8> {
    let mut values = vec![
        ("PartitionId", V::Int(partition.into())),
        ("TopicId", V::Uuid(topic_id)),
    ];
    values.extend_from_slice(tags);
    record(5, PARTITION_CHANGE_RECORD, version, &values)
}

pub fn config(resource_type: i8, resource: &str, name: &str, value: Option<&str>) -> Vec<u8> {
    record(
        4,
        CONFIG_RECORD,
        0,
        &[
            ("ResourceType", V::Int(resource_type.into())),
            ("ResourceName", s(resource)),
            ("Name", s(name)),
            ("Value", V::Str(value.map(str::to_string))),
        ],
    )
}

pub fn remove_topic(topic_id: TopicId) -> Vec<u8> {
    record(9, REMOVE_TOPIC_RECORD, 0, &[("TopicId", V::Uuid(topic_id))])
}

pub fn feature(name: &str, level: i16) -> Vec<u8> {
    record(
        12,
        FEATURE_LEVEL_RECORD,
        0,
        &[("Name", s(name)), ("FeatureLevel", V::Int(level.into()))],
    )
}

pub fn begin(name: Option<&str>) -> Vec<u8> {
    record(
        23,
        BEGIN_TRANSACTION_RECORD,
        0,
        &[("Name", V::Str(name.map(str::to_string)))],
    )
}
pub fn end() -> Vec<u8> {
    record(24, EMPTY, 0, &[])
}
pub fn abort(reason: Option<&str>) -> Vec<u8> {
    record(
        25,
        ABORT_TRANSACTION_RECORD,
        0,
        &[("Reason", V::Str(reason.map(str::to_string)))],
    )
}
pub fn noop() -> Vec<u8> {
    record(20, EMPTY, 0, &[])
}

pub fn register_broker(
    version: u32,
    broker: i32,
    epoch: i64,
    fenced: bool,
    log_dirs: &[TopicId],
) -> Vec<u8> {
    let endpoint = vec![
        ("Name", s("PLAINTEXT")),
        ("Host", s("localhost")),
        ("Port", V::Int(9092)),
        ("SecurityProtocol", V::Int(0)),
    ];
    let feature = vec![
        ("Name", s("metadata.version")),
        ("MinSupportedVersion", V::Int(1)),
        ("MaxSupportedVersion", V::Int(21)),
    ];
    record(
        0,
        REGISTER_BROKER_RECORD,
        version,
        &[
            ("BrokerId", V::Int(broker.into())),
            ("IncarnationId", V::Uuid(id(200))),
            ("BrokerEpoch", V::Int(epoch)),
            ("EndPoints", V::Structs(vec![endpoint])),
            ("Features", V::Structs(vec![feature])),
            ("Rack", s("rack-a")),
            ("Fenced", V::Bool(fenced)),
            ("LogDirs", V::Uuids(Some(log_dirs.to_vec()))),
        ],
    )
}

pub fn broker_change(version: u32, broker: i32, epoch: i64, fenced: i8, shutdown: i8) -> Vec<u8> {
    record(
        17,
        BROKER_REGISTRATION_CHANGE_RECORD,
        version,
        &[
            ("BrokerId", V::Int(broker.into())),
            ("BrokerEpoch", V::Int(epoch)),
            ("Fenced", V::Int(fenced.into())),
            ("InControlledShutdown", V::Int(shutdown.into())),
        ],
    )
}

/// Control message bodies (version 0, flexible, no frame).
pub fn snapshot_header_value(timestamp: i64) -> Vec<u8> {
    let mut v = 0i16.to_be_bytes().to_vec();
    v.extend_from_slice(&timestamp.to_be_bytes());
    v.push(0);
    v
}
pub fn snapshot_footer_value() -> Vec<u8> {
    vec![0, 0, 0]
}
pub fn leader_change_value(leader: i32, voters: &[i32]) -> Vec<u8> {
    let mut v = 0i16.to_be_bytes().to_vec();
    v.extend_from_slice(&leader.to_be_bytes());
    for _ in 0..2 {
        uvarint(voters.len() as u64 + 1, &mut v);
        for voter in voters {
            v.extend_from_slice(&voter.to_be_bytes());
            v.push(0);
        }
    }
    v.push(0);
    v
}

pub const SNAPSHOT_HEADER: i16 = 3;
pub const SNAPSHOT_FOOTER: i16 = 4;
pub const LEADER_CHANGE: i16 = 2;

/// A data batch of metadata records at `base`, Raft epoch `epoch`, as the
/// Raft client writes it: uncompressed, producer id -1, null keys.
pub fn data_batch(base: i64, epoch: i32, values: &[Vec<u8>]) -> Vec<u8> {
    let records: Vec<RecordInput> = values
        .iter()
        .map(|v| RecordInput {
            timestamp: 1_700_000_000_000,
            key: None,
            value: Some(v.clone()),
            headers: vec![],
        })
        .collect();
    build_batch(&BatchSpec::new(base, epoch), &records).expect("batch")
}

/// A control batch of one control record of `kind` with `value`.
pub fn control_batch(base: i64, epoch: i32, kind: i16, value: Vec<u8>) -> Vec<u8> {
    let mut key = 0i16.to_be_bytes().to_vec();
    key.extend_from_slice(&kind.to_be_bytes());
    let spec = BatchSpec {
        control: true,
        ..BatchSpec::new(base, epoch)
    };
    let record = RecordInput {
        timestamp: 1_700_000_000_000,
        key: Some(key),
        value: Some(value),
        headers: vec![],
    };
    build_batch(&spec, &[record]).expect("control batch")
}

/// The bytes of a snapshot file: header batch, one data batch per slice of
/// `batches`, footer batch, offsets from 0, every batch at `epoch`.
pub fn snapshot_bytes(epoch: i32, batches: &[Vec<Vec<u8>>]) -> Vec<u8> {
    let mut out = control_batch(0, epoch, SNAPSHOT_HEADER, snapshot_header_value(0));
    let mut offset = 1;
    for values in batches {
        out.extend_from_slice(&data_batch(offset, epoch, values));
        offset += values.len() as i64;
    }
    out.extend_from_slice(&control_batch(
        offset,
        epoch,
        SNAPSHOT_FOOTER,
        snapshot_footer_value(),
    ));
    out
}

/// A broker's metadata log on disk.
pub struct MetaLog {
    pub log_dir: PathBuf,
    pub dir: PathBuf,
    pub next_offset: i64,
    pub segment: i64,
}

impl MetaLog {
    /// Creates `<log_dir>/__cluster_metadata-0` (and meta.properties).
    pub fn create(log_dir: &Path, node_id: i32) -> MetaLog {
        let dir = log_dir.join("__cluster_metadata-0");
        std::fs::create_dir_all(&dir).expect("mkdir");
        std::fs::write(
            log_dir.join("meta.properties"),
            format!(
                "#\n#Fri Dec 04 21:00:00 UTC 2026\nnode.id={node_id}\ndirectory.id=7Wc5c1XaQ8GhdAFCtW3Hqw\nversion=1\ncluster.id=Mk3OEYBSD34fcwNTJENDM2Qk\n"
            ),
        )
        .expect("meta.properties");
        std::fs::write(
            dir.join("partition.metadata"),
            "version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAQ\n",
        )
        .expect("partition.metadata");
        MetaLog {
            log_dir: log_dir.to_path_buf(),
            dir,
            next_offset: 0,
            segment: 0,
        }
    }

    pub fn segment_path(&self) -> PathBuf {
        self.dir.join(format!("{:020}.log", self.segment))
    }

    pub fn append_bytes(&self, bytes: &[u8]) {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.segment_path())
            .expect("open segment");
        f.write_all(bytes).expect("append");
    }

    /// Appends one data batch; returns its base offset.
    pub fn append(&mut self, epoch: i32, values: &[Vec<u8>]) -> i64 {
        let base = self.next_offset;
        self.append_bytes(&data_batch(base, epoch, values));
        self.next_offset += values.len() as i64;
        base
    }

    /// Appends one control batch.
    pub fn append_control(&mut self, epoch: i32, kind: i16, value: Vec<u8>) -> i64 {
        let base = self.next_offset;
        self.append_bytes(&control_batch(base, epoch, kind, value));
        self.next_offset += 1;
        base
    }

    /// The active segment's size.
    pub fn segment_len(&self) -> u64 {
        std::fs::metadata(self.segment_path()).expect("stat").len()
    }

    /// Cuts the active segment to `len` bytes, whose batches end before
    /// `next_offset`: what a Raft follower does to an uncommitted tail.
    pub fn truncate(&mut self, len: u64, next_offset: i64) {
        std::fs::OpenOptions::new()
            .write(true)
            .open(self.segment_path())
            .expect("open segment")
            .set_len(len)
            .expect("truncate");
        self.next_offset = next_offset;
    }

    /// Starts a new segment at the next offset.
    pub fn roll(&mut self) {
        self.segment = self.next_offset;
        std::fs::File::create(self.segment_path()).expect("new segment");
    }

    /// Writes `<end_offset>-<epoch>.checkpoint` atomically (via .part).
    pub fn write_snapshot(&self, end_offset: i64, epoch: i32, batches: &[Vec<Vec<u8>>]) -> PathBuf {
        let name = format!("{end_offset:020}-{epoch:010}.checkpoint");
        let part = self.dir.join(format!("{name}.part"));
        std::fs::write(&part, snapshot_bytes(epoch, batches)).expect("snapshot");
        let path = self.dir.join(name);
        std::fs::rename(&part, &path).expect("rename");
        path
    }
}
