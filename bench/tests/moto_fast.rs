//! `scripts/moto_server_patched.py` (the moto server every local run uses) answers a sequence of SQS
//! calls exactly as stock `moto_server` does: queue counters (visible, in flight,
//! delayed) through GetQueueAttributes by name and with `All`, what is received under
//! visibility timeouts, and redrive to the dead-letter queue after maxReceiveCount.
//! Its fixes must change speed only.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use aws_sdk_sqs::types::{QueueAttributeName, SendMessageBatchRequestEntry};
use std::collections::BTreeMap;
use testkit::moto::MotoServer;

const FAST: &str = MotoServer::PROGRAM;

/// Counters of a queue, asked for by name.
async fn counters(sqs: &aws_sdk_sqs::Client, url: &str) -> (String, String, String) {
    let out = sqs
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesDelayed)
        .send()
        .await
        .unwrap();
    let a = out.attributes().unwrap_or_else(|| panic!("{url}: {out:?}"));
    let get = |k: QueueAttributeName| a.get(&k).cloned().unwrap_or_default();
    (
        get(QueueAttributeName::ApproximateNumberOfMessages),
        get(QueueAttributeName::ApproximateNumberOfMessagesNotVisible),
        get(QueueAttributeName::ApproximateNumberOfMessagesDelayed),
    )
}

/// Every attribute but the timestamps, asked for with `All`.
async fn all_attributes(sqs: &aws_sdk_sqs::Client, url: &str) -> BTreeMap<String, String> {
    let out = sqs
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(QueueAttributeName::All)
        .send()
        .await
        .unwrap();
    out.attributes()
        .unwrap()
        .iter()
        .filter(|(k, _)| !k.as_str().ends_with("Timestamp"))
        .map(|(k, v)| (k.as_str().to_owned(), v.clone()))
        .collect()
}

/// Runs the sequence on a server; returns every observation, in order.
async fn observe(program: &str) -> Vec<String> {
    let moto = MotoServer::launch(program)
        .await
        .expect("moto (. scripts/tools.sh)");
    let sdk = testkit::moto::sdk_config(&moto.endpoint_url()).await;
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let mut seen = Vec::new();
    let create = |name: &'static str, attributes: Vec<(QueueAttributeName, String)>| {
        let sqs = sqs.clone();
        async move {
            let mut call = sqs.create_queue().queue_name(name);
            for (k, v) in attributes {
                call = call.attributes(k, v);
            }
            call.send().await.unwrap().queue_url().unwrap().to_owned()
        }
    };
    let dlq = create("dlq", vec![]).await;
    let dlq_arn = format!(
        "arn:aws:sqs:{}:123456789012:dlq",
        testkit::moto::LOCAL_REGION
    );
    let url = create(
        "q",
        vec![
            (
                QueueAttributeName::RedrivePolicy,
                format!(r#"{{"deadLetterTargetArn":"{dlq_arn}","maxReceiveCount":"2"}}"#),
            ),
            (QueueAttributeName::MessageRetentionPeriod, "600".into()),
        ],
    )
    .await;
    for batch in 0..3 {
        let entries = (0..10)
            .map(|i| {
                SendMessageBatchRequestEntry::builder()
                    .id(format!("m{i}"))
                    .message_body(format!("message {}", batch * 10 + i))
                    .build()
                    .unwrap()
            })
            .collect();
        sqs.send_message_batch()
            .queue_url(&url)
            .set_entries(Some(entries))
            .send()
            .await
            .unwrap();
    }
    sqs.send_message()
        .queue_url(&url)
        .message_body("delayed")
        .delay_seconds(600)
        .send()
        .await
        .unwrap();
    seen.push(format!("after sends: {:?}", counters(&sqs, &url).await));
    seen.push(format!("all: {:?}", all_attributes(&sqs, &url).await));

    // Receive 10 and hold them: in flight.
    let held = sqs
        .receive_message()
        .queue_url(&url)
        .max_number_of_messages(10)
        .visibility_timeout(600)
        .send()
        .await
        .unwrap();
    let mut bodies: Vec<String> = held
        .messages()
        .iter()
        .map(|m| m.body().unwrap_or("").to_owned())
        .collect();
    bodies.sort();
    seen.push(format!("held: {bodies:?}"));
    seen.push(format!("while held: {:?}", counters(&sqs, &url).await));

    // Receive the other 20 twice each with visibility 0 (back at once): the third
    // receive moves them to the dead-letter queue (maxReceiveCount 2).
    let receive_at_once = || async { testkit::moto::receive_at_once(&sqs, &url).await.unwrap() };
    let mut received = 0;
    for _ in 0..4 {
        received += receive_at_once().await;
    }
    seen.push(format!("received with visibility 0: {received}"));
    let after = receive_at_once().await;
    seen.push(format!("after redrive: {after} received"));
    seen.push(format!("queue: {:?}", counters(&sqs, &url).await));
    seen.push(format!(
        "dead-letter queue: {:?}",
        counters(&sqs, &dlq).await
    ));

    // Deleting the held messages empties the in-flight count.
    for m in held.messages() {
        sqs.delete_message()
            .queue_url(&url)
            .receipt_handle(m.receipt_handle().unwrap())
            .send()
            .await
            .unwrap();
    }
    seen.push(format!("after deletes: {:?}", counters(&sqs, &url).await));
    moto.stop().await;
    seen
}

#[tokio::test(flavor = "multi_thread")]
async fn the_fast_server_answers_as_stock_moto_does() {
    let stock = observe(MotoServer::STOCK).await;
    let fast = observe(FAST).await;
    println!("{stock:#?}");
    assert_eq!(fast, stock);
    // And the sequence shows what it is meant to: so the comparison can fail.
    assert_eq!(stock[0], r#"after sends: ("30", "0", "1")"#);
    assert_eq!(stock[3], r#"while held: ("20", "10", "1")"#);
    assert_eq!(stock[5], "after redrive: 0 received");
    assert_eq!(stock[6], r#"queue: ("0", "10", "1")"#);
    assert_eq!(stock[7], r#"dead-letter queue: ("20", "0", "0")"#);
    assert_eq!(stock[8], r#"after deletes: ("0", "0", "1")"#);
}
