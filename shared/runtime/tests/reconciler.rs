//! The reconciler resumes transactions stuck in each intermediate state, pages through
//! the index, bounds its work per run and reports counts by state and action.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use domain::decide::Ack;
use domain::{Outcome, Status, Timestamp};
use runtime::metrics::{names, Metrics};
use runtime::reconcile::{run_once, Action, Limits};
use runtime::settings::{Seeds, Settings};
use std::time::Duration;

const MIN: Duration = Duration::from_secs(60);

fn at(offset: Duration) -> Timestamp {
    T0.plus_millis(i64::try_from(offset.as_millis()).unwrap())
}

/// GIVEN one transaction stuck in each intermediate state WHEN the reconciler runs
/// THEN nothing whose fire time is still ahead is even read (the index is keyed by
/// the cycle's fire time), and once the fire times are past by the threshold,
/// SCHEDULING, SCHEDULED and SENDING all get their retry event requeued, and B
/// finishes every one of them.
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

    // Run 1, 16 minutes later: TX-A and TX-D have been SCHEDULING for longer than
    // the 15 min threshold, but their fire times are ~2 h away: the index query
    // returns nothing, nothing is read or done (their retries are not late yet).
    w.set_time(at(16 * MIN));
    w.store.reset_calls();
    let r1 = w.reconcile().await;
    assert_eq!(r1.examined, 0, "{r1:?}");
    assert_eq!(w.store.calls().reads, 0, "{:?}", w.store.calls());
    assert!(!r1.truncated);
    assert_eq!(w.status("TX-A"), Status::Scheduling);
    assert_eq!(w.scheduler.live().len(), 2, "only B's and C's schedules");
    assert!(w.retries.is_empty());

    // TX-E: A dies after SCHEDULING at 16 min; by run 2 its instant has passed.
    w.start("TX-E", 3).await;
    w.respond_with("TX-E", 1, Outcome::Cancelled, &mut stop_after(1))
        .await;

    // 3 h: every schedule is due (B's and C's). The scheduler delivers nothing
    // except TX-C's, whose retry handler dies after SENDING.
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
    assert_eq!(
        r2.count(Status::Scheduled, Action::Done(Ack::ReconcilerRequeued)),
        1,
        "{r2:?}"
    ); // B
    assert_eq!(
        r2.count(Status::Scheduling, Action::Done(Ack::ReconcilerRequeued)),
        3,
        "{r2:?}"
    ); // A, D, E
    assert_eq!(
        r2.count(Status::Sending, Action::Done(Ack::ReconcilerRequeued)),
        1,
        "{r2:?}"
    ); // C
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
        &domain::exec::ReconcilePorts {
            store: &w.store,
            scheduler: &w.scheduler,
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
    assert_eq!(
        r.count(Status::Sending, Action::Done(Ack::ReconcilerRequeued)),
        25
    );
    // Pages of at most 4: at least 7 queries, and one per partition visited.
    assert!(w.store.calls().queries >= 7, "{:?}", w.store.calls());
    let first = w.retries.drain();
    assert_eq!(first.len(), 25);
    for ev in &first {
        w.retry(ev).await;
    }
    let r = run_once(
        &domain::exec::ReconcilePorts {
            store: &w.store,
            scheduler: &w.scheduler,
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

/// A backlog in one shard does not starve the others: shards are visited
/// round-robin, one page each, before any second page.
#[tokio::test]
async fn a_backlog_in_one_shard_does_not_starve_the_others() {
    let mut w = World::new();
    w.settings = Settings {
        shards: 2,
        ..w.settings.clone()
    };
    let names: Vec<String> = (0..200).map(|i| format!("TX-S{i:03}")).collect();
    let crowded: Vec<&String> = names
        .iter()
        .filter(|n| id(n).shard(2) == 0)
        .take(20)
        .collect();
    let quiet: Vec<&String> = names
        .iter()
        .filter(|n| id(n).shard(2) == 1)
        .take(2)
        .collect();
    assert_eq!((crowded.len(), quiet.len()), (20, 2));
    for tx in crowded.iter().chain(&quiet) {
        w.start(tx, 3).await;
        w.respond_with(tx, 1, Outcome::Cancelled, &mut stop_after(1))
            .await;
    }
    w.set_time(at(320 * MIN));
    let metrics = Metrics::new("NS", "reconciler");
    let r = run_once(
        &domain::exec::ReconcilePorts {
            store: &w.store,
            scheduler: &w.scheduler,
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
    assert_eq!(
        r.count(Status::Scheduling, Action::Done(Ack::ReconcilerRequeued)),
        6,
        "{r:?}"
    );
    let requeued: Vec<String> = w
        .retries
        .drain()
        .iter()
        .map(|e| e.transaction_id.to_string())
        .collect();
    for tx in &quiet {
        assert!(requeued.contains(tx), "{tx} starved: {requeued:?}");
    }
}

/// The report serialises as the function's response.
#[tokio::test]
async fn report_json_has_counts_by_state_and_action() {
    let w = World::new();
    w.start("TX-1", 3).await;
    w.respond_with("TX-1", 1, Outcome::Cancelled, &mut stop_after(1))
        .await;
    w.set_time(at(200 * MIN));
    let r = w.reconcile().await;
    let json = serde_json::to_value(&r).unwrap();
    assert_eq!(json["examined"], 1);
    assert_eq!(json["actions"]["SCHEDULING"]["requeued"], 1);
    assert_eq!(json["truncated"], false);
    assert_eq!(json["before"], "2026-10-03T15:05:00.000Z");
}
