use super::*;
use crate::policy::FixedRandom;
use proptest::prelude::*;

fn t(ms: i64) -> Timestamp {
    Timestamp::from_millis(ms)
}

fn s() -> BreakerSettings {
    // The defaults' window (60 s), failure ratio (0.5) and first cool-down (30 s).
    BreakerSettings {
        min_calls: 10,
        deadline_burst: 5,
        cooldown_max: Duration::from_secs(100),
        probes: 2,
        ..BreakerSettings::default()
    }
    .validated()
    .unwrap()
}

fn tally(answered: u32, technical: u32, deadlines: u32) -> Tally {
    Tally {
        answered,
        technical,
        deadlines,
        probes_answered: 0,
    }
}

/// `answered` answers, `probes` of them to a half-open round's probe.
fn with_probes(answered: u32, probes: u32) -> Tally {
    Tally {
        probes_answered: probes,
        ..tally(answered, 0, 0)
    }
}

fn open(until: i64, cooldown_ms: i64) -> Breaker {
    Breaker {
        state: BreakerState::Open {
            until: t(until),
            cooldown_ms,
        },
        version: 3,
    }
}

fn half(since: i64, admitted: u32, cooldown_ms: i64) -> Breaker {
    Breaker {
        state: BreakerState::HalfOpen {
            since: t(since),
            admitted,
            cooldown_ms,
        },
        version: 3,
    }
}

/// GIVEN a setting out of range WHEN validated THEN the error names it and its value.
#[test]
fn settings_out_of_range_are_named_with_their_value() {
    let cases: [(BreakerSettings, &str, &str); 7] = [
        (
            BreakerSettings {
                window: Duration::from_secs(5),
                ..s()
            },
            "window",
            "5s",
        ),
        (
            BreakerSettings {
                min_calls: 0,
                ..s()
            },
            "min_calls",
            "0",
        ),
        (
            BreakerSettings {
                failure_ratio: 1.5,
                ..s()
            },
            "failure_ratio",
            "1.5",
        ),
        (
            BreakerSettings {
                deadline_burst: 0,
                ..s()
            },
            "deadline_burst",
            "0",
        ),
        (
            BreakerSettings {
                cooldown: Duration::from_millis(10),
                ..s()
            },
            "cooldown",
            "10ms",
        ),
        (
            BreakerSettings {
                cooldown_max: Duration::from_secs(5),
                ..s()
            },
            "cooldown_max",
            "5s",
        ),
        (BreakerSettings { probes: 0, ..s() }, "probes", "0"),
    ];
    for (bad, name, value) in cases {
        let e = bad.validated().unwrap_err();
        assert_eq!((e.name, e.value.as_str()), (name, value), "{e}");
        assert!(e.to_string().contains(name), "{e}");
    }
    assert!(BreakerSettings::default().validated().is_ok());
    assert!(BreakerSettings {
        failure_ratio: f64::NAN,
        ..s()
    }
    .validated()
    .is_err());
}

/// GIVEN the window's counts WHEN asked whether they trip THEN the ratio counts only
/// from `min_calls` outcomes, and a burst of deadlines trips on its own.
#[test]
fn the_window_trips_on_the_ratio_from_min_calls_or_on_a_deadline_burst() {
    let s = s();
    assert!(!tally(0, 9, 0).trips(&s), "9 outcomes: below min_calls");
    assert!(tally(0, 10, 0).trips(&s));
    assert!(tally(5, 5, 0).trips(&s), "ratio 0.5 reaches 0.5");
    assert!(!tally(6, 4, 0).trips(&s), "ratio 0.4");
    assert!(!tally(100, 0, 4).trips(&s));
    assert!(tally(100, 0, 5).trips(&s), "deadline burst");
}

/// GIVEN every state × every signal WHEN observed THEN the state and change are the
/// table's (the window trips in the `tripping` column only).
#[test]
fn every_state_times_every_signal() {
    let s = s();
    let now = 1_000_000;
    let closed = Breaker::default();
    let tripping = tally(0, 10, 0);
    let calm = tally(10, 0, 0);
    let signals = [
        Signal::Answered,
        Signal::ProbeAnswered,
        Signal::Technical,
        Signal::DeadlineFired,
    ];
    for signal in signals {
        // CLOSED: opens only when the window trips, whatever the signal.
        let (b, c) = closed.observe(signal, &calm, t(now), &s);
        assert_eq!((b, c), (closed, None), "{signal:?}");
        let (b, c) = closed.observe(signal, &tripping, t(now), &s);
        assert_eq!(
            b.state,
            BreakerState::Open {
                until: t(now + 30_000),
                cooldown_ms: 30_000
            }
        );
        assert_eq!(c, Some(Change::Opened(tripping)));
        assert_eq!(b.version, 1);
        // OPEN before its end: signals (answers to earlier requests) change nothing.
        let o = open(now + 1, 30_000);
        assert_eq!(o.observe(signal, &tripping, t(now), &s), (o, None));
        // HALF_OPEN: its probe's answer closes, a failure reopens with twice the
        // cool-down, another answer (to a request sent before the round) changes
        // nothing.
        let h = half(now - 10, 1, 30_000);
        let (b, c) = h.observe(signal, &tripping, t(now), &s);
        match signal {
            Signal::ProbeAnswered => {
                assert_eq!((b.state, c), (BreakerState::Closed, Some(Change::Closed)));
            }
            Signal::Answered => {
                assert_eq!((b, c), (h, None));
                continue;
            }
            Signal::Technical | Signal::DeadlineFired => {
                assert_eq!(
                    b.state,
                    BreakerState::Open {
                        until: t(now + 60_000),
                        cooldown_ms: 60_000
                    }
                );
                assert_eq!(
                    c,
                    Some(Change::Reopened {
                        cooldown_ms: 60_000
                    })
                );
            }
        }
        assert_eq!(b.version, 4);
    }
}

/// GIVEN a failed probe round after another WHEN it reopens THEN the cool-down
/// doubles and stops at its maximum.
#[test]
fn the_cool_down_doubles_up_to_its_maximum() {
    let s = s();
    let mut b = half(0, 1, 30_000);
    let mut seen = vec![];
    let mut now = 0;
    for _ in 0..4 {
        b = b
            .observe(Signal::Technical, &Tally::default(), t(now), &s)
            .0;
        let BreakerState::Open { until, cooldown_ms } = b.state else {
            panic!("{b:?}")
        };
        seen.push(cooldown_ms);
        now = until.millis();
        let (a, next, c) = b.admit(t(now), &s);
        assert_eq!((a, c), (Admission::Probe, Some(Change::HalfOpened)));
        b = next;
    }
    assert_eq!(seen, vec![60_000, 100_000, 100_000, 100_000]);
}

/// GIVEN each state WHEN a request is due THEN CLOSED sends, OPEN pauses until its
/// end, HALF_OPEN lets out `probes` per round and pauses the rest until the round's
/// end, then starts a new round.
#[test]
fn admission_by_state() {
    let s = s();
    let (a, b, c) = Breaker::default().admit(t(5), &s);
    assert_eq!((a, b, c), (Admission::Send, Breaker::default(), None));

    let o = open(10_000, 30_000);
    let (a, b, c) = o.admit(t(9_999), &s);
    assert_eq!((a, b, c), (Admission::Pause { until: t(10_000) }, o, None));

    // At the end of the cool-down: HALF_OPEN, first probe.
    let (a, b, c) = o.admit(t(10_000), &s);
    assert_eq!((a, c), (Admission::Probe, Some(Change::HalfOpened)));
    let (a, b, _) = b.admit(t(10_001), &s);
    assert_eq!(a, Admission::Probe);
    let (a, b2, _) = b.admit(t(10_002), &s);
    assert_eq!(a, Admission::Pause { until: t(40_000) }, "probes spent");
    assert_eq!(b2, b, "a pause writes nothing");
    assert_eq!(b.next_probe(t(10_002)), t(40_000));
    // The round ends with no answer: a new round of probes.
    let (a, b3, _) = b.admit(t(40_000), &s);
    assert_eq!(a, Admission::Probe);
    assert_eq!(
        b3.state,
        BreakerState::HalfOpen {
            since: t(40_000),
            admitted: 1,
            cooldown_ms: 30_000
        }
    );
}

/// GIVEN buckets inside and outside the window WHEN summed THEN only the window's
/// count; buckets are aligned on the epoch.
#[test]
fn the_window_sums_its_own_buckets() {
    let s = s(); // 60 s in six buckets of 10 s
    assert_eq!(bucket_of(t(123_456), &s), t(120_000));
    let buckets = [
        (t(50_000), tally(100, 100, 100)), // left the window
        (t(70_000), tally(1, 0, 0)),
        (t(120_000), tally(0, 2, 1)),
        (t(130_000), tally(9, 9, 9)), // not yet
    ];
    let total = window_total(buckets.iter().map(|(k, v)| (*k, v)), t(125_000), &s);
    assert_eq!(total, tally(1, 2, 1));
}

/// GIVEN an operator's override WHEN applied THEN the state is forced and the version
/// moves on; a paused request resumes after the next probe instant, within one
/// cool-down.
#[test]
fn force_and_resume() {
    let s = s();
    let (b, c) = Breaker::default().force(true, t(0), &s);
    assert_eq!(c, Change::Forced);
    assert_eq!(
        b.state,
        BreakerState::Open {
            until: t(30_000),
            cooldown_ms: 30_000
        }
    );
    assert_eq!(b.force(false, t(1), &s).0.state, BreakerState::Closed);
    assert_eq!(b.resume_at(t(0), &s, &mut FixedRandom(0.0)), t(30_000));
    assert_eq!(b.resume_at(t(0), &s, &mut FixedRandom(0.5)), t(45_000));
    assert_eq!(b.resume_at(t(0), &s, &mut FixedRandom(1.0)), t(60_000));
    assert_eq!(BreakerState::Closed.gauge(), 0);
    assert_eq!(half(0, 0, 1).state.gauge(), 1);
    assert_eq!(b.state.gauge(), 2);
}

/// GIVEN each admission WHEN turned into a decision's verdict THEN a request let out
/// is held by nothing (a probe says so), and a paused one is held until the breaker's
/// resume instant, by the state the breaker is in.
#[test]
fn an_admission_becomes_a_hold_or_a_probe() {
    let s = s();
    let b = open(30_000, 30_000);
    let mut r = FixedRandom(0.5);
    assert_eq!(Admission::Send.verdict(&b, t(0), &s, &mut r), (None, false));
    assert_eq!(Admission::Probe.verdict(&b, t(0), &s, &mut r), (None, true));
    let (hold, probe) = Admission::Pause { until: t(30_000) }.verdict(&b, t(0), &s, &mut r);
    assert!(!probe);
    assert_eq!(
        hold,
        Some(crate::breaker::Hold {
            until: b.resume_at(t(0), &s, &mut FixedRandom(0.5)),
            state: b.state,
        })
    );
    assert_eq!(hold.map(|h| h.until), Some(t(45_000)));
    let probing = half(0, 2, 10_000);
    let (hold, _) = Admission::Pause { until: t(10_000) }.verdict(&probing, t(0), &s, &mut r);
    assert_eq!(hold.map(|h| h.state), Some(probing.state));
}

/// GIVEN a batch's counts WHEN they stand for one signal THEN a failure wins over an
/// answer; GIVEN each state WHEN asked whether a batch may change it THEN answers
/// alone never make a CLOSED breaker read its window.
#[test]
fn a_batch_stands_for_its_strongest_signal() {
    let s = s();
    assert_eq!(strongest(&tally(0, 0, 0)), None);
    assert_eq!(strongest(&tally(9, 0, 0)), Some(Signal::Answered));
    assert_eq!(strongest(&with_probes(9, 1)), Some(Signal::ProbeAnswered));
    assert_eq!(strongest(&tally(9, 0, 1)), Some(Signal::DeadlineFired));
    assert_eq!(strongest(&tally(9, 1, 1)), Some(Signal::Technical));
    let closed = Breaker::default();
    assert!(!closed.may_change(&tally(50, 0, 0), t(0)));
    assert!(closed.may_change(&tally(50, 1, 0), t(0)));
    assert!(closed.may_change(&tally(0, 0, 1), t(0)));
    let o = open(100, 30_000);
    assert!(!o.may_change(&tally(1, 1, 1), t(99)), "OPEN before its end");
    assert!(o.may_change(&tally(1, 0, 0), t(100)));
    let h = half(0, 1, 30_000);
    assert!(h.may_change(&tally(1, 0, 0), t(1)));
    assert!(!h.may_change(&tally(0, 0, 0), t(1)));
    // A probe answered and another failed in one batch: it reopens.
    let (b, c) = h.observe_batch(&tally(1, 1, 0), &tally(1, 1, 0), t(5), &s);
    assert_eq!(
        c,
        Some(Change::Reopened {
            cooldown_ms: 60_000
        })
    );
    assert!(matches!(b.state, BreakerState::Open { .. }));
    // Answers that none of them is the probe's: HALF_OPEN stays; the probe's closes.
    let (b, c) = h.observe_batch(&tally(3, 0, 0), &tally(3, 0, 0), t(5), &s);
    assert_eq!((b, c), (h, None));
    let (b, c) = h.observe_batch(&with_probes(3, 1), &tally(3, 0, 0), t(5), &s);
    assert_eq!((b.state, c), (BreakerState::Closed, Some(Change::Closed)));
    assert_eq!(
        h.observe_batch(&tally(0, 0, 0), &tally(0, 0, 0), t(5), &s),
        (h, None)
    );
}

#[derive(Debug, Clone)]
enum Step {
    Wait(i64),
    Signal(Signal),
    Admit,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        (0i64..40_000).prop_map(Step::Wait),
        prop_oneof![
            Just(Signal::Answered),
            Just(Signal::ProbeAnswered),
            Just(Signal::Technical),
            Just(Signal::DeadlineFired)
        ]
        .prop_map(Step::Signal),
        Just(Step::Admit),
    ]
}

proptest! {
    /// GIVEN any sequence of waits, signals (counted in a real sliding window) and
    /// due requests WHEN the breaker runs THEN: an OPEN breaker lets nothing out; no
    /// HALF_OPEN round lets out more than `probes`; the cool-down stays within
    /// [cooldown, cooldown_max]; every change moves the version on; with no technical
    /// failure and no deadline it never opens.
    #[test]
    fn the_breaker_keeps_its_bounds(steps in proptest::collection::vec(step(), 0..200)) {
        let s = s();
        let mut b = Breaker::default();
        let mut now = 1_000_000i64;
        let mut buckets: std::collections::BTreeMap<Timestamp, Tally> = Default::default();
        let mut round: Option<(Timestamp, u32)> = None;
        let mut failures = 0;
        for st in steps {
            let before = b;
            match st {
                Step::Wait(ms) => now += ms,
                Step::Signal(sig) => {
                    if !matches!(sig, Signal::Answered | Signal::ProbeAnswered) { failures += 1; }
                    buckets.entry(bucket_of(t(now), &s)).or_default().add(sig);
                    let w = window_total(buckets.iter().map(|(k, v)| (*k, v)), t(now), &s);
                    b = b.observe(sig, &w, t(now), &s).0;
                }
                Step::Admit => {
                    let (a, next, change) = b.admit(t(now), &s);
                    let was_open = matches!(b.tick(t(now)).0.state, BreakerState::Open { .. });
                    if was_open { prop_assert!(matches!(a, Admission::Pause { .. }), "an OPEN breaker let {:?} out", a); }
                    if a == Admission::Probe {
                        let BreakerState::HalfOpen { since, .. } = next.state else {
                            panic!("a probe from {next:?}")
                        };
                        let n = match round { Some((r, n)) if r == since => n + 1, _ => 1 };
                        prop_assert!(n <= s.probes, "{n} probes in one round");
                        round = Some((since, n));
                    }
                    if let Admission::Pause { until } = a { prop_assert!(until > t(now)); }
                    prop_assert_eq!(change.is_some(), next != b, "a change exactly when it differs");
                    b = next;
                }
            }
            if b.state != before.state { prop_assert!(b.version > before.version); }
            if let BreakerState::Open { cooldown_ms, .. } | BreakerState::HalfOpen { cooldown_ms, .. } = b.state {
                prop_assert!((30_000..=100_000).contains(&cooldown_ms));
            }
            if failures == 0 { prop_assert_eq!(b.state, BreakerState::Closed); }
        }
    }
}
