//! The retry handler (B), for a retry event `(id, m)`.

use super::cycle::in_progress_write;
use super::expire::{expire, expires};
use super::{Ack, Context, Deferred, DropReason, Effect, Known, Plan, Rejection, RequestHeader};
use crate::arrow;
use crate::breaker::Hold;
use crate::ids::{Attempt, TransactionId};
use crate::machine::{
    Actor, Arrow, Change, Counter, Event, Mark, Status, TransactionRecord, Write,
};
use crate::message::RetryEvent;

/// B accepts the event of the pending attempt in SCHEDULING too: the event may
/// overtake the response handler's confirmation.
const ACCEPT: Arrow = arrow!(
    [Status::Scheduling, Status::Scheduled],
    Event::RetryEventAccepted
);

/// The plan for a retry event, decided on what is known of the record. While the
/// circuit breaker holds requests back (`ctx.hold`), the event is deferred instead of
/// sent: back on the retry queue until the breaker's resume instant, the record
/// untouched (a hold is no arrow of the machine, so it meets no other).
pub fn decide_retry(known: Known<'_>, ev: &RetryEvent, ctx: &Context) -> Plan {
    let id = &ev.transaction_id;
    let m = ev.attempt;
    match known {
        Known::Missing => vec![Effect::Reject(Rejection::UnknownTransaction {
            transaction_id: id.clone(),
        })],
        // Held blind: nothing read, nothing written; the event comes back later and
        // is decided then on whatever the record has become.
        Known::Unread => match ctx.hold {
            Some(hold) => defer(ev, hold, ctx),
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
            // or decided again after its cycle moved on to a re-send): the cycle in
            // force has its own schedule and instant.
            if let Some(round) = ev.round.filter(|k| *k < r.counts[Counter::Round]) {
                return vec![Effect::Drop(DropReason::StaleCycle {
                    attempt: m,
                    round,
                    current: r.counts[Counter::Round],
                })];
            }
            // Past the transaction's deadline nothing is sent any more (a send
            // already begun, SENDING, is completed below).
            if expires(r, ctx) {
                return expire(r, ctx, Actor::RetryHandler);
            }
            match (r.status, ctx.hold) {
                (s, Some(hold)) if ACCEPT.from().contains(s) => defer(ev, hold, ctx),
                (s, None) if ACCEPT.from().contains(s) => send(id, m, ev, ctx),
                // SENDING with next_attempt = m, outbox mode: the publisher sends it
                // (once); this event is a duplicate of the one that decided it.
                (status @ Status::Sending, _) if ctx.outbox() => {
                    vec![Effect::Drop(DropReason::DuplicateRetry {
                        attempt: m,
                        status,
                    })]
                }
                // SENDING with next_attempt = m: resume (publish again, same key),
                // held or not: the send began before any hold, and request m may
                // already be out.
                (Status::Sending, _) => resume_sending(r, m, ctx, Actor::RetryHandler),
                (status, _) => vec![Effect::Drop(DropReason::DuplicateRetry {
                    attempt: m,
                    status,
                })],
            }
        }
    }
}

/// SENDING(m) resumed: request m published again under the same key, then SENDING →
/// IN_PROGRESS(m). The retry handler's redelivered event and the reconciler's stuck
/// SENDING both take it: no arrow leaves SENDING but this completion or an answer.
pub(super) fn resume_sending(
    r: &TransactionRecord,
    m: Attempt,
    ctx: &Context,
    actor: Actor,
) -> Plan {
    vec![
        Effect::PublishRequest(RequestHeader::of(r, m)),
        to_in_progress(&r.transaction_id, m, ctx, actor),
        Effect::Ack(Ack::Resumed),
    ]
}

/// The event held by the breaker: back on the retry queue until the hold's instant
/// (same attempt, same round, same origin), acknowledged here.
fn defer(ev: &RetryEvent, hold: Hold, ctx: &Context) -> Plan {
    vec![
        Effect::DeferRetry(Deferred::until(ev.clone(), ctx.now, hold.until)),
        Effect::Ack(Ack::Paused),
    ]
}

fn send(id: &TransactionId, m: Attempt, ev: &RetryEvent, ctx: &Context) -> Plan {
    // Entered only from the retry cycle: the cycle's index key stays (no index write).
    let mut w = Write::new(id.clone(), ACCEPT, ctx.now, Actor::RetryHandler);
    w.guard.next_attempt = Some(m);
    // Only in the cycle the event was made for, and before the deadline.
    w.guard.counts[Counter::Round] = ev.round;
    w.guard.live = Some(ctx.live());
    w.set.origin = Change::Set(ev.origin);
    // Marked before it leaves, so that its answer finds the mark.
    if ctx.probe {
        w = w.marked(Mark::Probe);
    }
    // Outbox mode: the write is the intent; the publisher sends request m.
    if ctx.outbox() {
        return vec![Effect::Write(w), Effect::Ack(Ack::Enqueued)];
    }
    vec![
        Effect::Write(w),
        // Its round and correlation id are the record's as this write returns it.
        Effect::PublishRequest(RequestHeader {
            transaction_id: id.clone(),
            attempt: m,
            round: None,
            correlation_id: None,
        }),
        to_in_progress(id, m, ctx, Actor::RetryHandler),
        Effect::Ack(Ack::Published),
    ]
}

fn to_in_progress(id: &TransactionId, m: Attempt, ctx: &Context, actor: Actor) -> Effect {
    let mut w = in_progress_write(id, m, ctx, actor);
    // A request resumed from SENDING as the breaker's probe.
    if ctx.probe {
        w = w.marked(Mark::Probe);
    }
    Effect::Write(w)
}
