#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use super::*;
use domain::breaker::{BreakerState, Signal};
use domain::policy::FixedRandom;
use testkit::memory::MemoryBreaker;

const T0: i64 = 1_791_028_800_000;

fn t(ms: i64) -> Timestamp {
    Timestamp::from_millis(T0 + ms)
}

fn settings() -> BreakerSettings {
    // The defaults' window (60 s), failure ratio (0.5) and first cool-down (30 s).
    BreakerSettings {
        min_calls: 10,
        deadline_burst: 5,
        cooldown_max: Duration::from_secs(120),
        probes: 2,
        ..BreakerSettings::default()
    }
}

fn gate() -> BreakerGate<MemoryBreaker> {
    BreakerGate::new(
        MemoryBreaker::new(settings()),
        settings(),
        Duration::from_secs(5),
        "response-handler",
    )
}

fn batch(answered: u32, technical: u32) -> Tally {
    let mut b = Tally::default();
    for _ in 0..answered {
        b.add(Signal::Answered);
    }
    for _ in 0..technical {
        b.add(Signal::Technical);
    }
    b
}

/// GIVEN a CLOSED breaker WHEN requests are due and answers come back THEN every
/// request is sent, the breaker is read once per refresh period (not per record), each
/// batch costs one counting write, and nothing is saved.
#[tokio::test]
async fn the_happy_path_reads_once_per_refresh_and_counts_once_per_batch() {
    let g = gate();
    for i in 0..100 {
        let (a, c) = g.admit(t(i * 10)).await.unwrap();
        assert_eq!((a, c), (Admission::Send, None));
    }
    for i in 0..10 {
        assert_eq!(g.observe(&batch(10, 0), t(i * 100)).await.unwrap(), None);
    }
    let calls = g.store().calls();
    assert_eq!(
        calls.loads, 1,
        "one read within the refresh period: {calls:?}"
    );
    assert_eq!((calls.counts, calls.saves), (10, 0), "{calls:?}");
    assert_eq!(
        calls.window_reads, 0,
        "answers alone never read the window: {calls:?}"
    );
    g.admit(t(5_000)).await.unwrap();
    assert_eq!(
        g.store().calls().loads,
        2,
        "read again after the refresh period"
    );
}

/// GIVEN a burst of technical failures WHEN the window trips THEN the breaker opens
/// (one save, logged with the window), requests pause until the cool-down's end and
/// resume after it within one cool-down; at the end HALF_OPEN lets out two probes,
/// pauses the third, and one answered probe closes it.
#[tokio::test]
async fn an_outage_opens_pauses_probes_and_closes() {
    let g = gate();
    assert_eq!(
        g.observe(&batch(2, 3), t(0)).await.unwrap(),
        None,
        "5 outcomes: below min_calls"
    );
    let change = g.observe(&batch(0, 6), t(1_000)).await.unwrap();
    assert_eq!(change, Some(Change::Opened(batch(2, 9))));
    assert!(matches!(
        g.store().breaker().state,
        BreakerState::Open { .. }
    ));
    let (a, _) = g.admit(t(2_000)).await.unwrap();
    assert_eq!(a, Admission::Pause { until: t(31_000) });
    let (hold, probe) = g
        .admission(
            t(2_000),
            &mut FixedRandom(0.5),
            &Metrics::new("test", "retry-handler"),
        )
        .await;
    assert!(!probe);
    assert_eq!(
        hold.map(|h| h.until),
        Some(t(46_000)),
        "the probe instant plus half a cool-down"
    );
    // More failures while OPEN: counted, nothing saved.
    let saves = g.store().calls().saves;
    assert_eq!(g.observe(&batch(0, 4), t(3_000)).await.unwrap(), None);
    assert_eq!(g.store().calls().saves, saves);

    let (a, c) = g.admit(t(31_000)).await.unwrap();
    assert_eq!((a, c), (Admission::Probe, Some(Change::HalfOpened)));
    let (a, c) = g.admit(t(31_001)).await.unwrap();
    assert_eq!((a, c), (Admission::Probe, Some(Change::ProbeAdmitted)));
    let (a, _) = g.admit(t(31_002)).await.unwrap();
    assert_eq!(
        a,
        Admission::Pause { until: t(61_000) },
        "the round's two probes are out"
    );
    // An answer that is not the probe's changes nothing; the probe's closes it.
    assert_eq!(g.observe(&batch(1, 0), t(31_500)).await.unwrap(), None);
    let mut probe_answer = Tally::default();
    probe_answer.add(Signal::ProbeAnswered);
    assert_eq!(
        g.observe(&probe_answer, t(32_000)).await.unwrap(),
        Some(Change::Closed)
    );
    assert_eq!(g.admit(t(32_001)).await.unwrap().0, Admission::Send);
    let log: Vec<&str> = g.store().log().iter().map(|n| n.change.label()).collect();
    assert_eq!(log, vec!["opened", "half-opened", "probe", "closed"]);
    assert!(g.store().log().iter().all(|n| n.by == "response-handler"));
}

/// GIVEN two execution environments on one breaker WHEN both let probes out in the
/// same round THEN together they never exceed the round's probes: a count lost to
/// the other is decided again on a fresh read.
#[tokio::test]
async fn probes_are_bounded_across_environments() {
    let store = std::sync::Arc::new(MemoryBreaker::new(settings()));
    store.put(Breaker {
        state: BreakerState::Open {
            until: t(0),
            cooldown_ms: 30_000,
        },
        version: 7,
    });
    let a = BreakerGate::new(store.clone(), settings(), Duration::from_secs(5), "a");
    let b = BreakerGate::new(store.clone(), settings(), Duration::from_secs(5), "b");
    // Both read the breaker before either writes.
    a.current(t(0)).await.unwrap();
    b.current(t(0)).await.unwrap();
    let mut probes = 0;
    for i in 0..4 {
        for g in [&a, &b] {
            if g.admit(t(i)).await.unwrap().0 == Admission::Probe {
                probes += 1;
            }
        }
    }
    assert_eq!(probes, 2, "{:?}", store.log());
}
