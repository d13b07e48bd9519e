//! SQS FIFO deduplication on the local stack's moto (`scripts/moto_server_patched.py`),
//! as SQS documents it: a message sent with a `MessageDeduplicationId` already sent in
//! the last 5 minutes is accepted and never delivered — also once the first was
//! received and deleted; with `DeduplicationScope=messageGroup` (high-throughput FIFO)
//! only within its message group; with content-based deduplication the id is the
//! body's SHA-256, and an explicit id overrides it. Stock `moto_server` compares only
//! with the messages still queued and across the whole queue: each test shows where
//! it differs, so that the fix stays proved. The window is shortened to a few seconds
//! (`MOTO_SQS_DEDUPLICATION_SECONDS`) to see it end.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use aws_sdk_sqs::types::QueueAttributeName;
use aws_sdk_sqs::Client;
use std::collections::HashMap;
use std::time::Duration;
use testkit::moto::MotoServer;

/// The window the tests run the patched server with.
const WINDOW: Duration = Duration::from_secs(4);

/// A moto server from `program`, optionally with a shortened deduplication window:
/// the variable is set for the server's process only (a wrapper script).
async fn server(program: &str, window: Option<Duration>) -> (MotoServer, Client) {
    let program = match window {
        None => program.to_owned(),
        Some(w) => {
            let dir = std::env::temp_dir().join(format!("moto-fifo-{}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            let wrapper = dir.join(format!("moto-window-{}", w.as_secs()));
            std::fs::write(
                &wrapper,
                format!(
                    "#!/bin/sh\nMOTO_SQS_DEDUPLICATION_SECONDS={} exec \"{program}\" \"$@\"\n",
                    w.as_secs()
                ),
            )
            .unwrap();
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
            wrapper.to_string_lossy().into_owned()
        }
    };
    let moto = MotoServer::launch(&program).await.unwrap();
    let sdk = testkit::moto::sdk_config(&moto.endpoint_url()).await;
    (moto, Client::new(&sdk))
}

async fn fifo_queue(sqs: &Client, name: &str, attributes: &[(QueueAttributeName, &str)]) -> String {
    let mut req = sqs
        .create_queue()
        .queue_name(format!("{name}.fifo"))
        .attributes(QueueAttributeName::FifoQueue, "true");
    for (k, v) in attributes {
        req = req.attributes(k.clone(), *v);
    }
    req.send().await.unwrap().queue_url().unwrap().to_owned()
}

/// Sends `body` in `group`, with `dedup` as its deduplication id when given.
async fn send(sqs: &Client, url: &str, body: &str, group: &str, dedup: Option<&str>) {
    sqs.send_message()
        .queue_url(url)
        .message_body(body)
        .message_group_id(group)
        .set_message_deduplication_id(dedup.map(str::to_owned))
        .send()
        .await
        .unwrap();
}

/// Receives and deletes every message queued: their bodies, in order.
async fn drain(sqs: &Client, url: &str) -> Vec<String> {
    testkit::moto::take_all(sqs, url).await.unwrap()
}

/// What each server delivers of one scenario.
async fn both<F, Fut>(scenario: F) -> HashMap<&'static str, Vec<String>>
where
    F: Fn(Client) -> Fut,
    Fut: std::future::Future<Output = Vec<String>>,
{
    let mut out = HashMap::new();
    for (name, program, window) in [
        ("stock", MotoServer::STOCK, None),
        ("patched", MotoServer::PROGRAM, Some(WINDOW)),
    ] {
        let (moto, sqs) = server(program, window).await;
        out.insert(name, scenario(sqs).await);
        moto.stop().await;
    }
    out
}

/// GIVEN a message sent, received and deleted WHEN the same deduplication id is sent
/// again within the window THEN it is not delivered; after the window it is.
#[tokio::test(flavor = "multi_thread")]
async fn the_id_is_remembered_after_the_message_is_deleted_until_the_window_ends() {
    let seen = both(|sqs| async move {
        let url = fifo_queue(&sqs, "deleted", &[]).await;
        let mut got = Vec::new();
        send(&sqs, &url, "first", "g", Some("TX-1#2")).await;
        send(&sqs, &url, "queued copy", "g", Some("TX-1#2")).await;
        got.extend(drain(&sqs, &url).await);
        send(&sqs, &url, "after delete", "g", Some("TX-1#2")).await;
        got.extend(drain(&sqs, &url).await);
        tokio::time::sleep(WINDOW + Duration::from_millis(500)).await;
        send(&sqs, &url, "after the window", "g", Some("TX-1#2")).await;
        got.extend(drain(&sqs, &url).await);
        got
    })
    .await;
    assert_eq!(seen["patched"], ["first", "after the window"]);
    // Stock moto forgets the id with the message.
    assert_eq!(seen["stock"], ["first", "after delete", "after the window"]);
}

/// GIVEN high-throughput FIFO (`DeduplicationScope=messageGroup`) WHEN one id is sent
/// in two groups THEN both are delivered; twice in one group THEN once. With the
/// queue scope, once.
#[tokio::test(flavor = "multi_thread")]
async fn with_the_message_group_scope_the_id_deduplicates_within_its_group_only() {
    let seen = both(|sqs| async move {
        let per_group = fifo_queue(
            &sqs,
            "per-group",
            &[
                (QueueAttributeName::DeduplicationScope, "messageGroup"),
                (QueueAttributeName::FifoThroughputLimit, "perMessageGroupId"),
            ],
        )
        .await;
        let per_queue = fifo_queue(&sqs, "per-queue", &[]).await;
        let mut got = Vec::new();
        for url in [&per_group, &per_queue] {
            send(&sqs, url, "g1", "g1", Some("TX-1#1")).await;
            send(&sqs, url, "g1 again", "g1", Some("TX-1#1")).await;
            send(&sqs, url, "g2", "g2", Some("TX-1#1")).await;
            let mut bodies = drain(&sqs, url).await;
            bodies.sort();
            got.push(bodies.join("+"));
        }
        got
    })
    .await;
    assert_eq!(seen["patched"], ["g1+g2", "g1"]);
    assert_eq!(seen["stock"], ["g1", "g1"], "stock ignores the scope");
}

/// GIVEN content-based deduplication WHEN one body is sent twice THEN once; another
/// body THEN delivered; the same body with explicit ids THEN the ids decide; an
/// explicit id equal to the body's hash THEN a duplicate of it.
#[tokio::test(flavor = "multi_thread")]
async fn content_based_deduplication_hashes_the_body_and_an_explicit_id_overrides_it() {
    let seen = both(|sqs| async move {
        let url = fifo_queue(
            &sqs,
            "content",
            &[(QueueAttributeName::ContentBasedDeduplication, "true")],
        )
        .await;
        send(&sqs, &url, "a", "g", None).await;
        send(&sqs, &url, "a", "g", None).await;
        send(&sqs, &url, "b", "g", None).await;
        send(&sqs, &url, "c", "g", Some("id-1")).await;
        send(&sqs, &url, "c", "g", Some("id-2")).await;
        send(&sqs, &url, "c", "g", Some("id-2")).await;
        // SHA-256 of "a", as SQS computes the content-based id.
        let hash_of_a = "ca978112ca1bbdcafac231b39a23dc4da786eff8147c4e72b9807785afee48bb";
        send(&sqs, &url, "d", "g", Some(hash_of_a)).await;
        drain(&sqs, &url).await
    })
    .await;
    assert_eq!(seen["patched"], ["a", "b", "c", "c"]);
    assert_eq!(seen["stock"], seen["patched"], "stock moto agrees here");
}
