//! the failure table of docs/design.md, one test per row, in process over the memory adapters.
//!
//! A crash is simulated by stopping the plan after effect k (the `hook` of
//! `execute`); the message is then delivered again, as SQS would after the visibility
//! timeout. Each test asserts the final state, the audit rows, the requests the
//! external service sees (deduplicated by idempotency key) and the schedules.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use domain::decide::{Ack, DropReason};
use domain::exec::{execute, ResponsePorts, RetryPorts};
use domain::{Attempt, Disposition, Outcome, RetryEvent, Status};
use runtime::drive::{drive, verdict};
use runtime::metrics::names;
use runtime::Verdict;
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use testkit::trail::TO_ATTEMPT_2;

const TX: &str = "TX-100200";

fn keys(v: &[&str]) -> BTreeSet<String> {
    v.iter().map(|s| (*s).to_owned()).collect()
}

fn is_ack(v: &Verdict) -> bool {
    v.is_acknowledged()
}

/// Started, then CANCELLED for attempt 1 handled fully: SCHEDULED.
async fn scheduled_world(max: u32) -> World {
    let w = World::new();
    w.start(TX, max).await;
    let v = w.respond(TX, 1, Outcome::Cancelled).await;
    assert_eq!(v.label(), "scheduled");
    assert_eq!(w.status(TX), Status::Scheduled);
    w
}

/// Moves the clock to the fire time and fires the schedule: the retry event.
fn fire(w: &World) -> RetryEvent {
    let fire_at = w.record(TX).next_fire_at.unwrap();
    w.set_time(fire_at);
    let mut due = w.fire_due();
    assert_eq!(due.len(), 1, "exactly one schedule fires");
    due.remove(0)
}

// ---------------------------------------------------------------------------
// Response handler (A) crash points: rows 1-3.
// ---------------------------------------------------------------------------

/// Rows 1-3 swept: A stops after each of its effects (write SCHEDULING, create the
/// schedule, write SCHEDULED) and the response is delivered again 5 minutes later.
/// Every crash point ends in the same state as no crash: SCHEDULED, one schedule at
/// the instant persisted by the first delivery, one audit row per transition.
#[tokio::test]
async fn response_handler_crash_after_each_effect_then_redelivery() {
    for k in 0..=2 {
        let w = World::new();
        w.start(TX, 3).await;
        let crashed = w
            .respond_with(TX, 1, Outcome::Cancelled, &mut stop_after(k))
            .await;
        assert!(
            matches!(crashed, Verdict::Retry { .. }),
            "k={k}: a crash leaves the message to SQS: {crashed:?}"
        );
        let left = w.record(TX);
        let expected_left = if k == 0 {
            Status::InProgress
        } else {
            Status::Scheduling
        };
        assert_eq!(left.status, expected_left, "k={k}: state left");
        assert_eq!(w.scheduler.live().len(), usize::from(k == 2), "k={k}");

        // Redelivery after the visibility timeout: a different `now` and jitter.
        w.advance(Duration::from_secs(300));
        let again = w.respond(TX, 1, Outcome::Cancelled).await;
        assert_eq!(again.label(), "scheduled", "k={k}");

        let rec = w.record(TX);
        assert_eq!(rec.status, Status::Scheduled, "k={k}");
        let live = w.scheduler.live();
        assert_eq!(live.len(), 1, "k={k}: exactly one schedule");
        assert_eq!(w.scheduler.created(), 1, "k={k}: created once");
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
            w.audit_path(TX),
            TO_ATTEMPT_2[..3].to_vec(),
            "k={k}: one audit row per transition"
        );
        assert_eq!(w.distinct_keys(), keys(&["TX-100200#1"]), "k={k}");
    }
}

/// Row 1: A dies before SCHEDULING → IN_PROGRESS; the whole process repeats,
/// nothing duplicated.
#[tokio::test]
async fn row1_a_dies_before_scheduling() {
    let w = World::new();
    w.start(TX, 3).await;
    w.respond_with(TX, 1, Outcome::Cancelled, &mut stop_after(0))
        .await;
    assert_eq!(w.status(TX), Status::InProgress);
    assert_eq!(w.audit(TX).len(), 1, "nothing written");
    w.respond(TX, 1, Outcome::Cancelled).await;
    assert_eq!(w.status(TX), Status::Scheduled);
    assert_eq!(w.scheduler.live().len(), 1);
    assert_eq!(w.metrics.count(names::SCHEDULES_CREATED), 1);
    assert_eq!(w.metrics.count(names::SCHEDULE_CONFLICTS), 0);
}

/// Row 2: A dies after SCHEDULING, before creating the schedule → SCHEDULING; the
/// stored next_fire_at is reused: one retry.
#[tokio::test]
async fn row2_a_dies_after_scheduling_before_creating() {
    let w = World::new();
    w.start(TX, 3).await;
    w.respond_with(TX, 1, Outcome::Cancelled, &mut stop_after(1))
        .await;
    let stored = w.record(TX).next_fire_at.unwrap();
    assert!(w.scheduler.live().is_empty());
    w.advance(Duration::from_secs(3600));
    w.respond(TX, 1, Outcome::Cancelled).await;
    let live = w.scheduler.live();
    assert_eq!(live.len(), 1);
    assert_eq!(live[0].fire_at, stored, "not recomputed an hour later");
    assert_eq!(live[0].name.as_str(), "retry-TX-100200-2");
    // One retry: firing it once gives attempt 2, once.
    let ev = fire(&w);
    w.retry(&ev).await;
    assert_eq!(w.distinct_keys(), keys(&["TX-100200#1", "TX-100200#2"]));
    assert_eq!(w.audit_path(TX), TO_ATTEMPT_2.to_vec());
}

/// Row 3: A dies after creating the schedule, before SCHEDULED → SCHEDULING; the
/// redelivery's create says "exists": success.
#[tokio::test]
async fn row3_a_dies_after_creating_before_scheduled() {
    let w = World::new();
    w.start(TX, 3).await;
    w.respond_with(TX, 1, Outcome::Cancelled, &mut stop_after(2))
        .await;
    assert_eq!(w.status(TX), Status::Scheduling);
    assert_eq!(w.scheduler.live().len(), 1);
    let v = w.respond(TX, 1, Outcome::Cancelled).await;
    assert_eq!(v, Verdict::Done(Ack::Scheduled));
    assert_eq!(w.status(TX), Status::Scheduled);
    assert_eq!(w.metrics.count(names::SCHEDULE_CONFLICTS), 1);
    assert_eq!(w.scheduler.created(), 1);
}

// ---------------------------------------------------------------------------
// Row 4: the retry event arrives while A is still SCHEDULING.
// ---------------------------------------------------------------------------

/// A is paused after `k` effects (1: SCHEDULING written; 2: schedule created), the
/// retry event arrives and B accepts it from SCHEDULING, then A goes on: its
/// confirmation meets a failed condition, which is success (acknowledged).
#[tokio::test]
async fn row4_retry_event_while_a_is_still_scheduling() {
    for k in [1usize, 2] {
        let w = World::new();
        w.start(TX, 3).await;
        let resp = domain::Response {
            transaction_id: id(TX),
            attempt: a(1),
            outcome: Outcome::Cancelled,
            reason: Some("NOT_AVAILABLE".into()),
            retry_after_seconds: None,
            round: None,
        };
        let ports = ResponsePorts {
            store: &w.store,
            scheduler: &w.scheduler,
            retries: &w.retries,
            notes: &w.store,
        };
        let ctx = w.settings.context(w.now());
        let mut rng = fixed();
        let mut a_run = drive(
            domain::decide::Input::Response(resp),
            &ports,
            &ctx,
            &mut rng,
            &mut stop_after(k),
        )
        .await;
        assert!(a_run.result.is_err(), "A paused");
        assert_eq!(w.status(TX), Status::Scheduling);

        // The retry event for attempt 2 arrives now (the fire time came, or the
        // reconciler requeued it). B accepts SCHEDULING.
        let rec = w.record(TX);
        w.set_time(rec.next_fire_at.unwrap());
        let ev = RetryEvent {
            transaction_id: id(TX),
            origin: domain::Origin::RetryScheduler,
            attempt: a(2),
            round: None,
        };
        let b = w.retry(&ev).await;
        assert_eq!(b.label(), "published", "k={k}: B accepted SCHEDULING");
        assert_eq!(w.status(TX), Status::InProgress);
        assert_eq!(w.record(TX).current_attempt, a(2));

        // A resumes where it stopped.
        let ports = ResponsePorts {
            store: &w.store,
            scheduler: &w.scheduler,
            retries: &w.retries,
            notes: &w.store,
        };
        a_run.result = execute(&mut a_run.run, &ports, &ctx, &mut rng, &mut all()).await;
        let v = verdict(&a_run, &w.metrics);
        assert!(is_ack(&v), "k={k}: A's failed condition is success: {v:?}");
        assert!(
            matches!(
                a_run.result,
                Ok(Disposition::Drop(DropReason::LateResponse { .. }))
                    | Ok(Disposition::Ack(Ack::AlreadyHandled))
            ),
            "k={k}: {:?}",
            a_run.result
        );
        assert_eq!(w.status(TX), Status::InProgress, "k={k}: A changed nothing");
        assert_eq!(w.record(TX).current_attempt, a(2));
        assert_eq!(
            w.audit_path(TX),
            vec![
                "*>IN_PROGRESS@1",
                "IN_PROGRESS>SCHEDULING@1",
                "SCHEDULING>SENDING@1",
                "SENDING>IN_PROGRESS@2"
            ],
            "k={k}"
        );
        // The schedule A created (before or after B) fires later: a duplicate for B.
        w.advance(Duration::from_secs(86_400 * 2));
        for ev in w.fire_due() {
            let v = w.retry(&ev).await;
            assert_eq!(v.label(), "duplicate-retry", "k={k}");
        }
        assert_eq!(
            w.distinct_keys(),
            keys(&["TX-100200#1", "TX-100200#2"]),
            "k={k}"
        );
    }
}

// ---------------------------------------------------------------------------
// Row 5: the scheduler cannot deliver.
// ---------------------------------------------------------------------------

/// Row 5: the schedule never reaches the retry queue (retries spent, event in the
/// scheduler's DLQ) → the record stays SCHEDULED. The reconciler finds it once the
/// fire time is past the threshold and requeues the retry event; B publishes attempt
/// 2. When an operator later redrives the scheduler DLQ, B drops the duplicate.
#[tokio::test]
async fn row5_scheduler_cannot_deliver() {
    let w = scheduled_world(3).await;
    let fire_at = w.record(TX).next_fire_at.unwrap();
    // The scheduler fails to deliver: the event goes to its DLQ.
    w.set_time(fire_at);
    let dead: Vec<RetryEvent> = w.fire_due();
    assert_eq!(dead.len(), 1);
    assert_eq!(w.status(TX), Status::Scheduled);

    // Before the threshold the reconciler leaves it alone.
    let early = w.reconcile().await;
    assert_eq!(early.examined, 0);
    assert!(w.retries.is_empty());

    w.advance(w.settings.reconcile_threshold + Duration::from_secs(60));
    let report = w.reconcile().await;
    assert_eq!(
        report.count(
            Status::Scheduled,
            runtime::reconcile::Action::Done(domain::decide::Ack::ReconcilerRequeued)
        ),
        1,
        "{report:?}"
    );
    let requeued = w.retries.drain();
    assert_eq!(
        requeued,
        vec![RetryEvent {
            transaction_id: id(TX),
            origin: domain::Origin::Reconciler,
            attempt: a(2),
            round: Some(0),
        }]
    );
    let v = w.retry(&requeued[0]).await;
    assert_eq!(v.label(), "published");
    assert_eq!(w.status(TX), Status::InProgress);

    // The scheduler's DLQ redriven later: a duplicate, dropped.
    let v = w.retry(&dead[0]).await;
    assert_eq!(v.label(), "duplicate-retry");
    assert_eq!(w.distinct_keys(), keys(&["TX-100200#1", "TX-100200#2"]));
    assert_eq!(w.keys().len(), 2);
    // The reconciler's requeue is counted on the record: one audited self-arrow.
    let mut want = TO_ATTEMPT_2.to_vec();
    want.insert(3, "SCHEDULED>SCHEDULED@1");
    assert_eq!(w.audit_path(TX), want);
    // The next reconciler run finds IN_PROGRESS(2) by the entry its cycle left (the
    // fire time, long past) before its answer deadline: it only moves the entry to the
    // deadline; the run after that has nothing left to do.
    let r = w.reconcile().await;
    assert_eq!(
        r.count(
            Status::InProgress,
            runtime::reconcile::Action::Done(Ack::ReconcilerAwaiting)
        ),
        1,
        "{r:?}"
    );
    assert_eq!(w.keys().len(), 2, "nothing republished before the deadline");
    assert_eq!(w.reconcile().await.examined, 0);
}

// ---------------------------------------------------------------------------
// Row 6: the event is delivered twice.
// ---------------------------------------------------------------------------

/// Row 6a: a second delivery after the first finished is dropped as a duplicate.
#[tokio::test]
async fn row6_event_delivered_twice_in_sequence() {
    let w = scheduled_world(3).await;
    let ev = fire(&w);
    assert_eq!(w.retry(&ev).await.label(), "published");
    let second = w.retry(&ev).await;
    assert_eq!(
        second,
        Verdict::Dropped(DropReason::DuplicateRetry {
            attempt: Attempt::new(2).unwrap(),
            status: Status::InProgress,
        })
    );
    assert_eq!(w.keys(), vec!["TX-100200#1", "TX-100200#2"]);
    assert_eq!(w.audit_path(TX), TO_ATTEMPT_2.to_vec());
    assert_eq!(w.metrics.count("DropDuplicateRetry"), 1);
}

/// Row 6b: two deliveries overlap: the first stops after SENDING, the second finds
/// SENDING and resumes (publishes, IN_PROGRESS), then the first goes on: it
/// republishes with the same key and its last write's failed condition drops it.
#[tokio::test]
async fn row6_event_delivered_twice_concurrently() {
    let w = scheduled_world(3).await;
    let ev = fire(&w);
    let ports = RetryPorts {
        store: &w.store,
        requests: &w.requests,
        scheduler: &w.scheduler,
    };
    let ctx = w.settings.context(w.now());
    let mut rng = fixed();
    let mut first = drive(
        domain::decide::Input::Retry(ev.clone()),
        &ports,
        &ctx,
        &mut rng,
        &mut stop_after(1),
    )
    .await;
    assert_eq!(w.status(TX), Status::Sending);
    let second = drive(
        domain::decide::Input::Retry(ev.clone()),
        &ports,
        &ctx,
        &mut rng,
        &mut all(),
    )
    .await;
    assert_eq!(second.result, Ok(Disposition::Ack(Ack::Resumed)));
    first.result = execute(&mut first.run, &ports, &ctx, &mut rng, &mut all()).await;
    let v = verdict(&first, &w.metrics);
    assert!(v.is_acknowledged(), "{v:?}");
    assert_eq!(w.status(TX), Status::InProgress);
    assert_eq!(w.record(TX).current_attempt, a(2));
    // Two publishes, one key: the service dedupes (DESIGN's stated precondition).
    assert_eq!(w.keys(), vec!["TX-100200#1", "TX-100200#2", "TX-100200#2"]);
    assert_eq!(w.distinct_keys(), keys(&["TX-100200#1", "TX-100200#2"]));
    assert_eq!(w.audit_path(TX), TO_ATTEMPT_2.to_vec());
}

// ---------------------------------------------------------------------------
// Rows 7-8: B dies in SENDING.
// ---------------------------------------------------------------------------

/// B stops after each of its effects (write SENDING, publish, write IN_PROGRESS) and
/// the event is delivered again: always IN_PROGRESS(2), attempt 2 published under
/// one key, one audit row per transition.
#[tokio::test]
async fn retry_handler_crash_after_each_effect_then_redelivery() {
    for k in 0..=2 {
        let w = scheduled_world(3).await;
        let ev = fire(&w);
        let crashed = w.retry_with(&ev, &mut stop_after(k)).await;
        assert!(matches!(crashed, Verdict::Retry { .. }), "k={k}");
        let left = if k == 0 {
            Status::Scheduled
        } else {
            Status::Sending
        };
        assert_eq!(w.status(TX), left, "k={k}");
        let again = w.retry(&ev).await;
        let expected = if k == 0 { "published" } else { "resumed" };
        assert_eq!(again.label(), expected, "k={k}");
        let rec = w.record(TX);
        assert_eq!(rec.status, Status::InProgress, "k={k}");
        assert_eq!(rec.current_attempt, a(2), "k={k}");
        assert_eq!(rec.next_attempt, None, "k={k}");
        assert_eq!(
            w.distinct_keys(),
            keys(&["TX-100200#1", "TX-100200#2"]),
            "k={k}"
        );
        assert_eq!(w.audit_path(TX), TO_ATTEMPT_2.to_vec(), "k={k}");
    }
}

/// Row 7: B dies after SENDING, before publishing → SENDING; the redelivery resumes
/// and publishes (once).
#[tokio::test]
async fn row7_b_dies_after_sending_before_publishing() {
    let w = scheduled_world(3).await;
    let ev = fire(&w);
    w.retry_with(&ev, &mut stop_after(1)).await;
    assert_eq!(w.status(TX), Status::Sending);
    assert_eq!(w.keys(), vec!["TX-100200#1"], "nothing published yet");
    assert_eq!(w.retry(&ev).await.label(), "resumed");
    assert_eq!(w.keys(), vec!["TX-100200#1", "TX-100200#2"]);
    // The published request carries the payload the transaction started with.
    let req = w.requests.messages().pop().unwrap();
    assert_eq!(
        req.payload.as_json(),
        r#"{"order":"TX-100200","amount":12.5}"#
    );
}

/// Row 8: B dies after publishing, before IN_PROGRESS → SENDING; the redelivery
/// republishes with the same key (the service dedupes) and finishes.
#[tokio::test]
async fn row8_b_dies_after_publishing_before_in_progress() {
    let w = scheduled_world(3).await;
    let ev = fire(&w);
    w.retry_with(&ev, &mut stop_after(2)).await;
    assert_eq!(w.status(TX), Status::Sending);
    assert_eq!(w.keys(), vec!["TX-100200#1", "TX-100200#2"]);
    assert_eq!(w.retry(&ev).await.label(), "resumed");
    assert_eq!(w.keys(), vec!["TX-100200#1", "TX-100200#2", "TX-100200#2"]);
    assert_eq!(w.distinct_keys(), keys(&["TX-100200#1", "TX-100200#2"]));
    assert_eq!(w.status(TX), Status::InProgress);
    // Then the service answers attempt 2: SUCCEEDED.
    assert_eq!(
        w.respond(TX, 2, Outcome::Success).await.label(),
        "succeeded"
    );
    assert_eq!(w.status(TX), Status::Succeeded);
}

// ---------------------------------------------------------------------------
// Row 9: a response from an earlier attempt.
// ---------------------------------------------------------------------------

/// Row 9: in any later state, a response for attempt 1 is dropped by attempt number
/// and changes nothing (record and audit untouched); a SUCCESS for it — attempt 1
/// was answered CANCELLED — is dropped as a conflicting success, alerted and noted in
/// the audit trail.
#[tokio::test]
async fn row9_response_from_an_earlier_attempt_changes_nothing() {
    let w = scheduled_world(3).await;
    let ev = fire(&w);
    w.retry(&ev).await;
    // IN_PROGRESS(2), then SUCCEEDED(2): a late answer for attempt 1 each time.
    for stage in ["in-progress", "succeeded"] {
        if stage == "succeeded" {
            w.respond(TX, 2, Outcome::Success).await;
        }
        let before = w.record(TX);
        let changes = w.store.change_count();
        for outcome in [Outcome::Success, Outcome::Cancelled, Outcome::Error] {
            let v = w.respond(TX, 1, outcome).await;
            let dropped_as_expected = match outcome {
                Outcome::Success => {
                    matches!(v, Verdict::Dropped(DropReason::ConflictingSuccess { .. }))
                }
                Outcome::Cancelled | Outcome::Error => {
                    matches!(v, Verdict::Dropped(DropReason::LateResponse { .. }))
                }
            };
            assert!(dropped_as_expected, "{stage} {outcome}: {v:?}");
        }
        assert_eq!(w.record(TX), before, "{stage}: record unchanged");
        assert_eq!(w.store.change_count(), changes, "{stage}: nothing written");
    }
    assert_eq!(w.metrics.count("DropLateResponse"), 4);
    assert_eq!(w.metrics.count("DropConflictingSuccess"), 2);
    assert_eq!(w.metrics.count(names::CONFLICTING_SUCCESS), 2);
    assert_eq!(w.status(TX), Status::Succeeded);
    // Each conflicting SUCCESS is in the audit trail, naming attempt 1 and the status
    // the record had; the chain of transitions is untouched.
    let notices: Vec<(u32, Status)> = w
        .store
        .audit(&id(TX))
        .iter()
        .filter(|e| e.notice == Some(domain::audit::Notice::ConflictingSuccess))
        .map(|e| (e.current_attempt.get(), e.to))
        .collect();
    assert_eq!(
        notices,
        vec![(1, Status::InProgress), (1, Status::Succeeded)]
    );
}

// ---------------------------------------------------------------------------
// Row 10: attempts exhausted.
// ---------------------------------------------------------------------------

/// A writer that keeps what the logs say.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn lines(&self) -> Vec<serde_json::Value> {
        String::from_utf8(self.0.lock().unwrap().clone())
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

fn capture_logs() -> (Captured, tracing::subscriber::DefaultGuard) {
    let out = Captured::default();
    let writer = out.clone();
    let subscriber = tracing_subscriber::fmt()
        .json()
        .flatten_event(true)
        .with_current_span(true)
        .with_writer(move || writer.clone())
        .finish();
    (out, tracing::subscriber::set_default(subscriber))
}

/// Row 10: CANCELLED for the last allowed attempt → FAILED + business alert: an ERROR
/// line `business alert: attempts exhausted` with the transaction, the attempts and
/// the reason, and the AttemptsExhausted metric. A crash right after the FAILED write
/// raises the alert again on redelivery (alerts are at-least-once); nothing more is
/// ever published or scheduled.
#[tokio::test]
async fn row10_attempts_exhausted_fail_and_alert() {
    let (logs, _guard) = capture_logs();
    let w = scheduled_world(2).await;
    let ev = fire(&w);
    w.retry(&ev).await;
    // Attempt 2 of 2 cancelled; the handler crashes right after writing FAILED,
    // before the alert (the first, unread plan tries SCHEDULING, whose budget
    // condition fails and hands back the record: then FAILED, then the alert).
    let crashed = w
        .respond_with(TX, 2, Outcome::Cancelled, &mut |e: &domain::Effect| {
            !matches!(e, domain::Effect::Alert(_))
        })
        .await;
    assert!(matches!(crashed, Verdict::Retry { .. }));
    assert_eq!(w.status(TX), Status::Failed);
    assert_eq!(
        w.metrics.count(names::ATTEMPTS_EXHAUSTED),
        0,
        "not raised yet"
    );

    let v = w.respond(TX, 2, Outcome::Cancelled).await;
    assert_eq!(v, Verdict::Done(Ack::Failed));
    assert_eq!(w.metrics.count(names::ATTEMPTS_EXHAUSTED), 1);
    let alerts: Vec<serde_json::Value> = logs
        .lines()
        .into_iter()
        .filter(|l| l["message"] == "business alert: attempts exhausted")
        .collect();
    assert_eq!(alerts.len(), 1, "{:?}", logs.lines());
    assert_eq!(alerts[0]["level"], "ERROR");
    assert_eq!(alerts[0]["transaction_id"], TX);
    assert_eq!(alerts[0]["attempts"], 2);
    assert_eq!(alerts[0]["reason"], "NOT_AVAILABLE");

    let rec = w.record(TX);
    assert_eq!(rec.status, Status::Failed);
    assert_eq!(rec.current_attempt, a(2));
    assert!(w.scheduler.live().is_empty(), "no attempt 3 scheduled");
    assert_eq!(w.distinct_keys(), keys(&["TX-100200#1", "TX-100200#2"]));
    let path = w.audit_path(TX);
    assert_eq!(path.last().unwrap(), "IN_PROGRESS>FAILED@2");
    assert!(w.audit(TX).last().unwrap().is_exhaustion());
    assert_eq!(path.len(), 6);
}

/// Exhaustion with no crash: max_attempts = 1 fails on the first CANCELLED.
#[tokio::test]
async fn single_attempt_transaction_fails_at_once() {
    let w = World::new();
    w.start(TX, 1).await;
    let v = w.respond(TX, 1, Outcome::Cancelled).await;
    assert_eq!(v.label(), "failed");
    assert_eq!(w.status(TX), Status::Failed);
    assert_eq!(w.metrics.count(names::ATTEMPTS_EXHAUSTED), 1);
    assert!(w.scheduler.live().is_empty());
}

/// The whole chain with a crash at every effect of every step (A, B, A): the final
/// result never changes: SUCCEEDED at attempt 2, keys #1 and #2, the same audit path.
#[tokio::test]
async fn a_crash_at_every_step_leaves_the_final_result_unchanged() {
    let reference = {
        let w = scheduled_world(3).await;
        let ev = fire(&w);
        w.retry(&ev).await;
        w.respond(TX, 2, Outcome::Success).await;
        w.audit_path(TX)
    };
    for k in 0..=2 {
        let w = World::new();
        w.start(TX, 3).await;
        w.respond_with(TX, 1, Outcome::Cancelled, &mut stop_after(k))
            .await;
        w.respond(TX, 1, Outcome::Cancelled).await;
        let ev = fire(&w);
        w.retry_with(&ev, &mut stop_after(k)).await;
        w.retry(&ev).await;
        w.respond_with(TX, 2, Outcome::Success, &mut stop_after(0))
            .await;
        w.respond(TX, 2, Outcome::Success).await;
        // Every message delivered once more at the end: nothing changes.
        w.respond(TX, 1, Outcome::Cancelled).await;
        w.retry(&ev).await;
        w.respond(TX, 2, Outcome::Success).await;
        assert_eq!(w.status(TX), Status::Succeeded, "k={k}");
        assert_eq!(w.audit_path(TX), reference, "k={k}");
        assert_eq!(
            w.distinct_keys(),
            keys(&["TX-100200#1", "TX-100200#2"]),
            "k={k}"
        );
    }
}
