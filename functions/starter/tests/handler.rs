//! The starter over the memory adapters: a message starts its transaction exactly as
//! the library operation does, a repeat is acknowledged, a message that can never
//! start goes to the intake DLQ unchanged, a transient failure is redelivered.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use domain::exec::StartPorts;
use domain::ports::{Clock, PortError, RequestPublisher};
use domain::{MaxAttempts, Payload, Request, Status, Timestamp, TransactionId};
use runtime::function::SqsFunction;
use runtime::metrics::{names, Metrics};
use runtime::settings::{Seeds, Settings};
use runtime::{BatchOptions, SqsBatchResponse};
use starter::Starter;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use testkit::memory::{ManualClock, MemoryDeadLetter, MemoryQueue, MemoryStore};

const DEFAULT_MAX: u32 = 6;

fn settings() -> Settings {
    Settings {
        shards: 3,
        answer_timeout: Duration::from_secs(120),
        reconcile_threshold: Duration::from_secs(30),
        ..Settings::default()
    }
}

fn starter<'a, Rq: RequestPublisher>(
    store: &'a MemoryStore,
    requests: Rq,
    dlq: &'a MemoryDeadLetter,
    clock: &'a ManualClock,
) -> Starter<&'a MemoryStore, Rq, &'a MemoryDeadLetter, &'a ManualClock> {
    Starter {
        store,
        requests,
        default_max_attempts: MaxAttempts::new(DEFAULT_MAX).unwrap(),
        pacer: None,
        function: SqsFunction {
            dead_letter: dlq,
            clock,
            settings: settings(),
            batch: BatchOptions::default(),
            seeds: Seeds::fixed(1),
            namespace: "DeferredRetry".into(),
        },
    }
}

/// One starter's surroundings: a clock at 1,000 s, the memory adapters, its metrics.
struct World {
    clock: ManualClock,
    store: MemoryStore,
    requests: MemoryQueue<Request>,
    dlq: MemoryDeadLetter,
    metrics: Metrics,
}

impl World {
    fn new() -> Self {
        World {
            clock: ManualClock::at(Timestamp::from_millis(1_000_000)),
            store: MemoryStore::new(),
            requests: MemoryQueue::new(),
            dlq: MemoryDeadLetter::new(),
            metrics: Metrics::new("NS", starter::FUNCTION),
        }
    }

    /// `bodies` as one SQS event through the starter publishing to `requests`.
    async fn deliver(&self, bodies: &[&str]) -> SqsBatchResponse {
        self.deliver_to(&self.requests, bodies).await
    }

    /// `bodies` as one SQS event through the starter publishing to `publisher`.
    async fn deliver_to<Rq: RequestPublisher>(
        &self,
        publisher: Rq,
        bodies: &[&str],
    ) -> SqsBatchResponse {
        starter(&self.store, publisher, &self.dlq, &self.clock)
            .handle_event(testkit::events::sqs(bodies), &self.metrics)
            .await
            .unwrap()
    }
}

fn id(s: &str) -> TransactionId {
    TransactionId::parse(s).unwrap()
}

fn start(tx: &str, extra: &str) -> String {
    format!(
        r#"{{"schema_version":1,"transaction_id":"{tx}","payload":{{"order":"{tx}", "amount": 12.50}}{extra}}}"#
    )
}

/// A started transaction is the record and the request the library operation makes
/// from the same input and settings, field for field; the deployment's default
/// budget applies unless the message gives one.
#[tokio::test]
async fn a_message_starts_the_transaction_as_the_library_does() {
    let w = World::new();
    let (store, requests, dlq, m) = (&w.store, &w.requests, &w.dlq, &w.metrics);
    let r = w
        .deliver(&[
            &start("TX-1", ""),
            &start("TX-2", r#","max_attempts":2,"correlation_id":"req-9""#),
        ])
        .await;
    assert!(r.batch_item_failures.is_empty(), "{r:?}");
    assert!(dlq.messages().is_empty());
    assert_eq!(m.count("AckStarted"), 2, "{m:?}");
    assert_eq!(m.count(names::REQUESTS_PUBLISHED), 2, "{m:?}");

    // The library start, same input and settings, on a store of its own.
    let (lib_store, lib_requests) = (MemoryStore::new(), MemoryQueue::new());
    let ports = StartPorts {
        store: &lib_store,
        requests: &lib_requests,
    };
    let ctx = settings().context(w.clock.now());
    for (tx, max, correlation) in [("TX-1", DEFAULT_MAX, None), ("TX-2", 2, Some("req-9"))] {
        let payload =
            Payload::from_json(&format!(r#"{{"order":"{tx}", "amount": 12.50}}"#)).unwrap();
        let correlation = correlation.map(|c| domain::CorrelationId::new(c).unwrap());
        runtime::ops::start_correlated(
            &ports,
            id(tx),
            payload,
            MaxAttempts::new(max).unwrap(),
            correlation.clone(),
            settings().answer_timeout,
            &ctx,
        )
        .await
        .unwrap();
        let ours = store.record(&id(tx)).unwrap();
        assert_eq!(Some(&ours), lib_store.record(&id(tx)).as_ref(), "{tx}");
        assert_eq!(ours.status, Status::InProgress);
        assert_eq!(ours.max_attempts.get(), max);
        assert_eq!(ours.correlation_id, correlation, "{tx}");
    }
    assert_eq!(requests.messages(), lib_requests.messages());
    assert_eq!(
        requests.messages()[1]
            .correlation_id
            .as_ref()
            .map(|c| c.as_str()),
        Some("req-9")
    );
    let first = &requests.messages()[0];
    assert_eq!(first.idempotency_key.as_str(), "TX-1#1");
    assert_eq!(
        first.payload.as_json(),
        r#"{"order":"TX-1", "amount": 12.50}"#,
        "the payload's exact text"
    );
}

/// The same message twice (in one batch, then again later) starts one transaction:
/// the repeats are acknowledged, nothing goes to the DLQ, and any request published
/// again carries the same key.
#[tokio::test]
async fn a_repeated_message_is_harmless() {
    let w = World::new();
    let (store, requests, dlq, m) = (&w.store, &w.requests, &w.dlq, &w.metrics);
    let body = start("TX-1", "");
    let r = w.deliver(&[&body]).await;
    assert!(r.batch_item_failures.is_empty());
    w.clock.advance_millis(5_000);
    let r = w.deliver(&[&body, &body]).await;
    assert!(r.batch_item_failures.is_empty(), "{r:?}");
    assert_eq!(m.count("AckStarted"), 1, "{m:?}");
    assert_eq!(m.count("AckAlreadyStarted"), 2, "{m:?}");
    assert!(dlq.messages().is_empty());
    assert_eq!(store.records().len(), 1);
    assert_eq!(
        store.calls().creates,
        3,
        "each delivery tried the conditional create"
    );
    let keys: Vec<String> = requests
        .messages()
        .iter()
        .map(|r| r.idempotency_key.as_str().to_owned())
        .collect();
    assert!(keys.iter().all(|k| k == "TX-1#1"), "{keys:?}");
}

/// A message that can never start — malformed, or a repeat with another payload —
/// goes to the intake DLQ unchanged and is acknowledged (never redelivered for
/// ever); the good messages of the same batch start.
#[tokio::test]
async fn a_poison_message_goes_to_the_dlq_and_its_neighbours_start() {
    let w = World::new();
    let (store, requests, dlq, m) = (&w.store, &w.requests, &w.dlq, &w.metrics);
    let bad_budget = start("TX-2", r#","max_attempts":0"#);
    let other_payload =
        r#"{"schema_version":1,"transaction_id":"TX-1","payload":{"order":"changed"}}"#;
    let bodies = [
        start("TX-1", "").as_str().to_owned(),
        "not json".to_owned(),
        bad_budget.clone(),
        start("TX-3", r#","deadline":"2030-01-01T00:00:00Z""#),
        start("TX-4", ""),
    ];
    let refs: Vec<&str> = bodies.iter().map(String::as_str).collect();
    let r = w.deliver(&refs).await;
    assert!(r.batch_item_failures.is_empty(), "{r:?}");
    let r = w.deliver(&[other_payload]).await;
    assert!(r.batch_item_failures.is_empty(), "{r:?}");

    let dead: Vec<String> = dlq.messages().into_iter().map(|u| u.body).collect();
    assert_eq!(
        dead,
        [
            "not json".to_owned(),
            bad_budget,
            bodies[3].clone(),
            other_payload.to_owned()
        ]
    );
    assert_eq!(m.count(names::PERMANENT_ERRORS), 4, "{m:?}");
    assert_eq!(m.count(names::DEAD_LETTERED), 4, "{m:?}");
    assert_eq!(m.count("PermanentErrorMalformedBody"), 3, "{m:?}");
    assert_eq!(m.count("PermanentErrorPayloadMismatch"), 1, "{m:?}");
    let started: Vec<String> = store
        .records()
        .iter()
        .map(|r| r.transaction_id.as_str().to_owned())
        .collect();
    assert_eq!(started, ["TX-1", "TX-4"]);
    // The refused repeat changed nothing.
    let kept = requests.messages();
    assert!(kept
        .iter()
        .all(|r| !r.payload.as_json().contains("changed")));
}

/// A publisher that fails while `down` is set.
struct Flaky<'a> {
    down: AtomicBool,
    queue: &'a MemoryQueue<Request>,
}

impl RequestPublisher for Flaky<'_> {
    async fn publish(&self, request: &Request) -> Result<(), PortError> {
        if self.down.load(Ordering::SeqCst) {
            return Err(PortError::retryable("SendMessage", "throttled"));
        }
        self.queue.publish(request).await
    }
}

/// A transient failure after the create (the request queue throttled) is a batch
/// item failure, not a dead letter: the redelivery finds the transaction started
/// and publishes attempt 1.
#[tokio::test]
async fn a_transient_failure_is_redelivered_and_the_redelivery_publishes() {
    let w = World::new();
    let (store, queue, dlq, m) = (&w.store, &w.requests, &w.dlq, &w.metrics);
    let flaky = Flaky {
        down: AtomicBool::new(true),
        queue,
    };
    let body = start("TX-1", "");
    let r = w.deliver_to(&flaky, &[&body]).await;
    let failed: Vec<&str> = r
        .batch_item_failures
        .iter()
        .map(|f| f.item_identifier.as_str())
        .collect();
    assert_eq!(failed, ["m0"]);
    assert!(dlq.messages().is_empty());
    assert!(queue.is_empty());
    assert_eq!(
        store.record(&id("TX-1")).unwrap().status,
        Status::InProgress
    );
    flaky.down.store(false, Ordering::SeqCst);
    let r = w.deliver_to(&flaky, &[&body]).await;
    assert!(r.batch_item_failures.is_empty());
    assert_eq!(queue.messages().len(), 1);
    assert_eq!(m.count("AckAlreadyStarted"), 1, "{m:?}");
}
