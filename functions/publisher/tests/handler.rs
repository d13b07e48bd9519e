//! The publisher's handler over in-memory ports, fed stream events built from the
//! records outbox mode's starter writes (SENDING, attempt 1): each request published
//! once, the record marked IN_PROGRESS; a redelivered batch publishes nothing; a
//! record that fails is the batch item failure, in stream order.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use domain::decide::{Ack, Delivery};
use domain::exec::StartPorts;
use domain::{MaxAttempts, Payload, Request, Status, Timestamp, TransactionId, TransactionRecord};
use publisher::{Publisher, UNDECODABLE_IMAGES};
use runtime::metrics::Metrics;
use runtime::settings::{Seeds, Settings};
use std::time::Duration;
use testkit::events::stream;
use testkit::memory::{ManualClock, MemoryQueue, MemoryStore};

const T0: i64 = 1_790_000_000_000;

fn id(s: &str) -> TransactionId {
    TransactionId::parse(s).unwrap()
}

fn settings() -> Settings {
    Settings {
        delivery: Delivery::Outbox,
        answer_timeout: Duration::from_secs(3600),
        ..Settings::default()
    }
}

type MemoryPublisher<'a> =
    Publisher<&'a MemoryStore, &'a MemoryQueue<Request>, &'a MemoryStore, &'a ManualClock>;

fn publisher<'a>(
    store: &'a MemoryStore,
    requests: &'a MemoryQueue<Request>,
    clock: &'a ManualClock,
) -> MemoryPublisher<'a> {
    Publisher {
        store,
        requests,
        notes: store,
        clock,
        settings: settings(),
        concurrency: 4,
        seeds: Seeds::fixed(7),
        pacer: None,
        namespace: "DeferredRetry".into(),
    }
}

/// Starts `ids` in outbox mode: each record is created SENDING(1), nothing published.
async fn started(store: &MemoryStore, ids: &[&str]) -> Vec<TransactionRecord> {
    let nothing = MemoryQueue::<Request>::new();
    let ports = StartPorts {
        store,
        requests: &nothing,
    };
    let ctx = settings().context(Timestamp::from_millis(T0));
    let mut records = Vec::new();
    for tx in ids {
        let payload = Payload::from_json(&format!(r#"{{"order":"{tx}"}}"#)).unwrap();
        let done = runtime::ops::start_transaction(
            &ports,
            id(tx),
            payload,
            MaxAttempts::new(3).unwrap(),
            Duration::from_secs(3600),
            &ctx,
        )
        .await
        .unwrap();
        assert_eq!(done.ack, Ack::Started);
        records.push(store.record(&id(tx)).unwrap());
    }
    assert!(
        nothing.messages().is_empty(),
        "outbox mode: the start publishes nothing"
    );
    records
}

/// GIVEN two records left SENDING by the starter WHEN their stream records arrive
/// THEN each request is published once (attempt 1, round 0) and each record is
/// IN_PROGRESS with its answer deadline, the claim cleared; WHEN Lambda delivers the
/// same batch again THEN nothing is published again and nothing fails.
#[tokio::test]
async fn each_sending_record_is_published_once_and_marked_in_progress() {
    let (store, requests) = (MemoryStore::new(), MemoryQueue::<Request>::new());
    let clock = ManualClock::at(Timestamp::from_millis(T0 + 1_000));
    let records = started(&store, &["TX-1", "TX-2"]).await;
    assert!(records.iter().all(|r| r.status == Status::Sending));
    let event = stream(&[(None, &records[0]), (None, &records[1])], 1).unwrap();
    let p = publisher(&store, &requests, &clock);

    let m = Metrics::new("DeferredRetry", publisher::FUNCTION);
    let response = p.handle_event(&event, &m).await;
    assert!(response.batch_item_failures.is_empty());
    let mut sent: Vec<(String, u32, Option<u32>)> = requests
        .messages()
        .iter()
        .map(|r| (r.transaction_id.to_string(), r.attempt.get(), r.round))
        .collect();
    sent.sort();
    assert_eq!(
        sent,
        [("TX-1".into(), 1, Some(0)), ("TX-2".into(), 1, Some(0))]
    );
    for tx in ["TX-1", "TX-2"] {
        let r = store.record(&id(tx)).unwrap();
        assert_eq!(r.status, Status::InProgress, "{tx}");
        assert_eq!(r.publishing_since, None, "{tx}: the claim is cleared");
        assert_eq!(
            r.answer_due_at,
            Some(Timestamp::from_millis(T0 + 1_000 + 3_600_000)),
            "{tx}"
        );
    }
    assert_eq!(m.count("AckPublished"), 2);

    let again = Metrics::new("DeferredRetry", publisher::FUNCTION);
    let response = p.handle_event(&event, &again).await;
    assert!(response.batch_item_failures.is_empty());
    assert_eq!(
        requests.messages().len(),
        2,
        "a redelivered batch publishes nothing"
    );
    assert_eq!(again.count("DropAlreadyPublished"), 2);
}

/// GIVEN a batch whose second record cannot be published (its payload is gone) and
/// whose third does not decode WHEN it is handled THEN the first is published, and
/// the batch item failure is the second's sequence number, the first failure in
/// stream order, so Lambda retries from it; a batch whose only bad record is the
/// undecodable one reports that one.
#[tokio::test]
async fn the_first_failed_record_in_stream_order_is_reported() {
    let (store, requests) = (MemoryStore::new(), MemoryQueue::<Request>::new());
    let clock = ManualClock::at(Timestamp::from_millis(T0 + 1_000));
    let records = started(&store, &["TX-1", "TX-2"]).await;
    // TX-3: SENDING, but no payload stored.
    let orphan = TransactionRecord::started_queued(
        id("TX-3"),
        MaxAttempts::new(3).unwrap(),
        Timestamp::from_millis(T0),
        8,
    );
    store.put(orphan.clone(), None);
    let mut event = stream(
        &[(None, &records[0]), (None, &orphan), (None, &records[1])],
        10,
    )
    .unwrap();
    event.records[2].change.new_image.insert(
        "status".into(),
        serde_json::from_str(r#"{"S":"NOT_A_STATUS"}"#).unwrap(),
    );
    let p = publisher(&store, &requests, &clock);
    let m = Metrics::new("DeferredRetry", publisher::FUNCTION);
    let response = p.handle_event(&event, &m).await;
    let reported: Vec<_> = response
        .batch_item_failures
        .iter()
        .map(|f| f.item_identifier.clone())
        .collect();
    assert_eq!(reported, [event.records[1].change.sequence_number.clone()]);
    let sent: Vec<String> = requests
        .messages()
        .iter()
        .map(|r| r.transaction_id.to_string())
        .collect();
    assert_eq!(sent, ["TX-1"]);
    assert_eq!(m.count(UNDECODABLE_IMAGES), 1);

    let mut only_bad = event.clone();
    only_bad.records.drain(..2);
    let response = p.handle_event(&only_bad, &m).await;
    assert_eq!(
        response.batch_item_failures[0].item_identifier,
        event.records[2].change.sequence_number
    );
}
