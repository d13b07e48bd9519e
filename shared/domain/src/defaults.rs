//! Every default of a deployment, once, with the names it goes by.
//!
//! The functions' configuration (`aws::config`), the handlers' settings
//! (`runtime::settings`), `retryctl`'s flags, the local stack's provisioning and the
//! verification fixture read their defaults here; `tests/tests/template.rs` checks
//! that `template.yaml`'s parameter defaults are these ([`TEMPLATE_PARAMETERS`]).
//!
//! Each constant names the environment variable a function reads it from and the
//! template parameter that sets that variable.

use std::time::Duration;

/// Backoff: wait after the first failed attempt, before jitter
/// (`BACKOFF_BASE_SECONDS`, `BackoffBaseSeconds`).
pub const BACKOFF_BASE: Duration = Duration::from_secs(2 * 3600);
/// Backoff: growth per failed attempt (`BACKOFF_FACTOR`, `BackoffFactor`).
pub const BACKOFF_FACTOR: f64 = 2.0;
/// Backoff: cap of the nominal wait (`BACKOFF_CAP_SECONDS`, `BackoffCapSeconds`).
pub const BACKOFF_CAP: Duration = Duration::from_secs(24 * 3600);
/// Backoff: relative jitter, `u ∈ [−jitter, +jitter]` (`BACKOFF_JITTER`,
/// `BackoffJitter`).
pub const BACKOFF_JITTER: f64 = 0.1;
/// Backoff: clamp to the cap again after jitter (`BACKOFF_STRICT_CAP`,
/// `BackoffStrictCap`).
pub const BACKOFF_STRICT_CAP: bool = false;

/// Write shards of the reconciler index (`RECONCILE_SHARDS`, `ReconcileShards`).
pub const RECONCILE_SHARDS: u16 = 8;
/// How long an intermediate state may last before the reconciler acts
/// (`RECONCILE_THRESHOLD_SECONDS`, `ReconcileThresholdSeconds`).
pub const RECONCILE_THRESHOLD: Duration = Duration::from_secs(900);
/// Records one reconciler run examines at most (`RECONCILE_MAX_ITEMS`,
/// `ReconcileMaxItems`).
pub const RECONCILE_MAX_ITEMS: u32 = 500;
/// Requeues of one retry cycle by the reconciler without progress before the record is
/// parked: not requeued again, reported (`RECONCILE_REQUEUE_MAX`,
/// `ReconcileRequeueMax`).
pub const RECONCILE_REQUEUE_MAX: u32 = 5;

/// How long a request may go unanswered before the reconciler publishes it again
/// with the same idempotency key (`ANSWER_TIMEOUT_SECONDS`, `AnswerTimeoutSeconds`).
/// Six hours: far above any answer a healthy service gives, well below the stream's
/// and the queues' retention.
pub const ANSWER_TIMEOUT: Duration = Duration::from_secs(6 * 3600);
/// Republishes of one unanswered request before the transaction ends FAILED with the
/// reason `UNANSWERED` (`ANSWER_REPUBLISH_MAX`, `AnswerRepublishMax`).
pub const ANSWER_REPUBLISH_MAX: u32 = 3;

/// How long a transaction may stay open, from its creation or its last operator
/// replay, before its next decision ends it FAILED, `EXPIRED`
/// (`TRANSACTION_DEADLINE_SECONDS`, `TransactionDeadlineSeconds`). Seven days: the
/// default attempts and technical re-sends fit in under two, and an outage that lasts
/// a week ends every transaction it holds instead of cycling them for ever.
pub const TRANSACTION_DEADLINE: Duration = Duration::from_secs(7 * 24 * 3600);

/// Technical re-sends of one transaction's requests (ERROR answers sent again, no
/// attempt consumed) before the next ERROR ends it FAILED with the reason
/// `TECHNICAL_EXHAUSTED` (`TECHNICAL_RESEND_MAX`, `TechnicalResendMax`). With the
/// technical backoff below, twenty re-sends span about fifteen hours of outage.
pub const TECHNICAL_RESEND_MAX: u32 = 20;
/// Highest TECHNICAL_RESEND_MAX accepted (the audit trail numbers re-sends with four
/// digits).
pub const TECHNICAL_RESEND_LIMIT: u32 = 1000;
/// Technical backoff: wait before the first re-send, before jitter; it is also the
/// floor under a `retry_after_seconds` shorter than the backoff, so a storm of ERROR
/// answers cannot spin.
pub const TECHNICAL_BACKOFF_BASE: Duration = Duration::from_secs(60);
/// Technical backoff: growth per re-send.
pub const TECHNICAL_BACKOFF_FACTOR: f64 = 2.0;
/// Technical backoff: cap of the nominal wait.
pub const TECHNICAL_BACKOFF_CAP: Duration = Duration::from_secs(3600);
/// Technical backoff: relative jitter (spreads the re-sends of an outage's ERRORs).
pub const TECHNICAL_BACKOFF_JITTER: f64 = 0.1;

/// Outbox mode: how long after the publisher's claim a SENDING record's request may
/// still be published again. SQS FIFO drops a repeat of a `MessageDeduplicationId`
/// sent within 5 minutes of the first; 60 s less leaves room for skew between the
/// publisher's clock and SQS's. An older claim is never published again: the answer
/// deadline decides (`docs/design.md#outbox-mode`).
pub const PUBLISH_RESEND_WINDOW: Duration = Duration::from_secs(240);

/// Records of one SQS batch handled at the same time (`BATCH_CONCURRENCY`,
/// `BatchConcurrency`).
pub const BATCH_CONCURRENCY: usize = 10;
/// Retried requests one retry-handler execution environment publishes per second at
/// most (`MAX_REQUESTS_PER_SECOND`, `MaxRequestsPerSecond`); the fleet bound is this
/// × [`RETRY_HANDLER_MAX_CONCURRENCY`].
pub const MAX_REQUESTS_PER_SECOND: f64 = 5.0;
/// Retry-handler execution environments at once: the retry queue's event source
/// `ScalingConfig.MaximumConcurrency` (`RetryHandlerMaxConcurrency`).
pub const RETRY_HANDLER_MAX_CONCURRENCY: u32 = 2;

/// First requests one starter execution environment publishes per second at most
/// (its `MAX_REQUESTS_PER_SECOND`, `IntakeStartsPerSecond`); the fleet bound is this ×
/// [`INTAKE_MAX_CONCURRENCY`].
pub const INTAKE_STARTS_PER_SECOND: f64 = 5.0;
/// Starter execution environments at once: the intake queue's event source
/// `ScalingConfig.MaximumConcurrency` (`IntakeMaxConcurrency`).
pub const INTAKE_MAX_CONCURRENCY: u32 = 2;

/// Attempt budget, counting the original request, for a transaction started without
/// one (`DefaultMaxAttempts`: the starter's `DEFAULT_MAX_ATTEMPTS`; `retryctl submit
/// --max-attempts`).
pub const MAX_ATTEMPTS: u32 = 4;

/// Schedule `RetryPolicy.MaximumRetryAttempts` (`SCHEDULER_RETRY_ATTEMPTS`,
/// `SchedulerRetryAttempts`).
pub const SCHEDULER_RETRY_ATTEMPTS: u32 = 5;
/// Schedule `RetryPolicy.MaximumEventAgeInSeconds`
/// (`SCHEDULER_MAX_EVENT_AGE_SECONDS`, `SchedulerMaxEventAgeSeconds`).
pub const SCHEDULER_MAX_EVENT_AGE_SECONDS: u32 = 3600;
/// CloudWatch namespace of the functions' metrics (`METRICS_NAMESPACE`,
/// `MetricsNamespace`).
pub const METRICS_NAMESPACE: &str = "DeferredRetry";
/// Days an audit entry is kept (`AUDIT_RETENTION_DAYS`, `AuditRetentionDays`).
pub const AUDIT_RETENTION_DAYS: u32 = 365;
/// Days a finished transaction and its payload are kept after it ended
/// (`RETENTION_DAYS`, `RetentionDays`): a month for an operator to look into a
/// FAILED one and replay it, while its payload (possibly personal data) is kept no
/// longer than that; the audit trail, which holds no payload, is kept longer.
pub const RETENTION_DAYS: u32 = 30;

/// Circuit breaker: the window its outcomes are counted in
/// (`BREAKER_WINDOW_SECONDS`, `BreakerWindowSeconds`).
pub const BREAKER_WINDOW: Duration = Duration::from_secs(60);
/// Circuit breaker: outcomes in the window before it may open (`BREAKER_MIN_CALLS`).
pub const BREAKER_MIN_CALLS: u32 = 20;
/// Circuit breaker: share of technical failures that opens it
/// (`BREAKER_FAILURE_RATIO`).
pub const BREAKER_FAILURE_RATIO: f64 = 0.5;
/// Circuit breaker: answer deadlines in the window that open it on their own
/// (`BREAKER_DEADLINE_BURST`).
pub const BREAKER_DEADLINE_BURST: u32 = 20;
/// Circuit breaker: first cool-down of OPEN (`BREAKER_COOLDOWN_SECONDS`).
pub const BREAKER_COOLDOWN: Duration = Duration::from_secs(30);
/// Circuit breaker: the longest cool-down (`BREAKER_COOLDOWN_MAX_SECONDS`).
pub const BREAKER_COOLDOWN_MAX: Duration = Duration::from_secs(600);
/// Circuit breaker: requests let out per HALF_OPEN round (`BREAKER_PROBES`).
pub const BREAKER_PROBES: u32 = 5;
/// Circuit breaker: how long an execution environment uses its last read of the
/// breaker (`BREAKER_REFRESH_SECONDS`); at most the cool-down.
pub const BREAKER_REFRESH: Duration = Duration::from_secs(5);

/// A default as `template.yaml` writes it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ParameterDefault {
    Number(f64),
    Text(&'static str),
}

/// `template.yaml`'s parameters whose defaults are the constants above.
pub const TEMPLATE_PARAMETERS: [(&str, ParameterDefault); 24] = {
    use ParameterDefault::{Number, Text};
    [
        ("BackoffBaseSeconds", Number(BACKOFF_BASE.as_secs_f64())),
        ("AnswerTimeoutSeconds", Number(ANSWER_TIMEOUT.as_secs_f64())),
        ("AnswerRepublishMax", Number(ANSWER_REPUBLISH_MAX as f64)),
        ("ReconcileRequeueMax", Number(RECONCILE_REQUEUE_MAX as f64)),
        ("TechnicalResendMax", Number(TECHNICAL_RESEND_MAX as f64)),
        (
            "TransactionDeadlineSeconds",
            Number(TRANSACTION_DEADLINE.as_secs_f64()),
        ),
        ("BackoffFactor", Number(BACKOFF_FACTOR)),
        ("BackoffCapSeconds", Number(BACKOFF_CAP.as_secs_f64())),
        ("BackoffJitter", Number(BACKOFF_JITTER)),
        (
            "BackoffStrictCap",
            Text(if BACKOFF_STRICT_CAP { "true" } else { "false" }),
        ),
        ("ReconcileShards", Number(RECONCILE_SHARDS as f64)),
        (
            "ReconcileThresholdSeconds",
            Number(RECONCILE_THRESHOLD.as_secs_f64()),
        ),
        ("ReconcileMaxItems", Number(RECONCILE_MAX_ITEMS as f64)),
        ("BatchConcurrency", Number(BATCH_CONCURRENCY as f64)),
        ("MaxRequestsPerSecond", Number(MAX_REQUESTS_PER_SECOND)),
        (
            "RetryHandlerMaxConcurrency",
            Number(RETRY_HANDLER_MAX_CONCURRENCY as f64),
        ),
        ("DefaultMaxAttempts", Number(MAX_ATTEMPTS as f64)),
        ("IntakeStartsPerSecond", Number(INTAKE_STARTS_PER_SECOND)),
        (
            "IntakeMaxConcurrency",
            Number(INTAKE_MAX_CONCURRENCY as f64),
        ),
        (
            "SchedulerRetryAttempts",
            Number(SCHEDULER_RETRY_ATTEMPTS as f64),
        ),
        (
            "SchedulerMaxEventAgeSeconds",
            Number(SCHEDULER_MAX_EVENT_AGE_SECONDS as f64),
        ),
        ("MetricsNamespace", Text(METRICS_NAMESPACE)),
        ("AuditRetentionDays", Number(AUDIT_RETENTION_DAYS as f64)),
        ("RetentionDays", Number(RETENTION_DAYS as f64)),
    ]
};
