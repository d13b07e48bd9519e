//! The reconciler, for a record its index query returned.

use super::cycle::resume_scheduling;
use super::expire::{expire, expires};
use super::publish::decide_publish;
use super::retry::resume_sending;
use super::{Ack, Alert, AlertKind, Context, DropReason, Effect, Plan, RequestHeader};
use crate::arrow;
use crate::machine::{
    Actor, Arrow, Change, Counter, Event, Mark, ReconcileKey, Status, TransactionRecord, Write,
};
use crate::message::{Origin, RetryEvent};

/// The reason the alert of a transaction that ended because its request was never
/// answered names.
pub const UNANSWERED_REASON: &str = Mark::Unanswered.legacy_reason();

const AWAITED: Arrow = arrow!([Status::InProgress], Event::AnswerAwaited);
const REPUBLISHED: Arrow = arrow!([Status::InProgress], Event::AnswerRepublished);
const ABANDONED: Arrow = arrow!([Status::InProgress], Event::Exhausted);
const REQUEUED_SCHEDULING: Arrow = arrow!([Status::Scheduling], Event::ReconcilerRequeued);
const REQUEUED_SCHEDULED: Arrow = arrow!([Status::Scheduled], Event::ReconcilerRequeued);

/// The answer deadline of an IN_PROGRESS record: the stored one, or (a record written
/// before deadlines existed) its last write plus the answer timeout.
fn answer_due(r: &TransactionRecord, ctx: &Context) -> crate::ids::Timestamp {
    r.answer_due_at.unwrap_or_else(|| {
        r.updated_at
            .plus_millis(i64::try_from(ctx.rules.answer_timeout.as_millis()).unwrap_or(i64::MAX))
    })
}

/// True when the reconciler's plan for this record may send its request again, so it
/// asks the circuit breaker first: an IN_PROGRESS record past its answer deadline
/// with republishes left (one that has spent them ends FAILED/UNANSWERED whatever the
/// breaker says: it is not a request the breaker could hold or let out), or a retry
/// cycle past its instant that it would requeue (while the breaker holds, its event
/// is deferred on the retry queue, not lost).
pub fn asks_breaker(r: &TransactionRecord, ctx: &Context) -> bool {
    let sends = match r.status {
        Status::InProgress => r.counts[Counter::Republishes] < ctx.rules.answer_republishes(),
        Status::Scheduling => past_instant(r, ctx),
        Status::Scheduled => true,
        _ => false,
    };
    sends && is_stuck(r, ctx) && !ctx.expired(r)
}

/// True when the record's retry cycle is past its instant (or has none): its event is
/// due, or held.
fn past_instant(r: &TransactionRecord, ctx: &Context) -> bool {
    r.next_fire_at.is_none_or(|f| f <= ctx.now)
}

/// True when the reconciler should act on this record now: a retry cycle unchanged
/// for longer than the threshold, or a request unanswered past its deadline.
pub fn is_stuck(r: &TransactionRecord, ctx: &Context) -> bool {
    let threshold = ctx.threshold_ms();
    let since = match r.status {
        Status::Scheduling | Status::Sending => r.updated_at,
        // Past its fire time — or, once requeued, since that requeue (its count's
        // write): a requeued event gets the threshold to arrive before the next.
        Status::Scheduled => r.next_fire_at.map_or(r.updated_at, |f| f.max(r.updated_at)),
        Status::InProgress => return answer_due(r, ctx) <= ctx.now,
        _ => return false,
    };
    since.plus_millis(threshold) < ctx.now
}

/// The plan for a record the reconciler's query returned.
pub fn decide_reconcile(r: &TransactionRecord, ctx: &Context) -> Plan {
    if r.status == Status::InProgress {
        return decide_unanswered(r, ctx);
    }
    if !is_stuck(r, ctx) {
        return vec![Effect::Drop(DropReason::NotStuck { status: r.status })];
    }
    let Some(next) = r.next_attempt else {
        return vec![Effect::Drop(DropReason::NotStuck { status: r.status })];
    };
    // A stuck cycle past the deadline ends (parked ones too).
    if expires(r, ctx) {
        return expire(r, ctx, Actor::Reconciler);
    }
    // SENDING in outbox mode: the publisher's rescue, decided as the publisher
    // decides (its claim says whether it may still publish).
    if r.status == Status::Sending && ctx.outbox() {
        return decide_publish(r, ctx, Actor::Reconciler);
    }
    // SENDING: its send began and its request may be out; the reconciler completes it
    // as the retry handler's redelivered event would (same key), breaker or not.
    if r.status == Status::Sending {
        return resume_sending(r, next, ctx, Actor::Reconciler);
    }
    // A cycle past its instant while the breaker holds: its event is deferred on the
    // retry queue (or will be, once requeued after the hold); requeueing it now would
    // only be deferred too, and would count a requeue the cycle did not need.
    if ctx.hold.is_some() && past_instant(r, ctx) {
        return vec![Effect::Drop(DropReason::HeldByBreaker { status: r.status })];
    }
    // Each requeue is counted on the record (conditional on the count read, so two
    // runs never both count one), and any other write clears the count: a cycle
    // requeued `requeue_max` times with no progress since is parked — its event keeps
    // failing where the reconciler cannot help (say its payload is gone), and
    // requeueing it again would only fill the retry DLQ.
    let requeue = || {
        if r.counts[Counter::Requeues] >= ctx.rules.requeue_max {
            return vec![Effect::Drop(DropReason::Parked {
                status: r.status,
                requeues: r.counts[Counter::Requeues],
            })];
        }
        let arrow = match r.status {
            Status::Scheduling => REQUEUED_SCHEDULING,
            _ => REQUEUED_SCHEDULED,
        };
        let mut w = Write::new(r.transaction_id.clone(), arrow, ctx.now, Actor::Reconciler);
        w.guard.next_attempt = Some(next);
        w.guard.counts[Counter::Requeues] = Some(r.counts[Counter::Requeues]);
        w.set.counts[Counter::Requeues] =
            Change::Set(r.counts[Counter::Requeues].saturating_add(1));
        vec![
            Effect::Write(w),
            Effect::PublishRetry(RetryEvent {
                transaction_id: r.transaction_id.clone(),
                origin: Origin::Reconciler,
                attempt: next,
                round: None,
            }),
            Effect::Ack(Ack::ReconcilerRequeued),
        ]
    };
    match r.status {
        // SCHEDULING: create the schedule from the stored instant; if that instant has
        // already passed, a schedule would be pointless: put the event on the queue
        // (B accepts SCHEDULING).
        Status::Scheduling => match r.next_fire_at {
            Some(fire) if fire > ctx.now => {
                resume_scheduling(r, ctx, Actor::Reconciler, Ack::ReconcilerScheduled)
            }
            _ => requeue(),
        },
        // SCHEDULED long past its fire time: put the retry event back so B sends
        // through its usual idempotent path.
        Status::Scheduled => requeue(),
        status => vec![Effect::Drop(DropReason::NotStuck { status })],
    }
}

/// IN_PROGRESS(n): before its deadline, only its index entry moves to the deadline;
/// past it, request n goes out again with the same key `<id>#n` (the same attempt:
/// the budget is untouched and an idempotent service drops the duplicate), at most
/// `answer_republish_max` times; then the transaction ends FAILED, `UNANSWERED`.
/// Every write is conditional on the attempt and the republish count read, so two
/// runs never count one republish twice.
fn decide_unanswered(r: &TransactionRecord, ctx: &Context) -> Plan {
    let id = &r.transaction_id;
    let n = r.current_attempt;
    let due = answer_due(r, ctx);
    let guarded = |arrow: Arrow| {
        let mut w = Write::new(id.clone(), arrow, ctx.now, Actor::Reconciler);
        w.guard.current_attempt = Some(n);
        w.guard.counts[Counter::Republishes] = Some(r.counts[Counter::Republishes]);
        w
    };
    let watch_from = |due: crate::ids::Timestamp| ReconcileKey {
        partition: ReconcileKey::partition_for(id.shard(ctx.rules.shards)),
        at: due.plus_millis(-ctx.threshold_ms()),
    };
    if ctx.now < due {
        // Found early (its entry still holds the fire time of the cycle that sent
        // it): move the entry to the deadline, so later runs pass it by.
        let wanted = watch_from(due);
        if r.reconcile.as_ref().is_none_or(|k| k.at >= wanted.at) {
            return vec![Effect::Drop(DropReason::NotStuck { status: r.status })];
        }
        let mut w = guarded(AWAITED);
        w.set.reconcile = Change::Set(wanted);
        w.set.answer_due_at = Change::Set(due);
        return vec![Effect::Write(w), Effect::Ack(Ack::ReconcilerAwaiting)];
    }
    // Every republish spent: no answer came for this request however often it went
    // out, before any hold or probe (a breaker that never closes — its probes
    // unanswered too — would otherwise keep it waiting, or probing for free, for
    // ever). Outbox mode makes none: a republish would publish the attempt twice.
    if r.counts[Counter::Republishes] >= ctx.rules.answer_republishes() {
        return abandon(r, ctx);
    }
    // Past the transaction's deadline too: no republish, hold or probe any more.
    if expires(r, ctx) {
        return expire(r, ctx, Actor::Reconciler);
    }
    // This request went out as the breaker's probe and its own deadline passed
    // unanswered: a failed probe. Its silence is the outage's, not the request's: it
    // spends nothing while the breaker holds or probes again (a silent outage would
    // otherwise end FAILED/UNANSWERED the transactions its probes happen to pick
    // several times). A request whose answer is lost while the service is up is no
    // free probe for ever: any other probe's answer closes the breaker, after which
    // its deadline spends a republish as any other; on a stack with nothing else in
    // flight, its transaction's deadline ends it.
    // The breaker holds requests back: republishing into a service that is down
    // helps nothing. The deadline moves to the breaker's resume instant, the
    // republish count untouched (an outage spends no republish); the reason names
    // the hold, so that the republish after it is not taken for a fresh silence.
    if let Some(hold) = ctx.hold {
        let held = hold.until.max(ctx.now.plus_millis(1_000));
        let mut w = guarded(AWAITED);
        w.set.answer_due_at = Change::Set(held);
        w.set.reconcile = Change::Set(watch_from(held));
        let w = w.marked(hold.mark());
        return vec![Effect::Write(w), Effect::Ack(Ack::ReconcilerHeld)];
    }
    // Let out as the breaker's probe: the request tests the service for everyone, so
    // it goes out again without spending a republish (a silent outage would otherwise
    // spend the budgets of the transactions its probes happen to pick), and its
    // reason says so, so that its own deadline is no fresh silence either.
    if ctx.probe {
        let mut w = guarded(REPUBLISHED);
        let next_due = ctx.answer_due();
        w.set.answer_due_at = Change::Set(next_due);
        w.set.reconcile = Change::Set(watch_from(next_due));
        let w = w.marked(Mark::Probe);
        return vec![
            Effect::PublishRequest(RequestHeader::of(r, n)),
            Effect::Write(w),
            Effect::Ack(Ack::ReconcilerProbed),
        ];
    }
    let mut w = guarded(REPUBLISHED);
    let next_due = ctx.answer_due();
    w.set.counts[Counter::Republishes] =
        Change::Set(r.counts[Counter::Republishes].saturating_add(1));
    w.set.answer_due_at = Change::Set(next_due);
    w.set.reconcile = Change::Set(watch_from(next_due));
    // A request held back by the breaker goes out now that it lets requests out:
    // its deadline passed during the outage, not since (the breaker's signal is
    // a deadline that fired on a service thought up).
    // (Or the breaker's probe, whose deadline passed: its mark goes too.)
    let after_hold = r.mark.is_some_and(Mark::is_breakers);
    if after_hold {
        w.set.mark = Change::Clear;
        w.set.last_reason = Change::Clear;
    }
    vec![
        Effect::PublishRequest(RequestHeader::of(r, n)),
        Effect::Write(w),
        Effect::Ack(if after_hold {
            Ack::ReconcilerRepublishedAfterHold
        } else {
            Ack::ReconcilerRepublished
        }),
    ]
}

/// IN_PROGRESS(n) past its deadline with every republish spent: FAILED, `UNANSWERED`,
/// and the business alert. The alert goes first: once FAILED the record leaves the
/// index and no message brings the reconciler back to it, so a crash between the
/// write and a later alert would lose the alert. Alerting first makes it at least
/// once (a crash before the write repeats both on the next run).
fn abandon(r: &TransactionRecord, ctx: &Context) -> Plan {
    let id = &r.transaction_id;
    let n = r.current_attempt;
    let mut w = Write::new(id.clone(), ABANDONED, ctx.now, Actor::Reconciler);
    w.guard.current_attempt = Some(n);
    w.guard.counts[Counter::Republishes] = Some(r.counts[Counter::Republishes]);
    let w = w.listed_failed(ctx.rules.shards);
    let w = w.marked(Mark::Unanswered);
    vec![
        Alert::raise(
            AlertKind::Unanswered,
            id,
            n,
            Some(UNANSWERED_REASON.to_owned()),
        ),
        Effect::Write(w),
        Effect::Ack(Ack::Unanswered),
    ]
}
