//! The response handler (A), for a response `(id, n, outcome)`.

use super::resolve::RESOLVED_REASON;
use super::retry::in_progress_write;
use super::{
    Ack, Alert, AlertKind, Context, DropReason, Effect, Known, Plan, Rejection, ScheduleSpec,
};
use crate::arrow;
use crate::audit::AuditEntry;
use crate::ids::{Attempt, ScheduleName, Timestamp, TransactionId};
use crate::machine::{Actor, Arrow, BudgetGuard, Change, Event, Status, TransactionRecord, Write};
use crate::message::{Origin, Outcome, Response, RetryEvent};
use crate::policy::RandomSource;

const SUCCEED: Arrow = arrow!([Status::InProgress], Event::ResponseSuccess);
const FAIL: Arrow = arrow!([Status::InProgress], Event::ResponseCancelledExhausted);
const SCHEDULE: Arrow = arrow!([Status::InProgress], Event::ResponseCancelledRetry);
const CONFIRM: Arrow = arrow!([Status::Scheduling], Event::ScheduleConfirmed);

/// The plan for a response, decided on what is known of the record.
pub fn decide_response(
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
        // The response for the attempt B is publishing (SENDING, next_attempt = n): it
        // proves request n left, so complete B's last arrow (SENDING → IN_PROGRESS(n))
        // and then handle the response. Dropping it as late would leave the
        // transaction IN_PROGRESS(n) waiting for a response already consumed (B's
        // final write comes after its publish, and a crash there leaves SENDING).
        if r.status == Status::Sending && r.next_attempt == Some(n) && r.current_attempt != n {
            let published = in_progress_write(id, n, ctx, Actor::ResponseHandler);
            if let Ok(after) = published.apply(r) {
                let mut plan = vec![Effect::Write(published)];
                plan.extend(decide_response(Known::Record(&after), resp, ctx, rng));
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
    let status = rec.map(|r| r.status);
    match (status, resp.outcome) {
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
            if rec.is_some_and(|r| r.last_reason.as_deref() == Some(RESOLVED_REASON)) =>
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
        (Some(Status::Failed), Outcome::Cancelled) => {
            let attempts = rec.map(|r| r.current_attempt).unwrap_or(n);
            vec![
                Effect::Alert(Alert {
                    kind: AlertKind::AttemptsExhausted,
                    transaction_id: id.clone(),
                    attempts,
                    last_reason: resp.reason.clone(),
                }),
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

/// The write answering attempt `n` (guarded by it), with the response's reason.
fn answered(id: &TransactionId, arrow: Arrow, n: Attempt, resp: &Response, ctx: &Context) -> Write {
    let mut w = Write::new(id.clone(), arrow, ctx.now, Actor::ResponseHandler);
    w.guard.current_attempt = Some(n);
    w.set.last_reason = match &resp.reason {
        Some(r) => Change::Set(r.clone()),
        None => Change::Clear,
    };
    w
}

fn fail(id: &TransactionId, n: Attempt, resp: &Response, ctx: &Context) -> Plan {
    let mut w = answered(id, FAIL, n, resp, ctx).listed_failed(ctx.shards);
    w.guard.budget = Some(BudgetGuard::Exhausted);
    w.set.last_outcome = Some(Outcome::Cancelled);
    vec![
        Effect::Write(w),
        Effect::Alert(Alert {
            kind: AlertKind::AttemptsExhausted,
            transaction_id: id.clone(),
            attempts: n,
            last_reason: resp.reason.clone(),
        }),
        Effect::Ack(Ack::Failed),
    ]
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
        .policies
        .for_reason(resp.reason.as_deref())
        .fire_at(ctx.now, n, rng);
    let name = ScheduleName::for_retry(id, next);
    let mut to_scheduling =
        answered(id, SCHEDULE, n, resp, ctx).open_cycle(next, fire_at, name.clone(), ctx.shards);
    // Guarded by `max_attempts > n`: when the budget is spent the condition fails,
    // hands back the record, and the re-decision takes rule 3.
    to_scheduling.guard.budget = Some(BudgetGuard::Remaining);
    to_scheduling.set.last_outcome = Some(Outcome::Cancelled);
    to_scheduling.set.origin = Change::Clear;
    vec![
        Effect::Write(to_scheduling),
        create_schedule(id, next, fire_at, name),
        confirm_scheduled(id, next, ctx, Actor::ResponseHandler),
        Effect::Ack(Ack::Scheduled),
    ]
}

/// The one-time schedule that puts attempt `next`'s retry event on the queue at
/// `fire_at`.
fn create_schedule(
    id: &TransactionId,
    next: Attempt,
    fire_at: Timestamp,
    name: ScheduleName,
) -> Effect {
    Effect::CreateSchedule(ScheduleSpec {
        name,
        fire_at,
        event: RetryEvent {
            transaction_id: id.clone(),
            origin: Origin::RetryScheduler,
            attempt: next,
        },
    })
}

/// SCHEDULING → SCHEDULED for the pending attempt `next` (the cycle's index key stays).
fn confirm_scheduled(id: &TransactionId, next: Attempt, ctx: &Context, actor: Actor) -> Effect {
    let mut w = Write::new(id.clone(), CONFIRM, ctx.now, actor);
    w.guard.next_attempt = Some(next);
    Effect::Write(w)
}

/// SCHEDULING found: create the schedule from the **stored** instant, then confirm.
/// When that instant has already passed (a response redriven from its DLQ after
/// the fire time), no schedule can be set in the past: the retry event goes on the
/// retry queue at once, as the schedule would have put it there, then confirm.
pub(super) fn resume_scheduling(
    r: &TransactionRecord,
    ctx: &Context,
    actor: Actor,
    ack: Ack,
) -> Plan {
    let (Some(next), Some(fire_at)) = (r.next_attempt, r.next_fire_at) else {
        // A SCHEDULING record always carries both; without them there is nothing to
        // schedule from, and the reconciler will report it.
        return vec![Effect::Ack(Ack::AlreadyHandled)];
    };
    let id = &r.transaction_id;
    if fire_at <= ctx.now {
        return vec![
            Effect::PublishRetry(RetryEvent {
                transaction_id: id.clone(),
                origin: Origin::RetryScheduler,
                attempt: next,
            }),
            confirm_scheduled(id, next, ctx, actor),
            Effect::Ack(ack),
        ];
    }
    let name = r
        .schedule_name
        .clone()
        .unwrap_or_else(|| ScheduleName::for_retry(id, next));
    vec![
        create_schedule(id, next, fire_at, name),
        confirm_scheduled(id, next, ctx, actor),
        Effect::Ack(ack),
    ]
}
