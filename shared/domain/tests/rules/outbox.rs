//! Outbox mode through the executor over the in-memory adapters: every message of a
//! transaction's life delivered twice, and a publisher that crashes after publishing.
//! What reaches the request queue is counted per (attempt, round), the FIFO queue's
//! deduplication id.

use crate::world::{tx, World};
use domain::decide::{Delivery, Disposition, Input};
use domain::machine::Status;
use domain::message::Outcome;
use std::collections::BTreeMap;

fn outbox() -> World {
    let mut w = World::new();
    w.delivery = Delivery::Outbox;
    w
}

/// Requests published per (attempt, round).
fn per_send(w: &World) -> BTreeMap<(u32, u32), usize> {
    let mut out = BTreeMap::new();
    for r in w.requests.messages() {
        *out.entry((r.attempt.get(), r.round.unwrap_or(0)))
            .or_default() += 1;
    }
    out
}

/// GIVEN outbox mode and a service answering CANCELLED WHEN the start, each stream
/// image, each retry event and each answer arrive twice THEN every attempt is
/// published exactly once, by the publisher; the starter and the retry handler publish
/// nothing; the transaction ends FAILED with its four attempts.
#[test]
fn every_message_twice_publishes_each_attempt_once() {
    let mut w = outbox();
    let id = tx("TX-OB1");
    assert_eq!(w.start(&id, 4).label(), "started");
    assert_eq!(w.start(&id, 4).label(), "already-started");
    assert!(
        w.requests.messages().is_empty(),
        "the starter publishes nothing"
    );
    for attempt in 1..=4 {
        assert_eq!(w.record(&id).status, Status::Sending);
        let image = w.record(&id);
        assert_eq!(w.run(Input::Publish(image.clone())).label(), "published");
        assert_eq!(w.run(Input::Publish(image)).label(), "already-published");
        for response in w.serve_each(|_| Outcome::Cancelled) {
            let first = w.run(Input::Response(response.clone()));
            w.run(Input::Response(response));
            if attempt == 4 {
                assert_eq!(first.label(), "failed");
            }
        }
        if attempt < 4 {
            w.advance_ms(30 * 3_600_000);
            for ev in w.fire_due() {
                assert_eq!(w.run(Input::Retry(ev.clone())).label(), "enqueued");
                assert_eq!(w.run(Input::Retry(ev)).label(), "duplicate-retry");
            }
        }
    }
    assert_eq!(w.record(&id).status, Status::Failed);
    assert_eq!(
        per_send(&w),
        BTreeMap::from([((1, 0), 1), ((2, 0), 1), ((3, 0), 1), ((4, 0), 1)])
    );
}

/// GIVEN a publisher that crashed after publishing request 1, before recording it WHEN
/// the stream hands the same image again within the resend window THEN the request
/// goes out again with the same (attempt, round), which SQS FIFO drops; handed again
/// past the window THEN nothing is published, the record waits IN_PROGRESS for its
/// answer or its deadline.
#[test]
fn a_crashed_publisher_publishes_again_only_within_the_window() {
    for (later_s, again) in [(10, true), (239, true), (240, false), (3_600, false)] {
        let mut w = outbox();
        let id = tx("TX-OB2");
        w.start(&id, 4);
        let image = w.record(&id);
        // The claim (0), the publish (1); stopped before the write recording it (2).
        assert!(w
            .run_crashing(Input::Publish(image.clone()), Some(2))
            .is_err());
        assert_eq!(per_send(&w), BTreeMap::from([((1, 0), 1)]));
        assert_eq!(w.record(&id).status, Status::Sending);
        w.advance_ms(later_s * 1_000);
        let d = w.run(Input::Publish(image));
        let (want, sends) = if again {
            ("published", 2)
        } else {
            ("publish-unconfirmed", 1)
        };
        assert_eq!(d.label(), want, "{later_s} s later");
        assert_eq!(
            per_send(&w),
            BTreeMap::from([((1, 0), sends)]),
            "{later_s} s later"
        );
        let r = w.record(&id);
        assert_eq!((r.status, r.publishing_since), (Status::InProgress, None));
        // Past the window, the unconfirmed send is left to the answer deadline, which
        // in outbox mode republishes nothing.
        if !again {
            w.advance_ms(7 * 3_600_000);
            let ends: Vec<Disposition> = w.reconcile();
            assert_eq!(
                ends.iter().map(Disposition::label).collect::<Vec<_>>(),
                ["unanswered"]
            );
            assert_eq!(per_send(&w), BTreeMap::from([((1, 0), 1)]));
        }
    }
}

/// GIVEN outbox mode WHEN an ERROR says NOT_RUN THEN the attempt goes out again in a
/// new round (a new deduplication id), published by the publisher once.
#[test]
fn a_not_run_error_is_sent_again_in_a_new_round() {
    let mut w = outbox();
    let id = tx("TX-OB3");
    w.start(&id, 4);
    w.publish(&id);
    for mut response in w.serve_each(|_| Outcome::Error) {
        response.execution = Some(domain::message::Execution::NotRun);
        assert_eq!(w.run(Input::Response(response)).label(), "resend");
    }
    w.advance_ms(3_600_000);
    for ev in w.fire_due() {
        assert_eq!(w.run(Input::Retry(ev)).label(), "enqueued");
    }
    assert_eq!(w.publish(&id).label(), "published");
    assert_eq!(per_send(&w), BTreeMap::from([((1, 0), 1), ((1, 1), 1)]));
}
