//! The response handler (A), for a response `(id, n, outcome)`.

use super::cycle::{
    confirm_scheduled, create_schedule, in_progress_write, resume_scheduling, Cycle,
};
use super::expire::{expire, expired_alert, expires};
use super::{Ack, Alert, AlertKind, Context, DropReason, Effect, Known, Plan, Rejection};
use crate::arrow;
use crate::audit::AuditEntry;
use crate::breaker::Signal;
use crate::ids::{Attempt, ScheduleName, Timestamp, TransactionId};
use crate::machine::{
    Actor, Arrow, BudgetGuard, Change, Counter, Event, Mark, PerCounter, Status, TransactionRecord,
    Write,
};
use crate::message::{Execution, Outcome, Response};
use crate::policy::RandomSource;

const SUCCEED: Arrow = arrow!([Status::InProgress], Event::Success);
const FAIL: Arrow = arrow!([Status::InProgress], Event::Exhausted);
const SCHEDULE: Arrow = arrow!([Status::InProgress], Event::ResponseCancelledRetry);
const RESEND: Arrow = arrow!([Status::InProgress], Event::ResponseTechnicalRetry);
const SUCCEED_WAITING: Arrow = arrow!([Status::Scheduling, Status::Scheduled], Event::Success);
const FAIL_WAITING: Arrow = arrow!([Status::Scheduling, Status::Scheduled], Event::Exhausted);
const SCHEDULE_WAITING: Arrow = arrow!(
    [Status::Scheduling, Status::Scheduled],
    Event::ResponseCancelledRetry
);
const TECHNICAL_FAIL: Arrow = arrow!([Status::InProgress], Event::Exhausted);
/// A REJECTED answer ends the transaction by the arrow its exhaustion takes.
const REJECT: Arrow = arrow!([Status::InProgress], Event::Exhausted);
/// So does an ambiguous ERROR in outbox mode.
const AMBIGUOUS_FAIL: Arrow = arrow!([Status::InProgress], Event::Exhausted);

/// The reason the alert of a transaction that ended because every technical re-send
/// was answered ERROR again names.
pub const TECHNICAL_EXHAUSTED_REASON: &str = Mark::TechnicalExhausted.legacy_reason();

/// The reason the alert of a transaction ended by an ambiguous ERROR (outbox mode)
/// names.
pub const AMBIGUOUS_REASON: &str = Mark::Ambiguous.legacy_reason();

/// The writes that record an answer for the request in flight.
const ANSWER_EVENTS: [Event; 4] = [
    Event::Success,
    Event::Exhausted,
    Event::ResponseCancelledRetry,
    Event::ResponseTechnicalRetry,
];

/// The plan for a response, decided on what is known of the record, with what it
/// tells the circuit breaker ([`Effect::Signal`]) right after the write that records
/// it. Only an answer that write records is a signal: a late, stale or duplicate one
/// (dropped, or finding its work done) says nothing of the service now. The write is
/// conditional on the probe's mark as decided (unread: not the probe), so the answer
/// to a half-open round's probe is known as such — the only one that closes the
/// breaker — even when decided blind: its condition fails and the record comes back.
pub fn decide_response(
    known: Known<'_>,
    resp: &Response,
    ctx: &Context,
    rng: &mut dyn RandomSource,
) -> Plan {
    let probing = matches!(known, Known::Record(r) if r.is_probing());
    let mut plan = decide_answer(known, resp, ctx, rng);
    let Some(at) = plan
        .iter()
        .position(|e| matches!(e, Effect::Write(w) if ANSWER_EVENTS.contains(&w.event())))
    else {
        return plan;
    };
    let probe = match &mut plan[at] {
        Effect::Write(w) => *w.guard.probe.get_or_insert(probing),
        _ => probing,
    };
    let signal = match (resp.outcome, probe) {
        (Outcome::Error, _) => Signal::Technical,
        (_, true) => Signal::ProbeAnswered,
        (_, false) => Signal::Answered,
    };
    plan.insert(at + 1, Effect::Signal(signal));
    plan
}

/// [`decide_response`] without the breaker's signal.
fn decide_answer(
    known: Known<'_>,
    resp: &Response,
    ctx: &Context,
    rng: &mut dyn RandomSource,
) -> Plan {
    let id = &resp.transaction_id;
    let n = resp.attempt;
    let rec = match known {
        Known::Missing => {
            return vec![Effect::Reject(Rejection::UnknownTransaction {
                transaction_id: id.clone(),
            })]
        }
        Known::Unread => None,
        Known::Record(r) => Some(r),
    };
    if let Some(r) = rec {
        // An ERROR for an earlier send of the request in flight (its round echoed):
        // that send's answer was decided already, its re-send (or the breaker's
        // pause) opened the round in flight; decided again it would spend a second
        // re-send for one failure.
        let in_flight = (r.status == Status::InProgress && r.current_attempt == n)
            || (r.status == Status::Sending && r.next_attempt == Some(n));
        if let (Outcome::Error, Some(round), true) = (resp.outcome, resp.round, in_flight) {
            if round < r.counts[Counter::Round] {
                return vec![Effect::Drop(DropReason::StaleError {
                    attempt: n,
                    round,
                    current: r.counts[Counter::Round],
                })];
            }
        }
        // The response for the attempt B is publishing (SENDING, next_attempt = n): it
        // proves request n left, so complete B's last arrow (SENDING → IN_PROGRESS(n))
        // and then handle the response. Dropping it as late would leave the
        // transaction IN_PROGRESS(n) waiting for a response already consumed (B's
        // final write comes after its publish, and a crash there leaves SENDING).
        // The same holds while B re-sends request n after an ERROR: whatever the
        // answer, it may be the re-send's own (an ERROR of an earlier round was
        // dropped above; one whose round was not echoed costs one re-send more,
        // never a lost answer).
        if r.status == Status::Sending && r.next_attempt == Some(n) {
            let published = in_progress_write(id, n, ctx, Actor::ResponseHandler);
            if let Ok(after) = published.apply(r) {
                let mut plan = vec![Effect::Write(published)];
                plan.extend(decide_answer(Known::Record(&after), resp, ctx, rng));
                return plan;
            }
        }
        // Rule 1: a response for another attempt is late: acknowledge, change nothing.
        // A SUCCESS for an earlier attempt is more than late: that attempt was
        // answered CANCELLED (only then does a later one go out).
        if r.current_attempt != n {
            if resp.outcome == Outcome::Success && n < r.current_attempt {
                return conflicting_success(r, resp, ctx);
            }
            return vec![Effect::Drop(DropReason::LateResponse {
                attempt: n,
                current: r.current_attempt,
            })];
        }
    }
    // Past the transaction's deadline, an answer that would open another wait (an
    // ERROR, a CANCELLED with attempts left) ends it instead.
    if let Some(r) = rec.filter(|r| r.status == Status::InProgress && expires(r, ctx)) {
        let opens_wait = match resp.outcome {
            Outcome::Success | Outcome::Rejected => false,
            Outcome::Cancelled => !r.max_attempts.exhausted_by(n),
            // Outbox mode does not send again an ERROR that may have run: it ends
            // the transaction, deadline or not.
            Outcome::Error => !ambiguous(resp, ctx),
        };
        if opens_wait {
            let mut plan = expire(r, ctx, Actor::ResponseHandler);
            for e in &mut plan {
                if let Effect::Write(w) = e {
                    w.set.last_outcome = Some(resp.outcome);
                }
            }
            return plan;
        }
    }
    let status = rec.map(|r| r.status);
    // A retry cycle that sends attempt n again: opened by an ERROR for n.
    let resending = rec.is_some_and(|r| r.next_attempt == Some(n));
    match (status, resp.outcome) {
        // A redelivered ERROR found its re-send SCHEDULING: reuse the stored instant
        // and schedule name (the schedule may not exist yet).
        (Some(Status::Scheduling), Outcome::Error) if resending => match rec {
            Some(r) => resume_scheduling(r, ctx, Actor::ResponseHandler, Ack::Resend),
            None => vec![Effect::Ack(Ack::AlreadyHandled)],
        },
        // SCHEDULED: the re-send has not left, so this is not its answer.
        (Some(Status::Scheduled), Outcome::Error) if resending => {
            vec![Effect::Ack(Ack::AlreadyHandled)]
        }
        // The service's result for key n while request n waits to go out again (an
        // earlier copy of it was processed after all): decided as in IN_PROGRESS(n),
        // the first write taken from the re-send's wait instead. The re-send's
        // schedule, if it fires, finds its attempt no longer pending.
        (
            Some(Status::Scheduling | Status::Scheduled),
            Outcome::Success | Outcome::Cancelled | Outcome::Rejected,
        ) if resending => match rec {
            Some(r) => answered_while_resend_waits(r, resp, ctx, rng),
            None => vec![Effect::Ack(Ack::AlreadyHandled)],
        },
        // Outbox mode, an ERROR that does not say the call did not run: it may have
        // been executed, and a re-send would publish the attempt again. FAILED,
        // `AMBIGUOUS`, for an operator to resolve or replay.
        (None | Some(Status::InProgress), Outcome::Error) if ambiguous(resp, ctx) => {
            ambiguous_failure(
                id,
                n,
                rec.map_or(0, |r| r.counts[Counter::Round]),
                resp,
                ctx,
            )
        }
        // ERROR for the current attempt: send it again later, or, the re-sends spent,
        // FAILED + business alert. Never consumes an attempt.
        (None | Some(Status::InProgress), Outcome::Error) => technical_failure(
            id,
            n,
            rec.map(|r| r.counts).unwrap_or_default(),
            rec.is_some_and(TransactionRecord::is_probing),
            resp,
            ctx,
            rng,
        ),
        // The redelivery of the answer that found the deadline passed: alert again.
        (Some(Status::Failed), Outcome::Error | Outcome::Cancelled)
            if rec.is_some_and(|r| r.mark == Some(Mark::Expired)) =>
        {
            vec![expired_alert(id, n), Effect::Ack(Ack::Failed)]
        }
        // The redelivery of the ERROR that spent the re-sends: alert again.
        (Some(Status::Failed), Outcome::Error)
            if rec.is_some_and(|r| r.mark == Some(Mark::TechnicalExhausted)) =>
        {
            vec![technical_alert(id, n), Effect::Ack(Ack::Failed)]
        }
        // The redelivery of the ambiguous ERROR that ended it: alert again.
        (Some(Status::Failed), Outcome::Error)
            if rec.is_some_and(|r| r.mark == Some(Mark::Ambiguous)) =>
        {
            vec![ambiguous_alert(id, n), Effect::Ack(Ack::Failed)]
        }
        // REJECTED for the current attempt: the service will never accept the request
        // as it is. FAILED at once, whatever budget is left, + business alert.
        (None | Some(Status::InProgress), Outcome::Rejected) => reject(id, n, resp, ctx),
        // The redelivery of the REJECTED that ended it: the alert may not have gone
        // out before a crash, so raise it again.
        (Some(Status::Failed), Outcome::Rejected)
            if rec.is_some_and(|r| r.mark == Some(Mark::Rejected)) =>
        {
            vec![rejected_alert(id, n, resp), Effect::Ack(Ack::Rejected)]
        }
        // Rule 2: SUCCESS and IN_PROGRESS → SUCCEEDED.
        (None | Some(Status::InProgress), Outcome::Success) => {
            let mut w = answered(id, SUCCEED, n, resp, ctx);
            w.set.last_outcome = Some(Outcome::Success);
            vec![Effect::Write(w), Effect::Ack(Ack::Succeeded)]
        }
        // Rule 3: CANCELLED with the budget spent → FAILED + business alert.
        (Some(Status::InProgress), Outcome::Cancelled)
            if rec.is_some_and(|r| r.max_attempts.exhausted_by(n)) =>
        {
            fail(id, n, resp, ctx)
        }
        // Rule 4: CANCELLED with attempts left: persist the instant first, then create
        // the schedule from it, then confirm.
        (None | Some(Status::InProgress), Outcome::Cancelled) => {
            schedule_retry(id, n, resp, ctx, rng)
        }
        // Rule 5: redelivery found SCHEDULING: reuse the stored instant.
        (Some(Status::Scheduling), Outcome::Cancelled) => match rec {
            Some(r) => resume_scheduling(r, ctx, Actor::ResponseHandler, Ack::Scheduled),
            None => vec![Effect::Ack(Ack::AlreadyHandled)],
        },
        // Someone did the work already.
        (Some(Status::Scheduled | Status::Sending), Outcome::Cancelled) => {
            vec![Effect::Ack(Ack::AlreadyHandled)]
        }
        // SUCCEEDED by an operator's resolve: the service executed the attempt too.
        (Some(Status::Succeeded), Outcome::Success)
            if rec.is_some_and(|r| r.mark == Some(Mark::Resolved)) =>
        {
            match rec {
                Some(r) => conflicting_success(r, resp, ctx),
                None => vec![Effect::Ack(Ack::AlreadyHandled)],
            }
        }
        (Some(status @ Status::Succeeded), Outcome::Success) => {
            vec![Effect::Drop(DropReason::DuplicateResponse { status })]
        }
        // The redelivery of the response that exhausted the budget: the alert may not
        // have gone out before a crash, so raise it again (alerts are at-least-once).
        // (Not one FAILED by another answer for this attempt: that is a conflict.)
        (Some(Status::Failed), Outcome::Cancelled)
            if rec.is_none_or(|r| {
                !matches!(
                    r.mark,
                    Some(Mark::TechnicalExhausted | Mark::Rejected | Mark::Ambiguous)
                )
            }) =>
        {
            let attempts = rec.map(|r| r.current_attempt).unwrap_or(n);
            vec![
                Alert::raise(
                    AlertKind::AttemptsExhausted,
                    id,
                    attempts,
                    resp.reason.clone(),
                ),
                Effect::Ack(Ack::Failed),
            ]
        }
        // SUCCESS for the attempt already answered CANCELLED (SCHEDULING, SCHEDULED,
        // SENDING with this attempt current, or FAILED).
        (Some(_), Outcome::Success) => match rec {
            Some(r) => conflicting_success(r, resp, ctx),
            None => vec![Effect::Ack(Ack::AlreadyHandled)],
        },
        (Some(status), outcome) => vec![Effect::Drop(DropReason::ConflictingOutcome {
            outcome,
            status,
        })],
    }
}

/// A SUCCESS for an attempt of `r` already answered CANCELLED, or for a resolved
/// transaction: the service executed what the transaction considers not done. Kept in
/// the audit trail (a notice naming the attempt), then dropped as a business alert.
fn conflicting_success(r: &TransactionRecord, resp: &Response, ctx: &Context) -> Plan {
    vec![
        Effect::Note(AuditEntry::conflicting_success(
            r,
            resp.attempt,
            resp.reason.clone(),
            ctx.now,
        )),
        Effect::Drop(DropReason::ConflictingSuccess {
            attempt: resp.attempt,
            status: r.status,
        }),
    ]
}

/// SUCCESS or CANCELLED for attempt n found while n's re-send waits (SCHEDULING or
/// SCHEDULED, `next_attempt = n`): the plan for IN_PROGRESS(n), its first write
/// leaving the wait instead — conditional on that very wait (attempt, re-send count)
/// and clearing its pending attempt and instant unless it opens a cycle of its own.
fn answered_while_resend_waits(
    r: &TransactionRecord,
    resp: &Response,
    ctx: &Context,
    rng: &mut dyn RandomSource,
) -> Plan {
    let as_sent = TransactionRecord {
        status: Status::InProgress,
        next_attempt: None,
        next_fire_at: None,
        ..r.clone()
    };
    let mut plan = decide_answer(Known::Record(&as_sent), resp, ctx, rng);
    let first_write = plan.iter_mut().find_map(|e| match e {
        Effect::Write(w) => Some(w),
        _ => None,
    });
    if let Some(w) = first_write {
        let waiting = match w.event() {
            Event::Success => SUCCEED_WAITING,
            // A CANCELLED spending the last attempt, or a REJECTED.
            Event::Exhausted => FAIL_WAITING,
            _ => SCHEDULE_WAITING,
        };
        let mut from_wait = Write::new(
            w.transaction_id.clone(),
            waiting,
            w.set.updated_at,
            w.set.actor,
        );
        from_wait.guard = w.guard.clone();
        from_wait.guard.next_attempt = Some(resp.attempt);
        from_wait.guard.counts[Counter::Round] = Some(r.counts[Counter::Round]);
        from_wait.set = w.set.clone();
        if from_wait.set.next_attempt == Change::Keep {
            from_wait.set.next_attempt = Change::Clear;
        }
        if from_wait.set.next_fire_at == Change::Keep {
            from_wait.set.next_fire_at = Change::Clear;
        }
        *w = from_wait;
    }
    plan
}

/// The write answering attempt `n` (guarded by it), with the response's reason.
fn answered(id: &TransactionId, arrow: Arrow, n: Attempt, resp: &Response, ctx: &Context) -> Write {
    let mut w = Write::new(id.clone(), arrow, ctx.now, Actor::ResponseHandler);
    w.guard.current_attempt = Some(n);
    w.set.last_reason = match &resp.reason {
        Some(r) => Change::Set(r.clone()),
        None => Change::Clear,
    };
    w.set.mark = Change::Clear;
    w
}

fn fail(id: &TransactionId, n: Attempt, resp: &Response, ctx: &Context) -> Plan {
    let mut w = answered(id, FAIL, n, resp, ctx).listed_failed(ctx.rules.shards);
    w.guard.budget = Some(BudgetGuard::Exhausted);
    w.set.last_outcome = Some(Outcome::Cancelled);
    vec![
        Effect::Write(w),
        Alert::raise(AlertKind::AttemptsExhausted, id, n, resp.reason.clone()),
        Effect::Ack(Ack::Failed),
    ]
}

/// REJECTED for attempt `n`: IN_PROGRESS(n) → FAILED on the exhaustion's arrow,
/// marked `REJECTED` (the mark, not the service's reason, says why), + business alert.
/// No other condition than the attempt: whatever budget is left, nothing is retried.
fn reject(id: &TransactionId, n: Attempt, resp: &Response, ctx: &Context) -> Plan {
    let mut w = answered(id, REJECT, n, resp, ctx).listed_failed(ctx.rules.shards);
    w.set.last_outcome = Some(Outcome::Rejected);
    let w = w.marked(Mark::Rejected);
    vec![
        Effect::Write(w),
        rejected_alert(id, n, resp),
        Effect::Ack(Ack::Rejected),
    ]
}

/// True when `resp` is an ERROR outbox mode may not send again: the service did not
/// say the call did not run.
fn ambiguous(resp: &Response, ctx: &Context) -> bool {
    ctx.outbox() && resp.outcome == Outcome::Error && resp.execution() != Execution::NotRun
}

/// An ambiguous ERROR for attempt `n` (outbox mode) of a record in round `round`
/// (0 when unread: the write is conditional on it, a failed condition decides again):
/// IN_PROGRESS(n) → FAILED on the exhaustion's arrow, marked `AMBIGUOUS`, + business
/// alert. No attempt, re-send or republish is spent: nothing is sent again.
fn ambiguous_failure(
    id: &TransactionId,
    n: Attempt,
    round: u32,
    resp: &Response,
    ctx: &Context,
) -> Plan {
    let mut w = answered(id, AMBIGUOUS_FAIL, n, resp, ctx).listed_failed(ctx.rules.shards);
    w.guard.counts[Counter::Round] = Some(round);
    w.set.last_outcome = Some(Outcome::Error);
    let w = w.marked(Mark::Ambiguous);
    vec![
        Effect::Write(w),
        ambiguous_alert(id, n),
        Effect::Ack(Ack::Failed),
    ]
}

/// The business alert of a transaction ended by an ambiguous ERROR: the request may
/// have run and was not sent again.
fn ambiguous_alert(id: &TransactionId, n: Attempt) -> Effect {
    Alert::raise(
        AlertKind::Ambiguous,
        id,
        n,
        Some(AMBIGUOUS_REASON.to_owned()),
    )
}

/// The business alert of a transaction the service rejected, with its reason (for
/// the operator to read; nothing decides on it).
fn rejected_alert(id: &TransactionId, n: Attempt, resp: &Response) -> Effect {
    Alert::raise(AlertKind::Rejected, id, n, resp.reason.clone())
}

/// ERROR for attempt `n` of a record with these `counts` (0 when unread: the writes
/// are conditional on the round, and a failed condition hands back the record to
/// decide again). Only its technical re-sends count against the bound. With re-sends left:
/// SCHEDULING with `next_attempt = n` (the attempt is not consumed), the re-send's own
/// schedule name and its instant — the later of the technical backoff's and the
/// service's `retry_after_seconds` — persisted before the schedule is created. Spent:
/// FAILED, `TECHNICAL_EXHAUSTED`.
///
/// An ERROR answering the breaker's probe (`probe`: the record carries the probe's
/// mark) spends nothing: it opens a round, no technical re-send.
/// Every write is conditional on the mark as decided (unread: no mark), so an answer
/// decided blind for a probe's request is decided again from the record.
fn technical_failure(
    id: &TransactionId,
    n: Attempt,
    counts: PerCounter<u32>,
    probe: bool,
    resp: &Response,
    ctx: &Context,
    rng: &mut dyn RandomSource,
) -> Plan {
    let (round, technical) = (counts[Counter::Round], counts.technical_resends());
    if !probe && technical >= ctx.rules.technical_resend_max {
        let mut w = answered(id, TECHNICAL_FAIL, n, resp, ctx).listed_failed(ctx.rules.shards);
        w.guard.counts[Counter::Round] = Some(round);
        w.guard.probe = Some(false);
        w.set.last_outcome = Some(Outcome::Error);
        let w = w.marked(Mark::TechnicalExhausted);
        return vec![
            Effect::Write(w),
            technical_alert(id, n),
            Effect::Ack(Ack::Failed),
        ];
    }
    let seq = round.saturating_add(1);
    // The backoff grows with the technical failures alone, not the probes' ERRORs.
    let failures = if probe {
        technical
    } else {
        technical.saturating_add(1)
    }
    .max(1);
    let backoff = ctx.rules.technical_policy.fire_at(
        ctx.now,
        Attempt::new(failures).unwrap_or(Attempt::FIRST),
        rng,
    );
    let asked = ctx
        .now
        .plus_millis(i64::from(resp.retry_after_seconds.unwrap_or(0)) * 1000)
        .ceil_to_second();
    let fire_at = backoff.max(asked);
    let name = ScheduleName::for_resend(id, n, seq);
    let mut w = answered(id, RESEND, n, resp, ctx);
    w.guard.counts[Counter::Round] = Some(round);
    w.guard.live = Some(ctx.live());
    w.guard.probe = Some(probe);
    w.set.counts[Counter::Round] = Change::Set(seq);
    if probe {
        let probes = counts[Counter::ProbeErrors].saturating_add(1);
        w.set.counts[Counter::ProbeErrors] = Change::Set(probes);
    }
    w.set.last_outcome = Some(Outcome::Error);
    open_cycle_plan(w, n, fire_at, name, ctx, Ack::Resend)
}

/// The plan of a write entering SCHEDULING from IN_PROGRESS: the write opens the
/// cycle of attempt `next` (instant and name persisted first), then the schedule is
/// created from that instant, then confirmed, then `ack`.
fn open_cycle_plan(
    w: Write,
    next: Attempt,
    fire_at: Timestamp,
    name: ScheduleName,
    ctx: &Context,
    ack: Ack,
) -> Plan {
    let id = w.transaction_id.clone();
    let mut w = w.open_cycle(next, fire_at, name.clone(), ctx.rules.shards);
    w.set.origin = Change::Clear;
    let cycle = Cycle {
        current: w.guard.current_attempt,
        next,
        round: match w.set.counts[Counter::Round] {
            Change::Set(k) => Some(k),
            _ => None,
        },
    };
    vec![
        Effect::Write(w),
        create_schedule(&id, next, fire_at, name, None),
        confirm_scheduled(&id, cycle, ctx, Actor::ResponseHandler),
        Effect::Ack(ack),
    ]
}

/// The business alert of a transaction whose technical re-sends are spent.
fn technical_alert(id: &TransactionId, n: Attempt) -> Effect {
    Alert::raise(
        AlertKind::TechnicalExhausted,
        id,
        n,
        Some(TECHNICAL_EXHAUSTED_REASON.to_owned()),
    )
}

fn schedule_retry(
    id: &TransactionId,
    n: Attempt,
    resp: &Response,
    ctx: &Context,
    rng: &mut dyn RandomSource,
) -> Plan {
    let next = n.next();
    let fire_at = ctx
        .rules
        .policies
        .for_reason(resp.reason.as_deref())
        .fire_at(ctx.now, n, rng);
    let name = ScheduleName::for_retry(id, next);
    let mut to_scheduling = answered(id, SCHEDULE, n, resp, ctx);
    // Guarded by `max_attempts > n`: when the budget is spent the condition fails,
    // hands back the record, and the re-decision takes rule 3.
    to_scheduling.guard.budget = Some(BudgetGuard::Remaining);
    // And by the deadline: past it, the re-decision ends the transaction.
    to_scheduling.guard.live = Some(ctx.live());
    to_scheduling.set.last_outcome = Some(Outcome::Cancelled);
    open_cycle_plan(to_scheduling, next, fire_at, name, ctx, Ack::Scheduled)
}
