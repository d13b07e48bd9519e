//! The disaster-recovery drill of `docs/recovery.md`, on a running local stack: many
//! transactions wait SCHEDULED, then every schedule of the group is gone at once (as
//! after a point-in-time restore of the state table, whose records no longer match
//! the schedules that exist); the reconciler alone rescues each one, and each ends
//! FAILED after exactly its two attempts — none lost, none sent twice.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

mod common;

use aws::config::{vars, StackNames};
use common::{options, retryctl, start_stack, wait_status};
use std::collections::BTreeMap;
use std::time::Duration;

const TRANSACTIONS: usize = 30;
/// Every retry waits this long: the schedules are deleted well before they fire.
const BACKOFF_SECONDS: u64 = 30;
const LONG: Duration = Duration::from_secs(180);

/// Every schedule of `group`, all pages.
async fn schedules(sched: &aws_sdk_scheduler::Client, group: &str) -> Vec<String> {
    testkit::moto::schedule_names(sched, group).await.unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn every_schedule_deleted_at_once_the_reconciler_rescues_every_transaction() {
    // Every answer CANCELLED; max 2 attempts: each transaction waits once, SCHEDULED.
    let mut o = options("drill", BACKOFF_SECONDS, 1.0);
    o.env
        .push((vars::RECONCILE_THRESHOLD_SECONDS.name, "1".into()));
    o.reconcile_every = Duration::from_secs(2);
    let s = start_stack(o);
    let ids: Vec<String> = (0..TRANSACTIONS).map(|n| format!("TX-DR-{n:03}")).collect();
    for id in &ids {
        let r = retryctl(
            &s,
            &["submit", id, "--payload", "{}", "--max-attempts", "2"],
        )
        .await;
        assert_eq!(r.code, 0, "{r:?}");
    }
    for id in &ids {
        wait_status(&s, id, "SCHEDULED", LONG).await;
    }

    // The restore: no schedule matches a record any more.
    let sdk = testkit::moto::sdk_config(&s.endpoint).await;
    let sched = aws_sdk_scheduler::Client::new(&sdk);
    let group = StackNames::new(&s.prefix).schedule_group;
    let before = schedules(&sched, &group).await;
    assert_eq!(before.len(), TRANSACTIONS, "one schedule each: {before:?}");
    for name in &before {
        sched
            .delete_schedule()
            .group_name(&group)
            .name(name)
            .send()
            .await
            .unwrap();
    }
    assert!(schedules(&sched, &group).await.is_empty());

    // Each one rescued by the reconciler, and ended after exactly its two attempts.
    for id in &ids {
        let v = wait_status(&s, id, "FAILED", LONG).await;
        assert_eq!(v["record"]["current_attempt"], 2, "{id}: {v}");
        let timeline = v["timeline"].as_array().unwrap();
        let mut sent: BTreeMap<String, usize> = BTreeMap::new();
        // A request leaves with its attempt on entering IN_PROGRESS from elsewhere
        // (IN_PROGRESS → IN_PROGRESS is the reconciler watching the answer deadline:
        // the same key, no new attempt).
        for e in timeline.iter().filter(|e| e["from"] != "IN_PROGRESS") {
            if let Some(k) = e["idempotency_key"].as_str() {
                *sent.entry(k.to_owned()).or_default() += 1;
            }
        }
        assert_eq!(
            sent,
            BTreeMap::from([(format!("{id}#1"), 1), (format!("{id}#2"), 1)]),
            "{id}: each attempt sent once: {v}"
        );
        let sending: Vec<&serde_json::Value> =
            timeline.iter().filter(|e| e["to"] == "SENDING").collect();
        assert_eq!(sending.len(), 1, "{id}: one retry: {v}");
        assert_eq!(sending[0]["origin"], "RECONCILER", "{id}: rescued: {v}");
    }
    let st = retryctl(&s, &["stats", "--json"]).await.json();
    for q in ["request", "response", "retry", "scheduler"] {
        assert_eq!(st["dlq_depths"][q], 0, "{q}: {st}");
    }
}
