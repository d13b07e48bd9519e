//! "Resolved by other means" (the operator, or a service that learned the outcome
//! elsewhere).

use super::{read_first, Ack, Context, Effect, Known, Plan, Rejection};
use crate::arrow;
use crate::ids::TransactionId;
use crate::machine::{Actor, Arrow, Change, Counter, Event, Mark, Status, Write};

/// Not from SENDING: there the request is in flight and the service's answer decides.
const RESOLVE: Arrow = arrow!([Status::Scheduling, Status::Scheduled], Event::Success);

/// SCHEDULING or SCHEDULED → SUCCEEDED, then delete the schedule (not found is fine).
pub fn decide_resolve(known: Known<'_>, id: &TransactionId, ctx: &Context) -> Plan {
    let r = match read_first(known, id) {
        Ok(r) => r,
        Err(plan) => return plan,
    };
    // Guarded by the status read (its attempts and its round): a record that moved on
    // since — another cycle of the same attempt too — is decided again.
    let Ok(arrow) = RESOLVE.only_from(&[r.status]) else {
        return if r.status == RESOLVE.to() {
            vec![Effect::Ack(Ack::AlreadyResolved)]
        } else {
            vec![Effect::Reject(Rejection::NotResolvable {
                transaction_id: id.clone(),
                status: r.status,
            })]
        };
    };
    let mut w = Write::new(id.clone(), arrow, ctx.now, Actor::Operator);
    w.guard.current_attempt = Some(r.current_attempt);
    w.guard.next_attempt = r.next_attempt;
    w.guard.counts[Counter::Round] = Some(r.counts[Counter::Round]);
    let mut w = w.marked(Mark::Resolved);
    // next_attempt is absent outside SCHEDULING/SCHEDULED/SENDING (DESIGN glossary);
    // the fire time goes with it. The schedule name stays: it names the schedule
    // deleted below; earlier audit rows keep both values.
    w.set.next_attempt = Change::Clear;
    w.set.next_fire_at = Change::Clear;
    let mut plan = vec![Effect::Write(w.noted(ctx.operator.as_ref()))];
    if let Some(name) = &r.schedule_name {
        plan.push(Effect::DeleteSchedule(name.clone()));
    }
    plan.push(Effect::Ack(Ack::Resolved));
    plan
}
