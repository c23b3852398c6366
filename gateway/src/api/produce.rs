//! Produce: refused on mirror partitions until `applier stop`, appended by
//! the log dir's single writer otherwise.
//!
//! The refusal is POLICY_VIOLATION (44) with an error message naming the
//! partition, its state and the command that makes it writable: every
//! client treats 44 as permanent (no retry loop) and shows it; Kafka 4.1
//! defines no READ_ONLY_TOPIC code yet (KIP-1279's proposal), and a code
//! clients do not know reads as "unknown error" (`docs/kafka-gateway.md`).
//! A STOPPED mirror partition whose record holds the source's configs
//! refuses a batch larger than the topic's `max.message.bytes` with
//! MESSAGE_TOO_LARGE (10), as Kafka does, and writes nothing.
//!
//! With acks=0 there is no response to carry an error, so a refused
//! request closes the connection, as Kafka does.

use kafka_protocol::ResponseError;
use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use kafka_protocol::messages::{ProduceRequest, ProduceResponse};
use kafka_protocol::protocol::StrBytes;
use tokio::sync::oneshot;

use super::{topic_partition, view_error_code};
use crate::context::Shared;
use crate::reply::{Reply, encode};
use crate::writer::{AppendError, AppendRequest, refusal};

pub(super) async fn handle(shared: &Shared, request: ProduceRequest, version: i16) -> Reply {
    let acks = request.acks;
    if !matches!(acks, -1..=1) {
        return refuse_all(
            &request,
            ResponseError::InvalidRequiredAcks.code(),
            None,
            version,
        );
    }
    if request.transactional_id.is_some() {
        return refuse_all(
            &request,
            ResponseError::TransactionalIdAuthorizationFailed.code(),
            Some(AppendError::Transactional.to_string()),
            version,
        );
    }
    let mut refused_any = false;
    let mut topics = Vec::new();
    for topic in request.topic_data {
        let mut partitions = Vec::new();
        for data in topic.partition_data {
            let row = PartitionProduceResponse::default()
                .with_index(data.index)
                .with_base_offset(-1)
                .with_log_append_time_ms(-1)
                .with_log_start_offset(-1);
            let outcome = append(shared, &topic.name.0, data.index, data.records).await;
            partitions.push(match outcome {
                Ok(appended) => row
                    .with_base_offset(appended.base_offset)
                    .with_log_start_offset(appended.log_start_offset),
                Err((code, message)) => {
                    refused_any = true;
                    tracing::info!(topic = %topic.name.0, partition = data.index, code, message = message.as_deref().unwrap_or(""), "produce refused");
                    row.with_error_code(code)
                        .with_error_message(message.map(StrBytes::from_string))
                }
            });
        }
        topics.push(
            TopicProduceResponse::default()
                .with_name(topic.name)
                .with_partition_responses(partitions),
        );
    }
    if acks == 0 {
        return if refused_any {
            Reply::Close("an acks=0 produce was refused".into())
        } else {
            Reply::Nothing
        };
    }
    encode(&ProduceResponse::default().with_responses(topics), version)
}

/// One partition's append: its base offset, or the error code and message.
async fn append(
    shared: &Shared,
    topic: &StrBytes,
    partition: i32,
    records: Option<bytes::Bytes>,
) -> Result<crate::writer::Appended, (i16, Option<String>)> {
    let tp = topic_partition(topic, partition).map_err(|code| (code, None))?;
    let info = shared
        .view
        .info(&tp)
        .map_err(|e| (view_error_code(&e), Some(e.to_string())))?;
    if let Some(refused) = refusal(&tp, info.mirror_state) {
        return Err(code_of(&refused));
    }
    let Some(writer) = &shared.writer else {
        let e = AppendError::NoWriter(shared.view.root().display().to_string());
        return Err(code_of(&e));
    };
    let batches = records.map(|b| b.to_vec()).unwrap_or_default();
    if batches.is_empty() {
        return Err((
            ResponseError::CorruptMessage.code(),
            Some("no records".into()),
        ));
    }
    // A STOPPED mirror enforces its source's max.message.bytes (the
    // configs its record holds; only STOPPED mirrors get this far).
    match crate::produced::check_max_message_bytes(&batches, info.topic_configs.as_ref()) {
        Ok(Ok(())) => {}
        Ok(Err(too_large)) => {
            let message = format!("{tp}: {too_large}");
            return Err((ResponseError::MessageTooLarge.code(), Some(message)));
        }
        Err(e) => {
            let message = format!("{tp}: {e}");
            return Err((ResponseError::InvalidConfig.code(), Some(message)));
        }
    }
    let (reply, answer) = oneshot::channel();
    let request = AppendRequest {
        tp: tp.clone(),
        batches,
        reply,
        create: false,
    };
    if writer.send(request).await.is_err() {
        let e = AppendError::Storage("the log dir's writer has stopped".into());
        return Err(code_of(&e));
    }
    match answer.await {
        Ok(Ok(appended)) => Ok(appended),
        Ok(Err(e)) => Err(code_of(&e)),
        Err(_) => Err(code_of(&AppendError::Storage(
            "the log dir's writer has stopped".into(),
        ))),
    }
}

/// The Kafka error code and message for an append error.
fn code_of(e: &AppendError) -> (i16, Option<String>) {
    let code = match e {
        AppendError::ReadOnly { .. } | AppendError::NoWriter(_) => {
            ResponseError::PolicyViolation.code()
        }
        AppendError::UnknownPartition(_) => ResponseError::UnknownTopicOrPartition.code(),
        AppendError::Corrupt(_) => ResponseError::CorruptMessage.code(),
        AppendError::Transactional => ResponseError::TransactionalIdAuthorizationFailed.code(),
        AppendError::Storage(_) => ResponseError::KafkaStorageError.code(),
        AppendError::OutOfOrderSequence(_) => ResponseError::OutOfOrderSequenceNumber.code(),
        AppendError::InvalidProducerEpoch(_) => ResponseError::InvalidProducerEpoch.code(),
    };
    (code, Some(e.to_string()))
}

/// Every partition of `request` answered with `code`.
fn refuse_all(request: &ProduceRequest, code: i16, message: Option<String>, version: i16) -> Reply {
    if request.acks == 0 {
        return Reply::Close(format!("an acks=0 produce was refused with error {code}"));
    }
    let topics = request
        .topic_data
        .iter()
        .map(|t| {
            TopicProduceResponse::default()
                .with_name(t.name.clone())
                .with_partition_responses(
                    t.partition_data
                        .iter()
                        .map(|p| {
                            PartitionProduceResponse::default()
                                .with_index(p.index)
                                .with_error_code(code)
                                .with_base_offset(-1)
                                .with_error_message(message.clone().map(StrBytes::from_string))
                        })
                        .collect(),
                )
        })
        .collect();
    encode(&ProduceResponse::default().with_responses(topics), version)
}

/// InitProducerId v0-4: an id for an idempotent producer. Transactional
/// producers are refused (TRANSACTIONAL_ID_AUTHORIZATION_FAILED) until the
/// gateway supports transactions.
pub(super) fn init_producer_id(
    shared: &Shared,
    request: kafka_protocol::messages::InitProducerIdRequest,
    version: i16,
) -> Reply {
    use kafka_protocol::messages::{InitProducerIdResponse, ProducerId};
    let response = if request.transactional_id.is_some() {
        InitProducerIdResponse::default()
            .with_error_code(ResponseError::TransactionalIdAuthorizationFailed.code())
            .with_producer_id(ProducerId(-1))
            .with_producer_epoch(-1)
    } else if request.producer_id.0 >= 0 {
        // KIP-360: an existing producer bumps its epoch.
        let epoch = request.producer_epoch.saturating_add(1).max(0);
        InitProducerIdResponse::default()
            .with_producer_id(request.producer_id)
            .with_producer_epoch(epoch)
    } else {
        match shared.producer_ids.next() {
            Ok(id) => InitProducerIdResponse::default()
                .with_producer_id(ProducerId(id))
                .with_producer_epoch(0),
            Err(e) => {
                tracing::warn!(error = %e, "allocating a producer id");
                InitProducerIdResponse::default()
                    .with_error_code(ResponseError::CoordinatorNotAvailable.code())
                    .with_producer_id(ProducerId(-1))
                    .with_producer_epoch(-1)
            }
        }
    };
    encode(&response, version)
}
