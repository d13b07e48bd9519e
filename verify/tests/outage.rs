//! Outage windows and the circuit breaker in the simulator: while the service is
//! down (answering ERROR, or nothing) retries are paused, nothing is consumed, every
//! paused transaction ends once the service is back, the probes stay within their
//! bound and the reopening within the rate limit. Each property is also shown failing
//! on a design that breaks it.

use verify::sim::{simulate, Outage, OutageMode, Report, SimConfig};
use verify::Flaws;

/// 4,000 transactions arriving over an hour, the service down from minute 20 to
/// minute 40, every other fault on but concurrent deliveries of one retry event
/// (duplicate deliveries, double fires), so that the probe accounting below sees
/// each round's probes alone; the runs with every fault on are in
/// docs/verification.md ("Outage windows"). The outage is the only technical failure.
fn outage(mode: OutageMode) -> SimConfig {
    SimConfig {
        transactions: 4_000,
        duplicate_rate: 0.0,
        double_fire_rate: 0.0,
        outages: vec![Outage {
            start_ms: 1_200_000,
            duration_ms: 1_200_000,
        }],
        outage_mode: mode,
        breaker: Some(domain::breaker::BreakerSettings::default()),
        ..SimConfig::default().answered()
    }
}

/// `c` with `change`, run with `seed`: the guarantee called `name` must be broken.
fn breaks(c: &SimConfig, seed: u64, name: &str, change: impl FnOnce(&mut SimConfig)) -> Report {
    let mut changed = c.clone();
    change(&mut changed);
    let bad = simulate(&changed, seed);
    assert!(bad.violates(name), "{name} not reported\n{bad}");
    bad
}

/// A silent outage noticed within minutes: requests unanswered for two minutes are
/// looked at every minute (the defaults wait six hours, long after this outage).
fn silent() -> SimConfig {
    SimConfig {
        answer_timeout_ms: 120_000,
        reconcile_threshold_ms: 60_000,
        reconciler_interval_ms: 60_000,
        ..outage(OutageMode::Silent)
    }
}

fn valid(r: &Report) {
    assert!(r.is_valid(), "violations {:?}\n{r}", r.violations());
    assert_eq!(r.attempted, r.succeeded + r.failed + r.stuck);
    assert_eq!(r.stuck, 0, "{r}");
}

#[test]
fn an_error_outage_pauses_retries_and_every_transaction_ends() {
    let c = outage(OutageMode::Error);
    assert!(c.outages_only());
    let r = simulate(&c, 1);
    println!("{r}");
    valid(&r);
    assert!(r.outage_errors > 0, "the outage answered ERROR");
    assert!(r.breaker_opened > 0 && r.breaker_closed > 0, "{r}");
    let first = r.first_opened_ms.unwrap_or(0);
    assert!(
        (1_200_000..2_400_000).contains(&first),
        "opened at {first} ms"
    );
    assert!(
        r.last_closed_ms.unwrap_or(0) >= 2_400_000,
        "closed after the outage"
    );
    assert!(r.retries_paused > 0 && r.paused_transactions > 0 && r.max_pauses > 0);
    assert!(r.probe_rounds > 0 && r.max_probes_per_round <= r.probe_limit);
    assert_eq!(r.failed_by_outage, 0);
    assert_eq!(r.paused_stuck, 0);
    assert!(r.peak_after_reopening <= r.rate_limit);
}

#[test]
fn a_silent_outage_is_waited_out_too() {
    let r = simulate(&outage(OutageMode::Silent), 2);
    valid(&r);
    assert!(r.outage_unanswered > 0, "the outage said nothing");
    assert_eq!(r.failed_by_outage, 0);
    // Noticed by its answer deadlines: the breaker opens, the reconciler holds the
    // unanswered requests back instead of spending their republishes.
    let r = simulate(&silent(), 2);
    println!("{r}");
    valid(&r);
    assert!(r.breaker_opened > 0 && r.retries_paused > 0, "{r}");
    let first = r.first_opened_ms.unwrap_or(0);
    assert!(
        (1_200_000..2_400_000).contains(&first),
        "opened at {first} ms"
    );
    assert_eq!(r.failed_by_outage, 0);
    assert!(r.max_probes_per_round <= r.probe_limit);
}

/// (a) An ERROR taken for a CANCELLED: the outage consumes attempts, each next
/// attempt accepted by the service without a cancellation (`duplicated`).
#[test]
fn technical_as_cancelled_is_caught_with_an_outage() {
    let bad = simulate(
        &SimConfig {
            flaws: Flaws::only(|f| f.technical_as_cancelled = true),
            ..outage(OutageMode::Error)
        },
        1,
    );
    assert!(bad.duplicated > 0, "{bad}");
    assert!(!bad.is_valid());
}

/// (b): a retry handler that ignores the breaker sends every due retry into the
/// outage: the technical failures spend the re-send budget (FAILED/TECHNICAL_EXHAUSTED
/// because of the outage). The design that pauses passes the same run.
#[test]
fn ignoring_the_breaker_fails_transactions_because_of_the_outage() {
    let c = SimConfig {
        technical_resend_max: 3,
        ..outage(OutageMode::Error)
    };
    valid(&simulate(&c, 3));
    let bad = breaks(&c, 3, "failed-by-outage", |c| {
        c.flaws = Flaws::only(|f| f.ignores_breaker = true);
    });
    println!("{bad}");
    assert!(bad.failed_by_outage > 0, "{bad}");
}

/// (d): a retry handler that lets probes out without writing them on the breaker
/// sends every paused retry that resumes in a HALF_OPEN round (a silent service
/// keeps the breaker HALF_OPEN: its probes' deadlines are held, not counted).
#[test]
fn uncounted_probes_exceed_the_round_bound() {
    // Retries due during the outage: a half-minute backoff, 10,000 transactions, and
    // a ten-minute answer deadline (holds, not failed probes, fill the rounds).
    let c = SimConfig {
        transactions: 10_000,
        backoff_base_ms: 30_000,
        backoff_cap_ms: 600_000,
        answer_timeout_ms: 600_000,
        ..silent()
    };
    let good = simulate(&c, 5);
    assert!(good.max_probes_per_round <= good.probe_limit, "{good}");
    let bad = breaks(&c, 5, "probes-exceeded", |c| c.count_probes = false);
    assert!(bad.max_probes_per_round > bad.probe_limit, "{bad}");
}

/// (e): without pacing the resumed retries leave faster than the limit once the
/// breaker closes.
#[test]
fn without_pacing_the_reopening_exceeds_the_rate_limit() {
    let c = SimConfig {
        rate_limit: 1,
        retry_concurrency: 1,
        ..outage(OutageMode::Error)
    };
    let paced = simulate(&c, 4);
    assert!(paced.peak_after_reopening <= 1, "{paced}");
    let bad = breaks(&c, 4, "rate-limit-exceeded-at-reopening", |c| {
        c.pacing = false;
    });
    assert!(bad.peak_after_reopening > 1, "{bad}");
}

/// An outage that outlasts the transaction deadline (an hour here; the service down
/// from minute 20 for ten days): every transaction still ends, FAILED/EXPIRED within
/// one wait of its deadline, none failed by the outage before it, both modes.
fn endless(mode: OutageMode) -> SimConfig {
    SimConfig {
        transactions: 1_000,
        transaction_deadline_ms: 3_600_000,
        outages: vec![Outage {
            start_ms: 1_200_000,
            duration_ms: 10 * 24 * 3_600_000,
        }],
        ..if mode == OutageMode::Silent {
            SimConfig {
                transactions: 1_000,
                ..silent()
            }
        } else {
            outage(mode)
        }
    }
}

#[test]
fn an_outage_longer_than_the_deadline_ends_every_transaction_expired() {
    let r = simulate(&endless(OutageMode::Error), 1);
    println!("{r}");
    valid(&r);
    assert!(r.expired > 0, "the deadline ended transactions");
    assert_eq!(r.ended_past_deadline, 0);
    assert_eq!(r.failed_by_outage, 0);
    assert_eq!(r.failed, r.expired, "{r}");
}

/// Silent, every transaction ends by its deadline too; but a request let out as a
/// half-open round's probe whose answer never comes spends a republish (so that a
/// request whose answer was lost leaves the probe rotation), and over an outage of
/// many rounds the requests picked as probes three times end FAILED/UNANSWERED
/// before their deadline: the one way a silent outage still fails a transaction
/// early (docs/verification.md, "Outage windows").
#[test]
fn a_silent_outage_longer_than_the_deadline_ends_every_transaction() {
    let r = simulate(&endless(OutageMode::Silent), 1);
    println!("{r}");
    assert_eq!(r.stuck, 0, "{r}");
    assert_eq!(r.attempted, r.succeeded + r.failed);
    assert!(r.expired > 0, "the deadline ended transactions");
    assert_eq!(r.ended_past_deadline, 0);
    // Ended UNANSWERED by the outage (failed probes), or EXPIRED: nothing else.
    assert_eq!(r.failed, r.expired + r.failed_by_outage, "{r}");
    let only = r
        .violations()
        .into_iter()
        .all(|(name, _)| name == "failed-by-outage");
    assert!(only, "{:?}", r.violations());
}

/// The same without a transaction deadline: transactions held by the outage end only
/// when it does, long past their deadline.
#[test]
fn without_a_deadline_an_endless_outage_holds_transactions_past_it() {
    let c = SimConfig {
        flaws: Flaws::only(|f| f.no_transaction_deadline = true),
        ..endless(OutageMode::Error)
    };
    let r = simulate(&c, 1);
    assert!(r.ended_past_deadline > 0, "{r}");
    assert_eq!(r.expired, 0);
    assert!(!r.is_valid());
}

#[test]
fn outage_windows_parse_with_named_errors() {
    assert_eq!(
        Outage::parse("1200+600"),
        Ok(Outage {
            start_ms: 1_200_000,
            duration_ms: 600_000
        })
    );
    for bad in ["1200", "a+1", "10+0", "-1+5"] {
        let e = Outage::parse(bad).unwrap_err();
        assert!(e.contains("--outage") && e.contains(bad), "{e}");
    }
}

/// Each execution environment as the functions run it: its view of the breaker
/// trusted for BREAKER_REFRESH_SECONDS (5 s, the default), its clock off by up to 3 s,
/// operators resolving and replaying, every other fault on (duplicates and double
/// fires included), both outage modes: no guarantee breaks, the probes of a round stay
/// within their bound. With a view trusted past the cool-down (what the functions
/// refuse at start-up) environments let requests out of an OPEN breaker on a stale
/// CLOSED view, and the probe bound or the paused requests show it.
#[test]
fn cached_breaker_views_skewed_clocks_and_operators_break_no_guarantee() {
    let every_fault = |mode: OutageMode| SimConfig {
        transactions: 4_000,
        outages: vec![Outage {
            start_ms: 1_200_000,
            duration_ms: 1_200_000,
        }],
        outage_mode: mode,
        breaker: Some(domain::breaker::BreakerSettings::default()),
        breaker_refresh_ms: 5_000,
        clock_skew_ms: 3_000,
        operator_rate: 0.1,
        ..SimConfig::default()
    };
    for mode in [OutageMode::Error, OutageMode::Silent] {
        let c = every_fault(mode);
        let r = simulate(&c, 3);
        println!("{r}");
        assert!(r.is_valid(), "violations {:?}\n{r}", r.violations());
        assert_eq!(r.stuck, 0, "{r}");
        assert!(r.breaker_cached_admissions > 0, "views were cached: {r}");
        assert!(
            r.operator_resolved > 0 && r.operator_replayed > 0,
            "operators acted: {r}"
        );
    }
    // Trusted for an hour, far past the 60 s cool-down, with retries due every few
    // seconds (a 10 s backoff) so that environments hold a CLOSED view when it opens.
    let stale = SimConfig {
        breaker_refresh_ms: 3_600_000,
        clock_skew_ms: 0,
        operator_rate: 0.0,
        backoff_base_ms: 10_000,
        backoff_cap_ms: 60_000,
        max_attempts: 10,
        ..every_fault(OutageMode::Error)
    };
    let fresh = SimConfig {
        breaker_refresh_ms: 0,
        ..stale.clone()
    };
    let (a, b) = (simulate(&stale, 3), simulate(&fresh, 3));
    println!("stale:\n{a}\nfresh:\n{b}");
    assert!(
        a.outage_errors > 2 * b.outage_errors,
        "a view trusted past the cool-down lets requests into the outage: {} ERROR answers against {}",
        a.outage_errors,
        b.outage_errors
    );
    assert!(
        a.retries_paused * 10 < b.retries_paused,
        "and pauses almost none: {} against {}",
        a.retries_paused,
        b.retries_paused
    );
}
