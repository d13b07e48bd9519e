//! The seeded, deterministic fault-injection simulator.
//!
//! One simulation is a discrete-event run on a virtual clock: thousands of
//! transactions go through the real plans of the response handler, the retry handler
//! and the reconciler ([`domain::Run`]s, one effect per event), against
//!
//! - a state store with DynamoDB's conditional semantics ([`Write::apply`]) and the
//!   sparse, write-sharded reconciler index;
//! - at-least-once SQS queues: duplicate deliveries, reordering among the visible
//!   messages, visibility timeouts, redrive to a DLQ after `maxReceiveCount` receives;
//! - EventBridge Scheduler with one-minute precision, firing late, firing twice, or
//!   failing to deliver (its DLQ);
//! - crashes (a run stops before an effect), throttling (a port call fails with a
//!   retryable error), both leaving the message to reappear after its visibility timeout;
//! - the external service: deduplicates by idempotency key, cancels with a
//!   configurable probability, answers after a latency, sometimes again much later;
//! - the retry handler's outbound pacing (one publish per `1/rate` per warm instance,
//!   `concurrency` instances);
//! - the reconciler on a virtual cron.
//!
//! Everything random comes from one seed (SplitMix64 streams), nothing reads the wall
//! clock, and every collection iterates in a defined order: the same seed replays the
//! same run exactly (the report carries a digest of every event to prove it).

use crate::fixture;
use crate::Flaws;
use domain::decide::{Context, Disposition, DropReason, Effect, Input, Known, Observed, Run, Step};
use domain::defaults;
use domain::ids::{Attempt, IdempotencyKey, ScheduleName, Timestamp, TransactionId};
use domain::machine::{transition, Event, ReconcileKey, Status, TransactionRecord};
use domain::message::{Origin, Outcome, Payload, Request, Response, RetryEvent};
use domain::policy::{PolicySet, RandomSource, RetryPolicy, SplitMix64};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;
use std::time::Duration;

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
    pub flaws: Flaws,
}

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
            late_fire_rate: 0.05,
            double_fire_rate: 0.02,
            scheduler_failure_rate: 0.005,
            late_response_rate: 0.02,
            request_duplicate_rate: 0.02,
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
            flaws: Flaws::NONE,
        }
    }
}

impl SimConfig {
    /// The fleet bound on outbound requests per second.
    pub fn fleet_limit(&self) -> u64 {
        u64::from(self.rate_limit) * self.retry_concurrency as u64
    }

    fn policies(&self) -> PolicySet {
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

/// What a simulation observed. Counts add up over seeds ([`Report::merge`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    pub seeds: u64,
    pub attempted: u64,
    pub succeeded: u64,
    pub failed: u64,
    /// Not terminal at the end, and no DLQ holds a message for it: silently lost.
    pub lost: u64,
    /// Not terminal at the end (lost ones included).
    pub stuck: u64,
    /// Stuck with a message in a DLQ (its alarm fires; an operator redrives it).
    pub stuck_in_dlq: u64,
    /// Requests accepted by the service beyond one per cancellation.
    pub duplicated: u64,
    pub exceeded_max: u64,
    /// Late responses that changed a record.
    pub late_applied: u64,
    /// Late responses received and dropped.
    pub late_dropped: u64,
    pub illegal_transitions: u64,
    /// Schedules created with another instant than the persisted one.
    pub instant_mismatches: u64,
    /// Retry events for the pending attempt that the retry handler discarded.
    pub pending_retries_dropped: u64,
    /// Messages a handler rejected as permanently failed.
    pub rejected: u64,
    /// FAILED transactions that raised no business alert.
    pub alerts_missing: u64,
    pub alerts: u64,
    pub requests_published: u64,
    pub requests_deduplicated: u64,
    pub requests_accepted: u64,
    pub retry_requests_published: u64,
    /// Highest number of retry-handler publishes in any one-second window.
    pub max_requests_per_second: u64,
    /// The configured fleet bound (MaximumConcurrency × MAX_REQUESTS_PER_SECOND).
    pub rate_limit: u64,
    pub dlq_response: u64,
    pub dlq_retry: u64,
    pub dlq_scheduler: u64,
    pub crashes: u64,
    pub throttles: u64,
    pub duplicate_deliveries: u64,
    pub late_fires: u64,
    pub double_fires: u64,
    pub late_responses: u64,
    pub schedules_created: u64,
    pub schedule_conflicts: u64,
    pub reconciler_invocations: u64,
    pub reconciler_actions: u64,
    pub transitions: u64,
    pub events: u64,
    pub virtual_ms: i64,
    /// Crashes and throttles by failure point (`<handler> before <effect>`).
    pub failure_points: BTreeMap<String, u64>,
    /// A digest of every event processed, in order.
    pub digest: u64,
}

impl Report {
    /// Adds another seed's report.
    pub fn merge(&mut self, o: &Report) {
        macro_rules! add {
            ($($f:ident),*) => { $( self.$f += o.$f; )* };
        }
        add!(
            seeds,
            attempted,
            succeeded,
            failed,
            lost,
            stuck,
            stuck_in_dlq,
            duplicated,
            exceeded_max,
            late_applied,
            late_dropped,
            illegal_transitions,
            instant_mismatches,
            pending_retries_dropped,
            rejected,
            alerts_missing,
            alerts,
            requests_published,
            requests_deduplicated,
            requests_accepted,
            retry_requests_published,
            dlq_response,
            dlq_retry,
            dlq_scheduler,
            crashes,
            throttles,
            duplicate_deliveries,
            late_fires,
            double_fires,
            late_responses,
            schedules_created,
            schedule_conflicts,
            reconciler_invocations,
            reconciler_actions,
            transitions,
            events,
            virtual_ms
        );
        self.max_requests_per_second = self.max_requests_per_second.max(o.max_requests_per_second);
        self.rate_limit = self.rate_limit.max(o.rate_limit);
        for (k, v) in &o.failure_points {
            *self.failure_points.entry(k.clone()).or_default() += v;
        }
        self.digest = self.digest.rotate_left(7) ^ o.digest;
    }

    /// Every broken guarantee, by name and count.
    pub fn violations(&self) -> Vec<(&'static str, u64)> {
        let mut v = vec![
            ("lost", self.lost),
            ("duplicated", self.duplicated),
            ("exceeded-max", self.exceeded_max),
            ("late-applied", self.late_applied),
            ("illegal-transitions", self.illegal_transitions),
            ("instant-mismatches", self.instant_mismatches),
            ("pending-retries-dropped", self.pending_retries_dropped),
            ("rejected", self.rejected),
            ("alerts-missing", self.alerts_missing),
        ];
        if self.rate_limit > 0 && self.max_requests_per_second > self.rate_limit {
            v.push(("rate-limit-exceeded", self.max_requests_per_second));
        }
        v.retain(|(_, n)| *n > 0);
        v
    }

    pub fn is_valid(&self) -> bool {
        self.violations().is_empty()
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let flag = |n: u64| if n > 0 { "   <-- VIOLATION" } else { "" };
        writeln!(f, "seeds                      {:>12}", self.seeds)?;
        writeln!(f, "attempted                  {:>12}", self.attempted)?;
        writeln!(f, "  succeeded                {:>12}", self.succeeded)?;
        writeln!(f, "  failed (exhausted)       {:>12}", self.failed)?;
        writeln!(
            f,
            "  lost                     {:>12}{}",
            self.lost,
            flag(self.lost)
        )?;
        writeln!(
            f,
            "  stuck                    {:>12}   (in a DLQ, alarmed: {})",
            self.stuck, self.stuck_in_dlq
        )?;
        writeln!(
            f,
            "duplicated                 {:>12}{}",
            self.duplicated,
            flag(self.duplicated)
        )?;
        writeln!(
            f,
            "exceeded-max               {:>12}{}",
            self.exceeded_max,
            flag(self.exceeded_max)
        )?;
        writeln!(
            f,
            "late-applied               {:>12}{}   (late responses dropped: {})",
            self.late_applied,
            flag(self.late_applied),
            self.late_dropped
        )?;
        writeln!(
            f,
            "illegal transitions        {:>12}{}",
            self.illegal_transitions,
            flag(self.illegal_transitions)
        )?;
        writeln!(
            f,
            "instant mismatches         {:>12}{}",
            self.instant_mismatches,
            flag(self.instant_mismatches)
        )?;
        writeln!(
            f,
            "pending retries dropped    {:>12}{}",
            self.pending_retries_dropped,
            flag(self.pending_retries_dropped)
        )?;
        writeln!(
            f,
            "rejected messages          {:>12}{}",
            self.rejected,
            flag(self.rejected)
        )?;
        writeln!(
            f,
            "alerts missing             {:>12}{}   (business alerts raised: {})",
            self.alerts_missing,
            flag(self.alerts_missing),
            self.alerts
        )?;
        let over = self.rate_limit > 0 && self.max_requests_per_second > self.rate_limit;
        let limit = if self.rate_limit > 0 {
            self.rate_limit.to_string()
        } else {
            "none".into()
        };
        writeln!(
            f,
            "max retry requests in 1 s  {:>12}   (limit {limit}){}",
            self.max_requests_per_second,
            if over { "   <-- VIOLATION" } else { "" }
        )?;
        writeln!(
            f,
            "requests                   published {} (retries {}), deduplicated by key {}, accepted {}",
            self.requests_published, self.retry_requests_published, self.requests_deduplicated, self.requests_accepted
        )?;
        writeln!(
            f,
            "DLQ                        response {}, retry {}, scheduler {}",
            self.dlq_response, self.dlq_retry, self.dlq_scheduler
        )?;
        writeln!(
            f,
            "faults injected            crashes {}, throttles {}, duplicate deliveries {}, late fires {}, double fires {}, late responses {}",
            self.crashes, self.throttles, self.duplicate_deliveries, self.late_fires, self.double_fires, self.late_responses
        )?;
        writeln!(
            f,
            "work                       transitions {}, schedules {} (conflicts {}), reconciler invocations {} acting on {} records, events {}",
            self.transitions, self.schedules_created, self.schedule_conflicts, self.reconciler_invocations, self.reconciler_actions, self.events
        )?;
        writeln!(
            f,
            "virtual time               {:.1} h",
            self.virtual_ms as f64 / 3_600_000.0
        )?;
        writeln!(
            f,
            "failure points hit         {}",
            self.failure_points.len()
        )?;
        for (k, v) in &self.failure_points {
            writeln!(f, "  {k:<58} {v:>10}")?;
        }
        write!(f, "digest                     {:016x}", self.digest)
    }
}

// ---------------------------------------------------------------------------
// Randomness
// ---------------------------------------------------------------------------

/// A stream of the seed's randomness.
#[derive(Debug, Clone)]
struct Rng(SplitMix64);

impl Rng {
    fn new(seed: u64, stream: u64) -> Self {
        let mut mix = SplitMix64::new(seed ^ stream.wrapping_mul(0xA076_1D64_78BD_642F));
        Self(SplitMix64::new(mix.next_u64()))
    }

    fn unit(&mut self) -> f64 {
        self.0.next_unit()
    }

    fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && self.unit() < p
    }

    /// Uniform in `lo..=hi`.
    fn range(&mut self, lo: i64, hi: i64) -> i64 {
        if hi <= lo {
            return lo;
        }
        let span = u64::try_from(hi - lo + 1).unwrap_or(1);
        lo + i64::try_from(self.0.next_u64() % span).unwrap_or(0)
    }
}

impl RandomSource for Rng {
    fn next_unit(&mut self) -> f64 {
        self.unit()
    }
}

// ---------------------------------------------------------------------------
// Queues
// ---------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum QueueId {
    Response,
    Retry,
}

#[derive(Debug, Clone)]
struct Message<T> {
    body: T,
    receives: u32,
    visible_at: i64,
}

/// An SQS standard queue: at-least-once, reordering among visible messages.
#[derive(Debug)]
struct SimQueue<T> {
    messages: BTreeMap<u64, Message<T>>,
    /// (visible_at, id) of every message.
    order: BTreeSet<(i64, u64)>,
    dlq: Vec<T>,
    visibility_ms: i64,
    max_receive: u32,
    idle_workers: BTreeSet<usize>,
    wake_at: Option<i64>,
}

impl<T: Clone> SimQueue<T> {
    fn new(visibility_ms: i64, max_receive: u32, workers: usize) -> Self {
        Self {
            messages: BTreeMap::new(),
            order: BTreeSet::new(),
            dlq: Vec::new(),
            visibility_ms,
            max_receive,
            idle_workers: (0..workers.max(1)).collect(),
            wake_at: None,
        }
    }

    fn send(&mut self, id: u64, body: T, now: i64) {
        self.messages.insert(
            id,
            Message {
                body,
                receives: 0,
                visible_at: now,
            },
        );
        self.order.insert((now, id));
    }

    fn delete(&mut self, id: u64) {
        if let Some(m) = self.messages.remove(&id) {
            self.order.remove(&(m.visible_at, id));
        }
    }

    /// Picks one of the first few visible messages. Returns (id, body), after moving
    /// messages past maxReceiveCount to the DLQ (their bodies returned in `to_dlq`).
    fn receive(
        &mut self,
        now: i64,
        rng: &mut Rng,
        duplicate: bool,
        to_dlq: &mut Vec<T>,
    ) -> Option<(u64, T)> {
        loop {
            let visible: Vec<(i64, u64)> = self
                .order
                .iter()
                .take_while(|(at, _)| *at <= now)
                .take(8)
                .copied()
                .collect();
            if visible.is_empty() {
                return None;
            }
            let pick =
                visible[usize::try_from(rng.range(0, visible.len() as i64 - 1)).unwrap_or(0)];
            let id = pick.1;
            let Some(m) = self.messages.get_mut(&id) else {
                self.order.remove(&pick);
                continue;
            };
            m.receives += 1;
            if m.receives > self.max_receive {
                let body = m.body.clone();
                self.delete(id);
                self.dlq.push(body.clone());
                to_dlq.push(body);
                continue;
            }
            let body = m.body.clone();
            if !duplicate {
                self.order.remove(&pick);
                m.visible_at = now + self.visibility_ms;
                self.order.insert((m.visible_at, id));
            }
            return Some((id, body));
        }
    }

    fn next_visible_after(&self, now: i64) -> Option<i64> {
        self.order.iter().map(|(at, _)| *at).find(|at| *at > now)
    }

    fn is_empty(&self) -> bool {
        self.messages.is_empty()
    }
}

// ---------------------------------------------------------------------------
// The world
// ---------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    ResponseHandler,
    RetryHandler,
    Reconciler,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::ResponseHandler => "response-handler",
            Kind::RetryHandler => "retry-handler",
            Kind::Reconciler => "reconciler",
        }
    }
}

#[derive(Debug)]
struct Proc {
    kind: Kind,
    worker: usize,
    /// The queue message this run handles (none for the reconciler).
    msg: Option<u64>,
    tx: usize,
    /// Response attempt (A) or retry attempt (B).
    attempt: u32,
    run: Run<Flaws>,
    now: Timestamp,
    /// Records the reconciler still has to act on in this invocation.
    backlog: VecDeque<TransactionRecord>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Ev {
    Start(usize),
    Poll(QueueId),
    Step(u64),
    ServiceReceive {
        tx: usize,
        attempt: u32,
        key: String,
    },
    Answer {
        tx: usize,
        attempt: u32,
        outcome: Outcome,
    },
    Fire {
        name: ScheduleName,
        generation: u64,
    },
    ReconcilerTick,
}

#[derive(Debug, Clone)]
struct LiveSchedule {
    tx: usize,
    attempt: Attempt,
    generation: u64,
}

#[derive(Debug, Clone, Copy, Default)]
struct ServiceView {
    outcome: Option<Outcome>,
}

struct World<'a> {
    cfg: &'a SimConfig,
    policies: PolicySet,
    now: i64,
    seq: u64,
    events: BTreeMap<(i64, u64), Ev>,
    ids: Vec<TransactionId>,
    records: Vec<Option<TransactionRecord>>,
    payloads: Vec<Option<Payload>>,
    index: BTreeSet<(String, Timestamp, usize)>,
    responses: SimQueue<Response>,
    retries: SimQueue<RetryEvent>,
    schedules: BTreeMap<ScheduleName, LiveSchedule>,
    /// First instant a schedule was created with, per (tx, attempt).
    instants: BTreeMap<(usize, u32), Timestamp>,
    accepted_keys: BTreeSet<String>,
    accepted: BTreeMap<(usize, u32), ServiceView>,
    procs: BTreeMap<u64, Proc>,
    next_proc: u64,
    pacer: Vec<i64>,
    retry_publish_times: Vec<i64>,
    reconciler_busy: bool,
    /// Pending events other than polls and cron ticks.
    pending_work: u64,
    idle_ticks: u32,
    last_tick_found: usize,
    alerts: Vec<u32>,
    dlq_by_tx: Vec<u32>,
    faults: Rng,
    latency: Rng,
    service: Rng,
    jitter: Rng,
    queue_rng: Rng,
    report: Report,
}

const END_MS: i64 = 90 * 24 * 3_600_000;

fn ts(ms: i64) -> Timestamp {
    Timestamp::from_millis(ms)
}

impl<'a> World<'a> {
    fn new(cfg: &'a SimConfig, seed: u64) -> Self {
        let n = cfg.transactions;
        Self {
            cfg,
            policies: cfg.policies(),
            now: fixture::EPOCH_MS,
            seq: 0,
            events: BTreeMap::new(),
            ids: (0..n).map(fixture::tx_id).collect(),
            records: vec![None; n],
            payloads: vec![None; n],
            index: BTreeSet::new(),
            responses: SimQueue::new(
                cfg.response_visibility_ms,
                cfg.max_receive_count,
                cfg.response_concurrency,
            ),
            retries: SimQueue::new(
                cfg.retry_visibility_ms,
                cfg.max_receive_count,
                cfg.retry_concurrency,
            ),
            schedules: BTreeMap::new(),
            instants: BTreeMap::new(),
            accepted_keys: BTreeSet::new(),
            accepted: BTreeMap::new(),
            procs: BTreeMap::new(),
            next_proc: 0,
            pacer: vec![i64::MIN; cfg.retry_concurrency.max(1)],
            retry_publish_times: Vec::new(),
            reconciler_busy: false,
            pending_work: 0,
            idle_ticks: 0,
            last_tick_found: 0,
            alerts: vec![0; n],
            dlq_by_tx: vec![0; n],
            faults: Rng::new(seed, 1),
            latency: Rng::new(seed, 2),
            service: Rng::new(seed, 3),
            jitter: Rng::new(seed, 4),
            queue_rng: Rng::new(seed, 5),
            report: Report {
                seeds: 1,
                rate_limit: cfg.fleet_limit(),
                digest: 0xcbf2_9ce4_8422_2325,
                ..Report::default()
            },
        }
    }

    fn at(&mut self, time: i64, ev: Ev) {
        self.seq += 1;
        if !matches!(ev, Ev::Poll(_) | Ev::ReconcilerTick) {
            self.pending_work += 1;
        }
        self.events.insert((time, self.seq), ev);
    }

    fn ctx(&self, now: Timestamp) -> Context {
        fixture::context(
            now,
            &self.policies,
            Duration::from_millis(u64::try_from(self.cfg.reconcile_threshold_ms).unwrap_or(0)),
        )
    }

    fn tx_of(&self, id: &TransactionId) -> Option<usize> {
        id.as_str()
            .strip_prefix("TX-")
            .and_then(|n| n.parse::<usize>().ok())
            .filter(|n| *n < self.ids.len())
    }

    fn digest(&mut self, ev: &Ev) {
        let tag: u64 = match ev {
            Ev::Start(i) => 1 ^ (*i as u64) << 8,
            Ev::Poll(q) => 2 ^ (*q as u64) << 8,
            Ev::Step(p) => 3 ^ p << 8,
            Ev::ServiceReceive { tx, attempt, .. } => {
                4 ^ (*tx as u64) << 8 ^ u64::from(*attempt) << 40
            }
            Ev::Answer { tx, attempt, .. } => 5 ^ (*tx as u64) << 8 ^ u64::from(*attempt) << 40,
            Ev::Fire { generation, .. } => 6 ^ generation << 8,
            Ev::ReconcilerTick => 7,
        };
        let mut h = self.report.digest;
        for v in [tag, self.now as u64] {
            h ^= v;
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        self.report.digest = h;
    }

    // -- the store ---------------------------------------------------------

    fn set_record(&mut self, tx: usize, rec: TransactionRecord) {
        if let Some(old) = self.records[tx].as_ref().and_then(|r| r.reconcile.clone()) {
            self.index.remove(&(old.partition, old.at, tx));
        }
        if let Some(k) = rec.reconcile.clone() {
            self.index.insert((k.partition, k.at, tx));
        }
        self.records[tx] = Some(rec);
    }

    // -- effects -----------------------------------------------------------

    fn perform(&mut self, p: &Proc, effect: &Effect) -> Observed {
        match effect {
            Effect::Read(id) => {
                Observed::Record(self.tx_of(id).and_then(|tx| self.records[tx].clone()))
            }
            Effect::Create { record, payload } => {
                let Some(tx) = self.tx_of(&record.transaction_id) else {
                    return Observed::Created;
                };
                if let Some(existing) = self.records[tx].clone() {
                    let same = self.payloads[tx].as_ref() == Some(payload);
                    return Observed::AlreadyExists {
                        record: existing,
                        same_payload: same,
                    };
                }
                if transition(None, Event::Start) != Ok(record.status) {
                    self.report.illegal_transitions += 1;
                }
                self.payloads[tx] = Some(payload.clone());
                self.set_record(tx, record.clone());
                self.report.transitions += 1;
                Observed::Created
            }
            Effect::Write(w) => {
                let Some(tx) = self.tx_of(&w.transaction_id) else {
                    return Observed::ConditionFailed(None);
                };
                let Some(current) = self.records[tx].clone() else {
                    return Observed::ConditionFailed(None);
                };
                match w.apply(&current) {
                    Ok(next) => {
                        if transition(Some(current.status), w.event()) != Ok(next.status) {
                            self.report.illegal_transitions += 1;
                        }
                        if p.kind == Kind::ResponseHandler
                            && p.attempt < current.current_attempt.get()
                        {
                            self.report.late_applied += 1;
                        }
                        if next.current_attempt.get() > next.max_attempts.get() {
                            self.report.exceeded_max += 1;
                        }
                        self.set_record(tx, next.clone());
                        self.report.transitions += 1;
                        Observed::Written(next)
                    }
                    Err(_) => Observed::ConditionFailed(Some(current)),
                }
            }
            Effect::CreateSchedule(spec) => {
                let Some(tx) = self.tx_of(&spec.event.transaction_id) else {
                    return Observed::ScheduleCreated;
                };
                let m = spec.event.attempt;
                if let Some(rec) = &self.records[tx] {
                    let from_persisted =
                        rec.next_attempt == Some(m) && rec.next_fire_at == Some(spec.fire_at);
                    let moved_past = rec.current_attempt >= m || rec.status.is_terminal();
                    if !from_persisted && !moved_past {
                        self.report.instant_mismatches += 1;
                    }
                }
                let first = *self.instants.entry((tx, m.get())).or_insert(spec.fire_at);
                if first != spec.fire_at {
                    self.report.instant_mismatches += 1;
                }
                if self.schedules.contains_key(&spec.name) {
                    self.report.schedule_conflicts += 1;
                    return Observed::ScheduleAlreadyExists;
                }
                self.seq += 1;
                let generation = self.seq;
                self.schedules.insert(
                    spec.name.clone(),
                    LiveSchedule {
                        tx,
                        attempt: m,
                        generation,
                    },
                );
                self.report.schedules_created += 1;
                // One-minute precision: fires within the minute after its instant.
                let mut fire = spec.fire_at.millis().max(self.now) + self.latency.range(0, 59_000);
                if self.faults.chance(self.cfg.late_fire_rate) {
                    self.report.late_fires += 1;
                    fire += self.faults.range(60_000, 3_600_000);
                }
                self.at(
                    fire,
                    Ev::Fire {
                        name: spec.name.clone(),
                        generation,
                    },
                );
                Observed::ScheduleCreated
            }
            Effect::DeleteSchedule(name) => match self.schedules.remove(name) {
                Some(_) => Observed::ScheduleDeleted,
                None => Observed::ScheduleNotFound,
            },
            Effect::PublishRequest(h) => {
                let Some(tx) = self.tx_of(&h.transaction_id) else {
                    return Observed::Published;
                };
                let Some(payload) = self.payloads[tx].clone() else {
                    return Observed::Published;
                };
                let max = self.records[tx]
                    .as_ref()
                    .map(|r| r.max_attempts.get())
                    .unwrap_or(u32::MAX);
                if h.attempt.get() > max {
                    self.report.exceeded_max += 1;
                }
                let request = Request::new(h.transaction_id.clone(), h.attempt, payload);
                self.report.requests_published += 1;
                if p.kind == Kind::RetryHandler {
                    self.report.retry_requests_published += 1;
                    self.retry_publish_times.push(self.now);
                }
                let key = request.idempotency_key.as_str().to_owned();
                let arrive = self.now + self.latency.range(5, 100);
                self.at(
                    arrive,
                    Ev::ServiceReceive {
                        tx,
                        attempt: h.attempt.get(),
                        key: key.clone(),
                    },
                );
                if self.faults.chance(self.cfg.request_duplicate_rate) {
                    self.report.duplicate_deliveries += 1;
                    let again = self.now + self.latency.range(100, 5_000);
                    self.at(
                        again,
                        Ev::ServiceReceive {
                            tx,
                            attempt: h.attempt.get(),
                            key,
                        },
                    );
                }
                Observed::Published
            }
            Effect::PublishRetry(ev) => {
                self.seq += 1;
                let id = self.seq;
                self.retries.send(id, ev.clone(), self.now);
                self.poll_soon(QueueId::Retry);
                Observed::Published
            }
            Effect::Alert(a) => {
                if let Some(tx) = self.tx_of(&a.transaction_id) {
                    self.alerts[tx] += 1;
                    self.report.alerts += 1;
                }
                Observed::Alerted
            }
            Effect::Ack(_) | Effect::Drop(_) | Effect::Reject(_) => Observed::Published,
        }
    }

    // -- processes ---------------------------------------------------------

    fn spawn(&mut self, p: Proc) {
        self.next_proc += 1;
        let pid = self.next_proc;
        let first = self.now + self.latency.range(1, 20);
        self.procs.insert(pid, p);
        self.at(first, Ev::Step(pid));
    }

    fn step(&mut self, pid: u64) {
        let Some(mut p) = self.procs.remove(&pid) else {
            return;
        };
        let effect = match p.run.step() {
            Step::Done(d) => {
                let d = d.clone();
                self.finish(pid, p, Some(d));
                return;
            }
            Step::Perform(e) => e.clone(),
        };
        let paced = matches!(effect, Effect::PublishRequest(_))
            && p.kind == Kind::RetryHandler
            && self.cfg.pacing;
        if paced && self.now < self.pacer[p.worker] {
            let slot = self.pacer[p.worker];
            self.procs.insert(pid, p);
            self.at(slot, Ev::Step(pid));
            return;
        }
        if self.faults.chance(self.cfg.crash_rate) {
            self.report.crashes += 1;
            self.count_point("crash", &p, &effect);
            self.finish(pid, p, None);
            return;
        }
        if self.faults.chance(self.cfg.throttle_rate) {
            self.report.throttles += 1;
            self.count_point("throttle", &p, &effect);
            self.finish(pid, p, None);
            return;
        }
        if paced {
            // One publish per ceil(1000 / rate) ms per warm instance.
            let rate = i64::from(self.cfg.rate_limit.max(1));
            self.pacer[p.worker] = self.now + (1000 + rate - 1) / rate;
        }
        let observed = self.perform(&p, &effect);
        let ctx = self.ctx(p.now);
        if p.run.observe(observed, &ctx, &mut self.jitter).is_err() {
            self.report.rejected += 1;
            self.finish(pid, p, None);
            return;
        }
        match p.run.step() {
            Step::Done(d) => {
                let d = d.clone();
                self.finish(pid, p, Some(d));
            }
            Step::Perform(_) => {
                let next = self.now + self.latency.range(3, 30);
                self.procs.insert(pid, p);
                self.at(next, Ev::Step(pid));
            }
        }
    }

    fn count_point(&mut self, what: &str, p: &Proc, e: &Effect) {
        let label = match e {
            Effect::Write(w) => format!("write {:?}", w.event()),
            other => other.label().to_owned(),
        };
        *self
            .report
            .failure_points
            .entry(format!("{what} {} before {label}", p.kind.name()))
            .or_default() += 1;
    }

    /// A run ended: `Some(disposition)` when it finished, `None` when it stopped
    /// (crash, throttling): then its message stays and reappears after its
    /// visibility timeout.
    fn finish(&mut self, pid: u64, mut p: Proc, done: Option<Disposition>) {
        let _ = pid;
        if let Some(d) = &done {
            match (p.kind, d) {
                (Kind::ResponseHandler, Disposition::Drop(DropReason::LateResponse { .. })) => {
                    self.report.late_dropped += 1;
                }
                (Kind::RetryHandler, Disposition::Drop(_)) => {
                    // Discarding an event for the attempt still pending loses that retry.
                    if let Some(r) = &self.records[p.tx] {
                        if r.next_attempt.map(Attempt::get) == Some(p.attempt)
                            && r.status.is_intermediate()
                        {
                            self.report.pending_retries_dropped += 1;
                        }
                    }
                }
                (_, Disposition::Reject(_)) => {
                    self.report.rejected += 1;
                    self.dlq_by_tx[p.tx] += 1;
                }
                _ => {}
            }
        }
        match p.kind {
            Kind::ResponseHandler | Kind::RetryHandler => {
                let q = if p.kind == Kind::ResponseHandler {
                    QueueId::Response
                } else {
                    QueueId::Retry
                };
                if let (Some(id), Some(d)) = (p.msg, &done) {
                    if let Disposition::Reject(_) = d {
                        // A permanent error: the handler sends the message to its DLQ itself.
                        match q {
                            QueueId::Response => {
                                if let Some(m) = self.responses.messages.get(&id) {
                                    let body = m.body.clone();
                                    self.responses.dlq.push(body);
                                }
                            }
                            QueueId::Retry => {
                                if let Some(m) = self.retries.messages.get(&id) {
                                    let body = m.body.clone();
                                    self.retries.dlq.push(body);
                                }
                            }
                        }
                    }
                    match q {
                        QueueId::Response => self.responses.delete(id),
                        QueueId::Retry => self.retries.delete(id),
                    }
                }
                match q {
                    QueueId::Response => {
                        self.responses.idle_workers.insert(p.worker);
                    }
                    QueueId::Retry => {
                        self.retries.idle_workers.insert(p.worker);
                    }
                }
                if done.is_none() {
                    // Redelivery after the visibility timeout.
                    self.schedule_wake(q);
                }
                self.poll_soon(q);
            }
            Kind::Reconciler => {
                if done.is_none() {
                    self.reconciler_busy = false;
                    return;
                }
                match p.backlog.pop_front() {
                    Some(rec) => {
                        self.report.reconciler_actions += 1;
                        let now = ts(self.now);
                        let ctx = self.ctx(now);
                        p.tx = self.tx_of(&rec.transaction_id).unwrap_or(0);
                        p.attempt = rec.next_attempt.map(Attempt::get).unwrap_or(0);
                        p.run = Run::with_rules(
                            self.cfg.flaws,
                            Input::Reconcile(rec),
                            Known::Unread,
                            &ctx,
                            &mut self.jitter,
                        );
                        p.now = now;
                        self.spawn(p);
                    }
                    None => self.reconciler_busy = false,
                }
            }
        }
    }

    // -- queues ------------------------------------------------------------

    fn poll_soon(&mut self, q: QueueId) {
        let at = self.now + self.latency.range(1, 20);
        self.at(at, Ev::Poll(q));
    }

    fn schedule_wake(&mut self, q: QueueId) {
        let next = match q {
            QueueId::Response => self.responses.next_visible_after(self.now),
            QueueId::Retry => self.retries.next_visible_after(self.now),
        };
        let Some(at) = next else { return };
        let current = match q {
            QueueId::Response => &mut self.responses.wake_at,
            QueueId::Retry => &mut self.retries.wake_at,
        };
        if current.is_none_or(|c| c <= self.now || at < c) {
            *current = Some(at);
            self.at(at, Ev::Poll(q));
        }
    }

    fn poll(&mut self, q: QueueId) {
        loop {
            let worker = match q {
                QueueId::Response => self.responses.idle_workers.iter().next().copied(),
                QueueId::Retry => self.retries.idle_workers.iter().next().copied(),
            };
            let Some(worker) = worker else { break };
            let duplicate = self.faults.chance(self.cfg.duplicate_rate);
            let mut dead: Vec<TransactionId> = Vec::new();
            let got = match q {
                QueueId::Response => {
                    let mut bodies = Vec::new();
                    let got = self
                        .responses
                        .receive(self.now, &mut self.queue_rng, duplicate, &mut bodies)
                        .map(|(id, body)| (id, Input::Response(body)));
                    dead.extend(bodies.into_iter().map(|b| b.transaction_id));
                    got
                }
                QueueId::Retry => {
                    let mut bodies = Vec::new();
                    let got = self
                        .retries
                        .receive(self.now, &mut self.queue_rng, duplicate, &mut bodies)
                        .map(|(id, body)| (id, Input::Retry(body)));
                    dead.extend(bodies.into_iter().map(|b| b.transaction_id));
                    got
                }
            };
            for id in dead {
                if let Some(tx) = self.tx_of(&id) {
                    self.dlq_by_tx[tx] += 1;
                }
            }
            let Some((id, input)) = got else { break };
            if duplicate {
                self.report.duplicate_deliveries += 1;
            }
            let (kind, tx, attempt) = match &input {
                Input::Response(r) => (
                    Kind::ResponseHandler,
                    self.tx_of(&r.transaction_id),
                    r.attempt.get(),
                ),
                Input::Retry(e) => (
                    Kind::RetryHandler,
                    self.tx_of(&e.transaction_id),
                    e.attempt.get(),
                ),
                _ => continue,
            };
            let Some(tx) = tx else { continue };
            match q {
                QueueId::Response => self.responses.idle_workers.remove(&worker),
                QueueId::Retry => self.retries.idle_workers.remove(&worker),
            };
            let now = ts(self.now);
            let ctx = self.ctx(now);
            let run = Run::with_rules(self.cfg.flaws, input, Known::Unread, &ctx, &mut self.jitter);
            self.spawn(Proc {
                kind,
                worker,
                msg: Some(id),
                tx,
                attempt,
                run,
                now,
                backlog: VecDeque::new(),
            });
        }
        self.schedule_wake(q);
    }

    // -- the external service ----------------------------------------------

    fn service_receive(&mut self, tx: usize, attempt: u32, key: String) {
        let expected = Attempt::new(attempt).map(|a| IdempotencyKey::new(&self.ids[tx], a));
        if expected.as_ref().map(|k| k.as_str()) != Ok(key.as_str()) {
            self.report.duplicated += 1;
        }
        if !self.accepted_keys.insert(key) {
            self.report.requests_deduplicated += 1;
            return;
        }
        if self.accepted.contains_key(&(tx, attempt)) {
            self.report.duplicated += 1;
            return;
        }
        if attempt > 1 {
            let prev = self
                .accepted
                .get(&(tx, attempt - 1))
                .and_then(|v| v.outcome);
            if prev != Some(Outcome::Cancelled) {
                self.report.duplicated += 1;
            }
        }
        if attempt > self.cfg.max_attempts {
            self.report.exceeded_max += 1;
        }
        self.report.requests_accepted += 1;
        let outcome = if self.service.chance(self.cfg.cancel_rate) {
            Outcome::Cancelled
        } else {
            Outcome::Success
        };
        self.accepted.insert(
            (tx, attempt),
            ServiceView {
                outcome: Some(outcome),
            },
        );
        let answer = self.now + self.service.range(50, 2_000);
        self.at(
            answer,
            Ev::Answer {
                tx,
                attempt,
                outcome,
            },
        );
        if self.service.chance(self.cfg.late_response_rate) {
            self.report.late_responses += 1;
            let late = self.now + self.service.range(3_600_000, 6 * 3_600_000);
            self.at(
                late,
                Ev::Answer {
                    tx,
                    attempt,
                    outcome,
                },
            );
        }
    }

    fn answer(&mut self, tx: usize, attempt: u32, outcome: Outcome) {
        let Ok(a) = Attempt::new(attempt) else { return };
        let body = Response {
            transaction_id: self.ids[tx].clone(),
            attempt: a,
            outcome,
            reason: match outcome {
                Outcome::Cancelled => Some(fixture::CANCEL_REASON.to_owned()),
                Outcome::Success => None,
            },
        };
        self.seq += 1;
        let id = self.seq;
        self.responses.send(id, body, self.now);
        self.poll_soon(QueueId::Response);
    }

    // -- the scheduler -----------------------------------------------------

    fn fire(&mut self, name: ScheduleName, generation: u64) {
        let Some(live) = self.schedules.get(&name).cloned() else {
            return;
        };
        if live.generation != generation {
            return;
        }
        let event = RetryEvent {
            transaction_id: self.ids[live.tx].clone(),
            origin: Origin::RetryScheduler,
            attempt: live.attempt,
        };
        if self.faults.chance(self.cfg.scheduler_failure_rate) {
            // Retries exhausted: the scheduler's DLQ keeps the event.
            self.schedules.remove(&name);
            self.report.dlq_scheduler += 1;
            self.dlq_by_tx[live.tx] += 1;
            return;
        }
        self.seq += 1;
        let id = self.seq;
        self.retries.send(id, event, self.now);
        self.poll_soon(QueueId::Retry);
        if self.faults.chance(self.cfg.double_fire_rate) {
            self.report.double_fires += 1;
            let again = self.now + self.faults.range(1_000, 600_000);
            self.at(again, Ev::Fire { name, generation });
        } else {
            self.schedules.remove(&name);
        }
    }

    // -- the reconciler ----------------------------------------------------

    fn reconciler_tick(&mut self) {
        if self.reconciler_busy {
            return;
        }
        let before = ts(self.now - self.cfg.reconcile_threshold_ms);
        let mut found: Vec<TransactionRecord> = Vec::new();
        'outer: for shard in 0..defaults::RECONCILE_SHARDS {
            let partition = ReconcileKey::partition_for(shard);
            let lo = (partition.clone(), ts(i64::MIN), 0usize);
            let hi = (partition, before, 0usize);
            for (_, _, tx) in self.index.range(lo..hi) {
                if found.len() >= self.cfg.reconcile_max_items {
                    break 'outer;
                }
                if let Some(r) = &self.records[*tx] {
                    found.push(r.clone());
                }
            }
        }
        self.last_tick_found = found.len();
        if found.is_empty() {
            return;
        }
        self.report.reconciler_invocations += 1;
        self.reconciler_busy = true;
        let mut backlog: VecDeque<TransactionRecord> = found.into();
        let Some(first) = backlog.pop_front() else {
            self.reconciler_busy = false;
            return;
        };
        self.report.reconciler_actions += 1;
        let now = ts(self.now);
        let ctx = self.ctx(now);
        let tx = self.tx_of(&first.transaction_id).unwrap_or(0);
        let attempt = first.next_attempt.map(Attempt::get).unwrap_or(0);
        let run = Run::with_rules(
            self.cfg.flaws,
            Input::Reconcile(first),
            Known::Unread,
            &ctx,
            &mut self.jitter,
        );
        self.spawn(Proc {
            kind: Kind::Reconciler,
            worker: 0,
            msg: None,
            tx,
            attempt,
            run,
            now,
            backlog,
        });
    }

    // -- the loop ----------------------------------------------------------

    fn start_transaction(&mut self, i: usize) {
        let now = ts(self.now);
        let ctx = self.ctx(now);
        let input = Input::Start {
            transaction_id: self.ids[i].clone(),
            payload: fixture::payload(i),
            max_attempts: fixture::max_attempts(self.cfg.max_attempts),
        };
        let mut run = Run::with_rules(self.cfg.flaws, input, Known::Unread, &ctx, &mut self.jitter);
        // The library operation: performed to its end (the caller retries a failed start).
        let starter = Proc {
            kind: Kind::ResponseHandler,
            worker: 0,
            msg: None,
            tx: i,
            attempt: u32::MAX,
            run: run.clone(),
            now,
            backlog: VecDeque::new(),
        };
        while let Step::Perform(e) = run.step() {
            let e = e.clone();
            let obs = self.perform(&starter, &e);
            if run.observe(obs, &ctx, &mut self.jitter).is_err() {
                self.report.rejected += 1;
                break;
            }
        }
        self.report.attempted += 1;
    }

    /// True when nothing but the reconciler's cron remains.
    fn idle(&self) -> bool {
        self.procs.is_empty()
            && self.responses.is_empty()
            && self.retries.is_empty()
            && self.schedules.is_empty()
            && self.pending_work == 0
    }

    fn run(mut self) -> Report {
        let cfg = self.cfg;
        for i in 0..cfg.transactions {
            let at = fixture::EPOCH_MS + self.latency.range(0, cfg.arrival_window_ms.max(0));
            self.at(at, Ev::Start(i));
        }
        if cfg.reconciler {
            self.at(
                fixture::EPOCH_MS + cfg.reconciler_interval_ms,
                Ev::ReconcilerTick,
            );
        }
        while let Some(((time, _), ev)) = self.events.pop_first() {
            if time > fixture::EPOCH_MS + END_MS {
                break;
            }
            self.now = time.max(self.now);
            if !matches!(ev, Ev::Poll(_) | Ev::ReconcilerTick) {
                self.pending_work -= 1;
            }
            self.report.events += 1;
            self.digest(&ev);
            match ev {
                Ev::Start(i) => self.start_transaction(i),
                Ev::Poll(q) => self.poll(q),
                Ev::Step(pid) => self.step(pid),
                Ev::ServiceReceive { tx, attempt, key } => self.service_receive(tx, attempt, key),
                Ev::Answer {
                    tx,
                    attempt,
                    outcome,
                } => self.answer(tx, attempt, outcome),
                Ev::Fire { name, generation } => self.fire(name, generation),
                Ev::ReconcilerTick => {
                    self.reconciler_tick();
                    if self.idle() && !self.reconciler_busy {
                        // Only the cron remains: stop once a pass finds nothing, or
                        // after a few passes that keep finding the same records.
                        self.idle_ticks += 1;
                        if self.last_tick_found == 0 || self.idle_ticks > 3 {
                            break;
                        }
                    } else {
                        self.idle_ticks = 0;
                    }
                    let next = self.now + cfg.reconciler_interval_ms;
                    self.at(next, Ev::ReconcilerTick);
                }
            }
            if !cfg.reconciler && self.idle() {
                break;
            }
        }
        self.classify();
        self.report
    }

    fn classify(&mut self) {
        self.report.virtual_ms = self.now - fixture::EPOCH_MS;
        self.report.dlq_response = self.responses.dlq.len() as u64;
        self.report.dlq_retry = self.retries.dlq.len() as u64;
        for tx in 0..self.records.len() {
            match self.records[tx].as_ref().map(|r| r.status) {
                Some(Status::Succeeded) => self.report.succeeded += 1,
                Some(Status::Failed) => {
                    self.report.failed += 1;
                    // A response that exhausted the budget and then landed in the DLQ
                    // (before its alert went out) is covered by the DLQ alarm.
                    if self.alerts[tx] == 0 && self.dlq_by_tx[tx] == 0 {
                        self.report.alerts_missing += 1;
                    }
                }
                _ => {
                    self.report.stuck += 1;
                    if self.dlq_by_tx[tx] > 0 {
                        self.report.stuck_in_dlq += 1;
                    } else {
                        self.report.lost += 1;
                    }
                }
            }
        }
        // Highest number of retry publishes in any one-second window.
        let times = &self.retry_publish_times;
        let mut lo = 0;
        let mut best = 0;
        for hi in 0..times.len() {
            while times[hi] - times[lo] >= 1000 {
                lo += 1;
            }
            best = best.max(hi - lo + 1);
        }
        self.report.max_requests_per_second = best as u64;
    }
}

/// Runs one seed.
pub fn simulate(cfg: &SimConfig, seed: u64) -> Report {
    World::new(cfg, seed).run()
}
