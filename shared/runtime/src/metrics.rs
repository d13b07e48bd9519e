//! Metrics in CloudWatch Embedded Metric Format (EMF).
//!
//! Each invocation counts into one [`Metrics`] and writes it as **one JSON line** on
//! stdout at the end ([`Metrics::emit`]). CloudWatch Logs extracts the metrics from that
//! line: no `PutMetricData` call, no extra latency, no IAM action. Every metric is a
//! `Count` with one dimension, `Function`. Names are listed in [`names`] and in
//! `docs/functions.md#metrics`; why the lines carry no `level`:
//! `docs/deploy.md#parameters` (`ApplicationLogLevel`).

use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::io::Write;
use std::sync::Mutex;

/// CloudWatch accepts at most 100 metrics per EMF directive.
const MAX_METRICS_PER_DIRECTIVE: usize = 100;

/// The dimension every metric carries.
pub const DIMENSION: &str = "Function";

/// Metric names (all `Count`).
pub mod names {
    /// Records received in SQS batches.
    pub const RECORDS: &str = "Records";
    /// Responses received, by outcome.
    pub const RESPONSE_SUCCESS: &str = "ResponseSuccess";
    pub const RESPONSE_CANCELLED: &str = "ResponseCancelled";
    /// Responses ERROR (a technical failure: the attempt is sent again, not consumed).
    pub const TECHNICAL_FAILURES: &str = "TechnicalFailures";
    /// Responses REJECTED (the service refuses the request for good).
    pub const RESPONSE_REJECTED: &str = "ResponseRejected";
    /// One-time schedules created, and "already exists" answers (a redelivery's).
    pub const SCHEDULES_CREATED: &str = "SchedulesCreated";
    pub const SCHEDULE_CONFLICTS: &str = "ScheduleConflicts";
    pub const SCHEDULES_DELETED: &str = "SchedulesDeleted";
    /// Business alert: a transaction ended FAILED, attempts exhausted.
    pub const ATTEMPTS_EXHAUSTED: &str = "AttemptsExhausted";
    /// Requests published to the external service (any attempt).
    pub const REQUESTS_PUBLISHED: &str = "RequestsPublished";
    /// Requests for a retry (attempt >= 2) published.
    pub const RETRIES_PUBLISHED: &str = "RetriesPublished";
    /// Retry events put on the retry queue (reconciler, operator replay).
    pub const RETRY_EVENTS_PUBLISHED: &str = "RetryEventsPublished";
    /// Records that can never succeed as they are (malformed, unknown transaction…).
    pub const PERMANENT_ERRORS: &str = "PermanentErrors";
    /// Records reported as batch item failures for SQS to redeliver.
    pub const RETRYABLE_ERRORS: &str = "RetryableErrors";
    /// Permanent failures sent, unchanged, to the queue's dead-letter queue.
    pub const DEAD_LETTERED: &str = "DeadLettered";
    /// Sending to the dead-letter queue failed (the record is retried instead).
    pub const DEAD_LETTER_FAILURES: &str = "DeadLetterFailures";
    /// A record's processing panicked (caught; the record is retried).
    pub const RECORD_PANICS: &str = "RecordPanics";
    /// Publishes that waited for the outbound rate bound, and the records refused
    /// because the wait would have been too long.
    pub const PACED_PUBLISHES: &str = "PacedPublishes";
    pub const RATE_LIMITED: &str = "RateLimited";
    /// Reconciler: records examined, runs that stopped at the item bound, errors.
    pub const RECONCILE_EXAMINED: &str = "ReconcileExamined";
    /// Records examined in SCHEDULING, SCHEDULED or SENDING: a retry cycle stuck past
    /// the threshold (StuckTransactionsAlarm). A request past its answer deadline
    /// (IN_PROGRESS) is not stuck: RequestsRepublished and TransactionsUnanswered
    /// count it.
    pub const RECONCILE_STUCK: &str = "ReconcileStuck";
    pub const RECONCILE_TRUNCATED: &str = "ReconcileTruncated";
    pub const RECONCILE_ERRORS: &str = "ReconcileErrors";
    pub const RECONCILE_UNDECODABLE: &str = "ReconcileUndecodable";
    /// Records found parked: requeued RECONCILE_REQUEUE_MAX times without progress,
    /// not requeued again (each run that meets one counts it).
    pub const RECONCILE_PARKED: &str = "ReconcileParked";
    /// A SUCCESS for an attempt already answered CANCELLED or resolved: a possible
    /// double execution (business alert).
    pub const CONFLICTING_SUCCESS: &str = "ConflictingSuccess";
    /// A request unanswered past its deadline and every republish: the transaction
    /// ended FAILED/UNANSWERED (business alert).
    pub const TRANSACTIONS_UNANSWERED: &str = "TransactionsUnanswered";
    /// Every technical re-send answered ERROR again: the transaction ended
    /// FAILED/TECHNICAL_EXHAUSTED (business alert).
    pub const TECHNICAL_EXHAUSTED: &str = "TechnicalExhausted";
    /// The transaction's deadline passed before it ended: FAILED/EXPIRED (business
    /// alert; counted by whichever function's decision ended it).
    pub const TRANSACTIONS_EXPIRED: &str = "TransactionsExpired";
    /// The service answered REJECTED (an operator case): FAILED/REJECTED at once,
    /// never retried (business alert).
    pub const TRANSACTIONS_REJECTED: &str = "TransactionsRejected";
    /// Outbox mode: an ERROR that does not say the call did not run: FAILED/AMBIGUOUS,
    /// not sent again (business alert).
    pub const TRANSACTIONS_AMBIGUOUS: &str = "TransactionsAmbiguous";
    /// Outbox mode: a SENDING record claimed longer ago than the resend window, not
    /// published again (a repeat could escape SQS's deduplication): its answer
    /// deadline decides.
    pub const PUBLISHES_UNCONFIRMED: &str = "PublishesUnconfirmed";
    /// An unanswered request published again by the reconciler (same key).
    pub const REQUESTS_REPUBLISHED: &str = "RequestsRepublished";
    /// A scheduler call throttled past the client's own retries (the message is
    /// redelivered).
    pub const SCHEDULER_THROTTLED: &str = "SchedulerThrottled";
    /// A scheduler call refused for a used-up quota (active schedules); redelivered.
    pub const SCHEDULER_QUOTA_EXCEEDED: &str = "SchedulerQuotaExceeded";
    /// The circuit breaker as this invocation last read it: 0 closed, 1 half-open,
    /// 2 open (read its Maximum).
    pub const BREAKER_STATE: &str = "BreakerState";
    /// The circuit breaker opened (from CLOSED, or again after a failed probe round).
    pub const BREAKER_OPENED: &str = "BreakerOpened";
    /// Retry events whose request the breaker held back: the retry cycle opened
    /// again later for the same attempt.
    pub const RETRIES_PAUSED_BY_BREAKER: &str = "RetriesPausedByBreaker";
    /// The breaker's table could not be read or written (requests go out).
    pub const BREAKER_ERRORS: &str = "BreakerErrors";
}

/// `late-response` → `LateResponse`; `SCHEDULING` → `Scheduling`.
pub fn pascal(label: &str) -> String {
    label
        .split(['-', '_', ' '])
        .filter(|w| !w.is_empty())
        .map(|w| {
            let lower = w.to_ascii_lowercase();
            let mut chars = lower.chars();
            match chars.next() {
                Some(c) => c.to_ascii_uppercase().to_string() + chars.as_str(),
                None => String::new(),
            }
        })
        .collect()
}

/// The counters of one invocation.
///
/// A small serializer rather than a crate: the EMF crates for Rust
/// (`metrics_cloudwatch_embedded`) install a process-global recorder and pull in
/// `lambda_http`; the local stack runs several functions in one process and the tests
/// assert per-invocation counts, which a global recorder cannot separate. The format is
/// small and fixed; its exact shape is tested below.
///
/// Lambda's log-level filtering does not decide it either way: that crate can put a
/// `level` key on the line (`set_property("level", …)`, tried with 0.10), and the lines
/// need none, because `template.yaml` allows no `ApplicationLogLevel` above INFO, the
/// level Lambda gives a JSON line without one (`tests/template.rs` checks the line
/// against Lambda's rule at every allowed level).
#[derive(Debug)]
pub struct Metrics {
    namespace: String,
    function: String,
    counts: Mutex<BTreeMap<String, u64>>,
}

impl Metrics {
    pub fn new(namespace: impl Into<String>, function: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            function: function.into(),
            counts: Mutex::new(BTreeMap::new()),
        }
    }

    fn counts(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, u64>> {
        self.counts.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn incr(&self, name: &str) {
        self.add(name, 1);
    }

    pub fn add(&self, name: &str, n: u64) {
        let mut c = self.counts();
        match c.get_mut(name) {
            Some(v) => *v = v.saturating_add(n),
            None => {
                c.insert(name.to_owned(), n);
            }
        }
    }

    /// The count of `name` so far (0 when never counted).
    pub fn count(&self, name: &str) -> u64 {
        self.counts().get(name).copied().unwrap_or(0)
    }

    pub fn snapshot(&self) -> BTreeMap<String, u64> {
        self.counts().clone()
    }

    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    pub fn function(&self) -> &str {
        &self.function
    }

    /// The EMF document for these counts at `timestamp_ms` (Unix epoch milliseconds).
    pub fn to_emf(&self, timestamp_ms: i64) -> Value {
        let counts = self.snapshot();
        let names: Vec<&String> = counts.keys().collect();
        let directives: Vec<Value> = names
            .chunks(MAX_METRICS_PER_DIRECTIVE)
            .map(|chunk| {
                json!({
                    "Namespace": self.namespace,
                    "Dimensions": [[DIMENSION]],
                    "Metrics": chunk
                        .iter()
                        .map(|n| json!({"Name": n, "Unit": "Count"}))
                        .collect::<Vec<_>>(),
                })
            })
            .collect();
        let mut doc = Map::new();
        doc.insert(
            "_aws".into(),
            json!({"Timestamp": timestamp_ms, "CloudWatchMetrics": directives}),
        );
        doc.insert(DIMENSION.into(), Value::String(self.function.clone()));
        for (name, value) in counts {
            doc.insert(name, Value::from(value));
        }
        Value::Object(doc)
    }

    /// Writes the EMF line for this invocation on stdout (nothing when no metric was
    /// counted). One `write` of one line, so concurrent log lines never split it.
    pub fn emit(&self) {
        if self.counts().is_empty() {
            return;
        }
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
            .unwrap_or(0);
        let mut line = self.to_emf(now).to_string();
        line.push('\n');
        let _ = std::io::stdout().lock().write_all(line.as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emf_document_has_the_exact_shape() {
        let m = Metrics::new("DeferredRetry", "response-handler");
        m.incr(names::SCHEDULES_CREATED);
        m.add("DropLateResponse", 2);
        m.incr(names::SCHEDULES_CREATED);
        let doc = m.to_emf(1_700_000_000_000);
        let expected: Value = serde_json::from_str(
            r#"{
              "_aws": {
                "Timestamp": 1700000000000,
                "CloudWatchMetrics": [{
                  "Namespace": "DeferredRetry",
                  "Dimensions": [["Function"]],
                  "Metrics": [
                    {"Name": "DropLateResponse", "Unit": "Count"},
                    {"Name": "SchedulesCreated", "Unit": "Count"}
                  ]
                }]
              },
              "Function": "response-handler",
              "DropLateResponse": 2,
              "SchedulesCreated": 2
            }"#,
        )
        .unwrap();
        assert_eq!(doc, expected);
        // One line, no newline inside.
        assert!(!doc.to_string().contains('\n'));
    }

    #[test]
    fn more_than_a_hundred_metrics_split_into_directives() {
        let m = Metrics::new("NS", "f");
        for i in 0..150 {
            m.incr(&format!("M{i:03}"));
        }
        let doc = m.to_emf(0);
        let directives = doc["_aws"]["CloudWatchMetrics"].as_array().unwrap();
        assert_eq!(directives.len(), 2);
        assert_eq!(directives[0]["Metrics"].as_array().unwrap().len(), 100);
        assert_eq!(directives[1]["Metrics"].as_array().unwrap().len(), 50);
        assert_eq!(doc["M149"], 1);
    }

    #[test]
    fn pascal_case_of_labels() {
        assert_eq!(pascal("late-response"), "LateResponse");
        assert_eq!(pascal("SCHEDULING"), "Scheduling");
        assert_eq!(pascal("IN_PROGRESS"), "InProgress");
        assert_eq!(pascal("already-handled"), "AlreadyHandled");
    }
}
