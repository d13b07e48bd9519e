//! The demo's final report, in the manner of Jepsen's queue checker: what was
//! attempted, how it ended, and every transaction that was lost, duplicated, went past
//! its budget or got stuck — each with the reason, checked against three independent
//! witnesses: the state table, the audit trail, and what the external service saw.

use crate::local::external::{scripted_attempts, Outage, RunsSeen, Seen};
use crate::local::scheduler::Delivery;
use aws::breaker::BreakerLogEntry;
use domain::audit::AuditEntry;
use domain::decide::Delivery as RequestDelivery;
use domain::{Status, TransactionRecord};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::time::Duration;
use testkit::oracle::{evidence, ServiceDedup, Violation};

/// Everything the demo observed, gathered at the end of the run.
#[derive(Debug, Default)]
pub struct Observations {
    /// The ids the workload started.
    pub submitted: Vec<String>,
    pub records: HashMap<String, TransactionRecord>,
    /// Audit rows per transaction (any order).
    pub audit: HashMap<String, Vec<AuditEntry>>,
    /// What the external service received, per (transaction, attempt).
    pub service: BTreeMap<(String, u32), Seen>,
    /// Whether the service deduplicates (`--service`): without, the report judges
    /// its runs.
    pub service_dedup: ServiceDedup,
    /// How requests reached the request queue (`--delivery`).
    pub delivery: RequestDelivery,
    /// The runs a service that does not deduplicate made.
    pub runs: RunsSeen,
    /// Fire-time drift of every schedule delivery, in milliseconds.
    pub drift_ms: Vec<i64>,
    /// Messages left in each dead-letter queue.
    pub dlq: BTreeMap<String, u64>,
    /// Schedules still in the group at the end.
    pub schedules_left: u64,
    pub elapsed: Duration,
    /// Highest number of unique requests the service received in one second.
    pub peak_requests_per_second: u32,
    /// The same, for retried requests only (attempt >= 2), as SQS stamped them.
    pub peak_retried_per_second: u32,
    /// Retried requests leaving the retry handlers (after their pacers) in any 1 s:
    /// what the rate bound limits.
    pub peak_published_per_second: u32,
    /// The configured fleet bound (MaximumConcurrency × MAX_REQUESTS_PER_SECOND).
    pub rate_bound: f64,
    /// Per function: invocations, records, and the function's own metric counts.
    pub functions: BTreeMap<String, BTreeMap<String, u64>>,
    /// Scheduler emulator counters.
    pub scheduler: BTreeMap<String, u64>,
    /// Reconciler runs and actions (`"SCHEDULED/requeued": 3`).
    pub reconciler: BTreeMap<String, u64>,
    /// What a chaos run injected.
    pub chaos: Option<ChaosReport>,
    /// Requests the external service took and never answered (`--silent-probability`).
    pub dropped_silently: u64,
    /// How the final wait for the audit trail ended (`None`: not watched).
    pub audit_wait: Option<AuditWait>,
    /// How long that wait took.
    pub audit_waited: Duration,
    /// The scheduler emulator's last delivery of each schedule, by schedule name.
    pub deliveries: HashMap<String, Delivery>,
    /// The seed of the service's answers and of the faults.
    pub seed: u64,
    /// Messages still in each queue at the end (visible and in flight).
    pub queued: BTreeMap<String, u64>,
    /// A run with an outage of the external service: what the breaker did.
    pub breaker: Option<BreakerObserved>,
}

/// The circuit breaker at the end of a run with an outage.
#[derive(Debug, Clone)]
pub struct BreakerObserved {
    pub outage: Outage,
    /// The start of the run (ms since the epoch): the origin of the report's times.
    pub run_started_ms: i64,
    /// Its change log, oldest first.
    pub changes: Vec<BreakerLogEntry>,
    /// Its state at the end.
    pub state: String,
    /// When each retried request left a retry handler (ms since the epoch).
    pub publish_ms: Vec<i64>,
    /// Each retry event the breaker held back (deferred on the retry queue): its
    /// transaction, and when (ms since the epoch).
    pub held: Vec<(String, i64)>,
    /// The service's probability of CANCELLED (with the seed: its script).
    pub cancel_probability: f64,
    /// Requests answered ERROR, and taken unanswered, during the outage.
    pub outage_errors: u64,
    pub outage_silenced: u64,
    /// The breaker's settings in the run (`NAME=value`).
    pub settings: Vec<String>,
}

/// One change of the breaker, in seconds from the start of the run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BreakerChangeLine {
    pub at_seconds: f64,
    pub change: String,
    pub from: String,
    pub to: String,
}

/// The breaker section of a run with an outage, and its checks.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BreakerReport {
    /// `error` or `silent`.
    pub mode: String,
    pub outage_start_seconds: f64,
    pub outage_end_seconds: f64,
    pub settings: Vec<String>,
    pub outage_errors: u64,
    pub outage_silenced: u64,
    /// The changes of state (probes admitted left out), oldest first.
    pub changes: Vec<BreakerChangeLine>,
    /// Times it opened (CLOSED → OPEN).
    pub opened: u64,
    /// Its last close, in seconds from the start of the run.
    pub closed_at_seconds: Option<f64>,
    /// Its state at the end: CLOSED for the check.
    pub final_state: String,
    /// The retry handler's RetriesPausedByBreaker.
    pub retries_paused: u64,
    /// Transactions paused at least once, and of them those that went IN_PROGRESS
    /// again after their first pause.
    pub transactions_paused: u64,
    pub transactions_resumed: u64,
    /// FAILED because of the outage: TECHNICAL_EXHAUSTED, UNANSWERED, or attempts
    /// consumed by it.
    pub failed_by_outage: Vec<Finding>,
    /// Terminal transactions whose attempts differ from the service's script.
    pub attempts_changed: Vec<Finding>,
    /// Transactions the outage held past their deadline: FAILED/EXPIRED, with the
    /// business alert (not failed by the outage: it ended nothing before then).
    pub expired: Vec<Finding>,
    /// Transactions not terminal at the end.
    pub not_terminal: u64,
    /// Retried requests leaving the retry handlers in any 1 s after the last close.
    pub peak_after_close: u32,
    pub rate_bound: f64,
}

impl BreakerReport {
    pub fn ok(&self) -> bool {
        self.failed_by_outage.is_empty()
            && self.attempts_changed.is_empty()
            && self.final_state == "CLOSED"
            && self.not_terminal == 0
            && f64::from(self.peak_after_close) <= self.rate_bound
    }
}

/// How the demo's final wait for the audit trail ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "ended", rename_all = "snake_case")]
pub enum AuditWait {
    /// A pass over the stream that began after the state was read found nothing
    /// new: every change of that state was read and written.
    Drained {
        rows_written: u64,
        failed_passes: u64,
    },
    /// The stream was not drained and the writer had written nothing for
    /// `idle_seconds`.
    Stalled {
        idle_seconds: u64,
        rows_written: u64,
        failed_passes: u64,
    },
}

/// EventBridge Scheduler's own promise: a schedule's target is invoked within a
/// minute of its instant. Beyond it, a delivery is late on the emulator's account.
pub const SCHEDULER_PROMISE_MS: i64 = 60_000;

/// Which side a finding points at, from the evidence the run left.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Side {
    /// The state table: the item is missing although the start was acknowledged.
    StateStore,
    /// The audit trail is behind the state: the stream was not drained when the
    /// writer stalled.
    AuditBehind,
    /// The audit writer read the stream to its end, yet the trail misses a change.
    AuditLost,
    /// The scheduler emulator delivered the retry late (past EventBridge's minute),
    /// or never.
    Emulator,
    /// The functions (handlers, reconciler): no evidence points elsewhere.
    Functions,
}

impl Side {
    pub const fn label(self) -> &'static str {
        match self {
            Side::StateStore => "state store",
            Side::AuditBehind => "audit behind",
            Side::AuditLost => "audit lost",
            Side::Emulator => "scheduler emulator",
            Side::Functions => "functions",
        }
    }
}

/// What a chaos run injected, and the seed that replays its decisions.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ChaosReport {
    pub profile: String,
    pub seed: u64,
    /// `service:Operation` → fault kind → calls faulted.
    pub injected: BTreeMap<String, BTreeMap<String, u64>>,
    /// `service:Operation kind` of a mutating operation that no fault of that kind
    /// reached (a short run may miss some).
    pub not_injected: Vec<String>,
    /// Faults of the local stack's processes: kind → count.
    pub process: BTreeMap<String, u64>,
    /// Transactions an operator resolved during the run (their schedules deleted).
    pub resolved: u64,
}

/// The runs of a service that does not deduplicate (`--service non-idempotent`).
/// Direct delivery relies on a service that deduplicates by idempotency key
/// (docs/design.md#preconditions): an attempt it sends again is run again by this
/// one. Such doubles are reported and warned about, not failed: the run's own checks
/// decide the result. Outbox delivery publishes each attempt once: a double there
/// is a finding (`duplicated`) and fails the run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ServiceRuns {
    /// The service's name on the command line (`non-idempotent`).
    pub service: String,
    /// How the demo delivers requests to the service (`direct` or `outbox`).
    pub delivery: String,
    /// Attempts the service ran at least once.
    pub attempts_run: u64,
    /// Runs in all (an ERROR answer and a request taken by a silent service are not
    /// runs).
    pub runs: u64,
    /// Attempts run more than once ([`Violation::ExecutedTwice`]).
    pub executed_twice: u64,
    /// Runs beyond the first of their attempt.
    pub runs_beyond_first: u64,
    /// Executions per attempt: how many attempts ran once, twice, … (runs → attempts).
    pub attempts_by_runs: BTreeMap<u32, u64>,
    /// Copies of one SQS message delivered again (same message id): not runs.
    pub redelivered_copies: u64,
    /// The attempts executed twice (`TX-000012#2`) and how many times each ran, by
    /// transaction id.
    pub doubles: Vec<(String, u32)>,
}

impl ServiceRuns {
    fn of(dedup: ServiceDedup, delivery: RequestDelivery, runs: &RunsSeen) -> Self {
        let doubles: Vec<(String, u32)> = runs
            .executed_twice
            .keys()
            .map(|k| {
                let n = runs.per_attempt.get(k).copied().unwrap_or(0);
                (format!("{}#{}", k.0, k.1), n)
            })
            .collect();
        Self {
            service: dedup.name().to_owned(),
            delivery: delivery.as_str().to_owned(),
            attempts_run: runs.per_attempt.len() as u64,
            attempts_by_runs: runs.per_attempt.values().fold(BTreeMap::new(), |mut m, n| {
                *m.entry(*n).or_insert(0) += 1;
                m
            }),
            runs: runs.per_attempt.values().map(|n| u64::from(*n)).sum(),
            executed_twice: doubles.len() as u64,
            runs_beyond_first: runs.executed_twice.values().map(|n| u64::from(*n)).sum(),
            redelivered_copies: runs.redelivered,
            doubles,
        }
    }
}

/// One transaction that failed a check: why, which side the evidence points at,
/// and that evidence.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    pub transaction_id: String,
    pub why: String,
    pub side: Side,
    pub evidence: String,
}

impl Finding {
    /// A finding no evidence points away from our functions.
    fn ours(transaction_id: &str, why: String) -> Self {
        Self {
            transaction_id: transaction_id.to_owned(),
            why,
            side: Side::Functions,
            evidence: String::new(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Percentiles {
    pub count: usize,
    pub p50: i64,
    pub p99: i64,
    pub max: i64,
}

/// The report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    pub attempted: usize,
    /// Final status → transactions.
    pub statuses: BTreeMap<String, u64>,
    /// Retries (attempts − 1) → transactions.
    pub retries_histogram: BTreeMap<u32, u64>,
    /// Requests the external service received, duplicates included.
    pub requests_raw: u64,
    /// Distinct idempotency keys among them.
    pub requests_deduped: u64,
    /// Requests taken and never answered (a silent service); the answer deadlines
    /// that rescued them are in `reconciler` (`IN_PROGRESS/reconciler-republished`,
    /// `IN_PROGRESS/unanswered`).
    pub dropped_silently: u64,
    pub peak_requests_per_second: u32,
    pub peak_retried_per_second: u32,
    pub peak_published_per_second: u32,
    pub rate_bound: f64,
    /// How requests reached the request queue (`direct`, `outbox`): who publishes
    /// them, the retry handlers or the publisher.
    pub delivery: String,
    pub drift_ms: Option<Percentiles>,
    /// The emulator's own part of each delivery's drift (from the later of the
    /// instant and the schedule's creation).
    pub own_drift_ms: Option<Percentiles>,
    /// Its parts ([`Delivery::parts_ms`]): discovery, start, send.
    pub drift_parts_ms: Option<[Percentiles; 3]>,
    pub audit_wait: Option<AuditWait>,
    pub audit_waited_seconds: f64,
    pub seed: u64,
    pub dlq: BTreeMap<String, u64>,
    pub schedules_left: u64,
    pub lost: Vec<Finding>,
    pub duplicated: Vec<Finding>,
    pub exceeded: Vec<Finding>,
    pub stuck: Vec<Finding>,
    /// The state and the service disagree on an outcome.
    pub unexpected: Vec<Finding>,
    /// The audit trail is not one unbroken chain ending in the current state.
    pub audit_gaps: Vec<Finding>,
    /// Informational: a transition whose recorded time is earlier than the one before
    /// it in the chain (its writer read the clock before the previous write landed).
    pub audit_time_order: Vec<Finding>,
    pub functions: BTreeMap<String, BTreeMap<String, u64>>,
    pub scheduler: BTreeMap<String, u64>,
    pub reconciler: BTreeMap<String, u64>,
    pub elapsed_seconds: f64,
    pub chaos: Option<ChaosReport>,
    /// A run with an outage: the breaker's section.
    pub breaker: Option<BreakerReport>,
    /// A run with a service that does not deduplicate: its runs.
    pub service_runs: Option<ServiceRuns>,
}

impl Report {
    /// True when nothing was lost, duplicated, exceeded, stuck or inconsistent.
    pub fn ok(&self) -> bool {
        self.lost.is_empty()
            && self.duplicated.is_empty()
            && self.exceeded.is_empty()
            && self.stuck.is_empty()
            && self.unexpected.is_empty()
            && self.audit_gaps.is_empty()
            && self.breaker.as_ref().is_none_or(BreakerReport::ok)
    }

    pub fn count(&self, status: Status) -> u64 {
        self.statuses.get(status.as_str()).copied().unwrap_or(0)
    }
}

pub fn percentiles(sorted: &[i64]) -> Option<Percentiles> {
    if sorted.is_empty() {
        return None;
    }
    let at = |q: f64| {
        let idx = ((sorted.len() as f64) * q).ceil() as usize;
        sorted[idx.saturating_sub(1).min(sorted.len() - 1)]
    };
    Some(Percentiles {
        count: sorted.len(),
        p50: at(0.50),
        p99: at(0.99),
        max: sorted[sorted.len() - 1],
    })
}

/// Checks one transaction against the three witnesses with the guarantees every
/// checker shares ([`evidence::check`]), and files each finding under the report's
/// heading for its violation.
fn check(
    id: &str,
    rec: Option<&TransactionRecord>,
    audit: &[AuditEntry],
    seen: &BTreeMap<u32, Seen>,
    obs: &Observations,
    r: &mut Report,
) {
    if let Some(rec) = rec {
        *r.statuses
            .entry(rec.status.as_str().to_owned())
            .or_insert(0) += 1;
        if rec.status.is_terminal() {
            *r.retries_histogram
                .entry(rec.current_attempt.get() - 1)
                .or_insert(0) += 1;
            let (rows, _) = evidence::link(audit);
            for why in evidence::time_inversions(&rows) {
                r.audit_time_order.push(Finding::ours(id, why));
            }
        }
    }
    for f in evidence::check(rec, audit, seen) {
        let heading = match f.violation {
            Violation::Lost => &mut r.lost,
            Violation::DuplicateAccepted => &mut r.duplicated,
            Violation::ExceededMaxAttempts => &mut r.exceeded,
            Violation::Stuck => &mut r.stuck,
            Violation::AuditGap => &mut r.audit_gaps,
            _ => &mut r.unexpected,
        };
        let (side, evidence) = classify(id, f.violation, rec, seen, obs);
        heading.push(Finding {
            transaction_id: id.to_owned(),
            why: f.why,
            side,
            evidence,
        });
    }
}

/// Which side a finding points at, and the evidence: what the service saw, how the
/// audit stream stood, when the scheduler emulator delivered.
fn classify(
    id: &str,
    violation: Violation,
    rec: Option<&TransactionRecord>,
    seen: &BTreeMap<u32, Seen>,
    obs: &Observations,
) -> (Side, String) {
    let dlq = |q: &str| obs.dlq.get(q).copied().unwrap_or(0);
    let Some(rec) = rec else {
        let keys: Vec<String> = seen.keys().map(|k| format!("{id}#{k}")).collect();
        let sent = if keys.is_empty() {
            "its start was acknowledged; the service saw no request".to_owned()
        } else {
            format!(
                "state item missing although its request left (the service saw request {})",
                keys.join(", ")
            )
        };
        return (Side::StateStore, sent);
    };
    match violation {
        Violation::AuditGap => match obs.audit_wait {
            Some(AuditWait::Stalled {
                idle_seconds,
                rows_written,
                failed_passes,
            }) => (
                Side::AuditBehind,
                format!(
                    "audit behind the state {}: stream not drained, the writer wrote nothing for {idle_seconds} s ({rows_written} rows written, {failed_passes} failed passes); audit DLQ holds {}",
                    rec.status,
                    dlq("audit")
                ),
            ),
            Some(AuditWait::Drained { .. }) => (
                Side::AuditLost,
                format!(
                    "the stream was read to its end after the state ({}) was read, yet the trail misses it; audit DLQ holds {}",
                    rec.status,
                    dlq("audit")
                ),
            ),
            None => (
                Side::AuditBehind,
                format!(
                    "the audit stream was not watched; audit DLQ holds {}",
                    dlq("audit")
                ),
            ),
        },
        Violation::Stuck => stuck(id, rec, seen, obs),
        _ => (Side::Functions, String::new()),
    }
}

/// Evidence of a transaction that did not end: its pending retry's schedule, or
/// its request and the service's answer.
fn stuck(
    id: &str,
    rec: &TransactionRecord,
    seen: &BTreeMap<u32, Seen>,
    obs: &Observations,
) -> (Side, String) {
    let dlq = |q: &str| obs.dlq.get(q).copied().unwrap_or(0);
    if let (Some(m), Some(fire_at)) = (rec.next_attempt, rec.next_fire_at) {
        let name = domain::ScheduleName::for_retry(&rec.transaction_id, m);
        return match obs.deliveries.get(name.as_str()) {
            Some(d) if d.own_drift_ms() > SCHEDULER_PROMISE_MS => (
                Side::Emulator,
                format!(
                    "emulator delivery late (schedule {name} fired at {}, delivered at +{} ms, past EventBridge's 60 s)",
                    d.fire_at,
                    d.drift_ms()
                ),
            ),
            Some(d) => (
                Side::Functions,
                format!(
                    "schedule {name} delivered on time (fired at {}, delivered at +{} ms); the retry event was not applied yet: the retry queue holds {} messages, its DLQ {}",
                    d.fire_at,
                    d.drift_ms(),
                    obs.queued.get("retry").copied().unwrap_or(0),
                    dlq("retry")
                ),
            ),
            None if rec.status == Status::Scheduled => (
                Side::Emulator,
                format!(
                    "emulator never delivered schedule {name} due at {fire_at} ({} schedules left)",
                    obs.schedules_left
                ),
            ),
            None => (
                Side::Functions,
                format!("no schedule {name} delivered; the record is {}", rec.status),
            ),
        };
    }
    let n = rec.current_attempt.get();
    match seen.get(&n) {
        Some(s) => (
            Side::Functions,
            format!(
                "the service answered {:?} to request {id}#{n}; the answer was not applied (response DLQ holds {})",
                s.outcome,
                dlq("response")
            ),
        ),
        None => (
            Side::Functions,
            format!(
                "request {id}#{n} never reached the service (request DLQ holds {}, {} requests taken and never answered)",
                dlq("request"),
                obs.dropped_silently
            ),
        ),
    }
}

/// Builds the report from what the demo observed.
pub fn build(obs: &Observations) -> Report {
    let mut r = Report {
        attempted: obs.submitted.len(),
        statuses: BTreeMap::new(),
        retries_histogram: BTreeMap::new(),
        requests_raw: obs.service.values().map(|s| u64::from(s.raw)).sum(),
        dropped_silently: obs.dropped_silently,
        requests_deduped: obs.service.len() as u64,
        peak_requests_per_second: obs.peak_requests_per_second,
        peak_retried_per_second: obs.peak_retried_per_second,
        peak_published_per_second: obs.peak_published_per_second,
        delivery: obs.delivery.as_str().to_owned(),
        rate_bound: obs.rate_bound,
        drift_ms: percentiles(&{
            let mut d = obs.drift_ms.clone();
            d.sort_unstable();
            d
        }),
        own_drift_ms: percentiles(&{
            let mut d: Vec<i64> = obs
                .deliveries
                .values()
                .map(Delivery::own_drift_ms)
                .collect();
            d.sort_unstable();
            d
        }),
        drift_parts_ms: {
            let parts: Vec<(i64, i64, i64)> =
                obs.deliveries.values().map(Delivery::parts_ms).collect();
            let of = |f: fn(&(i64, i64, i64)) -> i64| {
                let mut v: Vec<i64> = parts.iter().map(f).collect();
                v.sort_unstable();
                percentiles(&v)
            };
            match (of(|p| p.0), of(|p| p.1), of(|p| p.2)) {
                (Some(a), Some(b), Some(c)) => Some([a, b, c]),
                _ => None,
            }
        },
        audit_wait: obs.audit_wait,
        audit_waited_seconds: obs.audit_waited.as_secs_f64(),
        seed: obs.seed,
        dlq: obs.dlq.clone(),
        schedules_left: obs.schedules_left,
        lost: vec![],
        duplicated: vec![],
        exceeded: vec![],
        stuck: vec![],
        unexpected: vec![],
        audit_gaps: vec![],
        audit_time_order: vec![],
        functions: obs.functions.clone(),
        scheduler: obs.scheduler.clone(),
        reconciler: obs.reconciler.clone(),
        elapsed_seconds: obs.elapsed.as_secs_f64(),
        chaos: obs.chaos.clone(),
        breaker: None,
        service_runs: obs
            .service_dedup
            .runs_every_message()
            .then(|| ServiceRuns::of(obs.service_dedup, obs.delivery, &obs.runs)),
    };
    // Outbox delivery publishes each (transaction, attempt) once: an attempt a
    // service that does not deduplicate ran twice broke that.
    if obs.delivery.is_outbox() {
        for ((id, attempt), again) in &obs.runs.executed_twice {
            let runs = obs.runs.per_attempt.get(&(id.clone(), *attempt)).copied();
            r.duplicated.push(Finding::ours(
                id,
                format!(
                    "attempt {attempt} executed {} times by a service that does not deduplicate ({again} runs beyond the first): outbox delivery publishes each attempt once",
                    runs.unwrap_or(0)
                ),
            ));
        }
    }
    let mut by_tx: HashMap<&str, BTreeMap<u32, Seen>> = HashMap::new();
    for ((id, attempt), s) in &obs.service {
        by_tx.entry(id.as_str()).or_default().insert(*attempt, *s);
    }
    let empty_seen = BTreeMap::new();
    let empty_audit = Vec::new();
    let mut submitted: Vec<&String> = obs.submitted.iter().collect();
    submitted.sort();
    submitted.dedup();
    for id in &submitted {
        check(
            id,
            obs.records.get(id.as_str()),
            obs.audit.get(id.as_str()).unwrap_or(&empty_audit),
            by_tx.get(id.as_str()).unwrap_or(&empty_seen),
            obs,
            &mut r,
        );
    }
    // Requests for transactions nobody started.
    for id in by_tx.keys() {
        if !obs.submitted.iter().any(|s| s == id) {
            r.unexpected.push(Finding::ours(
                id,
                "the external service received a request for a transaction the workload never started".into(),
            ));
        }
    }
    r.breaker = obs.breaker.as_ref().map(|b| breaker_report(b, obs));
    r
}

/// The breaker's section: its changes, the pauses, and the outage's checks.
fn breaker_report(b: &BreakerObserved, obs: &Observations) -> BreakerReport {
    let since = |ms: i64| (ms - b.run_started_ms) as f64 / 1000.0;
    let changes: Vec<&BreakerLogEntry> = b
        .changes
        .iter()
        .filter(|c| c.change != domain::breaker::Change::ProbeAdmitted.label())
        .collect();
    let closed_ms = changes
        .iter()
        .rev()
        .find(|c| c.to == "CLOSED")
        .map(|c| c.at.millis());
    let after: Vec<i64> = match closed_ms {
        Some(t) => b.publish_ms.iter().copied().filter(|p| *p >= t).collect(),
        None => vec![],
    };
    let mut failed_by_outage = Vec::new();
    let mut attempts_changed = Vec::new();
    let mut expired = Vec::new();
    let (mut paused, mut resumed, mut not_terminal) = (0, 0, 0);
    let mut ids: Vec<&String> = obs.submitted.iter().collect();
    ids.sort();
    ids.dedup();
    for id in ids {
        let Some(rec) = obs.records.get(id.as_str()) else {
            continue;
        };
        // Held: a retry event of it deferred while the breaker held requests back;
        // resumed: it went IN_PROGRESS (its request out) after its first hold.
        let first_hold = b
            .held
            .iter()
            .filter(|(t, _)| t == id)
            .map(|(_, at)| *at)
            .min();
        if let Some(first) = first_hold {
            paused += 1;
            let rows = obs.audit.get(id.as_str()).map(Vec::as_slice).unwrap_or(&[]);
            if rows
                .iter()
                .any(|e| e.to == Status::InProgress && e.at.millis() > first)
            {
                resumed += 1;
            }
        }
        if !rec.status.is_terminal() {
            not_terminal += 1;
            continue;
        }
        // Resolved by an operator: ended by other means than the script.
        if rec.last_actor == domain::machine::Actor::Operator {
            continue;
        }
        let (used, max) = (rec.current_attempt.get(), rec.max_attempts.get());
        if rec.mark == Some(domain::machine::Mark::Expired) {
            expired.push(Finding::ours(
                id,
                format!("FAILED/EXPIRED at attempt {used}/{max}"),
            ));
            continue;
        }
        let scripted = scripted_attempts(obs.seed, b.cancel_probability, id, max);
        let outage_reason = matches!(
            rec.mark,
            Some(domain::machine::Mark::TechnicalExhausted | domain::machine::Mark::Unanswered)
        );
        if used != scripted {
            attempts_changed.push(Finding::ours(
                id,
                format!("{used} attempts used, the service's script gives {scripted}"),
            ));
        }
        if rec.status == Status::Failed && (outage_reason || used != scripted) {
            failed_by_outage.push(Finding::ours(
                id,
                format!(
                    "FAILED at attempt {used}/{max}, reason {}, mark {}",
                    rec.last_reason.as_deref().unwrap_or("-"),
                    rec.mark.map_or("-", domain::machine::Mark::as_str)
                ),
            ));
        }
    }
    BreakerReport {
        mode: b.outage.mode.label().to_owned(),
        outage_start_seconds: b.outage.start.as_secs_f64(),
        outage_end_seconds: b.outage.end().as_secs_f64(),
        settings: b.settings.clone(),
        outage_errors: b.outage_errors,
        outage_silenced: b.outage_silenced,
        opened: changes
            .iter()
            .filter(|c| c.from == "CLOSED" && c.to == "OPEN")
            .count() as u64,
        changes: changes
            .iter()
            .map(|c| BreakerChangeLine {
                at_seconds: since(c.at.millis()),
                change: c.change.clone(),
                from: c.from.clone(),
                to: c.to.clone(),
            })
            .collect(),
        closed_at_seconds: closed_ms.map(since),
        final_state: b.state.clone(),
        retries_paused: obs
            .functions
            .get(retry_handler::FUNCTION)
            .and_then(|m| m.get(runtime::metrics::names::RETRIES_PAUSED_BY_BREAKER))
            .copied()
            .unwrap_or(0),
        transactions_paused: paused,
        transactions_resumed: resumed,
        failed_by_outage,
        attempts_changed,
        expired,
        not_terminal,
        peak_after_close: crate::local::external::max_in_any_second(&after),
        rate_bound: obs.rate_bound,
    }
}

fn render_breaker(s: &mut String, b: &BreakerReport) {
    let _ = writeln!(
        s,
        "outage             {:.0} s to {:.0} s of the run, mode {}: {} requests answered ERROR, {} taken unanswered",
        b.outage_start_seconds, b.outage_end_seconds, b.mode, b.outage_errors, b.outage_silenced
    );
    let _ = writeln!(s, "breaker            {}", b.settings.join(" "));
    for c in b.changes.iter().take(20) {
        let _ = writeln!(
            s,
            "  {:>7.1} s        {:<11} {} → {}",
            c.at_seconds, c.change, c.from, c.to
        );
    }
    if b.changes.len() > 20 {
        let _ = writeln!(s, "  … and {} more changes", b.changes.len() - 20);
    }
    let _ = writeln!(
        s,
        "  opened {} time(s), last closed at {}, state at the end {}",
        b.opened,
        b.closed_at_seconds
            .map_or("never".to_owned(), |t| format!("{t:.1} s")),
        b.final_state
    );
    let _ = writeln!(
        s,
        "  retries held     {} (RetriesPausedByBreaker), {} transactions held, {} of them resumed (IN_PROGRESS again)",
        b.retries_paused, b.transactions_paused, b.transactions_resumed
    );
    let _ = writeln!(
        s,
        "  peak after close {} retried requests in any 1 s after the last close (fleet bound {:.0}/s)",
        b.peak_after_close, b.rate_bound
    );
    let _ = writeln!(s, "breaker checks");
    let mark = |ok: bool| if ok { "ok" } else { "FAILED" };
    let _ = writeln!(
        s,
        "  FAILED by the outage          {} {}",
        b.failed_by_outage.len(),
        mark(b.failed_by_outage.is_empty())
    );
    for f in b.failed_by_outage.iter().take(10) {
        let _ = writeln!(s, "    {}: {}", f.transaction_id, f.why);
    }
    let _ = writeln!(
        s,
        "  attempts changed by it        {} {}",
        b.attempts_changed.len(),
        mark(b.attempts_changed.is_empty())
    );
    for f in b.attempts_changed.iter().take(10) {
        let _ = writeln!(s, "    {}: {}", f.transaction_id, f.why);
    }
    let _ = writeln!(
        s,
        "  ended EXPIRED at the deadline {} (TransactionsExpired: held past TRANSACTION_DEADLINE_SECONDS)",
        b.expired.len()
    );
    for f in b.expired.iter().take(10) {
        let _ = writeln!(s, "    {}: {}", f.transaction_id, f.why);
    }
    let _ = writeln!(
        s,
        "  breaker CLOSED at the end     {} {}",
        b.final_state,
        mark(b.final_state == "CLOSED")
    );
    let _ = writeln!(
        s,
        "  not terminal                  {} {}",
        b.not_terminal,
        mark(b.not_terminal == 0)
    );
    let _ = writeln!(
        s,
        "  peak rate after the close     {} ≤ {:.0} {}",
        b.peak_after_close,
        b.rate_bound,
        mark(f64::from(b.peak_after_close) <= b.rate_bound)
    );
}

/// The report as text.
pub fn render(r: &Report) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "deferred-retry demo report");
    let _ = writeln!(s, "==========================");
    let _ = writeln!(
        s,
        "transactions       attempted {}, finished in {:.1} s, seed {}",
        r.attempted, r.elapsed_seconds, r.seed
    );
    let statuses: Vec<String> = Status::ALL
        .iter()
        .filter_map(|st| {
            let n = r.count(*st);
            (n > 0 || st.is_terminal()).then(|| format!("{st} {n}"))
        })
        .collect();
    let _ = writeln!(s, "final status       {}", statuses.join(", "));
    let hist: Vec<String> = r
        .retries_histogram
        .iter()
        .map(|(k, n)| format!("{k}: {n}"))
        .collect();
    let _ = writeln!(s, "retries per tx     {}", hist.join(", "));
    let total: u64 = r.retries_histogram.values().sum();
    let max_n = r
        .retries_histogram
        .values()
        .copied()
        .max()
        .unwrap_or(0)
        .max(1);
    for (k, n) in &r.retries_histogram {
        let bar = "#".repeat(((n * 40).div_ceil(max_n)) as usize);
        let pct = if total == 0 {
            0.0
        } else {
            *n as f64 * 100.0 / total as f64
        };
        let _ = writeln!(s, "  {k} retries {n:>6} {pct:>5.1} % {bar}");
    }
    let _ = writeln!(
        s,
        "external service   {} requests received, {} after dedupe by idempotency key ({} duplicates absorbed)",
        r.requests_raw,
        r.requests_deduped,
        r.requests_raw.saturating_sub(r.requests_deduped)
    );
    if r.dropped_silently > 0 {
        let count = |k: &str| r.reconciler.get(k).copied().unwrap_or(0);
        let _ = writeln!(
            s,
            "answer deadlines   {} requests taken and never answered by the service; {} entries moved to their deadline, {} requests published again (same key), {} transactions FAILED/UNANSWERED",
            r.dropped_silently,
            count("IN_PROGRESS/reconciler-awaiting"),
            count("IN_PROGRESS/reconciler-republished"),
            count("IN_PROGRESS/unanswered"),
        );
    }
    let _ = writeln!(
        s,
        "outbound rate      retried requests in any 1 s: {} leaving the {} (fleet bound {:.0}/s), {} as SQS stamped them; {} counting first attempts",
        r.peak_published_per_second,
        if r.delivery == RequestDelivery::Outbox.as_str() {
            "publisher"
        } else {
            "retry handlers"
        },
        r.rate_bound,
        r.peak_retried_per_second,
        r.peak_requests_per_second
    );
    match &r.drift_ms {
        Some(p) => {
            let _ = writeln!(
                s,
                "fire-time drift    p50 {} ms, p99 {} ms, max {} ms over {} schedule deliveries (instant → message in the retry queue)",
                p.p50, p.p99, p.max, p.count
            );
            if let Some(o) = &r.own_drift_ms {
                let _ = writeln!(
                    s,
                    "  emulator's own   p50 {} ms, p99 {} ms, max {} ms (from the later of the instant and the schedule's creation; EventBridge Scheduler promises delivery within 60 s)",
                    o.p50, o.p99, o.max
                );
            }
            if let Some([d, st, se]) = &r.drift_parts_ms {
                let _ = writeln!(
                    s,
                    "  of which         read after due p99 {} ms, started after ready p99 {} ms, SendMessage p50 {} ms, p99 {} ms",
                    d.p99, st.p99, se.p50, se.p99
                );
            }
        }
        None => {
            let _ = writeln!(s, "fire-time drift    no schedule fired");
        }
    }
    match r.audit_wait {
        Some(AuditWait::Drained {
            rows_written,
            failed_passes,
        }) => {
            let _ = writeln!(
                s,
                "audit stream       drained after {:.1} s of waiting ({rows_written} rows written, {failed_passes} failed passes read again)",
                r.audit_waited_seconds
            );
        }
        Some(AuditWait::Stalled {
            idle_seconds,
            rows_written,
            failed_passes,
        }) => {
            let _ = writeln!(
                s,
                "audit stream       NOT drained: the writer wrote nothing for {idle_seconds} s, waited {:.1} s ({rows_written} rows written, {failed_passes} failed passes)",
                r.audit_waited_seconds
            );
        }
        None => {}
    }
    let dlq: Vec<String> = r.dlq.iter().map(|(k, v)| format!("{k} {v}")).collect();
    let _ = writeln!(s, "dead-letter queues {}", dlq.join(", "));
    let _ = writeln!(s, "schedules left     {}", r.schedules_left);
    for (f, counts) in &r.functions {
        let c: Vec<String> = counts
            .iter()
            .filter(|(_, v)| **v > 0)
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        let _ = writeln!(s, "{f:<18} {}", c.join(", "));
    }
    if !r.scheduler.is_empty() {
        let c: Vec<String> = r
            .scheduler
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        let _ = writeln!(s, "{:<18} {}", "scheduler", c.join(", "));
    }
    if !r.reconciler.is_empty() {
        let c: Vec<String> = r
            .reconciler
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        let _ = writeln!(s, "{:<18} {}", "reconciler", c.join(", "));
    }
    if let Some(c) = &r.chaos {
        render_chaos(&mut s, c);
    }
    if let Some(b) = &r.breaker {
        render_breaker(&mut s, b);
    }
    let _ = writeln!(s, "checks");
    for (name, list) in [
        ("lost", &r.lost),
        ("duplicated", &r.duplicated),
        ("exceeded max", &r.exceeded),
        ("stuck", &r.stuck),
        ("unexpected", &r.unexpected),
        ("audit gaps", &r.audit_gaps),
    ] {
        let _ = writeln!(s, "  {name:<14} {}", list.len());
        for f in list.iter().take(10) {
            let _ = write!(s, "    {}: {} [{}", f.transaction_id, f.why, f.side.label());
            if !f.evidence.is_empty() {
                let _ = write!(s, ": {}", f.evidence);
            }
            let _ = writeln!(s, "]");
        }
        if list.len() > 10 {
            let _ = writeln!(s, "    … and {} more", list.len() - 10);
        }
    }
    if !r.audit_time_order.is_empty() {
        let _ = writeln!(
            s,
            "  note: {} audit row(s) carry an earlier time than the transition before them (not a failure):",
            r.audit_time_order.len()
        );
        for f in r.audit_time_order.iter().take(5) {
            let _ = writeln!(s, "    {}: {}", f.transaction_id, f.why);
        }
    }
    if let Some(sr) = &r.service_runs {
        render_service_runs(&mut s, sr);
    }
    let _ = writeln!(
        s,
        "result             {}",
        if r.ok() && r.breaker.is_some() {
            "OK: every transaction terminal, none lost, none duplicated, none FAILED and no attempt consumed by the outage"
        } else if r.ok() {
            "OK: every transaction terminal, none lost, none duplicated"
        } else {
            "FAILED: see the checks above"
        }
    );
    if let Some(sr) = r
        .service_runs
        .as_ref()
        .filter(|sr| sr.executed_twice > 0 && sr.delivery == RequestDelivery::Direct.as_str())
    {
        let _ = writeln!(
            s,
            "warning            executed twice {}: {} delivery sent {} attempt(s) again ({} runs beyond the first) and a service that does not deduplicate ran them again; {} delivery needs a service that deduplicates by idempotency key (docs/design.md#preconditions)",
            sr.executed_twice, sr.delivery, sr.executed_twice, sr.runs_beyond_first, sr.delivery
        );
    }
    if let Some(c) = r.chaos.as_ref().filter(|_| !r.ok()) {
        let _ = writeln!(
            s,
            "reproduce          retryctl demo --chaos {} --seed {} with the same flags (the same fault decisions per operation)",
            c.profile, c.seed
        );
    }
    s
}

/// The runs of a service that does not deduplicate, and the first attempts it ran
/// twice.
fn render_service_runs(s: &mut String, sr: &ServiceRuns) {
    let _ = writeln!(
        s,
        "service runs       {} service, {} delivery: {} attempts run, {} runs; executed twice {} ({} runs beyond the first); {} copies of a message delivered again (not runs)",
        sr.service,
        sr.delivery,
        sr.attempts_run,
        sr.runs,
        sr.executed_twice,
        sr.runs_beyond_first,
        sr.redelivered_copies
    );
    let per_attempt: Vec<String> = sr
        .attempts_by_runs
        .iter()
        .map(|(runs, attempts)| match runs {
            1 => format!("once {attempts}"),
            2 => format!("twice {attempts}"),
            n => format!("{n} times {attempts}"),
        })
        .collect();
    let _ = writeln!(
        s,
        "  executions per attempt: {}",
        if per_attempt.is_empty() {
            "none".to_owned()
        } else {
            per_attempt.join(", ")
        }
    );
    for (key, n) in sr.doubles.iter().take(10) {
        let _ = writeln!(s, "  {key} run {n} times");
    }
    if sr.doubles.len() > 10 {
        let _ = writeln!(s, "  … and {} more", sr.doubles.len() - 10);
    }
}

fn render_chaos(s: &mut String, c: &ChaosReport) {
    let _ = writeln!(
        s,
        "chaos              profile {}, seed {}; {} transaction(s) resolved by an operator",
        c.profile, c.seed, c.resolved
    );
    let kinds = testkit::faults::FaultKind::ALL.iter().map(|k| k.label());
    let _ = write!(s, "  {:<30}", "faults injected");
    for k in kinds.clone() {
        let _ = write!(s, " {k:>13}");
    }
    let _ = writeln!(s);
    for (op, by_kind) in &c.injected {
        let _ = write!(s, "  {op:<30}");
        for k in kinds.clone() {
            let _ = write!(s, " {:>13}", by_kind.get(k).copied().unwrap_or(0));
        }
        let _ = writeln!(s);
    }
    if !c.process.is_empty() {
        let p: Vec<String> = c.process.iter().map(|(k, v)| format!("{k} {v}")).collect();
        let _ = writeln!(s, "  process faults   {}", p.join(", "));
    }
    if c.not_injected.is_empty() {
        let _ = writeln!(s, "  every fault kind reached every mutating operation");
    } else {
        let _ = writeln!(s, "  not injected     {}", c.not_injected.join(", "));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use domain::Outcome;
    use domain::{Attempt, Timestamp, TransactionId};

    fn rec(id: &str, status: Status, current: u32, max: u32) -> TransactionRecord {
        let next = status.is_intermediate().then_some(current + 1);
        testkit::trail::record(
            TransactionId::parse(id).unwrap(),
            status,
            current,
            next,
            max,
        )
    }

    fn row(id: &str, at: i64, from: Option<Status>, to: Status, attempt: u32) -> AuditEntry {
        testkit::trail::entry(
            TransactionId::parse(id).unwrap(),
            at,
            from,
            to,
            Attempt::new(attempt).unwrap(),
        )
    }

    /// The full trail of a transaction that retried `retries` times and ended `end`.
    fn trail(id: &str, retries: u32, end: Status) -> Vec<AuditEntry> {
        use Status as S;
        let mut v = vec![row(id, 0, None, S::InProgress, 1)];
        let mut t = 0;
        for k in 1..=retries {
            for (from, to, a) in [
                (S::InProgress, S::Scheduling, k),
                (S::Scheduling, S::Scheduled, k),
                (S::Scheduled, S::Sending, k),
                (S::Sending, S::InProgress, k + 1),
            ] {
                t += 1;
                v.push(row(id, t, Some(from), to, a));
            }
        }
        v.push(row(id, t + 1, Some(S::InProgress), end, retries + 1));
        v
    }

    fn seen(outcomes: &[Outcome]) -> Vec<(u32, Seen)> {
        outcomes
            .iter()
            .enumerate()
            .map(|(i, o)| {
                (
                    u32::try_from(i + 1).unwrap(),
                    Seen {
                        raw: 1,
                        outcome: *o,
                    },
                )
            })
            .collect()
    }

    type Tx<'a> = (
        &'a str,
        TransactionRecord,
        Vec<AuditEntry>,
        Vec<(u32, Seen)>,
    );

    fn obs_for(txs: &[Tx<'_>]) -> Observations {
        let mut o = Observations::default();
        for (id, r, a, s) in txs {
            o.submitted.push((*id).to_owned());
            o.records.insert((*id).to_owned(), r.clone());
            o.audit.insert((*id).to_owned(), a.clone());
            for (k, v) in s {
                o.service.insert(((*id).to_owned(), *k), *v);
            }
        }
        o
    }

    use Outcome::{Cancelled as C, Success as OK};

    /// GIVEN a service that does not deduplicate and one attempt it ran twice WHEN the
    /// run delivered directly THEN the double is warned about and the run is OK; WHEN
    /// it delivered through the outbox THEN it is a finding and the run fails. Either
    /// way the executions per attempt are reported.
    #[test]
    fn a_double_is_a_warning_in_direct_delivery_and_a_finding_in_outbox_delivery() {
        let mut o = obs_for(&[(
            "A",
            rec("A", Status::Succeeded, 2, 4),
            trail("A", 1, Status::Succeeded),
            seen(&[C, OK]),
        )]);
        o.service_dedup = ServiceDedup::NonIdempotent;
        let key = |a: u32| ("A".to_owned(), a);
        o.runs = RunsSeen {
            per_attempt: BTreeMap::from([(key(1), 1), (key(2), 2)]),
            executed_twice: BTreeMap::from([(key(2), 1)]),
            redelivered: 0,
        };
        let direct = build(&o);
        assert!(direct.ok(), "{:?}", direct.duplicated);
        let text = render(&direct);
        assert!(
            text.contains("warning            executed twice 1: direct delivery"),
            "{text}"
        );
        assert!(
            text.contains("executions per attempt: once 1, twice 1"),
            "{text}"
        );

        o.delivery = RequestDelivery::Outbox;
        let outbox = build(&o);
        assert!(!outbox.ok());
        assert_eq!(outbox.duplicated.len(), 1);
        assert!(outbox.duplicated[0]
            .why
            .contains("attempt 2 executed 2 times"));
        let text = render(&outbox);
        assert!(
            text.contains("outbox delivery: 2 attempts run, 3 runs"),
            "{text}"
        );
        assert!(
            !text.contains("warning            executed twice"),
            "{text}"
        );
    }

    #[test]
    fn consistent_transactions_pass_every_check() {
        let o = obs_for(&[
            (
                "A",
                rec("A", Status::Succeeded, 1, 4),
                trail("A", 0, Status::Succeeded),
                seen(&[OK]),
            ),
            (
                "B",
                rec("B", Status::Succeeded, 3, 4),
                trail("B", 2, Status::Succeeded),
                seen(&[C, C, OK]),
            ),
            (
                "C",
                rec("C", Status::Failed, 4, 4),
                trail("C", 3, Status::Failed),
                seen(&[C, C, C, C]),
            ),
        ]);
        let r = build(&o);
        assert!(r.ok(), "{}", render(&r));
        assert_eq!(r.count(Status::Succeeded), 2);
        assert_eq!(r.count(Status::Failed), 1);
        assert_eq!(
            r.retries_histogram,
            BTreeMap::from([(0, 1), (2, 1), (3, 1)])
        );
        assert_eq!(r.requests_raw, 8);
        assert_eq!(r.requests_deduped, 8);
        assert!(render(&r).contains("result             OK"));
    }

    #[test]
    fn each_kind_of_violation_is_reported_with_its_reason() {
        let mut dup_seen = seen(&[C, OK]);
        dup_seen.push((
            3,
            Seen {
                raw: 1,
                outcome: OK,
            },
        ));
        let mut dup_trail = trail("D", 1, Status::Succeeded);
        let extra = row("D", 2, Some(Status::Sending), Status::InProgress, 2);
        dup_trail.push(extra);
        let mut o = obs_for(&[
            // A retry lost: FAILED before the budget was spent.
            (
                "L",
                rec("L", Status::Failed, 2, 4),
                trail("L", 1, Status::Failed),
                seen(&[C, C]),
            ),
            // A request that the state never accounts for, and a doubled publish.
            ("D", rec("D", Status::Succeeded, 2, 4), dup_trail, dup_seen),
            // Stuck in SCHEDULED.
            (
                "S",
                rec("S", Status::Scheduled, 1, 4),
                trail("S", 0, Status::InProgress),
                seen(&[C]),
            ),
            // The audit trail misses a row.
            (
                "G",
                rec("G", Status::Succeeded, 2, 4),
                trail("G", 1, Status::Succeeded)[1..].to_vec(),
                seen(&[C, OK]),
            ),
        ]);
        o.submitted.push("M".into()); // never created
        let r = build(&o);
        assert!(!r.ok());
        let ids = |v: &[Finding]| {
            v.iter()
                .map(|f| f.transaction_id.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(ids(&r.lost), vec!["L", "M"], "{:?}", r.lost);
        assert_eq!(ids(&r.duplicated), vec!["D", "D"], "{:?}", r.duplicated);
        assert!(r.duplicated[0].why.contains("attempt 3"));
        assert!(r.duplicated[1].why.contains("published 2 times"));
        assert_eq!(ids(&r.stuck), vec!["S"]);
        assert!(r.stuck[0].why.starts_with("SCHEDULED"));
        assert_eq!(ids(&r.audit_gaps), vec!["D", "G"], "{:?}", r.audit_gaps);
        assert!(
            r.audit_gaps[1]
                .why
                .contains("audit row IN_PROGRESS → SCHEDULING (attempt 1"),
            "{:?}",
            r.audit_gaps
        );
        let text = render(&r);
        assert!(text.contains("result             FAILED"));
        assert!(text.contains("L: FAILED at attempt 2 with 4 attempts allowed"));
    }

    /// A row written with an earlier clock reading than the row before it (a run that
    /// re-decided after a failed condition keeps its first reading) is still linked
    /// into the chain: not a gap, but reported for information.
    #[test]
    fn rows_out_of_time_order_link_and_are_noted() {
        let mut t = trail("T", 1, Status::Succeeded);
        // SCHEDULING → SCHEDULED written "before" IN_PROGRESS → SCHEDULING.
        t[2].at = Timestamp::from_millis(-5);
        let o = obs_for(&[("T", rec("T", Status::Succeeded, 2, 4), t, seen(&[C, OK]))]);
        let r = build(&o);
        assert!(r.ok(), "{}", render(&r));
        assert_eq!(r.audit_time_order.len(), 1, "{:?}", r.audit_time_order);
        assert!(render(&r).contains("note: 1 audit row(s) carry an earlier time"));
    }

    fn sides(v: &[Finding]) -> Vec<(String, Side)> {
        v.iter()
            .map(|f| (f.transaction_id.clone(), f.side))
            .collect()
    }

    /// A missing item is the state store's; the evidence names the requests the
    /// service saw.
    #[test]
    fn a_missing_item_is_the_state_stores_with_the_requests_seen() {
        let mut o = obs_for(&[]);
        o.submitted.push("TX-M".into());
        o.service.insert(("TX-M".into(), 1), seen(&[C])[0].1);
        o.submitted.push("TX-N".into());
        let r = build(&o);
        assert_eq!(
            sides(&r.lost),
            vec![
                ("TX-M".into(), Side::StateStore),
                ("TX-N".into(), Side::StateStore)
            ]
        );
        assert!(
            r.lost[0].evidence.contains(
                "state item missing although its request left (the service saw request TX-M#1)"
            ),
            "{:?}",
            r.lost
        );
        assert!(
            r.lost[1].evidence.contains("saw no request"),
            "{:?}",
            r.lost
        );
        assert!(render(&r).contains("[state store: state item missing"));
    }

    /// An audit trail short of the state is behind when the stream was not drained
    /// (the writer stalled), lost when it was.
    #[test]
    fn an_audit_gap_is_behind_or_lost_by_how_the_stream_stood() {
        let short = || {
            let mut t = trail("G", 0, Status::Succeeded);
            t.pop();
            t
        };
        let mut o = obs_for(&[("G", rec("G", Status::Succeeded, 1, 4), short(), seen(&[OK]))]);
        o.dlq.insert("audit".into(), 2);
        o.audit_wait = Some(AuditWait::Stalled {
            idle_seconds: 30,
            rows_written: 10,
            failed_passes: 1,
        });
        let r = build(&o);
        assert_eq!(sides(&r.audit_gaps), vec![("G".into(), Side::AuditBehind)]);
        let e = &r.audit_gaps[0].evidence;
        assert!(
            e.contains("stream not drained, the writer wrote nothing for 30 s"),
            "{e}"
        );
        assert!(e.contains("audit DLQ holds 2"), "{e}");
        assert!(render(&r).contains("audit stream       NOT drained"));

        o.audit_wait = Some(AuditWait::Drained {
            rows_written: 10,
            failed_passes: 0,
        });
        let r = build(&o);
        assert_eq!(sides(&r.audit_gaps), vec![("G".into(), Side::AuditLost)]);
        assert!(r.audit_gaps[0].evidence.contains("read to its end"));
        assert!(render(&r).contains("audit stream       drained"));
    }

    fn scheduled(id: &str, fire_at: i64) -> TransactionRecord {
        let mut r = rec(id, Status::Scheduled, 1, 4);
        r.next_attempt = Some(Attempt::new(2).unwrap());
        r.next_fire_at = Some(Timestamp::from_millis(fire_at));
        r
    }

    fn delivery(fire_at: i64, delivered: i64) -> Delivery {
        Delivery {
            fire_at: Timestamp::from_millis(fire_at),
            defined_at: Some(Timestamp::from_millis(fire_at - 2_000)),
            read_at: Timestamp::from_millis(fire_at - 1_900),
            started_at: Timestamp::from_millis(fire_at),
            delivered_at: Timestamp::from_millis(delivered),
        }
    }

    /// A transaction stuck waiting for its retry points at the emulator when its
    /// schedule was never delivered or delivered past EventBridge's minute, at the
    /// functions when it was delivered on time.
    #[test]
    fn a_stuck_retry_points_at_the_emulator_only_when_its_delivery_failed() {
        let name = |id: &str| {
            domain::ScheduleName::for_retry(
                &TransactionId::parse(id).unwrap(),
                Attempt::new(2).unwrap(),
            )
            .as_str()
            .to_owned()
        };
        let t = trail("N", 0, Status::InProgress);
        let mut o = obs_for(&[
            ("N", scheduled("N", 10_000), t.clone(), seen(&[C])),
            ("L", scheduled("L", 10_000), t.clone(), seen(&[C])),
            ("T", scheduled("T", 10_000), t, seen(&[C])),
        ]);
        o.deliveries.insert(name("L"), delivery(10_000, 75_000));
        o.deliveries.insert(name("T"), delivery(10_000, 10_300));
        o.queued.insert("retry".into(), 7);
        let r = build(&o);
        let mut got = sides(&r.stuck);
        got.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(
            got,
            vec![
                ("L".into(), Side::Emulator),
                ("N".into(), Side::Emulator),
                ("T".into(), Side::Functions)
            ]
        );
        let by = |id: &str| r.stuck.iter().find(|f| f.transaction_id == id).unwrap();
        assert!(
            by("L").evidence.contains("emulator delivery late"),
            "{:?}",
            by("L")
        );
        assert!(by("L").evidence.contains("+65000 ms"), "{:?}", by("L"));
        assert!(
            by("N").evidence.contains("never delivered"),
            "{:?}",
            by("N")
        );
        assert!(
            by("T").evidence.contains("delivered on time"),
            "{:?}",
            by("T")
        );
        assert!(
            by("T")
                .evidence
                .contains("the retry queue holds 7 messages"),
            "{:?}",
            by("T")
        );
    }

    /// Drift is reported whole and as the emulator's own part.
    #[test]
    fn the_emulators_own_drift_is_reported_apart() {
        let mut o = obs_for(&[]);
        o.drift_ms = vec![3_000];
        let mut d = delivery(10_000, 13_000);
        d.defined_at = Some(Timestamp::from_millis(12_500));
        o.deliveries.insert("s".into(), d);
        let r = build(&o);
        assert_eq!(r.drift_ms.map(|p| p.p99), Some(3_000));
        assert_eq!(r.own_drift_ms.map(|p| p.p99), Some(500));
        assert!(render(&r).contains("emulator's own   p50 500 ms"));
    }

    #[test]
    fn percentiles_use_nearest_rank() {
        let v: Vec<i64> = (1..=100).collect();
        let p = percentiles(&v).unwrap();
        assert_eq!((p.p50, p.p99, p.max, p.count), (50, 99, 100, 100));
        assert_eq!(percentiles(&[]), None);
        let p = percentiles(&[7]).unwrap();
        assert_eq!((p.p50, p.p99), (7, 7));
    }
}
