//! The retry handler (B), for a retry event `(id, m)`.

use super::{Ack, Context, DropReason, Effect, Known, Plan, Rejection, RequestHeader};
use crate::arrow;
use crate::ids::{Attempt, TransactionId};
use crate::machine::{Actor, Arrow, Change, Event, Status, Write};
use crate::message::{Origin, RetryEvent};

/// B accepts the event of the pending attempt in SCHEDULING too: the event may
/// overtake the response handler's confirmation.
const ACCEPT: Arrow = arrow!(
    [Status::Scheduling, Status::Scheduled],
    Event::RetryEventAccepted
);
const PUBLISHED: Arrow = arrow!([Status::Sending], Event::RequestPublished);

/// The plan for a retry event, decided on what is known of the record.
pub fn decide_retry(known: Known<'_>, ev: &RetryEvent, ctx: &Context) -> Plan {
    let id = &ev.transaction_id;
    let m = ev.attempt;
    match known {
        Known::Missing => vec![Effect::Reject(Rejection::UnknownTransaction {
            transaction_id: id.clone(),
        })],
        Known::Unread => send(id, m, ev.origin, ctx),
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
            match r.status {
                s if ACCEPT.from().contains(s) => send(id, m, ev.origin, ctx),
                // SENDING with next_attempt = m: resume (publish again, same key).
                Status::Sending => vec![
                    Effect::PublishRequest(RequestHeader {
                        transaction_id: id.clone(),
                        attempt: m,
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

fn send(id: &TransactionId, m: Attempt, origin: Origin, ctx: &Context) -> Plan {
    // Entered only from the retry cycle: the cycle's index key stays (no index write).
    let mut w = Write::new(id.clone(), ACCEPT, ctx.now, Actor::RetryHandler);
    w.guard.next_attempt = Some(m);
    w.set.origin = Change::Set(origin);
    vec![
        Effect::Write(w),
        Effect::PublishRequest(RequestHeader {
            transaction_id: id.clone(),
            attempt: m,
        }),
        to_in_progress(id, m, ctx),
        Effect::Ack(Ack::Published),
    ]
}

fn to_in_progress(id: &TransactionId, m: Attempt, ctx: &Context) -> Effect {
    Effect::Write(in_progress_write(id, m, ctx, Actor::RetryHandler))
}

/// SENDING → IN_PROGRESS(m): request m left; `current_attempt = m`, next cleared, the
/// answer deadline set and the republish count reset. The cycle's index key stays:
/// request m leaves at about the fire time it holds (no index write).
pub(super) fn in_progress_write(
    id: &TransactionId,
    m: Attempt,
    ctx: &Context,
    actor: Actor,
) -> Write {
    let mut w = Write::new(id.clone(), PUBLISHED, ctx.now, actor);
    w.guard.next_attempt = Some(m);
    w.set.current_attempt = Some(m);
    w.set.next_attempt = Change::Clear;
    w.set.next_fire_at = Change::Clear;
    w.set.answer_due_at = Change::Set(ctx.answer_due());
    w.set.republishes = Change::Clear;
    w
}
