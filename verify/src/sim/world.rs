//! The world: the store, the queues, the runs in progress, and the event loop.

use super::breaker::{SimBreaker, REOPENING_MS};
use super::config::OPERATOR_WINDOW_MS;
pub(super) use super::queue::QueueId;
use super::queue::{Rng, SimQueue};
use super::{Report, SimConfig};
use crate::fixture;
use crate::Flaws;
use domain::breaker::Hold;
use domain::breaker::Tally;
use domain::decide::{Ack, Context, Disposition, DropReason, Effect, Input, Known, Run, Step};
use domain::ids::{Attempt, ScheduleName, Timestamp, TransactionId};
use domain::machine::{Actor, Status, TransactionRecord};
use domain::message::{Execution, Outcome, Payload, Response, RetryEvent};
use domain::policy::PolicySet;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;
use testkit::oracle::{self, Instants, Service, Violation};

#[derive(Debug)]
pub(super) struct Proc {
    pub(super) kind: Actor,
    pub(super) worker: usize,
    /// The queue message this run handles (none for the reconciler).
    pub(super) msg: Option<u64>,
    pub(super) tx: usize,
    /// Response attempt (A) or retry attempt (B).
    pub(super) attempt: u32,
    pub(super) run: Run<Flaws>,
    pub(super) now: Timestamp,
    /// The circuit breaker's verdict this run decides with.
    pub(super) hold: Option<Hold>,
    /// The reconciler's request went out as a half-open round's probe (its deadline
    /// is not the breaker's signal).
    pub(super) probe: bool,
    /// Records the reconciler still has to act on in this invocation.
    pub(super) backlog: VecDeque<TransactionRecord>,
    /// The run began with its record already FAILED/REJECTED: it may publish nothing.
    pub(super) after_rejection: bool,
}

impl Proc {
    /// A run of `kind` on transaction `tx`: no message, no breaker verdict, nothing
    /// queued behind it.
    pub(super) fn new(
        kind: Actor,
        tx: usize,
        attempt: u32,
        run: Run<Flaws>,
        now: Timestamp,
    ) -> Self {
        Self {
            kind,
            worker: 0,
            msg: None,
            tx,
            attempt,
            run,
            now,
            hold: None,
            probe: false,
            backlog: VecDeque::new(),
            after_rejection: false,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Ev {
    Start(usize),
    Poll(QueueId),
    Step(u64),
    ServiceReceive {
        tx: usize,
        attempt: u32,
        key: String,
        round: Option<u32>,
        /// The request message (a copy the queue delivers again carries the same).
        msg: u64,
        /// Who published it.
        by: &'static str,
    },
    Answer(Answer),
    Fire {
        name: ScheduleName,
        generation: u64,
    },
    ReconcilerTick,
    /// An operator looks at transaction `tx` and acts on what it sees.
    Operate(usize),
    /// Outbox delivery: stream record `id` reaches the publisher.
    Stream(u64),
}

/// The service's answer to an attempt, on its way to the response queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Answer {
    pub(super) tx: usize,
    pub(super) attempt: u32,
    pub(super) outcome: Outcome,
    pub(super) round: Option<u32>,
    /// Outbox delivery, an ERROR: what it says of the call.
    pub(super) execution: Option<Execution>,
}

#[derive(Debug, Clone)]
pub(super) struct LiveSchedule {
    pub(super) tx: usize,
    pub(super) attempt: Attempt,
    pub(super) generation: u64,
}

pub(super) struct World<'a> {
    pub(super) cfg: &'a SimConfig,
    pub(super) policies: PolicySet,
    pub(super) now: i64,
    pub(super) seq: u64,
    pub(super) events: BTreeMap<(i64, u64), Ev>,
    pub(super) ids: Vec<TransactionId>,
    pub(super) records: Vec<Option<TransactionRecord>>,
    pub(super) payloads: Vec<Option<Payload>>,
    pub(super) index: BTreeSet<(String, Timestamp, usize)>,
    pub(super) responses: SimQueue<Response>,
    pub(super) retries: SimQueue<RetryEvent>,
    pub(super) schedules: BTreeMap<ScheduleName, LiveSchedule>,
    /// First instant a schedule was created with, per (tx, attempt).
    pub(super) instants: Instants<usize>,
    /// What the external service accepted, as the oracle keeps it.
    pub(super) ledger: Service<usize>,
    pub(super) procs: BTreeMap<u64, Proc>,
    pub(super) next_proc: u64,
    pub(super) pacer: Vec<i64>,
    pub(super) retry_publish_times: Vec<i64>,
    pub(super) reconciler_busy: bool,
    /// Pending events other than polls and cron ticks.
    pub(super) pending_work: u64,
    pub(super) idle_ticks: u32,
    pub(super) last_tick_found: usize,
    pub(super) alerts: Vec<u32>,
    pub(super) dlq_by_tx: Vec<u32>,
    /// Retry events of each transaction the breaker held back (deferred).
    pub(super) held_by_tx: Vec<u32>,
    pub(super) faults: Rng,
    pub(super) latency: Rng,
    pub(super) service: Rng,
    pub(super) jitter: Rng,
    pub(super) queue_rng: Rng,
    /// Operators' decisions (their own stream: a run without operators draws none).
    pub(super) operator: Rng,
    /// Each execution environment's clock offset (ms): response workers, retry
    /// workers, the reconciler; all 0 without skew (no draw).
    pub(super) skew: Skew,
    pub(super) report: Report,
    pub(super) breaker: Option<SimBreaker>,
    /// The last request message published (each publish is a new message).
    pub(super) last_msg: u64,
    /// With a service that does not deduplicate: the request messages it received,
    /// and its runs per (transaction, attempt).
    pub(super) messages_received: BTreeSet<u64>,
    pub(super) runs: BTreeMap<(usize, u32), u32>,
    /// Outbox delivery: stream records not yet handled to the end (the image, and
    /// the publisher runs that failed on it), by record id.
    pub(super) stream: BTreeMap<u64, (TransactionRecord, u32)>,
    /// Outbox delivery: the stream's and the publisher's randomness.
    pub(super) stream_rng: Rng,
    /// Outbox delivery: the FIFO request queue's deduplication ids, with the instant
    /// each was accepted.
    pub(super) fifo: BTreeMap<String, i64>,
    /// Outbox delivery: every send the FIFO queue accepted, per deduplication id.
    pub(super) sends: testkit::oracle::Sends,
}

pub(super) const END_MS: i64 = 90 * 24 * 3_600_000;

/// The clock offsets of the execution environments (`SimConfig::clock_skew_ms`).
#[derive(Debug, Default)]
pub(super) struct Skew {
    response: Vec<i64>,
    retry: Vec<i64>,
    reconciler: i64,
    /// Outbox delivery only (drawn after the others).
    publisher: i64,
}

impl Skew {
    fn draw(cfg: &SimConfig, seed: u64) -> Self {
        if cfg.clock_skew_ms <= 0 {
            return Self::default();
        }
        let mut rng = Rng::new(seed, 7);
        let mut offsets = |n: usize| -> Vec<i64> {
            (0..n)
                .map(|_| rng.range(-cfg.clock_skew_ms, cfg.clock_skew_ms))
                .collect()
        };
        let response = offsets(cfg.response_concurrency);
        let retry = offsets(cfg.retry_concurrency);
        let reconciler = offsets(1).first().copied().unwrap_or(0);
        let publisher = if cfg.outbox() {
            offsets(1).first().copied().unwrap_or(0)
        } else {
            0
        };
        Self {
            response,
            retry,
            reconciler,
            publisher,
        }
    }

    /// The offset of `kind`'s environment `worker`.
    pub(super) fn of(&self, kind: Actor, worker: usize) -> i64 {
        let at = |v: &Vec<i64>| v.get(worker).copied().unwrap_or(0);
        match kind {
            Actor::ResponseHandler => at(&self.response),
            Actor::RetryHandler => at(&self.retry),
            Actor::Reconciler => self.reconciler,
            Actor::Starter | Actor::Operator => 0,
            Actor::Publisher => self.publisher,
        }
    }
}

pub(super) fn ts(ms: i64) -> Timestamp {
    Timestamp::from_millis(ms)
}

impl<'a> World<'a> {
    pub(super) fn new(cfg: &'a SimConfig, seed: u64) -> Self {
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
            instants: Instants::new(),
            ledger: Service::new(),
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
            held_by_tx: vec![0; n],
            faults: Rng::new(seed, 1),
            latency: Rng::new(seed, 2),
            service: Rng::new(seed, 3),
            jitter: Rng::new(seed, 4),
            queue_rng: Rng::new(seed, 5),
            operator: Rng::new(seed, 6),
            skew: Skew::draw(cfg, seed),
            report: Report {
                seeds: 1,
                rate_limit: cfg.fleet_limit(),
                digest: 0xcbf2_9ce4_8422_2325,
                probe_limit: cfg.breaker.map_or(0, |b| u64::from(b.probes)),
                non_idempotent: cfg.service.runs_every_message(),
                outbox: cfg.outbox(),
                ..Report::default()
            },
            breaker: cfg
                .breaker
                .map(|b| SimBreaker::new(b, cfg.breaker_refresh_ms)),
            last_msg: 0,
            messages_received: BTreeSet::new(),
            runs: BTreeMap::new(),
            stream: BTreeMap::new(),
            stream_rng: Rng::new(seed, 8),
            fifo: BTreeMap::new(),
            sends: testkit::oracle::Sends::new(),
        }
    }

    pub(super) fn at(&mut self, time: i64, ev: Ev) {
        self.seq += 1;
        if !matches!(ev, Ev::Poll(_) | Ev::ReconcilerTick) {
            self.pending_work += 1;
        }
        self.events.insert((time, self.seq), ev);
    }

    pub(super) fn ctx(&self, now: Timestamp) -> Context {
        fixture::context(
            now,
            &self.policies,
            Duration::from_millis(u64::try_from(self.cfg.reconcile_threshold_ms).unwrap_or(0)),
        )
        .with_answer_deadline(
            Duration::from_millis(u64::try_from(self.cfg.answer_timeout_ms).unwrap_or(0)),
            self.cfg.answer_republish_max,
        )
        .with_technical_resend_max(self.cfg.technical_resend_max)
        .with_transaction_deadline(Duration::from_millis(self.cfg.transaction_deadline_ms))
        .with_delivery(self.cfg.delivery)
    }

    /// A run deciding `input` under `ctx` from an unread record, with the flaws
    /// switched on and the seed's jitter.
    pub(super) fn decide(&mut self, input: Input, ctx: &Context) -> Run<Flaws> {
        Run::with_rules(self.cfg.flaws, input, Known::Unread, ctx, &mut self.jitter)
    }

    pub(super) fn tx_of(&self, id: &TransactionId) -> Option<usize> {
        id.as_str()
            .strip_prefix("TX-")
            .and_then(|n| n.parse::<usize>().ok())
            .filter(|n| *n < self.ids.len())
    }

    pub(super) fn digest(&mut self, ev: &Ev) {
        let tag: u64 = match ev {
            Ev::Start(i) => 1 ^ (*i as u64) << 8,
            Ev::Poll(q) => 2 ^ (*q as u64) << 8,
            Ev::Step(p) => 3 ^ p << 8,
            Ev::ServiceReceive { tx, attempt, .. } => {
                4 ^ (*tx as u64) << 8 ^ u64::from(*attempt) << 40
            }
            Ev::Answer(a) => 5 ^ (a.tx as u64) << 8 ^ u64::from(a.attempt) << 40,
            Ev::Fire { generation, .. } => 6 ^ generation << 8,
            Ev::ReconcilerTick => 7,
            Ev::Operate(tx) => 8 ^ (*tx as u64) << 8,
            Ev::Stream(id) => 9 ^ id << 8,
        };
        let mut h = self.report.digest;
        for v in [tag, self.now as u64] {
            h ^= v;
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        self.report.digest = h;
    }

    // -- the store ---------------------------------------------------------

    pub(super) fn set_record(&mut self, tx: usize, rec: TransactionRecord) {
        if let Some(old) = self.records[tx].as_ref().and_then(|r| r.reconcile.clone()) {
            self.index.remove(&(old.partition, old.at, tx));
        }
        if let Some(k) = rec.reconcile.clone() {
            self.index.insert((k.partition, k.at, tx));
        }
        self.records[tx] = Some(rec);
    }
}

impl World<'_> {
    // -- processes ---------------------------------------------------------

    /// Transaction `tx` ended FAILED by a REJECTED answer.
    pub(super) fn ended_rejected(&self, tx: usize) -> bool {
        self.records
            .get(tx)
            .and_then(Option::as_ref)
            .is_some_and(|r| {
                r.status == Status::Failed && r.mark == Some(domain::machine::Mark::Rejected)
            })
    }

    pub(super) fn spawn(&mut self, p: Proc) {
        let first = self.latency.range(1, 20);
        self.spawn_after(first, p);
    }

    /// A run whose first step is `delay_ms` from now.
    pub(super) fn spawn_after(&mut self, delay_ms: i64, mut p: Proc) {
        p.after_rejection = self.ended_rejected(p.tx);
        self.next_proc += 1;
        let pid = self.next_proc;
        self.procs.insert(pid, p);
        self.at(self.now + delay_ms, Ev::Step(pid));
    }

    pub(super) fn step(&mut self, pid: u64) {
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
            && p.kind == Actor::RetryHandler
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
        let ctx = self.ctx(p.now).with_hold(p.hold).with_probe(p.probe);
        if p.run.observe(observed, &ctx, &mut self.jitter).is_err() {
            self.report.count(Violation::ImpossibleObservation);
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

    pub(super) fn count_point(&mut self, what: &str, p: &Proc, e: &Effect) {
        let label = match e {
            Effect::Write(w) => format!("write {:?}", w.event()),
            other => other.label().to_owned(),
        };
        *self
            .report
            .failure_points
            .entry(format!("{what} {} before {label}", p.kind.as_str()))
            .or_default() += 1;
    }

    /// A run ended: `Some(disposition)` when it finished, `None` when it stopped
    /// (crash, throttling): then its message stays and reappears after its
    /// visibility timeout.
    pub(super) fn finish(&mut self, pid: u64, mut p: Proc, done: Option<Disposition>) {
        let _ = pid;
        if let (Some(Disposition::Ack(ack)), Actor::RetryHandler) = (&done, p.kind) {
            if *ack == Ack::Paused {
                self.report.retries_paused += 1;
            }
        }
        if let (
            Some(Disposition::Ack(Ack::ReconcilerRepublished | Ack::Unanswered)),
            Actor::Reconciler,
            false,
        ) = (&done, p.kind, p.probe)
        {
            self.deadline_fired();
        }
        if let Some(d) = &done {
            if let (Actor::ResponseHandler, Disposition::Drop(DropReason::LateResponse { .. })) =
                (p.kind, d)
            {
                self.report.late_dropped += 1;
            }
            // A rejected message goes to its DLQ; discarding an event for the attempt
            // still pending loses that retry.
            let retry = match p.run.input() {
                Input::Retry(ev) => Some((ev.attempt.get(), ev.round)),
                _ => None,
            };
            // An operator's command refused (the transaction moved on since it was
            // read) is the command's answer, not a message dead-lettered.
            let refused = p.kind == Actor::Operator && matches!(d, Disposition::Reject(_));
            if refused {
                self.report.operator_refused += 1;
            } else if let Some(v) =
                oracle::disposition(d, retry, self.records[p.tx].as_ref(), self.cfg.delivery)
            {
                self.report.count(v);
                if v == Violation::MessageRejected {
                    self.dlq_by_tx[p.tx] += 1;
                }
            }
        }
        match p.kind {
            Actor::ResponseHandler | Actor::RetryHandler => {
                let q = if p.kind == Actor::ResponseHandler {
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
            // The event source mapping retries a failed batch a few times, then gives
            // the record to its on-failure destination: the reconciler rescues the
            // intent.
            Actor::Publisher => {
                let Some(id) = p.msg else { return };
                if let Some(Disposition::Ack(Ack::PublishUnconfirmed)) = &done {
                    self.report.publish_unconfirmed += 1;
                }
                if done.is_some() {
                    self.stream.remove(&id);
                    return;
                }
                let again = self.stream.get_mut(&id).map(|(_, fails)| {
                    *fails += 1;
                    *fails <= super::config::STREAM_MAX_RETRIES
                });
                if again == Some(true) {
                    let (lo, hi) = super::config::STREAM_RETRY_MS;
                    let at = self.now + self.stream_rng.range(lo, hi);
                    self.report.stream_redeliveries += 1;
                    self.at(at, Ev::Stream(id));
                } else {
                    self.stream.remove(&id);
                }
            }
            // A command that dies midway is not run again: the reconciler finishes
            // what it did not do (a replay's retry event).
            Actor::Operator => {
                if let Some(Disposition::Ack(ack)) = &done {
                    match ack {
                        Ack::Resolved => self.report.operator_resolved += 1,
                        Ack::Replayed => self.report.operator_replayed += 1,
                        _ => {}
                    }
                }
            }
            Actor::Reconciler => {
                if done.is_none() {
                    self.reconciler_busy = false;
                    return;
                }
                if let Some(Disposition::Ack(Ack::PublishUnconfirmed)) = &done {
                    self.report.publish_unconfirmed += 1;
                }
                match p.backlog.pop_front() {
                    Some(rec) => {
                        self.report.reconciler_actions += 1;
                        let local = self.now + self.skew.of(Actor::Reconciler, 0);
                        let now = ts(local);
                        let (hold, probe) = self.reconcile_verdict(&rec, local);
                        (p.hold, p.probe) = (hold, probe);
                        let ctx = self.ctx(now).with_hold(hold).with_probe(probe);
                        p.tx = self.tx_of(&rec.transaction_id).unwrap_or(0);
                        p.attempt = rec.next_attempt.map(Attempt::get).unwrap_or(0);
                        p.run = self.decide(Input::Reconcile(rec), &ctx);
                        p.now = now;
                        self.spawn(p);
                    }
                    None => self.reconciler_busy = false,
                }
            }
            // The starter runs outside the simulated handlers.
            Actor::Starter => {}
        }
    }

    // -- queues ------------------------------------------------------------

    pub(super) fn poll_soon(&mut self, q: QueueId) {
        let at = self.now + self.latency.range(1, 20);
        self.at(at, Ev::Poll(q));
    }

    pub(super) fn schedule_wake(&mut self, q: QueueId) {
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

    pub(super) fn poll(&mut self, q: QueueId) {
        loop {
            let worker = match q {
                QueueId::Response => self.responses.idle_workers.iter().next().copied(),
                QueueId::Retry => self.retries.idle_workers.iter().next().copied(),
            };
            let Some(worker) = worker else { break };
            let duplicate = self.faults.chance(self.cfg.duplicate_rate);
            let (now, rng) = (self.now, &mut self.queue_rng);
            let (got, dead) = match q {
                QueueId::Response => {
                    receive(&mut self.responses, now, rng, duplicate, Input::Response)
                }
                QueueId::Retry => receive(&mut self.retries, now, rng, duplicate, Input::Retry),
            };
            for input in dead {
                if let Some(tx) = self.tx_of(input.transaction_id()) {
                    self.dlq_by_tx[tx] += 1;
                }
            }
            let Some((id, input)) = got else { break };
            if duplicate {
                self.report.duplicate_deliveries += 1;
            }
            let (kind, tx, attempt) = match &input {
                Input::Response(r) => (
                    Actor::ResponseHandler,
                    self.tx_of(&r.transaction_id),
                    r.attempt.get(),
                ),
                Input::Retry(e) => (
                    Actor::RetryHandler,
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
            let local = self.now + self.skew.of(kind, worker);
            let now = ts(local);
            let (hold, probe) = self.breaker_verdict(&input, worker, local);
            let ctx = self.ctx(now).with_hold(hold).with_probe(probe);
            let run = self.decide(input, &ctx);
            self.spawn(Proc {
                worker,
                msg: Some(id),
                hold,
                probe,
                ..Proc::new(kind, tx, attempt, run, now)
            });
        }
        self.schedule_wake(q);
    }

    // -- the circuit breaker -----------------------------------------------

    /// What the breaker says about a message a handler received: the retry handler's
    /// request waits (`Some`) or goes out (`true`: as a probe). (An answer is counted
    /// when its plan gives its signal.)
    /// While the environment's view may hand out a probe, the record is read first
    /// and only an event that would publish a request asks (`domain::decide::retry_asks_breaker`).
    fn breaker_verdict(&mut self, input: &Input, worker: usize, now: i64) -> (Option<Hold>, bool) {
        let Input::Retry(ev) = input else {
            return (None, false);
        };
        let Some(may_probe) = self.breaker.as_mut().map(|b| b.may_probe(worker, now)) else {
            return (None, false);
        };
        let asks = !may_probe
            || self
                .tx_of(&ev.transaction_id)
                .and_then(|tx| self.records[tx].as_ref())
                .is_some_and(|r| {
                    domain::decide::retry_asks_breaker(&self.cfg.flaws, r, ev, &self.ctx(ts(now)))
                });
        match self.breaker.as_mut() {
            Some(b) if asks => b.admission(worker, now, self.cfg.count_probes, &mut self.jitter),
            _ => (None, false),
        }
    }

    /// What the breaker says about a record the reconciler is about to act on: only an
    /// unanswered request past its deadline asks (it would go out again), as the
    /// functions' reconciler does; `true`: let out as a probe.
    pub(super) fn reconcile_verdict(
        &mut self,
        rec: &TransactionRecord,
        now: i64,
    ) -> (Option<Hold>, bool) {
        let ctx = self.ctx(ts(now));
        let count_probes = self.cfg.count_probes;
        match self.breaker.as_mut() {
            Some(b) if domain::decide::asks_breaker(rec, &ctx) => {
                b.admission(usize::MAX, now, count_probes, &mut self.jitter)
            }
            _ => (None, false),
        }
    }

    /// An answer deadline the reconciler saw fire (it published the request again or
    /// abandoned it), counted at once: the functions count a run's deadlines together
    /// at its end, the window sums the same, and a run the simulator stops half-way
    /// (a crash, throttling: far more often than a real invocation dies) keeps what it
    /// saw.
    fn deadline_fired(&mut self) {
        let now = self.now;
        if let Some(b) = self.breaker.as_mut() {
            b.observe(
                &Tally {
                    deadlines: 1,
                    ..Tally::default()
                },
                now,
            );
        }
    }

    // -- the loop ----------------------------------------------------------

    pub(super) fn start_transaction(&mut self, i: usize) {
        let now = ts(self.now);
        let ctx = self.ctx(now);
        let input = Input::Start {
            transaction_id: self.ids[i].clone(),
            payload: fixture::payload(i),
            max_attempts: fixture::max_attempts(self.cfg.max_attempts),
            correlation_id: None,
        };
        let mut run = self.decide(input, &ctx);
        // The library operation: performed to its end (the caller retries a failed
        // start) — unless the caller itself dies after the create, before the publish,
        // and never repeats it.
        let crash_after_create = self.faults.chance(self.cfg.start_crash_rate);
        let starter = Proc::new(Actor::ResponseHandler, i, u32::MAX, run.clone(), now);
        while let Step::Perform(e) = run.step() {
            let e = e.clone();
            if crash_after_create && matches!(e, Effect::PublishRequest(_)) {
                self.report.start_crashes += 1;
                break;
            }
            let obs = self.perform(&starter, &e);
            if run.observe(obs, &ctx, &mut self.jitter).is_err() {
                self.report.count(Violation::ImpossibleObservation);
                break;
            }
        }
        self.report.attempted += 1;
    }

    /// True when nothing but the reconciler's cron remains.
    pub(super) fn idle(&self) -> bool {
        self.procs.is_empty()
            && self.responses.is_empty()
            && self.retries.is_empty()
            && self.schedules.is_empty()
            && self.pending_work == 0
    }

    pub(super) fn run(mut self) -> Report {
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
        if cfg.operator_rate > 0.0 {
            for tx in 0..cfg.transactions {
                if self.operator.chance(cfg.operator_rate) {
                    let at = fixture::EPOCH_MS + self.operator.range(0, OPERATOR_WINDOW_MS);
                    self.at(at, Ev::Operate(tx));
                }
            }
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
                Ev::ServiceReceive {
                    tx,
                    attempt,
                    key,
                    round,
                    msg,
                    by,
                } => self.service_receive(tx, attempt, key, round, (msg, by)),
                Ev::Answer(a) => self.answer(a),
                Ev::Fire { name, generation } => self.fire(name, generation),
                Ev::Operate(tx) => self.operate(tx),
                Ev::Stream(id) => self.publish(id),
                Ev::ReconcilerTick => {
                    self.reconciler_tick();
                    if self.idle() && !self.reconciler_busy {
                        // Only the cron remains: stop once nothing is watched any more
                        // (the index is empty), or after a few passes that keep finding
                        // records and change nothing. Records whose entry is not due yet
                        // (an answer deadline ahead) keep the cron going.
                        self.idle_ticks += 1;
                        if self.index.is_empty()
                            || (self.last_tick_found > 0 && self.idle_ticks > 3)
                        {
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

    pub(super) fn classify(&mut self) {
        self.report.virtual_ms = self.now - fixture::EPOCH_MS;
        self.report.dlq_response = self.responses.dlq.len() as u64;
        self.report.dlq_retry = self.retries.dlq.len() as u64;
        for tx in 0..self.records.len() {
            let rec = self.records[tx].as_ref();
            match rec.map(|r| r.status) {
                Some(Status::Succeeded) => self.report.succeeded += 1,
                Some(Status::Failed) => self.report.failed += 1,
                _ => self.report.stuck += 1,
            }
            if rec.is_some_and(|r| {
                r.status == Status::Failed && r.mark == Some(domain::machine::Mark::Expired)
            }) {
                self.report.expired += 1;
            }
            if self.ended_rejected(tx) {
                self.report.ended_rejected += 1;
            }
            // Every transaction ends within one wait of its deadline (a dead-lettered
            // one is the DLQ alarm's).
            if let Some(r) = rec.filter(|r| r.status.is_terminal() && self.dlq_by_tx[tx] == 0) {
                let deadline_ms =
                    i64::try_from(self.cfg.transaction_deadline_ms).unwrap_or(i64::MAX);
                let latest = domain::machine::Deadline::of(r, deadline_ms)
                    .plus_millis(self.cfg.deadline_slack_ms());
                if r.updated_at > latest {
                    self.report.ended_past_deadline += 1;
                }
            }
            // A response that exhausted the budget and then landed in a DLQ (before its
            // alert went out) is covered by the DLQ alarm, and so is a stuck one.
            let dead_lettered = self.dlq_by_tx[tx];
            if oracle::alert_missing(rec, self.alerts[tx], dead_lettered) {
                self.report.count(Violation::AlertMissing);
            }
            if oracle::lost(rec, dead_lettered) {
                self.report.count(Violation::Lost);
            } else if !rec.is_some_and(|r| r.status.is_terminal()) {
                self.report.stuck_in_dlq += 1;
            }
        }
        self.classify_runs();
        // Highest number of retry publishes in any one-second window.
        self.report.max_requests_per_second =
            oracle::peak_in_window(&self.retry_publish_times, 1000) as u64;
        self.classify_breaker();
    }
}

impl World<'_> {
    /// The breaker's figures and properties, once the run is over.
    pub(super) fn classify_breaker(&mut self) {
        let outages_only = self.cfg.outages_only();
        for tx in 0..self.records.len() {
            let Some(rec) = self.records[tx].as_ref() else {
                continue;
            };
            let dead_lettered = self.dlq_by_tx[tx] > 0;
            let held = self.held_by_tx[tx];
            self.report.max_pauses = self.report.max_pauses.max(u64::from(held));
            if held > 0 {
                self.report.paused_transactions += 1;
                if !rec.status.is_terminal() && !dead_lettered {
                    self.report.paused_stuck += 1;
                }
            }
            let technical_end = rec.status == domain::Status::Failed
                && matches!(
                    rec.mark,
                    Some(
                        domain::machine::Mark::TechnicalExhausted
                            | domain::machine::Mark::Unanswered
                    )
                );
            if outages_only && technical_end && !dead_lettered {
                self.report.failed_by_outage += 1;
            }
        }
        let Some(b) = self.breaker.as_ref() else {
            return;
        };
        let since_start = |ms: i64| ms - fixture::EPOCH_MS;
        self.report.breaker_opened = b.opened.len() as u64;
        self.report.breaker_closed = b.closed.len() as u64;
        self.report.first_opened_ms = b.opened.first().map(|t| since_start(*t));
        self.report.last_closed_ms = b.closed.last().map(|t| since_start(*t));
        self.report.probe_rounds = b.probes.len() as u64;
        self.report.breaker_cached_admissions = b.cached_admissions;
        self.report.breaker_stale_writes = b.stale_writes;
        self.report.max_probes_per_round =
            b.probes.values().map(|r| r.len() as u64).max().unwrap_or(0);
        let times = &self.retry_publish_times;
        for c in &b.closed {
            let lo = times.partition_point(|t| t < c);
            let hi = times.partition_point(|t| *t < c + REOPENING_MS);
            let peak = oracle::peak_in_window(&times[lo..hi], 1000) as u64;
            self.report.peak_after_reopening = self.report.peak_after_reopening.max(peak);
        }
    }
}

/// The next message `queue` delivers, as the handler's input, and the messages it
/// moved to its DLQ meanwhile.
fn receive<T: Clone>(
    queue: &mut SimQueue<T>,
    now: i64,
    rng: &mut Rng,
    duplicate: bool,
    input: fn(T) -> Input,
) -> (Option<(u64, Input)>, Vec<Input>) {
    let mut dead = Vec::new();
    let got = queue.receive(now, rng, duplicate, &mut dead);
    (
        got.map(|(id, body)| (id, input(body))),
        dead.into_iter().map(input).collect(),
    )
}
