//! An in-memory world for the handler tests: every port in memory, a manual clock,
//! and helpers that deliver messages through the runtime's handler cores.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use domain::audit::AuditEntry;
use domain::exec::StartPorts;
use domain::policy::{FixedRandom, SplitMix64};
use domain::ports::Clock;
use domain::{
    Attempt, Effect, MaxAttempts, Outcome, Payload, Request, Response, RetryEvent, Status,
    Timestamp, TransactionId, TransactionRecord,
};
use runtime::metrics::Metrics;
use runtime::reconcile::{Limits, Report};
use runtime::settings::{Seeds, Settings};
use runtime::Verdict;
use std::collections::BTreeSet;
use std::time::Duration;
use testkit::memory::{ManualClock, MemoryQueue, MemoryScheduler, MemoryStore};

/// 2026-10-03T12:00:00.000Z
pub const T0: Timestamp = Timestamp::from_millis(1_791_028_800_000);

pub fn id(s: &str) -> TransactionId {
    TransactionId::parse(s).unwrap()
}

pub fn a(n: u32) -> Attempt {
    Attempt::new(n).unwrap()
}

/// Allows `k` effects, then stops the plan (a crash right after effect `k`).
pub fn stop_after(k: usize) -> impl FnMut(&Effect) -> bool + Send {
    let mut seen = 0;
    move |_| {
        seen += 1;
        seen <= k
    }
}

/// Lets every effect run.
pub fn all() -> impl FnMut(&Effect) -> bool + Send {
    |_| true
}

pub struct World {
    pub store: MemoryStore,
    pub scheduler: MemoryScheduler,
    pub requests: MemoryQueue<Request>,
    pub retries: MemoryQueue<RetryEvent>,
    pub clock: ManualClock,
    pub settings: Settings,
    pub metrics: Metrics,
    pub rng_seed: std::sync::atomic::AtomicU64,
}

impl World {
    pub fn new() -> Self {
        Self {
            store: MemoryStore::new(),
            scheduler: MemoryScheduler::new(),
            requests: MemoryQueue::new(),
            retries: MemoryQueue::new(),
            clock: ManualClock::at(T0),
            settings: Settings {
                reconcile_threshold: Duration::from_secs(900),
                ..Settings::default()
            },
            metrics: Metrics::new("DeferredRetry", "test"),
            rng_seed: std::sync::atomic::AtomicU64::new(1),
        }
    }

    pub fn now(&self) -> Timestamp {
        self.clock.now()
    }

    pub fn advance(&self, d: Duration) {
        self.clock
            .advance_millis(i64::try_from(d.as_millis()).unwrap());
    }

    pub fn set_time(&self, t: Timestamp) {
        self.clock.set(t);
    }

    fn rng(&self) -> SplitMix64 {
        SplitMix64::new(
            self.rng_seed
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        )
    }

    /// Starts a transaction through the library operation.
    pub async fn start(&self, tx: &str, max: u32) {
        let ports = StartPorts {
            store: &self.store,
            requests: &self.requests,
        };
        let ctx = self.settings.context(self.now());
        runtime::ops::start_transaction(
            &ports,
            id(tx),
            Payload::from_json(&format!(r#"{{"order":"{tx}","amount":12.5}}"#)).unwrap(),
            MaxAttempts::new(max).unwrap(),
            &ctx,
        )
        .await
        .unwrap();
    }

    /// Delivers a response to the response handler's core.
    pub async fn respond_with(
        &self,
        tx: &str,
        n: u32,
        outcome: Outcome,
        hook: &mut (dyn FnMut(&Effect) -> bool + Send),
    ) -> Verdict {
        let resp = Response {
            transaction_id: id(tx),
            attempt: a(n),
            outcome,
            reason: Some("NOT_AVAILABLE".into()),
            retry_after_seconds: None,
            round: None,
        };
        let ctx = self.settings.context(self.now());
        let mut rng = self.rng();
        runtime::response::handle(
            &domain::exec::ResponsePorts {
                store: &self.store,
                scheduler: &self.scheduler,
                retries: &self.retries,
                notes: &self.store,
            },
            &resp,
            &ctx,
            &mut rng,
            hook,
            &self.metrics,
        )
        .await
    }

    pub async fn respond(&self, tx: &str, n: u32, outcome: Outcome) -> Verdict {
        self.respond_with(tx, n, outcome, &mut all()).await
    }

    /// Delivers a retry event to the retry handler's core.
    pub async fn retry_with(
        &self,
        ev: &RetryEvent,
        hook: &mut (dyn FnMut(&Effect) -> bool + Send),
    ) -> Verdict {
        let ctx = self.settings.context(self.now());
        let mut rng = self.rng();
        runtime::retry::handle(
            &domain::exec::RetryPorts {
                store: &self.store,
                requests: &self.requests,
                scheduler: &self.scheduler,
            },
            ev,
            &ctx,
            &mut rng,
            hook,
            &self.metrics,
        )
        .await
    }

    pub async fn retry(&self, ev: &RetryEvent) -> Verdict {
        self.retry_with(ev, &mut all()).await
    }

    /// One reconciler run now.
    pub async fn reconcile(&self) -> Report {
        self.reconcile_with(&Limits::default(), 7, &self.metrics)
            .await
    }

    /// One reconciler run now, within `limits`, drawing from `seed`.
    pub async fn reconcile_with(&self, limits: &Limits, seed: u64, metrics: &Metrics) -> Report {
        runtime::reconcile::run_once(
            &domain::exec::ReconcilePorts {
                store: &self.store,
                scheduler: &self.scheduler,
                retries: &self.retries,
                requests: &self.requests,
            },
            &self.settings,
            self.now(),
            None::<&runtime::breaker::BreakerGate<testkit::memory::MemoryBreaker>>,
            limits,
            &Seeds::fixed(seed),
            metrics,
        )
        .await
    }

    /// Fires every schedule due now (the scheduler's delivery to the retry queue).
    pub fn fire_due(&self) -> Vec<RetryEvent> {
        self.scheduler
            .take_due(self.now())
            .into_iter()
            .map(|s| s.event)
            .collect()
    }

    pub fn record(&self, tx: &str) -> TransactionRecord {
        self.store.record(&id(tx)).unwrap()
    }

    pub fn status(&self, tx: &str) -> Status {
        self.record(tx).status
    }

    /// Idempotency keys of every request published, with repeats.
    pub fn keys(&self) -> Vec<String> {
        self.requests
            .messages()
            .iter()
            .map(|r| r.idempotency_key.to_string())
            .collect()
    }

    /// What the external service sees once it dedupes by idempotency key.
    pub fn distinct_keys(&self) -> BTreeSet<String> {
        self.keys().into_iter().collect()
    }

    pub fn audit(&self, tx: &str) -> Vec<AuditEntry> {
        self.store.audit(&id(tx))
    }

    /// The audit trail as `FROM>TO@attempt` strings.
    pub fn audit_path(&self, tx: &str) -> Vec<String> {
        testkit::trail::arrows(&self.audit(tx))
    }
}

/// A fixed random source, for decisions where jitter must not vary.
pub fn fixed() -> FixedRandom {
    FixedRandom(0.5)
}
