//! Retention against DynamoDB (moto): a finished transaction's record carries the TTL
//! `purge_at` = its terminal instant + RETENTION_DAYS from the terminal write itself,
//! its payload the same instant once the audit writer has read the stream; a live
//! transaction's items carry none; an operator replay of a FAILED one removes both.
//! moto never expires items: the attribute is what is checked.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

mod common;

use aws::audit::AuditWriter;
use aws::retention::PURGE_AT;
use common::*;
use domain::decide::{Input, Known};
use domain::exec::execute;
use domain::policy::FixedRandom;
use domain::ports::{Creates, Records};
use domain::retention::Retention;
use domain::{
    Context, MaxAttempts, Payload, Request, Response, RetryEvent, Run, Status, Timestamp,
    TransactionRecord,
};
use testkit::drain::{drain_into, StreamPosition};
use testkit::memory::{MemoryQueue, MemoryScheduler};
use testkit::ports::AllPorts;

const DAYS: u32 = 30;

fn answer(tx: &str, attempt: u32, outcome: &str) -> Input {
    Input::Response(
        Response::parse(&format!(
            r#"{{"transaction_id":"{tx}","attempt":{attempt},"outcome":"{outcome}","reason":"Ana Pérez, card 4111"}}"#
        ))
        .unwrap(),
    )
}

/// The TTL of the item of `tx` in `table`, if any.
async fn purge_at(s: &Stack, table: &str, tx: &str) -> Option<i64> {
    let item = testkit::provision::read_item(&s.ddb(), table, tx)
        .await
        .unwrap()
        .expect("the item exists");
    item.get(PURGE_AT)
        .map(|v| v.as_n().unwrap().parse().unwrap())
}

/// The audit writer reads the table's stream from `position` on.
async fn drain(s: &Stack, writer: &AuditWriter, position: &mut StreamPosition) {
    let streams = aws::clients::dynamodbstreams(&s.sdk);
    drain_into(writer, &streams, &s.p.transactions_stream_arn, position)
        .await
        .unwrap();
}

/// Decides `input` at `c` and executes the plan on `ports`.
async fn decide_and_execute<P: domain::exec::Perform>(
    ports: &P,
    c: &Context,
    input: Input,
    rng: &mut FixedRandom,
) {
    let mut run = Run::new(input, Known::Unread, c, rng);
    execute(&mut run, ports, c, rng, &mut |_| true)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn finished_transactions_expire_after_the_retention_live_and_replayed_ones_never() {
    let s = stack("rt").await;
    let retention = Retention::days(DAYS).unwrap();
    let store = s.store().retaining(retention);
    let (records, payloads) = (&s.p.names.transactions_table, &s.p.names.payloads_table);
    let writer = AuditWriter::new(aws::clients::dynamodb(&s.sdk), &s.p.names.audit_table, 365)
        .with_payloads(payloads, retention);
    let scheduler = MemoryScheduler::new();
    let requests: MemoryQueue<Request> = MemoryQueue::new();
    let retries: MemoryQueue<RetryEvent> = MemoryQueue::new();
    let ports = AllPorts {
        store: &store,
        scheduler: &scheduler,
        requests: &requests,
        retries: &retries,
        notes: &writer,
    };
    let mut rng = FixedRandom(0.5);
    // TX-S will succeed, TX-L stays live (a retry scheduled), TX-F fails (its one
    // attempt answered CANCELLED) and is replayed.
    for (tx, max) in [("TX-S", 3), ("TX-L", 3), ("TX-F", 1)] {
        let start = TransactionRecord::started(
            id(tx),
            MaxAttempts::new(max).unwrap(),
            Timestamp::from_millis(T0),
        );
        store
            .create(
                &start,
                &Payload::from_json(r#"{"customer":"Ana"}"#).unwrap(),
            )
            .await
            .unwrap();
    }
    let ended_at = T0 + 7_000;
    for (now, input) in [
        (ended_at, answer("TX-S", 1, "SUCCESS")),
        (ended_at, answer("TX-L", 1, "CANCELLED")),
        (ended_at, answer("TX-F", 1, "CANCELLED")),
    ] {
        decide_and_execute(&ports, &ctx(now), input, &mut rng).await;
    }
    let status = |tx: &'static str| {
        let store = &store;
        async move { store.get(&id(tx)).await.unwrap().unwrap().status }
    };
    assert_eq!(status("TX-S").await, Status::Succeeded);
    assert_eq!(status("TX-L").await, Status::Scheduled);
    assert_eq!(status("TX-F").await, Status::Failed);

    let expected = Timestamp::from_millis(ended_at).epoch_seconds() + i64::from(DAYS) * 86_400;
    // The record's TTL comes with the terminal write; the payload's once the audit
    // writer has read the stream, not before.
    for tx in ["TX-S", "TX-F"] {
        assert_eq!(
            purge_at(&s, records, tx).await,
            Some(expected),
            "{tx} record"
        );
        assert_eq!(
            purge_at(&s, payloads, tx).await,
            None,
            "{tx} payload before the stream"
        );
    }
    let mut position = StreamPosition::default();
    drain(&s, &writer, &mut position).await;
    for tx in ["TX-S", "TX-F"] {
        assert_eq!(
            purge_at(&s, payloads, tx).await,
            Some(expected),
            "{tx} payload"
        );
    }
    for table in [records, payloads] {
        assert_eq!(
            purge_at(&s, table, "TX-L").await,
            None,
            "live TX-L in {table}"
        );
    }

    // The operator replays TX-F: live again, neither item may expire.
    let c = ctx(ended_at + 60_000).for_operator(
        domain::machine::OperatorNote::new("arn:aws:iam::1:user/op", Some("service back")).unwrap(),
    );
    let replay = Input::Replay {
        transaction_id: id("TX-F"),
        budget: 1,
    };
    decide_and_execute(&ports, &c, replay, &mut rng).await;
    assert!(!status("TX-F").await.is_terminal());
    assert_eq!(purge_at(&s, records, "TX-F").await, None, "replayed record");
    drain(&s, &writer, &mut position).await;
    assert_eq!(
        purge_at(&s, payloads, "TX-F").await,
        None,
        "replayed payload"
    );
    // The finished one is untouched by the replay of another.
    assert_eq!(purge_at(&s, payloads, "TX-S").await, Some(expected));
}
