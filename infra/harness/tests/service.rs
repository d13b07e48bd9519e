//! The harness function against moto: a script followed by attempt, a repeated key
//! recorded once and answered with the recorded reply, `NONE` recorded and not
//! answered, the delay carried as `DelaySeconds`, and what it cannot read sent
//! unchanged to the request DLQ.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use domain::{Attempt, Payload, Request, Response, TransactionId};
use harness::service::received;
use harness::{Harness, HarnessConfig};
use runtime::SqsEvent;
use serde_json::json;
use std::collections::HashMap;
use std::time::Duration;
use testkit::moto::{sdk_config, shared_endpoint, unique_prefix};

/// Every message on `url`, taken off it.
async fn drain(sqs: &aws_sdk_sqs::Client, url: &str) -> Vec<String> {
    testkit::moto::take_all(sqs, url).await.unwrap()
}
use testkit::provision::harness_table_definition;

struct World {
    harness: Harness,
    sqs: aws_sdk_sqs::Client,
    ddb: aws_sdk_dynamodb::Client,
    table: String,
    response_url: String,
    dlq_url: String,
}

async fn world(mix: &str, min_delay: u32, max_delay: u32) -> World {
    let endpoint = shared_endpoint().expect("moto_server on PATH (. scripts/tools.sh)");
    let sdk = sdk_config(&endpoint).await;
    let prefix = unique_prefix("harness");
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let ddb = aws_sdk_dynamodb::Client::new(&sdk);
    let table = format!("{prefix}-harness");
    testkit::provision::create_table(&ddb, &harness_table_definition(&table))
        .await
        .unwrap();
    let mut urls = vec![];
    for q in ["response", "request-dlq"] {
        let out = sqs
            .create_queue()
            .queue_name(format!("{prefix}-{q}"))
            .send()
            .await
            .unwrap();
        urls.push(out.queue_url().unwrap().to_owned());
    }
    let env: HashMap<&str, String> = HashMap::from([
        ("HARNESS_TABLE", table.clone()),
        ("RESPONSE_QUEUE_URL", urls[0].clone()),
        ("REQUEST_DLQ_URL", urls[1].clone()),
        ("HARNESS_MIX", mix.to_owned()),
        ("HARNESS_MIN_DELAY_SECONDS", min_delay.to_string()),
        ("HARNESS_MAX_DELAY_SECONDS", max_delay.to_string()),
    ]);
    let config = HarnessConfig::from_lookup(&|k| env.get(k).cloned()).unwrap();
    World {
        harness: Harness::new(&sdk, config),
        sqs,
        ddb,
        table,
        response_url: urls[0].clone(),
        dlq_url: urls[1].clone(),
    }
}

fn request(tx: &str, n: u32, payload: &str) -> String {
    Request::new(
        TransactionId::parse(tx).unwrap(),
        Attempt::new(n).unwrap(),
        Payload::from_json(payload).unwrap(),
    )
    .to_json()
}

/// The `SqsEvent` Lambda would deliver for these bodies.
fn event(bodies: &[String]) -> SqsEvent {
    let records: Vec<_> = bodies
        .iter()
        .enumerate()
        .map(|(i, b)| {
            json!({
                "messageId": format!("m{i}"),
                "receiptHandle": format!("r{i}"),
                "body": b,
                "attributes": {"ApproximateReceiveCount": "1"},
                "messageAttributes": {},
                "md5OfBody": "",
                "eventSource": "aws:sqs",
                "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:request",
                "awsRegion": "us-east-1"
            })
        })
        .collect();
    serde_json::from_value(json!({ "Records": records })).unwrap()
}

fn tx(s: &str) -> TransactionId {
    TransactionId::parse(s).unwrap()
}

fn a(n: u32) -> Attempt {
    Attempt::new(n).unwrap()
}

/// GIVEN scripted requests, one of them delivered twice WHEN the harness handles them
/// THEN each key is recorded once (the duplicate counted), every answer follows the
/// script, the duplicate is answered with the recorded reply, and NONE gets no answer.
#[tokio::test(flavor = "multi_thread")]
async fn scripts_are_followed_and_a_repeated_key_is_recorded_once_and_replayed() {
    let w = world("SUCCESS:1", 0, 0).await;
    let script = r#"{"order":1,"harness":{"answers":["CANCELLED","SUCCESS"]}}"#;
    let silent = r#"{"harness":{"answers":["NONE"]}}"#;
    let batch = vec![
        request("TX-S", 1, script),
        request("TX-S", 2, script),
        request("TX-N", 1, silent),
    ];
    let r = w.harness.invoke(event(&batch)).await.unwrap();
    assert!(r.batch_item_failures.is_empty(), "{r:?}");
    let again = w
        .harness
        .invoke(event(&[request("TX-S", 1, script)]))
        .await
        .unwrap();
    assert!(again.batch_item_failures.is_empty());

    let mut answers: Vec<(String, u32, String)> = drain(&w.sqs, &w.response_url)
        .await
        .iter()
        .map(|b| {
            let r = Response::parse(b).unwrap();
            (
                r.transaction_id.as_str().to_owned(),
                r.attempt.get(),
                r.outcome.as_str().to_owned(),
            )
        })
        .collect();
    answers.sort();
    assert_eq!(
        answers,
        vec![
            ("TX-S".into(), 1, "CANCELLED".into()),
            ("TX-S".into(), 1, "CANCELLED".into()),
            ("TX-S".into(), 2, "SUCCESS".into()),
        ]
    );
    let first = received(&w.ddb, &w.table, &tx("TX-S"), a(1))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(first.receive_count, 2);
    assert_eq!(first.reply, "CANCELLED");
    assert!(first.scripted);
    let second = received(&w.ddb, &w.table, &tx("TX-S"), a(2))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (second.receive_count, second.reply.as_str()),
        (1, "SUCCESS")
    );
    let none = received(&w.ddb, &w.table, &tx("TX-N"), a(1))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(none.reply, "NONE");
    assert_eq!(
        received(&w.ddb, &w.table, &tx("TX-S"), a(3)).await.unwrap(),
        None
    );
}

/// GIVEN a latency of 2 s WHEN the harness answers THEN the answer is not visible on
/// the response queue before its DelaySeconds, and is after.
#[tokio::test(flavor = "multi_thread")]
async fn the_latency_is_the_answers_delay_seconds() {
    let w = world("CANCELLED:1", 2, 2).await;
    let started = std::time::Instant::now();
    w.harness
        .invoke(event(&[request("TX-D", 1, r#"{"order":2}"#)]))
        .await
        .unwrap();
    assert!(
        drain(&w.sqs, &w.response_url).await.is_empty(),
        "visible before its delay"
    );
    let mut got = vec![];
    while got.is_empty() && started.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(250)).await;
        got = drain(&w.sqs, &w.response_url).await;
    }
    assert!(started.elapsed() >= Duration::from_secs(2));
    let r = Response::parse(&got[0]).unwrap();
    assert_eq!(r.reason.as_deref(), Some("NOT_AVAILABLE"));
    let rec = received(&w.ddb, &w.table, &tx("TX-D"), a(1))
        .await
        .unwrap()
        .unwrap();
    assert_eq!((rec.delay_seconds, rec.scripted), (2, false));
}

/// GIVEN a body that is not a request and a script the harness cannot follow WHEN
/// handled THEN both go unchanged to the request DLQ, nothing is answered or recorded.
#[tokio::test(flavor = "multi_thread")]
async fn what_it_cannot_read_goes_unchanged_to_the_request_dlq() {
    let w = world("SUCCESS:1", 0, 0).await;
    let bad_script = request("TX-B", 1, r#"{"harness":{"answers":["MAYBE"]}}"#);
    let not_a_request = r#"{"transaction_id":"TX-X","attempt":"one"}"#.to_owned();
    let r = w
        .harness
        .invoke(event(&[bad_script.clone(), not_a_request.clone()]))
        .await
        .unwrap();
    assert!(r.batch_item_failures.is_empty(), "{r:?}");
    let mut dlq = drain(&w.sqs, &w.dlq_url).await;
    dlq.sort();
    let mut want = vec![bad_script, not_a_request];
    want.sort();
    assert_eq!(dlq, want);
    assert!(drain(&w.sqs, &w.response_url).await.is_empty());
    assert_eq!(
        received(&w.ddb, &w.table, &tx("TX-B"), a(1)).await.unwrap(),
        None
    );
}
