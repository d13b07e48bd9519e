//! The reconciler, for a record its index query returned.

use super::response::resume_scheduling;
use super::{Ack, Context, DropReason, Effect, Plan};
use crate::machine::{Actor, Status, TransactionRecord};
use crate::message::{Origin, RetryEvent};

/// True when the reconciler should act on this record now.
pub fn is_stuck(r: &TransactionRecord, ctx: &Context) -> bool {
    let threshold = ctx.threshold_ms();
    let since = match r.status {
        Status::Scheduling | Status::Sending => r.updated_at,
        Status::Scheduled => r.next_fire_at.unwrap_or(r.updated_at),
        _ => return false,
    };
    since.plus_millis(threshold) < ctx.now
}

/// The plan for a record the reconciler's query returned.
pub fn decide_reconcile(r: &TransactionRecord, ctx: &Context) -> Plan {
    if !is_stuck(r, ctx) {
        return vec![Effect::Drop(DropReason::NotStuck { status: r.status })];
    }
    let Some(next) = r.next_attempt else {
        return vec![Effect::Drop(DropReason::NotStuck { status: r.status })];
    };
    let requeue = || {
        vec![
            Effect::PublishRetry(RetryEvent {
                transaction_id: r.transaction_id.clone(),
                origin: Origin::Reconciler,
                attempt: next,
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
        // SCHEDULED long past its fire time, or SENDING: put the retry event back so B
        // resumes through its usual idempotent path.
        Status::Scheduled | Status::Sending => requeue(),
        status => vec![Effect::Drop(DropReason::NotStuck { status })],
    }
}
