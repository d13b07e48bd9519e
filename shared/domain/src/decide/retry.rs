//! The retry handler (B), for a retry event `(id, m)`.

use super::cycle::{
    confirm_scheduled, create_schedule, in_progress_write, resume_scheduling, Cycle,
};
use super::expire::{expire, expires};
use super::{Ack, Context, DropReason, Effect, Known, Plan, Rejection, RequestHeader};
use crate::arrow;
use crate::breaker::Hold;
use crate::ids::{Attempt, ScheduleName, TransactionId};
use crate::machine::{Actor, Arrow, Change, Event, Mark, Status, Write};
use crate::message::RetryEvent;

/// B accepts the event of the pending attempt in SCHEDULING too: the event may
/// overtake the response handler's confirmation.
const ACCEPT: Arrow = arrow!(
    [Status::Scheduling, Status::Scheduled],
    Event::RetryEventAccepted
);
/// While the breaker holds requests back, the pending attempt's cycle is opened again
/// later, from wherever the event finds it before its send began. Never from SENDING:
/// request m may have left, and only its publish's completion or its answer leave
/// SENDING (a pause would drop that answer as late).
const PAUSE: Arrow = arrow!(
    [Status::Scheduling, Status::Scheduled],
    Event::RetryPausedByBreaker
);

/// The plan for a retry event, decided on what is known of the record. While the
/// circuit breaker holds requests back (`ctx.hold`), the pending attempt is paused
/// instead of sent.
pub fn decide_retry(known: Known<'_>, ev: &RetryEvent, ctx: &Context) -> Plan {
    let id = &ev.transaction_id;
    let m = ev.attempt;
    match known {
        Known::Missing => vec![Effect::Reject(Rejection::UnknownTransaction {
            transaction_id: id.clone(),
        })],
        // Paused blind on no earlier rounds: a failed condition hands back the record.
        Known::Unread => match ctx.hold {
            Some(hold) => pause(id, m, (0, 0), hold, ctx),
            None => send(id, m, ev, ctx),
        },
        Known::Record(r) => {
            // Rule 1: an event for another attempt than the pending one is stale.
            if r.next_attempt != Some(m) {
                return if r.current_attempt >= m {
                    vec![Effect::Drop(DropReason::DuplicateRetry {
                        attempt: m,
                        status: r.status,
                    })]
                } else {
                    vec![Effect::Drop(DropReason::StaleRetry {
                        attempt: m,
                        pending: r.next_attempt,
                    })]
                };
            }
            // An event of an earlier retry cycle of the pending attempt (redelivered,
            // or decided again after its cycle moved on to a re-send or a pause):
            // the cycle in force has its own schedule and instant.
            if let Some(round) = ev.round.filter(|k| *k < r.resends) {
                return vec![Effect::Drop(DropReason::StaleCycle {
                    attempt: m,
                    round,
                    current: r.resends,
                })];
            }
            // Past the transaction's deadline nothing is sent or paused any more (a
            // send already begun, SENDING, is completed below).
            if expires(r, ctx) {
                return expire(r, ctx, Actor::RetryHandler);
            }
            if let Some(hold) = ctx.hold {
                // A cycle already waiting for a later instant (paused by another
                // delivery of this event, or a backoff not yet due) is left to it: the
                // breaker is asked again when it comes due. Pausing it once more would
                // open a new cycle under every concurrent delivery's conditions, and
                // they would keep re-pausing each other.
                let waits = r.next_fire_at.is_some_and(|f| f > ctx.now);
                match r.status {
                    Status::Scheduling if waits => {
                        return resume_scheduling(r, ctx, Actor::RetryHandler, Ack::Paused);
                    }
                    Status::Scheduled if waits => return vec![Effect::Ack(Ack::AlreadyHandled)],
                    s if PAUSE.from().contains(s) => {
                        return pause(id, m, (r.resends, r.pauses), hold, ctx);
                    }
                    _ => {}
                }
            }
            match r.status {
                s if ACCEPT.from().contains(s) => send(id, m, ev, ctx),
                // SENDING with next_attempt = m: resume (publish again, same key),
                // held or not: the send began before any hold, and request m may
                // already be out.
                Status::Sending => vec![
                    Effect::PublishRequest(RequestHeader {
                        transaction_id: id.clone(),
                        attempt: m,
                        round: Some(r.resends),
                    }),
                    to_in_progress(id, m, ctx),
                    Effect::Ack(Ack::Resumed),
                ],
                status => vec![Effect::Drop(DropReason::DuplicateRetry {
                    attempt: m,
                    status,
                })],
            }
        }
    }
}

/// Attempt `m` paused by the breaker on a record of `(resends, pauses)` rounds: its
/// cycle opened again with the next round's schedule name at the hold's instant
/// (persisted first, as every cycle), the schedule created, then confirmed. The
/// attempt and the technical re-send budget are untouched; `last_reason` names the
/// breaker state, for the audit trail.
fn pause(
    id: &TransactionId,
    m: Attempt,
    (resends, pauses): (u32, u32),
    hold: Hold,
    ctx: &Context,
) -> Plan {
    let seq = resends.saturating_add(1);
    // A schedule is never set in the past, and has second resolution.
    let fire_at = hold.until.max(ctx.now.plus_millis(1_000)).ceil_to_second();
    let name = ScheduleName::for_resend(id, m, seq);
    let mut w = Write::new(id.clone(), PAUSE, ctx.now, Actor::RetryHandler).open_cycle(
        m,
        fire_at,
        name.clone(),
        ctx.shards,
    );
    w.guard.next_attempt = Some(m);
    w.guard.resends = Some(resends);
    w.guard.live = Some(ctx.live());
    w.set.resends = Change::Set(seq);
    w.set.pauses = Change::Set(pauses.saturating_add(1));
    let w = w.marked(hold.mark());
    let cycle = Cycle {
        current: None,
        next: m,
        resends: Some(seq),
    };
    vec![
        Effect::Write(w),
        create_schedule(id, m, fire_at, name, Some(seq)),
        confirm_scheduled(id, cycle, ctx, Actor::RetryHandler),
        Effect::Ack(Ack::Paused),
    ]
}

fn send(id: &TransactionId, m: Attempt, ev: &RetryEvent, ctx: &Context) -> Plan {
    // Entered only from the retry cycle: the cycle's index key stays (no index write).
    let mut w = Write::new(id.clone(), ACCEPT, ctx.now, Actor::RetryHandler);
    w.guard.next_attempt = Some(m);
    // Only in the cycle the event was made for, and before the deadline.
    w.guard.resends = ev.round;
    w.guard.live = Some(ctx.live());
    w.set.origin = Change::Set(ev.origin);
    // Marked before it leaves, so that its answer finds the mark.
    if ctx.probe {
        w = w.marked(Mark::Probe);
    }
    vec![
        Effect::Write(w),
        // Its round is the record's as this write returns it.
        Effect::PublishRequest(RequestHeader {
            transaction_id: id.clone(),
            attempt: m,
            round: None,
        }),
        to_in_progress(id, m, ctx),
        Effect::Ack(Ack::Published),
    ]
}

fn to_in_progress(id: &TransactionId, m: Attempt, ctx: &Context) -> Effect {
    let mut w = in_progress_write(id, m, ctx, Actor::RetryHandler);
    // A request resumed from SENDING as the breaker's probe.
    if ctx.probe {
        w = w.marked(Mark::Probe);
    }
    Effect::Write(w)
}
