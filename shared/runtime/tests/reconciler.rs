//! The reconciler resumes transactions stuck in each intermediate state, pages through
//! the index, bounds its work per run and reports counts by state and action.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use domain::{Outcome, Status, Timestamp};
use runtime::metrics::{names, Metrics};
use runtime::reconcile::{run_once, Limits};
use runtime::settings::{Seeds, Settings};
use std::time::Duration;

const MIN: Duration = Duration::from_secs(60);

fn at(offset: Duration) -> Timestamp {
    T0.plus_millis(i64::try_from(offset.as_millis()).unwrap())
}

/// GIVEN one transaction stuck in each intermediate state WHEN the reconciler runs
/// THEN SCHEDULING with a future instant gets its schedule (from the stored instant),
/// SCHEDULING / SCHEDULED past their instant and SENDING get their retry event
/// requeued, and B finishes every one of them.
#[tokio::test]
async fn resumes_every_intermediate_state() {
    let w = World::new();
    for tx in ["TX-A", "TX-B", "TX-C", "TX-D"] {
        w.start(tx, 3).await;
    }
    // TX-A and TX-D: A died after SCHEDULING (no schedule).
    for tx in ["TX-A", "TX-D"] {
        w.respond_with(tx, 1, Outcome::Cancelled, &mut stop_after(1))
            .await;
        assert_eq!(w.status(tx), Status::Scheduling);
    }
    // TX-B and TX-C: SCHEDULED normally.
    for tx in ["TX-B", "TX-C"] {
        w.respond(tx, 1, Outcome::Cancelled).await;
    }

    // Run 1, 16 minutes later: only TX-A and TX-D are stuck (SCHEDULING for longer
    // than 15 min); their instants are ~2 h away, so their schedules are created.
    w.set_time(at(16 * MIN));
    let stored_a = w.record("TX-A").next_fire_at.unwrap();
    let r1 = w.reconcile().await;
    assert_eq!(r1.examined, 2, "{r1:?}");
    assert_eq!(r1.count(Status::Scheduling, "scheduled"), 2);
    assert!(!r1.truncated);
    assert_eq!(w.status("TX-A"), Status::Scheduled);
    let sched_a = w
        .scheduler
        .live()
        .into_iter()
        .find(|s| s.event.transaction_id == id("TX-A"))
        .unwrap();
    assert_eq!(sched_a.fire_at, stored_a, "created from the stored instant");
    assert_eq!(w.metrics.count("ReconcileSchedulingScheduled"), 2);
    assert!(w.retries.is_empty());

    // TX-E: A dies after SCHEDULING at 16 min; by run 2 its instant has passed.
    w.start("TX-E", 3).await;
    w.respond_with("TX-E", 1, Outcome::Cancelled, &mut stop_after(1))
        .await;

    // 3 h: every schedule is due. The scheduler delivers nothing except TX-C's,
    // whose retry handler dies after SENDING.
    w.set_time(at(180 * MIN));
    let due = w.fire_due();
    let c_event = due
        .iter()
        .find(|e| e.transaction_id == id("TX-C"))
        .unwrap()
        .clone();
    w.retry_with(&c_event, &mut stop_after(1)).await;
    assert_eq!(w.status("TX-C"), Status::Sending);

    // Run 2, 16 minutes later.
    w.set_time(at(196 * MIN));
    let r2 = w.reconcile().await;
    assert_eq!(r2.count(Status::Scheduled, "requeued"), 3, "{r2:?}"); // A, B, D
    assert_eq!(r2.count(Status::Scheduling, "requeued"), 1, "{r2:?}"); // E, instant past
    assert_eq!(r2.count(Status::Sending, "requeued"), 1, "{r2:?}"); // C
    assert_eq!(r2.examined, 5);
    assert_eq!(r2.errors, 0);
    let events = w.retries.drain();
    assert_eq!(events.len(), 5);
    assert!(events
        .iter()
        .all(|e| e.origin == domain::Origin::Reconciler && e.attempt == a(2)));

    // B handles the requeued events: everything moves on to attempt 2.
    for ev in &events {
        let v = w.retry(ev).await;
        assert!(v.is_acknowledged(), "{v:?}");
    }
    for tx in ["TX-A", "TX-B", "TX-C", "TX-D", "TX-E"] {
        let rec = w.record(tx);
        assert_eq!(rec.status, Status::InProgress, "{tx}");
        assert_eq!(rec.current_attempt, a(2), "{tx}");
        assert!(w.distinct_keys().contains(&format!("{tx}#2")), "{tx}");
    }
    // Nothing is stuck any more.
    assert_eq!(w.reconcile().await.examined, 0);
    assert_eq!(w.metrics.count(names::RETRY_EVENTS_PUBLISHED), 5);
}

/// 30 SENDING transactions, RECONCILE_MAX_ITEMS = 25, pages of 4: the run stops at 25
/// and says so; the next run (after B handled those) does the 5 left.
#[tokio::test]
async fn pages_through_the_index_and_bounds_each_run() {
    let w = World::new();
    for i in 0..30 {
        let tx = format!("TX-{i:03}");
        w.start(&tx, 3).await;
        w.respond(&tx, 1, Outcome::Cancelled).await;
    }
    w.set_time(at(300 * MIN));
    for ev in w.fire_due() {
        w.retry_with(&ev, &mut stop_after(1)).await;
    }
    assert!(w
        .store
        .records()
        .iter()
        .all(|r| r.status == Status::Sending));
    w.set_time(at(320 * MIN));
    let limits = Limits {
        max_items: 25,
        page_size: 4,
        concurrency: 3,
    };
    let metrics = Metrics::new("NS", "reconciler");
    w.store.reset_calls();
    let r = run_once(
        &domain::exec::Ports {
            store: &w.store,
            scheduler: &w.scheduler,
            requests: &domain::ports::Unwired,
            retries: &w.retries,
        },
        &w.settings,
        w.now(),
        &limits,
        &Seeds::fixed(1),
        &metrics,
    )
    .await;
    assert_eq!(r.examined, 25);
    assert!(r.truncated);
    assert_eq!(metrics.count(names::RECONCILE_TRUNCATED), 1);
    assert_eq!(r.count(Status::Sending, "requeued"), 25);
    // Pages of at most 4: at least 7 queries, and one per partition visited.
    assert!(w.store.calls().queries >= 7, "{:?}", w.store.calls());
    let first = w.retries.drain();
    assert_eq!(first.len(), 25);
    for ev in &first {
        w.retry(ev).await;
    }
    let r = run_once(
        &domain::exec::Ports {
            store: &w.store,
            scheduler: &w.scheduler,
            requests: &domain::ports::Unwired,
            retries: &w.retries,
        },
        &w.settings,
        w.now(),
        &limits,
        &Seeds::fixed(2),
        &metrics,
    )
    .await;
    assert_eq!(r.examined, 5);
    assert!(!r.truncated);
    let second = w.retries.drain();
    for ev in &second {
        w.retry(ev).await;
    }
    assert!(w
        .store
        .records()
        .iter()
        .all(|r| r.status == Status::InProgress && r.current_attempt == a(2)));
    assert_eq!(w.distinct_keys().len(), 60);
}

/// A backlog in one state does not starve the others: partitions are visited
/// round-robin, one page each, before any second page.
#[tokio::test]
async fn a_backlog_in_one_state_does_not_starve_the_others() {
    let mut w = World::new();
    w.settings = Settings {
        shards: 2,
        ..w.settings.clone()
    };
    for i in 0..20 {
        let tx = format!("TX-S{i:02}");
        w.start(&tx, 3).await;
        w.respond_with(&tx, 1, Outcome::Cancelled, &mut stop_after(1))
            .await;
    }
    for tx in ["TX-X1", "TX-X2"] {
        w.start(tx, 3).await;
        w.respond(tx, 1, Outcome::Cancelled).await;
    }
    w.set_time(at(300 * MIN));
    for ev in w.fire_due() {
        w.retry_with(&ev, &mut stop_after(1)).await;
    }
    assert_eq!(w.status("TX-X1"), Status::Sending);
    assert_eq!(w.status("TX-X2"), Status::Sending);
    w.set_time(at(320 * MIN));
    let metrics = Metrics::new("NS", "reconciler");
    let r = run_once(
        &domain::exec::Ports {
            store: &w.store,
            scheduler: &w.scheduler,
            requests: &domain::ports::Unwired,
            retries: &w.retries,
        },
        &w.settings,
        w.now(),
        &Limits {
            max_items: 6,
            page_size: 2,
            concurrency: 1,
        },
        &Seeds::fixed(1),
        &metrics,
    )
    .await;
    assert!(r.truncated);
    assert_eq!(r.count(Status::Sending, "requeued"), 2, "{r:?}");
    assert_eq!(r.count(Status::Scheduling, "requeued"), 4, "{r:?}");
}

/// The report serialises as the function's response.
#[tokio::test]
async fn report_json_has_counts_by_state_and_action() {
    let w = World::new();
    w.start("TX-1", 3).await;
    w.respond_with("TX-1", 1, Outcome::Cancelled, &mut stop_after(1))
        .await;
    w.set_time(at(20 * MIN));
    let r = w.reconcile().await;
    let json = serde_json::to_value(&r).unwrap();
    assert_eq!(json["examined"], 1);
    assert_eq!(json["actions"]["SCHEDULING"]["scheduled"], 1);
    assert_eq!(json["truncated"], false);
    assert_eq!(json["before"], "2026-10-03T12:05:00.000Z");
}
