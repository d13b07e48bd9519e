//! Operator replay (`retryctl replay`): the one arrow out of FAILED.

use super::{read_first, Ack, Context, Effect, Known, Plan, Rejection};
use crate::arrow;
use crate::ids::{MaxAttempts, ScheduleName, TransactionId, MAX_ATTEMPTS_LIMIT};
use crate::machine::{Actor, Arrow, Change, Counter, Event, Status, Write};
use crate::message::{Origin, RetryEvent};

const REPLAY: Arrow = arrow!([Status::Failed], Event::OperatorReplay);

/// Reopens a FAILED transaction with `budget` more attempts (and its technical
/// re-sends counted from 0 again). The record goes to
/// SCHEDULING with the next attempt due now, and a retry event with origin OPERATOR
/// goes on the retry queue (if that publish is lost, the reconciler finds the
/// SCHEDULING record and requeues it).
pub fn decide_replay(known: Known<'_>, id: &TransactionId, budget: u32, ctx: &Context) -> Plan {
    let r = match read_first(known, id) {
        Ok(r) => r,
        Err(plan) => return plan,
    };
    let not_replayable = || {
        vec![Effect::Reject(Rejection::NotReplayable {
            transaction_id: id.clone(),
            status: r.status,
        })]
    };
    if !REPLAY.from().contains(r.status) {
        return not_replayable();
    }
    let next = r.current_attempt.next();
    let new_max = r
        .current_attempt
        .get()
        .saturating_add(budget.max(1))
        .min(MAX_ATTEMPTS_LIMIT);
    // At the highest budget accepted there is no attempt left to reopen with: the
    // reopened attempt must stay within max_attempts.
    let max = match MaxAttempts::new(new_max) {
        Ok(max) if !max.exhausted_by(r.current_attempt) => max,
        _ => return not_replayable(),
    };
    let mut w = Write::new(id.clone(), REPLAY, ctx.now, Actor::Operator).open_cycle(
        next,
        ctx.now,
        ScheduleName::for_retry(id, next),
        ctx.rules.shards,
    );
    w.guard.current_attempt = Some(r.current_attempt);
    // The round read: an operator's write never lands on a record that moved on.
    w.guard.counts[Counter::Round] = Some(r.counts[Counter::Round]);
    w.set.max_attempts = Some(max);
    w.set.origin = Change::Set(Origin::Operator);
    // A fresh budget of technical re-sends too.
    w.set.counts[Counter::Round] = Change::Clear;
    w.set.counts[Counter::ProbeErrors] = Change::Clear;
    // Open again: how it ended (TECHNICAL_EXHAUSTED, UNANSWERED, EXPIRED) no longer
    // says what it is.
    w.set.mark = Change::Clear;
    // And a whole deadline, counted from now.
    w.set.expires_at = Change::Set(
        ctx.now
            .plus_millis(super::millis(ctx.rules.transaction_deadline)),
    );
    let w = w.noted(ctx.operator.as_ref());
    vec![
        Effect::Write(w),
        Effect::PublishRetry(RetryEvent {
            transaction_id: id.clone(),
            origin: Origin::Operator,
            attempt: next,
            round: None,
        }),
        Effect::Ack(Ack::Replayed),
    ]
}
