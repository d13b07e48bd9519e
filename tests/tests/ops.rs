//! The library operations: start, resolve, replay.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use domain::decide::{Ack, Rejection};
use domain::exec::{ReplayPorts, ResolvePorts, StartPorts};
use domain::{MaxAttempts, Outcome, Payload, Status, TransactionId};
use runtime::ops::{replay, resolve, start_transaction, OpError};

fn payload(s: &str) -> Payload {
    Payload::from_json(s).unwrap()
}

/// Starting twice with the same payload is harmless: one record, one key; attempt 1
/// is published again only while it is still current. A repeat with another payload
/// publishes nothing and is refused.
#[tokio::test]
async fn start_is_idempotent_and_never_publishes_a_different_payload() {
    let w = World::new();
    let ports = StartPorts {
        store: &w.store,
        requests: &w.requests,
    };
    let ctx = w.settings.context(w.now());
    let max = MaxAttempts::new(4).unwrap();
    let p = payload(r#"{"sku":"A-1","qty":2}"#);
    let timeout = ctx.rules.answer_timeout;
    let first = start_transaction(&ports, id("TX-7"), p.clone(), max, timeout, &ctx)
        .await
        .unwrap();
    assert_eq!(first.ack, Ack::Started);
    assert!(first.published());
    let again = start_transaction(&ports, id("TX-7"), p.clone(), max, timeout, &ctx)
        .await
        .unwrap();
    assert_eq!(again.ack, Ack::AlreadyStarted);
    let other = start_transaction(
        &ports,
        id("TX-7"),
        payload(r#"{"sku":"B-2"}"#),
        max,
        timeout,
        &ctx,
    )
    .await
    .unwrap_err();
    assert_eq!(
        other,
        OpError::Rejected(Rejection::PayloadMismatch {
            transaction_id: id("TX-7")
        })
    );
    assert!(!other.is_retryable());
    let sent = w.requests.messages();
    assert!(
        sent.iter().all(|r| r.payload == p),
        "only the first payload ever left"
    );
    assert!(sent.iter().all(|r| r.idempotency_key.as_str() == "TX-7#1"));
    let rec = w.record("TX-7").await;
    assert_eq!(rec.status, Status::InProgress);
    assert_eq!(rec.max_attempts, max);
    assert_eq!(w.audit_path("TX-7").await, vec!["*>IN_PROGRESS@1"]);
}

/// Once attempt 1 is answered, starting again publishes nothing.
#[tokio::test]
async fn start_after_progress_publishes_nothing() {
    let w = World::new();
    w.start("TX-8", 3).await;
    w.respond("TX-8", 1, Outcome::Cancelled).await;
    let before = w.requests.len();
    w.start("TX-8", 3).await;
    assert_eq!(w.requests.len(), before);
}

/// `resolve` of `tx` over the world's store and scheduler, now.
async fn resolved(w: &World, tx: TransactionId) -> Result<runtime::ops::Done, OpError> {
    let ports = ResolvePorts {
        store: &w.store,
        scheduler: &w.scheduler,
    };
    resolve(&ports, tx, &w.settings.context(w.now())).await
}

/// Resolved by other means: SCHEDULED → SUCCEEDED and the schedule deleted; a second
/// call says "already resolved"; an unknown transaction is refused.
#[tokio::test]
async fn resolve_by_other_means() {
    let w = World::new();
    w.start("TX-9", 3).await;
    w.respond("TX-9", 1, Outcome::Cancelled).await;
    assert_eq!(w.scheduler.live().len(), 1);
    let done = resolved(&w, id("TX-9")).await.unwrap();
    assert_eq!(done.ack, Ack::Resolved);
    assert_eq!(w.status("TX-9").await, Status::Succeeded);
    assert!(w.scheduler.live().is_empty(), "schedule deleted");
    let again = resolved(&w, id("TX-9")).await.unwrap();
    assert_eq!(again.ack, Ack::AlreadyResolved);
    let unknown = resolved(&w, id("TX-NOPE")).await.unwrap_err();
    assert!(matches!(
        unknown,
        OpError::Rejected(Rejection::UnknownTransaction { .. })
    ));
    assert_eq!(
        w.audit_path("TX-9").await.last().unwrap(),
        "SCHEDULED>SUCCEEDED@1"
    );
}

/// Resolve also works from SCHEDULING when the schedule was never created.
#[tokio::test]
async fn resolve_from_scheduling_with_no_schedule() {
    let w = World::new();
    w.start_and_crash_responding("TX-10", 1).await;
    let done = resolved(&w, id("TX-10")).await.unwrap();
    assert_eq!(done.ack, Ack::Resolved);
    assert_eq!(w.status("TX-10").await, Status::Succeeded);
}

/// Replay: FAILED → SCHEDULING with more attempts and a retry event for the next one;
/// B then publishes it.
#[tokio::test]
async fn replay_a_failed_transaction() {
    let w = World::new();
    w.start("TX-11", 1).await;
    w.respond("TX-11", 1, Outcome::Cancelled).await;
    assert_eq!(w.status("TX-11").await, Status::Failed);
    let ports = ReplayPorts {
        store: &w.store,
        retries: &w.retries,
    };
    let ctx = w.settings.context(w.now());
    let done = replay(&ports, id("TX-11"), 2, &ctx).await.unwrap();
    assert_eq!(done.ack, Ack::Replayed);
    assert!(done.published());
    let rec = w.record("TX-11").await;
    assert_eq!(rec.status, Status::Scheduling);
    assert_eq!(rec.max_attempts.get(), 3);
    let events = w.retries.drain();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].origin, domain::Origin::Operator);
    let v = w.retry(&events[0]).await;
    assert_eq!(v.label(), "published");
    assert!(w.distinct_keys().await.contains("TX-11#2"));
    // Replaying something not FAILED is refused.
    let err = replay(&ports, id("TX-11"), 2, &ctx).await.unwrap_err();
    assert!(matches!(
        err,
        OpError::Rejected(Rejection::NotReplayable { .. })
    ));
}
