//! Outages of the external service and its circuit breaker, in the model. An outage is
//! a budgeted fault: the service goes down (ERROR, or silence, as the scope's
//! [`OutageMode`] says) and comes up at any later moment. The breaker item is part of
//! the model's state and moves only by the domain's rules ([`domain::breaker`]) the way
//! the functions' gate moves it: [`Breaker::admit`] gives the verdict
//! ([`domain::Context::with_hold`] / [`domain::Context::with_probe`]), answers and fired
//! deadlines are counted, and [`Breaker::observe_batch`] moves it when
//! [`Breaker::may_change`] says so. Its clock is the latest instant any run asked or
//! told it at; the settings ([`settings`]) let one answer open it and one tick end a
//! cool-down, so it opens, half-opens and closes within small budgets; the resume jitter
//! comes from a fixed source. See
//! `docs/verification.md#outages-and-the-circuit-breaker-in-the-model`.

use super::scope::TICK_MS;
use domain::breaker::Hold;
use domain::breaker::{self, Admission, Breaker, BreakerSettings, BreakerState, Change, Tally};
use domain::ids::Timestamp;
use domain::policy::FixedRandom;
use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::time::Duration;

pub use crate::sim::OutageMode;

/// The breaker settings of the model: the window (60 s) shorter than a tick, so a tick
/// empties it; one answer enough for the ratio (min calls 1, ratio 0.5) and one
/// answer deadline for a burst; a cool-down of one tick, not doubled (maximum one
/// tick); one probe per HALF_OPEN round.
pub fn settings() -> BreakerSettings {
    let tick = Duration::from_millis(TICK_MS.unsigned_abs());
    BreakerSettings {
        window: Duration::from_secs(60),
        min_calls: 1,
        failure_ratio: 0.5,
        deadline_burst: 1,
        cooldown: tick,
        cooldown_max: tick,
        probes: 1,
    }
}

/// What the breaker says about one request: held (`hold`), let out as a probe
/// (`probe`, counted in the round that started at `round`), or let out.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Verdict {
    pub hold: Option<Hold>,
    pub probe: bool,
    pub round: Option<Timestamp>,
}

impl Verdict {
    /// What of the verdict can influence the future, hashable.
    pub(super) fn key(&self) -> (Option<(Timestamp, u8)>, bool, Option<Timestamp>) {
        (
            self.hold.map(|h| (h.until, h.state.gauge())),
            self.probe,
            self.round,
        )
    }
}

/// A breach of the breaker's guarantees, found where it happens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum BreakerViolation {
    /// A retry event the breaker held back began a send (wrote its record).
    HeldRunWrote,
    /// A request went out from a run the breaker held back.
    HeldRequestSent,
    /// More requests went out as probes in one HALF_OPEN round than its `probes`.
    ProbesExceeded,
    /// The breaker was told of a probe's answer for an answer whose record was not
    /// the probe (the store checked its mark): an answer that may close a HALF_OPEN
    /// breaker though it says nothing of the service now.
    ProbeSignalForAnother,
}

impl BreakerViolation {
    /// The guarantee it breaks (the property's name).
    pub const fn guarantee(self) -> &'static str {
        match self {
            BreakerViolation::HeldRunWrote => {
                "a retry event the breaker holds back writes nothing: it is deferred, its record untouched"
            }
            BreakerViolation::HeldRequestSent => {
                "no request goes out from a run the breaker held back"
            }
            BreakerViolation::ProbesExceeded => {
                "at most `probes` requests go out as probes per HALF_OPEN round"
            }
            BreakerViolation::ProbeSignalForAnother => {
                "only the answer to a half-open round's probe closes the breaker: the breaker is told of a probe's answer only for a record the store found marked PROBE"
            }
        }
    }
}

/// The breaker item, its window's buckets and the probes let out per round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelBreaker {
    pub item: Breaker,
    buckets: Vec<(Timestamp, Tally)>,
    /// The breaker's clock: the latest instant it was asked or told at.
    pub at: Timestamp,
    /// Requests let out as probes, per HALF_OPEN round (keyed by its start).
    pub probes: BTreeMap<Timestamp, u8>,
}

impl Hash for ModelBreaker {
    fn hash<H: Hasher>(&self, h: &mut H) {
        // The version only orders the store's conditional writes: no rule reads it.
        match self.item.state {
            BreakerState::Closed => (0u8, 0i64, 0i64, 0u32).hash(h),
            BreakerState::Open { until, cooldown_ms } => {
                (2u8, until.millis(), cooldown_ms, 0u32).hash(h)
            }
            BreakerState::HalfOpen {
                since,
                admitted,
                cooldown_ms,
            } => (1u8, since.millis(), cooldown_ms, admitted).hash(h),
        }
        for (start, t) in &self.buckets {
            (start, t.answered, t.technical, t.deadlines).hash(h);
        }
        self.at.hash(h);
        self.probes.hash(h);
    }
}

impl ModelBreaker {
    pub fn new(at: Timestamp) -> Self {
        Self {
            item: Breaker::default(),
            buckets: Vec::new(),
            at,
            probes: BTreeMap::new(),
        }
    }

    /// The breaker's clock moved to `now` if later (a run deciding at `now` shows
    /// that real time has reached it).
    pub fn clock(&mut self, now: Timestamp) -> Timestamp {
        self.at = self.at.max(now);
        self.at
    }

    /// Time passes to the breaker's next probe instant (the end of its cool-down, or
    /// of its half-open round): what the reconciler's fixpoint assumes once the
    /// outage is over, as a held event's instant was once written on its record.
    pub fn pass_cooldown(&mut self) {
        let next = self.item.next_probe(self.at);
        self.clock(next);
    }

    /// True when a request due at `now` may be let out as a probe.
    pub fn may_probe(&self, now: Timestamp) -> bool {
        self.item.may_probe(now.max(self.at))
    }

    /// The verdict for a request due at `now`. `counts_probes` false: a probe let out
    /// is not written on the breaker (a broken gate).
    pub fn admission(&mut self, now: Timestamp, counts_probes: bool) -> Verdict {
        let s = settings();
        let t = self.clock(now);
        let (admission, next, change) = self.item.admit(t, &s);
        if counts_probes || change != Some(Change::ProbeAdmitted) {
            self.item = next;
        }
        match admission {
            Admission::Send => Verdict::default(),
            Admission::Probe => Verdict {
                hold: None,
                probe: true,
                round: match next.state {
                    BreakerState::HalfOpen { since, .. } => Some(since),
                    _ => None,
                },
            },
            Admission::Pause { .. } => Verdict {
                hold: Some(Hold {
                    until: self.item.resume_at(t, &s, &mut FixedRandom(0.5)),
                    state: self.item.state,
                }),
                probe: false,
                round: None,
            },
        }
    }

    /// A batch's signals counted at `now`, the breaker moved when they change it.
    pub fn observe(&mut self, batch: &Tally, now: Timestamp) {
        if *batch == Tally::default() {
            return;
        }
        let s = settings();
        let t = self.clock(now);
        let start = breaker::bucket_of(t, &s);
        match self.buckets.iter_mut().find(|(k, _)| *k == start) {
            Some((_, b)) => {
                b.answered += batch.answered;
                b.technical += batch.technical;
                b.deadlines += batch.deadlines;
            }
            None => self.buckets.push((start, *batch)),
        }
        // The clock never goes back: a bucket the window no longer counts never
        // counts again.
        let window_ms = i64::try_from(s.window.as_millis()).unwrap_or(i64::MAX);
        let oldest = breaker::bucket_of(t.plus_millis(-window_ms), &s);
        self.buckets.retain(|(k, _)| *k > oldest);
        if !self.item.may_change(batch, t) {
            return;
        }
        let window = breaker::window_total(self.buckets.iter().map(|(k, v)| (*k, v)), t, &s);
        let (next, _) = self.item.observe_batch(batch, &window, t, &s);
        self.item = next;
    }

    /// A request let out as a probe of the round started at `round`: counted; true
    /// when the round has let out more than its probes.
    pub fn probe_published(&mut self, round: Timestamp) -> bool {
        let n = self.probes.entry(round).or_default();
        *n = n.saturating_add(1);
        u32::from(*n) > settings().probes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_model_settings_are_valid_and_one_answer_opens_the_breaker() {
        assert_eq!(settings().validated(), Ok(settings()));
        let t0 = Timestamp::from_millis(crate::fixture::EPOCH_MS);
        let mut b = ModelBreaker::new(t0);
        let mut batch = Tally::default();
        batch.add(breaker::Signal::Technical);
        b.observe(&batch, t0);
        assert!(matches!(b.item.state, BreakerState::Open { .. }), "{b:?}");
        let held = b.admission(t0, true);
        assert!(held.hold.is_some(), "{held:?}");
        // One tick later the cool-down is over: one probe, then held again.
        let t1 = t0.plus_millis(TICK_MS);
        let probe = b.admission(t1, true);
        assert_eq!(
            (probe.hold, probe.probe, probe.round),
            (None, true, Some(t1))
        );
        assert!(b.admission(t1, true).hold.is_some());
        assert!(!b.probe_published(t1));
        assert!(b.probe_published(t1));
        // Another answer leaves it HALF_OPEN; the probe's closes it.
        let mut answered = Tally::default();
        answered.add(breaker::Signal::Answered);
        b.observe(&answered, t1);
        assert!(matches!(b.item.state, BreakerState::HalfOpen { .. }));
        let mut probe_answered = Tally::default();
        probe_answered.add(breaker::Signal::ProbeAnswered);
        b.observe(&probe_answered, t1);
        assert_eq!(b.item.state, BreakerState::Closed);
    }
}
