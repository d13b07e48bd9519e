//! The DynamoDB state store against moto: conditional create, transitions equal to
//! `Write::apply`, failed conditions handing back the current record, the reconciler
//! index.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

mod common;

use common::*;
use domain::decide::{decide, Delivery, Input, Known};
use domain::machine::{Mark, Status, Write};
use domain::policy::FixedRandom;
use domain::ports::{
    CreateOutcome, Creates, Payloads, Records, StuckIndex, StuckQuery, Transitions, WriteOutcome,
};
use domain::{Context, Effect, Payload, PolicySet, Response, RetryEvent, Timestamp};
use std::collections::BTreeSet;
use std::time::Duration;

fn ctx(now: i64) -> Context {
    Context::new(
        Timestamp::from_millis(now),
        PolicySet::default(),
        8,
        Duration::from_secs(900),
    )
}

/// GIVEN no transaction WHEN it is created twice THEN the first creates and the second
/// reports it exists with the same payload; a different payload is told apart.
#[tokio::test(flavor = "multi_thread")]
async fn create_twice_is_harmless() {
    let s = stack("cr").await;
    let store = s.store();
    let r = record("TX-C1", Status::InProgress, 1, 3, T0);
    let payload = Payload::from_json(r#"{"amount": 10, "currency":"EUR"}"#).unwrap();
    assert_eq!(
        store.create(&r, &payload).await.unwrap(),
        CreateOutcome::Created
    );
    assert_eq!(
        store.create(&r, &payload).await.unwrap(),
        CreateOutcome::AlreadyExists {
            record: Box::new(r.clone()),
            same_payload: true
        }
    );
    let other = Payload::from_json(r#"{"amount": 11}"#).unwrap();
    assert_eq!(
        store.create(&r, &other).await.unwrap(),
        CreateOutcome::AlreadyExists {
            record: Box::new(r.clone()),
            same_payload: false
        }
    );
    // The payload kept is the first one, byte for byte.
    assert_eq!(
        store.payload(&r.transaction_id).await.unwrap(),
        Some(payload)
    );
    assert_eq!(store.get(&r.transaction_id).await.unwrap(), Some(r));
    assert_eq!(store.get(&id("TX-NONE")).await.unwrap(), None);
    assert_eq!(store.payload(&id("TX-NONE")).await.unwrap(), None);
}

fn sample_records(tx: &str) -> Vec<domain::TransactionRecord> {
    let marked = |status, current, mark, updated| {
        let mut r = record(tx, status, current, 3, updated);
        r.mark = Some(mark);
        r.last_reason = Some(Mark::legacy_reason(mark).to_owned());
        r
    };
    vec![
        marked(Status::InProgress, 1, Mark::Probe, T0 + 10),
        marked(Status::InProgress, 2, Mark::HeldOpen, T0 + 11),
        marked(Status::Scheduling, 1, Mark::HeldHalfOpen, T0 + 12),
        marked(Status::Failed, 3, Mark::TechnicalExhausted, T0 + 13),
        marked(Status::Succeeded, 2, Mark::Resolved, T0 + 14),
        record(tx, Status::InProgress, 1, 3, T0),
        record(tx, Status::InProgress, 2, 3, T0 + 1),
        record(tx, Status::InProgress, 3, 3, T0 + 2),
        record(tx, Status::Scheduling, 1, 3, T0 + 3),
        record(tx, Status::Scheduled, 1, 3, T0 + 4),
        record(tx, Status::Sending, 1, 3, T0 + 5),
        record(tx, Status::Scheduling, 2, 3, T0 + 6),
        record(tx, Status::Sending, 2, 3, T0 + 7),
        record(tx, Status::Succeeded, 2, 3, T0 + 8),
        record(tx, Status::Failed, 3, 3, T0 + 9),
        // Outbox mode: a send claimed by a publisher, and a start's SENDING(1).
        {
            let mut r = record(tx, Status::Sending, 1, 3, T0 + 15);
            r.publishing_since = Some(Timestamp::from_millis(T0 + 15));
            r
        },
        domain::TransactionRecord::started_queued(
            id(tx),
            domain::MaxAttempts::new(3).unwrap(),
            Timestamp::from_millis(T0 + 16),
            8,
        ),
    ]
}

/// Every write the domain's decisions produce for these records and inputs.
fn sample_writes(tx: &str, records: &[domain::TransactionRecord]) -> Vec<Write> {
    let c = ctx(T0 + 60_000);
    let mut rng = FixedRandom(0.5);
    let mut inputs = vec![];
    for n in 1..=3 {
        for outcome in ["SUCCESS", "CANCELLED", "ERROR"] {
            inputs.push(Input::Response(
                Response::parse(&format!(
                    r#"{{"transaction_id":"{tx}","attempt":{n},"outcome":"{outcome}","reason":"NOT_AVAILABLE"}}"#
                ))
                .unwrap(),
            ));
        }
    }
    for m in 2..=3 {
        inputs.push(Input::Retry(
            RetryEvent::parse(&format!(
                r#"{{"transaction_id":"{tx}","origin":"RECONCILER","attempt":{m}}}"#
            ))
            .unwrap(),
        ));
    }
    for r in records {
        inputs.push(Input::Reconcile(r.clone()));
        if r.status == Status::Sending {
            inputs.push(Input::Publish(r.clone()));
        }
    }
    inputs.push(Input::Resolve(id(tx)));
    inputs.push(Input::Replay {
        transaction_id: id(tx),
        budget: 2,
    });
    let mut writes: Vec<Write> = vec![];
    // As decided with the breaker closed, letting the request out as a probe, and
    // holding it.
    let hold = domain::breaker::Hold {
        until: Timestamp::from_millis(T0 + 600_000),
        state: domain::breaker::BreakerState::Open {
            until: Timestamp::from_millis(T0 + 600_000),
            cooldown_ms: 600_000,
        },
    };
    let contexts = [
        c.clone(),
        c.clone().with_probe(true),
        c.clone().with_hold(Some(hold)),
        c.clone().with_delivery(Delivery::Outbox),
        // The reconciler past a claim's resend window.
        ctx(T0 + 3_600_000).with_delivery(Delivery::Outbox),
    ];
    for (input, c) in inputs
        .iter()
        .flat_map(|i| contexts.iter().map(move |c| (i, c)))
    {
        let mut knowns = vec![Known::Unread];
        knowns.extend(records.iter().map(Known::Record));
        for k in knowns {
            for e in decide(input, k, None, c, &mut rng) {
                if let Effect::Write(w) = e {
                    if !writes.contains(&w) {
                        writes.push(w);
                    }
                }
            }
        }
    }
    writes
}

/// THE specification test: for every (write, record) pair, the item DynamoDB holds
/// after the UpdateItem equals `Write::apply(record)`, a failed condition hands back
/// exactly the stored record, and nothing else changes.
#[tokio::test(flavor = "multi_thread")]
async fn every_write_matches_write_apply() {
    let s = stack("eq").await;
    let store = s.store();
    let tx = "TX-EQ";
    let records = sample_records(tx);
    let writes = sample_writes(tx, &records);
    assert!(
        writes.len() >= 10,
        "decisions produced {} writes",
        writes.len()
    );
    println!("{} writes x {} records", writes.len(), records.len());
    let events: BTreeSet<String> = writes.iter().map(|w| format!("{:?}", w.event())).collect();
    assert!(events.len() >= 7, "writes cover most arrows: {events:?}");
    assert!(
        events.contains("PublishClaimed"),
        "outbox mode's claim is covered: {events:?}"
    );
    let (mut applied, mut refused) = (0, 0);
    // Each marked record twice: as this release stores it, and as the previous one
    // did (no `mark`, the mark in `last_reason`), which decodes to the same record.
    let mut stored: Vec<(&domain::TransactionRecord, bool)> =
        records.iter().map(|r| (r, false)).collect();
    stored.extend(
        records
            .iter()
            .filter(|r| r.mark.is_some())
            .map(|r| (r, true)),
    );
    let mut legacy_applied = 0;
    for w in &writes {
        for &(r, legacy) in &stored {
            if legacy {
                let mut item = aws::item::record_to_item(r);
                item.remove("mark");
                put_item(&s, item).await;
                assert_eq!(
                    store.get(&r.transaction_id).await.unwrap().as_ref(),
                    Some(r)
                );
            } else {
                put_record(&s, r).await;
            }
            let got = store.transition(w).await.unwrap();
            match w.apply(r) {
                Ok(next) => {
                    applied += 1;
                    legacy_applied += usize::from(legacy);
                    assert_eq!(got, WriteOutcome::Written(next.clone()), "{w:?} on {r:?}");
                    assert_eq!(store.get(&r.transaction_id).await.unwrap(), Some(next));
                }
                Err(_) => {
                    refused += 1;
                    assert_eq!(
                        got,
                        WriteOutcome::ConditionFailed(Some(r.clone())),
                        "{w:?} on {r:?}"
                    );
                    assert_eq!(
                        store.get(&r.transaction_id).await.unwrap().as_ref(),
                        Some(r)
                    );
                }
            }
        }
    }
    assert!(applied >= writes.len() / 2, "applied {applied}");
    assert!(refused > applied, "refused {refused}");
    let counts = s.meter.snapshot();
    assert!(
        legacy_applied > 0,
        "no write applied to a previous release's item"
    );
    assert_eq!(counts.writes as usize, writes.len() * stored.len());
    assert_eq!(counts.failed_conditions as usize, refused);
}

/// GIVEN outbox mode's start and an unclaimed SENDING record WHEN the start's create
/// is stored and the publisher claims the send twice THEN the record reads back as
/// created; the first claim stores `publishing_since`, the second's condition
/// (`attribute_not_exists(#publishing_since)`) fails and hands back the claimed
/// record; the write leaving SENDING removes the attribute from the item.
#[tokio::test(flavor = "multi_thread")]
async fn the_publishers_claim_is_taken_once() {
    let s = stack("claim").await;
    let store = s.store();
    let queued = domain::TransactionRecord::started_queued(
        id("TX-Q1"),
        domain::MaxAttempts::new(3).unwrap(),
        Timestamp::from_millis(T0),
        8,
    );
    let payload = Payload::from_json(r#"{"amount":1}"#).unwrap();
    assert_eq!(
        store.create(&queued, &payload).await.unwrap(),
        CreateOutcome::Created
    );
    assert_eq!(
        store.get(&queued.transaction_id).await.unwrap().as_ref(),
        Some(&queued)
    );
    let c = ctx(T0 + 1_000).with_delivery(Delivery::Outbox);
    let writes: Vec<Write> = decide(
        &Input::Publish(queued.clone()),
        Known::Record(&queued),
        None,
        &c,
        &mut FixedRandom(0.5),
    )
    .into_iter()
    .filter_map(|e| match e {
        Effect::Write(w) => Some(w),
        _ => None,
    })
    .collect();
    let [claim, published] = writes.as_slice() else {
        panic!("{writes:?}")
    };
    let WriteOutcome::Written(claimed) = store.transition(claim).await.unwrap() else {
        panic!("the first claim is refused")
    };
    assert_eq!(
        claimed.publishing_since,
        Some(Timestamp::from_millis(T0 + 1_000))
    );
    assert_eq!(
        store.transition(claim).await.unwrap(),
        WriteOutcome::ConditionFailed(Some(claimed.clone())),
        "a claim exists: the condition fails"
    );
    let WriteOutcome::Written(sent) = store.transition(published).await.unwrap() else {
        panic!("the send is not recorded")
    };
    assert_eq!(sent.status, Status::InProgress);
    assert_eq!(sent.publishing_since, None);
    let item = s
        .ddb()
        .get_item()
        .table_name(&s.p.names.transactions_table)
        .key(
            "transaction_id",
            aws_sdk_dynamodb::types::AttributeValue::S("TX-Q1".into()),
        )
        .consistent_read(true)
        .send()
        .await
        .unwrap()
        .item
        .unwrap();
    assert!(!item.contains_key("publishing_since"), "{item:?}");
}

/// GIVEN IN_PROGRESS(2) WHEN a write expects attempt 1, or expects SCHEDULING THEN the
/// condition fails and the current record comes back with the error (no read);
/// a missing item fails with no record.
#[tokio::test(flavor = "multi_thread")]
async fn stale_status_and_stale_attempt_hand_back_the_current_record() {
    let current = record("TX-S1", Status::InProgress, 2, 4, T0);
    let s = stack_holding("st", &current).await;
    let store = s.store();
    let c = ctx(T0 + 1000);
    let mut rng = FixedRandom(0.5);
    let first_write = |input: &Input, known: Known<'_>, rng: &mut FixedRandom| {
        decide(input, known, None, &c, rng)
            .into_iter()
            .find_map(|e| match e {
                Effect::Write(w) => Some(w),
                _ => None,
            })
            .unwrap()
    };
    // Stale attempt: a CANCELLED response for attempt 1 decided unread.
    let late = Input::Response(
        Response::parse(r#"{"transaction_id":"TX-S1","attempt":1,"outcome":"CANCELLED"}"#).unwrap(),
    );
    let w = first_write(&late, Known::Unread, &mut rng);
    assert_eq!(w.guard.current_attempt, Some(at(1)));
    let before = s.meter.snapshot();
    assert_eq!(
        store.transition(&w).await.unwrap(),
        WriteOutcome::ConditionFailed(Some(current.clone()))
    );
    let after = s.meter.snapshot();
    assert_eq!(after.reads, before.reads, "no second read");
    // Stale status: the retry handler's write expects SCHEDULED/SCHEDULING.
    let retry = Input::Retry(
        RetryEvent::parse(r#"{"transaction_id":"TX-S1","origin":"RETRY_SCHEDULER","attempt":3}"#)
            .unwrap(),
    );
    let w = first_write(&retry, Known::Unread, &mut rng);
    assert!(!w.from().contains(Status::InProgress));
    assert_eq!(
        store.transition(&w).await.unwrap(),
        WriteOutcome::ConditionFailed(Some(current.clone()))
    );
    // No such transaction.
    let mut ghost = w.clone();
    ghost.transaction_id = id("TX-GHOST");
    assert_eq!(
        store.transition(&ghost).await.unwrap(),
        WriteOutcome::ConditionFailed(None)
    );
    assert_eq!(
        store.get(&id("TX-GHOST")).await.unwrap(),
        None,
        "no partial item created"
    );
    // And the matching response succeeds.
    let ok = Input::Response(
        Response::parse(r#"{"transaction_id":"TX-S1","attempt":2,"outcome":"SUCCESS"}"#).unwrap(),
    );
    let w = first_write(&ok, Known::Unread, &mut rng);
    let WriteOutcome::Written(done) = store.transition(&w).await.unwrap() else {
        panic!("write refused")
    };
    assert_eq!(done.status, Status::Succeeded);
    assert_eq!(done.reconcile, None);
}

/// GIVEN transactions spread over shards and states, some whose fire time is older
/// than the threshold WHEN the reconciler queries every shard with small pages THEN
/// it gets exactly the intermediate ones whose fire time is past the cutoff, each
/// once, read in full (the index projects keys only).
#[tokio::test(flavor = "multi_thread")]
async fn gsi_query_returns_exactly_the_stuck_transactions_across_shards() {
    let s = stack("gsi").await;
    let store = s.store();
    let shards = 8u16;
    let cutoff = T0 + 1_000_000;
    let mut expected = BTreeSet::new();
    for i in 0..48u32 {
        let status = Status::ALL[(i % 6) as usize];
        let old = i % 4 != 3;
        let updated = if old {
            T0 + i64::from(i)
        } else {
            cutoff + 10_000 + i64::from(i)
        };
        let current = if status == Status::Failed { 3 } else { 1 };
        let mut r = record(&format!("TX-G{i:03}"), status, current, 3, updated);
        if status.is_intermediate() {
            // The index sorts a cycle by its fire time, whatever the status.
            r.next_fire_at = Some(Timestamp::from_millis(updated));
            r.updated_at = Timestamp::from_millis(cutoff + 99_000);
            r.reconcile = domain::machine::ReconcileKey::derive(
                status,
                &r.transaction_id,
                shards,
                r.updated_at,
                r.next_fire_at,
            );
        }
        if status == Status::InProgress {
            // IN_PROGRESS is watched too (its answer deadline), keyed where the
            // cycle that sent it left it.
            r.reconcile = domain::machine::ReconcileKey::derive(
                status,
                &r.transaction_id,
                shards,
                r.updated_at,
                None,
            );
        }
        if status.is_watched() && old {
            expected.insert(r.transaction_id.to_string());
        }
        put_record(&s, &r).await;
    }
    let mut found = Vec::new();
    let mut pages = 0;
    let mut stored = std::collections::BTreeMap::new();
    for shard in 0..shards {
        let mut cursor = None;
        loop {
            let page = store
                .query_stuck(&StuckQuery {
                    shard,
                    before: Timestamp::from_millis(cutoff),
                    limit: 2,
                    cursor: cursor.clone(),
                })
                .await
                .unwrap();
            pages += 1;
            for r in &page.records {
                assert!(r.status.is_watched(), "{r:?}");
                assert_eq!(r.transaction_id.shard(shards), shard);
                found.push(r.transaction_id.to_string());
                stored.insert(r.transaction_id.to_string(), r.clone());
            }
            match page.next {
                Some(n) => cursor = Some(n),
                None => break,
            }
        }
    }
    // Whole records, as stored, not index projections.
    for (id, r) in &stored {
        let again = store
            .get(&domain::TransactionId::parse(id).unwrap())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(&again, r);
        assert!(
            r.status == Status::InProgress
                || (r.schedule_name.is_some() && r.last_outcome.is_some()),
            "{r:?}"
        );
    }
    let unique: BTreeSet<String> = found.iter().cloned().collect();
    assert_eq!(unique.len(), found.len(), "no record twice");
    assert_eq!(unique, expected);
    assert!(expected.len() >= 15, "{}", expected.len());
    let counts = s.meter.snapshot();
    assert_eq!(counts.queries, pages);
    assert_eq!(
        counts.reads,
        2 * found.len() as u64,
        "one GetItem per index entry found (plus the test's own)"
    );
}

/// The first write `input` decides on `known` at `now`, applied to the table.
async fn first_write_applied<P: Send + Sync>(
    store: &aws::dynamo::DynamoStore<P>,
    input: &Input,
    known: &domain::TransactionRecord,
    now: i64,
) -> domain::TransactionRecord {
    let w = decide(
        input,
        Known::Record(known),
        None,
        &ctx(now),
        &mut FixedRandom(0.5),
    )
    .into_iter()
    .find_map(|e| match e {
        Effect::Write(w) => Some(w),
        _ => None,
    })
    .unwrap();
    match store.transition(&w).await.unwrap() {
        WriteOutcome::Written(done) => done,
        other => panic!("write refused: {other:?}"),
    }
}

/// GIVEN transactions in every state, some of them failed by the exhausted CANCELLED
/// the response handler writes WHEN the failed-index is queried shard by shard (small
/// pages, then a time range) THEN exactly the FAILED ones come back, oldest first in
/// each shard, with the time they failed; a replayed one leaves the index.
#[tokio::test(flavor = "multi_thread")]
async fn failed_index_lists_exactly_the_failed_transactions() {
    let s = stack("fl").await;
    let store = s.store();
    let shards = 8u16;
    let mut failed = BTreeSet::new();
    for i in 0..12u32 {
        let tx = format!("TX-F{i:02}");
        let status = [Status::InProgress, Status::Scheduled, Status::Succeeded][(i % 3) as usize];
        let r = record(&tx, status, 3, 3, T0);
        put_record(&s, &r).await;
        if status != Status::InProgress {
            continue;
        }
        // The last attempt answered CANCELLED: the response handler's write.
        let answer = Input::Response(
            Response::parse(&format!(
                r#"{{"transaction_id":"{tx}","attempt":3,"outcome":"CANCELLED"}}"#
            ))
            .unwrap(),
        );
        let now = T0 + 1_000 * i64::from(i);
        let done = first_write_applied(&store, &answer, &r, now).await;
        assert_eq!(done.status, Status::Failed);
        failed.insert((Timestamp::from_millis(now), tx));
    }
    let list = |from: Option<i64>, until: Option<i64>| {
        let store = &store;
        async move {
            let mut all = Vec::new();
            for shard in 0..shards {
                let mut cursor: Option<String> = None;
                loop {
                    let page = store
                        .query_failed(
                            shard,
                            from.map(Timestamp::from_millis),
                            until.map(Timestamp::from_millis),
                            1,
                            cursor.as_deref(),
                        )
                        .await
                        .unwrap();
                    let times: Vec<_> = page.entries.iter().map(|e| e.updated_at).collect();
                    assert!(times.windows(2).all(|w| w[0] <= w[1]), "oldest first");
                    for e in page.entries {
                        assert_eq!(e.transaction_id.shard(shards), shard);
                        all.push((e.updated_at, e.transaction_id.to_string()));
                    }
                    match page.next {
                        Some(n) => cursor = Some(n),
                        None => break,
                    }
                }
            }
            all.sort();
            all
        }
    };
    let everything: Vec<_> = failed.iter().cloned().collect();
    assert_eq!(everything.len(), 4);
    assert_eq!(list(None, None).await, everything);
    // The range is on the time it failed, both ends included.
    assert_eq!(
        list(Some(T0 + 3_000), Some(T0 + 6_000)).await,
        everything[1..3].to_vec()
    );
    assert_eq!(list(Some(T0 + 7_000), None).await, everything[3..].to_vec());
    assert_eq!(list(None, Some(T0)).await, everything[..1].to_vec());
    // A replay leaves FAILED, and the index.
    let (_, replayed) = &everything[0];
    let stored = store.get(&id(replayed)).await.unwrap().unwrap();
    let replay = Input::Replay {
        transaction_id: id(replayed),
        budget: 2,
    };
    let done = first_write_applied(&store, &replay, &stored, T0 + 60_000).await;
    assert_eq!(done.failed, None);
    assert_eq!(list(None, None).await, everything[1..].to_vec());
}

/// GIVEN an index entry whose item will not decode (an unknown status), older than a
/// healthy stuck record of the same shard WHEN the index is queried THEN the page
/// still succeeds: the healthy record comes back, the bad entry is reported with its
/// key and what failed — it never fails the page, so it cannot block its shard.
#[tokio::test(flavor = "multi_thread")]
async fn an_undecodable_entry_is_reported_and_never_fails_its_page() {
    let s = stack("ud").await;
    let store = s.store();
    let bad = record("TX-UD-BAD", Status::Scheduled, 1, 3, T0);
    let good = record("TX-UD-GOOD", Status::Scheduled, 1, 3, T0 + 1_000);
    let shard = bad.transaction_id.shard(8);
    assert_eq!(good.transaction_id.shard(8), shard, "one shard for both");
    put_record(&s, &good).await;
    let mut item = aws::item::record_to_item(&bad);
    item.insert(
        "status".to_owned(),
        aws_sdk_dynamodb::types::AttributeValue::S("BOGUS".to_owned()),
    );
    put_item(&s, item).await;
    let page = store
        .query_stuck(&StuckQuery {
            shard,
            before: Timestamp::from_millis(T0 + 86_400_000),
            limit: 10,
            cursor: None,
        })
        .await
        .expect("a bad entry never fails the page");
    let ids: Vec<String> = page
        .records
        .iter()
        .map(|r| r.transaction_id.to_string())
        .collect();
    assert_eq!(ids, ["TX-UD-GOOD"]);
    assert_eq!(page.undecodable.len(), 1, "{page:?}");
    assert_eq!(page.undecodable[0].key, "TX-UD-BAD");
    assert!(
        page.undecodable[0].detail.contains("`status` = \"BOGUS\""),
        "names the value: {}",
        page.undecodable[0].detail
    );
}
