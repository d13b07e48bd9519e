//! The circuit breaker as the functions use it: read at most once per `refresh` per
//! execution environment (never once per record), counted once per batch, written
//! only when the domain's rules ([`domain::breaker`]) change its state.
//!
//! - [`BreakerGate::admit`]: what to do with a request due now (send, probe, pause
//!   until an instant). A CLOSED breaker costs nothing beyond its cached read.
//! - [`BreakerGate::observe`]: a batch's signals (answers, technical failures,
//!   deadlines) added to the window with one write, and the breaker moved on when they
//!   change it; on the happy path (answers only, CLOSED) nothing else is read or
//!   written.

use crate::metrics::{names, Metrics};
use domain::breaker::Hold;
use domain::breaker::{Admission, Breaker, BreakerSettings, Change, Tally};
use domain::ports::{
    BreakerCounts, BreakerNote, BreakerReads, BreakerView, BreakerWrites, PortError,
};
use domain::Timestamp;
use std::sync::Mutex;
use std::time::Duration;

/// Tries of a change whose conditional write lost to another writer.
const TRIES: u32 = 3;

/// The breaker's store as a gate uses it: read, written and counted.
pub trait BreakerStore: BreakerReads + BreakerWrites + BreakerCounts {}
impl<S: BreakerReads + BreakerWrites + BreakerCounts> BreakerStore for S {}

/// The breaker of one execution environment.
#[derive(Debug)]
pub struct BreakerGate<S> {
    store: S,
    settings: BreakerSettings,
    refresh_ms: i64,
    /// Who writes (the function's name), for the change log.
    by: String,
    cache: Mutex<Option<(Timestamp, BreakerView)>>,
}

impl<S: BreakerStore> BreakerGate<S> {
    /// A gate over `store`, reading it again after `refresh`.
    pub fn new(
        store: S,
        settings: BreakerSettings,
        refresh: Duration,
        by: impl Into<String>,
    ) -> Self {
        Self {
            store,
            settings,
            refresh_ms: i64::try_from(refresh.as_millis()).unwrap_or(i64::MAX),
            by: by.into(),
            cache: Mutex::new(None),
        }
    }

    pub fn store(&self) -> &S {
        &self.store
    }

    fn cached(&self) -> std::sync::MutexGuard<'_, Option<(Timestamp, BreakerView)>> {
        self.cache.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The breaker as last read, read again when older than `refresh`. `fresh`: read
    /// now, with the window's counts (only a decision that may change the state needs
    /// them; a cached view's window is not to be used).
    async fn view(&self, now: Timestamp, fresh: bool) -> Result<BreakerView, PortError> {
        self.read(now, fresh, fresh).await
    }

    /// [`Self::view`], `again` reading the item even when the cache is recent, and
    /// `window` the window's counts with it.
    async fn read(
        &self,
        now: Timestamp,
        again: bool,
        window: bool,
    ) -> Result<BreakerView, PortError> {
        if !again {
            if let Some((at, v)) = *self.cached() {
                if now.millis() - at.millis() < self.refresh_ms && now >= at {
                    return Ok(v);
                }
            }
        }
        let v = self.store.load(now, window).await?;
        *self.cached() = Some((now, v));
        Ok(v)
    }

    /// Writes `next` over `read` with its change-log entry; on success the cache holds
    /// it. `false`: another writer moved the breaker first.
    async fn save(
        &self,
        read: &BreakerView,
        next: Breaker,
        change: Change,
        now: Timestamp,
    ) -> Result<bool, PortError> {
        let note = BreakerNote {
            at: now,
            by: self.by.clone(),
            change,
            reason: None,
        };
        let written = self.store.save(&read.breaker, &next, &note).await?;
        if written {
            *self.cached() = Some((
                now,
                BreakerView {
                    breaker: next,
                    window: read.window,
                },
            ));
        }
        Ok(written)
    }

    /// What to do with one request due at `now`, and the change it made (an OPEN
    /// breaker past its cool-down turning HALF_OPEN). A probe is counted on the breaker
    /// before it is let out, so concurrent environments never exceed the round's
    /// probes; a count lost to another writer is decided again on a fresh read of the
    /// item (admission never needs the window's counts: no Query).
    pub async fn admit(&self, now: Timestamp) -> Result<(Admission, Option<Change>), PortError> {
        let mut again = false;
        for _ in 0..TRIES {
            let read = self.read(now, again, false).await?;
            let (admission, next, change) = read.breaker.admit(now, &self.settings);
            let Some(what) = change else {
                return Ok((admission, None));
            };
            if self.save(&read, next, what, now).await? {
                return Ok((admission, change));
            }
            again = true;
        }
        // Still contended: wait for the next round rather than exceed the probes.
        let read = self.read(now, true, false).await?;
        Ok((
            Admission::Pause {
                until: read.breaker.next_probe(now).max(now.plus_millis(1_000)),
            },
            None,
        ))
    }

    /// Adds a batch's signals to the window (one write; none for an empty batch) and
    /// moves the breaker on when they change it. Returns the change written.
    pub async fn observe(
        &self,
        batch: &Tally,
        now: Timestamp,
    ) -> Result<Option<Change>, PortError> {
        if *batch == Tally::default() {
            return Ok(None);
        }
        self.store.count(now, batch).await?;
        let cached = self.view(now, false).await?;
        if !cached.breaker.may_change(batch, now) {
            return Ok(None);
        }
        for _ in 0..TRIES {
            let read = self.view(now, true).await?;
            let (next, change) =
                read.breaker
                    .observe_batch(batch, &read.window, now, &self.settings);
            let Some(change) = change else {
                return Ok(None);
            };
            if self.save(&read, next, change, now).await? {
                return Ok(Some(change));
            }
        }
        // Another writer kept moving it: its changes stand.
        Ok(None)
    }

    /// True when the breaker, as last read, may let a request out as a probe now (see
    /// `domain::breaker::Breaker::may_probe`); an unreadable breaker lets requests out
    /// without counting them, so it hands out no probe.
    pub async fn may_probe(&self, now: Timestamp) -> bool {
        self.current(now).await.is_ok_and(|b| b.may_probe(now))
    }

    /// The breaker as last read (the `BreakerState` gauge).
    pub async fn current(&self, now: Timestamp) -> Result<Breaker, PortError> {
        Ok(self.view(now, false).await?.breaker)
    }

    /// Whether a request due at `now` is held back, as the domain's decisions take it
    /// ([`domain::Context::with_hold`]), and whether one let out is a half-open round's
    /// probe ([`domain::Context::with_probe`]): `None` lets it out (CLOSED, or a probe
    /// counted), `Some` pauses it until the resume instant (the next probe instant
    /// plus jitter over one cool-down). The breaker's table failing lets requests out
    /// (counted `BreakerErrors`): the breaker spares a service that is down, it is not
    /// what the guarantees rest on.
    pub async fn admission(
        &self,
        now: Timestamp,
        rng: &mut (dyn domain::RandomSource + Send),
        metrics: &Metrics,
    ) -> (Option<Hold>, bool) {
        let result = async {
            let (admission, change) = self.admit(now).await?;
            count_change(change, metrics);
            // Read again only to hold: a request let out needs no more than the admission.
            let breaker = match admission {
                Admission::Pause { .. } => self.view(now, false).await?.breaker,
                Admission::Send | Admission::Probe => Breaker::default(),
            };
            Ok(admission.verdict(&breaker, now, &self.settings, rng))
        }
        .await;
        result.unwrap_or_else(|e: PortError| {
            metrics.incr(names::BREAKER_ERRORS);
            tracing::warn!(error = %e, "circuit breaker unreadable: the request goes out");
            (None, false)
        })
    }

    /// Counts a batch's signals ([`Self::observe`]), counting a change it made; an
    /// error is counted and logged, never fails the batch (the records are done).
    pub async fn observe_counted(&self, batch: &Tally, now: Timestamp, metrics: &Metrics) {
        match self.observe(batch, now).await {
            Ok(change) => count_change(change, metrics),
            Err(e) => {
                metrics.incr(names::BREAKER_ERRORS);
                tracing::warn!(error = %e, "circuit breaker: the batch's signals were not counted");
            }
        }
    }

    /// The `BreakerState` metric of this invocation: 0 closed, 1 half-open, 2 open
    /// (its Maximum over a period is the worst state seen).
    pub async fn gauge(&self, now: Timestamp, metrics: &Metrics) {
        if let Ok(b) = self.current(now).await {
            metrics.add(names::BREAKER_STATE, u64::from(b.state.gauge()));
        }
    }
}

/// `BreakerOpened` for a change that opened the breaker (from CLOSED or a failed
/// probe round), logged with what it was.
fn count_change(change: Option<Change>, metrics: &Metrics) {
    let Some(change) = change else { return };
    if matches!(change, Change::Opened(_) | Change::Reopened { .. }) {
        metrics.incr(names::BREAKER_OPENED);
        tracing::warn!(change = change.label(), ?change, "circuit breaker opened");
    } else if change != Change::ProbeAdmitted {
        tracing::info!(change = change.label(), "circuit breaker changed");
    }
}

#[cfg(test)]
mod tests;
