//! The Arrow schema of exported records and the builder that turns decoded
//! records into Arrow record batches.
//!
//! | column | Arrow type | null |
//! |---|---|---|
//! | `topic` | Utf8 | no |
//! | `partition` | Int32 | no |
//! | `offset` | Int64 | no |
//! | `timestamp` | Timestamp(Microsecond, "UTC") | no |
//! | `timestamp_type` | Int32: 0 CreateTime, 1 LogAppendTime | no |
//! | `key` | Binary | yes |
//! | `value` | Binary (NULL: a tombstone) | yes |
//! | `headers` | List<Struct<key: Utf8 not null, value: Binary null>> | no |
//! | `leader_epoch` | Int32 | no |
//! | `producer_id` | Int64 (-1: none) | no |
//! | `producer_epoch` | Int32 (-1: none) | no |
//! | `is_transactional` | Boolean | no |
//!
//! Field names follow Redpanda's Iceberg `key_value` mode, flattened.
//! Timestamps are Kafka's milliseconds times 1000 (Iceberg timestamps are
//! microseconds); a log-append-time batch gives each record the batch's
//! max timestamp, as Kafka reports it. Headers are a list, not a map:
//! Kafka headers are ordered and may repeat a key.
//!
//! Invariant: [`SCHEMA_VERSION`] changes whenever a column changes, and is
//! written in every file's key-value metadata.

use std::sync::Arc;

use arrow_array::builder::{
    BinaryBuilder, BooleanBuilder, Int32Builder, Int64Builder, StringBuilder,
    TimestampMicrosecondBuilder,
};
use arrow_array::{ArrayRef, ListArray, RecordBatch, StructArray};
use arrow_buffer::OffsetBuffer;
use arrow_schema::{ArrowError, DataType, Field, Fields, Schema, SchemaRef, TimeUnit};
use kafkalog::batch::{BatchHeader, TimestampType};
use kafkalog::records::Record;

/// The version of the export schema, in each file's metadata.
pub const SCHEMA_VERSION: &str = "1";

/// The index of the `offset` column (the sort column).
pub const OFFSET_COLUMN: usize = 2;

fn header_fields() -> Fields {
    Fields::from(vec![
        Field::new("key", DataType::Utf8, false),
        Field::new("value", DataType::Binary, true),
    ])
}

fn header_item() -> Arc<Field> {
    Arc::new(Field::new("item", DataType::Struct(header_fields()), false))
}

/// The schema of every exported file.
pub fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("topic", DataType::Utf8, false),
        Field::new("partition", DataType::Int32, false),
        Field::new("offset", DataType::Int64, false),
        Field::new(
            "timestamp",
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            false,
        ),
        Field::new("timestamp_type", DataType::Int32, false),
        Field::new("key", DataType::Binary, true),
        Field::new("value", DataType::Binary, true),
        Field::new("headers", DataType::List(header_item()), false),
        Field::new("leader_epoch", DataType::Int32, false),
        Field::new("producer_id", DataType::Int64, false),
        Field::new("producer_epoch", DataType::Int32, false),
        Field::new("is_transactional", DataType::Boolean, false),
    ]))
}

/// The timestamp Kafka reports for a record of batch `h`, in ms: the
/// batch's max timestamp for log-append time, else the record's own.
pub fn record_timestamp(h: &BatchHeader, r: &Record) -> i64 {
    match h.timestamp_type() {
        TimestampType::LogAppendTime => h.max_timestamp,
        TimestampType::CreateTime => r.timestamp(h).unwrap_or(h.base_timestamp),
    }
}

/// Rows of one partition being collected into a record batch.
pub struct RowsBuilder {
    topic: String,
    partition: i32,
    topics: StringBuilder,
    partitions: Int32Builder,
    offsets: Int64Builder,
    timestamps: TimestampMicrosecondBuilder,
    timestamp_types: Int32Builder,
    keys: BinaryBuilder,
    values: BinaryBuilder,
    header_offsets: Vec<i32>,
    header_keys: StringBuilder,
    header_values: BinaryBuilder,
    leader_epochs: Int32Builder,
    producer_ids: Int64Builder,
    producer_epochs: Int32Builder,
    transactional: BooleanBuilder,
    rows: usize,
    bytes: usize,
}

impl RowsBuilder {
    /// An empty builder for partition `partition` of `topic`.
    pub fn new(topic: &str, partition: i32) -> RowsBuilder {
        RowsBuilder {
            topic: topic.to_string(),
            partition,
            topics: StringBuilder::new(),
            partitions: Int32Builder::new(),
            offsets: Int64Builder::new(),
            timestamps: TimestampMicrosecondBuilder::new().with_timezone("UTC"),
            timestamp_types: Int32Builder::new(),
            keys: BinaryBuilder::new(),
            values: BinaryBuilder::new(),
            header_offsets: vec![0],
            header_keys: StringBuilder::new(),
            header_values: BinaryBuilder::new(),
            leader_epochs: Int32Builder::new(),
            producer_ids: Int64Builder::new(),
            producer_epochs: Int32Builder::new(),
            transactional: BooleanBuilder::new(),
            rows: 0,
            bytes: 0,
        }
    }

    /// Rows collected since the last [`RowsBuilder::finish`].
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Approximate bytes of key, value and header data collected.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Adds record `r` of batch `h` at `offset` with `timestamp_ms`.
    /// Returns `false`, adding nothing, when the rows collected would then
    /// hold more bytes in one column than Arrow's 32-bit offsets index
    /// (2 GiB; [`RowsBuilder::finish`] first, then push again), or more
    /// headers than a list holds.
    pub fn push(&mut self, h: &BatchHeader, r: &Record, offset: i64, timestamp_ms: i64) -> bool {
        let Some(&last) = self.header_offsets.last() else {
            return false;
        };
        let Some(next) = i32::try_from(r.headers.len())
            .ok()
            .and_then(|n| last.checked_add(n))
        else {
            return false;
        };
        let len = |v: &Option<Vec<u8>>| v.as_ref().map_or(0, Vec::len);
        let fits = |used: usize, more: usize| {
            used.checked_add(more)
                .is_some_and(|total| total <= i32::MAX as usize)
        };
        let header_keys: usize = r.headers.iter().map(|x| x.key.len()).sum();
        let header_values: usize = r.headers.iter().map(|x| len(&x.value)).sum();
        let topic_bytes = self.topic.len() * (self.rows + 1);
        if !(fits(self.keys.values_slice().len(), len(&r.key))
            && fits(self.values.values_slice().len(), len(&r.value))
            && fits(self.header_keys.values_slice().len(), header_keys)
            && fits(self.header_values.values_slice().len(), header_values)
            && fits(topic_bytes, 0))
        {
            return false;
        }
        self.topics.append_value(&self.topic);
        self.partitions.append_value(self.partition);
        self.offsets.append_value(offset);
        self.timestamps
            .append_value(timestamp_ms.saturating_mul(1000));
        self.timestamp_types.append_value(match h.timestamp_type() {
            TimestampType::CreateTime => 0,
            TimestampType::LogAppendTime => 1,
        });
        self.keys.append_option(r.key.as_deref());
        self.values.append_option(r.value.as_deref());
        for header in &r.headers {
            self.header_keys.append_value(&header.key);
            self.header_values.append_option(header.value.as_deref());
            self.bytes += header.key.len() + header.value.as_ref().map_or(0, Vec::len);
        }
        self.header_offsets.push(next);
        self.leader_epochs.append_value(h.partition_leader_epoch);
        self.producer_ids.append_value(h.producer_id);
        self.producer_epochs
            .append_value(i32::from(h.producer_epoch));
        self.transactional.append_value(h.is_transactional());
        self.rows += 1;
        self.bytes +=
            40 + r.key.as_ref().map_or(0, Vec::len) + r.value.as_ref().map_or(0, Vec::len);
        true
    }

    /// The rows collected as one record batch; the builder is then empty.
    pub fn finish(&mut self) -> Result<RecordBatch, ArrowError> {
        let offsets = std::mem::replace(&mut self.header_offsets, vec![0]);
        let headers = StructArray::try_new(
            header_fields(),
            vec![
                Arc::new(self.header_keys.finish()) as ArrayRef,
                Arc::new(self.header_values.finish()),
            ],
            None,
        )?;
        let headers = ListArray::try_new(
            header_item(),
            OffsetBuffer::new(offsets.into()),
            Arc::new(headers),
            None,
        )?;
        self.rows = 0;
        self.bytes = 0;
        RecordBatch::try_new(
            schema(),
            vec![
                Arc::new(self.topics.finish()),
                Arc::new(self.partitions.finish()),
                Arc::new(self.offsets.finish()),
                Arc::new(self.timestamps.finish()),
                Arc::new(self.timestamp_types.finish()),
                Arc::new(self.keys.finish()),
                Arc::new(self.values.finish()),
                Arc::new(headers),
                Arc::new(self.leader_epochs.finish()),
                Arc::new(self.producer_ids.finish()),
                Arc::new(self.producer_epochs.finish()),
                Arc::new(self.transactional.finish()),
            ],
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::Array;
    use arrow_array::cast::AsArray;
    use arrow_array::types::{Int64Type, TimestampMicrosecondType};
    use kafkalog::builder::{BatchSpec, RecordInput, build_batch};
    use kafkalog::records::{Header, decode_records};

    #[test]
    fn records_become_rows_with_null_tombstones_and_ordered_headers() {
        let recs = vec![
            RecordInput {
                timestamp: 1_700_000_000_123,
                key: Some(b"k0".to_vec()),
                value: Some(b"v0".to_vec()),
                headers: vec![
                    Header {
                        key: "h".into(),
                        value: Some(b"1".to_vec()),
                    },
                    Header {
                        key: "h".into(),
                        value: None,
                    },
                ],
            },
            RecordInput {
                timestamp: 1_700_000_000_124,
                key: Some(b"k0".to_vec()),
                value: None,
                headers: vec![],
            },
        ];
        let bytes = build_batch(&BatchSpec::new(40, 3), &recs).expect("batch");
        let h = kafkalog::batch::parse_batch(&bytes, 0).expect("header");
        let mut b = RowsBuilder::new("orders", 2);
        for r in decode_records(&h, &bytes).expect("records") {
            let offset = r.offset(&h).expect("offset");
            assert!(b.push(&h, &r, offset, record_timestamp(&h, &r)));
        }
        assert_eq!(b.rows(), 2);
        let batch = b.finish().expect("record batch");
        assert_eq!(b.rows(), 0);
        assert_eq!(batch.schema(), schema());
        assert_eq!(batch.num_rows(), 2);
        let offsets = batch.column(OFFSET_COLUMN).as_primitive::<Int64Type>();
        assert_eq!(offsets.values().to_vec(), vec![40, 41]);
        let ts = batch.column(3).as_primitive::<TimestampMicrosecondType>();
        assert_eq!(ts.value(0), 1_700_000_000_123_000);
        let values = batch.column(6).as_binary::<i32>();
        assert_eq!(values.value(0), b"v0");
        assert!(values.is_null(1), "a tombstone is NULL");
        let headers = batch.column(7).as_list::<i32>();
        assert_eq!(headers.value_length(0), 2);
        assert_eq!(headers.value_length(1), 0);
        let first = headers.value(0);
        let first = first.as_struct();
        assert_eq!(first.column(0).as_string::<i32>().value(1), "h");
        assert!(first.column(1).is_null(1));
        // A second batch from the same builder starts empty.
        assert_eq!(b.finish().expect("empty").num_rows(), 0);
    }
}
