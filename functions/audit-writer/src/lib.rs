//! The audit writer: consumes the transactions table's stream (`NEW_AND_OLD_IMAGES`)
//! and writes one audit entry per transition (`aws::audit`), grouped one item per
//! handler run: the whole batch goes through `AuditWriter::apply_batch`, which writes
//! each group (transaction, `AuditEntry::group_key`) with one `UpdateItem`. A run's
//! two transitions normally arrive in one batch, so a retry cycle (two runs, four
//! transitions) costs two writes instead of four.
//!
//! Records are audited in stream order up to the first one that does not decode
//! (processing stops there). When a group's write fails, or a record does not
//! decode, the smallest `SequenceNumber` among the failed records is reported as the
//! batch item failure: Lambda retries from that record
//! (`FunctionResponseTypes: [ReportBatchItemFailures]`), and after the event source
//! mapping's retries the record's metadata goes to the audit DLQ. Every record before
//! it was written; groups written after it are written again by the retry, which sets
//! the same attributes to the same values.
//!
//! An exhausted transaction (IN_PROGRESS → FAILED) is counted as the EMF metric
//! `TransactionsExhausted` and logged at WARN with its id; every transition counts
//! `Entered<Status>` (the operations dashboard's flow between states).

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
/// Audit entries written, one per transition (a redelivered change counts again).
pub const AUDIT_ROWS_WRITTEN: &str = "AuditRowsWritten";
/// Audit items written: `UpdateItem` calls, one per group of entries (a handler run).
pub const AUDIT_ITEMS_WRITTEN: &str = "AuditItemsWritten";
/// Batches that reported a failed record (the batch item failure).
pub const AUDIT_FAILURES: &str = "AuditFailures";

/// The metric counting transitions into `status`: `Entered<Status>` (`EnteredScheduling`,
/// …). Side by side they are the flow between states: SCHEDULING entered more often
/// than SCHEDULED, minute after minute, says schedules are not being created.
pub fn entered(status: domain::Status) -> String {
    format!("Entered{}", runtime::metrics::pascal(status.as_str()))
}

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

/// Orders stream sequence numbers (decimal strings of up to 40 digits) as numbers.
fn sequence_order(a: &str, b: &str) -> std::cmp::Ordering {
    a.len().cmp(&b.len()).then_with(|| a.cmp(b))
}

/// Handles one batch; counts into `metrics` (the caller emits them).
pub async fn handle(
    writer: &AuditWriter,
    event: &Event,
    metrics: &Metrics,
) -> Result<DynamoDbEventResponse, BatchError> {
    // Flatten the images up to the first record that does not flatten: the batch
    // stops there (Lambda retries from it).
    let mut images = Vec::with_capacity(event.records.len());
    let mut unflattened = None;
    for record in &event.records {
        match image(&record.change.old_image)
            .and_then(|old| image(&record.change.new_image).map(|new| (old, new)))
        {
            Ok(pair) => images.push(pair),
            Err(e) => {
                unflattened = Some(e.to_string());
                break;
            }
        }
    }
    let batch = writer
        .apply_batch(images.iter().map(|(old, new)| (old.as_ref(), new.as_ref())))
        .await;
    metrics.add(AUDIT_ITEMS_WRITTEN, batch.items_written as u64);

    // Every failed record: its audit failed, or its images did not flatten.
    let mut failed: Vec<(&EventRecord, String)> = Vec::new();
    for (record, result) in event.records.iter().zip(batch.results) {
        match result {
            Ok(Audited::Written { entry, exhausted }) => {
                metrics.incr(AUDIT_ROWS_WRITTEN);
                metrics.incr(&entered(entry.to));
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
            Err(e) => failed.push((record, e.to_string())),
        }
    }
    if let (Some(cause), Some(record)) = (unflattened, event.records.get(images.len())) {
        failed.push((record, cause));
    }

    let mut response = DynamoDbEventResponse::default();
    let mut first: Option<&str> = None;
    for (record, cause) in &failed {
        let seq = record.change.sequence_number.as_deref();
        tracing::error!(
            event_id = %record.event_id,
            sequence_number = seq.unwrap_or(""),
            error = %cause,
            "audit failed"
        );
        let Some(seq) = seq else {
            return Err(BatchError::NoSequenceNumber {
                event_id: record.event_id.clone(),
                cause: cause.clone(),
            });
        };
        if first.is_none_or(|f| sequence_order(seq, f).is_lt()) {
            first = Some(seq);
        }
    }
    if let Some(seq) = first {
        metrics.incr(AUDIT_FAILURES);
        tracing::error!(
            sequence_number = seq,
            failed_records = failed.len(),
            "Lambda retries the batch from this record"
        );
        let mut failure = DynamoDbBatchItemFailure::default();
        failure.item_identifier = Some(seq.to_owned());
        response.batch_item_failures.push(failure);
    }
    Ok(response)
}

/// Builds the metrics of one invocation.
pub fn metrics(namespace: &str) -> Metrics {
    Metrics::new(namespace, FUNCTION)
}
