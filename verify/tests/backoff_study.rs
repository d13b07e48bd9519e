//! The adaptive backoff study (`verify::study`): its oracle, its adaptive policy's
//! bounds, its determinism and its report's splicing, on small scopes.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use domain::policy::SplitMix64;
use domain::RetryPolicy;
use verify::study::figures::{Figures, Objective};
use verify::study::policies::{play, run_adaptive, AdaptiveConfig};
use verify::study::profile::Profile;
use verify::study::{run_profile, splice, StudyConfig, SECTION_END, SECTION_START};

fn small() -> StudyConfig {
    StudyConfig {
        seeds: 4,
        transactions: 600,
        ..StudyConfig::default()
    }
}

/// The configured curve is a point of the oracle's grid and the oracle picks by the
/// objective against it: per reason it keeps both constraints and a mean no longer.
#[test]
fn the_oracle_is_never_worse_than_the_configured_curve() {
    let cfg = small();
    for &profile in Profile::ALL {
        let r = run_profile(profile, &cfg);
        for x in &r.by_reason {
            assert!(
                cfg.objective.feasible(&x.oracle, &x.configured),
                "{} {}: oracle {:?} breaks a constraint against {:?}",
                profile.name(),
                x.reason,
                x.oracle,
                x.configured
            );
            assert!(
                x.oracle.mean <= x.configured.mean,
                "{} {}: oracle mean {} > configured {}",
                profile.name(),
                x.reason,
                x.oracle.mean,
                x.configured.mean
            );
        }
    }
}

/// Where the configured curve already fits the recovery, learning settles on it: the
/// adaptive policy's median stays within 5 % of the configured curve's, and nearly all
/// its greedy choices are the configured base.
#[test]
fn on_the_stationary_profile_the_adaptive_median_stays_with_the_configured_one() {
    let cfg = small();
    let r = run_profile(Profile::Stationary, &cfg);
    assert!(
        r.adaptive.p50 <= r.configured.p50 * 1.05,
        "adaptive p50 {} against configured {}",
        r.adaptive.p50,
        r.configured.p50
    );
    let configured_candidate = cfg
        .adaptive
        .multipliers
        .iter()
        .position(|&m| m == 1.0)
        .unwrap();
    assert!(
        r.greedy_choices[configured_candidate] >= 0.95,
        "greedy choices {:?}",
        r.greedy_choices
    );
}

#[test]
fn the_same_seed_gives_the_same_figures() {
    let cfg = small();
    for profile in [Profile::TwoReasons, Profile::DayNight] {
        assert_eq!(run_profile(profile, &cfg), run_profile(profile, &cfg));
    }
    let other = StudyConfig {
        seed_start: 1_000,
        ..small()
    };
    assert_ne!(
        run_profile(Profile::Shift, &cfg).adaptive,
        run_profile(Profile::Shift, &other).adaptive
    );
}

/// Whatever the policy, a transaction gets at least one request and at most
/// `max_attempts`; it ends FAILED only after all of them.
#[test]
fn a_transaction_never_gets_more_than_max_attempts() {
    let cfg = small();
    let max = cfg.max_attempts;
    let check = |requests: u32, succeeded: bool, what: &str| {
        assert!((1..=max).contains(&requests), "{what}: {requests} requests");
        assert!(
            succeeded || requests == max,
            "{what}: FAILED after {requests}"
        );
    };
    let tiny = RetryPolicy::new(
        std::time::Duration::from_secs(1),
        1.0,
        std::time::Duration::from_secs(1),
        0.0,
        false,
    )
    .unwrap();
    for &profile in Profile::ALL {
        let txs = profile.workload(7, cfg.transactions, cfg.days);
        for policy in [&cfg.configured, &tiny] {
            let mut rng = SplitMix64::new(7);
            for tx in &txs {
                let o = play(tx, policy, max, 0.0, &mut rng);
                check(o.requests, o.succeeded_after.is_some(), profile.name());
            }
        }
        for keep_horizon in [true, false] {
            let adaptive = AdaptiveConfig {
                keep_horizon,
                epsilon: 0.5,
                ..AdaptiveConfig::default()
            };
            let played = run_adaptive(
                &txs,
                profile.reasons().len(),
                &cfg.configured,
                &adaptive,
                &cfg.objective,
                max,
                7,
            );
            assert_eq!(played.len(), txs.len());
            for p in played {
                check(
                    p.outcome.requests,
                    p.outcome.succeeded_after.is_some(),
                    profile.name(),
                );
            }
        }
    }
}

/// The adaptive policy's last attempt waits for the configured curve's horizon, so on
/// the same transactions it never ends more of them FAILED, exploration included.
#[test]
fn keeping_the_horizon_adds_no_failed() {
    let mut cfg = small();
    cfg.adaptive.epsilon = 0.5;
    for &profile in Profile::ALL {
        let r = run_profile(profile, &cfg);
        assert!(
            r.adaptive.failed <= r.configured.failed,
            "{}: adaptive {} FAILED, configured {}",
            profile.name(),
            r.adaptive.failed,
            r.configured.failed
        );
    }
}

/// Why the objective is not requests per SUCCEEDED alone: waiting the cap every time
/// spends fewer requests than the configured curve, and the objective still rejects it.
#[test]
fn waiting_the_cap_every_time_wins_on_requests_but_not_on_the_objective() {
    let configured = RetryPolicy::article_default();
    let at_cap = RetryPolicy::new(
        configured.cap(),
        1.0,
        configured.cap(),
        configured.jitter(),
        false,
    )
    .unwrap();
    let txs = Profile::TwoReasons.workload(3, 2_000, 14.0);
    let figures = |p: &RetryPolicy| {
        let mut rng = SplitMix64::new(3);
        let outcomes: Vec<_> = txs.iter().map(|tx| play(tx, p, 4, 0.0, &mut rng)).collect();
        Figures::of(&outcomes)
    };
    let (base, cap) = (figures(&configured), figures(&at_cap));
    assert!(cap.requests_per_success() < base.requests_per_success());
    assert!(!Objective::default().beats(&cap, &base));
    assert!(!Objective::default().holds(&cap, &base));
}

#[test]
fn the_report_section_is_spliced_between_its_markers() {
    let section = format!("{SECTION_START}\nnew\n{SECTION_END}\n");
    let doc = format!("# B\n\nbefore\n{SECTION_START}\nold\n{SECTION_END}\nafter\n");
    let spliced = splice(&doc, &section);
    assert!(spliced.contains("before") && spliced.contains("after"));
    assert!(spliced.contains("new") && !spliced.contains("old"));
    assert_eq!(splice(&spliced, &section), spliced);
    let appended = splice("# B\n\nbefore\n", &section);
    assert!(appended.starts_with("# B\n\nbefore\n") && appended.ends_with(&section));
}
