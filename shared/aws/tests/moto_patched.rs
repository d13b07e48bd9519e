//! The moto server every local run uses (`scripts/moto_server_patched.py`) keeps two
//! promises of DynamoDB that stock `moto_server` breaks under concurrent requests, and
//! answers as stock moto does when requests do not overlap: a cancelled
//! TransactWriteItems undoes only its own items (stock moto puts back a copy of every
//! table it touched, erasing other acknowledged writes, and replaces the stream shard,
//! blinding stream readers); a conditional write is atomic (two concurrent "claim if
//! unclaimed" updates cannot both succeed). And one of EventBridge Scheduler's: a
//! ListSchedules page token stays valid when schedules are deleted meanwhile (stock
//! moto's names the next page's first schedule and fails once that one is gone). See
//! `docs/adapters.md#the-local-aws-moto-patched-where-it-breaks-dynamodbs-promises`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use aws_sdk_dynamodb::types::{AttributeValue, TransactWriteItem, Update};
use aws_sdk_dynamodb::Client;
use testkit::moto::MotoServer;
use testkit::provision::{create_table, TableDef};

const TABLE: &str = "race";
/// Acknowledged increments per round.
const INCREMENTS: usize = 60;

fn s(v: &str) -> AttributeValue {
    AttributeValue::S(v.into())
}

async fn table(ddb: &Client) {
    let def = TableDef {
        stream_view: Some("NEW_AND_OLD_IMAGES"),
        ..TableDef::keyed(TABLE, "pk")
    };
    create_table(ddb, &def).await.unwrap();
}

/// The table's stream.
async fn stream_arn(ddb: &Client) -> String {
    let table = ddb.describe_table().table_name(TABLE).send().await.unwrap();
    table
        .table()
        .unwrap()
        .latest_stream_arn()
        .unwrap()
        .to_owned()
}

/// A transaction update of `key` setting `#v` to `value` if `cond` holds.
fn conditional_update(key: &str, cond: &str, value: &str) -> Update {
    Update::builder()
        .table_name(TABLE)
        .key("pk", s(key))
        .update_expression("SET #v = :v")
        .condition_expression(cond)
        .expression_attribute_names("#v", "v")
        .expression_attribute_values(":v", s(value))
        .build()
        .unwrap()
}

/// A transaction whose condition fails: it is cancelled.
async fn cancelled_transaction(ddb: &Client, round: usize) {
    let update = conditional_update(&format!("other-{round}"), "attribute_exists(#v)", "x");
    let r = ddb
        .transact_write_items()
        .transact_items(TransactWriteItem::builder().update(update).build())
        .send()
        .await;
    assert!(r.is_err(), "the condition cannot hold: cancelled");
}

/// One round on `counter-<round>`: INCREMENTS acknowledged ADDs racing cancelled
/// transactions on the same table. Returns the counter's final value.
async fn increments_racing_cancellations(ddb: &Client, round: usize) -> usize {
    let key = format!("counter-{round}");
    let adds = racing_updates(
        ddb,
        &key,
        "ADD #n :value",
        "n",
        |_| AttributeValue::N("1".into()),
        None,
    );
    let cancels = (0..INCREMENTS).map(|_| {
        let ddb = ddb.clone();
        tokio::spawn(async move {
            cancelled_transaction(&ddb, round).await;
            true
        })
    });
    let acknowledged = joined(adds.chain(cancels).collect()).await;
    assert!(acknowledged.iter().all(|ok| *ok), "every ADD acknowledged");
    let item = ddb
        .get_item()
        .table_name(TABLE)
        .key("pk", s(&key))
        .consistent_read(true)
        .send()
        .await
        .unwrap();
    item.item()
        .and_then(|i| i.get("n"))
        .and_then(|n| n.as_n().ok())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// Concurrent "claim if unclaimed" updates of one item: how many succeeded.
async fn concurrent_claims(ddb: &Client, round: usize) -> usize {
    let key = format!("claim-{round}");
    let claim = Some("attribute_not_exists(#owner)");
    let tasks = racing_updates(
        ddb,
        &key,
        "SET #owner = :value",
        "owner",
        |i| s(&i.to_string()),
        claim,
    );
    joined(tasks.collect())
        .await
        .into_iter()
        .filter(|won| *won)
        .count()
}

/// INCREMENTS concurrent UpdateItems of `key` (the i-th setting `#attr` from
/// `value(i)`, under `condition` if any): tasks answering whether each succeeded.
fn racing_updates(
    ddb: &Client,
    key: &str,
    expression: &'static str,
    attr: &'static str,
    value: fn(usize) -> AttributeValue,
    condition: Option<&'static str>,
) -> impl Iterator<Item = tokio::task::JoinHandle<bool>> {
    let (ddb, key) = (ddb.clone(), key.to_owned());
    (0..INCREMENTS).map(move |i| {
        let update = update_of(&ddb, &key, expression, attr, value(i))
            .set_condition_expression(condition.map(str::to_owned));
        tokio::spawn(async move { update.send().await.is_ok() })
    })
}

/// Waits for every task, in order; their results.
async fn joined<T>(tasks: Vec<tokio::task::JoinHandle<T>>) -> Vec<T> {
    let mut out = Vec::with_capacity(tasks.len());
    for t in tasks {
        out.push(t.await.unwrap());
    }
    out
}

/// An UpdateItem of `key` in the test table setting `#attr` from `:value`.
fn update_of(
    ddb: &Client,
    key: &str,
    expression: &str,
    attr: &str,
    value: AttributeValue,
) -> aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder {
    ddb.update_item()
        .table_name(TABLE)
        .key("pk", s(key))
        .update_expression(expression)
        .expression_attribute_names(format!("#{attr}"), attr)
        .expression_attribute_values(":value", value)
}

/// Runs `rounds` rounds on `program`: (writes lost, extra claims) summed over them.
async fn anomalies(program: &str, rounds: usize) -> (usize, usize) {
    let moto = MotoServer::launch(program)
        .await
        .expect("moto (. scripts/tools.sh)");
    let sdk = testkit::moto::sdk_config(&moto.endpoint_url()).await;
    let ddb = Client::new(&sdk);
    table(&ddb).await;
    let (mut lost, mut extra) = (0, 0);
    for round in 0..rounds {
        lost += INCREMENTS - increments_racing_cancellations(&ddb, round).await;
        extra += concurrent_claims(&ddb, round).await.saturating_sub(1);
    }
    moto.stop().await;
    (lost, extra)
}

/// GIVEN acknowledged writes racing cancelled transactions, and concurrent
/// conditional claims of one item WHEN run on stock moto THEN writes are lost or a
/// claim is won twice; on the patched server, over as many rounds, never.
#[tokio::test(flavor = "multi_thread", worker_threads = 8)]
async fn stock_moto_loses_acknowledged_writes_and_the_patched_server_does_not() {
    let rounds = 5;
    let (lost, extra) = anomalies(MotoServer::STOCK, rounds).await;
    println!("stock moto_server, {rounds} rounds: {lost} acknowledged writes lost, {extra} extra claims won");
    assert!(
        lost + extra > 0,
        "stock moto showed neither anomaly in {rounds} rounds: the test no longer proves the fix"
    );
    let (lost, extra) = anomalies(MotoServer::PROGRAM, rounds).await;
    println!("patched server, {rounds} rounds: {lost} acknowledged writes lost, {extra} extra claims won");
    assert_eq!((lost, extra), (0, 0));
}

/// GIVEN a stream reader WHEN a transaction is cancelled on the patched server THEN
/// later changes still reach the reader (stock moto swaps the stream shard for its
/// copy and the reader's iterator stops seeing anything).
#[tokio::test(flavor = "multi_thread")]
async fn a_cancelled_transaction_does_not_blind_a_stream_reader() {
    for (program, keeps_reading) in [(MotoServer::STOCK, false), (MotoServer::PROGRAM, true)] {
        let moto = MotoServer::launch(program).await.unwrap();
        let sdk = testkit::moto::sdk_config(&moto.endpoint_url()).await;
        let ddb = Client::new(&sdk);
        table(&ddb).await;
        let streams = aws_sdk_dynamodbstreams::Client::new(&sdk);
        let arn = stream_arn(&ddb).await;
        let put = |k: &'static str| {
            let ddb = ddb.clone();
            async move {
                ddb.put_item()
                    .table_name(TABLE)
                    .item("pk", s(k))
                    .send()
                    .await
                    .unwrap();
            }
        };
        put("first").await;
        let mut position = testkit::drain::StreamPosition::default();
        let seen = testkit::drain::drain_stream(&streams, &arn, &mut position)
            .await
            .unwrap();
        assert_eq!(seen.len(), 1, "{program}");
        cancelled_transaction(&ddb, 0).await;
        put("second").await;
        let seen = testkit::drain::drain_stream(&streams, &arn, &mut position)
            .await
            .unwrap();
        assert_eq!(
            seen.len() == 1,
            keeps_reading,
            "{program}: the change after the cancelled transaction seen: {seen:?}"
        );
        moto.stop().await;
    }
}

/// Runs a sequence of DynamoDB calls, one at a time, and returns what each answered:
/// conditional writes that hold and fail (with ALL_OLD), transactions applied and
/// cancelled (with their reasons), the items and the stream records after them.
async fn observe(program: &str) -> Vec<String> {
    let moto = MotoServer::launch(program).await.unwrap();
    let sdk = testkit::moto::sdk_config(&moto.endpoint_url()).await;
    let ddb = Client::new(&sdk);
    table(&ddb).await;
    let mut seen = Vec::new();
    for (key, cond) in [
        ("a", "attribute_not_exists(#v)"),
        ("a", "attribute_not_exists(#v)"),
        ("a", "#v = :value"),
    ] {
        let r = update_of(&ddb, key, "SET #v = :value", "v", s(key))
            .condition_expression(cond)
            .return_values_on_condition_check_failure(
                aws_sdk_dynamodb::types::ReturnValuesOnConditionCheckFailure::AllOld,
            )
            .send()
            .await;
        seen.push(answered(format!("update {key} if {cond}"), r));
    }
    for items in [
        vec![
            ("b", "attribute_not_exists(#v)"),
            ("c", "attribute_not_exists(#v)"),
        ],
        vec![
            ("d", "attribute_not_exists(#v)"),
            ("a", "attribute_not_exists(#v)"),
        ],
    ] {
        let mut t = ddb.transact_write_items();
        for (key, cond) in &items {
            t = t.transact_items(
                TransactWriteItem::builder()
                    .update(conditional_update(key, cond, key))
                    .build(),
            );
        }
        seen.push(answered(format!("transaction {items:?}"), t.send().await));
    }
    let scan = ddb.scan().table_name(TABLE).send().await.unwrap();
    let mut keys: Vec<String> = scan
        .items()
        .iter()
        .map(|i| format!("{:?}", i.get("pk")))
        .collect();
    keys.sort();
    seen.push(format!("items {keys:?}"));
    let arn = stream_arn(&ddb).await;
    let streams = aws_sdk_dynamodbstreams::Client::new(&sdk);
    let changes = testkit::drain::drain_stream(&streams, &arn, &mut Default::default())
        .await
        .unwrap();
    seen.push(format!(
        "stream {:?}",
        changes
            .iter()
            .map(|c| (c.event_name.clone(), c.new.is_some()))
            .collect::<Vec<_>>()
    ));
    moto.stop().await;
    seen
}

/// `<what>: ok`, or `<what>: ` and the service error the call answered.
fn answered<O, E: std::fmt::Display, R>(
    what: String,
    r: Result<O, aws_sdk_dynamodb::error::SdkError<E, R>>,
) -> String {
    match r {
        Ok(_) => format!("{what}: ok"),
        Err(e) => format!("{what}: {:?}", e.as_service_error().map(|x| x.to_string())),
    }
}

/// GIVEN the same DynamoDB calls, one at a time WHEN run on stock moto and on the
/// patched server THEN every answer, the items and the stream records are the same.
#[tokio::test(flavor = "multi_thread")]
async fn without_overlap_the_patched_server_answers_as_stock_moto_does() {
    let stock = observe(MotoServer::STOCK).await;
    let patched = observe(MotoServer::PROGRAM).await;
    assert!(
        stock.iter().any(|l| l.contains("ConditionalCheckFailed")),
        "{stock:#?}"
    );
    assert!(
        stock.iter().any(|l| l.contains("TransactionCanceled")),
        "{stock:#?}"
    );
    assert_eq!(stock, patched);
}

/// Creates `n` one-time schedules in a new group; their names, oldest first.
async fn schedules(sched: &aws_sdk_scheduler::Client, n: usize) -> Vec<String> {
    sched
        .create_schedule_group()
        .name("pages")
        .send()
        .await
        .unwrap();
    let mut names = Vec::new();
    for i in 0..n {
        let name = format!("s-{i:03}");
        testkit::moto::far_schedule(sched, "pages", &name)
            .send()
            .await
            .unwrap();
        names.push(name);
    }
    names
}

/// One page of the group: names and the next token.
async fn page(
    sched: &aws_sdk_scheduler::Client,
    token: Option<String>,
) -> Result<(Vec<String>, Option<String>), String> {
    sched
        .list_schedules()
        .group_name("pages")
        .set_next_token(token)
        .send()
        .await
        .map(|p| {
            let names = p
                .schedules()
                .iter()
                .filter_map(|s| s.name().map(str::to_owned))
                .collect();
            (names, p.next_token().map(str::to_owned))
        })
        .map_err(|e| aws_sdk_scheduler::error::DisplayErrorContext(e).to_string())
}

/// GIVEN a group listed a page at a time WHEN a schedule on the next page is deleted
/// meanwhile (one-time schedules delete themselves after firing) THEN stock moto
/// fails the next page with InvalidToken, and the patched server goes on: every
/// schedule still there is listed exactly once. Without deletions both list the same
/// schedules in the same pages.
#[tokio::test(flavor = "multi_thread")]
async fn a_listing_survives_deletions_on_the_patched_server() {
    for (program, survives) in [(MotoServer::STOCK, false), (MotoServer::PROGRAM, true)] {
        let moto = MotoServer::launch(program).await.unwrap();
        let sdk = testkit::moto::sdk_config(&moto.endpoint_url()).await;
        let sched = aws_sdk_scheduler::Client::new(&sdk);
        let created = schedules(&sched, 120).await;
        // Undisturbed: 50 + 50 + 20, all of them once.
        let mut all = Vec::new();
        let mut sizes = Vec::new();
        let mut token = None;
        loop {
            let (names, next) = page(&sched, token).await.unwrap();
            sizes.push(names.len());
            all.extend(names);
            match next {
                Some(t) => token = Some(t),
                None => break,
            }
        }
        assert_eq!(sizes, [50, 50, 20], "{program}");
        let listed: std::collections::BTreeSet<_> = all.iter().cloned().collect();
        assert_eq!(listed.len(), 120, "{program}");
        assert_eq!(listed, created.iter().cloned().collect(), "{program}");
        // Disturbed: the first page, then the first ten of the rest deleted.
        let (first, next) = page(&sched, None).await.unwrap();
        let rest: Vec<String> = created
            .iter()
            .filter(|n| !first.contains(n))
            .cloned()
            .collect();
        let mut deleted = Vec::new();
        for name in all.iter().filter(|n| rest.contains(n)).take(10) {
            sched
                .delete_schedule()
                .group_name("pages")
                .name(name)
                .send()
                .await
                .unwrap();
            deleted.push(name.clone());
        }
        let second = page(&sched, next).await;
        assert_eq!(second.is_ok(), survives, "{program}: {second:?}");
        if let Ok((mut names, mut token)) = second {
            while let Some(t) = token {
                let (more, next) = page(&sched, Some(t)).await.unwrap();
                names.extend(more);
                token = next;
            }
            let expected: Vec<&String> = rest.iter().filter(|n| !deleted.contains(n)).collect();
            let mut got: Vec<&String> = names.iter().collect();
            got.sort();
            let mut want = expected.clone();
            want.sort();
            assert_eq!(got, want, "{program}: the rest, each once");
        }
        moto.stop().await;
    }
}
