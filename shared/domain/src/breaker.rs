//! The circuit breaker of one external service, as pure rules: from what the service
//! did in a sliding window (technical failures among the answers, answer deadlines that
//! fired), whether requests go out. CLOSED lets every request out; OPEN none (a retry
//! due now is paused until the next probe instant, spread by jitter so the reopening is
//! no thundering herd); HALF_OPEN at most `probes` requests per cool-down; a failed
//! probe reopens it with the cool-down doubled up to `cooldown_max`. An operator can
//! force either end ([`Breaker::force`]).
//!
//! Everything here is a function of the breaker, the settings and the instant; the
//! store keeps the breaker in one item and the window's counts apart from it. Why, and
//! the defaults: `docs/design.md#the-circuit-breaker-an-outage-pauses-retries`.

use crate::defaults;
use crate::ids::Timestamp;
use crate::policy::RandomSource;
use serde::{Deserialize, Serialize};
use std::time::Duration;
use strum::IntoStaticStr;
use thiserror::Error;

/// Buckets of the sliding window: the window moves by `window / BUCKETS`.
pub const BUCKETS: u32 = 6;

/// What the service did with one request, as the breaker counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Signal {
    /// A business answer (SUCCESS or CANCELLED): the service is up.
    Answered,
    /// A business answer to the request a half-open round let out as its probe: the
    /// only answer that closes a HALF_OPEN breaker (any other was asked before the
    /// round, and says nothing of the service now). Counted as an answer too.
    ProbeAnswered,
    /// A technical failure answered by the service (its ERROR outcome).
    Technical,
    /// An answer deadline fired: the service said nothing in time.
    DeadlineFired,
}

/// The breaker's settings (template parameters), validated once.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct BreakerSettings {
    /// The sliding window the counts are taken over.
    pub window: Duration,
    /// Fewest outcomes (answers and technical failures) in the window before the
    /// ratio can open the breaker.
    pub min_calls: u32,
    /// Share of technical failures among the window's outcomes that opens it.
    pub failure_ratio: f64,
    /// Answer deadlines fired in the window that open it on their own.
    pub deadline_burst: u32,
    /// First cool-down of OPEN; doubled at each failed probe round.
    pub cooldown: Duration,
    /// The longest cool-down.
    pub cooldown_max: Duration,
    /// Requests let out per HALF_OPEN round.
    pub probes: u32,
}

/// A setting out of its range, named with its value.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("breaker setting {name} = {value}: {reason}")]
pub struct BreakerSettingError {
    pub name: &'static str,
    pub value: String,
    pub reason: &'static str,
}

impl Default for BreakerSettings {
    fn default() -> Self {
        Self {
            window: defaults::BREAKER_WINDOW,
            min_calls: defaults::BREAKER_MIN_CALLS,
            failure_ratio: defaults::BREAKER_FAILURE_RATIO,
            deadline_burst: defaults::BREAKER_DEADLINE_BURST,
            cooldown: defaults::BREAKER_COOLDOWN,
            cooldown_max: defaults::BREAKER_COOLDOWN_MAX,
            probes: defaults::BREAKER_PROBES,
        }
    }
}

impl BreakerSettings {
    /// The settings, or the first one out of range.
    pub fn validated(self) -> Result<Self, BreakerSettingError> {
        let bad = |name, value: String, reason| {
            Err(BreakerSettingError {
                name,
                value,
                reason,
            })
        };
        if self.window < Duration::from_secs(u64::from(BUCKETS)) {
            return bad(
                "window",
                format!("{}s", self.window.as_secs()),
                "must be at least 6 seconds (six buckets of one second)",
            );
        }
        if self.min_calls == 0 {
            return bad("min_calls", "0".into(), "must be at least 1");
        }
        if !(self.failure_ratio > 0.0 && self.failure_ratio <= 1.0) {
            return bad(
                "failure_ratio",
                self.failure_ratio.to_string(),
                "must be in (0, 1]",
            );
        }
        if self.deadline_burst == 0 {
            return bad("deadline_burst", "0".into(), "must be at least 1");
        }
        if self.cooldown < Duration::from_secs(1) {
            return bad(
                "cooldown",
                format!("{}ms", self.cooldown.as_millis()),
                "must be at least 1 second",
            );
        }
        if self.cooldown_max < self.cooldown {
            return bad(
                "cooldown_max",
                format!("{}s", self.cooldown_max.as_secs()),
                "must be at least the cool-down",
            );
        }
        if self.probes == 0 {
            return bad("probes", "0".into(), "must be at least 1");
        }
        Ok(self)
    }

    fn bucket_ms(&self) -> i64 {
        millis(self.window) / i64::from(BUCKETS)
    }
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// The counts of one bucket of the window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tally {
    pub answered: u32,
    pub technical: u32,
    pub deadlines: u32,
    /// Of `answered`, the answers to a half-open round's probe (a batch's count: the
    /// window does not keep it).
    #[serde(default)]
    pub probes_answered: u32,
}

impl Tally {
    pub fn add(&mut self, signal: Signal) {
        let n = match signal {
            Signal::Answered => &mut self.answered,
            Signal::ProbeAnswered => {
                self.probes_answered = self.probes_answered.saturating_add(1);
                &mut self.answered
            }
            Signal::Technical => &mut self.technical,
            Signal::DeadlineFired => &mut self.deadlines,
        };
        *n = n.saturating_add(1);
    }

    /// These counts and `o`'s together.
    pub fn plus(self, o: Tally) -> Tally {
        Tally {
            answered: self.answered.saturating_add(o.answered),
            technical: self.technical.saturating_add(o.technical),
            deadlines: self.deadlines.saturating_add(o.deadlines),
            probes_answered: self.probes_answered.saturating_add(o.probes_answered),
        }
    }

    /// True when these counts open a CLOSED breaker.
    pub fn trips(&self, s: &BreakerSettings) -> bool {
        let outcomes = u64::from(self.answered) + u64::from(self.technical);
        let ratio_trips = outcomes >= u64::from(s.min_calls)
            && self.technical as f64 >= s.failure_ratio * outcomes as f64;
        ratio_trips || self.deadlines >= s.deadline_burst
    }
}

/// The signal a batch's counts stand for: a failure if it holds any (technical
/// first), else a probe's answer, else an answer; `None` for an empty batch.
pub fn strongest(batch: &Tally) -> Option<Signal> {
    if batch.technical > 0 {
        Some(Signal::Technical)
    } else if batch.deadlines > 0 {
        Some(Signal::DeadlineFired)
    } else if batch.probes_answered > 0 {
        Some(Signal::ProbeAnswered)
    } else if batch.answered > 0 {
        Some(Signal::Answered)
    } else {
        None
    }
}

/// The start of the bucket holding `at` (buckets are aligned on the epoch, so every
/// writer counts into the same one).
pub fn bucket_of(at: Timestamp, s: &BreakerSettings) -> Timestamp {
    let w = s.bucket_ms().max(1);
    Timestamp::from_millis(at.millis().div_euclid(w) * w)
}

/// The sum of the buckets (keyed by their start) inside the window ending at `now`.
pub fn window_total<'a>(
    buckets: impl IntoIterator<Item = (Timestamp, &'a Tally)>,
    now: Timestamp,
    s: &BreakerSettings,
) -> Tally {
    let oldest = bucket_of(now.plus_millis(-millis(s.window)), s).plus_millis(s.bucket_ms());
    buckets
        .into_iter()
        .filter(|(start, _)| *start >= oldest && *start <= now)
        .fold(Tally::default(), |t, (_, b)| t.plus(*b))
}

/// Where the breaker stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "SCREAMING_SNAKE_CASE")]
#[derive(IntoStaticStr)]
#[strum(serialize_all = "SCREAMING_SNAKE_CASE")]
pub enum BreakerState {
    Closed,
    /// No request goes out before `until`; `cooldown_ms` is this round's cool-down.
    Open {
        until: Timestamp,
        cooldown_ms: i64,
    },
    /// Probing: `admitted` of the round's probes let out since `since`.
    HalfOpen {
        since: Timestamp,
        admitted: u32,
        cooldown_ms: i64,
    },
}

impl BreakerState {
    /// The metric value `BreakerState`: 0 closed, 1 half-open, 2 open.
    pub fn gauge(&self) -> u8 {
        match self {
            BreakerState::Closed => 0,
            BreakerState::HalfOpen { .. } => 1,
            BreakerState::Open { .. } => 2,
        }
    }

    pub fn name(&self) -> &'static str {
        self.into()
    }
}

/// A change of state, for metrics, logs and the audit of pauses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, IntoStaticStr)]
#[strum(serialize_all = "kebab-case")]
pub enum Change {
    /// CLOSED → OPEN: the window's counts when it tripped.
    Opened(Tally),
    /// OPEN → HALF_OPEN: the cool-down ended.
    HalfOpened,
    /// HALF_OPEN → OPEN with a longer cool-down: a probe failed.
    Reopened { cooldown_ms: i64 },
    /// HALF_OPEN → CLOSED: a probe was answered.
    Closed,
    /// An operator forced the state.
    Forced,
    /// A HALF_OPEN breaker let a probe out (counted on it, so the round's bound holds
    /// across every execution environment).
    #[strum(serialize = "probe")]
    ProbeAdmitted,
}

impl Change {
    /// Its name in logs and the breaker's change log.
    pub fn label(&self) -> &'static str {
        self.into()
    }
}

/// What the breaker says about one request due now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// CLOSED: send it.
    Send,
    /// HALF_OPEN with probes left: send it as a probe (count it with [`Breaker::admit`]).
    Probe,
    /// Do not send it: wait at least until this instant (the next probe instant).
    Pause { until: Timestamp },
}

impl Admission {
    /// What this admission means for the decision about one request, read against
    /// the breaker as it stands after the admission: held until
    /// [`Breaker::resume_at`], with the state that holds it (`Some(hold)`), or let
    /// out (`None`) — `true` when it goes out as a half-open round's probe.
    pub fn verdict(
        self,
        breaker: &Breaker,
        now: Timestamp,
        s: &BreakerSettings,
        rng: &mut dyn RandomSource,
    ) -> (Option<Hold>, bool) {
        match self {
            Admission::Send => (None, false),
            Admission::Probe => (None, true),
            Admission::Pause { .. } => (
                Some(Hold {
                    until: breaker.resume_at(now, s, rng),
                    state: breaker.state,
                }),
                false,
            ),
        }
    }
}

/// The breaker item: its state and a version for conditional writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Breaker {
    pub state: BreakerState,
    /// Incremented by every write; a write is conditional on the version it read.
    pub version: u64,
}

impl Default for Breaker {
    fn default() -> Self {
        Self {
            state: BreakerState::Closed,
            version: 0,
        }
    }
}

impl Breaker {
    fn to(self, state: BreakerState) -> Breaker {
        Breaker {
            state,
            version: self.version.saturating_add(1),
        }
    }

    /// The instant the next request may go out: now when CLOSED, the end of the
    /// cool-down when OPEN, one cool-down after the round started when HALF_OPEN with
    /// its probes spent.
    pub fn next_probe(&self, now: Timestamp) -> Timestamp {
        match self.state {
            BreakerState::Closed => now,
            BreakerState::Open { until, .. } => until.max(now),
            BreakerState::HalfOpen {
                since, cooldown_ms, ..
            } => since.plus_millis(cooldown_ms).max(now),
        }
    }

    /// What the breaker says about a request due at `now`, the breaker after it (an
    /// OPEN breaker past its cool-down turns HALF_OPEN; a probe is counted) and the
    /// change, `Some` exactly when the breaker differs: the caller writes it then
    /// (conditional on the version).
    pub fn admit(
        self,
        now: Timestamp,
        s: &BreakerSettings,
    ) -> (Admission, Breaker, Option<Change>) {
        let (b, change) = self.tick(now);
        match b.state {
            BreakerState::Closed => (Admission::Send, b, change),
            BreakerState::Open { until, .. } => (Admission::Pause { until }, b, change),
            BreakerState::HalfOpen {
                since,
                admitted,
                cooldown_ms,
            } => {
                let counted = change.or(Some(Change::ProbeAdmitted));
                if admitted < s.probes {
                    let next = b.to(BreakerState::HalfOpen {
                        since,
                        admitted: admitted + 1,
                        cooldown_ms,
                    });
                    (Admission::Probe, next, counted)
                } else if now >= since.plus_millis(cooldown_ms) {
                    // A round with no answer to any probe: a new round.
                    let next = b.to(BreakerState::HalfOpen {
                        since: now,
                        admitted: 1,
                        cooldown_ms,
                    });
                    (Admission::Probe, next, counted)
                } else {
                    let until = since.plus_millis(cooldown_ms);
                    (Admission::Pause { until }, b, change)
                }
            }
        }
    }

    /// OPEN past its cool-down becomes HALF_OPEN.
    /// True when a request due at `now` may be let out as a half-open round's probe
    /// (HALF_OPEN, or OPEN past its cool-down): only then does asking the breaker spend
    /// something, so only then is the record read first ([`crate::decide::retry_asks_breaker`]).
    pub fn may_probe(self, now: Timestamp) -> bool {
        matches!(self.tick(now).0.state, BreakerState::HalfOpen { .. })
    }

    pub fn tick(self, now: Timestamp) -> (Breaker, Option<Change>) {
        match self.state {
            BreakerState::Open { until, cooldown_ms } if now >= until => (
                self.to(BreakerState::HalfOpen {
                    since: now,
                    admitted: 0,
                    cooldown_ms,
                }),
                Some(Change::HalfOpened),
            ),
            _ => (self, None),
        }
    }

    /// The breaker after a signal at `now`, given the window's counts including it.
    /// CLOSED opens when the window trips; HALF_OPEN closes on an answer to its probe and reopens,
    /// with the cool-down doubled up to its maximum, on a technical failure or a
    /// deadline; OPEN ignores signals (answers to requests sent before it opened).
    pub fn observe(
        self,
        signal: Signal,
        window: &Tally,
        now: Timestamp,
        s: &BreakerSettings,
    ) -> (Breaker, Option<Change>) {
        let (b, ticked) = self.tick(now);
        match (b.state, signal) {
            (BreakerState::Closed, _) if window.trips(s) => {
                let cooldown_ms = millis(s.cooldown);
                (
                    b.to(BreakerState::Open {
                        until: now.plus_millis(cooldown_ms),
                        cooldown_ms,
                    }),
                    Some(Change::Opened(*window)),
                )
            }
            (BreakerState::HalfOpen { .. }, Signal::ProbeAnswered) => {
                (b.to(BreakerState::Closed), Some(Change::Closed))
            }
            // An answer to a request sent before the round (late, redriven): not the
            // probe's, so it says nothing of the service now.
            (BreakerState::HalfOpen { .. }, Signal::Answered) => (b, ticked),
            (BreakerState::HalfOpen { cooldown_ms, .. }, _) => {
                let longer = cooldown_ms.saturating_mul(2).min(millis(s.cooldown_max));
                (
                    b.to(BreakerState::Open {
                        until: now.plus_millis(longer),
                        cooldown_ms: longer,
                    }),
                    Some(Change::Reopened {
                        cooldown_ms: longer,
                    }),
                )
            }
            _ => (b, ticked),
        }
    }

    /// The breaker after a batch's counts (`batch`) at `now`, the window including
    /// them: a technical failure or a deadline in the batch counts first (one failed
    /// probe reopens a HALF_OPEN breaker, whatever else the batch held), then an
    /// answer. An empty batch changes nothing.
    pub fn observe_batch(
        self,
        batch: &Tally,
        window: &Tally,
        now: Timestamp,
        s: &BreakerSettings,
    ) -> (Breaker, Option<Change>) {
        match strongest(batch) {
            Some(signal) => self.observe(signal, window, now, s),
            None => (self, None),
        }
    }

    /// True when a batch's counts may change this breaker, so the window must be read
    /// first: a failure while CLOSED, anything while HALF_OPEN or once an OPEN
    /// breaker's cool-down is over. Answers alone never open a CLOSED breaker: on the
    /// happy path nothing is read beyond the breaker itself.
    pub fn may_change(&self, batch: &Tally, now: Timestamp) -> bool {
        let failures = batch.technical > 0 || batch.deadlines > 0;
        match self.state {
            BreakerState::Closed => failures,
            BreakerState::HalfOpen { .. } => strongest(batch).is_some(),
            BreakerState::Open { until, .. } => now >= until && strongest(batch).is_some(),
        }
    }

    /// An operator's override: open (for the first cool-down) or close.
    pub fn force(self, open: bool, now: Timestamp, s: &BreakerSettings) -> (Breaker, Change) {
        let state = if open {
            let cooldown_ms = millis(s.cooldown);
            BreakerState::Open {
                until: now.plus_millis(cooldown_ms),
                cooldown_ms,
            }
        } else {
            BreakerState::Closed
        };
        (self.to(state), Change::Forced)
    }

    /// When a request paused at `now` should be due again: after the next probe
    /// instant, spread over one cool-down so the reopening is not a burst.
    pub fn resume_at(
        &self,
        now: Timestamp,
        s: &BreakerSettings,
        rng: &mut dyn RandomSource,
    ) -> Timestamp {
        let spread = match self.state {
            BreakerState::Open { cooldown_ms, .. } | BreakerState::HalfOpen { cooldown_ms, .. } => {
                cooldown_ms
            }
            BreakerState::Closed => millis(s.cooldown),
        };
        let jitter = (rng.next_unit().clamp(0.0, 1.0) * spread as f64) as i64;
        self.next_probe(now).plus_millis(jitter)
    }
}

/// A pause of the circuit breaker, as a decision sees it: requests wait until
/// `until` (the breaker's next probe instant plus jitter, [`Breaker::resume_at`])
/// because the breaker is in `state`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hold {
    pub until: Timestamp,
    pub state: BreakerState,
}

impl Hold {
    /// The record's mark while held. Only an OPEN or HALF_OPEN breaker holds.
    pub fn mark(&self) -> crate::machine::Mark {
        match self.state {
            BreakerState::HalfOpen { .. } => crate::machine::Mark::HeldHalfOpen,
            _ => crate::machine::Mark::HeldOpen,
        }
    }
}

#[cfg(test)]
mod tests;
