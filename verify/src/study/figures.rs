//! What a run of transactions comes to, and the objective that compares two runs.

/// How one transaction ended.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Outcome {
    /// Seconds from the first CANCELLED to the SUCCESS; `None`: every attempt was
    /// CANCELLED and the transaction ended FAILED.
    pub succeeded_after: Option<f64>,
    /// Seconds from the first CANCELLED to the last answer (the SUCCESS or the last
    /// CANCELLED): when the outcome is known.
    pub ended_after: f64,
    /// Requests sent, the first included.
    pub requests: u32,
}

/// The figures of a set of transactions.
#[derive(Debug, Clone, PartialEq)]
pub struct Figures {
    pub transactions: usize,
    pub succeeded: usize,
    pub failed: usize,
    pub requests: u64,
    /// Time to SUCCEEDED, seconds: mean, median and 99th percentile (nearest rank);
    /// infinite when nothing succeeded.
    pub mean: f64,
    pub p50: f64,
    pub p99: f64,
}

impl Figures {
    pub fn of<'a>(outcomes: impl IntoIterator<Item = &'a Outcome>) -> Self {
        let mut times = Vec::new();
        let (mut transactions, mut requests) = (0usize, 0u64);
        for o in outcomes {
            transactions += 1;
            requests += u64::from(o.requests);
            if let Some(t) = o.succeeded_after {
                times.push(t);
            }
        }
        times.sort_by(f64::total_cmp);
        Self {
            transactions,
            succeeded: times.len(),
            failed: transactions - times.len(),
            requests,
            mean: if times.is_empty() {
                f64::INFINITY
            } else {
                times.iter().sum::<f64>() / times.len() as f64
            },
            p50: rank(&times, 0.50),
            p99: rank(&times, 0.99),
        }
    }

    pub fn failed_share(&self) -> f64 {
        if self.transactions == 0 {
            return 0.0;
        }
        self.failed as f64 / self.transactions as f64
    }

    /// Every request sent, those of FAILED transactions included, per SUCCEEDED.
    pub fn requests_per_success(&self) -> f64 {
        if self.succeeded == 0 {
            return f64::INFINITY;
        }
        self.requests as f64 / self.succeeded as f64
    }
}

/// Nearest-rank percentile of sorted values.
fn rank(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::INFINITY;
    }
    let i = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[i - 1]
}

/// The study's objective: minimise the mean time to SUCCEEDED, subject to a FAILED
/// share and requests per SUCCEEDED no worse than the baseline's (the configured
/// curve's) within the tolerances. The mean rather than the median: on a mixture of a
/// fast and a slow recovery the median sits on the edge between the two and jumps
/// from one to the other with a small change in their shares.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Objective {
    /// FAILED share may exceed the baseline's by this much (absolute: 0.005 = 0.5 points).
    pub failed_share_tolerance: f64,
    /// Requests per SUCCEEDED may exceed the baseline's by this fraction.
    pub requests_tolerance: f64,
    /// "Does not lose": the mean may exceed the baseline's by this fraction.
    pub mean_margin: f64,
}

impl Default for Objective {
    fn default() -> Self {
        Self {
            failed_share_tolerance: 0.005,
            requests_tolerance: 0.05,
            mean_margin: 0.05,
        }
    }
}

impl Objective {
    /// Keeps both constraints against `baseline`.
    pub fn feasible(&self, candidate: &Figures, baseline: &Figures) -> bool {
        candidate.failed_share() <= baseline.failed_share() + self.failed_share_tolerance
            && candidate.requests_per_success()
                <= baseline.requests_per_success() * (1.0 + self.requests_tolerance)
    }

    /// Feasible, with a shorter mean.
    pub fn beats(&self, candidate: &Figures, baseline: &Figures) -> bool {
        self.feasible(candidate, baseline) && candidate.mean < baseline.mean
    }

    /// Feasible, with a mean at most `mean_margin` longer.
    pub fn holds(&self, candidate: &Figures, baseline: &Figures) -> bool {
        self.feasible(candidate, baseline)
            && candidate.mean <= baseline.mean * (1.0 + self.mean_margin)
    }
}
