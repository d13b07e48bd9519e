//! The services of the study: when a transaction starts, for which reason it is told
//! "not available now", and when that service will accept it again.

use crate::sim::Rng;
use strum::{IntoStaticStr, VariantArray};

pub const MINUTE: f64 = 60.0;
pub const HOUR: f64 = 3600.0;
pub const DAY: f64 = 24.0 * HOUR;

/// One transaction of a run: its first request is answered CANCELLED at `start`; every
/// attempt sent at or after `recovery` succeeds, every one before it is CANCELLED.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tx {
    /// Seconds since the run began.
    pub start: f64,
    /// Index into [`Profile::reasons`].
    pub reason: usize,
    /// The instant, in seconds since the run began, from which the service accepts it.
    pub recovery: f64,
}

/// A service's recovery times, by reason and time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, IntoStaticStr, VariantArray)]
#[strum(serialize_all = "kebab-case")]
pub enum Profile {
    /// Two reasons, stationary: one recovers in minutes, the other in hours.
    TwoReasons,
    /// One reason whose recovery is short by day and long by night.
    DayNight,
    /// One reason whose recovery lengthens halfway through the run.
    Shift,
    /// One reason, stationary, whose recovery the configured curve already fits.
    Stationary,
}

impl Profile {
    /// Every variant, in declaration order.
    pub const ALL: &'static [Profile] = <Self as VariantArray>::VARIANTS;

    pub fn name(self) -> &'static str {
        self.into()
    }

    pub fn reasons(self) -> &'static [&'static str] {
        match self {
            Profile::TwoReasons => &["FAST", "SLOW"],
            _ => &["NOT_AVAILABLE"],
        }
    }

    /// Whether the recovery times stay the same distribution for the whole run.
    pub fn stationary(self) -> bool {
        matches!(self, Profile::TwoReasons | Profile::Stationary)
    }

    /// The distributions, as the report states them.
    pub fn describe(self) -> &'static str {
        match self {
            Profile::TwoReasons => {
                "stationary; 60 % `FAST`: recovery log-uniform 5 min – 1 h; 40 % `SLOW`: log-uniform 3 h – 12 h"
            }
            Profile::DayNight => {
                "started 08:00–20:00: recovery log-uniform 5 min – 1 h; started at night: log-uniform 4 h – 10 h"
            }
            Profile::Shift => {
                "first half of the run: recovery log-uniform 5 min – 1 h; second half: log-uniform 3 h – 12 h"
            }
            Profile::Stationary => {
                "stationary; recovery log-uniform 1 h – 2 h (the configured first wait, 2 h ± 10 %, fits it)"
            }
        }
    }

    /// The seconds from `start` until the service recovers, for the uniform draw `u`.
    fn recovery_after(self, reason: usize, start: f64, days: f64, u: f64) -> f64 {
        let (lo, hi) = match self {
            Profile::TwoReasons if reason == 0 => (5.0 * MINUTE, HOUR),
            Profile::TwoReasons => (3.0 * HOUR, 12.0 * HOUR),
            Profile::DayNight => {
                let hour = (start % DAY) / HOUR;
                if (8.0..20.0).contains(&hour) {
                    (5.0 * MINUTE, HOUR)
                } else {
                    (4.0 * HOUR, 10.0 * HOUR)
                }
            }
            Profile::Shift if start < days * DAY / 2.0 => (5.0 * MINUTE, HOUR),
            Profile::Shift => (3.0 * HOUR, 12.0 * HOUR),
            Profile::Stationary => (HOUR, 2.0 * HOUR),
        };
        lo * (hi / lo).powf(u)
    }

    /// A seed's transactions, in order of start: `transactions` starts drawn uniformly
    /// over `days` days.
    pub fn workload(self, seed: u64, transactions: usize, days: f64) -> Vec<Tx> {
        let mut rng = Rng::new(seed, 0x57D1);
        let mut txs: Vec<Tx> = (0..transactions)
            .map(|_| {
                let start = rng.unit() * days * DAY;
                let reason = match self {
                    Profile::TwoReasons if rng.unit() >= 0.6 => 1,
                    _ => 0,
                };
                let recovery = start + self.recovery_after(reason, start, days, rng.unit());
                Tx {
                    start,
                    reason,
                    recovery,
                }
            })
            .collect();
        txs.sort_by(|a, b| a.start.total_cmp(&b.start));
        txs
    }
}
