//! The breaker's table against moto: the breaker item written only conditional on
//! the version read, the window's counts added without conflict and summed over the
//! window only.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

mod common;

use aws::breaker::DynamoBreaker;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType,
};
use domain::breaker::{Breaker, BreakerSettings, BreakerState, Signal, Tally};
use domain::ports::{BreakerCounts, BreakerReads, BreakerWrites};
use domain::Timestamp;
use std::sync::Arc;
use std::time::Duration;
use testkit::moto;

const T0: i64 = 1_791_028_800_000; // a bucket boundary (10 s buckets)

fn settings() -> BreakerSettings {
    BreakerSettings {
        window: Duration::from_secs(60),
        ..BreakerSettings::default()
    }
}

async fn breaker(tag: &str, shards: u8) -> DynamoBreaker {
    let endpoint = moto::shared_endpoint().expect("moto server (. scripts/tools.sh)");
    let sdk = moto::sdk_config(&endpoint).await;
    let client = aws_sdk_dynamodb::Client::new(&sdk);
    let table = format!("{}-breaker", moto::unique_prefix(tag));
    let key = |name: &str, t| {
        (
            AttributeDefinition::builder()
                .attribute_name(name)
                .attribute_type(ScalarAttributeType::S)
                .build()
                .unwrap(),
            KeySchemaElement::builder()
                .attribute_name(name)
                .key_type(t)
                .build()
                .unwrap(),
        )
    };
    let (pk, pks) = key("pk", KeyType::Hash);
    let (sk, sks) = key("sk", KeyType::Range);
    client
        .create_table()
        .table_name(&table)
        .billing_mode(BillingMode::PayPerRequest)
        .attribute_definitions(pk)
        .attribute_definitions(sk)
        .key_schema(pks)
        .key_schema(sks)
        .send()
        .await
        .unwrap();
    DynamoBreaker::new(client, table, "external", settings(), shards)
}

fn t(ms: i64) -> Timestamp {
    Timestamp::from_millis(T0 + ms)
}

/// GIVEN no item WHEN read THEN a CLOSED breaker at version 0 and an empty window;
/// GIVEN two writers that read the same version WHEN both save THEN one wins and the
/// other learns it wrote nothing; the item reads back as written.
#[tokio::test(flavor = "multi_thread")]
async fn the_breaker_item_changes_only_from_the_version_read() {
    let b = breaker("brv", 1).await;
    let view = b.load(t(0)).await.unwrap();
    assert_eq!(view.breaker, Breaker::default());
    assert_eq!(view.window, Tally::default());

    let read = view.breaker;
    let (opened, _) = read.force(true, t(0), &settings());
    assert!(b.save(&read, &opened).await.unwrap(), "first writer wins");
    let (closed, _) = read.force(false, t(1), &settings());
    assert!(
        !b.save(&read, &closed).await.unwrap(),
        "a stale read writes nothing"
    );
    assert_eq!(b.load(t(2)).await.unwrap().breaker, opened);

    // HALF_OPEN with its probes counted round-trips too.
    let (_, half, _) = opened.admit(t(30_000), &settings());
    assert!(matches!(
        half.state,
        BreakerState::HalfOpen { admitted: 1, .. }
    ));
    assert!(b.save(&opened, &half).await.unwrap());
    assert_eq!(b.load(t(30_001)).await.unwrap().breaker, half);
}

/// GIVEN counts added concurrently over several shards and buckets WHEN read THEN
/// the window holds every count of its buckets and none of the older ones.
#[tokio::test(flavor = "multi_thread")]
async fn counts_add_up_without_conflict_within_the_window() {
    let b = Arc::new(breaker("brc", 4).await);
    let mut one = Tally::default();
    one.add(Signal::Technical);
    // An old bucket, out of the window read at t(70 s).
    b.count(t(0), &one).await.unwrap();
    let mut tasks = Vec::new();
    for i in 0..40 {
        let b = b.clone();
        tasks.push(tokio::spawn(async move {
            let mut tally = Tally::default();
            tally.add(if i % 4 == 0 {
                Signal::Answered
            } else {
                Signal::Technical
            });
            if i % 10 == 0 {
                tally.add(Signal::DeadlineFired);
            }
            b.count(t(20_000 + i * 1_000), &tally).await.unwrap();
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let w = b.load(t(70_000)).await.unwrap().window;
    assert_eq!(
        w,
        Tally {
            answered: 10,
            technical: 30,
            deadlines: 4
        }
    );
    assert!(w.trips(&settings()), "30 of 40 technical");
    // Nothing counted: no call.
    b.count(t(70_000), &Tally::default()).await.unwrap();
    assert_eq!(b.load(t(70_000)).await.unwrap().window, w);
}
