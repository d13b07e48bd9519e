//! The transaction deadline: a transaction still open when its deadline has passed
//! ends FAILED, `EXPIRED`, at its next decision that would make it wait again — an
//! answer that would open a retry cycle, a retry event that would send or pause, a
//! request unanswered past its own deadline, a cycle the reconciler finds stuck. A
//! request that may be out (SENDING, or IN_PROGRESS before its answer deadline) is
//! never cut short, and a SUCCESS is always recorded: one that comes after the
//! expiry is kept as a conflicting success. `docs/design.md#the-transaction-deadline`.

use super::{Ack, Alert, AlertKind, Context, Effect, Plan};
use crate::arrow;
use crate::ids::{Attempt, TransactionId};
use crate::machine::{
    Actor, Arrow, Change, Counter, Event, Mark, Status, TransactionRecord, Write,
};

const EXPIRE: Arrow = arrow!(
    [Status::InProgress, Status::Scheduling, Status::Scheduled],
    Event::Exhausted
);

/// The reason the alert of an expired transaction names.
pub const EXPIRED_REASON: &str = Mark::Expired.legacy_reason();

/// True when `r` is one the deadline may end now: open, past its deadline, and in a
/// status the expiry leaves (never SENDING: its request may be out).
pub fn expires(r: &TransactionRecord, ctx: &Context) -> bool {
    EXPIRE.from().contains(r.status) && ctx.expired(r)
}

/// `r`, past its deadline, ends FAILED `EXPIRED` with the business alert. The alert
/// goes first: once FAILED no message brings a handler back to the record. The write
/// is conditional on what was read — status, attempts, round and republishes — so a
/// record that moved on is decided again.
pub(super) fn expire(r: &TransactionRecord, ctx: &Context, actor: Actor) -> Plan {
    let Ok(arrow) = EXPIRE.only_from(&[r.status]) else {
        return vec![Effect::Ack(Ack::AlreadyHandled)];
    };
    let id = &r.transaction_id;
    let mut w = Write::new(id.clone(), arrow, ctx.now, actor);
    w.guard.current_attempt = Some(r.current_attempt);
    w.guard.next_attempt = r.next_attempt;
    w.guard.counts[Counter::Round] = Some(r.counts[Counter::Round]);
    w.guard.counts[Counter::Republishes] = Some(r.counts[Counter::Republishes]);
    w.set.next_attempt = Change::Clear;
    w.set.next_fire_at = Change::Clear;
    let w = w.listed_failed(ctx.rules.shards).marked(Mark::Expired);
    vec![
        expired_alert(id, r.current_attempt),
        Effect::Write(w),
        Effect::Ack(Ack::Expired),
    ]
}

/// The business alert of transaction `id` ended (or found ended) past its deadline,
/// at attempt `n`.
pub(super) fn expired_alert(id: &TransactionId, n: Attempt) -> Effect {
    Alert::raise(AlertKind::Expired, id, n, Some(EXPIRED_REASON.to_owned()))
}
