//! The audit writer's handler against moto, fed the same fixture
//! `cargo lambda invoke --data-file events/stream-exhausted.json` uses.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use audit_writer::{
    entered, handle, metrics, AUDIT_FAILURES, AUDIT_ITEMS_WRITTEN, AUDIT_ROWS_WRITTEN,
    TRANSACTIONS_EXHAUSTED,
};
use aws::audit::{entries_from_item, AuditWriter};
use aws::config::StackNames;
use aws_lambda_events::dynamodb::{Event, EventRecord};
use domain::audit::AuditEntry;
use domain::machine::Actor;
use domain::{Attempt, MaxAttempts, Outcome, Status, Timestamp, TransactionId, TransactionRecord};
use serde_json::json;
use testkit::events::image_json;
use testkit::meter::CallMeter;
use testkit::provision::{create_table, table_definitions};
use testkit::trail::arrows;

fn fixture() -> Event {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/events/stream-exhausted.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

async fn writer(tag: &str, create: bool) -> AuditWriter {
    writer_and_table(tag, create).await.0
}

/// A writer on a fresh audit table, the table's name, and the meter of the writer's
/// calls.
async fn writer_and_table(tag: &str, create: bool) -> (AuditWriter, String, CallMeter) {
    let endpoint = testkit::moto::shared_endpoint().unwrap();
    let sdk = testkit::moto::sdk_config(&endpoint).await;
    let names = StackNames::new(&testkit::moto::unique_prefix(tag));
    let meter = CallMeter::new();
    let ddb = meter.dynamodb(&sdk);
    if create {
        let audit = table_definitions(&names)
            .into_iter()
            .find(|t| t.logical_id == "AuditTable")
            .unwrap();
        create_table(&ddb, &audit).await.unwrap();
    }
    (
        AuditWriter::new(ddb, &names.audit_table, 365),
        names.audit_table,
        meter,
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn writes_one_entry_per_change_and_counts_the_exhaustion() {
    let w = writer("aw", true).await;
    let m = metrics("DeferredRetry");
    let resp = handle(&w, &fixture(), &m).await.unwrap();
    assert!(resp.batch_item_failures.is_empty());
    assert_eq!(m.count(AUDIT_ROWS_WRITTEN), 2);
    // The creation (attempt 1 sent) and the answer to attempt 1: two runs, two items.
    assert_eq!(m.count(AUDIT_ITEMS_WRITTEN), 2);
    assert_eq!(m.count(TRANSACTIONS_EXHAUSTED), 1);
    // The flow between states: the creation entered IN_PROGRESS, the answer FAILED.
    assert_eq!(m.count(&entered(domain::Status::InProgress)), 1);
    assert_eq!(m.count("EnteredFailed"), 1);
    assert_eq!(m.count("EnteredScheduling"), 0);
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

    // Redelivery of the batch rewrites the same entries.
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

const T: i64 = 1_790_000_000_000;

/// One retry cycle of `tx` as the handlers write it, each change (old, new): the
/// creation; the response handler's run IN_PROGRESS(1) → SCHEDULING → SCHEDULED
/// (3 ms apart); the retry handler's run SCHEDULED → SENDING → IN_PROGRESS(2) (2 ms
/// apart).
fn cycle(tx: &str, reason: &str) -> Vec<(Option<TransactionRecord>, TransactionRecord)> {
    let start = TransactionRecord::started(
        TransactionId::parse(tx).unwrap(),
        MaxAttempts::new(3).unwrap(),
        Timestamp::from_millis(T),
    );
    let mut scheduling = start.clone();
    scheduling.status = Status::Scheduling;
    scheduling.next_attempt = Some(Attempt::new(2).unwrap());
    scheduling.next_fire_at = Some(Timestamp::from_millis(T + 120_000));
    scheduling.last_outcome = Some(Outcome::Cancelled);
    scheduling.last_reason = Some(reason.to_owned());
    scheduling.last_actor = Actor::ResponseHandler;
    scheduling.updated_at = Timestamp::from_millis(T + 60_000);
    let mut scheduled = scheduling.clone();
    scheduled.status = Status::Scheduled;
    scheduled.updated_at = Timestamp::from_millis(T + 60_003);
    let mut sending = scheduled.clone();
    sending.status = Status::Sending;
    sending.last_actor = Actor::RetryHandler;
    sending.updated_at = Timestamp::from_millis(T + 120_010);
    let mut next = sending.clone();
    next.status = Status::InProgress;
    next.current_attempt = Attempt::new(2).unwrap();
    next.next_attempt = None;
    next.next_fire_at = None;
    next.updated_at = Timestamp::from_millis(T + 120_012);
    vec![
        (None, start.clone()),
        (Some(start), scheduling.clone()),
        (Some(scheduling), scheduled.clone()),
        (Some(scheduled), sending.clone()),
        (Some(sending), next),
    ]
}

/// The stream event of these changes, sequence numbers 1, 2, … in order.
fn batch(changes: &[(Option<TransactionRecord>, TransactionRecord)]) -> Event {
    let mut event = fixture();
    let template = serde_json::to_value(&event.records[1]).unwrap();
    event.records = changes
        .iter()
        .enumerate()
        .map(|(i, (old, new))| {
            let mut j = template.clone();
            j["eventID"] = json!((i + 1).to_string());
            j["eventName"] = json!(if old.is_some() { "MODIFY" } else { "INSERT" });
            let d = &mut j["dynamodb"];
            d["Keys"] = json!({ "transaction_id": { "S": new.transaction_id.as_str() } });
            d["SequenceNumber"] = json!(seq(i + 1));
            d["NewImage"] = image_json(new);
            match old {
                Some(o) => d["OldImage"] = image_json(o),
                None => {
                    d.as_object_mut().unwrap().remove("OldImage");
                }
            }
            serde_json::from_value::<EventRecord>(j).unwrap()
        })
        .collect();
    event
}

fn seq(n: usize) -> String {
    format!("1000000000000000000{n:02}")
}

/// Every item of an audit table as (transaction, audit_key, expires_at, entries),
/// sorted (a Scan: each test has its own table).
async fn items(table: &str) -> Vec<(String, String, String, Vec<AuditEntry>)> {
    let endpoint = testkit::moto::shared_endpoint().unwrap();
    let ddb = aws::clients::dynamodb(&testkit::moto::sdk_config(&endpoint).await);
    let out = ddb
        .scan()
        .table_name(table)
        .consistent_read(true)
        .send()
        .await
        .unwrap();
    assert!(out.last_evaluated_key().is_none(), "one page");
    let mut v: Vec<_> = out
        .items()
        .iter()
        .map(|item| {
            (
                item["transaction_id"].as_s().unwrap().clone(),
                item["audit_key"].as_s().unwrap().clone(),
                item["expires_at"].as_n().unwrap().clone(),
                entries_from_item(item).unwrap(),
            )
        })
        .collect();
    v.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
    v
}

/// Handles a batch that must not fail; its metrics.
async fn handle_cleanly(w: &AuditWriter, event: &Event) -> runtime::metrics::Metrics {
    let m = metrics("DeferredRetry");
    let resp = handle(w, event, &m).await.unwrap();
    assert!(resp.batch_item_failures.is_empty(), "{resp:?}");
    m
}

#[tokio::test(flavor = "multi_thread")]
async fn a_retry_cycle_is_two_items_whatever_the_batches() {
    let (w, table, meter) = writer_and_table("aw4", true).await;
    // TX-A: the creation and a retry cycle (5 changes); TX-B: the cycle alone (4).
    let changes: Vec<_> = cycle("TX-A", "NOT_AVAILABLE")
        .into_iter()
        .chain(cycle("TX-B", "BUSY").into_iter().skip(1))
        .collect();
    let event = batch(&changes);
    let m = metrics("DeferredRetry");
    let resp = handle(&w, &event, &m).await.unwrap();
    assert!(resp.batch_item_failures.is_empty());
    assert_eq!(m.count(AUDIT_ROWS_WRITTEN), 9, "one entry per transition");
    assert_eq!(m.count(AUDIT_ITEMS_WRITTEN), 3 + 2, "one write per run");
    assert_eq!(meter.snapshot().audit_writes, 5, "UpdateItem calls");

    let history = w
        .history(&TransactionId::parse("TX-A").unwrap())
        .await
        .unwrap();
    assert_eq!(arrows(&history), testkit::trail::TO_ATTEMPT_2);
    assert_eq!(history[1].reason.as_deref(), Some("NOT_AVAILABLE"));
    assert_eq!(history[3].next_attempt, Some(Attempt::new(2).unwrap()));
    let b = w
        .history(&TransactionId::parse("TX-B").unwrap())
        .await
        .unwrap();
    assert_eq!(arrows(&b), arrows(&history)[1..]);

    let stored = items(&table).await;
    let keys: Vec<(&str, &str, usize)> = stored
        .iter()
        .map(|(tx, key, _, e)| (tx.as_str(), key.as_str(), e.len()))
        .collect();
    assert_eq!(
        keys,
        [
            ("TX-A", "0001#1-send", 1),
            ("TX-A", "0001#2-answer", 2),
            ("TX-A", "0002#1-send", 2),
            ("TX-B", "0001#2-answer", 2),
            ("TX-B", "0002#1-send", 2),
        ]
    );
    // expires_at: the latest entry of the item + 365 days.
    for (_, _, expires, entries) in &stored {
        let latest = entries.iter().map(|e| e.at.epoch_seconds()).max().unwrap();
        assert_eq!(expires, &(latest + 365 * 86_400).to_string());
    }

    // Redelivering the same batch changes nothing.
    let again = handle_cleanly(&w, &event).await;
    assert_eq!(again.count(AUDIT_ITEMS_WRITTEN), 5);
    assert_eq!(items(&table).await, stored);
    // Also when a batch holds a change twice: one attribute per entry, one write per
    // group.
    let mut doubled = event.clone();
    doubled.records.extend(event.records.iter().cloned());
    let twice = handle_cleanly(&w, &doubled).await;
    assert_eq!(twice.count(AUDIT_ITEMS_WRITTEN), 5);
    assert_eq!(twice.count(AUDIT_ROWS_WRITTEN), 18);
    assert_eq!(items(&table).await, stored);
    // A group is one transaction and one group key: anything else is refused unsent.
    let calls = meter.snapshot().audit_writes;
    let mixed = [history[0].clone(), history[1].clone()];
    assert!(!w.write_group(&mixed).await.unwrap_err().is_retryable());
    assert_eq!(meter.snapshot().audit_writes, calls);

    // The same records one batch each (every run split across batches): the same
    // items, written one entry at a time.
    let (split, split_table, _) = writer_and_table("aw5", true).await;
    let mut one_by_one = 0;
    for record in &event.records {
        let mut single = event.clone();
        single.records = vec![record.clone()];
        one_by_one += handle_cleanly(&split, &single)
            .await
            .count(AUDIT_ITEMS_WRITTEN);
    }
    assert_eq!(one_by_one, 9);
    assert_eq!(items(&split_table).await, stored);
    assert_eq!(
        split
            .history(&TransactionId::parse("TX-A").unwrap())
            .await
            .unwrap(),
        history
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failed_write_reports_the_smallest_sequence_number_of_its_groups() {
    let w = writer("aw6", true).await;
    // An entry over DynamoDB's 400 KB item limit: its group's UpdateItem fails.
    let huge = "x".repeat(410 * 1024);
    let ok = cycle("TX-OK", "NOT_AVAILABLE");
    let big = cycle("TX-BIG", &huge);
    let changes = vec![
        ok[0].clone(),  // 1: TX-OK 0001#1-send
        ok[1].clone(),  // 2: TX-OK 0001#2-answer
        big[1].clone(), // 3: TX-BIG 0001#2-answer (fails)
        ok[2].clone(),  // 4: TX-OK 0001#2-answer
        big[2].clone(), // 5: TX-BIG 0001#2-answer (fails)
        big[3].clone(), // 6: TX-BIG 0002#1-send (fails: the SENDING image carries the reason)
    ];
    let m = metrics("DeferredRetry");
    let resp = handle(&w, &batch(&changes), &m).await.unwrap();
    let ids: Vec<_> = resp
        .batch_item_failures
        .iter()
        .map(|f| f.item_identifier.clone())
        .collect();
    assert_eq!(ids, vec![Some(seq(3))]);
    assert_eq!(m.count(AUDIT_FAILURES), 1);
    // TX-OK's groups were written: its 3 entries in 2 items. (TX-BIG's items are not
    // inspected: moto may leave a partial item where DynamoDB writes nothing.)
    assert_eq!(m.count(AUDIT_ITEMS_WRITTEN), 2);
    assert_eq!(m.count(AUDIT_ROWS_WRITTEN), 3);
    let ok_id = TransactionId::parse("TX-OK").unwrap();
    let history = w.history(&ok_id).await.unwrap();
    assert_eq!(
        arrows(&history),
        [
            "*>IN_PROGRESS@1",
            "IN_PROGRESS>SCHEDULING@1",
            "SCHEDULING>SCHEDULED@1"
        ]
    );

    // Lambda retries from record 3: TX-OK's rewritten entry changes nothing, and the
    // same record is reported again.
    let mut retry = batch(&changes);
    retry.records.drain(..2);
    let again = metrics("DeferredRetry");
    let resp = handle(&w, &retry, &again).await.unwrap();
    assert_eq!(
        resp.batch_item_failures[0].item_identifier.as_deref(),
        Some(seq(3).as_str())
    );
    assert_eq!(again.count(AUDIT_ROWS_WRITTEN), 1);
    assert_eq!(w.history(&ok_id).await.unwrap(), history);
}
