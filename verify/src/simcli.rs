//! The simulator's command line (shared by the `simulate` binary and its tests).

use crate::sim::SimConfig;
use clap::Parser;
use domain::defaults;

/// Seeded, deterministic fault-injection simulation of the deferred retry pattern.
#[derive(Debug, Clone, Parser, PartialEq)]
#[command(name = "simulate", version)]
pub struct SimArgs {
    /// First seed.
    #[arg(long, default_value_t = 1)]
    pub seed_start: u64,
    /// Number of seeds (one independent simulation each).
    #[arg(long, default_value_t = 10)]
    pub seeds: u64,
    /// Transactions per seed.
    #[arg(long, default_value_t = 10_000)]
    pub transactions: usize,
    #[arg(long, default_value_t = 3)]
    pub max_attempts: u32,
    /// Transactions start uniformly over this many seconds (0: a burst).
    #[arg(long, default_value_t = 3_600)]
    pub arrival_window_seconds: i64,
    /// Probability that a received SQS message is also delivered to another consumer.
    #[arg(long, default_value_t = 0.05)]
    pub duplicate_rate: f64,
    /// Probability, per effect, that the run crashes before it.
    #[arg(long, default_value_t = 0.02)]
    pub crash_rate: f64,
    /// Probability, per effect, of a retryable port error (throttling).
    #[arg(long, default_value_t = 0.02)]
    pub throttle_rate: f64,
    /// Probability that the external service answers CANCELLED.
    #[arg(long, default_value_t = 0.5)]
    pub cancel_rate: f64,
    /// Probability that the external service answers ERROR (a technical failure: the
    /// attempt is sent again, same key, not consumed); drawn before CANCELLED/SUCCESS.
    #[arg(long, default_value_t = 0.0)]
    pub technical_rate: f64,
    /// Probability that the external service answers REJECTED (it refuses the attempt
    /// for good: the transaction ends FAILED, never retried); drawn after ERROR.
    #[arg(long, default_value_t = 0.0)]
    pub rejected_rate: f64,
    /// Probability that a schedule fires 1 to 60 minutes late.
    #[arg(long, default_value_t = 0.05)]
    pub late_fire_rate: f64,
    /// Probability that a schedule fires twice.
    #[arg(long, default_value_t = 0.02)]
    pub double_fire_rate: f64,
    /// Probability that the scheduler cannot deliver (its DLQ keeps the event).
    #[arg(long, default_value_t = 0.005)]
    pub scheduler_failure_rate: f64,
    /// Probability that the service answers an attempt again 1 to 6 hours later.
    #[arg(long, default_value_t = 0.02)]
    pub late_response_rate: f64,
    /// Probability that the request queue delivers a request twice.
    #[arg(long, default_value_t = 0.02)]
    pub request_duplicate_rate: f64,
    /// Probability that a start crashes after its create, before its publish.
    #[arg(long, default_value_t = 0.005)]
    pub start_crash_rate: f64,
    /// Probability that a request never reaches the service (never answered).
    #[arg(long, default_value_t = 0.01)]
    pub silent_rate: f64,
    /// Probability that the service executes a request and its answer is lost.
    #[arg(long, default_value_t = 0.005)]
    pub lost_answer_rate: f64,
    /// ANSWER_TIMEOUT_SECONDS.
    #[arg(long, default_value_t = defaults::ANSWER_TIMEOUT.as_secs() as i64)]
    pub answer_timeout_seconds: i64,
    /// ANSWER_REPUBLISH_MAX.
    #[arg(long, default_value_t = defaults::ANSWER_REPUBLISH_MAX)]
    pub answer_republish_max: u32,
    /// The retry handler's MAX_REQUESTS_PER_SECOND (per concurrent execution). The
    /// simulator's own load, heavier than the template's 5 × 2.
    #[arg(long, default_value_t = 10)]
    pub rate_limit: u32,
    /// The retry handler's MaximumConcurrency (fleet bound = this × --rate-limit).
    #[arg(long, default_value_t = 5)]
    pub retry_concurrency: usize,
    #[arg(long, default_value_t = 10)]
    pub response_concurrency: usize,
    /// Switch the retry handler's outbound pacing off (the limit check must then fail).
    #[arg(long)]
    pub no_pacing: bool,
    /// Switch the reconciler off.
    #[arg(long)]
    pub no_reconciler: bool,
    #[arg(long, default_value_t = 300)]
    pub reconciler_interval_seconds: i64,
    #[arg(long, default_value_t = defaults::RECONCILE_THRESHOLD.as_secs() as i64)]
    pub reconcile_threshold_seconds: i64,
    #[arg(long, default_value_t = defaults::RECONCILE_MAX_ITEMS as usize)]
    pub reconcile_max_items: usize,
    #[arg(long, default_value_t = 5)]
    pub max_receive_count: u32,
    #[arg(long, default_value_t = defaults::BACKOFF_BASE.as_secs())]
    pub backoff_base_seconds: u64,
    #[arg(long, default_value_t = defaults::BACKOFF_FACTOR)]
    pub backoff_factor: f64,
    #[arg(long, default_value_t = defaults::BACKOFF_CAP.as_secs())]
    pub backoff_cap_seconds: u64,
    #[arg(long, default_value_t = defaults::BACKOFF_JITTER)]
    pub jitter: f64,
    /// TECHNICAL_RESEND_MAX: technical re-sends of a transaction before an ERROR ends
    /// it FAILED/TECHNICAL_EXHAUSTED.
    #[arg(long, default_value_t = defaults::TECHNICAL_RESEND_MAX)]
    pub technical_resend_max: u32,
    /// TRANSACTION_DEADLINE_SECONDS: past it, a transaction still open ends
    /// FAILED/EXPIRED at its next wait.
    #[arg(long, default_value_t = defaults::TRANSACTION_DEADLINE.as_secs())]
    pub transaction_deadline_seconds: u64,
    /// Probability, per transaction, that an operator acts on it once in its first two
    /// days: `resolve` while it waits for its retry, `replay` once it ended FAILED by
    /// its cancellations (each reads, then writes guarded by what it read).
    #[arg(long, default_value_t = 0.0)]
    pub operator_rate: f64,
    /// BREAKER_REFRESH_SECONDS: how long each execution environment trusts its last
    /// read of the breaker (0: every admission reads it). At most the breaker's
    /// cool-down, as the functions require.
    #[arg(long, default_value_t = 0)]
    pub breaker_refresh_seconds: u64,
    /// Each execution environment's clock is off by a constant drawn in ± this many
    /// milliseconds (0: every clock agrees).
    #[arg(long, default_value_t = 0)]
    pub clock_skew_ms: u64,
    /// An outage window, START+DURATION in seconds from the start of the run
    /// (repeatable, or a comma-separated list): the service answers as --outage-mode
    /// says. Switches the circuit breaker on (unless --no-breaker).
    #[arg(long, value_delimiter = ',')]
    pub outage: Vec<String>,
    /// What the service does during an outage: `error` (answers ERROR) or `silent`
    /// (answers nothing).
    #[arg(long, default_value = "error")]
    pub outage_mode: String,
    /// Switch the circuit breaker on without an outage.
    #[arg(long)]
    pub breaker: bool,
    /// Switch the circuit breaker off, even with an outage (requests go out into it).
    #[arg(long, conflicts_with = "breaker")]
    pub no_breaker: bool,
    /// Switch on a known-bad design (repeatable): retry-rejects-scheduling,
    /// fire-time-at-create, retry-discards-sending, attempts-from-zero,
    /// no-answer-deadline, technical-as-cancelled, ignores-breaker, held-event-begins-send, any-answer-closes, resends-old-claim, retry-publishes-in-outbox (the last two with --delivery outbox).
    #[arg(long)]
    pub flaw: Vec<String>,
    /// The external service: `deduplicating` (by idempotency key, the deployment's
    /// precondition) or `non-idempotent` (it runs every request message it receives:
    /// the report counts its runs per attempt, and an attempt run twice is a
    /// violation). The run itself is the same either way.
    #[arg(long, default_value = "deduplicating")]
    pub service: String,
    /// How requests leave: `direct` (the handler that decides publishes them) or
    /// `outbox` (the record is the intent; a publisher reading the table's stream
    /// sends it to a FIFO request queue, which drops a repeat of a deduplication id
    /// within 5 minutes; the report counts what it published per attempt and round).
    #[arg(long, default_value = "direct")]
    pub delivery: String,
    /// Outbox delivery: the share of ERROR answers (outside outages) that say the
    /// call may have run (`execution UNKNOWN`); the others say `NOT_RUN`.
    #[arg(long, default_value_t = 0.5)]
    pub unknown_error_share: f64,
    /// Worker threads (seeds run in parallel; the report does not depend on this).
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
    /// No progress output.
    #[arg(long)]
    pub quiet: bool,
}

impl SimArgs {
    /// The simulation these arguments describe.
    pub fn config(&self) -> Result<SimConfig, String> {
        let rates = [
            ("--duplicate-rate", self.duplicate_rate),
            ("--crash-rate", self.crash_rate),
            ("--throttle-rate", self.throttle_rate),
            ("--cancel-rate", self.cancel_rate),
            ("--technical-rate", self.technical_rate),
            ("--rejected-rate", self.rejected_rate),
            ("--late-fire-rate", self.late_fire_rate),
            ("--double-fire-rate", self.double_fire_rate),
            ("--scheduler-failure-rate", self.scheduler_failure_rate),
            ("--late-response-rate", self.late_response_rate),
            ("--request-duplicate-rate", self.request_duplicate_rate),
            ("--start-crash-rate", self.start_crash_rate),
            ("--silent-rate", self.silent_rate),
            ("--lost-answer-rate", self.lost_answer_rate),
            ("--operator-rate", self.operator_rate),
            ("--unknown-error-share", self.unknown_error_share),
        ];
        for (name, v) in rates {
            if !(0.0..=1.0).contains(&v) {
                return Err(format!("{name} = {v} must be between 0 and 1"));
            }
        }
        if self.crash_rate + self.throttle_rate >= 1.0 {
            return Err(
                "--crash-rate + --throttle-rate must be below 1 (no run could ever finish)".into(),
            );
        }
        let mut flaws = crate::Flaws::NONE;
        for f in &self.flaw {
            if !flaws.switch_on(f) {
                return Err(format!(
                    "unknown flaw `{f}`; known: {}",
                    crate::Flaws::NAMES.join(", ")
                ));
            }
        }
        let outages = self
            .outage
            .iter()
            .map(|o| crate::sim::Outage::parse(o))
            .collect::<Result<Vec<_>, _>>()?;
        let outage_mode = match self.outage_mode.as_str() {
            "error" => crate::sim::OutageMode::Error,
            "silent" => crate::sim::OutageMode::Silent,
            other => {
                return Err(format!(
                    "--outage-mode `{other}`: expected `error` or `silent`"
                ))
            }
        };
        let service = crate::sim::ServiceDedup::parse("--service", &self.service)?;
        let delivery = domain::decide::Delivery::parse(&self.delivery).ok_or_else(|| {
            format!(
                "--delivery `{}`: expected `direct` or `outbox`",
                self.delivery
            )
        })?;
        let breaker = ((self.breaker || !outages.is_empty()) && !self.no_breaker)
            .then(domain::breaker::BreakerSettings::default);
        if let Some(b) = &breaker {
            if std::time::Duration::from_secs(self.breaker_refresh_seconds) > b.cooldown {
                return Err(format!(
                    "--breaker-refresh-seconds = {} must be at most the breaker's cool-down ({} s): a cached CLOSED view would outlive an opening",
                    self.breaker_refresh_seconds,
                    b.cooldown.as_secs()
                ));
            }
        }
        Ok(SimConfig {
            transactions: self.transactions,
            max_attempts: self.max_attempts,
            arrival_window_ms: self.arrival_window_seconds.max(0) * 1000,
            duplicate_rate: self.duplicate_rate,
            crash_rate: self.crash_rate,
            throttle_rate: self.throttle_rate,
            cancel_rate: self.cancel_rate,
            technical_rate: self.technical_rate,
            rejected_rate: self.rejected_rate,
            late_fire_rate: self.late_fire_rate,
            double_fire_rate: self.double_fire_rate,
            scheduler_failure_rate: self.scheduler_failure_rate,
            late_response_rate: self.late_response_rate,
            request_duplicate_rate: self.request_duplicate_rate,
            start_crash_rate: self.start_crash_rate,
            silent_rate: self.silent_rate,
            lost_answer_rate: self.lost_answer_rate,
            answer_timeout_ms: self.answer_timeout_seconds.max(1) * 1000,
            answer_republish_max: self.answer_republish_max,
            rate_limit: self.rate_limit.max(1),
            retry_concurrency: self.retry_concurrency.max(1),
            response_concurrency: self.response_concurrency.max(1),
            pacing: !self.no_pacing,
            reconciler: !self.no_reconciler,
            reconciler_interval_ms: self.reconciler_interval_seconds.max(1) * 1000,
            reconcile_threshold_ms: self.reconcile_threshold_seconds.max(0) * 1000,
            reconcile_max_items: self.reconcile_max_items.max(1),
            response_visibility_ms: 180_000,
            retry_visibility_ms: 360_000,
            max_receive_count: self.max_receive_count.max(1),
            backoff_base_ms: self.backoff_base_seconds.max(1) * 1000,
            backoff_factor: self.backoff_factor,
            backoff_cap_ms: self.backoff_cap_seconds.max(1) * 1000,
            jitter: self.jitter,
            technical_resend_max: self.technical_resend_max,
            transaction_deadline_ms: self.transaction_deadline_seconds.max(1) * 1000,
            outages,
            outage_mode,
            breaker,
            count_probes: true,
            operator_rate: self.operator_rate,
            breaker_refresh_ms: i64::try_from(self.breaker_refresh_seconds.saturating_mul(1000))
                .unwrap_or(i64::MAX),
            clock_skew_ms: i64::try_from(self.clock_skew_ms).unwrap_or(i64::MAX),
            service,
            delivery,
            unknown_error_share: self.unknown_error_share,
            flaws,
        })
    }

    /// The exact command that reproduces these arguments (for one seed when given).
    pub fn command_line(&self, seed: Option<u64>) -> String {
        let d = SimArgs::parse_from(["simulate"]);
        let mut a = vec![
            "cargo run --release -p deferred-retry-verify --bin simulate --".to_owned(),
            format!("--seed-start {}", seed.unwrap_or(self.seed_start)),
            format!("--seeds {}", if seed.is_some() { 1 } else { self.seeds }),
            format!("--transactions {}", self.transactions),
        ];
        macro_rules! opt {
            ($($f:ident => $flag:literal),* $(,)?) => {
                $( if self.$f != d.$f { a.push(format!(concat!($flag, " {}"), self.$f)); } )*
            };
        }
        opt!(
            max_attempts => "--max-attempts",
            arrival_window_seconds => "--arrival-window-seconds",
            duplicate_rate => "--duplicate-rate",
            crash_rate => "--crash-rate",
            throttle_rate => "--throttle-rate",
            cancel_rate => "--cancel-rate",
            technical_rate => "--technical-rate",
            rejected_rate => "--rejected-rate",
            late_fire_rate => "--late-fire-rate",
            double_fire_rate => "--double-fire-rate",
            scheduler_failure_rate => "--scheduler-failure-rate",
            late_response_rate => "--late-response-rate",
            request_duplicate_rate => "--request-duplicate-rate",
            start_crash_rate => "--start-crash-rate",
            silent_rate => "--silent-rate",
            lost_answer_rate => "--lost-answer-rate",
            answer_timeout_seconds => "--answer-timeout-seconds",
            answer_republish_max => "--answer-republish-max",
            rate_limit => "--rate-limit",
            retry_concurrency => "--retry-concurrency",
            response_concurrency => "--response-concurrency",
            reconciler_interval_seconds => "--reconciler-interval-seconds",
            reconcile_threshold_seconds => "--reconcile-threshold-seconds",
            reconcile_max_items => "--reconcile-max-items",
            max_receive_count => "--max-receive-count",
            backoff_base_seconds => "--backoff-base-seconds",
            backoff_factor => "--backoff-factor",
            backoff_cap_seconds => "--backoff-cap-seconds",
            jitter => "--jitter",
            technical_resend_max => "--technical-resend-max",
            transaction_deadline_seconds => "--transaction-deadline-seconds",
            operator_rate => "--operator-rate",
            breaker_refresh_seconds => "--breaker-refresh-seconds",
            clock_skew_ms => "--clock-skew-ms",
            outage_mode => "--outage-mode",
            service => "--service",
            delivery => "--delivery",
            unknown_error_share => "--unknown-error-share",
        );
        for o in &self.outage {
            a.push(format!("--outage {o}"));
        }
        if self.breaker {
            a.push("--breaker".into());
        }
        if self.no_breaker {
            a.push("--no-breaker".into());
        }
        if self.no_pacing {
            a.push("--no-pacing".into());
        }
        if self.no_reconciler {
            a.push("--no-reconciler".into());
        }
        for f in &self.flaw {
            a.push(format!("--flaw {f}"));
        }
        a.join(" ")
    }
}
