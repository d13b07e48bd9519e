//! The protocol model: how each action changes the world, every effect performed
//! through the real decisions and checked by the oracle where it happens.

use super::breaker::{BreakerViolation, ModelBreaker, OutageMode, Verdict};
use super::scope::{Budgets, Scope, DEADLINE_JUMP_MS, DEADLINE_MS, LATE_MS, TICK_MS};
use super::world::{Action, ActiveRun, Ev, Firing, Held, Img, Req, Resp, Sched, State};
use crate::fixture;
use domain::breaker::Tally;
use domain::decide::{Ack, Disposition};
use domain::decide::{Context, Effect, Input, Known, Observed, RequestHeader, Run, Step};
use domain::ids::{Attempt, Timestamp, TransactionId};
use domain::machine::Actor;
use domain::machine::{Counter, TransactionRecord};
use domain::machine::{Event, Status};
use domain::message::{Execution, Origin, Outcome, Request, Response, RetryEvent};
use domain::policy::{FixedRandom, PolicySet};
use std::collections::BTreeSet;
use std::time::Duration;
use testkit::oracle::{self, Instants, Sends, Service, Violation, Writer};

/// How far the clock jumps when the FIFO queue's deduplication window passes
/// (outbox delivery): beyond SQS's 5 minutes, so beyond `PUBLISH_RESEND_WINDOW` too.
pub const WINDOW_JUMP_MS: i64 = 301_000;

/// TECHNICAL_RESEND_MAX in the model: one re-send, so that two ERROR answers reach
/// FAILED/TECHNICAL_EXHAUSTED within small budgets.
pub const TECHNICAL_RESEND_MAX: u32 = 1;

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

    /// The time of `s`: its clock, and past the deadline once it has passed, and
    /// past each deduplication window that passed.
    fn now_of(&self, s: &State) -> Timestamp {
        let jump = if s.past_deadline { DEADLINE_JUMP_MS } else { 0 };
        let windows = i64::from(
            self.scope
                .faults
                .window_expiries
                .saturating_sub(s.budgets.window_expiries),
        );
        self.clock_time(s.clock)
            .plus_millis(jump + windows * WINDOW_JUMP_MS)
            .max(Timestamp::from_millis(s.floor_ms))
    }

    fn ctx(&self, now: Timestamp) -> Context {
        // Without a deadline budget, a deadline no run of the model reaches.
        let deadline_ms = if self.scope.faults.deadlines > 0 {
            DEADLINE_MS
        } else {
            100 * LATE_MS
        };
        fixture::context(now, &self.policies, Duration::ZERO)
            .with_technical_resend_max(TECHNICAL_RESEND_MAX)
            .with_transaction_deadline(Duration::from_millis(deadline_ms.unsigned_abs()))
            .with_delivery(self.scope.delivery)
    }

    pub(super) fn attempt(n: u32) -> Attempt {
        Attempt::new(n.max(1)).unwrap_or(Attempt::FIRST)
    }

    /// The initial state: every transaction started through the real start plan.
    pub(super) fn initial(&self) -> State {
        let mut s = State {
            clock: 0,
            records: Vec::new(),
            requests: Vec::new(),
            responses: Vec::new(),
            retries: Vec::new(),
            schedules: Vec::new(),
            runs: Vec::new(),
            service: Service::new(),
            instants: Instants::new(),
            alerted: vec![false; usize::from(self.scope.transactions.max(1))],
            held: vec![0; usize::from(self.scope.transactions.max(1))],
            scheduler_dlq: vec![0; usize::from(self.scope.transactions.max(1))],
            lost: vec![0; usize::from(self.scope.transactions.max(1))],
            errors: vec![0; usize::from(self.scope.transactions.max(1))],
            budgets: self.scope.faults,
            violations: BTreeSet::new(),
            down: false,
            breaker: self
                .scope
                .breaker()
                .then(|| ModelBreaker::new(self.clock_time(0))),
            breaker_violations: BTreeSet::new(),
            past_deadline: false,
            published_after_rejection: false,
            stream: Vec::new(),
            fifo: BTreeSet::new(),
            sends: Sends::new(),
            fifo_dropped: false,
            claim_expired: false,
            floor_ms: 0,
        };
        let now = self.clock_time(0);
        let ctx = self.ctx(now);
        for (n, id) in self.ids.iter().enumerate() {
            let input = Input::Start {
                transaction_id: id.clone(),
                payload: fixture::payload(n),
                max_attempts: fixture::max_attempts(self.scope.max_attempts),
                correlation_id: None,
            };
            let tx = u8::try_from(n).unwrap_or(u8::MAX);
            let mut ar = self.begin(
                Actor::Starter,
                tx,
                Held::Nothing,
                input,
                now,
                Verdict::default(),
            );
            while let Step::Perform(e) = ar.run.step() {
                let e = e.clone();
                let obs = self.perform(&mut s, &ar, &e);
                if ar.run.observe(obs, &ctx, &mut FixedRandom(0.5)).is_err() {
                    s.violations.insert(Violation::ImpossibleObservation);
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
                        s.violations.extend(oracle::creation(record));
                        s.records.push(record.clone());
                        self.stream_record(s, record);
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
                        let writer = match (run.kind, run.held) {
                            (Actor::ResponseHandler, Held::Response(r)) => {
                                Writer::Answering(r.attempt)
                            }
                            _ => Writer::Other,
                        };
                        s.violations.extend(oracle::change(
                            Some(current),
                            w.event(),
                            &next,
                            writer,
                        ));
                        s.records[usize::from(tx)] = next.clone();
                        self.stream_record(s, &next);
                        self.enqueued(s, run, w.event());
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
                let found = s
                    .instants
                    .created(tx, Some(&s.records[usize::from(tx)]), spec);
                s.violations.extend(found);
                if s.schedules.iter().any(|x| x.name == spec.name) {
                    Observed::ScheduleAlreadyExists
                } else {
                    s.schedules.push(Sched {
                        name: spec.name.clone(),
                        tx,
                        attempt: m.get(),
                        fire_at: spec.fire_at,
                        round: spec.event.round,
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
                s.violations.extend(oracle::publish(
                    h.attempt,
                    Some(&s.records[usize::from(tx)]),
                ));
                // Once the record says REJECTED, only a send committed before it (a
                // run that began earlier: a SENDING it wrote or read) may still
                // publish, and only that attempt's key.
                let r = &s.records[usize::from(tx)];
                if s.ended_rejected(tx) && (run.after_rejection || h.attempt > r.current_attempt) {
                    s.published_after_rejection = true;
                }
                // Completing a send already in flight (the retry handler found SENDING:
                // no accepting write of its own before this publish) is no new
                // request: request m may be out, and only its publish's completion or
                // its answer leave SENDING.
                let resumes_sending = run.kind == Actor::RetryHandler
                    && !run.run.trail().iter().any(|(e, _)| {
                        matches!(e, Effect::Write(w) if w.event() == Event::RetryEventAccepted)
                    });
                Self::sent_under_verdict(s, run, !resumes_sending);
                if self.scope.is_outbox() && !self.fifo_accepts(s, h) {
                    // A repeat within the window: the queue answers as for the first
                    // send and drops it.
                    return Observed::Published;
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
                    round: h.round,
                    delivered: false,
                });
                Observed::Published
            }
            // Not delivered before it was sent (when the breaker is modelled, the
            // run that receives it decides no earlier: a reconciler's late run puts
            // it on the queue at its own, late, time).
            Effect::PublishRetry(ev) => {
                if let Some(tx) = self.tx_of(&ev.transaction_id) {
                    s.retries.push(Ev {
                        tx,
                        attempt: ev.attempt.get(),
                        origin: ev.origin,
                        round: ev.round,
                        at: s.breaker.is_some().then_some(run.now),
                    });
                }
                Observed::Published
            }
            // An answer the record took: counted by the breaker when its run gets here.
            Effect::Signal(sig) => {
                // The answer's own write, just performed: its guard is what the store
                // found of the probe's mark.
                let probe_write = run
                    .run
                    .trail()
                    .iter()
                    .rev()
                    .find_map(|(e, o)| match (e, o) {
                        (Effect::Write(w), Observed::Written(_)) => Some(w.guard.probe),
                        _ => None,
                    });
                if *sig == domain::breaker::Signal::ProbeAnswered && probe_write != Some(Some(true))
                {
                    s.breaker_violations
                        .insert(BreakerViolation::ProbeSignalForAnother);
                }
                if let Some(b) = s.breaker.as_mut() {
                    let mut batch = Tally::default();
                    batch.add(*sig);
                    b.observe(&batch, run.now);
                }
                Observed::Signalled
            }
            // Held by the breaker: the same event, delivered no earlier than its delay.
            Effect::DeferRetry(d) => {
                // Deferred, so held: its run must not have written the record.
                if run
                    .run
                    .trail()
                    .iter()
                    .any(|(e, _)| matches!(e, Effect::Write(_)))
                {
                    s.breaker_violations.insert(BreakerViolation::HeldRunWrote);
                }
                if let Some(tx) = self.tx_of(&d.event.transaction_id) {
                    s.held[usize::from(tx)] = s.held[usize::from(tx)].saturating_add(1);
                    let ms = i64::from(d.delay_seconds) * 1_000;
                    s.retries.push(Ev {
                        tx,
                        attempt: d.event.attempt.get(),
                        origin: d.event.origin,
                        round: d.event.round,
                        at: Some(run.now.plus_millis(ms)),
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
            // An audit notice changes no state the properties look at.
            Effect::Note(_) => Observed::Noted,
            Effect::Ack(_) | Effect::Drop(_) | Effect::Reject(_) => {
                s.violations.insert(Violation::ImpossibleObservation);
                Observed::Published
            }
        }
    }

    /// Outbox delivery: a write or a creation that left the record SENDING with no
    /// claim puts its new image on the table's stream, for the publisher (the
    /// publisher's event filter).
    fn stream_record(&self, s: &mut State, next: &TransactionRecord) {
        if !self.scope.is_outbox()
            || next.status != Status::Sending
            || next.publishing_since.is_some()
        {
            return;
        }
        if let Some(tx) = self.tx_of(&next.transaction_id) {
            s.stream.push(Img {
                tx,
                image: next.clone(),
            });
        }
    }

    /// Outbox delivery: the retry handler's accepting write is its send (the
    /// publisher sends what it wrote). Under the breaker it is what a hold forbids,
    /// and a probe's write is the probe let out.
    fn enqueued(&self, s: &mut State, run: &ActiveRun, event: Event) {
        if !self.scope.is_outbox()
            || run.kind != Actor::RetryHandler
            || event != Event::RetryEventAccepted
        {
            return;
        }
        Self::sent_under_verdict(s, run, true);
    }

    /// A request of `run` goes out (or, in outbox delivery, is enqueued) under its
    /// breaker verdict: a hold forbids it (when `new`: not the completion of a send
    /// already in flight), and a probe counts in its HALF_OPEN round.
    fn sent_under_verdict(s: &mut State, run: &ActiveRun, new: bool) {
        if run.verdict.hold.is_some() && new {
            s.breaker_violations
                .insert(BreakerViolation::HeldRequestSent);
        }
        if let (Some(round), Some(b)) = (run.verdict.round, s.breaker.as_mut()) {
            if b.probe_published(round) {
                s.breaker_violations
                    .insert(BreakerViolation::ProbesExceeded);
            }
        }
    }

    /// Outbox delivery: the FIFO request queue takes a send of `h`. False when it
    /// drops it (its deduplication id was accepted within the window); true when it
    /// accepts it, counted by the oracle (a second acceptance of one id is a
    /// violation).
    fn fifo_accepts(&self, s: &mut State, h: &RequestHeader) -> bool {
        let id = h.deduplication_id();
        if s.fifo.contains(&id) {
            s.fifo_dropped = true;
            return false;
        }
        s.fifo.insert(id.clone());
        s.violations.extend(s.sends.accept(&id));
        true
    }

    /// The context of a run deciding at `now` with the breaker's `verdict`.
    fn run_ctx(&self, now: Timestamp, verdict: &Verdict) -> Context {
        self.ctx(now)
            .with_hold(verdict.hold)
            .with_probe(verdict.probe)
    }

    /// A run of `kind` on `tx` deciding `input` at `now` with the breaker's `verdict`,
    /// from an unread record.
    fn begin(
        &self,
        kind: Actor,
        tx: u8,
        held: Held,
        input: Input,
        now: Timestamp,
        verdict: Verdict,
    ) -> ActiveRun {
        let ctx = self.run_ctx(now, &verdict);
        let run = Run::with_rules(
            self.scope.flaws,
            input,
            Known::Unread,
            &ctx,
            &mut FixedRandom(0.5),
        );
        let mut ar = ActiveRun::new(kind, tx, held, now, run);
        ar.verdict = verdict;
        ar
    }

    /// [`Self::begin`] and [`Self::start_run`] a run at the model's clock, with no
    /// breaker verdict.
    fn start_now(&self, s: &mut State, kind: Actor, tx: u8, held: Held, input: Input) {
        let now = self.now_of(s);
        let ar = self.begin(kind, tx, held, input, now, Verdict::default());
        self.start_run(s, ar);
    }

    /// A new run: it notes whether its record already ended REJECTED, then is kept or
    /// finished as [`Self::settle_run`] says.
    fn start_run(&self, s: &mut State, mut ar: ActiveRun) {
        ar.after_rejection = s.ended_rejected(ar.tx);
        self.settle_run(s, ar);
    }

    /// Keeps a run that has effects left, or finishes it (a run started whose plan
    /// has no effect to perform ends at once).
    fn settle_run(&self, s: &mut State, ar: ActiveRun) {
        match ar.run.step() {
            Step::Perform(_) => s.runs.push(ar),
            Step::Done(d) => {
                // An answer deadline the reconciler saw fire (published again or
                // abandoned), counted by the breaker; a probe's is no fresh silence.
                if let (
                    Actor::Reconciler,
                    Disposition::Ack(Ack::ReconcilerRepublished | Ack::Unanswered),
                    false,
                    Some(b),
                ) = (ar.kind, d, ar.verdict.probe, s.breaker.as_mut())
                {
                    b.observe(
                        &Tally {
                            deadlines: 1,
                            ..Tally::default()
                        },
                        ar.now,
                    );
                }
                let retry = match ar.held {
                    Held::Retry(e) => Some((e.attempt, e.round)),
                    _ => None,
                };
                // An operator's command refused (the transaction moved on since it
                // was read) is the command's answer, not a message dead-lettered.
                let refused = ar.kind == Actor::Operator && matches!(d, Disposition::Reject(_));
                if !refused {
                    s.violations.extend(oracle::disposition(
                        d,
                        retry,
                        s.records.get(usize::from(ar.tx)),
                        self.scope.delivery,
                    ));
                }
                // Outbox delivery: a claim found older than the window is not sent
                // again; if its send never went out, the intent is lost as a message
                // is (the answer deadline ends it).
                if let (Disposition::Ack(Ack::PublishUnconfirmed), Some(id)) =
                    (d, Self::intent_of(&ar))
                {
                    if !s.sends.accepted(&id) {
                        s.lost[usize::from(ar.tx)] += 1;
                    }
                    if ar.kind == Actor::Publisher {
                        s.claim_expired = true;
                    }
                }
                // Ack or drop: the message is deleted (it is not put back).
            }
        }
    }

    /// The deduplication id of the intent a publisher or reconciler run handles.
    fn intent_of(ar: &ActiveRun) -> Option<String> {
        let r = match ar.run.input() {
            Input::Publish(r) | Input::Reconcile(r) => r,
            _ => return None,
        };
        let attempt = r.next_attempt?;
        Some(RequestHeader::of(r, attempt).deduplication_id())
    }

    fn step_run(&self, s: &mut State, i: usize) {
        let mut ar = s.runs.remove(i);
        let Step::Perform(e) = ar.run.step() else {
            self.settle_run(s, ar);
            return;
        };
        let e = e.clone();
        let obs = self.perform(s, &ar, &e);
        let enqueue = self.scope.is_outbox()
            && matches!((&e, &obs), (Effect::Write(w), Observed::Written(_)) if w.event() == Event::RetryEventAccepted);
        if matches!(e, Effect::PublishRequest(_)) || enqueue {
            // One probe per run: a re-decided plan publishing the same request again
            // (same key) lets out no second probe.
            ar.verdict.round = None;
        }
        let ctx = self.run_ctx(ar.now, &ar.verdict);
        if ar.run.observe(obs, &ctx, &mut FixedRandom(0.5)).is_err() {
            s.violations.insert(Violation::ImpossibleObservation);
            return;
        }
        // An answer's signal is counted with the write that records it: the response
        // handler counts its batch's signals within its timeout (30 s), before the
        // earliest re-send the write may have scheduled can fire (the technical
        // backoff's first wait, 60 s less 10 % jitter).
        if matches!(e, Effect::Write(_)) {
            if let Step::Perform(next @ Effect::Signal(_)) = ar.run.step() {
                let next = next.clone();
                let obs = self.perform(s, &ar, &next);
                if ar.run.observe(obs, &ctx, &mut FixedRandom(0.5)).is_err() {
                    s.violations.insert(Violation::ImpossibleObservation);
                    return;
                }
            }
        }
        ar.performed = ar.performed.saturating_add(1);
        ar.rekey();
        self.settle_run(s, ar);
    }

    fn response_input(&self, r: Resp) -> Input {
        // Outbox delivery: an ERROR says whether the call may have run. Direct
        // delivery's carries nothing (its decisions ignore it).
        let execution =
            (self.scope.is_outbox() && r.outcome == Outcome::Error).then_some(if r.may_have_run {
                Execution::Unknown
            } else {
                Execution::NotRun
            });
        Input::Response(Response {
            transaction_id: self.id(r.tx).clone(),
            attempt: Self::attempt(r.attempt),
            outcome: r.outcome,
            reason: Some(fixture::CANCEL_REASON.to_owned()),
            retry_after_seconds: None,
            round: r.round,
            execution,
        })
    }

    fn retry_input(&self, e: Ev) -> Input {
        Input::Retry(RetryEvent {
            transaction_id: self.id(e.tx).clone(),
            origin: e.origin,
            attempt: Self::attempt(e.attempt),
            round: e.round,
        })
    }

    fn accept(&self, s: &mut State, req: &Req) {
        let max = fixture::budget(s.records.get(usize::from(req.tx)), self.scope.max_attempts);
        let receipt = s.service.receive(
            req.tx,
            self.id(req.tx),
            req.attempt,
            &req.key,
            req.round,
            max,
        );
        s.violations.extend(receipt.violations);
    }

    fn reconcile_now(&self, s: &State, late: bool) -> Timestamp {
        let now = self.now_of(s);
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
                let req = deliver(&mut s.requests, i, duplicate, &mut s.budgets);
                if s.down && self.scope.outage_mode == OutageMode::Silent {
                    // Down and silent: taken, never processed nor answered.
                    s.lost[usize::from(req.tx)] += 1;
                } else {
                    if self.scope.service.runs_every_message() {
                        // A service that does not deduplicate runs each message it
                        // receives once (a copy of one the queue delivered again is
                        // the same message).
                        if !req.delivered {
                            s.violations
                                .extend(s.service.runs_again(&req.tx, req.attempt));
                        }
                        if duplicate {
                            s.requests[i].delivered = true;
                        }
                    }
                    self.accept(&mut s, &req);
                }
            }
            Action::ServiceAnswer {
                tx,
                attempt,
                outcome,
                may_have_run,
            } => {
                let again = s.service.answer_of(&tx, attempt).is_some();
                let answered = if may_have_run {
                    s.service.answer_error_unknown(tx, attempt)
                } else {
                    s.service.answer(tx, attempt, outcome)
                };
                if answered {
                    if again {
                        s.budgets.extra_answers -= 1;
                    } else if outcome == Outcome::Error && !s.down {
                        // An ERROR while down is the outage's, not a budgeted one.
                        s.budgets.technical_answers -= 1;
                    } else if outcome == Outcome::Rejected {
                        s.budgets.rejected_answers -= 1;
                    }
                    let round = s.service.round_of(&tx, attempt);
                    if outcome == Outcome::Error {
                        let n = &mut s.errors[usize::from(tx)];
                        *n = n.saturating_add(1);
                    }
                    s.responses.push(Resp {
                        tx,
                        attempt,
                        outcome,
                        round,
                        may_have_run,
                    });
                }
            }
            Action::LoseRequest { i } => {
                s.budgets.lost_messages -= 1;
                let req = s.requests.remove(i);
                s.lost[usize::from(req.tx)] += 1;
            }
            Action::LoseAnswer {
                tx,
                attempt,
                outcome,
            } => {
                s.budgets.lost_messages -= 1;
                if s.service.answer(tx, attempt, outcome) {
                    s.lost[usize::from(tx)] += 1;
                }
            }
            Action::DeliverResponse { i, duplicate } => {
                let r = deliver(&mut s.responses, i, duplicate, &mut s.budgets);
                let input = self.response_input(r);
                self.start_now(
                    &mut s,
                    Actor::ResponseHandler,
                    r.tx,
                    Held::Response(r),
                    input,
                );
            }
            Action::DeliverRetry { i, duplicate } => {
                let e = deliver(&mut s.retries, i, duplicate, &mut s.budgets);
                let now = e.at.map_or(self.now_of(&s), |at| at.max(self.now_of(&s)));
                // Real time is past the breaker's clock too (a late run moved it).
                let now = s.breaker.as_mut().map_or(now, |b| b.clock(now));
                let counts = self.scope.counts_probes;
                let input = self.retry_input(e);
                // While the breaker may hand out a probe, the record is read first and
                // only an event that would publish a request asks.
                let asks = match (s.breaker.as_ref(), &input, s.records.get(usize::from(e.tx))) {
                    (Some(b), _, _) if !b.may_probe(now) => true,
                    (Some(_), Input::Retry(ev), Some(r)) => {
                        domain::decide::retry_asks_breaker(&self.scope.flaws, r, ev, &self.ctx(now))
                    }
                    _ => false,
                };
                let verdict = match s.breaker.as_mut() {
                    Some(b) if asks => b.admission(now, counts),
                    _ => Verdict::default(),
                };
                let ar = self.begin(
                    Actor::RetryHandler,
                    e.tx,
                    Held::Retry(e),
                    input,
                    now,
                    verdict,
                );
                self.start_run(&mut s, ar);
            }
            Action::Step { run } => self.step_run(&mut s, run),
            Action::Crash { run } => {
                s.budgets.crashes -= 1;
                let ar = s.runs.remove(run);
                match ar.held {
                    Held::Response(r) => s.responses.push(r),
                    Held::Retry(e) => s.retries.push(e),
                    // An operator's command that dies midway is not run again by
                    // anyone: what it did not do (a replay's retry event) is the
                    // reconciler's to finish, as a lost message is.
                    Held::Nothing if ar.kind == Actor::Operator => s.lost[usize::from(ar.tx)] += 1,
                    Held::Nothing => {}
                    // The publisher's batch is retried: the stream record again.
                    Held::Stream { .. } => {
                        if let Input::Publish(image) = ar.run.input() {
                            s.stream.push(Img {
                                tx: ar.tx,
                                image: image.clone(),
                            });
                        }
                    }
                }
            }
            Action::Fire { i, how } => {
                let sched = s.schedules[i].clone();
                let ev = Ev {
                    tx: sched.tx,
                    attempt: sched.attempt,
                    origin: Origin::RetryScheduler,
                    round: sched.round,
                    at: s.breaker.is_some().then_some(sched.fire_at),
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
                let rec = s.records[usize::from(tx)].clone();
                // "Late" is far past any threshold and any answer deadline, counted
                // from whatever the record last holds: a republish moves the deadline
                // and a counted requeue restarts the threshold, both written at the
                // reconciler's own (late) time.
                let now = if late {
                    let last = [rec.answer_due_at, rec.next_fire_at]
                        .into_iter()
                        .flatten()
                        .fold(rec.updated_at, Timestamp::max);
                    self.reconcile_now(&s, late).max(last.plus_millis(LATE_MS))
                } else {
                    self.reconcile_now(&s, late)
                };
                // Only an unanswered request past its deadline with republishes left
                // asks the breaker (it would go out again), as the functions'
                // reconciler does.
                let counts = self.scope.counts_probes;
                let now = s.breaker.as_mut().map_or(now, |b| b.clock(now));
                let verdict = match s.breaker.as_mut() {
                    Some(b) if domain::decide::asks_breaker(&rec, &self.ctx(now)) => {
                        b.admission(now, counts)
                    }
                    _ => Verdict::default(),
                };
                // Outbox delivery: time is monotonic from here (a claim the publisher
                // writes later is no older than this run's decisions).
                if self.scope.is_outbox() {
                    s.floor_ms = s.floor_ms.max(now.millis());
                }
                let ar = self.begin(
                    Actor::Reconciler,
                    tx,
                    Held::Nothing,
                    Input::Reconcile(rec),
                    now,
                    verdict,
                );
                self.start_run(&mut s, ar);
            }
            Action::Tick => {
                s.budgets.ticks -= 1;
                s.clock += 1;
            }
            Action::OutageStarts => {
                s.budgets.outages -= 1;
                s.down = true;
            }
            Action::OutageEnds => s.down = false,
            Action::DeadlinePasses => {
                s.budgets.deadlines -= 1;
                s.past_deadline = true;
            }
            Action::DeliverStream { i, duplicate } => {
                let m = deliver(&mut s.stream, i, duplicate, &mut s.budgets);
                let held = Held::Stream {
                    attempt: m.image.next_attempt.map_or(0, Attempt::get),
                    round: m.image.counts[Counter::Round],
                };
                self.start_now(
                    &mut s,
                    Actor::Publisher,
                    m.tx,
                    held,
                    Input::Publish(m.image),
                );
            }
            Action::WindowPasses => {
                s.budgets.window_expiries -= 1;
                s.fifo.clear();
                // Past every decision made so far, a late reconciler's included.
                if s.floor_ms > 0 {
                    s.floor_ms += WINDOW_JUMP_MS;
                }
            }
            Action::Operate { tx, act } => {
                s.budgets.operator_actions -= 1;
                let input = act.input(self.id(tx).clone());
                self.start_now(&mut s, Actor::Operator, tx, Held::Nothing, input);
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
        // Faults stop: an outage going on ends.
        s.down = false;
        for _round in 0..8 {
            if Self::settled(&s, tx) {
                break;
            }
            s.budgets.reconciler_runs = s.budgets.reconciler_runs.max(1);
            // Time passes: a breaker still holding lets requests out again.
            if let Some(b) = s.breaker.as_mut() {
                b.pass_cooldown();
            }
            s = self.apply(&s, &Action::Reconcile { tx, late: true });
            s = self.finish_everything(&s);
        }
        s
    }

    /// Past the deadline, with the outage (if any) going on: the reconciler (late)
    /// acts on `tx` and everything it causes is delivered — the service answering
    /// ERROR, as a service that is down does — a few times over. A deadline that holds
    /// leaves `tx` terminal.
    pub fn reconcile_past_deadline(&self, start: &State, tx: u8) -> State {
        let mut s = start.clone();
        for _round in 0..8 {
            if s.records[usize::from(tx)].status.is_terminal() {
                break;
            }
            s.budgets.reconciler_runs = s.budgets.reconciler_runs.max(1);
            s = self.apply(&s, &Action::Reconcile { tx, late: true });
            // Only a service that is down answers here, and only ERROR (its outage's,
            // no budget spent); silent, it owes nothing.
            let answers = s.down && self.scope.outage_mode == OutageMode::Error;
            let order: &[Next] = if answers {
                &[
                    Next::Step,
                    Next::Retry,
                    Next::Stream,
                    Next::Request,
                    Next::Answer(Outcome::Error),
                    Next::Response,
                ]
            } else {
                &[
                    Next::Step,
                    Next::Retry,
                    Next::Stream,
                    Next::Request,
                    Next::Response,
                ]
            };
            s = self.without_faults(s, order, 10_000);
        }
        s
    }

    /// Runs every active run to its end and delivers every queued retry event and
    /// request, without faults (responses stay for the service's answers to decide).
    fn finish_everything(&self, start: &State) -> State {
        self.without_faults(
            start.clone(),
            &[Next::Step, Next::Retry, Next::Stream, Next::Request],
            10_000,
        )
    }

    /// Applies, at most `limit` times, the first of `order` that can happen: a run
    /// of the world without faults.
    pub(super) fn without_faults(&self, mut s: State, order: &[Next], limit: usize) -> State {
        for _ in 0..limit {
            match order.iter().find_map(|n| n.action(&s)) {
                Some(a) => s = self.apply(&s, &a),
                None => break,
            }
        }
        s
    }

    /// The transaction an action concerns (`None` for the clock).
    pub(super) fn action_tx(s: &State, a: &Action) -> Option<u8> {
        match *a {
            Action::ServiceReceive { i, .. } | Action::LoseRequest { i } => {
                s.requests.get(i).map(|r| r.tx)
            }
            Action::ServiceAnswer { tx, .. }
            | Action::LoseAnswer { tx, .. }
            | Action::Reconcile { tx, .. }
            | Action::Operate { tx, .. } => Some(tx),
            Action::DeliverResponse { i, .. } => s.responses.get(i).map(|r| r.tx),
            Action::DeliverRetry { i, .. } => s.retries.get(i).map(|e| e.tx),
            Action::DeliverStream { i, .. } => s.stream.get(i).map(|m| m.tx),
            Action::Step { run } | Action::Crash { run } => s.runs.get(run).map(|r| r.tx),
            Action::Fire { i, .. } => s.schedules.get(i).map(|x| x.tx),
            Action::Tick
            | Action::OutageStarts
            | Action::OutageEnds
            | Action::DeadlinePasses
            | Action::WindowPasses => None,
        }
    }

    /// True when nothing of transaction `tx` is in flight (live schedules allowed).
    pub(super) fn tx_quiescent(s: &State, tx: u8) -> bool {
        !s.requests.iter().any(|r| r.tx == tx)
            && !s.responses.iter().any(|r| r.tx == tx)
            && !s.retries.iter().any(|e| e.tx == tx)
            && !s.stream.iter().any(|m| m.tx == tx)
            && !s.runs.iter().any(|r| r.tx == tx)
            && !s
                .service
                .accepted()
                .any(|((t, _), answer)| *t == tx && answer.is_none())
    }

    /// True when nothing at all is in flight: no message on any queue, no run active,
    /// and the external service owes no answer.
    pub fn quiescent(s: &State) -> bool {
        s.requests.is_empty()
            && s.responses.is_empty()
            && s.retries.is_empty()
            && s.stream.is_empty()
            && s.runs.is_empty()
            && s.service.accepted().all(|(_, answer)| answer.is_some())
    }

    /// The transaction is terminal, or IN_PROGRESS for an attempt the service accepted
    /// and has not answered yet (it is waiting on the service, not on us).
    pub(super) fn settled(s: &State, tx: u8) -> bool {
        let r = &s.records[usize::from(tx)];
        r.status.is_terminal()
            || (r.status == Status::InProgress
                && s.service.awaits_answer(&tx, r.current_attempt.get()))
    }

    pub(super) fn txs(&self) -> impl Iterator<Item = u8> {
        0..self.scope.transactions.max(1)
    }

    /// Nothing of `tx` in flight, no live schedule of it: it will never move again by
    /// itself (only the reconciler could move it).
    pub(super) fn tx_final(s: &State, tx: u8) -> bool {
        Self::tx_quiescent(s, tx) && !s.schedules.iter().any(|x| x.tx == tx)
    }
}

/// What a run of the world without faults may do next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Next {
    /// The first active run performs its next effect.
    Step,
    /// The first queued retry event is delivered.
    Retry,
    /// The publisher receives the first stream record.
    Stream,
    /// The service receives the first queued request.
    Request,
    /// The service answers the first attempt it owes an answer, with this outcome.
    Answer(Outcome),
    /// The first queued response is delivered.
    Response,
    /// The first live schedule fires once.
    Fire,
}

impl Next {
    fn action(self, s: &State) -> Option<Action> {
        let queued = match self {
            Next::Step => !s.runs.is_empty(),
            Next::Retry => !s.retries.is_empty(),
            Next::Stream => !s.stream.is_empty(),
            Next::Request => !s.requests.is_empty(),
            Next::Answer(_) => true,
            Next::Response => !s.responses.is_empty(),
            Next::Fire => !s.schedules.is_empty(),
        };
        if !queued {
            return None;
        }
        // The first of its queue, delivered once.
        let (i, duplicate) = (0, false);
        Some(match self {
            Next::Step => Action::Step { run: i },
            Next::Retry => Action::DeliverRetry { i, duplicate },
            Next::Stream => Action::DeliverStream { i, duplicate },
            Next::Request => Action::ServiceReceive { i, duplicate },
            Next::Answer(outcome) => {
                let (tx, attempt) = s.service.first_unanswered()?;
                Action::ServiceAnswer {
                    tx,
                    attempt,
                    outcome,
                    may_have_run: false,
                }
            }
            Next::Response => Action::DeliverResponse { i, duplicate },
            Next::Fire => Action::Fire {
                i,
                how: Firing::Once,
            },
        })
    }
}

/// Message `i` of `queue`, delivered: taken off it, or, a duplicate delivery (one
/// of the budget's), left there for another.
fn deliver<T: Clone>(queue: &mut Vec<T>, i: usize, duplicate: bool, budgets: &mut Budgets) -> T {
    if duplicate {
        budgets.duplicate_deliveries -= 1;
        queue[i].clone()
    } else {
        queue.remove(i)
    }
}
