//! The adaptive backoff study: on services whose "not available now" lasts a recovery
//! time, three wait policies play the same transactions — the configured curve, the
//! best fixed curve per reason chosen in hindsight (the oracle) and an adaptive policy
//! that learns from the outcomes of its own waits — and an objective stated beforehand
//! decides whether adapting is worth building (`docs/design.md#choosing-the-wait-the-objective`).
//!
//! A pure computation: no queue, no store, no clock. Each transaction's first request
//! is answered CANCELLED at its start; every later attempt succeeds if it is sent at or
//! after the service's recovery instant for it, and is CANCELLED otherwise; after
//! `max_attempts` CANCELLED it ends FAILED. Everything random comes from the seed.

pub mod figures;
pub mod policies;
pub mod profile;

use domain::RetryPolicy;
use figures::{Figures, Objective, Outcome};
use policies::{jitter_stream, play, run_adaptive, with_base, AdaptiveConfig, Played};
use profile::{Profile, Tx, HOUR, MINUTE};
use std::time::Duration;

/// The scope of a study run.
#[derive(Debug, Clone, PartialEq)]
pub struct StudyConfig {
    pub seed_start: u64,
    pub seeds: u64,
    /// Transactions per seed, starting uniformly over `days`.
    pub transactions: usize,
    pub days: f64,
    pub max_attempts: u32,
    pub configured: RetryPolicy,
    pub adaptive: AdaptiveConfig,
    pub objective: Objective,
}

impl Default for StudyConfig {
    fn default() -> Self {
        Self {
            seed_start: 1,
            seeds: 100,
            transactions: 2_000,
            days: 14.0,
            max_attempts: domain::defaults::MAX_ATTEMPTS,
            configured: RetryPolicy::article_default(),
            adaptive: AdaptiveConfig::default(),
            objective: Objective::default(),
        }
    }
}

/// The oracle's grid: every base × factor, with the configured cap and jitter. The
/// configured curve (2 h, ×2) is one of its points.
pub const GRID_BASE_MINUTES: [f64; 12] = [
    10.0, 15.0, 20.0, 30.0, 45.0, 60.0, 90.0, 120.0, 180.0, 240.0, 360.0, 480.0,
];
pub const GRID_FACTORS: [f64; 4] = [1.0, 1.5, 2.0, 3.0];

/// One reason's figures under the configured curve and under the oracle's.
#[derive(Debug, Clone, PartialEq)]
pub struct ReasonResult {
    pub reason: &'static str,
    pub configured: Figures,
    pub oracle: Figures,
    /// The oracle's curve for this reason: base and factor.
    pub oracle_base: Duration,
    pub oracle_factor: f64,
}

/// One profile's figures, pooled over every seed.
#[derive(Debug, Clone, PartialEq)]
pub struct ProfileResult {
    pub profile: Profile,
    pub configured: Figures,
    pub oracle: Figures,
    pub adaptive: Figures,
    pub by_reason: Vec<ReasonResult>,
    /// The adaptive policy's transactions given a candidate by exploration, and the rest.
    pub explored: Figures,
    pub greedy: Figures,
    /// Share of the greedy choices that went to each candidate multiplier.
    pub greedy_choices: Vec<f64>,
}

/// Every seed's transactions under every policy of the study, for one profile.
pub fn run_profile(profile: Profile, cfg: &StudyConfig) -> ProfileResult {
    let seeds: Vec<u64> = (0..cfg.seeds).map(|i| cfg.seed_start + i).collect();
    let workloads: Vec<Vec<Tx>> = seeds
        .iter()
        .map(|&s| profile.workload(s, cfg.transactions, cfg.days))
        .collect();
    let reasons = profile.reasons();
    let fixed = |policy_of: &dyn Fn(usize) -> RetryPolicy| -> Vec<Vec<Outcome>> {
        seeds
            .iter()
            .zip(&workloads)
            .map(|(&seed, txs)| {
                txs.iter()
                    .enumerate()
                    .map(|(i, tx)| {
                        play(
                            tx,
                            &policy_of(tx.reason),
                            cfg.max_attempts,
                            0.0,
                            &mut jitter_stream(seed, i),
                        )
                    })
                    .collect()
            })
            .collect()
    };
    let of_reason = |outcomes: &[Vec<Outcome>], r: usize| -> Figures {
        Figures::of(
            workloads
                .iter()
                .zip(outcomes)
                .flat_map(|(txs, os)| txs.iter().zip(os))
                .filter(|(tx, _)| tx.reason == r)
                .map(|(_, o)| o),
        )
    };

    let configured_out = fixed(&|_| cfg.configured.clone());
    let mut best: Vec<(RetryPolicy, Figures)> = (0..reasons.len())
        .map(|r| (cfg.configured.clone(), of_reason(&configured_out, r)))
        .collect();
    let baseline: Vec<Figures> = best.iter().map(|(_, f)| f.clone()).collect();
    for minutes in GRID_BASE_MINUTES {
        for factor in GRID_FACTORS {
            let Some(curve) = with_base(
                &cfg.configured,
                Duration::from_secs_f64(minutes * MINUTE),
                factor,
            ) else {
                continue;
            };
            let out = fixed(&|_| curve.clone());
            for (r, slot) in best.iter_mut().enumerate() {
                let f = of_reason(&out, r);
                if cfg.objective.feasible(&f, &baseline[r]) && f.mean < slot.1.mean {
                    *slot = (curve.clone(), f);
                }
            }
        }
    }
    let oracle_out = fixed(&|r| best[r].0.clone());

    let adaptive_out: Vec<Vec<Played>> = seeds
        .iter()
        .zip(&workloads)
        .map(|(&seed, txs)| {
            run_adaptive(
                txs,
                reasons.len(),
                &cfg.configured,
                &cfg.adaptive,
                &cfg.objective,
                cfg.max_attempts,
                seed,
            )
        })
        .collect();
    let played = || adaptive_out.iter().flatten();
    let greedy_total = played().filter(|p| !p.explored).count().max(1);
    let greedy_choices = (0..cfg.adaptive.multipliers.len())
        .map(|c| {
            played().filter(|p| !p.explored && p.candidate == c).count() as f64
                / greedy_total as f64
        })
        .collect();

    ProfileResult {
        profile,
        configured: Figures::of(configured_out.iter().flatten()),
        oracle: Figures::of(oracle_out.iter().flatten()),
        adaptive: Figures::of(played().map(|p| &p.outcome)),
        by_reason: best
            .iter()
            .enumerate()
            .map(|(r, (curve, oracle))| ReasonResult {
                reason: reasons[r],
                configured: baseline[r].clone(),
                oracle: oracle.clone(),
                oracle_base: curve.base(),
                oracle_factor: curve.factor(),
            })
            .collect(),
        explored: Figures::of(played().filter(|p| p.explored).map(|p| &p.outcome)),
        greedy: Figures::of(played().filter(|p| !p.explored).map(|p| &p.outcome)),
        greedy_choices,
    }
}

/// The objective's word on a policy against the configured curve.
pub fn judgement(objective: &Objective, candidate: &Figures, configured: &Figures) -> &'static str {
    if !objective.feasible(candidate, configured) {
        "breaks a constraint"
    } else if objective.beats(candidate, configured) {
        "beats"
    } else if objective.holds(candidate, configured) {
        "holds"
    } else {
        "loses"
    }
}

/// The go / no-go rule of the study: the adaptive policy must beat the configured curve
/// (keeping the constraints) on every non-stationary profile and hold on every
/// stationary one.
pub fn go(objective: &Objective, results: &[ProfileResult]) -> bool {
    results.iter().all(|r| {
        if r.profile.stationary() {
            objective.holds(&r.adaptive, &r.configured)
        } else {
            objective.beats(&r.adaptive, &r.configured)
        }
    })
}

pub const SECTION_START: &str = "<!-- backoff-study:start -->";
pub const SECTION_END: &str = "<!-- backoff-study:end -->";

/// `doc` with its study section (between the markers, and the line end after them)
/// replaced by `section`, or with `section` appended when it has none: splicing the
/// same section twice changes nothing.
pub fn splice(doc: &str, section: &str) -> String {
    if let (Some(a), Some(b)) = (doc.find(SECTION_START), doc.find(SECTION_END)) {
        if a < b {
            let rest = &doc[b + SECTION_END.len()..];
            let rest = rest.strip_prefix('\n').unwrap_or(rest);
            return format!("{}{}{}", &doc[..a], section, rest);
        }
    }
    format!("{}\n\n{}", doc.trim_end(), section)
}

fn duration(secs: f64) -> String {
    if !secs.is_finite() {
        return "—".into();
    }
    let minutes = (secs / MINUTE).round() as u64;
    if secs < HOUR {
        format!("{minutes} min")
    } else {
        format!("{} h {:02} min", minutes / 60, minutes % 60)
    }
}

fn row(name: &str, f: &Figures, verdict: &str) -> String {
    format!(
        "| {name} | {} | {} | {} | {:.3} | {:.2} % | {verdict} |\n",
        duration(f.mean),
        duration(f.p50),
        duration(f.p99),
        f.requests_per_success(),
        100.0 * f.failed_share()
    )
}

/// The report's section, markers included.
pub fn render(cfg: &StudyConfig, command: &str, results: &[ProfileResult]) -> String {
    let o = &cfg.objective;
    let a = &cfg.adaptive;
    let mut s = String::new();
    s.push_str(SECTION_START);
    s.push_str("\n## Adaptive backoff: the study\n\n");
    s.push_str(&format!(
        "Generated by `{command}` — do not edit by hand: run the command again (`./scripts/bench.sh` does). \
         Seeds {}..={}, {} transactions per seed starting uniformly over {} days, max attempts {}. \
         A pure computation (no AWS, no moto): each transaction's first request is answered CANCELLED; \
         an attempt succeeds if sent at or after the service's recovery instant for it. \
         The objective and why: [design.md](design.md#choosing-the-wait-the-objective).\n\n",
        cfg.seed_start,
        cfg.seed_start + cfg.seeds.saturating_sub(1),
        cfg.transactions,
        cfg.days,
        cfg.max_attempts,
    ));
    s.push_str(&format!(
        "**Objective**: minimise the mean time to SUCCEEDED (from the first CANCELLED), \
         subject to a FAILED share at most {:.1} points above the configured curve's and requests per SUCCEEDED (every request sent, \
         FAILED transactions' included) at most {:.0} % above it. *beats*: keeps both and a shorter mean; \
         *holds*: keeps both and a mean at most {:.0} % longer; *loses*: keeps both, mean longer than that.\n\n",
        100.0 * o.failed_share_tolerance,
        100.0 * o.requests_tolerance,
        100.0 * o.mean_margin,
    ));
    s.push_str("**Profiles** (recovery: the time from the first CANCELLED until the service accepts the transaction):\n\n");
    for r in results {
        s.push_str(&format!(
            "- `{}`: {}.\n",
            r.profile.name(),
            r.profile.describe()
        ));
    }
    let c = &cfg.configured;
    s.push_str(&format!(
        "\n**Policies**, on the same transactions and the same jitter draws:\n\n\
         - *configured*: the deployment's curve, `RetryPolicy::article_default()`: base {}, ×{}, cap {}, jitter ±{:.0} %.\n\
         - *oracle*: per reason, the best fixed curve in hindsight under the objective (against the configured curve's figures for that reason, on these very seeds), \
         searched over base ∈ {{{}}} min × factor ∈ {{{}}}, cap and jitter as configured; the configured curve is a point of the grid.\n\
         - *adaptive*: epsilon-greedy per reason over bases of {{{}}} × the configured base (floor {}; factor, cap and jitter as configured). \
         At a transaction's first CANCELLED it draws a candidate uniformly with probability {} (exploration), otherwise takes the candidate \
         whose window (the last {} ended transactions of that reason given that candidate, at least {}) has the shortest mean time to SUCCEEDED \
         among those keeping the constraints against the configured candidate's window; the configured candidate until that window has {} outcomes. \
         {} \
         An outcome enters a window only when the transaction has ended; the policy never sees a recovery instant, only what its own waits produced.\n\n",
        duration(c.base().as_secs_f64()),
        c.factor(),
        duration(c.cap().as_secs_f64()),
        100.0 * c.jitter(),
        GRID_BASE_MINUTES.map(|m| format!("{m}")).join(", "),
        GRID_FACTORS.map(|f| format!("{f}")).join(", "),
        a.multipliers.iter().map(|m| format!("{m}")).collect::<Vec<_>>().join(", "),
        duration(a.floor.as_secs_f64()),
        a.epsilon,
        a.window,
        a.min_observations,
        a.min_observations,
        if a.keep_horizon {
            "Its last attempt is never sent before the configured curve's latest possible last attempt (the sum of the configured waits at +jitter), \
             so a transaction the configured curve brings to SUCCEEDED still gets an attempt after its recovery: exploring a short base costs requests and time (up to that horizon), not FAILED."
        } else {
            "Its last attempt goes wherever the candidate's curve puts it (`--adaptive-without-horizon`)."
        },
    ));
    s.push_str("| profile / policy | time to SUCCEEDED: mean | p50 | p99 | requests per SUCCEEDED | FAILED | objective vs configured |\n|---|---:|---:|---:|---:|---:|---|\n");
    for r in results {
        let name = r.profile.name();
        s.push_str(&row(&format!("`{name}` configured"), &r.configured, "—"));
        s.push_str(&row(
            &format!("`{name}` oracle"),
            &r.oracle,
            judgement(o, &r.oracle, &r.configured),
        ));
        s.push_str(&row(
            &format!("`{name}` adaptive"),
            &r.adaptive,
            judgement(o, &r.adaptive, &r.configured),
        ));
    }
    s.push_str("\nThe oracle's curves, and what exploration cost the adaptive policy (its explored transactions against its greedy ones):\n\n");
    s.push_str("| profile | oracle: base, factor per reason | adaptive: greedy choices by multiplier | explored: FAILED, requests per SUCCEEDED | greedy: FAILED, requests per SUCCEEDED | adaptive mean / oracle mean |\n|---|---|---|---|---|---:|\n");
    for r in results {
        let curves = r
            .by_reason
            .iter()
            .map(|x| {
                format!(
                    "`{}` {} ×{}",
                    x.reason,
                    duration(x.oracle_base.as_secs_f64()),
                    x.oracle_factor
                )
            })
            .collect::<Vec<_>>()
            .join("; ");
        let choices = a
            .multipliers
            .iter()
            .zip(&r.greedy_choices)
            .filter(|(_, share)| **share > 0.0)
            .map(|(m, share)| format!("{m}×: {:.1} %", 100.0 * share))
            .collect::<Vec<_>>()
            .join(", ");
        s.push_str(&format!(
            "| `{}` | {curves} | {choices} | {:.2} %, {:.3} | {:.2} %, {:.3} | {:.2} |\n",
            r.profile.name(),
            100.0 * r.explored.failed_share(),
            r.explored.requests_per_success(),
            100.0 * r.greedy.failed_share(),
            r.greedy.requests_per_success(),
            r.adaptive.mean / r.oracle.mean,
        ));
    }
    let verdict = if go(o, results) {
        "**GO**"
    } else {
        "**NO-GO**"
    };
    s.push_str(&format!(
        "\n**Verdict by the rule** (adaptive beats the configured curve on every non-stationary profile — {} — and holds on every stationary one — {}): {verdict}.\n\n",
        results.iter().filter(|r| !r.profile.stationary()).map(|r| format!("`{}`", r.profile.name())).collect::<Vec<_>>().join(", "),
        results.iter().filter(|r| r.profile.stationary()).map(|r| format!("`{}`", r.profile.name())).collect::<Vec<_>>().join(", "),
    ));
    let (met, missed): (Vec<_>, Vec<_>) = results
        .iter()
        .partition(|r| r.adaptive.mean <= r.oracle.mean * 1.10);
    let names = |rs: &[&ProfileResult]| {
        if rs.is_empty() {
            "none".to_string()
        } else {
            rs.iter()
                .map(|r| format!("`{}`", r.profile.name()))
                .collect::<Vec<_>>()
                .join(", ")
        }
    };
    s.push_str(&format!(
        "The goal on a go, the adaptive mean within 10 % of the oracle's: met on {}; missed on {}.\n\n",
        names(&met),
        names(&missed)
    ));
    s.push_str(
        "What the figures mean for the feature: [design.md](design.md#adaptive-waits-the-studys-answer-is-no-go).\n",
    );
    s.push_str(SECTION_END);
    s.push('\n');
    s
}
