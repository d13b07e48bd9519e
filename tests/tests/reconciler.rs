//! The reconciler resumes transactions stuck in each intermediate state, pages through
//! the index, bounds its work per run and reports counts by state and action.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use domain::decide::Ack;
use domain::ports::{
    Payloads, PortError, StuckIndex, StuckPage, StuckQuery, Transitions, Undecodable, WriteOutcome,
};
use domain::{Outcome, Payload, Status, Timestamp, TransactionId, Write};
use reconciler::{run_once, Action, Limits, Report};
use runtime::metrics::{names, Metrics};
use runtime::settings::{Seeds, Settings};
use std::collections::BTreeSet;
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
        assert_eq!(w.status(tx).await, Status::Scheduling);
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
    assert_eq!(w.status("TX-A").await, Status::Scheduling);
    assert_eq!(w.scheduler.live().len(), 2, "only B's and C's schedules");
    assert!(w.retries.is_empty());

    // TX-E: A dies after SCHEDULING at 16 min; by run 2 its instant has passed.
    w.start_and_crash_responding("TX-E", 1).await;

    // 3 h: every schedule is due (B's and C's). The scheduler delivers nothing
    // except TX-C's, whose retry handler dies after SENDING.
    w.set_time(at(180 * MIN));
    let due = w.fire_due().await;
    let c_event = due
        .iter()
        .find(|e| e.transaction_id == id("TX-C"))
        .unwrap()
        .clone();
    w.retry_with(&c_event, &mut stop_after(1)).await;
    assert_eq!(w.status("TX-C").await, Status::Sending);

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
       // C: its send completed by the reconciler itself (request 2 published again,
       // same key, then IN_PROGRESS), nothing requeued.
    assert_eq!(
        r2.count(Status::Sending, Action::Done(Ack::Resumed)),
        1,
        "{r2:?}"
    );
    assert_eq!(r2.examined, 5);
    assert_eq!(r2.errors, 0);
    assert_eq!(
        w.metrics.count(names::RECONCILE_STUCK),
        5,
        "each of them a stuck retry cycle (StuckTransactionsAlarm)"
    );
    let events = w.retries.drain();
    assert_eq!(events.len(), 4);
    assert!(events
        .iter()
        .all(|e| e.origin == domain::Origin::Reconciler && e.attempt == a(2)));

    // B handles the requeued events: everything moves on to attempt 2.
    for ev in &events {
        let v = w.retry(ev).await;
        assert!(v.is_acknowledged(), "{v:?}");
    }
    for tx in ["TX-A", "TX-B", "TX-C", "TX-D", "TX-E"] {
        let rec = w.record(tx).await;
        assert_eq!(rec.status, Status::InProgress, "{tx}");
        assert_eq!(rec.current_attempt, a(2), "{tx}");
        assert!(w.distinct_keys().await.contains(&format!("{tx}#2")), "{tx}");
    }
    // Nothing is stuck any more. Each IN_PROGRESS(2) kept the entry of its cycle,
    // whose fire time is long past: the next run finds it before its answer deadline
    // and only moves the entry there; the run after finds nothing.
    let r = w.reconcile().await;
    assert_eq!(
        r.count(Status::InProgress, Action::Done(Ack::ReconcilerAwaiting)),
        5,
        "{r:?}"
    );
    assert_eq!(w.reconcile().await.examined, 0);
    assert_eq!(w.metrics.count(names::RECONCILE_EXAMINED), 10);
    assert_eq!(
        w.metrics.count(names::RECONCILE_STUCK),
        5,
        "a request awaiting its answer is examined, not stuck"
    );
    assert_eq!(w.metrics.count(names::RETRY_EVENTS_PUBLISHED), 4);
    assert_eq!(w.keys().await.len(), 10, "nothing republished");
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
    for ev in w.fire_due().await {
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
    let r = w.reconcile_with(&limits, 1, &metrics).await;
    assert_eq!(r.examined, 25);
    assert!(r.truncated);
    assert_eq!(metrics.count(names::RECONCILE_TRUNCATED), 1);
    // Each SENDING found has its send completed by the reconciler (same key).
    assert_eq!(r.count(Status::Sending, Action::Done(Ack::Resumed)), 25);
    // Pages of at most 4: at least 7 queries, and one per partition visited.
    assert!(w.store.calls().queries >= 7, "{:?}", w.store.calls());
    assert!(w.retries.drain().is_empty(), "nothing requeued");
    // The 25 now IN_PROGRESS(2) kept the entries of their late cycles, sorted among
    // the 5 left: the next run moves entries to answer deadlines (nothing published)
    // until its budget is spent, and the run after that completes the 5.
    for run in [2, 3] {
        let r = w.reconcile_with(&limits, run, &metrics).await;
        assert_eq!(
            r.count(Status::InProgress, Action::Done(Ack::ReconcilerAwaiting))
                + r.count(Status::Sending, Action::Done(Ack::Resumed)),
            r.examined,
            "{r:?}"
        );
        assert_eq!(r.truncated, run == 2, "{r:?}");
    }
    assert!(w
        .store
        .records()
        .iter()
        .all(|r| r.status == Status::InProgress && r.current_attempt == a(2)));
    assert_eq!(w.distinct_keys().await.len(), 60);
}

/// A world of `per_shard.len()` shards in which shard `s` holds `per_shard[s]`
/// transactions left in SCHEDULING (A died after persisting), all late for the
/// reconciler by now; their ids by shard.
async fn late_by_shard(per_shard: &[usize]) -> (World, Vec<Vec<String>>) {
    let shards = u16::try_from(per_shard.len()).unwrap();
    let mut w = World::new();
    w.settings = Settings {
        shards,
        ..w.settings.clone()
    };
    let mut by_shard = vec![Vec::new(); per_shard.len()];
    for i in 0.. {
        if by_shard.iter().zip(per_shard).all(|(v, n)| v.len() == *n) {
            break;
        }
        let tx = format!("TX-S{i:04}");
        let shard = usize::from(id(&tx).shard(shards));
        if by_shard[shard].len() < per_shard[shard] {
            w.start_and_crash_responding(&tx, 1).await;
            by_shard[shard].push(tx);
        }
    }
    w.set_time(at(320 * MIN));
    (w, by_shard)
}

/// One run within `max_items` and `page_size`, drawn from `seed`: its report and
/// the ids it requeued.
async fn requeue_run(
    w: &World,
    max_items: u32,
    page_size: u32,
    seed: u64,
) -> (Report, Vec<String>) {
    let limits = Limits {
        max_items,
        page_size,
        concurrency: 1,
    };
    let r = w
        .reconcile_with(&limits, seed, &Metrics::new("NS", "reconciler"))
        .await;
    let requeued = w
        .retries
        .drain()
        .iter()
        .map(|e| e.transaction_id.to_string())
        .collect();
    (r, requeued)
}

/// A backlog in one shard does not starve the others: shards are visited
/// round-robin, one page each, before any second page.
#[tokio::test]
async fn a_backlog_in_one_shard_does_not_starve_the_others() {
    let (w, by_shard) = late_by_shard(&[20, 2]).await;
    let (r, requeued) = requeue_run(&w, 6, 2, 1).await;
    assert!(r.truncated);
    assert_eq!(
        r.count(Status::Scheduling, Action::Done(Ack::ReconcilerRequeued)),
        6,
        "{r:?}"
    );
    for tx in &by_shard[1] {
        assert!(requeued.contains(tx), "{tx} starved: {requeued:?}");
    }
}

/// The report serialises as the function's response.
#[tokio::test]
async fn report_json_has_counts_by_state_and_action() {
    let w = World::new();
    w.start_and_crash_responding("TX-1", 1).await;
    w.set_time(at(200 * MIN));
    let r = w.reconcile().await;
    let json = serde_json::to_value(&r).unwrap();
    assert_eq!(json["examined"], 1);
    assert_eq!(json["actions"]["SCHEDULING"]["requeued"], 1);
    assert_eq!(json["truncated"], false);
    assert_eq!(json["before"], "2026-10-03T15:05:00.000Z");
}

/// Backlogs of late entries in three of four shards, one late entry in the fourth,
/// and a budget smaller than one shard's backlog: whatever shard the run starts
/// from, each page asks for an equal share of what is left, so the quiet shard is
/// visited in the first round and its entry requeued.
#[tokio::test]
async fn the_budget_is_shared_so_no_shard_starves() {
    for seed in 0..8 {
        // A world per seed: a requeue is counted on its record, which then waits a
        // threshold before the next.
        let (w, by_shard) = late_by_shard(&[10, 10, 10, 1]).await;
        let quiet = &by_shard[3][0];
        let (r, requeued) = requeue_run(&w, 8, 100, seed).await;
        assert_eq!(r.examined, 8, "seed {seed}: {r:?}");
        assert!(
            requeued.contains(quiet),
            "seed {seed}: {quiet} starved: {requeued:?}"
        );
    }
}

/// A budget smaller than the shard count still reaches every shard over runs: the
/// first shard of a run is drawn from the run's seed.
#[tokio::test]
async fn the_first_shard_rotates_between_runs() {
    let (w, by_shard) = late_by_shard(&[1, 1, 1, 1]).await;
    let mut reached = BTreeSet::new();
    for seed in 0..32 {
        let (r, requeued) = requeue_run(&w, 1, 100, seed).await;
        assert_eq!(r.examined, 1, "{r:?}");
        reached.extend(requeued);
    }
    let all: BTreeSet<String> = by_shard.into_iter().flatten().collect();
    assert_eq!(reached, all, "every shard first in some run");
}

/// The index as a store in which one entry of every shard's first page will not
/// decode.
struct WithUndecodable<'a>(&'a testkit::memory::MemoryStore);

impl StuckIndex for WithUndecodable<'_> {
    async fn query_stuck(&self, q: &StuckQuery) -> Result<StuckPage, PortError> {
        let mut page = self.0.query_stuck(q).await?;
        if q.cursor.is_none() {
            page.undecodable.push(Undecodable {
                key: format!("TX-BAD-{}", q.shard),
                detail: "item attribute `status` = \"BOGUS\": not a status".to_owned(),
            });
        }
        Ok(page)
    }
}

impl Transitions for WithUndecodable<'_> {
    async fn transition(&self, write: &Write) -> Result<WriteOutcome, PortError> {
        self.0.transition(write).await
    }
}

impl Payloads for WithUndecodable<'_> {
    async fn payload(&self, id: &TransactionId) -> Result<Option<Payload>, PortError> {
        self.0.payload(id).await
    }
}

/// GIVEN undecodable entries in the index WHEN the reconciler runs THEN the healthy
/// stuck record of the same page is still requeued, each bad entry is counted
/// (`ReconcileUndecodable`) and reported, and the run is not an error.
#[tokio::test]
async fn an_undecodable_entry_is_skipped_counted_and_never_blocks_its_shard() {
    let w = World::new();
    w.start_and_crash_responding("TX-1", 1).await;
    w.set_time(at(200 * MIN));
    let metrics = Metrics::new("NS", "reconciler");
    let r = run_once(
        &domain::exec::ReconcilePorts {
            store: &WithUndecodable(&w.store),
            scheduler: &w.scheduler,
            retries: &w.retries,
            requests: &w.requests,
            notes: &w.store,
        },
        &w.settings,
        w.now(),
        None::<&runtime::breaker::BreakerGate<testkit::memory::MemoryBreaker>>,
        &Limits::default(),
        &Seeds::fixed(1),
        &metrics,
    )
    .await;
    let shards = u64::from(w.settings.shards);
    assert_eq!(r.undecodable, shards, "{r:?}");
    assert_eq!(metrics.count(names::RECONCILE_UNDECODABLE), shards);
    assert_eq!((r.errors, r.query_errors), (0, 0), "{r:?}");
    assert_eq!(
        r.count(Status::Scheduling, Action::Done(Ack::ReconcilerRequeued)),
        1,
        "{r:?}"
    );
    assert_eq!(w.retries.drain().len(), 1);
}
