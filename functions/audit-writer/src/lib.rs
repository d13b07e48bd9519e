//! The audit writer: consumes the transactions table's stream (`NEW_AND_OLD_IMAGES`) and
//! writes one audit entry per transition (`aws::audit`), grouped one item per handler
//! run: `AuditWriter::apply_batch` writes each group with one `UpdateItem`, so a retry
//! cycle costs two writes instead of four. Records are audited in stream order up to
//! the first that does not decode; a failed group or record reports the smallest
//! failed `SequenceNumber` as the batch item failure, and Lambda retries from there
//! (rewriting the same values), then sends the record's metadata to the audit DLQ.
//!
//! Only FAILED by CANCELLED exhaustion is counted here (`TransactionsExhausted`, WARN
//! with the id, [`count_transition`]); `UNANSWERED` and `TECHNICAL_EXHAUSTED` have their
//! own handlers' alarms: one failure, one page. Every transition counts
//! `Entered<Status>`. See `docs/functions.md#audit-writer`.

use aws::audit::{AuditWriter, Audited};
use aws::item::{flat_from_json, FlatItem};
use aws_lambda_events::dynamodb::{Event, EventRecord};
use aws_lambda_events::streams::{DynamoDbBatchItemFailure, DynamoDbEventResponse};
use domain::audit::AuditEntry;
use domain::machine::Actor;
use domain::Outcome;
use runtime::metric::invocation;
use runtime::metrics::Metrics;
use thiserror::Error;

/// The function's name (EMF dimension `Function`).
pub const FUNCTION: &str = "audit-writer";
/// Business alert: a transaction ended FAILED with its attempts spent, every one
/// answered CANCELLED (not UNANSWERED, not TECHNICAL_EXHAUSTED).
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

/// Whether `entry` is a transaction ending FAILED because its last attempt was
/// answered CANCELLED with the budget spent (the response handler's write, outcome
/// CANCELLED, no mark of another cause) — not a request left unanswered (the
/// reconciler's write), a technical failure past its re-sends (outcome ERROR) nor a
/// CANCELLED that found the deadline passed (mark `EXPIRED`).
pub fn ended_by_cancellations(entry: &AuditEntry) -> bool {
    entry.is_exhaustion()
        && entry.actor == Actor::ResponseHandler
        && entry.outcome == Some(Outcome::Cancelled)
        && entry.noted_mark().is_none()
}

/// Counts one audited transition into `metrics`: `Entered<Status>`, and
/// `TransactionsExhausted` (logged at WARN) when it ends the transaction by
/// cancellations ([`ended_by_cancellations`]).
pub fn count_transition(entry: &AuditEntry, metrics: &Metrics) {
    metrics.incr(&entered(entry.to));
    if ended_by_cancellations(entry) {
        metrics.incr(TRANSACTIONS_EXHAUSTED);
        tracing::warn!(
            transaction_id = %entry.transaction_id,
            attempts = entry.current_attempt.get(),
            reason = entry.reason.as_deref().unwrap_or(""),
            "transaction exhausted its attempts"
        );
    } else if entry.is_exhaustion() {
        tracing::info!(
            transaction_id = %entry.transaction_id,
            attempts = entry.current_attempt.get(),
            reason = entry.reason.as_deref().unwrap_or(""),
            "transaction ended FAILED (alerted by its handler)"
        );
    }
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
            Ok(Audited::Written { entry, .. }) => {
                metrics.incr(AUDIT_ROWS_WRITTEN);
                count_transition(&entry, metrics);
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

/// The audit writer with its tables, built once per process.
pub struct AuditFunction {
    pub writer: AuditWriter,
    /// METRICS_NAMESPACE.
    pub namespace: String,
}

impl AuditFunction {
    /// One invocation: the batch, then the metrics line on stdout.
    pub async fn invoke(&self, event: Event) -> Result<DynamoDbEventResponse, BatchError> {
        invocation(&self.namespace, FUNCTION, async |m| {
            handle(&self.writer, &event, m).await
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use domain::{Attempt, MaxAttempts, Status, Timestamp, TransactionId, TransactionRecord};

    /// IN_PROGRESS(2) of 2 → FAILED, written by `actor` with `outcome` and `reason`.
    fn failed(actor: Actor, outcome: Option<Outcome>, reason: &str) -> AuditEntry {
        let mut old = TransactionRecord::started(
            TransactionId::parse("TX-1").unwrap(),
            MaxAttempts::new(2).unwrap(),
            Timestamp::from_millis(0),
        );
        old.current_attempt = Attempt::new(2).unwrap();
        let mut new = old.clone();
        new.status = Status::Failed;
        new.last_actor = actor;
        new.last_outcome = outcome;
        new.last_reason = Some(reason.to_owned());
        new.updated_at = Timestamp::from_millis(1_000);
        AuditEntry::from_change(Some(&old), &new).unwrap()
    }

    #[test]
    fn only_an_ending_by_cancellations_counts_transactions_exhausted() {
        let cases = [
            (
                failed(
                    Actor::ResponseHandler,
                    Some(Outcome::Cancelled),
                    "NOT_AVAILABLE",
                ),
                1,
            ),
            // UNANSWERED after an earlier attempt was answered CANCELLED: the
            // reconciler's write keeps the last outcome.
            (
                failed(Actor::Reconciler, Some(Outcome::Cancelled), "UNANSWERED"),
                0,
            ),
            (failed(Actor::Reconciler, None, "UNANSWERED"), 0),
            (
                failed(
                    Actor::ResponseHandler,
                    Some(Outcome::Error),
                    "TECHNICAL_EXHAUSTED",
                ),
                0,
            ),
            // A CANCELLED with attempts left that found the deadline passed.
            (
                AuditEntry {
                    mark: Some(domain::machine::Mark::Expired),
                    ..failed(Actor::ResponseHandler, Some(Outcome::Cancelled), "EXPIRED")
                },
                0,
            ),
        ];
        for (entry, want) in cases {
            let m = metrics("NS");
            count_transition(&entry, &m);
            assert_eq!(m.count(TRANSACTIONS_EXHAUSTED), want, "{entry:?}");
            assert_eq!(m.count("EnteredFailed"), 1, "{entry:?}");
        }
    }
}
