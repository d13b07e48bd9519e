//! The audit writer: consumes the transactions table's stream (`NEW_AND_OLD_IMAGES`)
//! and writes one audit row per transition (`aws::audit`).
//!
//! Records are processed in stream order. The first record that fails is reported as
//! the batch item failure (its `SequenceNumber`), and processing stops there: Lambda
//! retries from that record (`FunctionResponseTypes: [ReportBatchItemFailures]`), and
//! after the event source mapping's retries the record's metadata goes to the audit
//! DLQ. Rows have deterministic keys, so the retried records rewrite the same rows.
//!
//! An exhausted transaction (IN_PROGRESS → FAILED) is counted as the EMF metric
//! `TransactionsExhausted` and logged at WARN with its id.

use aws::audit::{AuditWriter, Audited};
use aws::item::{flat_from_json, FlatItem};
use aws_lambda_events::dynamodb::{Event, EventRecord};
use aws_lambda_events::streams::{DynamoDbBatchItemFailure, DynamoDbEventResponse};
use runtime::metrics::Metrics;
use thiserror::Error;

/// The function's name (EMF dimension `Function`).
pub const FUNCTION: &str = "audit-writer";
/// Business alert: a transaction ended FAILED with its attempts spent.
pub const TRANSACTIONS_EXHAUSTED: &str = "TransactionsExhausted";
/// Audit rows written (a redelivered change counts again).
pub const AUDIT_ROWS_WRITTEN: &str = "AuditRowsWritten";
/// Stream records reported as failed.
pub const AUDIT_FAILURES: &str = "AuditFailures";

/// A batch that cannot even be reported record by record.
#[derive(Debug, Error)]
pub enum BatchError {
    #[error("stream record {event_id} failed and has no SequenceNumber to report: {cause}")]
    NoSequenceNumber { event_id: String, cause: String },
}

/// A stream image (DynamoDB JSON) flattened; an empty image is `None`.
pub fn image(item: &impl serde::Serialize) -> Result<Option<FlatItem>, aws::item::CodecError> {
    let value = serde_json::to_value(item).map_err(|e| aws::item::CodecError {
        attribute: "(image)",
        value: None,
        problem: e.to_string(),
    })?;
    let flat = flat_from_json(&value)?;
    Ok((!flat.is_empty()).then_some(flat))
}

async fn process(writer: &AuditWriter, record: &EventRecord) -> Result<Audited, String> {
    let old = image(&record.change.old_image).map_err(|e| e.to_string())?;
    let new = image(&record.change.new_image).map_err(|e| e.to_string())?;
    writer
        .apply(old.as_ref(), new.as_ref())
        .await
        .map_err(|e| e.to_string())
}

/// Handles one batch; counts into `metrics` (the caller emits them).
pub async fn handle(
    writer: &AuditWriter,
    event: &Event,
    metrics: &Metrics,
) -> Result<DynamoDbEventResponse, BatchError> {
    let mut response = DynamoDbEventResponse::default();
    for record in &event.records {
        let seq = record.change.sequence_number.clone();
        let span = tracing::info_span!("stream_record", event_id = %record.event_id, sequence_number = seq.as_deref().unwrap_or(""));
        let _enter = span.enter();
        match process(writer, record).await {
            Ok(Audited::Written { entry, exhausted }) => {
                metrics.incr(AUDIT_ROWS_WRITTEN);
                if exhausted {
                    metrics.incr(TRANSACTIONS_EXHAUSTED);
                    tracing::warn!(
                        transaction_id = %entry.transaction_id,
                        attempts = entry.current_attempt.get(),
                        reason = entry.reason.as_deref().unwrap_or(""),
                        "transaction exhausted its attempts"
                    );
                }
            }
            Ok(Audited::Skipped) => {}
            Err(cause) => {
                metrics.incr(AUDIT_FAILURES);
                tracing::error!(error = %cause, "audit failed; Lambda retries from this record");
                let Some(seq) = seq else {
                    return Err(BatchError::NoSequenceNumber {
                        event_id: record.event_id.clone(),
                        cause,
                    });
                };
                let mut failure = DynamoDbBatchItemFailure::default();
                failure.item_identifier = Some(seq);
                response.batch_item_failures.push(failure);
                break;
            }
        }
    }
    Ok(response)
}

/// Builds the metrics of one invocation.
pub fn metrics(namespace: &str) -> Metrics {
    Metrics::new(namespace, FUNCTION)
}
