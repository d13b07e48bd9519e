use super::*;
use domain::decide::{Ack, DropReason};
use domain::Attempt;
use std::sync::atomic::{AtomicUsize, Ordering};
use testkit::memory::MemoryDeadLetter;

fn event(records: &[(&str, &str)]) -> SqsEvent {
    let records: Vec<serde_json::Value> = records
        .iter()
        .map(|(id, body)| {
            serde_json::json!({
                "messageId": id,
                "receiptHandle": format!("rh-{id}"),
                "body": body,
                "attributes": {"ApproximateReceiveCount": "1"},
                "messageAttributes": {
                    "trace": {"stringValue": format!("t-{id}"), "dataType": "String", "stringListValues": [], "binaryListValues": []}
                },
                "md5OfBody": "x",
                "eventSource": "aws:sqs",
                "eventSourceARN": "arn:aws:sqs:us-east-1:000000000000:response",
                "awsRegion": "us-east-1"
            })
        })
        .collect();
    serde_json::from_value(serde_json::json!({ "Records": records })).unwrap()
}

fn ok(id: &str, attempt: u32, outcome: &str) -> String {
    format!(r#"{{"transaction_id":"{id}","attempt":{attempt},"outcome":"{outcome}"}}"#)
}

fn failures(r: &SqsBatchResponse) -> Vec<String> {
    r.batch_item_failures
        .iter()
        .map(|f| f.item_identifier.clone())
        .collect()
}

/// The batch of responses, each one that parses handled with success.
async fn all_succeed(e: SqsEvent, dlq: &impl DeadLetter, metrics: &Metrics) -> SqsBatchResponse {
    let done = |_: Response| async { Verdict::Done(Ack::Succeeded) };
    process_batch(e, &BatchOptions::default(), dlq, metrics, done)
        .await
        .unwrap()
}

#[tokio::test]
async fn only_the_records_to_retry_are_reported() {
    let dlq = MemoryDeadLetter::new();
    let metrics = Metrics::new("NS", "test");
    let e = event(&[
        ("m1", &ok("TX-1", 1, "SUCCESS")),
        ("m2", &ok("TX-RETRY", 1, "SUCCESS")),
        ("m3", &ok("TX-DROP", 1, "SUCCESS")),
    ]);
    let r = process_batch(
        e,
        &BatchOptions::default(),
        &dlq,
        &metrics,
        |m: Response| async move {
            match m.transaction_id.as_str() {
                "TX-RETRY" => Verdict::Retry {
                    error: "throttled".into(),
                },
                "TX-DROP" => Verdict::Dropped(DropReason::LateResponse {
                    attempt: Attempt::FIRST,
                    current: Attempt::new(2).unwrap(),
                }),
                _ => Verdict::Done(Ack::Succeeded),
            }
        },
    )
    .await
    .unwrap();
    assert_eq!(failures(&r), ["m2"]);
    assert!(dlq.messages().is_empty());
    assert_eq!(metrics.count(names::RECORDS), 3);
    assert_eq!(metrics.count(names::RETRYABLE_ERRORS), 1);
    // An empty list is what SQS reads as "all succeeded": the JSON shape Lambda returns.
    let json = serde_json::to_value(&r).unwrap();
    assert_eq!(
        json,
        serde_json::json!({"batchItemFailures": [{"itemIdentifier": "m2"}]})
    );
}

#[tokio::test]
async fn a_malformed_body_goes_to_the_dlq_unchanged_and_is_acknowledged() {
    let dlq = MemoryDeadLetter::new();
    let metrics = Metrics::new("NS", "test");
    let bad = r#"{"transaction_id":"TX-2","attempt":0,"outcome":"SUCCESS"}"#;
    let e = event(&[
        ("m1", &ok("TX-1", 1, "SUCCESS")),
        ("m2", bad),
        ("m3", "not json"),
    ]);
    let original = e.records.clone();
    let handled = AtomicUsize::new(0);
    let r = process_batch(
        e,
        &BatchOptions::default(),
        &dlq,
        &metrics,
        |_: Response| {
            handled.fetch_add(1, Ordering::SeqCst);
            async { Verdict::Done(Ack::Succeeded) }
        },
    )
    .await
    .unwrap();
    assert!(failures(&r).is_empty(), "permanent errors are acknowledged");
    assert_eq!(
        handled.load(Ordering::SeqCst),
        1,
        "only the good record reached the handler"
    );
    let mut sent = dlq.messages();
    sent.sort_by(|a, b| a.body.cmp(&b.body));
    let mut want: Vec<Undeliverable> = original
        .iter()
        .filter(|o| matches!(o.message_id.as_deref(), Some("m2" | "m3")))
        .map(undeliverable)
        .collect();
    want.sort_by(|a, b| a.body.cmp(&b.body));
    assert_eq!(sent, want, "bodies and attributes unchanged");
    assert!(sent
        .iter()
        .all(|m| m.attributes["trace"].data_type == "String"));
    assert_eq!(metrics.count(names::PERMANENT_ERRORS), 2);
    assert_eq!(metrics.count("PermanentErrorMalformedBody"), 2);
    assert_eq!(metrics.count(names::DEAD_LETTERED), 2);
}

#[tokio::test]
async fn a_failed_dlq_send_turns_into_a_batch_item_failure() {
    let dlq = MemoryDeadLetter::new();
    dlq.set_failing(true);
    let metrics = Metrics::new("NS", "test");
    let e = event(&[("m1", "{}"), ("m2", &ok("TX-1", 1, "SUCCESS"))]);
    let r = all_succeed(e, &dlq, &metrics).await;
    assert_eq!(failures(&r), ["m1"], "never lost: SQS redelivers it");
    assert_eq!(metrics.count(names::DEAD_LETTER_FAILURES), 1);
}

#[tokio::test]
async fn a_panicking_record_fails_alone() {
    let dlq = MemoryDeadLetter::new();
    let metrics = Metrics::new("NS", "test");
    let e = event(&[
        ("m1", &ok("TX-1", 1, "SUCCESS")),
        ("m2", &ok("TX-PANIC", 1, "SUCCESS")),
        ("m3", &ok("TX-3", 1, "SUCCESS")),
    ]);
    let done = AtomicUsize::new(0);
    let r = process_batch(
        e,
        &BatchOptions { concurrency: 3 },
        &dlq,
        &metrics,
        |m: Response| {
            let done = &done;
            async move {
                tokio::task::yield_now().await;
                if m.transaction_id.as_str() == "TX-PANIC" {
                    panic!("bug while handling {}", m.transaction_id);
                }
                done.fetch_add(1, Ordering::SeqCst);
                Verdict::Done(Ack::Succeeded)
            }
        },
    )
    .await
    .unwrap();
    assert_eq!(failures(&r), ["m2"]);
    assert_eq!(done.load(Ordering::SeqCst), 2, "the neighbours completed");
    assert_eq!(metrics.count(names::RECORD_PANICS), 1);
    assert!(
        dlq.messages().is_empty(),
        "a panic is retried, not dead-lettered"
    );
}

#[tokio::test]
async fn concurrency_is_bounded() {
    let dlq = MemoryDeadLetter::new();
    let metrics = Metrics::new("NS", "test");
    let bodies: Vec<(String, String)> = (0..20)
        .map(|i| (format!("m{i}"), ok(&format!("TX-{i}"), 1, "SUCCESS")))
        .collect();
    let refs: Vec<(&str, &str)> = bodies
        .iter()
        .map(|(a, b)| (a.as_str(), b.as_str()))
        .collect();
    let in_flight = AtomicUsize::new(0);
    let peak = AtomicUsize::new(0);
    let r = process_batch(
        event(&refs),
        &BatchOptions { concurrency: 4 },
        &dlq,
        &metrics,
        |_: Response| {
            let (in_flight, peak) = (&in_flight, &peak);
            async move {
                let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                peak.fetch_max(now, Ordering::SeqCst);
                for _ in 0..3 {
                    tokio::task::yield_now().await;
                }
                in_flight.fetch_sub(1, Ordering::SeqCst);
                Verdict::Done(Ack::Succeeded)
            }
        },
    )
    .await
    .unwrap();
    assert!(failures(&r).is_empty());
    assert_eq!(peak.load(Ordering::SeqCst), 4);
    assert_eq!(metrics.count(names::RECORDS), 20);
}

#[tokio::test]
async fn a_record_to_retry_without_message_id_fails_the_batch() {
    let dlq = MemoryDeadLetter::new();
    let metrics = Metrics::new("NS", "test");
    let e: SqsEvent = serde_json::from_value(serde_json::json!({
        "Records": [{"body": ok("TX-1", 1, "SUCCESS")}]
    }))
    .unwrap();
    let r = process_batch(
        e,
        &BatchOptions::default(),
        &dlq,
        &metrics,
        |_: Response| async { Verdict::Retry { error: "x".into() } },
    )
    .await;
    assert_eq!(r, Err(BatchError::MissingMessageId { index: 0 }));
}

struct PanickingDeadLetter;

impl DeadLetter for PanickingDeadLetter {
    async fn send(&self, _: &Undeliverable) -> Result<(), PortError> {
        panic!("adapter bug");
    }
}

#[tokio::test]
async fn a_panic_while_dead_lettering_fails_only_that_record() {
    let metrics = Metrics::new("NS", "test");
    let e = event(&[("m1", "{"), ("m2", &ok("TX-1", 1, "SUCCESS"))]);
    let r = all_succeed(e, &PanickingDeadLetter, &metrics).await;
    assert_eq!(failures(&r), ["m1"]);
    assert_eq!(metrics.count(names::RECORD_PANICS), 1);
    assert_eq!(metrics.count(names::DEAD_LETTER_FAILURES), 1);
}

/// A received message becomes the dead-letter port's message as it came: body, every
/// attribute, a missing data type inferred from what the attribute carries.
#[test]
fn a_received_message_is_kept_as_it_came() {
    let m: SqsMessage = serde_json::from_value(serde_json::json!({
        "messageId": "m1",
        "body": "{not json",
        "messageAttributes": {
            "s": {"stringValue": "v", "stringListValues": [], "binaryListValues": []},
            "b": {"binaryValue": "AQID", "stringListValues": [], "binaryListValues": []},
            "n": {"stringValue": "42", "dataType": "Number.int", "stringListValues": [], "binaryListValues": []}
        }
    }))
    .unwrap();
    let u = undeliverable(&m);
    assert_eq!(u.body, "{not json");
    assert_eq!(u.attributes["s"].data_type, "String");
    assert_eq!(u.attributes["s"].string_value.as_deref(), Some("v"));
    assert_eq!(u.attributes["b"].data_type, "Binary");
    assert_eq!(u.attributes["b"].binary_value, Some(vec![1, 2, 3]));
    assert_eq!(u.attributes["n"].data_type, "Number.int");
    assert_eq!(u.attributes.len(), 3);
}
