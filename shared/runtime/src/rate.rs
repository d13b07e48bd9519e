//! The retry handler's outbound rate bound: a per-process pacing limiter.
//!
//! The external service must never receive more than X requests per second from the
//! whole fleet, whatever the burst of retry events. Two settings give that bound:
//!
//! - **per process**: [`Pacer`] spaces publishes at least `1 / MAX_REQUESTS_PER_SECOND`
//!   apart. Its state lives in a process-wide static ([`Pacer::global`]), so it holds
//!   across warm invocations and across the records a batch processes concurrently
//!   (BATCH_CONCURRENCY does not raise the rate);
//! - **fleet**: the retry queue's event-source mapping `ScalingConfig.MaximumConcurrency`
//!   caps the number of execution environments processing at once.
//!
//! Fleet bound = `MaximumConcurrency × MAX_REQUESTS_PER_SECOND` requests per second
//! (counted in any window `[t, t + 1 s)`).
//!
//! A publish that would have to wait longer than `max_wait` is refused with a
//! retryable error (the record is redelivered after the visibility timeout) instead
//! of running the invocation into its timeout; the bound holds either way.

use domain::message::Request;
use domain::ports::{PortError, RequestPublisher};
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;
use thiserror::Error;
use tokio::time::Instant;

/// Time for the pacer, injected: tokio's clock in production, a [`VirtualClock`] in
/// tests (exact and instantaneous).
pub trait PaceClock: Send + Sync {
    fn now(&self) -> Instant;
    fn sleep_until(&self, at: Instant) -> impl Future<Output = ()> + Send;
}

impl<T: PaceClock> PaceClock for &T {
    fn now(&self) -> Instant {
        (**self).now()
    }
    fn sleep_until(&self, at: Instant) -> impl Future<Output = ()> + Send {
        (**self).sleep_until(at)
    }
}

/// A clock that only moves when someone sleeps: `sleep_until(t)` jumps to `t` at
/// once. Tests of the rate bound use it to check exact instants without waiting.
#[derive(Debug)]
pub struct VirtualClock {
    origin: Instant,
    offset_nanos: AtomicU64,
}

impl Default for VirtualClock {
    fn default() -> Self {
        Self::new()
    }
}

impl VirtualClock {
    pub fn new() -> Self {
        Self {
            origin: Instant::now(),
            offset_nanos: AtomicU64::new(0),
        }
    }

    /// Virtual time elapsed since the clock was made.
    pub fn elapsed(&self) -> Duration {
        Duration::from_nanos(self.offset_nanos.load(Ordering::SeqCst))
    }

    pub fn origin(&self) -> Instant {
        self.origin
    }
}

impl PaceClock for VirtualClock {
    fn now(&self) -> Instant {
        self.origin + self.elapsed()
    }
    fn sleep_until(&self, at: Instant) -> impl Future<Output = ()> + Send {
        let target =
            u64::try_from(at.saturating_duration_since(self.origin).as_nanos()).unwrap_or(u64::MAX);
        self.offset_nanos.fetch_max(target, Ordering::SeqCst);
        std::future::ready(())
    }
}

/// tokio's clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct TokioClock;

impl PaceClock for TokioClock {
    fn now(&self) -> Instant {
        Instant::now()
    }
    fn sleep_until(&self, at: Instant) -> impl Future<Output = ()> + Send {
        tokio::time::sleep_until(at)
    }
}

/// An invalid rate.
#[derive(Debug, Clone, PartialEq, Error)]
#[error("MAX_REQUESTS_PER_SECOND = {0} is invalid: must be a number greater than 0")]
pub struct RateError(pub f64);

/// The wait for a slot would exceed the allowed maximum.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[error("outbound rate bound: the next publish slot is {wait:?} away (more than {max_wait:?})")]
pub struct Busy {
    pub wait: Duration,
    pub max_wait: Duration,
}

/// A pacing limiter: slots at least `interval` apart.
#[derive(Debug)]
pub struct Pacer {
    interval: Duration,
    rate: f64,
    next_free: Mutex<Option<Instant>>,
    waited: AtomicU64,
    refused: AtomicU64,
}

static GLOBAL: OnceLock<Arc<Pacer>> = OnceLock::new();

impl Pacer {
    /// A pacer allowing `rate` publishes per second.
    pub fn per_second(rate: f64) -> Result<Self, RateError> {
        if !rate.is_finite() || rate <= 0.0 {
            return Err(RateError(rate));
        }
        let interval = Duration::try_from_secs_f64(1.0 / rate).map_err(|_| RateError(rate))?;
        Ok(Self {
            interval,
            rate,
            next_free: Mutex::new(None),
            waited: AtomicU64::new(0),
            refused: AtomicU64::new(0),
        })
    }

    /// The process-wide pacer: created by the first call (with its rate) and kept for
    /// the life of the execution environment, so warm invocations share its state.
    pub fn global(rate: f64) -> Result<Arc<Pacer>, RateError> {
        if let Some(p) = GLOBAL.get() {
            return Ok(Arc::clone(p));
        }
        let fresh = Arc::new(Pacer::per_second(rate)?);
        Ok(Arc::clone(GLOBAL.get_or_init(|| fresh)))
    }

    pub fn interval(&self) -> Duration {
        self.interval
    }

    pub fn rate(&self) -> f64 {
        self.rate
    }

    /// Publishes that had to wait for their slot so far.
    pub fn waited(&self) -> u64 {
        self.waited.load(Ordering::Relaxed)
    }

    /// Publishes refused because the wait would have exceeded the maximum.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// Reserves the first free slot at or after `now`, unless it is more than
    /// `max_wait` away (then nothing is reserved). Returns the slot.
    pub fn reserve(&self, now: Instant, max_wait: Duration) -> Result<Instant, Busy> {
        let mut next = self.next_free.lock().unwrap_or_else(|e| e.into_inner());
        let slot = match *next {
            Some(free) if free > now => free,
            _ => now,
        };
        let wait = slot.saturating_duration_since(now);
        if wait > max_wait {
            self.refused.fetch_add(1, Ordering::Relaxed);
            return Err(Busy { wait, max_wait });
        }
        *next = Some(slot + self.interval);
        if !wait.is_zero() {
            self.waited.fetch_add(1, Ordering::Relaxed);
        }
        Ok(slot)
    }

    /// Waits for a slot; returns the instant it was granted.
    pub async fn acquire<C: PaceClock>(
        &self,
        clock: &C,
        max_wait: Duration,
    ) -> Result<Instant, Busy> {
        let now = clock.now();
        let slot = self.reserve(now, max_wait)?;
        if slot > now {
            clock.sleep_until(slot).await;
        }
        Ok(slot)
    }
}

/// A request publisher whose publishes go through a [`Pacer`].
#[derive(Debug)]
pub struct Paced<P, C = TokioClock> {
    pub inner: P,
    pub pacer: Arc<Pacer>,
    pub clock: C,
    /// Longest wait accepted for a slot (default 20 s, well inside the retry
    /// handler's 60 s timeout).
    pub max_wait: Duration,
}

/// The default longest wait for a publish slot.
pub const DEFAULT_MAX_WAIT: Duration = Duration::from_secs(20);

impl<P> Paced<P, TokioClock> {
    pub fn new(inner: P, pacer: Arc<Pacer>) -> Self {
        Self {
            inner,
            pacer,
            clock: TokioClock,
            max_wait: DEFAULT_MAX_WAIT,
        }
    }
}

impl<P: RequestPublisher, C: PaceClock> RequestPublisher for Paced<P, C> {
    async fn publish(&self, request: &Request) -> Result<(), PortError> {
        self.pacer
            .acquire(&self.clock, self.max_wait)
            .await
            .map_err(|b| PortError::retryable("RateLimit", b.to_string()))?;
        self.inner.publish(request).await
    }
}

/// The largest number of `times` inside any window `[t, t + window)`: how tests and
/// the local stack check the bound.
pub fn max_in_any_window(times: &[Instant], window: Duration) -> usize {
    let mut sorted = times.to_vec();
    sorted.sort();
    let mut best = 0;
    for (i, start) in sorted.iter().enumerate() {
        let end = *start + window;
        let n = sorted[i..].iter().take_while(|t| **t < end).count();
        best = best.max(n);
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    fn max_in_any_second(times: &[Instant]) -> usize {
        max_in_any_window(times, Duration::from_secs(1))
    }

    #[test]
    fn rejects_a_rate_that_is_not_positive() {
        assert!(Pacer::per_second(0.0).is_err());
        assert!(Pacer::per_second(-1.0).is_err());
        assert!(Pacer::per_second(f64::NAN).is_err());
        let e = Pacer::per_second(0.0).unwrap_err().to_string();
        assert!(e.contains("MAX_REQUESTS_PER_SECOND = 0"), "{e}");
        assert_eq!(
            Pacer::per_second(4.0).unwrap().interval(),
            Duration::from_millis(250)
        );
    }

    #[test]
    fn slots_are_one_interval_apart_and_idle_time_is_not_banked() {
        let p = Pacer::per_second(10.0).unwrap();
        let t0 = Instant::now();
        let max = Duration::from_secs(60);
        // A burst at t0: 0, 100, 200 ms.
        let slots: Vec<Instant> = (0..3).map(|_| p.reserve(t0, max).unwrap()).collect();
        assert_eq!(slots[0], t0);
        assert_eq!(slots[1], t0 + Duration::from_millis(100));
        assert_eq!(slots[2], t0 + Duration::from_millis(200));
        assert_eq!(p.waited(), 2);
        // After a long idle period the next slot is "now", and only one: no burst credit.
        let later = t0 + Duration::from_secs(10);
        assert_eq!(p.reserve(later, max).unwrap(), later);
        assert_eq!(
            p.reserve(later, max).unwrap(),
            later + Duration::from_millis(100)
        );
    }

    #[test]
    fn a_slot_too_far_away_is_refused_and_not_reserved() {
        let p = Pacer::per_second(1.0).unwrap();
        let t0 = Instant::now();
        let max = Duration::from_millis(1500);
        assert_eq!(p.reserve(t0, max).unwrap(), t0);
        assert_eq!(p.reserve(t0, max).unwrap(), t0 + Duration::from_secs(1));
        let busy = p.reserve(t0, max).unwrap_err();
        assert_eq!(busy.wait, Duration::from_secs(2));
        assert_eq!(p.refused(), 1);
        // The refused call took nothing: at t0 + 1 s the next slot is still t0 + 2 s.
        let t1 = t0 + Duration::from_secs(1);
        assert_eq!(p.reserve(t1, max).unwrap(), t0 + Duration::from_secs(2));
    }

    struct Recording<'a> {
        clock: &'a VirtualClock,
        at: Mutex<Vec<Instant>>,
    }

    impl RequestPublisher for Recording<'_> {
        async fn publish(&self, _: &Request) -> Result<(), PortError> {
            self.at.lock().unwrap().push(self.clock.now());
            Ok(())
        }
    }

    fn request(n: u32) -> Request {
        Request::new(
            domain::TransactionId::parse(&format!("TX-{n}")).unwrap(),
            domain::Attempt::new(2).unwrap(),
            domain::Payload::from_json("{}").unwrap(),
        )
    }

    /// GIVEN a pacer at 5/s and 60 publishes started at once on a virtual clock THEN
    /// no window [t, t+1 s) holds more than 5, and the burst takes (60 − 1) / 5 s:
    /// the pacer waits, it does not drop.
    #[test]
    fn a_burst_never_exceeds_the_rate_in_any_second() {
        let clock = VirtualClock::new();
        let paced = Paced {
            inner: Recording {
                clock: &clock,
                at: Mutex::new(Vec::new()),
            },
            pacer: Arc::new(Pacer::per_second(5.0).unwrap()),
            clock: &clock,
            max_wait: Duration::from_secs(3600),
        };
        let calls = (0..60).map(|n| {
            let r = request(n);
            let p = &paced;
            async move { p.publish(&r).await }
        });
        let results = domain::memory::block_on_ready(futures::future::join_all(calls)).unwrap();
        assert!(results.iter().all(Result::is_ok));
        let times = paced.inner.at.lock().unwrap().clone();
        assert_eq!(times.len(), 60);
        assert_eq!(max_in_any_second(&times), 5);
        assert_eq!(clock.elapsed(), Duration::from_millis(59 * 200));
        assert_eq!(paced.pacer.waited(), 59);
    }

    #[test]
    fn refused_publish_is_retryable_and_publishes_nothing() {
        let clock = VirtualClock::new();
        let paced = Paced {
            inner: Recording {
                clock: &clock,
                at: Mutex::new(Vec::new()),
            },
            pacer: Arc::new(Pacer::per_second(1.0).unwrap()),
            clock: &clock,
            max_wait: Duration::from_millis(500),
        };
        domain::memory::block_on_ready(paced.publish(&request(1)))
            .unwrap()
            .unwrap();
        let err = domain::memory::block_on_ready(paced.publish(&request(2)))
            .unwrap()
            .unwrap_err();
        assert!(err.is_retryable());
        assert_eq!(err.operation, "RateLimit");
        assert_eq!(paced.inner.at.lock().unwrap().len(), 1);
    }

    /// tokio's clock really waits: two publishes at 20/s are at least 50 ms apart.
    #[tokio::test]
    async fn the_tokio_clock_waits_for_the_slot() {
        let pacer = Pacer::per_second(20.0).unwrap();
        let a = pacer
            .acquire(&TokioClock, Duration::from_secs(1))
            .await
            .unwrap();
        let b = pacer
            .acquire(&TokioClock, Duration::from_secs(1))
            .await
            .unwrap();
        assert_eq!(b - a, Duration::from_millis(50));
        assert!(Instant::now() >= b);
    }

    #[test]
    fn the_global_pacer_is_one_per_process() {
        let a = Pacer::global(3.0).unwrap();
        let b = Pacer::global(99.0).unwrap();
        assert!(Arc::ptr_eq(&a, &b), "warm invocations share one pacer");
        assert_eq!(b.rate(), a.rate());
    }
}
