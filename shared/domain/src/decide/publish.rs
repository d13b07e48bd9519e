//! Outbox mode's publisher (and the reconciler's rescue of a SENDING record): the
//! request a SENDING record holds goes to the FIFO request queue once per
//! (transaction, attempt, round). `docs/design.md#outbox-mode`.

use super::cycle::in_progress_write;
use super::{Ack, Context, DropReason, Effect, Plan, RequestHeader};
use crate::arrow;
use crate::audit::AuditEntry;
use crate::machine::{Actor, Arrow, Change, Counter, Event, Status, TransactionRecord, Write};

const CLAIM: Arrow = arrow!([Status::Sending], Event::PublishClaimed);

/// True when `current` still holds the send `image` holds: SENDING, the same pending
/// attempt, the same round.
pub(super) fn same_send(image: &TransactionRecord, current: &TransactionRecord) -> bool {
    current.status == Status::Sending
        && current.next_attempt == image.next_attempt
        && current.counts[Counter::Round] == image.counts[Counter::Round]
}

/// The plan for SENDING(n, round) `r`, published by `actor`:
///
/// - not claimed yet: claim it (SENDING → SENDING, `publishing_since` = now, only if
///   no claim exists and the send is still (n, round)), publish request n of the round
///   (FIFO `MessageDeduplicationId` `<id>#n#round`), then SENDING → IN_PROGRESS(n) with
///   its answer deadline, the record's mark kept (a breaker's probe stays one);
/// - claimed less than [`crate::defaults::PUBLISH_RESEND_WINDOW`] ago (a publisher
///   that crashed, or a second copy of the image): publish again — SQS drops the
///   repeat of the deduplication id — then IN_PROGRESS(n);
/// - claimed longer ago: no publish (a repeat could escape SQS's deduplication
///   window), an audit notice, and IN_PROGRESS(n) so that the answer deadline
///   watches it. If the claimed send went out, its answer comes as usual; if not, the
///   deadline ends the transaction FAILED, `UNANSWERED` (outbox mode never
///   republishes).
///
/// A record that is no longer SENDING has nothing to publish.
pub fn decide_publish(r: &TransactionRecord, ctx: &Context, actor: Actor) -> Plan {
    let (Status::Sending, Some(n)) = (r.status, r.next_attempt) else {
        return vec![Effect::Drop(DropReason::AlreadyPublished {
            status: r.status,
        })];
    };
    let id = &r.transaction_id;
    let round = r.counts[Counter::Round];
    let mut published = in_progress_write(id, n, ctx, actor);
    published.guard.counts[Counter::Round] = Some(round);
    let request = Effect::PublishRequest(RequestHeader::of(r, n));
    match r.publishing_since {
        None => {
            let mut claim = Write::new(id.clone(), CLAIM, ctx.now, actor);
            claim.guard.next_attempt = Some(n);
            claim.guard.counts[Counter::Round] = Some(round);
            claim.guard.unclaimed = true;
            claim.set.publishing_since = Change::Set(ctx.now);
            vec![
                Effect::Write(claim),
                request,
                Effect::Write(published),
                Effect::Ack(Ack::Published),
            ]
        }
        Some(since) if ctx.now < since.plus_millis(window_ms()) => vec![
            request,
            Effect::Write(published),
            Effect::Ack(Ack::Published),
        ],
        // The notice first: once IN_PROGRESS no run comes back to this send, so a
        // crash between the two repeats both rather than losing the notice.
        Some(_) => vec![
            Effect::Note(AuditEntry::publish_unconfirmed(r, actor, ctx.now)),
            Effect::Write(published),
            Effect::Ack(Ack::PublishUnconfirmed),
        ],
    }
}

fn window_ms() -> i64 {
    super::millis(crate::defaults::PUBLISH_RESEND_WINDOW)
}
