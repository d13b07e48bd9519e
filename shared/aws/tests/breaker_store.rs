//! The breaker's table against moto: the breaker item written only conditional on
//! the version read, the window's counts added without conflict and summed over the
//! window only.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

mod common;

use aws::breaker::DynamoBreaker;
use domain::breaker::{Breaker, BreakerSettings, BreakerState, Change, Signal, Tally};
use domain::ports::{BreakerCounts, BreakerNote, BreakerReads, BreakerWrites};
use domain::Timestamp;
use std::sync::Arc;
use std::time::Duration;

const T0: i64 = 1_791_028_800_000; // a bucket boundary (10 s buckets)

fn settings() -> BreakerSettings {
    BreakerSettings {
        window: Duration::from_secs(60),
        ..BreakerSettings::default()
    }
}

async fn breaker(tag: &str, shards: u8) -> DynamoBreaker {
    breaker_on(&common::stack(tag).await, shards)
}

/// The breaker on the stack's table (as the template defines it), in `shards` shards.
fn breaker_on(s: &common::Stack, shards: u8) -> DynamoBreaker {
    DynamoBreaker::new(
        aws_sdk_dynamodb::Client::new(&s.sdk),
        &s.p.names.breaker_table,
        "external",
        settings(),
        shards,
    )
}

fn note(at: i64, change: Change, reason: Option<&str>) -> BreakerNote {
    BreakerNote {
        at: t(at),
        by: "arn:aws:iam::1:user/ops".into(),
        change,
        reason: reason.map(str::to_owned),
    }
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
    let view = b.load(t(0), true).await.unwrap();
    assert_eq!(view.breaker, Breaker::default());
    assert_eq!(view.window, Tally::default());

    let read = view.breaker;
    let (opened, forced) = read.force(true, t(0), &settings());
    let why = Some("the service's maintenance window");
    assert!(
        b.save(&read, &opened, &note(0, forced, why)).await.unwrap(),
        "first writer wins"
    );
    let (closed, forced) = read.force(false, t(1), &settings());
    assert!(
        !b.save(&read, &closed, &note(1, forced, None))
            .await
            .unwrap(),
        "a stale read writes nothing"
    );
    assert_eq!(b.load(t(2), false).await.unwrap().breaker, opened);

    // HALF_OPEN with its probes counted round-trips too.
    let (_, half, change) = opened.admit(t(30_000), &settings());
    assert!(matches!(
        half.state,
        BreakerState::HalfOpen { admitted: 1, .. }
    ));
    let change = change.unwrap();
    assert!(b
        .save(&opened, &half, &note(30_000, change, None))
        .await
        .unwrap());
    assert_eq!(b.load(t(30_001), false).await.unwrap().breaker, half);

    // The change log: the two changes written, newest first, the lost one absent.
    let log = b.history(10).await.unwrap();
    let rows: Vec<(&str, &str, &str, u64)> = log
        .iter()
        .map(|e| (e.change.as_str(), e.from.as_str(), e.to.as_str(), e.version))
        .collect();
    assert_eq!(
        rows,
        // (turned HALF_OPEN and counted its first probe: two versions in one write)
        vec![
            ("half-opened", "OPEN", "HALF_OPEN", 3),
            ("forced", "CLOSED", "OPEN", 1)
        ]
    );
    assert_eq!(log[1].reason.as_deref(), why);
    assert_eq!(log[1].by, "arn:aws:iam::1:user/ops");
    assert_eq!(log[1].at, t(0));
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
    let w = b.load(t(70_000), true).await.unwrap().window;
    assert_eq!(
        w,
        Tally {
            answered: 10,
            technical: 30,
            deadlines: 4,
            probes_answered: 0,
        }
    );
    assert!(w.trips(&settings()), "30 of 40 technical");
    // Nothing counted: no call.
    b.count(t(70_000), &Tally::default()).await.unwrap();
    assert_eq!(b.load(t(70_000), true).await.unwrap().window, w);
    // The breaker alone: no window read.
    assert_eq!(
        b.load(t(70_000), false).await.unwrap().window,
        Tally::default()
    );
}

/// Hole: a corrupt breaker item. GIVEN breaker items that do not say what they are —
/// a HALF_OPEN one without its cool-down (read as 0 it made every request a free
/// probe), a state of the wrong type, an OPEN one without its end WHEN the functions
/// read them THEN each is an error naming the attribute (counted `BreakerErrors`,
/// alarmed), never a guess; WHEN an operator's override finds one THEN it overwrites
/// it, conditional on the `version` as stored (a second override from the same read
/// writes nothing), with a change-log entry from `CORRUPT`, and the item reads back.
#[tokio::test(flavor = "multi_thread")]
async fn a_corrupt_breaker_item_is_an_error_and_an_override_repairs_it() {
    use aws::breaker::Found;
    use aws_sdk_dynamodb::types::AttributeValue as V;
    let s = common::stack("brc").await;
    let b = breaker_on(&s, 1);
    let put = |attrs: Vec<(&str, V)>| {
        let mut item: std::collections::HashMap<String, V> =
            attrs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
        item.insert("pk".into(), V::S("external".into()));
        item.insert("sk".into(), V::S("BREAKER".into()));
        s.ddb()
            .put_item()
            .table_name(&s.p.names.breaker_table)
            .set_item(Some(item))
            .send()
    };
    let (n, st) = (|v: &str| V::N(v.into()), |v: &str| V::S(v.into()));
    let cases: Vec<(Vec<(&str, V)>, &str)> = vec![
        (
            vec![
                ("state", st("HALF_OPEN")),
                ("version", n("4")),
                ("since", n("1")),
                ("admitted", n("0")),
            ],
            "cooldown_ms: missing",
        ),
        (
            vec![("state", n("2")), ("version", n("4"))],
            "state = N(\"2\")",
        ),
        (
            vec![
                ("state", st("OPEN")),
                ("version", st("four")),
                ("cooldown_ms", n("30000")),
            ],
            "version = S(\"four\")",
        ),
        (
            vec![
                ("state", st("OPEN")),
                ("version", n("4")),
                ("cooldown_ms", n("0")),
                ("until", n("1")),
            ],
            "cooldown_ms = 0",
        ),
    ];
    for (attrs, named) in cases {
        let version = attrs
            .iter()
            .find(|(k, _)| *k == "version")
            .map(|(_, v)| v.clone());
        put(attrs).await.unwrap();
        let e = b.load(t(0), false).await.unwrap_err();
        assert!(e.message.contains(named), "{e:?} should name {named}");
        let Found::Corrupt {
            problem,
            version: found,
        } = b.find().await.unwrap()
        else {
            panic!("not found corrupt")
        };
        assert!(problem.contains(named), "{problem}");
        assert_eq!(found, version);
        let (closed, change) = Breaker {
            state: BreakerState::Closed,
            version: DynamoBreaker::stored_version(found.as_ref()),
        }
        .force(false, t(1_000), &settings());
        let repair = note(1_000, change, Some("repaired"));
        assert!(b.overwrite(found.as_ref(), &closed, &repair).await.unwrap());
        assert!(
            !b.overwrite(found.as_ref(), &closed, &repair).await.unwrap(),
            "a second override from the same read writes nothing"
        );
        let back = b.load(t(2_000), false).await.unwrap().breaker;
        assert_eq!(back, closed);
        assert_eq!(
            back.version,
            if named.starts_with("version") { 1 } else { 5 }
        );
        let log = b.history(1).await.unwrap();
        assert_eq!(
            (log[0].from.as_str(), log[0].to.as_str()),
            ("CORRUPT", "CLOSED")
        );
    }
}
