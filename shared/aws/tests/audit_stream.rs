//! The audit trail through DynamoDB Streams: exactly one entry per successful
//! transition (stored one item per handler run), none for a failed condition,
//! redelivery harmless, exhaustion flagged, and entries equal to the in-memory
//! store's audit for the same inputs.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

mod common;

use aws::audit::AuditWriter;
use common::*;
use domain::audit::Notice;
use domain::decide::{Input, Known};
use domain::exec::execute;
use domain::policy::FixedRandom;
use domain::ports::{AuditNotes, Creates, Payloads, Records, Transitions, WriteOutcome};
use domain::{
    MaxAttempts, Outcome, Payload, Request, Response, RetryEvent, Run, Status, Timestamp,
    TransactionRecord,
};
use std::time::Duration;
use testkit::drain::{drain_into, drain_stream, StreamPosition};
use testkit::memory::{MemoryQueue, MemoryScheduler, MemoryStore};
use testkit::ports::AllPorts;

/// The same inputs, in order, for both stores.
fn inputs(tx: &str) -> Vec<(i64, Input)> {
    let resp = |n: u32, o: &str| {
        Input::Response(
            Response::parse(&format!(r#"{{"transaction_id":"{tx}","attempt":{n},"outcome":"{o}","reason":"NOT_AVAILABLE"}}"#))
                .unwrap(),
        )
    };
    let retry = |m: u32| {
        Input::Retry(
            RetryEvent::parse(&format!(
                r#"{{"transaction_id":"{tx}","origin":"RETRY_SCHEDULER","attempt":{m}}}"#
            ))
            .unwrap(),
        )
    };
    vec![
        (T0 + 1_000, resp(1, "CANCELLED")), // IN_PROGRESS → SCHEDULING → SCHEDULED
        (T0 + 2_000, resp(1, "CANCELLED")), // redelivery: failed condition, no change
        (T0 + 3_000, retry(2)),             // SCHEDULED → SENDING → IN_PROGRESS(2)
        (T0 + 4_000, retry(2)),             // duplicate: failed condition, no change
        (T0 + 5_000, resp(1, "SUCCESS")),   // attempt 1 was answered CANCELLED: a notice
        (T0 + 6_000, resp(2, "CANCELLED")), // attempt 2 of 2: → FAILED (exhausted)
    ]
}

async fn drive<S: Creates + Payloads + Records + Transitions, N: AuditNotes>(
    store: &S,
    notes: &N,
    tx: &str,
) {
    let scheduler = MemoryScheduler::new();
    let requests: MemoryQueue<Request> = MemoryQueue::new();
    let retries: MemoryQueue<RetryEvent> = MemoryQueue::new();
    let ports = AllPorts {
        store,
        scheduler: &scheduler,
        requests: &requests,
        retries: &retries,
        notes,
    };
    let mut rng = FixedRandom(0.5);
    for (now, input) in inputs(tx) {
        let c = ctx(now);
        let mut run = Run::new(input, Known::Unread, &c, &mut rng);
        execute(&mut run, &ports, &c, &mut rng, &mut |_| true)
            .await
            .unwrap();
    }
}

/// Creates `tx` (2 attempts) in `store` and drives it through [`inputs`] to FAILED;
/// returns its start record and payload.
async fn started_and_driven<S: Creates + Payloads + Records + Transitions, N: AuditNotes>(
    store: &S,
    notes: &N,
    tx: &str,
) -> (TransactionRecord, Payload) {
    let start = TransactionRecord::started(
        id(tx),
        MaxAttempts::new(2).unwrap(),
        Timestamp::from_millis(T0),
    );
    let payload = Payload::from_json(r#"{"n":1}"#).unwrap();
    store.create(&start, &payload).await.unwrap();
    drive(store, notes, tx).await;
    (start, payload)
}

#[tokio::test(flavor = "multi_thread")]
async fn one_entry_per_successful_transition_none_for_failed_conditions() {
    let s = stack("au").await;
    let store = s.store();
    let tx = "TX-AU1";
    let writer = AuditWriter::new(aws::clients::dynamodb(&s.sdk), &s.p.names.audit_table, 365);
    let (start, payload) = started_and_driven(&store, &writer, tx).await;
    let counts = s.meter.snapshot();
    let successful = counts.writes - counts.failed_conditions;
    assert!(counts.failed_conditions >= 3, "{counts:?}");
    assert_eq!(
        store.get(&id(tx)).await.unwrap().unwrap().status,
        Status::Failed
    );

    let streams = aws::clients::dynamodbstreams(&s.sdk);
    let mut pos = StreamPosition::default();
    let report = drain_into(&writer, &streams, &s.p.transactions_stream_arn, &mut pos)
        .await
        .unwrap();
    // One stream record per item change: the create and each successful write.
    assert_eq!(report.changes as u64, 1 + successful, "{report:?}");
    assert_eq!(report.rows as u64, 1 + successful);
    assert_eq!(report.exhausted, vec![id(tx)]);

    // The transitions, and the notice the response handler wrote itself.
    let rows = writer.history(&id(tx)).await.unwrap();
    assert_eq!(rows.len() as u64, 1 + successful + 1);

    // The same inputs on the in-memory store give the same audit trail.
    let memory = MemoryStore::new();
    memory.create(&start, &payload).await.unwrap();
    drive(&memory, &memory, tx).await;
    assert_eq!(rows, memory.audit(&id(tx)));
    let path: Vec<(Option<Status>, Status)> = rows.iter().map(|r| (r.from, r.to)).collect();
    assert_eq!(
        path,
        vec![
            (None, Status::InProgress),
            (Some(Status::InProgress), Status::Scheduling),
            (Some(Status::Scheduling), Status::Scheduled),
            (Some(Status::Scheduled), Status::Sending),
            (Some(Status::Sending), Status::InProgress),
            (Some(Status::InProgress), Status::InProgress),
            (Some(Status::InProgress), Status::Failed),
        ]
    );
    let notice = &rows[5];
    assert_eq!(notice.notice, Some(Notice::ConflictingSuccess));
    assert_eq!(
        notice.current_attempt.get(),
        1,
        "names the attempt answered SUCCESS"
    );
    assert_eq!(notice.outcome, Some(Outcome::Success));
    assert!(!notice.is_transition() && !notice.is_exhaustion());
    assert!(rows[6].is_exhaustion());

    // Nothing new: a second drain reads nothing.
    let again = drain_into(&writer, &streams, &s.p.transactions_stream_arn, &mut pos)
        .await
        .unwrap();
    assert_eq!(again.changes, 0);
    // Redelivery of the whole stream (a fresh reader) rewrites the same entries.
    let mut fresh = StreamPosition::default();
    let redelivered = drain_into(&writer, &streams, &s.p.transactions_stream_arn, &mut fresh)
        .await
        .unwrap();
    assert_eq!(redelivered.rows, report.rows);
    assert_eq!(redelivered.items, report.items);
    assert_eq!(
        writer.history(&id(tx)).await.unwrap(),
        rows,
        "no duplicate rows"
    );

    // TTL: every item expires 365 days after its latest transition.
    let raw = audit_items(&s, tx).await;
    // One item per handler run: the creation, the response handler's run, the retry
    // handler's run and the final answer; and the notice's own.
    assert_eq!(raw.len(), 5);
    assert_eq!(report.items, 4);
    let mut flattened = Vec::new();
    for item in &raw {
        let entries = aws::audit::entries_from_item(item).unwrap();
        let latest = entries.iter().map(|e| e.at.epoch_seconds()).max().unwrap();
        let exp: i64 = item["expires_at"].as_n().unwrap().parse().unwrap();
        assert_eq!(exp, latest + 365 * 86_400);
        flattened.extend(entries);
    }
    assert_eq!(aws::audit::in_transition_order(flattened), rows);
}

/// A write whose condition fails leaves no stream record at all.
#[tokio::test(flavor = "multi_thread")]
async fn a_failed_condition_leaves_no_stream_record() {
    let r = record("TX-AU2", Status::Scheduled, 1, 3, T0);
    let s = stack_holding("au2", &r).await;
    let store = s.store();
    let streams = aws::clients::dynamodbstreams(&s.sdk);
    let mut pos = StreamPosition::default();
    assert_eq!(
        drain_stream(&streams, &s.p.transactions_stream_arn, &mut pos)
            .await
            .unwrap()
            .len(),
        1
    );
    let c = ctx(T0 + 10);
    let mut rng = FixedRandom(0.5);
    let late = Input::Response(
        Response::parse(r#"{"transaction_id":"TX-AU2","attempt":1,"outcome":"SUCCESS"}"#).unwrap(),
    );
    let run = Run::new(late, Known::Unread, &c, &mut rng);
    let w = run
        .remaining()
        .find_map(|e| match e {
            domain::Effect::Write(w) => Some(w.clone()),
            _ => None,
        })
        .unwrap();
    assert!(matches!(
        store.transition(&w).await.unwrap(),
        WriteOutcome::ConditionFailed(Some(_))
    ));
    assert!(
        drain_stream(&streams, &s.p.transactions_stream_arn, &mut pos)
            .await
            .unwrap()
            .is_empty()
    );
}

/// A batch whose writes fail is read again by the next drain (the position stays),
/// as the event source retries a failed batch: no entry is skipped for good.
#[tokio::test(flavor = "multi_thread")]
async fn a_batch_that_failed_to_write_is_read_again() {
    let s = stack("af").await;
    let tx = "TX-AF1";
    // Notices kept apart: this test counts the stream's entries only.
    started_and_driven(&s.store(), &MemoryStore::new(), tx).await;
    let streams = aws::clients::dynamodbstreams(&s.sdk);
    let arn = &s.p.transactions_stream_arn;
    let mut pos = StreamPosition::default();

    let broken = AuditWriter::new(aws::clients::dynamodb(&s.sdk), "no-such-audit-table", 365);
    assert!(drain_into(&broken, &streams, arn, &mut pos).await.is_err());
    assert_eq!(pos, StreamPosition::default(), "the position did not move");

    let writer = AuditWriter::new(aws::clients::dynamodb(&s.sdk), &s.p.names.audit_table, 365);
    let report = drain_into(&writer, &streams, arn, &mut pos).await.unwrap();
    assert_eq!(report.rows, 6, "{report:?}");
    let rows = writer.history(&id(tx)).await.unwrap();
    assert_eq!(rows.len(), 6);
    assert_eq!(rows.last().map(|r| r.to), Some(Status::Failed));
}

/// The largest audit item this test accepts, in bytes: every item holds one handler
/// run at most (1 KB, 1 WRU), however long the outage or however often the service
/// answers; DynamoDB refuses an item past 400 KB.
const ITEM_BOUND: usize = 1024;

/// Every item of `tx` in the audit table, all pages.
async fn audit_items(
    s: &Stack,
    tx: &str,
) -> Vec<std::collections::HashMap<String, aws_sdk_dynamodb::types::AttributeValue>> {
    let mut items = Vec::new();
    let mut start = None;
    loop {
        let out = s
            .ddb()
            .query()
            .table_name(&s.p.names.audit_table)
            .key_condition_expression("#id = :id")
            .expression_attribute_names("#id", "transaction_id")
            .expression_attribute_values(
                ":id",
                aws_sdk_dynamodb::types::AttributeValue::S(tx.into()),
            )
            .set_exclusive_start_key(start)
            .send()
            .await
            .unwrap();
        items.extend(out.items().iter().cloned());
        match out.last_evaluated_key().filter(|k| !k.is_empty()) {
            Some(k) => start = Some(k.clone()),
            None => return items,
        }
    }
}

/// GIVEN a request held by an OPEN circuit breaker 3,000 times (the reconciler's
/// IN_PROGRESS → IN_PROGRESS, as `decide_reconcile` plans it, once per run at its
/// default rate of 5 minutes: about 10 days of outage; about 200 bytes each, they
/// filled the send's item past 400 KB at about the 2,050th) and a service that answers
/// SUCCESS 1,000 times to an attempt answered CANCELLED, with a reason of the
/// longest accepted WHEN the audit writer writes the changes in stream batches of
/// 100 and the response handler its notices THEN every write succeeds, every item
/// stays under 1 KB, and the history reads every entry back in order.
#[tokio::test(flavor = "multi_thread")]
async fn the_audit_item_of_a_request_stays_bounded_whatever_its_holds() {
    use aws::item::{flat_from_dynamodb, record_to_item};
    use domain::breaker::BreakerState;
    use domain::breaker::Hold;
    use domain::decide::decide_reconcile;
    use domain::Effect;
    const HOLDS: usize = 3_000;
    const NOTICES: i64 = 1_000;
    const BATCH: usize = 100;
    let s = stack("ab").await;
    let tx = "TX-6f1c2a9e-4b7d-4e0a-9c3f-2d8b5e7a1f04";
    // The client keeps moto's call timeout (testkit's 120 s), not the functions' 8 s:
    // moto answers a Query over thousands of entries far slower than DynamoDB under
    // load, and this test checks what the items hold, not how fast they are read.
    let writer = AuditWriter::new(
        aws_sdk_dynamodb::Client::new(&s.sdk),
        &s.p.names.audit_table,
        365,
    );

    // The changes the stream carries: the creation, then each hold.
    let mut r = TransactionRecord::started(
        id(tx),
        MaxAttempts::new(5).unwrap(),
        Timestamp::from_millis(T0),
    );
    r.answer_due_at = Some(Timestamp::from_millis(T0 + 1_800_000));
    let image = |r: &TransactionRecord| flat_from_dynamodb(&record_to_item(r));
    let mut changes = vec![(None, Some(image(&r)))];
    for _ in 0..HOLDS {
        let now = r.answer_due_at.unwrap().plus_millis(1);
        let held = ctx(now.millis()).with_hold(Some(Hold {
            until: now.plus_millis(300_000),
            state: BreakerState::Open {
                until: now.plus_millis(300_000),
                cooldown_ms: 300_000,
            },
        }));
        let w = decide_reconcile(&r, &held)
            .into_iter()
            .find_map(|e| match e {
                Effect::Write(w) => Some(w),
                _ => None,
            })
            .unwrap();
        let new = w.apply(&r).unwrap();
        assert_eq!(new.status, Status::InProgress);
        changes.push((Some(image(&r)), Some(image(&new))));
        r = new;
    }
    let mut expected = Vec::new();
    for batch in changes.chunks(BATCH) {
        let audit = writer
            .apply_batch(batch.iter().map(|(o, n)| (o.as_ref(), n.as_ref())))
            .await;
        for result in audit.results {
            match result {
                Ok(aws::audit::Audited::Written { entry, .. }) => expected.push(entry),
                other => panic!("every change is written: {other:?}"),
            }
        }
    }
    assert_eq!(expected.len(), 1 + HOLDS);

    // The service keeps answering SUCCESS to attempt 1, answered CANCELLED: notices.
    let mut cancelled = r.clone();
    cancelled.status = Status::Scheduled;
    cancelled.next_attempt = Some(at(2));
    let reason = "R".repeat(domain::message::MAX_REASON_CHARS);
    for i in 0..NOTICES {
        let notice = domain::audit::AuditEntry::conflicting_success(
            &cancelled,
            at(1),
            Some(reason.clone()),
            Timestamp::from_millis(T0 + 10_000_000 + i * 250),
        );
        writer.note(&notice).await.unwrap();
        expected.push(notice);
    }

    let items = audit_items(&s, tx).await;
    let sizes: Vec<usize> = items.iter().map(testkit::size::item_size).collect();
    let largest = sizes.iter().copied().max().unwrap();
    assert!(largest < ITEM_BOUND, "largest item: {largest} bytes");
    let stored: usize = items
        .iter()
        .map(|i| aws::audit::entries_from_item(i).unwrap().len())
        .sum();
    assert_eq!(stored, expected.len(), "every entry in one item");

    // Redelivered, a batch of holds rewrites the same items.
    let again = writer
        .apply_batch(
            changes[1..=BATCH]
                .iter()
                .map(|(o, n)| (o.as_ref(), n.as_ref())),
        )
        .await;
    assert_eq!(again.items_written, BATCH);
    assert_eq!(audit_items(&s, tx).await.len(), items.len());

    // The trail reads every entry back, in the order they happened.
    let history = writer.history(&id(tx)).await.unwrap();
    assert_eq!(history, aws::audit::in_transition_order(expected));
}

/// GIVEN audit rows kept 30 days past the last instant their transaction may be open
/// (a 7-day deadline) and a transaction that started, failed an hour later and was
/// replayed by an operator 40 days after that WHEN the audit writer writes the changes
/// THEN each row expires 37 days after it was written, the replay raises every earlier
/// row to its own expiry (the new deadline plus 30 days: the history of the reopened
/// transaction outlives it), and the replay redelivered raises nothing again.
#[tokio::test(flavor = "multi_thread")]
async fn a_replay_keeps_the_rows_before_it_as_long_as_its_own() {
    use aws::audit::{attr, Retention};
    use aws::item::{flat_from_dynamodb, record_to_item};
    use aws_sdk_dynamodb::types::AttributeValue;
    use domain::decide::decide_replay;
    use domain::Effect;
    const DAY_MS: i64 = 86_400_000;
    let deadline = Duration::from_secs(7 * 86_400);
    let s = stack("ar").await;
    let tx = "TX-3a0e9f5c-7d21-4c8b-b6e4-1f2a9d8c0e57";
    let retention = Retention::new(30, deadline);
    let writer = AuditWriter::new(
        aws::clients::dynamodb(&s.sdk),
        &s.p.names.audit_table,
        retention,
    );
    let image = |r: &TransactionRecord| Some(flat_from_dynamodb(&record_to_item(r)));
    let expiry = |ms: i64| retention.expires_at(Timestamp::from_millis(ms));
    let expiries = |items: Vec<std::collections::HashMap<String, AttributeValue>>| {
        let mut x: Vec<i64> = items
            .iter()
            .map(|i| match &i[attr::EXPIRES_AT] {
                AttributeValue::N(v) => v.parse().unwrap(),
                other => panic!("expires_at: {other:?}"),
            })
            .collect();
        x.sort();
        x
    };

    let started = TransactionRecord::started(
        id(tx),
        MaxAttempts::new(1).unwrap(),
        Timestamp::from_millis(T0),
    );
    let mut failed = started.clone();
    failed.status = Status::Failed;
    failed.last_outcome = Some(Outcome::Cancelled);
    failed.updated_at = Timestamp::from_millis(T0 + 3_600_000);
    let t2 = T0 + 3_600_000 + 40 * DAY_MS;
    let replay_ctx = ctx(t2).with_transaction_deadline(deadline);
    let replayed = decide_replay(
        domain::decide::Known::Record(&failed),
        &id(tx),
        1,
        &replay_ctx,
    )
    .into_iter()
    .find_map(|e| match e {
        Effect::Write(w) => Some(w.apply(&failed).unwrap()),
        _ => None,
    })
    .unwrap();
    assert_eq!(replayed.status, Status::Scheduling);

    let first = writer
        .apply_batch(
            [(None, image(&started)), (image(&started), image(&failed))]
                .iter()
                .map(|(o, n)| (o.as_ref(), n.as_ref())),
        )
        .await;
    assert_eq!(first.entries_written(), 2, "{first:?}");
    assert_eq!(
        expiries(audit_items(&s, tx).await),
        [expiry(T0), expiry(T0 + 3_600_000)],
        "each row: its write, plus the deadline, plus the retention"
    );

    let replay = [(image(&failed), image(&replayed))];
    let second = writer
        .apply_batch(replay.iter().map(|(o, n)| (o.as_ref(), n.as_ref())))
        .await;
    assert_eq!(second.entries_written(), 1, "{second:?}");
    assert_eq!(
        expiries(audit_items(&s, tx).await),
        [expiry(t2); 2],
        "the rows before the replay (the run that created it among them) kept as long as the replay's own"
    );
    assert_eq!(
        writer.keep_rows(&id(tx), expiry(t2)).await.unwrap(),
        0,
        "already kept: nothing raised again"
    );
    let again = writer
        .apply_batch(replay.iter().map(|(o, n)| (o.as_ref(), n.as_ref())))
        .await;
    assert!(again.results.iter().all(Result::is_ok), "{again:?}");
    assert_eq!(expiries(audit_items(&s, tx).await), [expiry(t2); 2]);
}
