//! The failure table of docs/design.md: every row once, run through the functions'
//! handler cores (what the Lambda functions run) on two backends — the in-memory
//! adapters (`memory::…`) and the `shared/aws` adapters against a patched moto
//! server (`moto::…`). The rows are listed once, in [`rows!`] at the end.
//!
//! A crash is simulated by stopping the plan after effect k (the `hook` of
//! `execute`); the message is then delivered again, as SQS would after the visibility
//! timeout. Time is the world's manual clock on both backends; a schedule fires when
//! a row says so (moto stores schedules and never fires them: the world reads the due
//! ones back through the Scheduler API and delivers their input). Each row asserts
//! the final state, the audit trail, the requests the external service sees
//! (deduplicated by idempotency key) and the schedules.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::moto::Moto;
use common::*;
use domain::decide::{Ack, DropReason, Input};
use domain::exec::{execute, ExecError};
use domain::machine::Counter;
use domain::machine::Mark;
use domain::TransactionRecord;
use domain::{Attempt, Disposition, MaxAttempts, Origin, Outcome, RetryEvent, Status};
use reconciler::{Action, Limits};
use runtime::drive::{drive, verdict};
use runtime::metrics::{names, Metrics};
use runtime::Verdict;
use std::collections::BTreeSet;
use std::time::Duration;
use testkit::trail::TO_ATTEMPT_2;

const TX: &str = "TX-100200";

fn keys(v: &[&str]) -> BTreeSet<String> {
    v.iter().map(|s| (*s).to_owned()).collect()
}

/// The service was asked attempts 1 and 2 of TX, each under its one key.
async fn keys_1_and_2<B: Backend>(w: &World<B>, context: &str) {
    assert_eq!(
        w.distinct_keys().await,
        keys(&["TX-100200#1", "TX-100200#2"]),
        "{context}"
    );
}

/// Started, then CANCELLED for attempt 1 handled fully: SCHEDULED.
async fn scheduled_world<B: Backend>(max: u32) -> World<B> {
    let w = B::world().await;
    w.start(TX, max).await;
    let v = w.respond(TX, 1, Outcome::Cancelled).await;
    assert_eq!(v.label(), "scheduled");
    assert_eq!(w.status(TX).await, Status::Scheduled);
    w
}

/// Moves the clock to the fire time and fires the schedule: the retry event.
async fn fire<B: Backend>(w: &World<B>) -> RetryEvent {
    let fire_at = w.record(TX).await.next_fire_at.unwrap();
    w.set_time(fire_at);
    let mut due = w.fire_due().await;
    assert_eq!(due.len(), 1, "exactly one schedule fires");
    due.remove(0)
}

/// Past the reconciler's threshold.
fn past_threshold<B: Backend>(w: &World<B>) {
    w.advance(w.settings.reconcile_threshold + Duration::from_secs(60));
}

/// Just past the answer deadline of the request in flight.
async fn past_answer_deadline<B: Backend>(w: &World<B>) {
    let due = w.record(TX).await.answer_due_at.unwrap();
    w.set_time(due.plus_millis(1_000));
}

// ---------------------------------------------------------------------------
// Response handler (A) crash points: rows 1-3.
// ---------------------------------------------------------------------------

/// Rows 1-3 swept: A stops after each of its effects (write SCHEDULING, create the
/// schedule, write SCHEDULED) and the response is delivered again 5 minutes later.
/// Every crash point ends in the same state as no crash: SCHEDULED, one schedule at
/// the instant persisted by the first delivery, one audit row per transition.
async fn response_handler_crash_after_each_effect_then_redelivery<B: Backend>() {
    for k in 0..=2 {
        let w = B::world().await;
        w.start(TX, 3).await;
        let crashed = w
            .respond_with(TX, 1, Outcome::Cancelled, &mut stop_after(k))
            .await;
        assert!(
            matches!(crashed, Verdict::Retry { .. }),
            "k={k}: a crash leaves the message to SQS: {crashed:?}"
        );
        let left = w.record(TX).await;
        let expected_left = if k == 0 {
            Status::InProgress
        } else {
            Status::Scheduling
        };
        assert_eq!(left.status, expected_left, "k={k}: state left");
        assert_eq!(w.live().await.len(), usize::from(k == 2), "k={k}");

        // Redelivery after the visibility timeout: a different `now` and jitter.
        w.advance(Duration::from_secs(300));
        let again = w.respond(TX, 1, Outcome::Cancelled).await;
        assert_eq!(again.label(), "scheduled", "k={k}");

        let rec = w.record(TX).await;
        assert_eq!(rec.status, Status::Scheduled, "k={k}");
        let live = w.live().await;
        assert_eq!(live.len(), 1, "k={k}: exactly one schedule");
        assert_eq!(
            w.metrics.count(names::SCHEDULES_CREATED),
            1,
            "k={k}: created once"
        );
        assert_eq!(
            Some(live[0].fire_at),
            rec.next_fire_at,
            "k={k}: schedule made from the persisted instant"
        );
        if k >= 1 {
            assert_eq!(
                rec.next_fire_at, left.next_fire_at,
                "k={k}: the instant persisted before the crash is reused"
            );
        }
        assert_eq!(
            w.audit_path(TX).await,
            TO_ATTEMPT_2[..3].to_vec(),
            "k={k}: one audit row per transition"
        );
        assert_eq!(w.distinct_keys().await, keys(&["TX-100200#1"]), "k={k}");
    }
}

/// Row 1: A dies before SCHEDULING → IN_PROGRESS; the whole process repeats,
/// nothing duplicated.
async fn row1_a_dies_before_scheduling<B: Backend>() {
    let w = B::world().await;
    w.start_and_crash_responding(TX, 0).await;
    assert_eq!(w.status(TX).await, Status::InProgress);
    assert_eq!(w.audit(TX).await.len(), 1, "nothing written");
    w.respond(TX, 1, Outcome::Cancelled).await;
    assert_eq!(w.status(TX).await, Status::Scheduled);
    assert_eq!(w.live().await.len(), 1);
    assert_eq!(w.metrics.count(names::SCHEDULES_CREATED), 1);
    assert_eq!(w.metrics.count(names::SCHEDULE_CONFLICTS), 0);
}

/// Row 2: A dies after SCHEDULING, before creating the schedule → SCHEDULING; the
/// stored next_fire_at is reused: one retry.
async fn row2_a_dies_after_scheduling_before_creating<B: Backend>() {
    let w = B::world().await;
    w.start_and_crash_responding(TX, 1).await;
    let stored = w.record(TX).await.next_fire_at.unwrap();
    assert!(w.live().await.is_empty());
    w.advance(Duration::from_secs(3600));
    w.respond(TX, 1, Outcome::Cancelled).await;
    let live = w.live().await;
    assert_eq!(live.len(), 1);
    assert_eq!(live[0].fire_at, stored, "not recomputed an hour later");
    assert_eq!(live[0].name.as_str(), "retry-TX-100200-2");
    // One retry: firing it once gives attempt 2, once.
    let ev = fire(&w).await;
    w.retry(&ev).await;
    keys_1_and_2(&w, "").await;
    assert_eq!(w.audit_path(TX).await, TO_ATTEMPT_2.to_vec());
}

/// Row 2, added: the same crash, but the response comes back only after the stored
/// instant has passed (redriven from the response DLQ hours later): no schedule is
/// created in the past — AWS refuses one — the retry event goes straight to the
/// retry queue, the record is confirmed SCHEDULED, and the retry goes out once.
async fn a_response_redriven_after_its_fire_time_goes_to_the_retry_queue<B: Backend>() {
    let w = B::world().await;
    w.start_and_crash_responding(TX, 1).await;
    let stored = w.record(TX).await.next_fire_at.unwrap();
    w.set_time(stored.plus_millis(3 * 3_600_000));
    assert_eq!(
        w.respond(TX, 1, Outcome::Cancelled).await,
        Verdict::Done(Ack::Scheduled)
    );
    assert!(w.live().await.is_empty(), "no schedule in the past");
    assert_eq!(w.metrics.count(names::SCHEDULES_CREATED), 0);
    let rec = w.record(TX).await;
    assert_eq!(
        (rec.status, rec.next_attempt, rec.next_fire_at),
        (Status::Scheduled, Some(a(2)), Some(stored))
    );
    let events = w.take_retries().await;
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(
        (events[0].attempt, events[0].origin),
        (a(2), Origin::RetryScheduler)
    );
    assert_eq!(w.retry(&events[0]).await.label(), "published");
    assert_eq!(w.keys().await, vec!["TX-100200#1", "TX-100200#2"]);
    assert_eq!(w.audit_path(TX).await, TO_ATTEMPT_2.to_vec());
}

/// Row 3: A dies after creating the schedule, before SCHEDULED → SCHEDULING; the
/// redelivery's create says "exists": success.
async fn row3_a_dies_after_creating_before_scheduled<B: Backend>() {
    let w = B::world().await;
    w.start_and_crash_responding(TX, 2).await;
    assert_eq!(w.status(TX).await, Status::Scheduling);
    assert_eq!(w.live().await.len(), 1);
    let v = w.respond(TX, 1, Outcome::Cancelled).await;
    assert_eq!(v, Verdict::Done(Ack::Scheduled));
    assert_eq!(w.status(TX).await, Status::Scheduled);
    assert_eq!(w.metrics.count(names::SCHEDULE_CONFLICTS), 1);
    assert_eq!(w.metrics.count(names::SCHEDULES_CREATED), 1);
    assert_eq!(w.live().await.len(), 1);
}

// ---------------------------------------------------------------------------
// Row 4: the retry event arrives while A is still SCHEDULING.
// ---------------------------------------------------------------------------

/// A is paused after `k` effects (1: SCHEDULING written; 2: schedule created), the
/// retry event arrives and B accepts it from SCHEDULING — and either finishes, or
/// dies after SENDING — then A goes on: its confirmation meets a failed condition,
/// re-decides once from the record handed back, and that is success (acknowledged):
/// A never overwrites B's progress.
async fn row4_retry_event_while_a_is_still_scheduling<B: Backend>() {
    for k in [1usize, 2] {
        for b_finishes in [true, false] {
            let case = format!("k={k} b_finishes={b_finishes}");
            let w = B::world().await;
            w.start(TX, 3).await;
            let ctx = w.settings.context(w.now());
            let mut rng = fixed();
            let mut a_run = drive(
                Input::Response(response(TX, 1, Outcome::Cancelled)),
                &w.response_ports(),
                &ctx,
                &mut rng,
                &mut stop_after(k),
            )
            .await;
            assert!(a_run.result.is_err(), "{case}: A paused");
            assert_eq!(w.status(TX).await, Status::Scheduling);

            // The retry event for attempt 2 arrives now (the fire time came, or the
            // reconciler requeued it). B accepts SCHEDULING.
            let rec = w.record(TX).await;
            w.set_time(rec.next_fire_at.unwrap());
            let ev = RetryEvent {
                transaction_id: id(TX),
                origin: Origin::RetryScheduler,
                attempt: a(2),
                round: None,
            };
            if b_finishes {
                let b = w.retry(&ev).await;
                assert_eq!(b.label(), "published", "{case}: B accepted SCHEDULING");
                assert_eq!(w.status(TX).await, Status::InProgress);
                assert_eq!(w.record(TX).await.current_attempt, a(2));
            } else {
                let b = w.retry_with(&ev, &mut stop_after(1)).await;
                assert!(matches!(b, Verdict::Retry { .. }), "{case}: {b:?}");
                assert_eq!(w.status(TX).await, Status::Sending);
            }
            let left = w.record(TX).await;

            // A resumes where it stopped.
            a_run.result = execute(
                &mut a_run.run,
                &w.response_ports(),
                &ctx,
                &mut rng,
                &mut all(),
            )
            .await;
            let v = verdict(&a_run, &w.metrics);
            assert!(
                v.is_acknowledged(),
                "{case}: A's failed condition is success: {v:?}"
            );
            let want = if b_finishes {
                Disposition::Drop(DropReason::LateResponse {
                    attempt: a(1),
                    current: a(2),
                })
            } else {
                Disposition::Ack(Ack::AlreadyHandled)
            };
            assert_eq!(a_run.result, Ok(want), "{case}");
            assert_eq!(a_run.run.redecisions(), 1, "{case}");
            assert_eq!(w.record(TX).await, left, "{case}: A changed nothing");
            let mut path = vec![
                "*>IN_PROGRESS@1",
                "IN_PROGRESS>SCHEDULING@1",
                "SCHEDULING>SENDING@1",
            ];
            if b_finishes {
                path.push("SENDING>IN_PROGRESS@2");
            }
            assert_eq!(w.audit_path(TX).await, path, "{case}");
            if !b_finishes {
                // The retry event redelivered: B resumes and publishes.
                assert_eq!(w.retry(&ev).await.label(), "resumed", "{case}");
                assert_eq!(w.status(TX).await, Status::InProgress);
            }
            // The schedule A created (before or after B) fires later: a duplicate for B.
            w.advance(Duration::from_secs(86_400 * 2));
            for ev in w.fire_due().await {
                let v = w.retry(&ev).await;
                assert_eq!(v.label(), "duplicate-retry", "{case}");
            }
            keys_1_and_2(&w, &case).await;
        }
    }
}

// ---------------------------------------------------------------------------
// Row 5: the scheduler cannot deliver.
// ---------------------------------------------------------------------------

/// Row 5: the schedule never reaches the retry queue (retries spent, event in the
/// scheduler's DLQ) → the record stays SCHEDULED. The reconciler finds it once the
/// fire time is past the threshold and requeues the retry event; B publishes attempt
/// 2. When an operator later redrives the scheduler DLQ, B drops the duplicate.
async fn row5_scheduler_cannot_deliver<B: Backend>() {
    let w = scheduled_world::<B>(3).await;
    let fire_at = w.record(TX).await.next_fire_at.unwrap();
    // The scheduler fails to deliver: the event goes to its DLQ.
    w.set_time(fire_at);
    let dead: Vec<RetryEvent> = w.fire_due().await;
    assert_eq!(dead.len(), 1);
    assert_eq!(w.status(TX).await, Status::Scheduled);

    // Before the threshold the reconciler leaves it alone.
    let early = w.reconcile().await;
    assert_eq!(early.examined, 0);
    assert!(w.take_retries().await.is_empty());

    past_threshold(&w);
    let report = w.reconcile().await;
    assert_eq!(
        report.count(Status::Scheduled, Action::Done(Ack::ReconcilerRequeued)),
        1,
        "{report:?}"
    );
    let requeued = w.take_retries().await;
    assert_eq!(
        requeued,
        vec![RetryEvent {
            transaction_id: id(TX),
            origin: Origin::Reconciler,
            attempt: a(2),
            round: Some(0),
        }]
    );
    let v = w.retry(&requeued[0]).await;
    assert_eq!(v.label(), "published");
    let rec = w.record(TX).await;
    assert_eq!(
        (rec.status, rec.current_attempt, rec.last_origin),
        (Status::InProgress, a(2), Some(Origin::Reconciler))
    );

    // The scheduler's DLQ redriven later: a duplicate, dropped.
    let v = w.retry(&dead[0]).await;
    assert_eq!(v.label(), "duplicate-retry");
    keys_1_and_2(&w, "").await;
    assert_eq!(w.keys().await.len(), 2);
    // The reconciler's requeue is counted on the record: one audited self-arrow.
    let mut want = TO_ATTEMPT_2.to_vec();
    want.insert(3, "SCHEDULED>SCHEDULED@1");
    assert_eq!(w.audit_path(TX).await, want);
    // The next reconciler run finds IN_PROGRESS(2) by the entry its cycle left (the
    // fire time, long past) before its answer deadline: it only moves the entry to the
    // deadline; the run after that has nothing left to do.
    let r = w.reconcile().await;
    assert_eq!(
        r.count(Status::InProgress, Action::Done(Ack::ReconcilerAwaiting)),
        1,
        "{r:?}"
    );
    assert_eq!(
        w.keys().await.len(),
        2,
        "nothing republished before the deadline"
    );
    assert_eq!(w.reconcile().await.examined, 0);
}

// ---------------------------------------------------------------------------
// Row 6: the event is delivered twice.
// ---------------------------------------------------------------------------

/// Row 6a: a second delivery after the first finished is dropped as a duplicate.
async fn row6_event_delivered_twice_in_sequence<B: Backend>() {
    let w = scheduled_world::<B>(3).await;
    let ev = fire(&w).await;
    assert_eq!(w.retry(&ev).await.label(), "published");
    let second = w.retry(&ev).await;
    assert_eq!(
        second,
        Verdict::Dropped(DropReason::DuplicateRetry {
            attempt: Attempt::new(2).unwrap(),
            status: Status::InProgress,
        })
    );
    assert_eq!(w.keys().await, vec!["TX-100200#1", "TX-100200#2"]);
    assert_eq!(w.audit_path(TX).await, TO_ATTEMPT_2.to_vec());
    assert_eq!(w.metrics.count("DropDuplicateRetry"), 1);
}

/// Row 6b: two deliveries overlap: the first stops after SENDING, the second finds
/// SENDING and resumes (publishes, IN_PROGRESS), then the first goes on: it
/// republishes with the same key and its last write's failed condition drops it.
async fn row6_event_delivered_twice_concurrently<B: Backend>() {
    let w = scheduled_world::<B>(3).await;
    let ev = fire(&w).await;
    let ports = w.retry_ports();
    let ctx = w.settings.context(w.now());
    let mut rng = fixed();
    let mut first = drive(
        Input::Retry(ev.clone()),
        &ports,
        &ctx,
        &mut rng,
        &mut stop_after(1),
    )
    .await;
    assert_eq!(w.status(TX).await, Status::Sending);
    let second = drive(Input::Retry(ev.clone()), &ports, &ctx, &mut rng, &mut all()).await;
    assert_eq!(second.result, Ok(Disposition::Ack(Ack::Resumed)));
    first.result = execute(&mut first.run, &ports, &ctx, &mut rng, &mut all()).await;
    assert!(
        matches!(
            first.result,
            Ok(Disposition::Drop(DropReason::DuplicateRetry { .. }))
        ),
        "{:?}",
        first.result
    );
    let v = verdict(&first, &w.metrics);
    assert!(v.is_acknowledged(), "{v:?}");
    assert_eq!(w.status(TX).await, Status::InProgress);
    assert_eq!(w.record(TX).await.current_attempt, a(2));
    // Two publishes, one key: the service dedupes (DESIGN's stated precondition).
    assert_eq!(
        w.keys().await,
        vec!["TX-100200#1", "TX-100200#2", "TX-100200#2"]
    );
    keys_1_and_2(&w, "").await;
    assert_eq!(w.audit_path(TX).await, TO_ATTEMPT_2.to_vec());
}

// ---------------------------------------------------------------------------
// Rows 7-8: B dies in SENDING.
// ---------------------------------------------------------------------------

/// B stops after each of its effects (write SENDING, publish, write IN_PROGRESS) and
/// the event is delivered again: always IN_PROGRESS(2), attempt 2 published under
/// one key, one audit row per transition.
async fn retry_handler_crash_after_each_effect_then_redelivery<B: Backend>() {
    for k in 0..=2 {
        let w = scheduled_world::<B>(3).await;
        let ev = fire(&w).await;
        let crashed = w.retry_with(&ev, &mut stop_after(k)).await;
        assert!(matches!(crashed, Verdict::Retry { .. }), "k={k}");
        let left = if k == 0 {
            Status::Scheduled
        } else {
            Status::Sending
        };
        assert_eq!(w.status(TX).await, left, "k={k}");
        let again = w.retry(&ev).await;
        let expected = if k == 0 { "published" } else { "resumed" };
        assert_eq!(again.label(), expected, "k={k}");
        let rec = w.record(TX).await;
        assert_eq!(rec.status, Status::InProgress, "k={k}");
        assert_eq!(rec.current_attempt, a(2), "k={k}");
        assert_eq!(rec.next_attempt, None, "k={k}");
        keys_1_and_2(&w, &format!("k={k}")).await;
        assert_eq!(w.audit_path(TX).await, TO_ATTEMPT_2.to_vec(), "k={k}");
    }
}

/// Row 7: B dies after SENDING, before publishing → SENDING; the redelivery resumes
/// and publishes (once).
async fn row7_b_dies_after_sending_before_publishing<B: Backend>() {
    let w = scheduled_world::<B>(3).await;
    let ev = fire(&w).await;
    w.retry_with(&ev, &mut stop_after(1)).await;
    assert_eq!(w.status(TX).await, Status::Sending);
    assert_eq!(w.keys().await, vec!["TX-100200#1"], "nothing published yet");
    assert_eq!(w.retry(&ev).await.label(), "resumed");
    assert_eq!(w.keys().await, vec!["TX-100200#1", "TX-100200#2"]);
    // The published request carries the payload the transaction started with.
    let req = w.published().await.pop().unwrap();
    assert_eq!(
        req.payload.as_json(),
        r#"{"order":"TX-100200","amount":12.5}"#
    );
}

/// Row 8: B dies after publishing, before IN_PROGRESS → SENDING; the redelivery
/// republishes with the same key (the service dedupes) and finishes.
async fn row8_b_dies_after_publishing_before_in_progress<B: Backend>() {
    let w = scheduled_world::<B>(3).await;
    let ev = fire(&w).await;
    w.retry_with(&ev, &mut stop_after(2)).await;
    assert_eq!(w.status(TX).await, Status::Sending);
    assert_eq!(w.keys().await, vec!["TX-100200#1", "TX-100200#2"]);
    assert_eq!(w.retry(&ev).await.label(), "resumed");
    assert_eq!(
        w.keys().await,
        vec!["TX-100200#1", "TX-100200#2", "TX-100200#2"]
    );
    keys_1_and_2(&w, "").await;
    assert_eq!(w.status(TX).await, Status::InProgress);
    // Then the service answers attempt 2: SUCCEEDED.
    assert_eq!(
        w.respond(TX, 2, Outcome::Success).await.label(),
        "succeeded"
    );
    assert_eq!(w.status(TX).await, Status::Succeeded);
}

// ---------------------------------------------------------------------------
// Row 9: a response from an earlier attempt.
// ---------------------------------------------------------------------------

/// Row 9: in any later state, a response for attempt 1 is dropped by attempt number
/// and changes nothing (record and audit untouched); a SUCCESS for it — attempt 1
/// was answered CANCELLED — is dropped as a conflicting success, alerted and noted in
/// the audit trail.
async fn row9_response_from_an_earlier_attempt_changes_nothing<B: Backend>() {
    let w = scheduled_world::<B>(3).await;
    let ev = fire(&w).await;
    w.retry(&ev).await;
    // IN_PROGRESS(2), then SUCCEEDED(2): a late answer for attempt 1 each time.
    for stage in ["in-progress", "succeeded"] {
        if stage == "succeeded" {
            w.respond(TX, 2, Outcome::Success).await;
        }
        let before = w.record(TX).await;
        let changes = w.change_count().await;
        for outcome in [Outcome::Success, Outcome::Cancelled, Outcome::Error] {
            let v = w.respond(TX, 1, outcome).await;
            let dropped_as_expected = match outcome {
                Outcome::Success => {
                    matches!(v, Verdict::Dropped(DropReason::ConflictingSuccess { .. }))
                }
                Outcome::Cancelled | Outcome::Error | Outcome::Rejected => {
                    matches!(v, Verdict::Dropped(DropReason::LateResponse { .. }))
                }
            };
            assert!(dropped_as_expected, "{stage} {outcome}: {v:?}");
        }
        assert_eq!(w.record(TX).await, before, "{stage}: record unchanged");
        assert_eq!(w.change_count().await, changes, "{stage}: nothing written");
    }
    assert_eq!(w.metrics.count("DropLateResponse"), 4);
    assert_eq!(w.metrics.count("DropConflictingSuccess"), 2);
    assert_eq!(w.metrics.count(names::CONFLICTING_SUCCESS), 2);
    assert_eq!(w.status(TX).await, Status::Succeeded);
    // Each conflicting SUCCESS is in the audit trail, naming attempt 1 and the status
    // the record had; the chain of transitions is untouched.
    let notices: Vec<(u32, Status)> = w
        .audit(TX)
        .await
        .iter()
        .filter(|e| e.notice == Some(domain::audit::Notice::ConflictingSuccess))
        .map(|e| (e.current_attempt.get(), e.to))
        .collect();
    assert_eq!(
        notices,
        vec![(1, Status::InProgress), (1, Status::Succeeded)]
    );
    let mut path = TO_ATTEMPT_2.to_vec();
    path.push("IN_PROGRESS>SUCCEEDED@2");
    let transitions: Vec<String> = testkit::trail::arrows(
        &w.audit(TX)
            .await
            .into_iter()
            .filter(|e| e.notice.is_none())
            .collect::<Vec<_>>(),
    );
    assert_eq!(transitions, path);
}

/// Row 9, in every state the record can be in: a response for attempt 1 when the
/// record is at attempt 2 is dropped (a SUCCESS as a conflicting success), writes
/// nothing, publishes nothing, schedules nothing.
async fn row9_in_every_state_a_response_from_an_earlier_attempt_is_dropped<B: Backend>() {
    let w = B::world().await;
    for &status in Status::ALL {
        let mut state = TransactionRecord::started(id(TX), MaxAttempts::new(4).unwrap(), w.now());
        state.status = status;
        state.current_attempt = a(2);
        if status.is_intermediate() {
            state.next_attempt = Some(a(3));
            state.next_fire_at = Some(w.now().plus_millis(3_600_000));
        }
        w.put(&state).await;
        let state = w.record(TX).await;
        for outcome in [
            Outcome::Success,
            Outcome::Cancelled,
            Outcome::Error,
            Outcome::Rejected,
        ] {
            let changes = w.change_count().await;
            let published = w.keys().await.len();
            let v = w.respond(TX, 1, outcome).await;
            // A late SUCCESS is more than late: attempt 1 was answered CANCELLED.
            let want = match outcome {
                Outcome::Success => DropReason::ConflictingSuccess {
                    attempt: a(1),
                    status,
                },
                Outcome::Cancelled | Outcome::Error | Outcome::Rejected => {
                    DropReason::LateResponse {
                        attempt: a(1),
                        current: a(2),
                    }
                }
            };
            assert_eq!(v, Verdict::Dropped(want), "{status} {outcome}");
            assert_eq!(w.change_count().await, changes, "{status} {outcome}");
            assert_eq!(w.record(TX).await, state, "{status} {outcome}");
            assert_eq!(w.keys().await.len(), published, "{status} {outcome}");
            assert!(w.live().await.is_empty(), "{status} {outcome}");
            assert!(w.take_retries().await.is_empty(), "{status} {outcome}");
        }
    }
}

// ---------------------------------------------------------------------------
// Row 10: attempts exhausted.
// ---------------------------------------------------------------------------

/// The business alerts' log messages.
const EXHAUSTED: &str = "business alert: attempts exhausted";
const UNANSWERED: &str = "business alert: request never answered";

/// Row 10: CANCELLED for the last allowed attempt → FAILED + business alert: an ERROR
/// line `business alert: attempts exhausted` with the transaction, the attempts and
/// the reason, and the AttemptsExhausted metric. A crash right after the FAILED write
/// raises the alert again on redelivery (alerts are at-least-once); a redelivery
/// after that writes nothing and alerts again; nothing more is ever published or
/// scheduled.
async fn row10_attempts_exhausted_fail_and_alert<B: Backend>() {
    let (logs, _guard) = testkit::logs::capture();
    let w = scheduled_world::<B>(2).await;
    let ev = fire(&w).await;
    w.retry(&ev).await;
    // Attempt 2 of 2 cancelled; the handler crashes right after writing FAILED,
    // before the alert (the first, unread plan tries SCHEDULING, whose budget
    // condition fails and hands back the record: then FAILED, then the alert).
    let ctx = w.settings.context(w.now());
    let crashed = drive(
        Input::Response(response(TX, 2, Outcome::Cancelled)),
        &w.response_ports(),
        &ctx,
        &mut fixed(),
        &mut |e: &domain::Effect| !matches!(e, domain::Effect::Alert(_)),
    )
    .await;
    assert_eq!(
        crashed.run.redecisions(),
        1,
        "the optimistic SCHEDULING is refused by its budget guard, once"
    );
    let crashed = verdict(&crashed, &w.metrics);
    assert!(matches!(crashed, Verdict::Retry { .. }), "{crashed:?}");
    assert_eq!(w.status(TX).await, Status::Failed);
    assert_eq!(
        w.metrics.count(names::ATTEMPTS_EXHAUSTED),
        0,
        "not raised yet"
    );

    let v = w.respond(TX, 2, Outcome::Cancelled).await;
    assert_eq!(v, Verdict::Done(Ack::Failed));
    assert_eq!(w.metrics.count(names::ATTEMPTS_EXHAUSTED), 1);
    let alerts = logs.starting(EXHAUSTED);
    assert_eq!(alerts.len(), 1, "{:?}", logs.lines());
    assert_eq!(alerts[0]["level"], "ERROR");
    assert_eq!(alerts[0]["transaction_id"], TX);
    assert_eq!(alerts[0]["attempts"], 2);
    assert_eq!(alerts[0]["reason"], "NOT_AVAILABLE");

    let rec = w.record(TX).await;
    assert_eq!(rec.status, Status::Failed);
    assert_eq!(rec.current_attempt, a(2));
    assert!(w.live().await.is_empty(), "no attempt 3 scheduled");
    keys_1_and_2(&w, "").await;
    let audit = w.audit(TX).await;
    let path = testkit::trail::arrows(&audit);
    assert_eq!(path.last().unwrap(), "IN_PROGRESS>FAILED@2");
    assert!(audit.last().unwrap().is_exhaustion());
    assert_eq!(audit.iter().filter(|e| e.is_exhaustion()).count(), 1);
    assert_eq!(path.len(), 6);

    // Delivered once more: nothing written, the alert raised again.
    let changes = w.change_count().await;
    assert_eq!(
        w.respond(TX, 2, Outcome::Cancelled).await,
        Verdict::Done(Ack::Failed)
    );
    assert_eq!(w.change_count().await, changes);
    assert_eq!(w.metrics.count(names::ATTEMPTS_EXHAUSTED), 2);
    assert_eq!(logs.starting(EXHAUSTED).len(), 2);
    assert_eq!(w.keys().await.len(), 2, "never a third request");
}

/// Exhaustion with no crash: max_attempts = 1 fails on the first CANCELLED.
async fn single_attempt_transaction_fails_at_once<B: Backend>() {
    let w = B::world().await;
    w.start(TX, 1).await;
    let v = w.respond(TX, 1, Outcome::Cancelled).await;
    assert_eq!(v.label(), "failed");
    assert_eq!(w.status(TX).await, Status::Failed);
    assert_eq!(w.metrics.count(names::ATTEMPTS_EXHAUSTED), 1);
    assert!(w.live().await.is_empty());
    assert_eq!(w.keys().await, vec!["TX-100200#1"]);
}

// ---------------------------------------------------------------------------
// The rows added to the article's table.
// ---------------------------------------------------------------------------

/// B died after publishing attempt 2; the external service answers attempt 2 before
/// the retry event is redelivered. The response must not be lost: it proves request 2
/// left, so A completes SENDING → IN_PROGRESS(2) and handles it. (Dropping it as late
/// left the transaction IN_PROGRESS(2) forever: the service answers a key once.)
async fn response_for_the_attempt_being_sent_is_not_lost<B: Backend>() {
    for outcome in [Outcome::Success, Outcome::Cancelled] {
        let w = scheduled_world::<B>(3).await;
        let ev = fire(&w).await;
        w.retry_with(&ev, &mut stop_after(2)).await;
        assert_eq!(w.status(TX).await, Status::Sending, "{outcome}");
        let v = w.respond(TX, 2, outcome).await;
        let rec = w.record(TX).await;
        match outcome {
            Outcome::Success => {
                assert_eq!(v, Verdict::Done(Ack::Succeeded));
                assert_eq!((rec.status, rec.current_attempt), (Status::Succeeded, a(2)));
            }
            _ => {
                assert_eq!(v, Verdict::Done(Ack::Scheduled));
                assert_eq!(
                    (rec.status, rec.current_attempt, rec.next_attempt),
                    (Status::Scheduled, a(2), Some(a(3)))
                );
            }
        }
        // B's redelivery finds the work done and drops it; nothing is republished.
        assert_eq!(w.retry(&ev).await.label(), "duplicate-retry", "{outcome}");
        assert_eq!(w.keys().await, vec!["TX-100200#1", "TX-100200#2"]);
        let audit = w.audit(TX).await;
        let completed = audit
            .iter()
            .find(|e| e.from == Some(Status::Sending) && e.to == Status::InProgress)
            .unwrap();
        assert_eq!(completed.actor, domain::machine::Actor::ResponseHandler);
    }
}

/// A start that crashed after its create and before its publish (the caller never
/// repeats it): before its answer deadline the reconciler does not see it; past it,
/// the reconciler publishes request 1 (key `<id>#1`), the budget untouched, and the
/// transaction goes on as if the start had finished.
async fn a_start_that_crashed_before_its_publish_is_rescued_at_the_deadline<B: Backend>() {
    let w = B::world().await;
    let ctx = w.settings.context(w.now());
    let start = Input::Start {
        transaction_id: id(TX),
        payload: payload_of(TX),
        max_attempts: MaxAttempts::new(3).unwrap(),
        correlation_id: None,
    };
    let crashed = drive(
        start,
        &w.start_ports(),
        &ctx,
        &mut fixed(),
        &mut stop_after(1),
    )
    .await;
    assert_eq!(crashed.result, Err(ExecError::Stopped("publish-request")));
    assert!(w.keys().await.is_empty());
    let r = w.record(TX).await;
    assert_eq!(r.status, Status::InProgress);
    assert!(r.reconcile.is_some(), "watched from the start");
    w.set_time(r.answer_due_at.unwrap().plus_millis(-60_000));
    assert_eq!(w.reconcile().await.examined, 0);
    past_answer_deadline(&w).await;
    let report = w.reconcile().await;
    assert_eq!(
        report.count(Status::InProgress, Action::Done(Ack::ReconcilerRepublished)),
        1,
        "{report:?}"
    );
    assert_eq!(w.keys().await, vec!["TX-100200#1"]);
    let r = w.record(TX).await;
    assert_eq!(
        (
            r.status,
            r.current_attempt.get(),
            r.counts[Counter::Republishes]
        ),
        (Status::InProgress, 1, 1)
    );
    assert_eq!(
        w.respond(TX, 1, Outcome::Success).await,
        Verdict::Done(Ack::Succeeded)
    );
    let r = w.record(TX).await;
    assert_eq!(r.status, Status::Succeeded);
    assert!(r.reconcile.is_none(), "a terminal record leaves the index");
}

/// A retry cycle whose event keeps failing where the reconciler cannot help (the
/// scheduler's event and every requeued one lost): the reconciler requeues it
/// RECONCILE_REQUEUE_MAX times, counted on the record and audited, then parks it —
/// the run reports `parked`, counts `ReconcileParked`, publishes nothing more; the
/// cause fixed and the event redriven, progress clears the count.
async fn a_record_requeued_without_progress_is_parked<B: Backend>() {
    let w = scheduled_world::<B>(3).await;
    let ev = fire(&w).await; // delivered nowhere: lost
    assert_eq!(w.status(TX).await, Status::Scheduled);
    let metrics = Metrics::new("NS", "reconciler");
    let max = domain::defaults::RECONCILE_REQUEUE_MAX;
    for k in 1..=max {
        w.advance(Duration::from_secs(16 * 60));
        let r = w.reconcile_with(&Limits::default(), 7, &metrics).await;
        assert_eq!(
            r.count(Status::Scheduled, Action::Done(Ack::ReconcilerRequeued)),
            1,
            "round {k}: {r:?}"
        );
        assert_eq!(w.record(TX).await.counts[Counter::Requeues], k);
        assert_eq!(
            w.take_retries().await.len(),
            1,
            "the requeued event is lost"
        );
    }
    w.advance(Duration::from_secs(16 * 60));
    let r = w.reconcile_with(&Limits::default(), 7, &metrics).await;
    assert_eq!(r.count(Status::Scheduled, Action::Parked), 1, "{r:?}");
    assert!(
        w.take_retries().await.is_empty(),
        "parked: nothing requeued"
    );
    assert_eq!(metrics.count(names::RECONCILE_PARKED), 1);
    assert_eq!(metrics.count(names::RETRY_EVENTS_PUBLISHED), u64::from(max));
    let requeues = w
        .audit_path(TX)
        .await
        .iter()
        .filter(|a| a.starts_with("SCHEDULED>SCHEDULED@"))
        .count();
    assert_eq!(
        requeues,
        usize::try_from(max).unwrap(),
        "each requeue audited"
    );
    assert_eq!(w.status(TX).await, Status::Scheduled);
    // The cause fixed, the event redriven from the DLQ: progress clears the count.
    assert_eq!(w.retry(&ev).await.label(), "published");
    let r = w.record(TX).await;
    assert_eq!(
        (r.status, r.counts[Counter::Requeues]),
        (Status::InProgress, 0)
    );
}

/// A request the service never answers: past each answer deadline the reconciler
/// publishes the same request (same idempotency key) again `ANSWER_REPUBLISH_MAX`
/// times, counting `RequestsRepublished`, then ends the transaction FAILED/UNANSWERED,
/// counting `TransactionsUnanswered` once, with one business alert; the audit trail
/// shows every republish and the abandonment. An answer arriving afterwards changes
/// nothing: a SUCCESS is a conflicting success, a CANCELLED is dropped.
async fn an_unanswered_request_is_republished_then_abandoned<B: Backend>() {
    let (logs, _guard) = testkit::logs::capture();
    let w = B::world().await;
    w.start(TX, 3).await;
    let max = domain::defaults::ANSWER_REPUBLISH_MAX;
    let metrics = Metrics::new("NS", "reconciler");
    for k in 1..=max {
        past_answer_deadline(&w).await;
        let r = w.reconcile_with(&Limits::default(), 7, &metrics).await;
        assert_eq!(
            r.count(Status::InProgress, Action::Done(Ack::ReconcilerRepublished)),
            1,
            "round {k}: {r:?}"
        );
        assert_eq!(w.record(TX).await.counts[Counter::Republishes], k);
        // Every run until the next deadline leaves it alone.
        past_threshold(&w);
        assert_eq!(w.reconcile().await.examined, 0, "round {k}");
    }
    past_answer_deadline(&w).await;
    let r = w.reconcile_with(&Limits::default(), 7, &metrics).await;
    assert_eq!(
        r.count(Status::InProgress, Action::Done(Ack::Unanswered)),
        1,
        "{r:?}"
    );
    let rec = w.record(TX).await;
    assert_eq!(rec.status, Status::Failed);
    assert_eq!(
        rec.last_reason.as_deref(),
        Some(domain::decide::UNANSWERED_REASON)
    );
    assert_eq!(rec.current_attempt, a(1), "the budget was never consumed");
    assert!(rec.reconcile.is_none() && rec.answer_due_at.is_none());
    assert_eq!(metrics.count(names::REQUESTS_REPUBLISHED), u64::from(max));
    assert_eq!(metrics.count(names::TRANSACTIONS_UNANSWERED), 1);
    assert_eq!(
        metrics.count(names::RECONCILE_STUCK),
        0,
        "a request past its answer deadline is not a stuck retry cycle"
    );
    assert_eq!(
        metrics.count(names::RETRIES_PUBLISHED),
        0,
        "no retry was spent"
    );
    assert_eq!(logs.starting(UNANSWERED).len(), 1, "one business alert");
    let keys = w.keys().await;
    assert_eq!(keys.len(), usize::try_from(max).unwrap() + 1, "{keys:?}");
    assert!(keys.iter().all(|k| k == "TX-100200#1"), "{keys:?}");
    let path = w.audit_path(TX).await;
    let mut want = vec!["*>IN_PROGRESS@1".to_owned()];
    want.extend((0..max).map(|_| "IN_PROGRESS>IN_PROGRESS@1".to_owned()));
    want.push("IN_PROGRESS>FAILED@1".to_owned());
    assert_eq!(path, want, "every republish and the end are audited");
    // The service wakes up: a late SUCCESS for the abandoned attempt is the
    // double-execution signal; a late CANCELLED is dropped.
    assert!(matches!(
        w.respond(TX, 1, Outcome::Success).await,
        Verdict::Dropped(DropReason::ConflictingSuccess { .. })
    ));
    let before = w.record(TX).await;
    let v = w.respond(TX, 1, Outcome::Cancelled).await;
    assert!(v.is_acknowledged(), "{v:?}");
    assert_eq!(
        w.record(TX).await,
        before,
        "a late CANCELLED changes nothing"
    );
    assert_eq!(w.keys().await.len(), keys.len());
    // Later runs find nothing: a terminal record leaves the index.
    w.advance(Duration::from_secs(7 * 24 * 3600));
    assert_eq!(w.reconcile().await.examined, 0);
}

const EXPIRED: &str = "business alert: transaction deadline passed";

/// Just past the transaction's deadline (`created_at` + TRANSACTION_DEADLINE_SECONDS).
async fn past_transaction_deadline<B: Backend>(w: &World<B>) {
    let created = w.record(TX).await.created_at;
    let deadline = i64::try_from(w.settings.transaction_deadline.as_millis()).unwrap();
    w.set_time(created.plus_millis(deadline + 1_000));
}

/// A transaction still open at its deadline ends FAILED/EXPIRED with one business
/// alert, whichever decision meets it — the retry handler's event (a retry that fires
/// late), the response handler's CANCELLED with attempts left (decided blind: the
/// write's deadline condition fails on the store, the record comes back and the
/// expiry is decided from it), the reconciler's request past its answer deadline —
/// and a SUCCESS arriving after the expiry is kept as a conflicting success.
async fn a_transaction_past_its_deadline_ends_expired<B: Backend>() {
    let (logs, _guard) = testkit::logs::capture();
    // The retry handler: the retry fires after the deadline.
    let w = scheduled_world::<B>(4).await;
    let fire_at = w.record(TX).await.next_fire_at.unwrap();
    past_transaction_deadline(&w).await;
    let mut due = w.fire_due().await;
    assert_eq!(due.len(), 1, "the schedule fires late");
    assert!(w.now() > fire_at);
    assert_eq!(w.retry(&due.remove(0)).await.label(), "expired");
    let r = w.record(TX).await;
    assert_eq!((r.status, r.mark), (Status::Failed, Some(Mark::Expired)));
    assert!(r.reconcile.is_none() && r.next_attempt.is_none() && r.failed.is_some());
    assert_eq!(
        w.keys().await,
        ["TX-100200#1".to_owned()],
        "nothing sent after it"
    );
    assert_eq!(
        w.audit_path(TX).await.last().map(String::as_str),
        Some("SCHEDULED>FAILED@1")
    );
    // The response handler, decided blind.
    let w = B::world().await;
    w.start(TX, 4).await;
    past_transaction_deadline(&w).await;
    let v = w.respond(TX, 1, Outcome::Cancelled).await;
    assert_eq!(v.label(), "expired", "{v:?}");
    let r = w.record(TX).await;
    assert_eq!((r.status, r.mark), (Status::Failed, Some(Mark::Expired)));
    assert_eq!(r.last_outcome, Some(Outcome::Cancelled));
    assert!(w.live().await.is_empty(), "no retry scheduled");
    // Redelivered: the alert again (at least once), the record unchanged.
    assert_eq!(w.respond(TX, 1, Outcome::Cancelled).await.label(), "failed");
    assert_eq!(w.record(TX).await, r);
    // The reconciler, for a request unanswered past its answer deadline; then the
    // service's SUCCESS for it is a conflicting success, never dropped silently.
    let w = B::world().await;
    w.start(TX, 4).await;
    past_transaction_deadline(&w).await;
    let metrics = Metrics::new("NS", "reconciler");
    let rep = w.reconcile_with(&Limits::default(), 7, &metrics).await;
    assert_eq!(
        rep.count(Status::InProgress, Action::Done(Ack::Expired)),
        1,
        "{rep:?}"
    );
    assert_eq!(metrics.count(names::TRANSACTIONS_EXPIRED), 1);
    assert_eq!(metrics.count(names::REQUESTS_REPUBLISHED), 0);
    assert!(matches!(
        w.respond(TX, 1, Outcome::Success).await,
        Verdict::Dropped(DropReason::ConflictingSuccess { .. })
    ));
    assert_eq!(w.status(TX).await, Status::Failed);
    assert_eq!(
        logs.starting(EXPIRED).len(),
        4,
        "one per expiry, one per redelivery"
    );
}

/// A request answered, its answer lost, republished at its deadline: when the lost
/// answer is redriven it is handled as any answer (the republish consumed no
/// attempt), and the duplicate answer the republish may draw changes nothing.
async fn an_answer_after_a_republish_is_handled_once<B: Backend>() {
    let w = B::world().await;
    w.start(TX, 4).await;
    past_answer_deadline(&w).await;
    let report = w.reconcile().await;
    assert_eq!(
        report.count(Status::InProgress, Action::Done(Ack::ReconcilerRepublished)),
        1,
        "{report:?}"
    );
    assert_eq!(w.keys().await, vec!["TX-100200#1", "TX-100200#1"]);
    // The lost answer is redriven from its DLQ: a CANCELLED for attempt 1.
    assert_eq!(
        w.respond(TX, 1, Outcome::Cancelled).await,
        Verdict::Done(Ack::Scheduled)
    );
    let r = w.record(TX).await;
    assert_eq!(
        (r.status, r.current_attempt, r.next_attempt),
        (Status::Scheduled, a(1), Some(a(2)))
    );
    assert_eq!(
        r.counts[Counter::Republishes],
        1,
        "kept through the cycle, reset by the next request"
    );
    assert!(r.answer_due_at.is_none());
    let changes = w.change_count().await;
    let v = w.respond(TX, 1, Outcome::Cancelled).await;
    assert!(v.is_acknowledged(), "{v:?}");
    assert_eq!(
        w.record(TX).await,
        r,
        "the duplicate answer changes nothing"
    );
    assert_eq!(w.change_count().await, changes);
    assert_eq!(w.live().await.len(), 1, "one schedule");
}

// ---------------------------------------------------------------------------
// The whole chain.
// ---------------------------------------------------------------------------

/// The whole chain with a crash at every effect of every step (A, B, A): the final
/// result never changes: SUCCEEDED at attempt 2, keys #1 and #2, the same audit path.
async fn a_crash_at_every_step_leaves_the_final_result_unchanged<B: Backend>() {
    let reference = {
        let w = scheduled_world::<B>(3).await;
        let ev = fire(&w).await;
        w.retry(&ev).await;
        w.respond(TX, 2, Outcome::Success).await;
        w.audit_path(TX).await
    };
    for k in 0..=2 {
        let w = B::world().await;
        w.start_and_crash_responding(TX, k).await;
        w.respond(TX, 1, Outcome::Cancelled).await;
        let ev = fire(&w).await;
        w.retry_with(&ev, &mut stop_after(k)).await;
        w.retry(&ev).await;
        w.respond_with(TX, 2, Outcome::Success, &mut stop_after(0))
            .await;
        w.respond(TX, 2, Outcome::Success).await;
        // Every message delivered once more at the end: nothing changes.
        w.respond(TX, 1, Outcome::Cancelled).await;
        w.retry(&ev).await;
        w.respond(TX, 2, Outcome::Success).await;
        assert_eq!(w.status(TX).await, Status::Succeeded, "k={k}");
        assert_eq!(w.audit_path(TX).await, reference, "k={k}");
        keys_1_and_2(&w, &format!("k={k}")).await;
    }
}

/// Each scenario above becomes two tests: `memory::<name>` over the in-memory
/// adapters and `moto::<name>` over the AWS adapters against moto.
macro_rules! rows {
    ($($name:ident),* $(,)?) => {
        mod memory {
            $(
                #[tokio::test]
                async fn $name() {
                    super::$name::<super::Memory>().await;
                }
            )*
        }
        mod moto {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name::<super::Moto>().await;
                }
            )*
        }
    };
}

rows!(
    // Rows 1-3, and every crash point of the response handler.
    row1_a_dies_before_scheduling,
    row2_a_dies_after_scheduling_before_creating,
    a_response_redriven_after_its_fire_time_goes_to_the_retry_queue,
    row3_a_dies_after_creating_before_scheduled,
    response_handler_crash_after_each_effect_then_redelivery,
    // Rows 4-6.
    row4_retry_event_while_a_is_still_scheduling,
    row5_scheduler_cannot_deliver,
    row6_event_delivered_twice_in_sequence,
    row6_event_delivered_twice_concurrently,
    // Rows 7-8, and every crash point of the retry handler.
    row7_b_dies_after_sending_before_publishing,
    row8_b_dies_after_publishing_before_in_progress,
    retry_handler_crash_after_each_effect_then_redelivery,
    // Rows 9-10.
    row9_response_from_an_earlier_attempt_changes_nothing,
    row9_in_every_state_a_response_from_an_earlier_attempt_is_dropped,
    row10_attempts_exhausted_fail_and_alert,
    single_attempt_transaction_fails_at_once,
    // The added rows.
    response_for_the_attempt_being_sent_is_not_lost,
    a_start_that_crashed_before_its_publish_is_rescued_at_the_deadline,
    a_record_requeued_without_progress_is_parked,
    an_unanswered_request_is_republished_then_abandoned,
    an_answer_after_a_republish_is_handled_once,
    a_transaction_past_its_deadline_ends_expired,
    // The whole chain.
    a_crash_at_every_step_leaves_the_final_result_unchanged,
);
