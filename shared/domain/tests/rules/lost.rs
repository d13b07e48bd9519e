//! Answers lost after the store applied the call: the SDK sends the call again, and
//! the retry meets the first try's own result. Every run must end as it would have
//! without the loss — the same acknowledgement, the same effects, the same record —
//! never a duplicate, a conflict or a rejection.

use crate::world::*;
use domain::decide::{Ack, Disposition, Input};
use domain::machine::TransactionRecord;
use domain::message::Outcome;

/// What a run left behind.
#[derive(Debug, PartialEq)]
struct End {
    disposition: Disposition,
    published: Vec<u32>,
    schedules: u64,
    alerts: usize,
    record: TransactionRecord,
}

/// Prepares a world, loses the answer of its input's `lose`-th write (or create),
/// runs the input and returns what it left.
fn end(prepare: impl Fn(&mut World) -> Input, lose: Option<u64>, create: bool) -> End {
    let mut w = World::new();
    let input = prepare(&mut w);
    match (lose, create) {
        (Some(n), false) => w.store.lose_answer_of_write(n),
        (Some(n), true) => w.store.lose_answer_of_create(n),
        (None, _) => {}
    }
    let writes_before = w.store.calls().writes;
    let disposition = w.run(input);
    let id = tx("TX-L1");
    let writes = w.store.calls().writes - writes_before;
    if let Some(n) = lose.filter(|_| !create) {
        assert!(n <= writes, "the run made {writes} writes, none lost");
    }
    End {
        disposition,
        published: w.published(&id),
        schedules: w.scheduler.created(),
        alerts: w.alerts(),
        record: w.record(&id),
    }
}

fn started(w: &mut World, max: u32) -> Vec<domain::Response> {
    assert_eq!(w.start(&tx("TX-L1"), max), Disposition::Ack(Ack::Started));
    w.serve(|_| Outcome::Cancelled)
}

fn answer(w: &mut World, max: u32, outcome: Outcome) -> Input {
    started(w, max);
    response_input(&tx("TX-L1"), 1, outcome)
}

fn retry_event(w: &mut World) -> Input {
    let resp = started(w, 4).pop().unwrap();
    assert_eq!(
        w.run(response_input(
            &tx("TX-L1"),
            resp.attempt.get(),
            Outcome::Cancelled
        )),
        Disposition::Ack(Ack::Scheduled)
    );
    w.now = w.record(&tx("TX-L1")).next_fire_at.unwrap();
    retry_input(w.fire_due().pop().unwrap())
}

/// A case: its name, how to prepare the world and its input, and its writes.
type Case<'a> = (&'a str, &'a dyn Fn(&mut World) -> Input, u64);

#[test]
fn a_write_whose_answer_was_lost_is_done() {
    let cases: [Case<'_>; 4] = [
        ("SUCCESS", &|w| answer(w, 4, Outcome::Success), 1),
        (
            "CANCELLED with attempts left",
            &|w| answer(w, 4, Outcome::Cancelled),
            2,
        ),
        (
            "CANCELLED, budget spent",
            &|w| answer(w, 1, Outcome::Cancelled),
            1,
        ),
        ("retry event", &retry_event, 2),
    ];
    for (name, prepare, writes) in cases {
        let clean = end(prepare, None, false);
        assert!(
            matches!(clean.disposition, Disposition::Ack(_)),
            "{name}: {clean:?}"
        );
        for k in 1..=writes {
            assert_eq!(
                end(prepare, Some(k), false),
                clean,
                "{name}: answer of write {k} lost"
            );
        }
    }
}

#[test]
fn a_create_whose_answer_was_lost_is_started_and_published_once() {
    let start = |_: &mut World| start_input(&tx("TX-L1"), 4);
    let clean = end(start, None, true);
    assert_eq!(clean.disposition, Disposition::Ack(Ack::Started));
    assert_eq!(end(start, Some(1), true), clean);
    assert_eq!(clean.published, [1]);
}
