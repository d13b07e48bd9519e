//! The circuit breaker of the simulated service, and its outage windows.
//!
//! One breaker item and its window's buckets, as the breaker's table holds them,
//! moved only by the domain's rules ([`domain::breaker`]) the way the functions'
//! gate moves them: the retry handler asks [`Breaker::admit`] for each retry event
//! and pauses it until [`Breaker::resume_at`] when told to; the reconciler asks the
//! same before publishing an unanswered request again (let out, it may be a probe;
//! held, its deadline moves); the response handler
//! counts each answer and the reconciler each answer deadline that fired, and the
//! breaker moves with [`Breaker::observe_batch`] when [`Breaker::may_change`] says
//! the batch may move it. The store is one item read fresh by every decision (no
//! cache): the strictest reading of the functions' gate.

use domain::breaker::Hold;
use domain::breaker::{self, Breaker, BreakerSettings, BreakerState, Change, Tally};
use domain::ids::Timestamp;
use domain::RandomSource;
use std::collections::{BTreeMap, BTreeSet};

/// What the simulated service does during an outage window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutageMode {
    /// It answers ERROR to every request.
    Error,
    /// It answers nothing (the request is never answered).
    Silent,
}

/// One outage window, in milliseconds from the start of the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outage {
    pub start_ms: i64,
    pub duration_ms: i64,
}

impl Outage {
    /// Parses `START+DURATION` (seconds from the start of the run).
    pub fn parse(s: &str) -> Result<Outage, String> {
        let bad = || format!("--outage `{s}`: expected START+DURATION in seconds, e.g. 1200+1200");
        let (a, b) = s.split_once('+').ok_or_else(bad)?;
        let start: i64 = a.trim().parse().map_err(|_| bad())?;
        let duration: i64 = b.trim().parse().map_err(|_| bad())?;
        if start < 0 || duration <= 0 {
            return Err(format!(
                "--outage `{s}`: START must be ≥ 0 and DURATION > 0 (seconds)"
            ));
        }
        Ok(Outage {
            start_ms: start * 1000,
            duration_ms: duration * 1000,
        })
    }

    /// True when `since_start` (ms from the start of the run) falls in the window.
    pub fn covers(&self, since_start: i64) -> bool {
        since_start >= self.start_ms && since_start < self.start_ms + self.duration_ms
    }

    /// The end of the window, in ms from the start of the run.
    pub fn end_ms(&self) -> i64 {
        self.start_ms + self.duration_ms
    }
}

/// The breaker item, its window and what it did.
#[derive(Debug)]
pub(super) struct SimBreaker {
    pub(super) settings: BreakerSettings,
    pub(super) item: Breaker,
    buckets: BTreeMap<Timestamp, Tally>,
    /// Instants (ms) the breaker opened (from CLOSED or after a failed probe round).
    pub(super) opened: Vec<i64>,
    /// Instants (ms) it closed.
    pub(super) closed: Vec<i64>,
    /// Distinct retry-handler requests published per HALF_OPEN round (keyed by its
    /// start).
    pub(super) probes: BTreeMap<Timestamp, BTreeSet<(usize, u32, u32)>>,
    /// How long an execution environment trusts its last read (BREAKER_REFRESH_SECONDS;
    /// 0: every admission reads the item).
    refresh_ms: i64,
    /// Each environment's last read: when (its own clock) and what.
    cache: BTreeMap<usize, (i64, Breaker)>,
    /// Admissions decided from a cached view, and conditional writes of a cached view
    /// that lost to a newer item (decided again on a fresh read).
    pub(super) cached_admissions: u64,
    pub(super) stale_writes: u64,
}

impl SimBreaker {
    pub(super) fn new(settings: BreakerSettings, refresh_ms: i64) -> Self {
        Self {
            settings,
            item: Breaker::default(),
            buckets: BTreeMap::new(),
            opened: Vec::new(),
            closed: Vec::new(),
            probes: BTreeMap::new(),
            refresh_ms,
            cache: BTreeMap::new(),
            cached_admissions: 0,
            stale_writes: 0,
        }
    }

    fn moved(&mut self, next: Breaker, change: Option<Change>, now: i64) {
        self.item = next;
        match change {
            Some(Change::Opened(_) | Change::Reopened { .. }) => self.opened.push(now),
            Some(Change::Closed) => self.closed.push(now),
            _ => {}
        }
    }

    /// Environment `env`'s view of the item, when read less than the refresh period
    /// before `now` (the functions' gate trusts it then).
    fn fresh_view(&self, env: usize, now: i64) -> Option<Breaker> {
        self.cache
            .get(&env)
            .filter(|(read, _)| self.refresh_ms > 0 && now >= *read && now - read < self.refresh_ms)
            .map(|(_, b)| *b)
    }

    /// True when environment `env`'s view (cached while fresh, else read and cached)
    /// may let a request out as a probe at `now`.
    pub(super) fn may_probe(&mut self, env: usize, now: i64) -> bool {
        let view = self.fresh_view(env, now).unwrap_or_else(|| {
            self.cache.insert(env, (now, self.item));
            self.item
        });
        view.may_probe(Timestamp::from_millis(now))
    }

    /// The question of execution environment `env` for a request due at `now` (its
    /// own clock): `None` lets it out (CLOSED, or a probe counted: `true`), `Some`
    /// pauses it until the resume instant. As the functions' gate: a view read less
    /// than the refresh period ago is trusted; a change (OPEN past its cool-down, a
    /// probe counted) is written conditional on the item the view holds, and a view
    /// older than the item loses and is decided again on a fresh read. `count_probes`
    /// false: a probe let out is not written (a broken gate).
    pub(super) fn admission(
        &mut self,
        env: usize,
        now: i64,
        count_probes: bool,
        rng: &mut dyn RandomSource,
    ) -> (Option<Hold>, bool) {
        let at = Timestamp::from_millis(now);
        if let Some(view) = self.fresh_view(env, now) {
            let (admission, _, change) = view.admit(at, &self.settings);
            if change.is_none() {
                self.cached_admissions += 1;
                return admission.verdict(&view, at, &self.settings, rng);
            }
            // A change is written conditional on the item the view holds: the same
            // write as from a fresh read when it is the current item, decided again
            // on a fresh read when it is not.
            if view != self.item {
                self.stale_writes += 1;
            }
        }
        let (admission, next, change) = self.item.admit(at, &self.settings);
        if count_probes || change != Some(Change::ProbeAdmitted) {
            self.moved(next, change, now);
        }
        self.cache.insert(env, (now, self.item));
        admission.verdict(&self.item, at, &self.settings, rng)
    }

    /// A batch's signals counted into the window at `now`, the breaker moved when
    /// they change it.
    pub(super) fn observe(&mut self, batch: &Tally, now: i64) {
        if *batch == Tally::default() {
            return;
        }
        let at = Timestamp::from_millis(now);
        let bucket = self
            .buckets
            .entry(breaker::bucket_of(at, &self.settings))
            .or_default();
        bucket.answered += batch.answered;
        bucket.technical += batch.technical;
        bucket.deadlines += batch.deadlines;
        // Buckets older than the window count no more.
        let window_ms = i64::try_from(self.settings.window.as_millis()).unwrap_or(i64::MAX);
        let oldest = Timestamp::from_millis(now.saturating_sub(window_ms.saturating_mul(2)));
        self.buckets = self.buckets.split_off(&oldest);
        if !self.item.may_change(batch, at) {
            return;
        }
        let window = breaker::window_total(
            self.buckets.iter().map(|(k, v)| (*k, v)),
            at,
            &self.settings,
        );
        let (next, change) = self.item.observe_batch(batch, &window, at, &self.settings);
        self.moved(next, change, now);
    }

    /// A request the retry handler published — transaction, attempt and round, what
    /// the service tells requests apart by — counted in its round when the breaker is
    /// HALF_OPEN. The same request published again (a run resumed after a crash past
    /// its publish) is one request.
    pub(super) fn published(&mut self, request: (usize, u32, u32)) {
        if let BreakerState::HalfOpen { since, .. } = self.item.state {
            self.probes.entry(since).or_default().insert(request);
        }
    }
}

/// How long after the breaker closes the outbound rate is watched (the reopening).
pub(super) const REOPENING_MS: i64 = 60_000;
