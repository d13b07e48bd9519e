//! The wait policies under study, each playing a transaction against its service. The
//! waits come from the domain's [`RetryPolicy`]; none is computed here.

use super::figures::{Figures, Objective, Outcome};
use super::profile::{Tx, MINUTE};
use crate::sim::Rng;
use domain::{Attempt, RandomSource, RetryPolicy};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::time::Duration;

/// Plays `tx` with `policy`: attempt 1 at `start`, each CANCELLED attempt `k` followed
/// by attempt `k + 1` after `policy.wait(k)`, until one lands at or after the recovery
/// or `max_attempts` were sent. The last attempt is sent no earlier than `horizon`
/// seconds after the start (0: wherever the curve puts it).
pub fn play(
    tx: &Tx,
    policy: &RetryPolicy,
    max_attempts: u32,
    horizon: f64,
    rng: &mut dyn RandomSource,
) -> Outcome {
    let mut at = tx.start;
    let mut attempt = Attempt::FIRST;
    loop {
        if at >= tx.recovery {
            return Outcome {
                succeeded_after: Some(at - tx.start),
                ended_after: at - tx.start,
                requests: attempt.get(),
            };
        }
        if attempt.get() >= max_attempts {
            return Outcome {
                succeeded_after: None,
                ended_after: at - tx.start,
                requests: attempt.get(),
            };
        }
        let mut wait = policy.wait(attempt, rng).as_secs_f64();
        if attempt.get() + 1 == max_attempts {
            wait = wait.max(horizon - (at - tx.start));
        }
        at += wait;
        attempt = attempt.next();
    }
}

/// The latest instant, in seconds after the start, at which `policy` can send its last
/// attempt (every wait at the top of its jitter range).
pub fn latest_last_attempt(policy: &RetryPolicy, max_attempts: u32) -> f64 {
    let mut attempt = Attempt::FIRST;
    let mut after = 0.0;
    while attempt.get() < max_attempts {
        after += policy.bounds(attempt).1.as_secs_f64();
        attempt = attempt.next();
    }
    after
}

/// The jitter stream of one transaction: the same draws whatever the policy, so two
/// policies differ only by their curves.
pub(crate) fn jitter_stream(seed: u64, index: usize) -> Rng {
    Rng::new(seed, 0x1_0000 + index as u64)
}

/// `configured` with another base (never under `floor`, never over the cap); factor,
/// cap and jitter unchanged.
pub fn with_base(configured: &RetryPolicy, base: Duration, factor: f64) -> Option<RetryPolicy> {
    RetryPolicy::new(
        base.min(configured.cap()),
        factor,
        configured.cap(),
        configured.jitter(),
        configured.strict_cap(),
    )
    .ok()
}

/// The adaptive policy's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct AdaptiveConfig {
    /// Candidate bases, as multiples of the configured base (1 must be among them: the
    /// configured curve is the baseline the constraints are checked against).
    pub multipliers: Vec<f64>,
    /// No candidate base below this.
    pub floor: Duration,
    /// Share of transactions given a candidate drawn uniformly (exploration).
    pub epsilon: f64,
    /// Outcomes kept per reason and candidate: the most recent ones.
    pub window: usize,
    /// A candidate with fewer outcomes in its window is not chosen greedily.
    pub min_observations: usize,
    /// Send the last attempt no earlier than the configured curve's latest possible last
    /// attempt: whatever the candidate, a transaction the configured curve would bring
    /// to SUCCEEDED still gets an attempt after its recovery, so neither exploration nor
    /// a wrong guess can add a FAILED.
    pub keep_horizon: bool,
}

impl Default for AdaptiveConfig {
    fn default() -> Self {
        Self {
            multipliers: vec![0.125, 0.25, 0.5, 1.0, 2.0],
            floor: Duration::from_secs_f64(10.0 * MINUTE),
            epsilon: 0.1,
            window: 40,
            min_observations: 10,
            keep_horizon: true,
        }
    }
}

/// One transaction under the adaptive policy.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Played {
    pub outcome: Outcome,
    /// Index into [`AdaptiveConfig::multipliers`] of the candidate it was given.
    pub candidate: usize,
    /// Given by exploration rather than chosen greedily.
    pub explored: bool,
}

/// Epsilon-greedy over candidate bases, per reason. At a transaction's first CANCELLED
/// it picks a candidate for its whole curve: with probability `epsilon` one drawn
/// uniformly, otherwise the candidate whose window of outcomes has the shortest mean
/// time to SUCCEEDED among those that keep the objective's constraints against the
/// configured candidate's window (the configured one while it has too few outcomes);
/// with `keep_horizon`, its last attempt waits for the configured curve's horizon.
/// A transaction's outcome enters the windows only once it has ended: the policy sees
/// what the waits it chose produced, when they produced it, and nothing else.
pub fn run_adaptive(
    txs: &[Tx],
    reasons: usize,
    configured: &RetryPolicy,
    cfg: &AdaptiveConfig,
    objective: &Objective,
    max_attempts: u32,
    seed: u64,
) -> Vec<Played> {
    let baseline = cfg.multipliers.iter().position(|&m| m == 1.0).unwrap_or(0);
    let candidates: Vec<RetryPolicy> = cfg
        .multipliers
        .iter()
        .map(|&m| {
            let base = configured.base().mul_f64(m).max(cfg.floor);
            with_base(configured, base, configured.factor()).unwrap_or_else(|| configured.clone())
        })
        .collect();
    let horizon = if cfg.keep_horizon {
        latest_last_attempt(configured, max_attempts)
    } else {
        0.0
    };
    let mut windows: Vec<Vec<VecDeque<Outcome>>> =
        vec![vec![VecDeque::new(); candidates.len()]; reasons];
    // Ended transactions not yet seen: (end instant in ms, transaction index).
    let mut pending: BinaryHeap<Reverse<(u64, usize)>> = BinaryHeap::new();
    let mut explore = Rng::new(seed, 0xE4);
    let mut played: Vec<Played> = Vec::with_capacity(txs.len());
    for (i, tx) in txs.iter().enumerate() {
        while let Some(&Reverse((end_ms, j))) = pending.peek() {
            if end_ms as f64 / 1000.0 > tx.start {
                break;
            }
            pending.pop();
            let (p, done) = (&played[j], &txs[j]);
            let w = &mut windows[done.reason][p.candidate];
            w.push_back(p.outcome);
            if w.len() > cfg.window {
                w.pop_front();
            }
        }
        let explored = explore.unit() < cfg.epsilon;
        let candidate = if explored {
            ((explore.unit() * candidates.len() as f64) as usize).min(candidates.len() - 1)
        } else {
            greedy(&windows[tx.reason], baseline, cfg, objective)
        };
        let outcome = play(
            tx,
            &candidates[candidate],
            max_attempts,
            horizon,
            &mut jitter_stream(seed, i),
        );
        let end = tx.start + outcome.ended_after;
        pending.push(Reverse(((end * 1000.0) as u64, i)));
        played.push(Played {
            outcome,
            candidate,
            explored,
        });
    }
    played
}

fn greedy(
    windows: &[VecDeque<Outcome>],
    baseline: usize,
    cfg: &AdaptiveConfig,
    objective: &Objective,
) -> usize {
    if windows[baseline].len() < cfg.min_observations {
        return baseline;
    }
    let base = Figures::of(&windows[baseline]);
    let mut best = (baseline, base.mean);
    for (c, w) in windows.iter().enumerate() {
        if c == baseline || w.len() < cfg.min_observations {
            continue;
        }
        let f = Figures::of(w);
        if objective.feasible(&f, &base) && f.mean < best.1 {
            best = (c, f.mean);
        }
    }
    best.0
}
