//! What the functions' plans share about one retry cycle: its schedule, its
//! confirmation, its resumption from SCHEDULING and the write that sends its request.
//! The cycle's life: `docs/design.md#the-state-machine`.

use super::{Ack, Context, Effect, Plan, ScheduleSpec};
use crate::arrow;
use crate::ids::{Attempt, ScheduleName, Timestamp, TransactionId};
use crate::machine::{Actor, Arrow, Change, Counter, Event, Status, TransactionRecord, Write};
use crate::message::{Origin, RetryEvent};

const CONFIRM: Arrow = arrow!([Status::Scheduling], Event::ScheduleConfirmed);
const PUBLISHED: Arrow = arrow!([Status::Sending], Event::RequestPublished);

/// The one-time schedule that puts attempt `next`'s retry event on the queue at
/// `fire_at`.
///
/// `round` is the cycle's (`None` after the write that opens it: the run takes it
/// from the record that write returned).
pub(super) fn create_schedule(
    id: &TransactionId,
    next: Attempt,
    fire_at: Timestamp,
    name: ScheduleName,
    round: Option<u32>,
) -> Effect {
    Effect::CreateSchedule(ScheduleSpec {
        name,
        fire_at,
        event: RetryEvent {
            transaction_id: id.clone(),
            origin: Origin::RetryScheduler,
            attempt: next,
            round,
        },
    })
}

/// What tells one retry cycle from another: the attempt answered, the attempt to
/// send and, for a technical re-send, its number. A re-send of attempt n has the same
/// `next_attempt` as the CANCELLED cycle that sent n and as the re-send before it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Cycle {
    pub(super) current: Option<Attempt>,
    pub(super) next: Attempt,
    pub(super) round: Option<u32>,
}

/// SCHEDULING → SCHEDULED for `cycle` (the cycle's index key stays): conditional on
/// all of it, so that a confirmation left over from an earlier cycle never confirms
/// a later one whose schedule may not exist yet.
pub(super) fn confirm_scheduled(
    id: &TransactionId,
    cycle: Cycle,
    ctx: &Context,
    actor: Actor,
) -> Effect {
    let mut w = Write::new(id.clone(), CONFIRM, ctx.now, actor);
    w.guard.current_attempt = cycle.current;
    w.guard.next_attempt = Some(cycle.next);
    w.guard.counts[Counter::Round] = cycle.round;
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
    let cycle = Cycle {
        current: Some(r.current_attempt),
        next,
        round: Some(r.counts[Counter::Round]),
    };
    if fire_at <= ctx.now {
        return vec![
            Effect::PublishRetry(RetryEvent {
                transaction_id: id.clone(),
                origin: Origin::RetryScheduler,
                attempt: next,
                round: Some(r.counts[Counter::Round]),
            }),
            confirm_scheduled(id, cycle, ctx, actor),
            Effect::Ack(ack),
        ];
    }
    let name = r
        .schedule_name
        .clone()
        .unwrap_or_else(|| ScheduleName::for_retry(id, next));
    vec![
        create_schedule(id, next, fire_at, name, Some(r.counts[Counter::Round])),
        confirm_scheduled(id, cycle, ctx, actor),
        Effect::Ack(ack),
    ]
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
    w.set.counts[Counter::Republishes] = Change::Clear;
    w
}
