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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decide::{decide, Disposition, Input, Known, Observed, Rejection, Run};
    use crate::ids::{Attempt, MaxAttempts, Timestamp, TransactionId};
    use crate::machine::Mark;
    use crate::policy::FixedRandom;

    const NOW: i64 = 10_000_000;
    const WINDOW: i64 = 240_000;

    fn id() -> TransactionId {
        TransactionId::parse("TX-P").unwrap()
    }

    fn ctx() -> Context {
        Context::at(
            crate::decide::Deployment::default(),
            Timestamp::from_millis(NOW),
        )
        .with_delivery(crate::decide::Delivery::Outbox)
    }

    /// SENDING(3) of round `round` (attempt 2 answered), claimed at `claimed` (ms).
    fn sending(round: u32, claimed: Option<i64>) -> TransactionRecord {
        let mut r = TransactionRecord::started(
            id(),
            MaxAttempts::new(4).unwrap(),
            Timestamp::from_millis(0),
        );
        r.status = Status::Sending;
        r.current_attempt = Attempt::new(2).unwrap();
        r.next_attempt = Some(Attempt::new(3).unwrap());
        r.counts[Counter::Round] = round;
        r.publishing_since = claimed.map(Timestamp::from_millis);
        r.updated_at = Timestamp::from_millis(claimed.unwrap_or(1_000));
        r
    }

    fn labels(plan: &Plan) -> Vec<&'static str> {
        plan.iter().map(Effect::label).collect()
    }

    fn publishes(plan: &Plan) -> usize {
        plan.iter()
            .filter(|e| matches!(e, Effect::PublishRequest(_)))
            .count()
    }

    /// GIVEN an unclaimed SENDING(3, round 1) WHEN the publisher decides THEN it claims
    /// (only if still unclaimed, still that send), publishes request 3 of round 1 with
    /// the deduplication id `TX-P#3#1`, and enters IN_PROGRESS(3) keeping the mark.
    #[test]
    fn an_unclaimed_send_is_claimed_published_and_recorded() {
        let mut r = sending(1, None);
        r.mark = Some(Mark::Probe);
        let plan = decide_publish(&r, &ctx(), Actor::Publisher);
        assert_eq!(labels(&plan), ["write", "publish-request", "write", "ack"]);
        let (Effect::Write(claim), Effect::PublishRequest(h), Effect::Write(done)) =
            (&plan[0], &plan[1], &plan[2])
        else {
            panic!("{plan:?}")
        };
        assert_eq!(claim.event(), Event::PublishClaimed);
        assert!(claim.guard.unclaimed);
        assert_eq!(claim.guard.next_attempt, Some(Attempt::new(3).unwrap()));
        assert_eq!(claim.guard.counts[Counter::Round], Some(1));
        assert_eq!(
            claim.set.publishing_since,
            Change::Set(Timestamp::from_millis(NOW))
        );
        let claimed = claim.apply(&r).unwrap();
        assert_eq!(claimed.status, Status::Sending);
        assert_eq!(claimed.publishing_since, Some(Timestamp::from_millis(NOW)));
        assert!(claim.apply(&claimed).is_err(), "a claim is taken once");
        assert_eq!(h.deduplication_id(), "TX-P#3#1");
        assert_eq!(h.group_id(), "TX-P");
        assert_eq!(done.event(), Event::RequestPublished);
        assert_eq!(done.guard.counts[Counter::Round], Some(1));
        let after = done.apply(&claimed).unwrap();
        assert_eq!(after.status, Status::InProgress);
        assert_eq!(after.current_attempt, Attempt::new(3).unwrap());
        assert_eq!(
            after.publishing_since, None,
            "the claim leaves with SENDING"
        );
        assert_eq!(after.mark, Some(Mark::Probe), "a probe stays one");
        assert!(after.answer_due_at.is_some());
        assert_eq!(plan[3], Effect::Ack(Ack::Published));
    }

    /// GIVEN a claim of age 0, 1 ms, window − 1 ms, the window, and beyond WHEN
    /// decided THEN a claim younger than the window publishes again (FIFO drops the
    /// repeat), one as old as the window or older never does: it notes the send
    /// unconfirmed and leaves the request to its answer deadline.
    #[test]
    fn a_claim_publishes_again_only_within_the_resend_window() {
        assert_eq!(
            crate::defaults::PUBLISH_RESEND_WINDOW.as_millis(),
            u128::try_from(WINDOW).unwrap()
        );
        for age in [0, 1, WINDOW - 1, WINDOW, WINDOW + 1, 10 * WINDOW] {
            let r = sending(0, Some(NOW - age));
            let plan = decide_publish(&r, &ctx(), Actor::Reconciler);
            if age < WINDOW {
                assert_eq!(
                    labels(&plan),
                    ["publish-request", "write", "ack"],
                    "age {age}"
                );
                assert_eq!(plan[2], Effect::Ack(Ack::Published));
            } else {
                assert_eq!(labels(&plan), ["note", "write", "ack"], "age {age}");
                assert_eq!(plan[2], Effect::Ack(Ack::PublishUnconfirmed));
                let Effect::Note(n) = &plan[0] else {
                    panic!("{plan:?}")
                };
                assert_eq!(n.notice, Some(crate::audit::Notice::PublishUnconfirmed));
                assert_eq!(n.current_attempt, Attempt::new(3).unwrap());
                assert_eq!(n.actor, Actor::Reconciler);
            }
            let Some(Effect::Write(w)) = plan.iter().find(|e| matches!(e, Effect::Write(_))) else {
                panic!("{plan:?}")
            };
            assert_eq!(w.apply(&r).unwrap().status, Status::InProgress, "age {age}");
        }
    }

    /// GIVEN a record that is not SENDING WHEN decided THEN nothing is published.
    #[test]
    fn only_a_sending_record_is_published() {
        for status in Status::ALL
            .iter()
            .copied()
            .filter(|s| *s != Status::Sending)
        {
            let mut r = sending(0, None);
            r.status = status;
            assert_eq!(
                decide_publish(&r, &ctx(), Actor::Publisher),
                vec![Effect::Drop(DropReason::AlreadyPublished { status })]
            );
        }
        let mut no_pending = sending(0, None);
        no_pending.next_attempt = None;
        assert_eq!(
            publishes(&decide_publish(&no_pending, &ctx(), Actor::Publisher)),
            0
        );
    }

    /// GIVEN the stream's image of SENDING(3, round 1) WHEN the current record is
    /// another send (another round, another attempt) or no longer SENDING THEN the
    /// image is dropped as already published; the same send is decided on the current
    /// record (its claim, not the image's, says whether to publish); no record: an
    /// unknown transaction.
    #[test]
    fn a_stale_image_publishes_nothing() {
        let image = sending(1, None);
        let input = Input::Publish(image.clone());
        let decide_on =
            |known: Known<'_>| decide(&input, known, None, &ctx(), &mut FixedRandom(0.5));
        let mut in_progress = image.clone();
        in_progress.status = Status::InProgress;
        in_progress.current_attempt = Attempt::new(3).unwrap();
        in_progress.next_attempt = None;
        let next_round = sending(2, None);
        let mut next_attempt = sending(1, None);
        next_attempt.next_attempt = Some(Attempt::new(4).unwrap());
        for current in [&in_progress, &next_round, &next_attempt] {
            assert_eq!(
                decide_on(Known::Record(current)),
                vec![Effect::Drop(DropReason::AlreadyPublished {
                    status: current.status
                })]
            );
        }
        let claimed_old = sending(1, Some(NOW - 2 * WINDOW));
        assert_eq!(publishes(&decide_on(Known::Record(&claimed_old))), 0);
        let claimed_young = sending(1, Some(NOW - 1_000));
        assert_eq!(publishes(&decide_on(Known::Record(&claimed_young))), 1);
        assert_eq!(
            decide_on(Known::Missing),
            vec![Effect::Reject(Rejection::UnknownTransaction {
                transaction_id: id()
            })]
        );
        assert_eq!(decide_on(Known::Unread), decide_on(Known::Record(&image)));
    }

    /// Drives a publisher's run on `image`; before each write, `race` may change the
    /// stored record (another publisher, an answer). Returns the disposition and the
    /// requests published.
    /// A race that changes the stored record, when there is one, just before the
    /// run's write number `n`.
    fn before_write(
        n: usize,
        change: impl Fn(&mut TransactionRecord),
    ) -> impl FnMut(usize, &mut Option<TransactionRecord>) {
        move |i, stored| {
            if let Some(r) = stored.as_mut().filter(|_| i == n) {
                change(r);
            }
        }
    }

    fn run_racing(
        image: &TransactionRecord,
        mut race: impl FnMut(usize, &mut Option<TransactionRecord>),
    ) -> (Disposition, usize) {
        let ctx = ctx();
        let rng = &mut FixedRandom(0.5);
        let mut stored = Some(image.clone());
        let mut run = Run::new(
            Input::Publish(image.clone()),
            Known::Record(image),
            &ctx,
            rng,
        );
        let (mut writes, mut published) = (0, 0);
        while let crate::decide::Step::Perform(effect) = run.step() {
            let observed = match effect.clone() {
                Effect::Write(w) => {
                    race(writes, &mut stored);
                    writes += 1;
                    match stored.as_ref().map(|r| w.apply(r)) {
                        Some(Ok(next)) => {
                            stored = Some(next.clone());
                            Observed::Written(next)
                        }
                        _ => Observed::ConditionFailed(stored.clone()),
                    }
                }
                Effect::PublishRequest(_) => {
                    published += 1;
                    Observed::Published
                }
                Effect::Note(_) => Observed::Noted,
                other => panic!("a publisher does not perform {other:?}"),
            };
            run.observe(observed, &ctx, rng).unwrap();
        }
        (run.disposition().cloned().unwrap(), published)
    }

    /// GIVEN each condition of the publisher's writes made false just before it WHEN
    /// the run decides again from the record handed back THEN: another publisher's
    /// fresh claim → published again within the window (FIFO drops it); that claim
    /// old → not published; the send published and recorded by another → dropped,
    /// nothing published; a new round or attempt → dropped; the record gone →
    /// rejected; the final write beaten by another's → dropped after one publish.
    #[test]
    fn every_failed_condition_is_decided_again_from_the_record() {
        let image = sending(1, None);
        let claimed_at = |at: i64| {
            before_write(0, move |r| {
                r.publishing_since = Some(Timestamp::from_millis(at))
            })
        };
        assert_eq!(
            run_racing(&image, claimed_at(NOW - 1_000)),
            (Disposition::Ack(Ack::Published), 1)
        );
        assert_eq!(
            run_racing(&image, claimed_at(NOW - WINDOW)),
            (Disposition::Ack(Ack::PublishUnconfirmed), 0)
        );
        let recorded = |r: &mut TransactionRecord| {
            r.status = Status::InProgress;
            r.current_attempt = Attempt::new(3).unwrap();
            r.next_attempt = None;
        };
        let already = |status| Disposition::Drop(DropReason::AlreadyPublished { status });
        assert_eq!(
            run_racing(&image, before_write(0, recorded)),
            (already(Status::InProgress), 0)
        );
        assert_eq!(
            run_racing(&image, before_write(0, |r| r.counts[Counter::Round] = 2)),
            (already(Status::Sending), 0)
        );
        let new_attempt = before_write(0, |r| r.next_attempt = Some(Attempt::new(4).unwrap()));
        assert_eq!(run_racing(&image, new_attempt).1, 0);
        let gone = |i: usize, r: &mut Option<TransactionRecord>| {
            if i == 0 {
                *r = None;
            }
        };
        assert_eq!(
            run_racing(&image, gone),
            (
                Disposition::Reject(Rejection::UnknownTransaction {
                    transaction_id: id()
                }),
                0
            )
        );
        // The claim taken, the request published; another copy records IN_PROGRESS
        // before this one's last write.
        let recorded_after = before_write(1, |r| {
            recorded(r);
            r.publishing_since = None;
        });
        assert_eq!(
            run_racing(&image, recorded_after),
            (already(Status::InProgress), 1)
        );
        // Unraced: claimed, published once, recorded.
        assert_eq!(
            run_racing(&image, |_, _| {}),
            (Disposition::Ack(Ack::Published), 1)
        );
    }

    /// GIVEN one SENDING record and any number of publishers deciding it at any
    /// instants after its claim WHEN a publisher decides at or past the window THEN it
    /// publishes nothing: no request leaves past SQS's deduplication window.
    #[test]
    fn no_publish_is_decided_past_the_window_of_the_claim() {
        let claim = NOW - 5 * WINDOW;
        for now in (claim..claim + 3 * WINDOW).step_by(7_919) {
            let r = sending(0, Some(claim));
            let c = Context::at(
                crate::decide::Deployment::default(),
                Timestamp::from_millis(now),
            )
            .with_delivery(crate::decide::Delivery::Outbox);
            let n = publishes(&decide_publish(&r, &c, Actor::Publisher));
            assert_eq!(
                n,
                usize::from(now < claim + WINDOW),
                "at claim + {}",
                now - claim
            );
        }
    }
}
