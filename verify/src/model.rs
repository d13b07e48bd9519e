//! The exhaustive model check (stateright) of the whole protocol over small scopes.
//!
//! The model drives the domain crate's real decisions: every handler execution is a
//! [`domain::Run`] built from the message it received, and every model step performs
//! **one** effect of one run on the model's state (conditional writes through
//! [`Write::apply`]) and feeds back what it observed. The model holds no rule of its
//! own; it only plays the world around the handlers:
//!
//! - three SQS queues (request, response, retry) as multisets: any message may be
//!   delivered next (reordering), delivered again while a first delivery is running
//!   (duplicates), or returned to the queue by a crash;
//! - EventBridge Scheduler: a live schedule may fire at any moment, fire twice, or fail
//!   to deliver (its event goes to the scheduler DLQ);
//! - the external service: it deduplicates requests by idempotency key and answers any
//!   attempt it accepted, with SUCCESS or CANCELLED, late and more than once;
//! - the reconciler: may run on any transaction in an intermediate state at any moment,
//!   either before or after the stored fire instant;
//! - crashes: a running handler may stop between any two effects; its message goes back
//!   to its queue for redelivery;
//! - time: abstract. Handlers decide at the model's clock, which may advance; schedules
//!   fire when the model chooses.
//!
//! Faults are bounded by budgets ([`Scope`]) so the state space is finite; within those
//! budgets every interleaving is explored.

use crate::fixture;
use crate::Flaws;
use domain::decide::{Context, Disposition, Effect, Input, Known, Observed, Run, Step};
use domain::ids::{Attempt, IdempotencyKey, ScheduleName, Timestamp, TransactionId};
use domain::machine::{transition, Event, Status, TransactionRecord};
use domain::message::{Origin, Outcome, Request, Response, RetryEvent};
use domain::policy::{FixedRandom, PolicySet};
use stateright::{Checker, HasDiscoveries, Model, Property};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::hash::{Hash, Hasher};
use std::time::Duration;

/// How far one tick of the model's clock moves time. Long enough that a fire instant
/// computed after a tick differs from one computed before it.
pub const TICK_MS: i64 = 61_000;

/// The reconciler's "late" run sees every intermediate record far past any threshold.
const LATE_MS: i64 = 400 * 24 * 3_600_000;

/// The scope of a model check: how many transactions, and how many faults of each kind
/// a single execution may contain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Scope {
    pub transactions: u8,
    pub max_attempts: u32,
    /// Deliveries of a message while another delivery of it exists (any queue).
    pub duplicate_deliveries: u8,
    /// Handler or reconciler runs stopped between two effects.
    pub crashes: u8,
    /// Answers of the external service beyond the first one for an attempt.
    pub extra_answers: u8,
    /// Schedules that fire twice.
    pub double_fires: u8,
    /// Schedules whose event cannot be delivered (it goes to the scheduler DLQ).
    pub undeliverable_fires: u8,
    /// Reconciler runs.
    pub reconciler_runs: u8,
    /// Advances of the clock.
    pub ticks: u8,
    /// Known-bad designs switched on (verification only).
    pub flaws: Flaws,
    /// Explore every interleaving of the transactions' steps. When false, transaction
    /// k acts only while every transaction before it is quiescent (nothing of theirs
    /// in flight): a partial-order reduction that is sound and complete for these
    /// properties, because transactions share no state (see docs/verification.md).
    pub interleave: bool,
}

impl Scope {
    /// No faults at all: the happy paths and their interleavings.
    pub fn quiet(transactions: u8, max_attempts: u32) -> Self {
        Self {
            transactions,
            max_attempts,
            duplicate_deliveries: 0,
            crashes: 0,
            extra_answers: 0,
            double_fires: 0,
            undeliverable_fires: 0,
            reconciler_runs: 0,
            ticks: 0,
            flaws: Flaws::NONE,
            interleave: true,
        }
    }

    /// The scope `cargo test` checks: 2 transactions, max_attempts 3, one fault of each
    /// kind per execution.
    pub fn ci() -> Self {
        Self {
            duplicate_deliveries: 1,
            crashes: 1,
            extra_answers: 1,
            double_fires: 1,
            undeliverable_fires: 1,
            reconciler_runs: 1,
            ticks: 1,
            ..Self::quiet(2, 3)
        }
    }

    pub fn with_flaws(mut self, flaws: Flaws) -> Self {
        self.flaws = flaws;
        self
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} transactions ({}), max_attempts {}; per execution at most: {} duplicate deliveries, {} crashes, {} extra answers, {} double fires, {} undeliverable fires, {} reconciler runs, {} clock ticks",
            self.transactions,
            if self.interleave { "every interleaving" } else { "transaction-ordered reduction" },
            self.max_attempts,
            self.duplicate_deliveries,
            self.crashes,
            self.extra_answers,
            self.double_fires,
            self.undeliverable_fires,
            self.reconciler_runs,
            self.ticks
        )
    }
}

/// A request on the request queue, as the external service sees it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Req {
    pub tx: u8,
    pub attempt: u32,
    pub key: String,
}

/// A response on the response queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Resp {
    pub tx: u8,
    pub attempt: u32,
    pub outcome: Outcome,
}

/// A retry event on the retry queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Ev {
    pub tx: u8,
    pub attempt: u32,
    pub origin: Origin,
}

/// A live one-time schedule.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Sched {
    pub name: ScheduleName,
    pub tx: u8,
    pub attempt: u32,
    pub fire_at: Timestamp,
}

/// Which executor a run belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// The library operation that starts a transaction (initial state only).
    Starter,
    ResponseHandler,
    RetryHandler,
    Reconciler,
}

/// The message a run holds (it goes back to its queue if the run crashes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Held {
    Response(Resp),
    Retry(Ev),
    /// The reconciler's query result: no message.
    Nothing,
}

/// A handler execution in progress: a real [`Run`] plus what the model needs.
#[derive(Debug, Clone)]
pub struct ActiveRun {
    pub kind: Kind,
    pub tx: u8,
    pub held: Held,
    /// The instant the run decides at.
    pub now: Timestamp,
    /// Effects performed so far.
    pub performed: u8,
    pub run: Run<Flaws>,
    /// Canonical identity of the run's future behaviour: its input, remaining plan and
    /// re-decision count (the trail of past effects does not influence what it does).
    key: String,
}

impl ActiveRun {
    fn new(kind: Kind, tx: u8, held: Held, now: Timestamp, run: Run<Flaws>) -> Self {
        let mut r = Self {
            kind,
            tx,
            held,
            now,
            performed: 0,
            run,
            key: String::new(),
        };
        r.rekey();
        r
    }

    /// Recomputes the run's identity from what can still influence the future: the
    /// remaining effects (only the fields a decision, a guard or a property reads) and
    /// the re-decision count. Audit-only fields (actor, origin, reasons, index keys)
    /// and the trail of past effects are left out: states that differ only there
    /// behave identically, so merging them is sound.
    fn rekey(&mut self) {
        use std::fmt::Write as _;
        let mut key = String::new();
        for e in self.run.remaining() {
            let _ = match e {
                Effect::Write(w) => write!(
                    key,
                    "W{:?}{:?}{:?}{:?}{:?}|{:?}{:?}{:?}{:?}{:?}{:?}{:?};",
                    w.event(),
                    w.from(),
                    w.guard.current_attempt,
                    w.guard.next_attempt,
                    w.guard.budget,
                    w.to(),
                    w.set.current_attempt,
                    w.set.next_attempt,
                    w.set.max_attempts,
                    w.set.next_fire_at,
                    w.set.schedule_name,
                    w.set.updated_at
                ),
                Effect::CreateSchedule(c) => {
                    write!(key, "C{}{}{};", c.name, c.fire_at.millis(), c.event.attempt)
                }
                Effect::DeleteSchedule(n) => write!(key, "D{n};"),
                Effect::PublishRequest(h) => write!(key, "P{};", h.attempt),
                Effect::PublishRetry(ev) => write!(key, "R{};", ev.attempt),
                Effect::Alert(_) => write!(key, "A;"),
                other => write!(key, "{};", other.label()),
            };
        }
        let _ = write!(key, "#{}", self.run.redecisions());
        self.key = key;
    }

    fn order(&self) -> (Kind, u8, (u32, Option<Outcome>), Timestamp, &str, u8) {
        (
            self.kind,
            self.tx,
            self.held.key(),
            self.now,
            &self.key,
            self.performed.min(1),
        )
    }
}

impl Held {
    /// What of the held message can influence the future (an event's origin is only
    /// recorded, never read by a decision).
    fn key(&self) -> (u32, Option<Outcome>) {
        match self {
            Held::Response(r) => (r.attempt, Some(r.outcome)),
            Held::Retry(e) => (e.attempt, None),
            Held::Nothing => (0, None),
        }
    }
}

impl PartialEq for ActiveRun {
    fn eq(&self, other: &Self) -> bool {
        self.order() == other.order()
    }
}

impl Eq for ActiveRun {}

impl Hash for ActiveRun {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.order().hash(state);
    }
}

/// What the external service knows of an attempt it accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Accepted {
    /// The outcome it answered, once it has.
    pub outcome: Option<Outcome>,
}

/// A guarantee broken during an execution (checked where it happens).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Violation {
    /// The service accepted a second request for one (transaction, attempt), or a
    /// request whose idempotency key is not `<id>#<attempt>`.
    DuplicateAccepted,
    /// The service accepted attempt m > 1 although attempt m − 1 was not CANCELLED.
    RetryWithoutCancellation,
    /// A request for an attempt beyond max_attempts was published.
    ExceededMaxAttempts,
    /// A response for attempt n changed a record whose current attempt was past n.
    LateResponseApplied,
    /// A write took a transition that is not an arrow of the state machine.
    IllegalTransition,
    /// A schedule was created with an instant other than the persisted one.
    ScheduleNotFromPersistedInstant,
    /// Two schedules for one (transaction, attempt) carried different instants.
    TwoInstantsForOneAttempt,
    /// The retry handler discarded an event for the attempt still pending.
    PendingRetryDropped,
    /// A message ended in a DLQ (a run rejected it).
    MessageRejected,
    /// The executor fed a run an observation it could not take.
    ExecutorBug,
}

/// Remaining fault budgets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Budgets {
    pub duplicate_deliveries: u8,
    pub crashes: u8,
    pub extra_answers: u8,
    pub double_fires: u8,
    pub undeliverable_fires: u8,
    pub reconciler_runs: u8,
    pub ticks: u8,
}

/// The state of the world.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct State {
    pub clock: u8,
    pub records: Vec<TransactionRecord>,
    pub requests: Vec<Req>,
    pub responses: Vec<Resp>,
    pub retries: Vec<Ev>,
    pub schedules: Vec<Sched>,
    pub runs: Vec<ActiveRun>,
    /// The external service's deduplicated view: accepted (tx, attempt) by key.
    pub accepted: BTreeMap<(u8, u32), Accepted>,
    pub accepted_keys: BTreeSet<String>,
    /// The instant of the first schedule created for each (tx, attempt).
    pub instants: BTreeMap<(u8, u32), Timestamp>,
    pub alerted: Vec<bool>,
    /// Events the scheduler could not deliver (scheduler DLQ).
    /// Events the scheduler could not deliver, per transaction (scheduler DLQ).
    pub scheduler_dlq: Vec<u8>,
    pub budgets: Budgets,
    pub violations: BTreeSet<Violation>,
}

/// One thing that can happen next.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Action {
    /// The external service takes request `i` from the request queue.
    ServiceReceive { i: usize, duplicate: bool },
    /// The external service answers an attempt it accepted.
    ServiceAnswer {
        tx: u8,
        attempt: u32,
        outcome: Outcome,
    },
    /// The response handler receives response `i`.
    DeliverResponse { i: usize, duplicate: bool },
    /// The retry handler receives retry event `i`.
    DeliverRetry { i: usize, duplicate: bool },
    /// Run `run` performs its next effect.
    Step { run: usize },
    /// Run `run` stops before its next effect.
    Crash { run: usize },
    /// Schedule `i` fires.
    Fire { i: usize, how: Firing },
    /// The reconciler acts on transaction `tx`.
    Reconcile { tx: u8, late: bool },
    /// The clock advances.
    Tick,
}

/// How a schedule fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Firing {
    /// Delivers its event and is deleted (`ActionAfterCompletion = DELETE`).
    Once,
    /// Delivers its event and stays, to fire again.
    Twice,
    /// Cannot deliver: the event goes to the scheduler DLQ; the schedule is deleted.
    Undeliverable,
}

/// The protocol model.
#[derive(Debug, Clone)]
pub struct ProtocolModel {
    pub scope: Scope,
    ids: Vec<TransactionId>,
    policies: PolicySet,
}

impl ProtocolModel {
    pub fn new(scope: Scope) -> Self {
        let ids = (0..usize::from(scope.transactions.max(1)))
            .map(fixture::tx_id)
            .collect();
        Self {
            scope,
            ids,
            policies: fixture::article_policies(),
        }
    }

    fn tx_of(&self, id: &TransactionId) -> Option<u8> {
        self.ids
            .iter()
            .position(|i| i == id)
            .and_then(|p| u8::try_from(p).ok())
    }

    fn id(&self, tx: u8) -> &TransactionId {
        &self.ids[usize::from(tx)]
    }

    fn clock_time(&self, clock: u8) -> Timestamp {
        Timestamp::from_millis(fixture::EPOCH_MS + i64::from(clock) * TICK_MS)
    }

    fn ctx(&self, now: Timestamp) -> Context {
        fixture::context(now, &self.policies, Duration::ZERO)
    }

    fn attempt(n: u32) -> Attempt {
        Attempt::new(n.max(1)).unwrap_or(Attempt::FIRST)
    }

    /// The initial state: every transaction started through the real start plan.
    fn initial(&self) -> State {
        let mut s = State {
            clock: 0,
            records: Vec::new(),
            requests: Vec::new(),
            responses: Vec::new(),
            retries: Vec::new(),
            schedules: Vec::new(),
            runs: Vec::new(),
            accepted: BTreeMap::new(),
            accepted_keys: BTreeSet::new(),
            instants: BTreeMap::new(),
            alerted: vec![false; usize::from(self.scope.transactions.max(1))],
            scheduler_dlq: vec![0; usize::from(self.scope.transactions.max(1))],
            budgets: Budgets {
                duplicate_deliveries: self.scope.duplicate_deliveries,
                crashes: self.scope.crashes,
                extra_answers: self.scope.extra_answers,
                double_fires: self.scope.double_fires,
                undeliverable_fires: self.scope.undeliverable_fires,
                reconciler_runs: self.scope.reconciler_runs,
                ticks: self.scope.ticks,
            },
            violations: BTreeSet::new(),
        };
        let now = self.clock_time(0);
        let ctx = self.ctx(now);
        for (n, id) in self.ids.iter().enumerate() {
            let input = Input::Start {
                transaction_id: id.clone(),
                payload: fixture::payload(n),
                max_attempts: fixture::max_attempts(self.scope.max_attempts),
            };
            let tx = u8::try_from(n).unwrap_or(u8::MAX);
            let mut ar = self.begin(Kind::Starter, tx, Held::Nothing, input, now);
            while let Step::Perform(e) = ar.run.step() {
                let e = e.clone();
                let obs = self.perform(&mut s, &ar, &e);
                if ar.run.observe(obs, &ctx, &mut FixedRandom(0.5)).is_err() {
                    s.violations.insert(Violation::ExecutorBug);
                    break;
                }
            }
        }
        s.canonicalize();
        s
    }

    /// Performs one effect of `run` on the state and returns what it observed.
    fn perform(&self, s: &mut State, run: &ActiveRun, effect: &Effect) -> Observed {
        match effect {
            Effect::Read(id) => {
                Observed::Record(self.tx_of(id).map(|tx| s.records[usize::from(tx)].clone()))
            }
            Effect::Create { record, .. } => {
                match self
                    .tx_of(&record.transaction_id)
                    .and_then(|tx| s.records.get(usize::from(tx)))
                {
                    Some(existing) => Observed::AlreadyExists {
                        record: existing.clone(),
                        same_payload: true,
                    },
                    None => {
                        if transition(None, Event::Start) != Ok(record.status) {
                            s.violations.insert(Violation::IllegalTransition);
                        }
                        s.records.push(record.clone());
                        Observed::Created
                    }
                }
            }
            Effect::Write(w) => {
                let Some(tx) = self.tx_of(&w.transaction_id) else {
                    return Observed::ConditionFailed(None);
                };
                let current = &s.records[usize::from(tx)];
                match w.apply(current) {
                    Ok(next) => {
                        if transition(Some(current.status), w.event()) != Ok(next.status) {
                            s.violations.insert(Violation::IllegalTransition);
                        }
                        if let (Kind::ResponseHandler, Held::Response(r)) = (run.kind, run.held) {
                            // Late: the response is for an attempt before the current one.
                            if r.attempt < current.current_attempt.get() {
                                s.violations.insert(Violation::LateResponseApplied);
                            }
                        }
                        if next.current_attempt.get() > next.max_attempts.get() {
                            s.violations.insert(Violation::ExceededMaxAttempts);
                        }
                        s.records[usize::from(tx)] = next.clone();
                        Observed::Written(next)
                    }
                    Err(_) => Observed::ConditionFailed(Some(current.clone())),
                }
            }
            Effect::CreateSchedule(spec) => {
                let Some(tx) = self.tx_of(&spec.event.transaction_id) else {
                    return Observed::ScheduleCreated;
                };
                let m = spec.event.attempt;
                let rec = &s.records[usize::from(tx)];
                let from_persisted =
                    rec.next_attempt == Some(m) && rec.next_fire_at == Some(spec.fire_at);
                let moved_past = rec.current_attempt >= m || rec.status.is_terminal();
                if !from_persisted && !moved_past {
                    s.violations
                        .insert(Violation::ScheduleNotFromPersistedInstant);
                }
                let first = *s.instants.entry((tx, m.get())).or_insert(spec.fire_at);
                if first != spec.fire_at {
                    s.violations.insert(Violation::TwoInstantsForOneAttempt);
                }
                if s.schedules.iter().any(|x| x.name == spec.name) {
                    Observed::ScheduleAlreadyExists
                } else {
                    s.schedules.push(Sched {
                        name: spec.name.clone(),
                        tx,
                        attempt: m.get(),
                        fire_at: spec.fire_at,
                    });
                    Observed::ScheduleCreated
                }
            }
            Effect::DeleteSchedule(name) => {
                let before = s.schedules.len();
                s.schedules.retain(|x| &x.name != name);
                if s.schedules.len() < before {
                    Observed::ScheduleDeleted
                } else {
                    Observed::ScheduleNotFound
                }
            }
            Effect::PublishRequest(h) => {
                let Some(tx) = self.tx_of(&h.transaction_id) else {
                    return Observed::Published;
                };
                let max = s.records[usize::from(tx)].max_attempts;
                if h.attempt.get() > max.get() {
                    s.violations.insert(Violation::ExceededMaxAttempts);
                }
                let request = Request::new(
                    h.transaction_id.clone(),
                    h.attempt,
                    fixture::payload(usize::from(tx)),
                );
                s.requests.push(Req {
                    tx,
                    attempt: request.attempt.get(),
                    key: request.idempotency_key.as_str().to_owned(),
                });
                Observed::Published
            }
            Effect::PublishRetry(ev) => {
                if let Some(tx) = self.tx_of(&ev.transaction_id) {
                    s.retries.push(Ev {
                        tx,
                        attempt: ev.attempt.get(),
                        origin: ev.origin,
                    });
                }
                Observed::Published
            }
            Effect::Alert(a) => {
                if let Some(tx) = self.tx_of(&a.transaction_id) {
                    s.alerted[usize::from(tx)] = true;
                }
                Observed::Alerted
            }
            Effect::Ack(_) | Effect::Drop(_) | Effect::Reject(_) => {
                s.violations.insert(Violation::ExecutorBug);
                Observed::Published
            }
        }
    }

    /// A run of `kind` on `tx` deciding `input` at `now`, from an unread record.
    fn begin(&self, kind: Kind, tx: u8, held: Held, input: Input, now: Timestamp) -> ActiveRun {
        let ctx = self.ctx(now);
        let run = Run::with_rules(
            self.scope.flaws,
            input,
            Known::Unread,
            &ctx,
            &mut FixedRandom(0.5),
        );
        ActiveRun::new(kind, tx, held, now, run)
    }

    /// Starts a run; finishes it at once if its plan has no effect to perform.
    fn start(&self, s: &mut State, kind: Kind, tx: u8, held: Held, input: Input, now: Timestamp) {
        let ar = self.begin(kind, tx, held, input, now);
        self.settle_run(s, ar);
    }

    /// Keeps a run that has effects left, or finishes it.
    fn settle_run(&self, s: &mut State, ar: ActiveRun) {
        match ar.run.step() {
            Step::Perform(_) => s.runs.push(ar),
            Step::Done(d) => {
                if matches!(d, Disposition::Reject(_)) {
                    s.violations.insert(Violation::MessageRejected);
                }
                if let (Disposition::Drop(_), Held::Retry(e)) = (d, ar.held) {
                    let r = &s.records[usize::from(ar.tx)];
                    if r.status.is_intermediate()
                        && r.next_attempt.map(Attempt::get) == Some(e.attempt)
                    {
                        s.violations.insert(Violation::PendingRetryDropped);
                    }
                }
                // Ack or drop: the message is deleted (it is not put back).
            }
        }
    }

    fn step_run(&self, s: &mut State, i: usize) {
        let mut ar = s.runs.remove(i);
        let Step::Perform(e) = ar.run.step() else {
            self.settle_run(s, ar);
            return;
        };
        let e = e.clone();
        let obs = self.perform(s, &ar, &e);
        let ctx = self.ctx(ar.now);
        if ar.run.observe(obs, &ctx, &mut FixedRandom(0.5)).is_err() {
            s.violations.insert(Violation::ExecutorBug);
            return;
        }
        ar.performed = ar.performed.saturating_add(1);
        ar.rekey();
        self.settle_run(s, ar);
    }

    fn response_input(&self, r: Resp) -> Input {
        Input::Response(Response {
            transaction_id: self.id(r.tx).clone(),
            attempt: Self::attempt(r.attempt),
            outcome: r.outcome,
            reason: Some(fixture::CANCEL_REASON.to_owned()),
        })
    }

    fn retry_input(&self, e: Ev) -> Input {
        Input::Retry(RetryEvent {
            transaction_id: self.id(e.tx).clone(),
            origin: e.origin,
            attempt: Self::attempt(e.attempt),
        })
    }

    fn accept(&self, s: &mut State, req: &Req) {
        let expected = IdempotencyKey::new(self.id(req.tx), Self::attempt(req.attempt));
        if req.key != expected.as_str() {
            s.violations.insert(Violation::DuplicateAccepted);
        }
        if !s.accepted_keys.insert(req.key.clone()) {
            // Deduplicated by idempotency key: a raw duplicate publish, ignored.
            return;
        }
        if s.accepted.contains_key(&(req.tx, req.attempt)) {
            s.violations.insert(Violation::DuplicateAccepted);
            return;
        }
        if req.attempt > 1 {
            let prev = s.accepted.get(&(req.tx, req.attempt - 1));
            if prev.and_then(|a| a.outcome) != Some(Outcome::Cancelled) {
                s.violations.insert(Violation::RetryWithoutCancellation);
            }
        }
        if req.attempt > self.scope.max_attempts {
            s.violations.insert(Violation::ExceededMaxAttempts);
        }
        s.accepted
            .insert((req.tx, req.attempt), Accepted { outcome: None });
    }

    fn reconcile_now(&self, s: &State, late: bool) -> Timestamp {
        let now = self.clock_time(s.clock);
        if late {
            now.plus_millis(LATE_MS)
        } else {
            now.plus_millis(1)
        }
    }

    /// Applies an action (also used to script executions in tests).
    pub fn apply(&self, last: &State, action: &Action) -> State {
        let mut s = last.clone();
        match *action {
            Action::ServiceReceive { i, duplicate } => {
                let req = if duplicate {
                    s.budgets.duplicate_deliveries -= 1;
                    s.requests[i].clone()
                } else {
                    s.requests.remove(i)
                };
                self.accept(&mut s, &req);
            }
            Action::ServiceAnswer {
                tx,
                attempt,
                outcome,
            } => {
                if let Some(a) = s.accepted.get_mut(&(tx, attempt)) {
                    if a.outcome.is_some() {
                        s.budgets.extra_answers -= 1;
                    }
                    a.outcome = Some(outcome);
                    s.responses.push(Resp {
                        tx,
                        attempt,
                        outcome,
                    });
                }
            }
            Action::DeliverResponse { i, duplicate } => {
                let r = if duplicate {
                    s.budgets.duplicate_deliveries -= 1;
                    s.responses[i]
                } else {
                    s.responses.remove(i)
                };
                let now = self.clock_time(s.clock);
                let input = self.response_input(r);
                self.start(
                    &mut s,
                    Kind::ResponseHandler,
                    r.tx,
                    Held::Response(r),
                    input,
                    now,
                );
            }
            Action::DeliverRetry { i, duplicate } => {
                let e = if duplicate {
                    s.budgets.duplicate_deliveries -= 1;
                    s.retries[i]
                } else {
                    s.retries.remove(i)
                };
                let now = self.clock_time(s.clock);
                let input = self.retry_input(e);
                self.start(&mut s, Kind::RetryHandler, e.tx, Held::Retry(e), input, now);
            }
            Action::Step { run } => self.step_run(&mut s, run),
            Action::Crash { run } => {
                s.budgets.crashes -= 1;
                let ar = s.runs.remove(run);
                match ar.held {
                    Held::Response(r) => s.responses.push(r),
                    Held::Retry(e) => s.retries.push(e),
                    Held::Nothing => {}
                }
            }
            Action::Fire { i, how } => {
                let sched = s.schedules[i].clone();
                let ev = Ev {
                    tx: sched.tx,
                    attempt: sched.attempt,
                    origin: Origin::RetryScheduler,
                };
                match how {
                    Firing::Once => {
                        s.schedules.remove(i);
                        s.retries.push(ev);
                    }
                    Firing::Twice => {
                        s.budgets.double_fires -= 1;
                        s.retries.push(ev);
                    }
                    Firing::Undeliverable => {
                        s.budgets.undeliverable_fires -= 1;
                        s.schedules.remove(i);
                        s.scheduler_dlq[usize::from(sched.tx)] += 1;
                    }
                }
            }
            Action::Reconcile { tx, late } => {
                s.budgets.reconciler_runs -= 1;
                let now = self.reconcile_now(&s, late);
                let rec = s.records[usize::from(tx)].clone();
                self.start(
                    &mut s,
                    Kind::Reconciler,
                    tx,
                    Held::Nothing,
                    Input::Reconcile(rec),
                    now,
                );
            }
            Action::Tick => {
                s.budgets.ticks -= 1;
                s.clock += 1;
            }
        }
        s.canonicalize();
        s
    }

    /// Drives the state, without faults, to where only the external service owes
    /// answers: the reconciler (past every threshold) acts on every intermediate
    /// record, the runs it causes finish, their messages are delivered. Used by the
    /// quiescence property; it runs the same actions as the exploration.
    pub fn reconcile_to_fixpoint(&self, start: &State, tx: u8) -> State {
        let mut s = start.clone();
        for _round in 0..8 {
            if !s.records[usize::from(tx)].status.is_intermediate() {
                break;
            }
            s.budgets.reconciler_runs = s.budgets.reconciler_runs.max(1);
            s = self.apply(&s, &Action::Reconcile { tx, late: true });
            s = self.finish_everything(&s);
        }
        s
    }

    /// Runs every active run to its end and delivers every queued retry event and
    /// request, without faults (responses stay for the service's answers to decide).
    fn finish_everything(&self, start: &State) -> State {
        let mut s = start.clone();
        for _ in 0..10_000 {
            if !s.runs.is_empty() {
                s = self.apply(&s, &Action::Step { run: 0 });
            } else if !s.retries.is_empty() {
                s = self.apply(
                    &s,
                    &Action::DeliverRetry {
                        i: 0,
                        duplicate: false,
                    },
                );
            } else if !s.requests.is_empty() {
                s = self.apply(
                    &s,
                    &Action::ServiceReceive {
                        i: 0,
                        duplicate: false,
                    },
                );
            } else {
                break;
            }
        }
        s
    }

    /// The transaction an action concerns (`None` for the clock).
    fn action_tx(s: &State, a: &Action) -> Option<u8> {
        match *a {
            Action::ServiceReceive { i, .. } => s.requests.get(i).map(|r| r.tx),
            Action::ServiceAnswer { tx, .. } | Action::Reconcile { tx, .. } => Some(tx),
            Action::DeliverResponse { i, .. } => s.responses.get(i).map(|r| r.tx),
            Action::DeliverRetry { i, .. } => s.retries.get(i).map(|e| e.tx),
            Action::Step { run } | Action::Crash { run } => s.runs.get(run).map(|r| r.tx),
            Action::Fire { i, .. } => s.schedules.get(i).map(|x| x.tx),
            Action::Tick => None,
        }
    }

    /// True when nothing of transaction `tx` is in flight (live schedules allowed).
    fn tx_quiescent(s: &State, tx: u8) -> bool {
        !s.requests.iter().any(|r| r.tx == tx)
            && !s.responses.iter().any(|r| r.tx == tx)
            && !s.retries.iter().any(|e| e.tx == tx)
            && !s.runs.iter().any(|r| r.tx == tx)
            && !s
                .accepted
                .iter()
                .any(|((t, _), a)| *t == tx && a.outcome.is_none())
    }

    /// True when nothing at all is in flight: no message on any queue, no run active,
    /// and the external service owes no answer.
    pub fn quiescent(s: &State) -> bool {
        s.requests.is_empty()
            && s.responses.is_empty()
            && s.retries.is_empty()
            && s.runs.is_empty()
            && s.accepted.values().all(|a| a.outcome.is_some())
    }

    /// The transaction is terminal, or IN_PROGRESS for an attempt the service accepted
    /// and has not answered yet (it is waiting on the service, not on us).
    fn settled(s: &State, tx: u8) -> bool {
        let r = &s.records[usize::from(tx)];
        r.status.is_terminal()
            || (r.status == Status::InProgress
                && s.accepted
                    .get(&(tx, r.current_attempt.get()))
                    .is_some_and(|a| a.outcome.is_none()))
    }

    fn txs(&self) -> impl Iterator<Item = u8> {
        0..self.scope.transactions.max(1)
    }

    /// Nothing of `tx` in flight, no live schedule of it: it will never move again by
    /// itself (only the reconciler could move it).
    fn tx_final(s: &State, tx: u8) -> bool {
        Self::tx_quiescent(s, tx) && !s.schedules.iter().any(|x| x.tx == tx)
    }

    /// The properties checked on every reachable state.
    pub const SAFETY: [&'static str; 13] = [
        "service accepts at most one request per (transaction, attempt)",
        "a retry is only sent after a cancellation",
        "no transaction exceeds max_attempts",
        "a late response never changes state",
        "every transition is an arrow of the state machine",
        "every schedule is created from the persisted instant",
        "one fire instant per (transaction, attempt)",
        "no message ends in a DLQ",
        "a transaction with nothing in flight, no schedule and no scheduler-DLQ event is terminal (no reconciler needed)",
        "a transaction with nothing in flight is terminal after the reconciler (none stuck, no retry lost)",
        "every exhausted transaction raised its business alert",
        "the executor never feeds a run an impossible observation",
        "the retry handler never discards the event of the pending attempt",
    ];
}

/// The fields of a record that a decision, a guard or a property reads. The others
/// (actor, origin, outcome, reason, created_at, the index key) only feed the audit
/// trail and metrics.
fn record_key(r: &TransactionRecord) -> impl Hash + '_ {
    (
        r.status,
        r.current_attempt,
        r.next_attempt,
        r.max_attempts,
        r.next_fire_at,
        r.schedule_name.as_ref(),
        r.updated_at,
    )
}

/// The state's fingerprint covers exactly what can influence the future or a property;
/// two states with equal fingerprints are explored once. (Equal states always hash
/// equal: the hash reads a projection of the fields equality compares.)
impl Hash for State {
    fn hash<H: Hasher>(&self, h: &mut H) {
        self.clock.hash(h);
        for r in &self.records {
            record_key(r).hash(h);
        }
        self.requests.hash(h);
        self.responses.hash(h);
        for e in &self.retries {
            (e.tx, e.attempt).hash(h);
        }
        self.schedules.hash(h);
        self.runs.hash(h);
        for (k, a) in &self.accepted {
            (k, a.outcome).hash(h);
        }
        self.accepted_keys.hash(h);
        self.instants.hash(h);
        self.alerted.hash(h);
        self.scheduler_dlq.hash(h);
        self.budgets.hash(h);
        self.violations.hash(h);
    }
}

fn has(s: &State, v: Violation) -> bool {
    s.violations.contains(&v)
}

impl State {
    /// A one-line picture of the state, for counterexample traces.
    pub fn summary(&self) -> String {
        let recs: Vec<String> = self
            .records
            .iter()
            .map(|r| {
                format!(
                    "{}:{} cur={} next={}",
                    r.transaction_id,
                    r.status,
                    r.current_attempt,
                    r.next_attempt
                        .map(|a| a.get().to_string())
                        .unwrap_or("-".into())
                )
            })
            .collect();
        let runs: Vec<String> = self
            .runs
            .iter()
            .map(|r| {
                let next = match r.run.step() {
                    Step::Perform(e) => match e {
                        Effect::Write(w) => format!("write {:?}", w.event()),
                        other => other.label().to_owned(),
                    },
                    Step::Done(_) => "done".to_owned(),
                };
                format!("{:?}(tx{} {:?}) next={next}", r.kind, r.tx, r.held)
            })
            .collect();
        format!(
            "clock={} records=[{}] requests={:?} responses={:?} retries={:?} schedules={:?} runs=[{}] accepted={:?} violations={:?}",
            self.clock,
            recs.join("; "),
            self.requests.iter().map(|r| (r.tx, r.attempt)).collect::<Vec<_>>(),
            self.responses.iter().map(|r| (r.tx, r.attempt, r.outcome)).collect::<Vec<_>>(),
            self.retries.iter().map(|e| (e.tx, e.attempt)).collect::<Vec<_>>(),
            self.schedules.iter().map(|x| (x.tx, x.attempt)).collect::<Vec<_>>(),
            runs.join("; "),
            self.accepted.iter().map(|(k, a)| (*k, a.outcome)).collect::<Vec<_>>(),
            self.violations
        )
    }

    fn canonicalize(&mut self) {
        self.requests.sort();
        self.responses.sort();
        self.retries.sort();
        self.schedules.sort();
        self.runs.sort_by(|a, b| a.order().cmp(&b.order()));
    }
}

impl Model for ProtocolModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![self.initial()]
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        if !s.violations.is_empty() {
            return; // a counterexample ends here
        }
        let b = s.budgets;
        for (i, r) in s.requests.iter().enumerate() {
            if i > 0 && s.requests[i - 1] == *r {
                continue;
            }
            actions.push(Action::ServiceReceive {
                i,
                duplicate: false,
            });
            if b.duplicate_deliveries > 0 {
                actions.push(Action::ServiceReceive { i, duplicate: true });
            }
        }
        for (&(tx, attempt), a) in &s.accepted {
            match a.outcome {
                None => {
                    for outcome in [Outcome::Success, Outcome::Cancelled] {
                        actions.push(Action::ServiceAnswer {
                            tx,
                            attempt,
                            outcome,
                        });
                    }
                }
                Some(outcome) if b.extra_answers > 0 => actions.push(Action::ServiceAnswer {
                    tx,
                    attempt,
                    outcome,
                }),
                Some(_) => {}
            }
        }
        for (i, r) in s.responses.iter().enumerate() {
            if i > 0 && s.responses[i - 1] == *r {
                continue;
            }
            actions.push(Action::DeliverResponse {
                i,
                duplicate: false,
            });
            if b.duplicate_deliveries > 0 {
                actions.push(Action::DeliverResponse { i, duplicate: true });
            }
        }
        for (i, e) in s.retries.iter().enumerate() {
            if i > 0 && s.retries[i - 1] == *e {
                continue;
            }
            actions.push(Action::DeliverRetry {
                i,
                duplicate: false,
            });
            if b.duplicate_deliveries > 0 {
                actions.push(Action::DeliverRetry { i, duplicate: true });
            }
        }
        for (i, r) in s.runs.iter().enumerate() {
            if i > 0 && s.runs[i - 1] == *r {
                continue;
            }
            actions.push(Action::Step { run: i });
            // A crash before the first effect equals a delivery that has not happened.
            if b.crashes > 0 && r.performed > 0 {
                actions.push(Action::Crash { run: i });
            }
        }
        for i in 0..s.schedules.len() {
            actions.push(Action::Fire {
                i,
                how: Firing::Once,
            });
            if b.double_fires > 0 {
                actions.push(Action::Fire {
                    i,
                    how: Firing::Twice,
                });
            }
            if b.undeliverable_fires > 0 {
                actions.push(Action::Fire {
                    i,
                    how: Firing::Undeliverable,
                });
            }
        }
        if b.reconciler_runs > 0 {
            for (tx, r) in s.records.iter().enumerate() {
                let Ok(tx) = u8::try_from(tx) else { continue };
                match r.status {
                    // Before the fire instant: create the schedule; after it: requeue.
                    Status::Scheduling => {
                        actions.push(Action::Reconcile { tx, late: false });
                        actions.push(Action::Reconcile { tx, late: true });
                    }
                    Status::Scheduled | Status::Sending => {
                        actions.push(Action::Reconcile { tx, late: true });
                    }
                    _ => {}
                }
            }
        }
        if b.ticks > 0 {
            actions.push(Action::Tick);
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        if !self.scope.interleave {
            let Some(tx) = Self::action_tx(last, &action) else {
                return Some(self.apply(last, &action));
            };
            if (0..tx).any(|j| !Self::tx_final(last, j)) {
                return None;
            }
        }
        Some(self.apply(last, &action))
    }

    fn properties(&self) -> Vec<Property<Self>> {
        let p = Self::SAFETY;
        vec![
            Property::always(p[0], |_, s: &State| !has(s, Violation::DuplicateAccepted)),
            Property::always(p[1], |_, s: &State| {
                !has(s, Violation::RetryWithoutCancellation)
            }),
            Property::always(p[2], |_, s: &State| {
                !has(s, Violation::ExceededMaxAttempts)
                    && s.records
                        .iter()
                        .all(|r| r.current_attempt.get() <= r.max_attempts.get())
            }),
            Property::always(p[3], |_, s: &State| !has(s, Violation::LateResponseApplied)),
            Property::always(p[4], |_, s: &State| !has(s, Violation::IllegalTransition)),
            Property::always(p[5], |_, s: &State| {
                !has(s, Violation::ScheduleNotFromPersistedInstant)
            }),
            Property::always(p[6], |_, s: &State| {
                !has(s, Violation::TwoInstantsForOneAttempt)
            }),
            Property::always(p[7], |_, s: &State| !has(s, Violation::MessageRejected)),
            Property::always(p[8], |m: &ProtocolModel, s: &State| {
                m.txs().all(|tx| {
                    !(ProtocolModel::tx_final(s, tx) && s.scheduler_dlq[usize::from(tx)] == 0)
                        || s.records[usize::from(tx)].status.is_terminal()
                })
            }),
            Property::always(p[9], |m: &ProtocolModel, s: &State| {
                m.txs().all(|tx| {
                    !ProtocolModel::tx_quiescent(s, tx) || {
                        let settled = m.reconcile_to_fixpoint(s, tx);
                        settled.violations.is_empty() && ProtocolModel::settled(&settled, tx)
                    }
                })
            }),
            Property::always(p[10], |m: &ProtocolModel, s: &State| {
                m.txs().all(|tx| {
                    !ProtocolModel::tx_quiescent(s, tx)
                        || s.records[usize::from(tx)].status != Status::Failed
                        || s.alerted[usize::from(tx)]
                })
            }),
            Property::always(p[11], |_, s: &State| !has(s, Violation::ExecutorBug)),
            Property::always(p[12], |_, s: &State| {
                !has(s, Violation::PendingRetryDropped)
            }),
            // Witnesses: the exploration reaches the situations the guarantees are about.
            Property::sometimes(WITNESS[0], |_, s: &State| {
                s.records.iter().any(|r| {
                    r.status == Status::Failed && r.current_attempt.get() == r.max_attempts.get()
                })
            }),
            Property::sometimes(WITNESS[1], |_, s: &State| {
                s.records
                    .iter()
                    .any(|r| r.status == Status::Succeeded && r.current_attempt.get() > 1)
            }),
            Property::sometimes(WITNESS[2], |_, s: &State| {
                // A's run is still going while its retry already left SCHEDULING.
                s.runs.iter().any(|r| {
                    r.kind == Kind::ResponseHandler
                        && r.performed > 0
                        && matches!(r.held, Held::Response(resp)
                            if s.records[usize::from(resp.tx)].next_attempt
                                == Some(ProtocolModel::attempt(resp.attempt + 1))
                            && s.records[usize::from(resp.tx)].status == Status::Sending)
                })
            }),
            Property::sometimes(WITNESS[3], |_, s: &State| {
                // B died in SENDING: its event waits for redelivery, no B run is active.
                s.records.iter().enumerate().any(|(tx, r)| {
                    r.status == Status::Sending
                        && !s.runs.iter().any(|x| usize::from(x.tx) == tx)
                        && s.retries.iter().any(|e| {
                            usize::from(e.tx) == tx
                                && Some(e.attempt) == r.next_attempt.map(Attempt::get)
                        })
                })
            }),
            Property::sometimes(WITNESS[4], |_, s: &State| {
                s.responses.iter().any(|resp| {
                    resp.attempt < s.records[usize::from(resp.tx)].current_attempt.get()
                })
            }),
            Property::sometimes(WITNESS[5], |_, s: &State| {
                s.requests.iter().any(|r| s.accepted_keys.contains(&r.key))
            }),
            Property::sometimes(WITNESS[6], |_, s: &State| {
                s.scheduler_dlq.iter().any(|n| *n > 0)
                    && s.records.iter().all(|r| r.status.is_terminal())
            }),
            Property::sometimes(WITNESS[7], |_, s: &State| {
                s.runs.iter().any(|r| r.kind == Kind::Reconciler)
                    && s.records.iter().any(|r| r.status == Status::Scheduling)
            }),
        ]
    }
}

/// Situations the exploration must reach (otherwise the check would prove little).
pub const WITNESS: [&str; 8] = [
    "a transaction fails after exhausting its attempts",
    "a transaction succeeds on a retry",
    "the retry event overtakes the response handler (arrives while SCHEDULING)",
    "the retry handler died in SENDING and its event awaits redelivery",
    "a late response is in flight",
    "the service receives a duplicate publish of an accepted key",
    "a transaction completes after its scheduler event went to the DLQ",
    "the reconciler acts on a SCHEDULING transaction",
];

/// What a model check found.
#[derive(Debug, Clone)]
pub struct CheckReport {
    pub scope: Scope,
    pub states: usize,
    pub unique_states: usize,
    pub max_depth: usize,
    /// Broken safety properties, each with the actions of a shortest counterexample.
    pub violations: BTreeMap<&'static str, Vec<String>>,
    /// Witnesses reached.
    pub witnessed: BTreeSet<&'static str>,
    pub elapsed: Duration,
}

/// Checks `scope` exhaustively (breadth first) on `threads` threads. With
/// `stop_at_first_violation`, the check ends as soon as any safety property fails.
pub fn check(scope: Scope, threads: usize, stop_at_first_violation: bool) -> CheckReport {
    let started = std::time::Instant::now();
    let model = ProtocolModel::new(scope);
    let mut builder = model.clone().checker().threads(threads.max(1));
    if stop_at_first_violation {
        builder = builder.finish_when(HasDiscoveries::AnyFailures);
    }
    let checker = builder.spawn_bfs().join();
    let discoveries = checker.discoveries();
    let mut violations = BTreeMap::new();
    let mut witnessed = BTreeSet::new();
    for (name, path) in discoveries {
        if WITNESS.contains(&name) {
            witnessed.insert(name);
        } else {
            let steps = path
                .into_vec()
                .into_iter()
                .map(|(state, action)| match action {
                    Some(a) => format!("{a:?}   [before: {}]", state.summary()),
                    None => format!("(end)   [{}]", state.summary()),
                })
                .collect();
            violations.insert(name, steps);
        }
    }
    CheckReport {
        scope,
        states: checker.state_count(),
        unique_states: checker.unique_state_count(),
        max_depth: checker.max_depth(),
        violations,
        witnessed,
        elapsed: started.elapsed(),
    }
}

/// Scripting helpers: drive the model by hand (the failure-table tests use them).
impl ProtocolModel {
    /// Index of the first run of `kind` on `tx`.
    pub fn run_of(s: &State, kind: Kind, tx: u8) -> Option<usize> {
        s.runs.iter().position(|r| r.kind == kind && r.tx == tx)
    }

    /// The label of the next effect of the first run of `kind` on `tx`
    /// (`write <Event>` for writes).
    pub fn next_effect(s: &State, kind: Kind, tx: u8) -> Option<String> {
        let r = &s.runs[Self::run_of(s, kind, tx)?];
        match r.run.step() {
            Step::Perform(Effect::Write(w)) => Some(format!("write {:?}", w.event())),
            Step::Perform(e) => Some(e.label().to_owned()),
            Step::Done(_) => None,
        }
    }

    /// Steps the first run of `kind` on `tx` until its next effect is `label` (or it ends).
    pub fn step_until(&self, mut s: State, kind: Kind, tx: u8, label: &str) -> State {
        for _ in 0..64 {
            match Self::next_effect(&s, kind, tx) {
                Some(l) if l != label => {
                    let run = Self::run_of(&s, kind, tx).unwrap_or(0);
                    s = self.apply(&s, &Action::Step { run });
                }
                _ => break,
            }
        }
        s
    }

    /// Runs the first run of `kind` on `tx` to its end.
    pub fn finish_run(&self, s: State, kind: Kind, tx: u8) -> State {
        self.step_until(s, kind, tx, "<end>")
    }

    /// Stops the first run of `kind` on `tx` before its next effect (a crash).
    pub fn crash(&self, s: &State, kind: Kind, tx: u8) -> State {
        let mut s = s.clone();
        s.budgets.crashes = s.budgets.crashes.max(1);
        match Self::run_of(&s, kind, tx) {
            Some(run) => self.apply(&s, &Action::Crash { run }),
            None => s,
        }
    }

    /// The external service receives every queued request.
    pub fn service_receives_all(&self, mut s: State) -> State {
        while !s.requests.is_empty() {
            s = self.apply(
                &s,
                &Action::ServiceReceive {
                    i: 0,
                    duplicate: false,
                },
            );
        }
        s
    }

    /// The service answers attempt `attempt` of `tx` (again, if it already did).
    pub fn answer(&self, s: &State, tx: u8, attempt: u32, outcome: Outcome) -> State {
        let mut s = s.clone();
        s.budgets.extra_answers = s.budgets.extra_answers.max(1);
        self.apply(
            &s,
            &Action::ServiceAnswer {
                tx,
                attempt,
                outcome,
            },
        )
    }

    /// Delivers the first queued response of `tx` (keeping a copy when `duplicate`).
    pub fn deliver_response(&self, s: &State, tx: u8, duplicate: bool) -> State {
        let mut s = s.clone();
        s.budgets.duplicate_deliveries = s.budgets.duplicate_deliveries.max(1);
        match s.responses.iter().position(|r| r.tx == tx) {
            Some(i) => self.apply(&s, &Action::DeliverResponse { i, duplicate }),
            None => s,
        }
    }

    /// Delivers the first queued retry event of `tx` (keeping a copy when `duplicate`).
    pub fn deliver_retry(&self, s: &State, tx: u8, duplicate: bool) -> State {
        let mut s = s.clone();
        s.budgets.duplicate_deliveries = s.budgets.duplicate_deliveries.max(1);
        match s.retries.iter().position(|e| e.tx == tx) {
            Some(i) => self.apply(&s, &Action::DeliverRetry { i, duplicate }),
            None => s,
        }
    }

    /// Fires the first live schedule of `tx`.
    pub fn fire(&self, s: &State, tx: u8, how: Firing) -> State {
        let mut s = s.clone();
        s.budgets.double_fires = s.budgets.double_fires.max(1);
        s.budgets.undeliverable_fires = s.budgets.undeliverable_fires.max(1);
        match s.schedules.iter().position(|x| x.tx == tx) {
            Some(i) => self.apply(&s, &Action::Fire { i, how }),
            None => s,
        }
    }

    /// Starts a reconciler run on `tx` (late: past the fire instant).
    pub fn reconcile(&self, s: &State, tx: u8, late: bool) -> State {
        let mut s = s.clone();
        s.budgets.reconciler_runs = s.budgets.reconciler_runs.max(1);
        self.apply(&s, &Action::Reconcile { tx, late })
    }

    /// Advances the clock one tick.
    pub fn tick(&self, s: &State) -> State {
        let mut s = s.clone();
        s.budgets.ticks = s.budgets.ticks.max(1);
        self.apply(&s, &Action::Tick)
    }

    /// Drives everything to the end without faults, answering every attempt with
    /// `outcome`. Returns the final state.
    pub fn settle_with(&self, mut s: State, outcome: Outcome) -> State {
        for _ in 0..1_000 {
            if !s.runs.is_empty() {
                s = self.apply(&s, &Action::Step { run: 0 });
            } else if !s.requests.is_empty() {
                s = self.apply(
                    &s,
                    &Action::ServiceReceive {
                        i: 0,
                        duplicate: false,
                    },
                );
            } else if let Some((&(tx, attempt), _)) =
                s.accepted.iter().find(|(_, a)| a.outcome.is_none())
            {
                s = self.apply(
                    &s,
                    &Action::ServiceAnswer {
                        tx,
                        attempt,
                        outcome,
                    },
                );
            } else if !s.responses.is_empty() {
                s = self.apply(
                    &s,
                    &Action::DeliverResponse {
                        i: 0,
                        duplicate: false,
                    },
                );
            } else if !s.retries.is_empty() {
                s = self.apply(
                    &s,
                    &Action::DeliverRetry {
                        i: 0,
                        duplicate: false,
                    },
                );
            } else if !s.schedules.is_empty() {
                s = self.apply(
                    &s,
                    &Action::Fire {
                        i: 0,
                        how: Firing::Once,
                    },
                );
            } else {
                break;
            }
        }
        s
    }

    /// The initial state.
    pub fn initial_state(&self) -> State {
        self.initial()
    }

    /// Whether the safety properties hold in `s` (the names of those that do not).
    pub fn broken(&self, s: &State) -> Vec<&'static str> {
        self.properties()
            .iter()
            .filter(|p| p.expectation == stateright::Expectation::Always)
            .filter(|p| !(p.condition)(self, s))
            .map(|p| p.name)
            .collect()
    }
}
