//! The outbound rate bound of the functions that publish requests (retry handler,
//! starter): a per-process pacing limiter.
//!
//! [`Pacer`] runs one publish at a time, starts them at least
//! `1 / MAX_REQUESTS_PER_SECOND` apart, and none until one second after the publish
//! ⌊MAX_REQUESTS_PER_SECOND⌋ places before it *ended*, so the bound holds where requests
//! arrive. One pacer per execution environment; the event source mapping's
//! `MaximumConcurrency` bounds the fleet. A publish that would wait longer than
//! `max_wait` is refused with a retryable error (the record is redelivered).
//! Why: `docs/functions.md#outbound-rate-bound`.

use crate::metrics::{names, Metrics};
use domain::message::Request;
use domain::ports::{PortError, RequestPublisher};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use thiserror::Error;
use tokio::time::{sleep_until, Instant};

/// An invalid rate.
#[derive(Debug, Clone, PartialEq, Error)]
#[error("MAX_REQUESTS_PER_SECOND = {0} is invalid: must be a number greater than 0")]
pub struct RateError(pub f64);

/// No publish slot within the allowed wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[error("outbound rate bound: no publish slot within {max_wait:?} (the next one is at least {wait:?} away)")]
pub struct Busy {
    pub wait: Duration,
    pub max_wait: Duration,
}

/// A pacing limiter for one execution environment.
///
/// Publishes go one at a time: a publish holds the pacer from the moment it may start
/// until its request has been answered (or has failed). A publish starts no earlier
/// than
///
/// - one `interval` (1 / rate) after the previous publish *started*, and
/// - one `window` (1 s, or 1 / rate below 1/s) after the publish `burst` places
///   before it *finished*, where `burst` = max(1, ⌊rate⌋).
///
/// Whatever the latency of each request, a request reaches the endpoint somewhere
/// between its start and its end, so any `burst + 1` consecutive requests reach it at
/// least one `window` apart: no window `[t, t + 1 s)` ever holds more than `burst` of
/// them, measured where they leave or where they arrive. Fleet bound =
/// `MaximumConcurrency × burst`. The price is that one environment's rate cannot exceed
/// 1 / (request latency): at an in-region SendMessage of ~10–20 ms, 50–100 per second.
#[derive(Debug)]
pub struct Pacer {
    interval: Duration,
    window: Duration,
    burst: usize,
    rate: f64,
    state: tokio::sync::Mutex<PaceState>,
    waited: AtomicU64,
    refused: AtomicU64,
}

/// What the pacer remembers: when the last publish started and when the last
/// `burst` publishes finished.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct PaceState {
    last_start: Option<Instant>,
    finished: VecDeque<Instant>,
}

impl PaceState {
    /// The earliest instant at or after `now` at which the next publish may start.
    pub fn earliest(
        &self,
        now: Instant,
        interval: Duration,
        window: Duration,
        burst: usize,
    ) -> Instant {
        let mut at = now;
        if let Some(s) = self.last_start {
            at = at.max(s + interval);
        }
        if self.finished.len() >= burst {
            if let Some(f) = self.finished.front() {
                at = at.max(*f + window);
            }
        }
        at
    }

    fn started(&mut self, at: Instant) {
        self.last_start = Some(at);
    }

    fn finished(&mut self, at: Instant, burst: usize) {
        self.finished.push_back(at);
        while self.finished.len() > burst {
            self.finished.pop_front();
        }
    }
}

impl Pacer {
    /// A pacer allowing `rate` publishes per second.
    pub fn per_second(rate: f64) -> Result<Self, RateError> {
        if !rate.is_finite() || rate <= 0.0 {
            return Err(RateError(rate));
        }
        let interval = Duration::try_from_secs_f64(1.0 / rate).map_err(|_| RateError(rate))?;
        let window = interval.max(Duration::from_secs(1));
        // ⌊rate⌋ publishes per one-second window (at least one per `window`).
        let burst = if rate >= 2.0 {
            usize::try_from(rate.floor() as u64).map_err(|_| RateError(rate))?
        } else {
            1
        };
        Ok(Self {
            interval,
            window,
            burst,
            rate,
            state: tokio::sync::Mutex::new(PaceState::default()),
            waited: AtomicU64::new(0),
            refused: AtomicU64::new(0),
        })
    }

    /// Least time between two publish starts (1 / rate).
    pub fn interval(&self) -> Duration {
        self.interval
    }

    /// The window the burst is counted in (1 s; 1 / rate below one per second).
    pub fn window(&self) -> Duration {
        self.window
    }

    /// Most publishes in any window.
    pub fn burst(&self) -> usize {
        self.burst
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

    /// Its counters now: [`PacerTally::count`] at the end of an invocation counts what
    /// that invocation waited for and was refused (one invocation at a time per
    /// execution environment: the difference is the invocation's).
    pub fn tally(&self) -> PacerTally {
        PacerTally {
            waited: self.waited(),
            refused: self.refused(),
        }
    }

    /// The earliest start the pacer would grant at `now` to the next publish in line.
    pub fn earliest(&self, state: &PaceState, now: Instant) -> Instant {
        state.earliest(now, self.interval, self.window, self.burst)
    }

    /// Waits for this environment's turn to publish: the previous publishes over and
    /// the pacer's earliest start reached. Refused (nothing taken) when that is more
    /// than `max_wait` away. The returned [`Turn`] must be held until the publish is
    /// over; dropping it records the end.
    pub async fn turn(&self, max_wait: Duration) -> Result<Turn<'_>, Busy> {
        let asked = Instant::now();
        let deadline = asked + max_wait;
        let mut state = match self.state.try_lock() {
            Ok(free) => free,
            // Another publish of this environment is waiting or running: queue behind
            // it (tokio's mutex is fair, first come first served), for at most
            // `max_wait`.
            Err(_) => {
                let lock = std::pin::pin!(self.state.lock());
                let give_up = std::pin::pin!(sleep_until(deadline));
                match futures::future::select(lock, give_up).await {
                    futures::future::Either::Left((guard, _)) => guard,
                    futures::future::Either::Right(_) => {
                        self.refused.fetch_add(1, Ordering::Relaxed);
                        return Err(Busy {
                            wait: Instant::now().saturating_duration_since(asked),
                            max_wait,
                        });
                    }
                }
            }
        };
        let now = Instant::now();
        let at = self.earliest(&state, now);
        if at > deadline {
            self.refused.fetch_add(1, Ordering::Relaxed);
            return Err(Busy {
                wait: at.saturating_duration_since(asked),
                max_wait,
            });
        }
        if at > now {
            self.waited.fetch_add(1, Ordering::Relaxed);
            sleep_until(at).await;
        }
        // The actual start, which a late wake-up puts after `at`: the next publish is
        // spaced from this instant.
        let started = Instant::now().max(at);
        state.started(started);
        Ok(Turn {
            pacer: self,
            state,
            started,
        })
    }
}

/// One publish's turn: held from its start until it is over.
pub struct Turn<'a> {
    pacer: &'a Pacer,
    state: tokio::sync::MutexGuard<'a, PaceState>,
    /// When the publish started.
    pub started: Instant,
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        let end = Instant::now().max(self.started);
        self.state.finished(end, self.pacer.burst);
    }
}

/// A pacer's counters at one instant ([`Pacer::tally`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PacerTally {
    waited: u64,
    refused: u64,
}

impl PacerTally {
    /// Counts into `metrics` the publishes `pacer` paced (`PacedPublishes`) and
    /// refused (`RateLimited`) since this tally.
    pub fn count(self, pacer: &Pacer, metrics: &Metrics) {
        let now = pacer.tally();
        metrics.add(
            names::PACED_PUBLISHES,
            now.waited.saturating_sub(self.waited),
        );
        metrics.add(
            names::RATE_LIMITED,
            now.refused.saturating_sub(self.refused),
        );
    }
}

/// Runs `work`, then counts into `metrics` the publishes `pacer` paced and refused
/// meanwhile. One invocation at a time per execution environment: the difference is
/// the invocation's own.
pub async fn counted<T>(
    pacer: Option<&Pacer>,
    metrics: &Metrics,
    work: impl std::future::Future<Output = T>,
) -> T {
    let before = pacer.map(Pacer::tally);
    let out = work.await;
    if let (Some(p), Some(tally)) = (pacer, before) {
        tally.count(p, metrics);
    }
    out
}

/// A request publisher whose publishes go through a [`Pacer`].
#[derive(Debug)]
pub struct Paced<P> {
    pub inner: P,
    pub pacer: Arc<Pacer>,
    /// Longest wait accepted for a slot (default 20 s, well inside the retry
    /// handler's 60 s timeout).
    pub max_wait: Duration,
}

/// The default longest wait for a publish slot.
pub const DEFAULT_MAX_WAIT: Duration = Duration::from_secs(20);

impl<P> Paced<P> {
    pub fn new(inner: P, pacer: Arc<Pacer>) -> Self {
        Self {
            inner,
            pacer,
            max_wait: DEFAULT_MAX_WAIT,
        }
    }
}

impl<P: RequestPublisher> RequestPublisher for Paced<P> {
    async fn publish(&self, request: &Request) -> Result<(), PortError> {
        let turn = self
            .pacer
            .turn(self.max_wait)
            .await
            .map_err(|b| PortError::retryable("RateLimit", b.to_string()))?;
        let result = self.inner.publish(request).await;
        drop(turn);
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    fn max_in_any_second(times: &[Instant]) -> usize {
        testkit::oracle::peak_in_window(times, Duration::from_secs(1))
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

    /// The pure rule, case by case.
    #[test]
    fn earliest_start_follows_the_last_start_and_the_burst_window() {
        let p = Pacer::per_second(5.0).unwrap();
        assert_eq!(p.burst(), 5);
        assert_eq!(p.window(), Duration::from_secs(1));
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut st = PaceState::default();
        // Nothing yet: now.
        assert_eq!(p.earliest(&st, t0), t0);
        // One interval after the last start.
        st.started(t0);
        st.finished(t0 + ms(30), p.burst());
        assert_eq!(p.earliest(&st, t0), t0 + ms(200));
        // Idle time is not banked: long after, the next start is now.
        assert_eq!(p.earliest(&st, t0 + ms(5000)), t0 + ms(5000));
        // Five publishes ended; the fifth from last ended at 30 ms: the sixth waits
        // until 1 s after that end even though the interval would allow it earlier.
        for k in 1..5u64 {
            st.started(t0 + ms(200 * k));
            st.finished(t0 + ms(200 * k + 1), p.burst());
        }
        assert_eq!(p.earliest(&st, t0 + ms(900)), t0 + ms(1030));
        // Only the last `burst` ends are kept.
        st.finished(t0 + ms(1040), p.burst());
        assert_eq!(st.finished.len(), 5);
        assert_eq!(st.finished.front(), Some(&(t0 + ms(201))));
        // Below one per second: one publish per 1 / rate, counted from its end.
        let slow = Pacer::per_second(0.5).unwrap();
        assert_eq!((slow.burst(), slow.window()), (1, Duration::from_secs(2)));
        let mut st = PaceState::default();
        st.started(t0);
        st.finished(t0 + ms(300), 1);
        assert_eq!(slow.earliest(&st, t0), t0 + ms(2300));
        // 2.5/s: two per window, starts 400 ms apart.
        let odd = Pacer::per_second(2.5).unwrap();
        assert_eq!((odd.burst(), odd.interval()), (2, ms(400)));
    }

    /// Tests run on tokio's paused clock: a sleep moves time to its end at once, so
    /// instants are exact and nothing waits.
    #[tokio::test(start_paused = true)]
    async fn a_slot_too_far_away_is_refused_and_nothing_is_taken() {
        let origin = Instant::now();
        let p = Pacer::per_second(1.0).unwrap();
        let max = Duration::from_millis(1500);
        let started = |max| {
            let p = &p;
            async move { p.turn(max).await.map(|t| t.started) }
        };
        assert_eq!(started(max).await.unwrap(), origin);
        assert_eq!(started(max).await.unwrap(), origin + Duration::from_secs(1));
        // The clock is at 1 s; the next start is 2 s: 1 s away, more than 500 ms.
        let busy = started(Duration::from_millis(500)).await.unwrap_err();
        assert_eq!(busy.wait, Duration::from_secs(1));
        assert_eq!(p.refused(), 1);
        assert!(
            busy.to_string().contains("no publish slot within 500ms"),
            "{busy}"
        );
        // The refused call took nothing: the next start is still 2 s.
        assert_eq!(started(max).await.unwrap(), origin + Duration::from_secs(2));
    }

    #[derive(Default)]
    struct Recording {
        at: Mutex<Vec<Instant>>,
    }

    impl RequestPublisher for Recording {
        async fn publish(&self, _: &Request) -> Result<(), PortError> {
            self.at.lock().unwrap().push(Instant::now());
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

    fn paced<P>(inner: P, rate: f64, max_wait: Duration) -> Paced<P> {
        Paced {
            inner,
            pacer: Arc::new(Pacer::per_second(rate).unwrap()),
            max_wait,
        }
    }

    /// GIVEN a pacer at 5/s and 60 publishes started at once THEN no window
    /// [t, t+1 s) holds more than 5, and the burst takes (60 − 1) / 5 s: the pacer
    /// waits, it does not drop.
    #[tokio::test(start_paused = true)]
    async fn a_burst_never_exceeds_the_rate_in_any_second() {
        let origin = Instant::now();
        let paced = paced(Recording::default(), 5.0, Duration::from_secs(3600));
        let calls = (0..60).map(|n| {
            let r = request(n);
            let p = &paced;
            async move { p.publish(&r).await }
        });
        let results = futures::future::join_all(calls).await;
        assert!(results.iter().all(Result::is_ok));
        let times = paced.inner.at.lock().unwrap().clone();
        assert_eq!(times.len(), 60);
        assert_eq!(max_in_any_second(&times), 5);
        assert_eq!(Instant::now() - origin, Duration::from_millis(59 * 200));
        assert_eq!(paced.pacer.waited(), 59);
    }

    #[tokio::test(start_paused = true)]
    async fn refused_publish_is_retryable_and_publishes_nothing() {
        let paced = paced(Recording::default(), 1.0, Duration::from_millis(500));
        paced.publish(&request(1)).await.unwrap();
        let err = paced.publish(&request(2)).await.unwrap_err();
        assert!(err.is_retryable());
        assert_eq!(err.operation, "RateLimit");
        assert_eq!(paced.inner.at.lock().unwrap().len(), 1);
    }

    /// On tokio's running clock the pacer really waits: two publishes at 20/s start
    /// at least 50 ms apart.
    #[tokio::test]
    async fn the_pacer_waits_for_the_slot_in_real_time() {
        let pacer = Pacer::per_second(20.0).unwrap();
        let a = pacer.turn(Duration::from_secs(1)).await.unwrap().started;
        let b = pacer.turn(Duration::from_secs(1)).await.unwrap().started;
        assert!(b - a >= Duration::from_millis(50), "{:?}", b - a);
    }

    /// A publisher whose requests take time: each reaches the endpoint at the end of
    /// its latency.
    struct Slow {
        latencies: Vec<Duration>,
        arrived: Mutex<Vec<Instant>>,
    }

    impl RequestPublisher for Slow {
        async fn publish(&self, _: &Request) -> Result<(), PortError> {
            let n = self.arrived.lock().unwrap().len();
            tokio::time::sleep(self.latencies[n % self.latencies.len()]).await;
            self.arrived.lock().unwrap().push(Instant::now());
            Ok(())
        }
    }

    /// GIVEN requests whose latency varies (a request leaving at its slot arrives
    /// late, the next one at once) THEN the arrivals, not only the starts, never exceed
    /// the rate in any [t, t + 1 s) — where spacing starts alone (a slot every 200 ms)
    /// lets 6 arrive within a second.
    #[tokio::test(start_paused = true)]
    async fn arrivals_stay_within_the_rate_whatever_the_latency() {
        for latencies in [
            vec![Duration::from_millis(190), Duration::ZERO],
            vec![
                Duration::ZERO,
                Duration::from_millis(190),
                Duration::from_millis(50),
            ],
            vec![Duration::from_millis(900)],
        ] {
            let origin = Instant::now();
            let slow = Slow {
                latencies: latencies.clone(),
                arrived: Mutex::new(Vec::new()),
            };
            let paced = paced(slow, 5.0, Duration::from_secs(3600));
            for n in 0..40 {
                paced.publish(&request(n)).await.unwrap();
            }
            let arrived = paced.inner.arrived.lock().unwrap().clone();
            assert_eq!(arrived.len(), 40);
            assert!(max_in_any_second(&arrived) <= 5, "{latencies:?}");
            // The check is not vacuous: starts spaced 200 ms apart, nothing else,
            // would let more than 5 arrive within a second with these latencies.
            let naive: Vec<Instant> = (0..40u32)
                .map(|n| {
                    origin
                        + Duration::from_millis(200) * n
                        + latencies[n as usize % latencies.len()]
                })
                .collect();
            if latencies.len() > 1 {
                assert!(max_in_any_second(&naive) > 5, "{latencies:?}");
            }
        }
    }
}
