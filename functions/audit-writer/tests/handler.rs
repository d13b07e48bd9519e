//! The audit writer's handler against moto, fed the same fixture
//! `cargo lambda invoke --data-file events/stream-exhausted.json` uses.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use audit_writer::{handle, metrics, AUDIT_ROWS_WRITTEN, TRANSACTIONS_EXHAUSTED};
use aws::audit::AuditWriter;
use aws::config::StackNames;
use aws::provision::{create_table, table_definitions};
use aws_lambda_events::dynamodb::Event;
use domain::{Status, TransactionId};

fn fixture() -> Event {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/events/stream-exhausted.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

async fn writer(tag: &str, create: bool) -> AuditWriter {
    let endpoint = aws::local::shared_endpoint().unwrap();
    let sdk = aws::local::sdk_config(&endpoint).await;
    let names = StackNames::new(&aws::local::unique_prefix(tag));
    let ddb = aws::clients::dynamodb(&sdk);
    if create {
        let audit = table_definitions(&names)
            .into_iter()
            .find(|t| t.logical_id == "AuditTable")
            .unwrap();
        create_table(&ddb, &audit).await.unwrap();
    }
    AuditWriter::new(ddb, &names.audit_table, 365)
}

#[tokio::test(flavor = "multi_thread")]
async fn writes_one_row_per_change_and_counts_the_exhaustion() {
    let w = writer("aw", true).await;
    let m = metrics("DeferredRetry");
    let resp = handle(&w, &fixture(), &m).await.unwrap();
    assert!(resp.batch_item_failures.is_empty());
    assert_eq!(m.count(AUDIT_ROWS_WRITTEN), 2);
    assert_eq!(m.count(TRANSACTIONS_EXHAUSTED), 1);
    let rows = w
        .history(&TransactionId::parse("TX-100200").unwrap())
        .await
        .unwrap();
    let path: Vec<_> = rows.iter().map(|r| (r.from, r.to)).collect();
    assert_eq!(
        path,
        vec![
            (None, Status::InProgress),
            (Some(Status::InProgress), Status::Failed)
        ]
    );
    assert_eq!(rows[1].reason.as_deref(), Some("NOT_AVAILABLE"));

    // Redelivery of the batch rewrites the same rows.
    handle(&w, &fixture(), &m).await.unwrap();
    assert_eq!(
        w.history(&TransactionId::parse("TX-100200").unwrap())
            .await
            .unwrap(),
        rows
    );

    // The EMF document names the metric in the configured namespace.
    let emf = m.to_emf(0);
    assert_eq!(
        emf["_aws"]["CloudWatchMetrics"][0]["Namespace"],
        "DeferredRetry"
    );
    assert_eq!(emf[TRANSACTIONS_EXHAUSTED], 2);
    assert_eq!(emf["Function"], "audit-writer");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_undecodable_record_is_reported_and_processing_stops_there() {
    let w = writer("aw2", true).await;
    let mut event = fixture();
    // Three records: good, bad (unknown status), good.
    let mut bad = event.records[1].clone();
    bad.change.sequence_number = Some("100000000000000000003".into());
    let mut json = serde_json::to_value(&bad).unwrap();
    json["dynamodb"]["NewImage"]["status"] = serde_json::json!({"S": "SLEEPING"});
    let bad: aws_lambda_events::dynamodb::EventRecord = serde_json::from_value(json).unwrap();
    let third = event.records[1].clone();
    event.records.truncate(1);
    event.records.push(bad);
    event.records.push(third);
    let m = metrics("DeferredRetry");
    let resp = handle(&w, &event, &m).await.unwrap();
    let ids: Vec<_> = resp
        .batch_item_failures
        .iter()
        .map(|f| f.item_identifier.clone())
        .collect();
    assert_eq!(ids, vec![Some("100000000000000000003".to_owned())]);
    assert_eq!(m.count(AUDIT_ROWS_WRITTEN), 1, "stops at the failed record");
    assert_eq!(m.count(TRANSACTIONS_EXHAUSTED), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_missing_table_fails_the_first_record() {
    let w = writer("aw3", false).await;
    let m = metrics("DeferredRetry");
    let resp = handle(&w, &fixture(), &m).await.unwrap();
    assert_eq!(resp.batch_item_failures.len(), 1);
    assert_eq!(
        resp.batch_item_failures[0].item_identifier.as_deref(),
        Some("100000000000000000001")
    );
}
