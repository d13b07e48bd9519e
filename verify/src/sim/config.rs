//! What a simulation is parameterised by.

use super::breaker::{Outage, OutageMode};
use crate::Flaws;
use domain::breaker::BreakerSettings;
use domain::decide::Delivery;
use domain::defaults;
use domain::policy::{PolicySet, RetryPolicy};
use std::time::Duration;
use testkit::oracle::ServiceDedup;

/// Everything a simulation is parameterised by (the seed apart).
#[derive(Debug, Clone, PartialEq)]
pub struct SimConfig {
    pub transactions: usize,
    pub max_attempts: u32,
    /// Transactions start uniformly over this window (0: all at once).
    pub arrival_window_ms: i64,
    /// Probability that a received message is also delivered to another consumer.
    pub duplicate_rate: f64,
    /// Probability, per effect, that the run stops before it (process crash).
    pub crash_rate: f64,
    /// Probability, per effect, that the port call fails with a retryable error.
    pub throttle_rate: f64,
    /// Probability that the external service answers CANCELLED.
    pub cancel_rate: f64,
    /// Probability that the external service answers ERROR (drawn first; 0 draws
    /// nothing, so a run without technical failures is the run it always was).
    pub technical_rate: f64,
    /// Probability that the external service answers REJECTED (it refuses the
    /// attempt for good; drawn after ERROR, only above 0, so a run without it is the
    /// run it always was).
    pub rejected_rate: f64,
    /// Probability that a schedule fires late (1 to 60 minutes after its instant).
    pub late_fire_rate: f64,
    /// Probability that a schedule fires twice.
    pub double_fire_rate: f64,
    /// Probability that the scheduler cannot deliver (the event goes to its DLQ).
    pub scheduler_failure_rate: f64,
    /// Probability that the service answers an attempt again, 1 to 6 hours later.
    pub late_response_rate: f64,
    /// Probability that the request queue delivers a request twice to the service.
    pub request_duplicate_rate: f64,
    /// Probability that a start crashes after its create, before its publish (the
    /// caller never repeats it).
    pub start_crash_rate: f64,
    /// Probability that a request never reaches the service (it is never answered).
    pub silent_rate: f64,
    /// Probability that the service executes a request and its answer is lost.
    pub lost_answer_rate: f64,
    /// ANSWER_TIMEOUT_SECONDS, in milliseconds.
    pub answer_timeout_ms: i64,
    /// ANSWER_REPUBLISH_MAX.
    pub answer_republish_max: u32,
    /// The retry handler's MAX_REQUESTS_PER_SECOND (per warm instance).
    pub rate_limit: u32,
    /// The retry handler's MaximumConcurrency (warm instances).
    pub retry_concurrency: usize,
    pub response_concurrency: usize,
    /// The retry handler paces its publishes (switch off to see the limit broken).
    pub pacing: bool,
    pub reconciler: bool,
    pub reconciler_interval_ms: i64,
    pub reconcile_threshold_ms: i64,
    pub reconcile_max_items: usize,
    pub response_visibility_ms: i64,
    pub retry_visibility_ms: i64,
    pub max_receive_count: u32,
    pub backoff_base_ms: u64,
    pub backoff_factor: f64,
    pub backoff_cap_ms: u64,
    pub jitter: f64,
    /// TECHNICAL_RESEND_MAX: technical re-sends before an ERROR ends it FAILED.
    pub technical_resend_max: u32,
    /// TRANSACTION_DEADLINE_SECONDS, in ms.
    pub transaction_deadline_ms: u64,
    /// Windows during which the service is down (answers as `outage_mode` says).
    pub outages: Vec<Outage>,
    pub outage_mode: OutageMode,
    /// The circuit breaker of the service (`None`: requests always go out).
    pub breaker: Option<BreakerSettings>,
    /// The retry handler writes each probe it lets out on the breaker, so a round's
    /// bound holds across instances (switch off to see the bound broken).
    pub count_probes: bool,
    /// Probability, per transaction, that an operator acts on it once, at an instant
    /// drawn in its first [`OPERATOR_WINDOW_MS`]: `retryctl resolve` if it is then
    /// waiting for its retry, `replay` (one more attempt) if it ended FAILED by its
    /// cancellations; nothing otherwise. 0 draws nothing (the run it always was).
    pub operator_rate: f64,
    /// BREAKER_REFRESH_SECONDS, in ms: how long each execution environment (a retry
    /// handler's worker, the reconciler) trusts its last read of the breaker. 0: every
    /// admission reads the item (the strictest reading).
    pub breaker_refresh_ms: i64,
    /// Each execution environment's clock is off by a constant drawn in
    /// ±`clock_skew_ms` (0: every clock agrees): its decisions, its breaker reads and
    /// its writes' instants use its own time.
    pub clock_skew_ms: i64,
    /// Whether the external service deduplicates by idempotency key, or runs every
    /// request message it receives: then the report counts its runs per (transaction,
    /// attempt), and an attempt run twice is a violation. Either way the run is the
    /// same (same draws, same digest): the service answers as the deduplicating one
    /// does, and only what it runs is counted.
    pub service: ServiceDedup,
    /// How requests leave: published by the handler that decides them (`Direct`),
    /// or written as an intent that a publisher reading the table's stream sends to
    /// a FIFO request queue (`Outbox`: every outbox draw comes from streams of its
    /// own, so a direct run is the run it always was).
    pub delivery: Delivery,
    /// Outbox delivery: the share of ERROR answers (outside outages) that say the
    /// call may have run (`execution UNKNOWN`, a timeout); the others say `NOT_RUN`.
    pub unknown_error_share: f64,
    pub flaws: Flaws,
}

/// Outbox delivery: how late a stream record reaches the publisher (DynamoDB
/// Streams' propagation and the event source mapping's polling), in ms.
pub const STREAM_LAG_MS: (i64, i64) = (100, 2_000);

/// Outbox delivery: when a publisher run fails, the event source mapping retries
/// its batch after this long (ms), at most [`STREAM_MAX_RETRIES`] times; then the
/// record goes to the on-failure destination and the reconciler rescues the intent.
pub const STREAM_RETRY_MS: (i64, i64) = (1_000, 60_000);
pub const STREAM_MAX_RETRIES: u32 = 10;

/// Outbox delivery: how long a FIFO queue remembers a deduplication id (SQS: 5 min).
pub const FIFO_DEDUP_WINDOW_MS: i64 = 300_000;

/// The window an operator's command lands in, from the start of the run: two days,
/// the article's backoff (2 h doubling) of a few attempts.
pub const OPERATOR_WINDOW_MS: i64 = 2 * 24 * 3_600_000;

impl Default for SimConfig {
    fn default() -> Self {
        Self {
            transactions: 10_000,
            max_attempts: 3,
            arrival_window_ms: 3_600_000,
            duplicate_rate: 0.05,
            crash_rate: 0.02,
            throttle_rate: 0.02,
            cancel_rate: 0.5,
            technical_rate: 0.0,
            rejected_rate: 0.0,
            late_fire_rate: 0.05,
            double_fire_rate: 0.02,
            scheduler_failure_rate: 0.005,
            late_response_rate: 0.02,
            request_duplicate_rate: 0.02,
            start_crash_rate: 0.005,
            silent_rate: 0.01,
            lost_answer_rate: 0.005,
            answer_timeout_ms: defaults::ANSWER_TIMEOUT.as_millis() as i64,
            answer_republish_max: defaults::ANSWER_REPUBLISH_MAX,
            rate_limit: 10,
            retry_concurrency: 5,
            response_concurrency: 10,
            pacing: true,
            reconciler: true,
            reconciler_interval_ms: 300_000,
            reconcile_threshold_ms: defaults::RECONCILE_THRESHOLD.as_millis() as i64,
            reconcile_max_items: defaults::RECONCILE_MAX_ITEMS as usize,
            response_visibility_ms: 180_000,
            retry_visibility_ms: 360_000,
            max_receive_count: 5,
            backoff_base_ms: defaults::BACKOFF_BASE.as_millis() as u64,
            backoff_factor: defaults::BACKOFF_FACTOR,
            backoff_cap_ms: defaults::BACKOFF_CAP.as_millis() as u64,
            jitter: defaults::BACKOFF_JITTER,
            technical_resend_max: defaults::TECHNICAL_RESEND_MAX,
            transaction_deadline_ms: defaults::TRANSACTION_DEADLINE.as_millis() as u64,
            outages: Vec::new(),
            outage_mode: OutageMode::Error,
            breaker: None,
            count_probes: true,
            operator_rate: 0.0,
            breaker_refresh_ms: 0,
            clock_skew_ms: 0,
            service: ServiceDedup::ByKey,
            delivery: Delivery::Direct,
            unknown_error_share: 0.5,
            flaws: Flaws::NONE,
        }
    }
}

impl SimConfig {
    /// The same simulation with every request reaching the service and every answer
    /// coming back (no crashed start, no lost request, no lost answer): for checks of
    /// something else that count requests exactly, or that run without the reconciler
    /// (which alone rescues an unanswered request).
    pub fn answered(self) -> Self {
        Self {
            start_crash_rate: 0.0,
            silent_rate: 0.0,
            lost_answer_rate: 0.0,
            ..self
        }
    }

    /// True when the outage windows are the only way the service fails technically
    /// (no ERROR drawn at random, every request reaches the service, every answer comes
    /// back, every start publishes): then no transaction may end FAILED for anything
    /// but its attempts, all answered CANCELLED.
    /// How long after its deadline a transaction may still end: the longest wait it
    /// can be in when the deadline passes (a retry's backoff with jitter, a request's
    /// answer window, a breaker's hold), plus the reconciler's lag, a late fire and the
    /// retry queue's redeliveries. A transaction that ends later ignored its deadline.
    pub fn deadline_slack_ms(&self) -> i64 {
        let backoff = (self.backoff_cap_ms as f64 * (1.0 + self.jitter.abs())) as i64;
        let wait = backoff.max(self.answer_timeout_ms).max(2 * 3_600_000);
        let reconciler = 2 * (self.reconcile_threshold_ms + self.reconciler_interval_ms);
        let redeliveries = self.retry_visibility_ms * i64::from(self.max_receive_count);
        wait + reconciler + redeliveries + 3_600_000
    }

    pub fn outages_only(&self) -> bool {
        !self.outages.is_empty()
            && self.technical_rate == 0.0
            && self.silent_rate == 0.0
            && self.lost_answer_rate == 0.0
            && self.start_crash_rate == 0.0
    }

    /// True when the service is down at `since_start` ms from the start of the run.
    pub fn in_outage(&self, since_start: i64) -> bool {
        self.outages.iter().any(|o| o.covers(since_start))
    }

    /// True in outbox delivery.
    pub fn outbox(&self) -> bool {
        self.delivery == Delivery::Outbox
    }

    /// The fleet bound on outbound requests per second.
    pub fn fleet_limit(&self) -> u64 {
        u64::from(self.rate_limit) * self.retry_concurrency as u64
    }

    pub(super) fn policies(&self) -> PolicySet {
        let policy = RetryPolicy::new(
            Duration::from_millis(self.backoff_base_ms.max(1)),
            self.backoff_factor.max(1.0),
            Duration::from_millis(self.backoff_cap_ms.max(self.backoff_base_ms.max(1))),
            self.jitter.clamp(0.0, 0.99),
            false,
        )
        .unwrap_or_default();
        PolicySet::uniform(policy)
    }
}
