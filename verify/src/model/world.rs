//! The world around the handlers: queues, the scheduler, the external service, the
//! runs in progress, and how each action changes them.

use super::breaker::{BreakerViolation, ModelBreaker, Verdict};
use super::scope::Budgets;
use crate::fixture::Command;
use crate::Flaws;
use domain::decide::{Effect, Run, Step};
use domain::ids::{ScheduleName, Timestamp};
use domain::machine::TransactionRecord;
use domain::machine::{Actor, Counter, Mark, Status};
use domain::message::{Origin, Outcome};
use std::collections::BTreeSet;
use std::hash::{Hash, Hasher};
use testkit::oracle::{Instants, Sends, Service, Violation};

/// A request on the request queue, as the external service sees it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Req {
    pub tx: u8,
    pub attempt: u32,
    pub key: String,
    pub round: Option<u32>,
    /// The queue already delivered this message once and it stays queued (a
    /// duplicate delivery): a later delivery is a copy of one message, which a
    /// service that does not deduplicate by key still runs once. Tracked only with
    /// such a service (always false otherwise).
    pub delivered: bool,
}

/// A response on the response queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Resp {
    pub tx: u8,
    pub attempt: u32,
    pub outcome: Outcome,
    /// The round the service echoes (the newest it received for the key).
    pub round: Option<u32>,
    /// Outbox delivery, an ERROR: the service says the call may have run
    /// (`execution UNKNOWN`; false: `NOT_RUN`). Always false in direct delivery,
    /// whose ERROR carries no execution.
    pub may_have_run: bool,
}

/// A retry event on the retry queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Ev {
    pub tx: u8,
    pub attempt: u32,
    pub origin: Origin,
    /// The retry cycle it was made for.
    pub round: Option<u32>,
    /// The instant of the schedule that delivered it, when the breaker is modelled:
    /// the retry handler decides it no earlier (a schedule never fires early, and
    /// the breaker's rules compare that instant with the cycle's).
    pub at: Option<Timestamp>,
}

/// A live one-time schedule.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Sched {
    pub name: ScheduleName,
    pub tx: u8,
    pub attempt: u32,
    pub fire_at: Timestamp,
    /// The round its event carries.
    pub round: Option<u32>,
}

/// The message a run holds (it goes back to its queue if the run crashes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Held {
    Response(Resp),
    Retry(Ev),
    /// The reconciler's query result: no message.
    Nothing,
    /// A stream record (a SENDING image) for the publisher: its attempt and round
    /// (the image itself is the run's input, put back on the stream by a crash).
    Stream {
        attempt: u32,
        round: u32,
    },
}

/// A handler execution in progress: a real [`Run`] plus what the model needs.
#[derive(Debug, Clone)]
pub struct ActiveRun {
    pub kind: Actor,
    pub tx: u8,
    pub held: Held,
    /// The instant the run decides at.
    pub now: Timestamp,
    /// Effects performed so far.
    pub performed: u8,
    pub run: Run<Flaws>,
    /// The circuit breaker's verdict the run decides with (every re-decision too).
    pub verdict: Verdict,
    /// The run began with the record already FAILED/REJECTED: it may publish nothing.
    pub after_rejection: bool,
    /// Canonical identity of the run's future behaviour: its input, remaining plan and
    /// re-decision count (the trail of past effects does not influence what it does).
    key: String,
}

impl ActiveRun {
    pub(super) fn new(kind: Actor, tx: u8, held: Held, now: Timestamp, run: Run<Flaws>) -> Self {
        let mut r = Self {
            kind,
            tx,
            held,
            now,
            performed: 0,
            run,
            verdict: Verdict::default(),
            after_rejection: false,
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
    pub(super) fn rekey(&mut self) {
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
                    (
                        w.guard.budget,
                        w.guard.counts[Counter::Republishes],
                        w.guard.counts[Counter::Requeues],
                        w.guard.counts[Counter::Round]
                    ),
                    w.to(),
                    w.set.current_attempt,
                    w.set.next_attempt,
                    w.set.max_attempts,
                    w.set.next_fire_at,
                    w.set.schedule_name,
                    (
                        w.set.updated_at,
                        &w.set.answer_due_at,
                        (
                            &w.set.counts[Counter::Republishes],
                            &w.set.counts[Counter::Requeues],
                            &w.set.counts[Counter::Round]
                        ),
                        (&w.set.last_reason, &w.set.mark),
                        &w.set.reconcile,
                        (w.guard.unclaimed, &w.set.publishing_since)
                    )
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

    #[allow(clippy::type_complexity)]
    fn order(
        &self,
    ) -> (
        Actor,
        u8,
        (u32, Option<Outcome>, Option<Timestamp>, Option<u32>),
        Timestamp,
        &str,
        u8,
        (Option<(Timestamp, u8)>, bool, Option<Timestamp>),
        bool,
    ) {
        (
            self.kind,
            self.tx,
            self.held.key(),
            self.now,
            &self.key,
            self.performed.min(1),
            self.verdict.key(),
            self.after_rejection,
        )
    }
}

impl Held {
    /// What of the held message can influence the future (an event's origin is only
    /// recorded, never read by a decision).
    fn key(&self) -> (u32, Option<Outcome>, Option<Timestamp>, Option<u32>) {
        match self {
            Held::Response(r) => (r.attempt, Some(r.outcome), None, None),
            Held::Retry(e) => (e.attempt, None, e.at, None),
            Held::Nothing => (0, None, None, None),
            Held::Stream { attempt, round } => (*attempt, None, None, Some(*round)),
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
    pub service: Service<u8>,
    /// The instant of the first schedule created for each (tx, attempt).
    pub instants: Instants<u8>,
    pub alerted: Vec<bool>,
    /// The retry events of each transaction the breaker held back (each deferred on
    /// the retry queue; the record is not written).
    pub held: Vec<u8>,
    /// Events the scheduler could not deliver, per transaction (scheduler DLQ).
    pub scheduler_dlq: Vec<u8>,
    /// Requests or answers of each transaction lost on the way.
    pub lost: Vec<u8>,
    /// ERROR answers the service put on the response queue, per transaction.
    pub errors: Vec<u8>,
    pub budgets: Budgets,
    pub violations: BTreeSet<Violation>,
    /// The service is down (an outage is going on).
    pub down: bool,
    /// The circuit breaker, when the scope models outages.
    pub breaker: Option<ModelBreaker>,
    /// Breaches of the breaker's guarantees.
    pub breaker_violations: BTreeSet<BreakerViolation>,
    /// The clock has passed the transactions' deadline: every later decision is made
    /// past it.
    pub past_deadline: bool,
    /// A request was published for a transaction already FAILED/REJECTED by a run
    /// that began after it, or for a later attempt than the rejected one.
    pub published_after_rejection: bool,
    /// Outbox delivery: the table's stream records the publisher has yet to handle
    /// (at least once: a crash puts one back, the duplicate budget delivers one
    /// twice), a multiset like the queues.
    pub stream: Vec<Img>,
    /// Outbox delivery: the deduplication ids the FIFO request queue remembers (those
    /// it accepted within its window; a window expiry forgets them all).
    pub fifo: BTreeSet<String>,
    /// Outbox delivery: every send the FIFO queue accepted, per deduplication id.
    pub sends: Sends,
    /// Outbox delivery: the FIFO queue has dropped a repeated send.
    pub fifo_dropped: bool,
    /// Outbox delivery: a publisher run found a claim older than the window and did
    /// not send it again.
    pub claim_expired: bool,
    /// Outbox delivery: no decision is made earlier than this (a late reconciler run
    /// moved time on: every claim written after it is at least as late), in ms.
    pub floor_ms: i64,
}

/// A stream record: the new image of a write that left transaction `tx` SENDING
/// with no claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Img {
    pub tx: u8,
    pub image: TransactionRecord,
}

impl Img {
    /// What of the image a decision reads, in an order for canonical states.
    pub(super) fn order(&self) -> (u8, Option<u32>, u32, Option<i64>, i64) {
        (
            self.tx,
            self.image.next_attempt.map(|a| a.get()),
            self.image.counts[Counter::Round],
            self.image.publishing_since.map(|t| t.millis()),
            self.image.updated_at.millis(),
        )
    }
}

/// One thing that can happen next.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Action {
    /// The external service takes request `i` from the request queue.
    ServiceReceive { i: usize, duplicate: bool },
    /// The external service answers an attempt it accepted (an ERROR in outbox
    /// delivery says whether the call may have run).
    ServiceAnswer {
        tx: u8,
        attempt: u32,
        outcome: Outcome,
        may_have_run: bool,
    },
    /// Request `i` is lost before the service reads it.
    LoseRequest { i: usize },
    /// The service executes an attempt it accepted; its answer is lost.
    LoseAnswer {
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
    /// The service goes down (an outage starts).
    OutageStarts,
    /// The service comes up again.
    OutageEnds,
    /// The clock jumps past the transactions' deadline.
    DeadlinePasses,
    /// An operator acts on transaction `tx` as it reads it: resolves it while it
    /// waits for its retry, or replays it once it failed.
    Operate { tx: u8, act: Command },
    /// Outbox delivery: the publisher receives stream record `i`.
    DeliverStream { i: usize, duplicate: bool },
    /// Outbox delivery: time passes beyond the FIFO queue's deduplication window.
    WindowPasses,
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

/// The fields of a record that a decision, a guard or a property reads. The others
/// (actor, origin, outcome, created_at, the index partition) only feed the audit trail
/// and metrics.
fn record_key(r: &TransactionRecord) -> impl Hash + '_ {
    (
        (
            r.status,
            r.current_attempt,
            r.next_attempt,
            r.max_attempts,
            r.next_fire_at,
            r.schedule_name.as_ref(),
            r.updated_at,
        ),
        (
            r.answer_due_at,
            (
                r.counts[Counter::Republishes],
                r.counts[Counter::Requeues],
                r.counts[Counter::Round],
                r.counts[Counter::ProbeErrors],
            ),
            // The mark is read by decisions (an ERROR redelivered to a FAILED record
            // alerts again only when its re-sends ended it); the reason, by none, is
            // kept in the key so that the count of states stays comparable.
            (r.mark, r.last_reason.as_deref()),
            r.reconcile.as_ref().map(|k| k.at),
            r.publishing_since,
        ),
    )
}

/// The state's fingerprint covers exactly what can influence the future or a property;
/// two states with equal fingerprints are explored once. (Equal states always hash
/// equal: the hash reads a projection of the fields equality compares.)
impl Hash for State {
    fn hash<H: Hasher>(&self, h: &mut H) {
        self.clock.hash(h);
        self.past_deadline.hash(h);
        for r in &self.records {
            record_key(r).hash(h);
        }
        self.requests.hash(h);
        self.responses.hash(h);
        for e in &self.retries {
            (e.tx, e.attempt, e.round, e.at).hash(h);
        }
        self.schedules.hash(h);
        self.runs.hash(h);
        self.service.hash(h);
        self.instants.hash(h);
        self.alerted.hash(h);
        self.held.hash(h);
        self.scheduler_dlq.hash(h);
        self.lost.hash(h);
        self.errors.hash(h);
        self.budgets.hash(h);
        self.violations.hash(h);
        self.down.hash(h);
        self.breaker.hash(h);
        self.breaker_violations.hash(h);
        self.published_after_rejection.hash(h);
        for m in &self.stream {
            m.tx.hash(h);
            record_key(&m.image).hash(h);
        }
        self.fifo.hash(h);
        self.sends.hash(h);
        self.fifo_dropped.hash(h);
        self.claim_expired.hash(h);
        self.floor_ms.hash(h);
    }
}

impl State {
    /// Transaction `tx` ended FAILED by a REJECTED answer.
    pub fn ended_rejected(&self, tx: u8) -> bool {
        self.records
            .get(usize::from(tx))
            .is_some_and(|r| r.status == Status::Failed && r.mark == Some(Mark::Rejected))
    }

    /// A one-line picture of the state, for counterexample traces.
    pub fn summary(&self) -> String {
        let recs: Vec<String> = self
            .records
            .iter()
            .map(|r| {
                format!(
                    "{}:{} cur={} next={}{}",
                    r.transaction_id,
                    r.status,
                    r.current_attempt,
                    r.next_attempt
                        .map(|a| a.get().to_string())
                        .unwrap_or("-".into()),
                    if r.counts[Counter::Round] > 0 || r.counts[Counter::ProbeErrors] > 0 {
                        format!(
                            " resends={} pauses={} reason={}",
                            r.counts[Counter::Round],
                            r.counts[Counter::ProbeErrors],
                            r.last_reason.as_deref().unwrap_or("-")
                        )
                    } else {
                        String::new()
                    }
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
            "clock={} records=[{}] requests={:?} responses={:?} retries={:?} schedules={:?} runs=[{}] accepted={:?} violations={:?}{}",
            self.clock,
            recs.join("; "),
            self.requests.iter().map(|r| (r.tx, r.attempt)).collect::<Vec<_>>(),
            self.responses.iter().map(|r| (r.tx, r.attempt, r.outcome)).collect::<Vec<_>>(),
            self.retries.iter().map(|e| (e.tx, e.attempt)).collect::<Vec<_>>(),
            self.schedules.iter().map(|x| (x.tx, x.attempt)).collect::<Vec<_>>(),
            runs.join("; "),
            self.service.accepted().map(|(k, a)| (*k, a)).collect::<Vec<_>>(),
            self.violations,
            match &self.breaker {
                Some(b) => format!(
                    " service={} breaker={:?} {:?}",
                    if self.down { "DOWN" } else { "up" },
                    b.item.state,
                    self.breaker_violations
                ),
                None => String::new(),
            }
        )
    }

    pub(super) fn canonicalize(&mut self) {
        self.requests.sort();
        self.responses.sort();
        self.retries.sort();
        self.schedules.sort();
        self.runs.sort_by(|a, b| a.order().cmp(&b.order()));
        self.stream.sort_by_key(Img::order);
    }
}
