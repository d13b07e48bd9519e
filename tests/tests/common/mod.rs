//! The world of the handler tests: the ports of a stack, a manual clock, and helpers
//! that deliver messages through the functions' cores.
//!
//! A world runs over a [`Backend`]: [`Memory`] (every port in memory, the default) or
//! [`moto::Moto`] (the `shared/aws` adapters against a patched moto server on
//! loopback). A test written over `World<B>` runs unchanged on either.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, async_fn_in_trait)]

pub mod moto;

use domain::audit::AuditEntry;
use domain::decide::ScheduleSpec;
use domain::exec::{ReconcilePorts, ResponsePorts, RetryPorts, StartPorts};
use domain::policy::{FixedRandom, SplitMix64};
use domain::ports::{
    AuditNotes, Clock, Creates, Payloads, Records, RequestPublisher, RetryPublisher,
    ScheduleCreator, ScheduleDeleter, StuckIndex, Transitions,
};
use domain::{
    Attempt, Effect, MaxAttempts, Outcome, Payload, Request, Response, RetryEvent, Status,
    Timestamp, TransactionId, TransactionRecord,
};
use reconciler::{Limits, Report};
use runtime::metrics::Metrics;
use runtime::settings::{Seeds, Settings};
use runtime::Verdict;
use std::collections::BTreeSet;
use std::sync::Arc;
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
    move |e| {
        // A breaker signal is counted in the process, no call: not a crash point.
        if matches!(e, Effect::Signal(_)) {
            return true;
        }
        seen += 1;
        seen <= k
    }
}

/// Lets every effect run.
pub fn all() -> impl FnMut(&Effect) -> bool + Send {
    |_| true
}

/// The payload every test transaction starts with.
pub fn payload_of(tx: &str) -> Payload {
    Payload::from_json(&format!(r#"{{"order":"{tx}","amount":12.5}}"#)).unwrap()
}

/// The service's answer for attempt `n`, with the reason every test uses.
pub fn response(tx: &str, n: u32, outcome: Outcome) -> Response {
    testkit::answers::response(id(tx), a(n), outcome)
}

/// Where a world's ports live, and how a test looks at them: the record, the live
/// schedules, the requests the service received, the retry queue, the audit trail.
pub trait Backend: Sized + Send + Sync {
    type Store: Transitions + Records + Creates + Payloads + StuckIndex;
    type Scheduler: ScheduleCreator + ScheduleDeleter;
    type Requests: RequestPublisher;
    type Retries: RetryPublisher;
    type Notes: AuditNotes;

    /// A new world with nothing in it, its clock at [`T0`].
    async fn world() -> World<Self>;

    /// Where the response handler writes its audit notices.
    fn notes(w: &World<Self>) -> &Self::Notes;

    /// The schedules not yet fired, by name.
    async fn live(w: &World<Self>) -> Vec<ScheduleSpec>;

    /// Removes and returns every schedule due at `now` (what the scheduler does when
    /// it fires a schedule with `ActionAfterCompletion = DELETE`).
    async fn take_due(w: &World<Self>, now: Timestamp) -> Vec<ScheduleSpec>;

    /// Every request published so far, in publish order (what reached the service).
    async fn published(w: &World<Self>) -> Vec<Request>;

    /// Takes every retry event waiting on the retry queue.
    async fn take_retries(w: &World<Self>) -> Vec<RetryEvent>;

    /// The audit trail of a transaction, as the audit table would hold it.
    async fn audit(w: &World<Self>, id: &TransactionId) -> Vec<AuditEntry>;

    /// Changes applied to the transactions table so far (its stream records).
    async fn change_count(w: &World<Self>) -> usize;

    /// Inserts or replaces a record as is, with its payload (test set-up).
    async fn put(w: &World<Self>, record: &TransactionRecord, payload: &Payload);
}

/// Every port in memory.
pub struct Memory;

pub struct World<B: Backend = Memory> {
    pub store: B::Store,
    pub scheduler: B::Scheduler,
    pub requests: B::Requests,
    pub retries: B::Retries,
    /// What only this backend needs (clients, logs).
    pub backend: B,
    pub clock: Arc<ManualClock>,
    pub settings: Settings,
    pub metrics: Metrics,
    pub rng_seed: std::sync::atomic::AtomicU64,
}

fn settings() -> Settings {
    Settings {
        reconcile_threshold: Duration::from_secs(900),
        ..Settings::default()
    }
}

impl World {
    /// A world with every port in memory.
    pub fn new() -> Self {
        Self::with_ports(
            MemoryStore::new(),
            MemoryScheduler::new(),
            MemoryQueue::new(),
            MemoryQueue::new(),
            Memory,
        )
    }
}

impl Backend for Memory {
    type Store = MemoryStore;
    type Scheduler = MemoryScheduler;
    type Requests = MemoryQueue<Request>;
    type Retries = MemoryQueue<RetryEvent>;
    type Notes = MemoryStore;

    async fn world() -> World<Self> {
        World::new()
    }

    fn notes(w: &World<Self>) -> &MemoryStore {
        &w.store
    }

    async fn live(w: &World<Self>) -> Vec<ScheduleSpec> {
        w.scheduler.live()
    }

    async fn take_due(w: &World<Self>, now: Timestamp) -> Vec<ScheduleSpec> {
        w.scheduler.take_due(now)
    }

    async fn published(w: &World<Self>) -> Vec<Request> {
        w.requests.messages()
    }

    async fn take_retries(w: &World<Self>) -> Vec<RetryEvent> {
        w.retries.drain()
    }

    async fn audit(w: &World<Self>, id: &TransactionId) -> Vec<AuditEntry> {
        w.store.audit(id)
    }

    async fn change_count(w: &World<Self>) -> usize {
        w.store.change_count()
    }

    async fn put(w: &World<Self>, record: &TransactionRecord, payload: &Payload) {
        w.store.put(record.clone(), Some(payload.clone()));
    }
}

impl<B: Backend> World<B> {
    pub fn with_ports(
        store: B::Store,
        scheduler: B::Scheduler,
        requests: B::Requests,
        retries: B::Retries,
        backend: B,
    ) -> Self {
        Self {
            store,
            scheduler,
            requests,
            retries,
            backend,
            clock: Arc::new(ManualClock::at(T0)),
            settings: settings(),
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

    /// The response handler's ports.
    pub fn response_ports(
        &self,
    ) -> ResponsePorts<'_, B::Store, B::Scheduler, B::Retries, B::Notes> {
        ResponsePorts {
            store: &self.store,
            scheduler: &self.scheduler,
            retries: &self.retries,
            notes: B::notes(self),
        }
    }

    /// The retry handler's ports.
    pub fn retry_ports(&self) -> RetryPorts<'_, B::Store, B::Requests, B::Retries> {
        RetryPorts {
            store: &self.store,
            requests: &self.requests,
            retries: &self.retries,
        }
    }

    /// The start operation's ports.
    pub fn start_ports(&self) -> StartPorts<'_, B::Store, B::Requests> {
        StartPorts {
            store: &self.store,
            requests: &self.requests,
        }
    }

    /// Starts a transaction through the library operation.
    pub async fn start(&self, tx: &str, max: u32) {
        let ctx = self.settings.context(self.now());
        runtime::ops::start_transaction(
            &self.start_ports(),
            id(tx),
            payload_of(tx),
            MaxAttempts::new(max).unwrap(),
            self.settings.answer_timeout,
            &ctx,
        )
        .await
        .unwrap();
    }

    /// Starts `tx` (at most 3 attempts), then stops the response handler's core after
    /// effect `k` of its handling of CANCELLED for attempt 1, as a crash would: the
    /// response is left to SQS.
    pub async fn start_and_crash_responding(&self, tx: &str, k: usize) {
        self.start(tx, 3).await;
        self.respond_with(tx, 1, Outcome::Cancelled, &mut stop_after(k))
            .await;
    }

    /// Delivers a response to the response handler's core.
    pub async fn respond_with(
        &self,
        tx: &str,
        n: u32,
        outcome: Outcome,
        hook: &mut (dyn FnMut(&Effect) -> bool + Send),
    ) -> Verdict {
        let resp = response(tx, n, outcome);
        let ctx = self.settings.context(self.now());
        let mut rng = self.rng();
        let (verdict, _) = response_handler::handle(
            &self.response_ports(),
            &resp,
            &ctx,
            &mut rng,
            hook,
            &self.metrics,
        )
        .await;
        verdict
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
        retry_handler::handle(
            &self.retry_ports(),
            ev,
            domain::Known::Unread,
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
        reconciler::run_once(
            &ReconcilePorts {
                store: &self.store,
                scheduler: &self.scheduler,
                retries: &self.retries,
                requests: &self.requests,
                notes: B::notes(self),
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

    /// The schedules not yet fired.
    pub async fn live(&self) -> Vec<ScheduleSpec> {
        B::live(self).await
    }

    /// Fires every schedule due now (the scheduler's delivery to the retry queue).
    pub async fn fire_due(&self) -> Vec<RetryEvent> {
        B::take_due(self, self.now())
            .await
            .into_iter()
            .map(|s| s.event)
            .collect()
    }

    /// Takes every retry event waiting on the retry queue.
    pub async fn take_retries(&self) -> Vec<RetryEvent> {
        B::take_retries(self).await
    }

    pub async fn record(&self, tx: &str) -> TransactionRecord {
        self.store.get(&id(tx)).await.unwrap().unwrap()
    }

    pub async fn status(&self, tx: &str) -> Status {
        self.record(tx).await.status
    }

    /// Inserts or replaces a record as is, with the transaction's payload.
    pub async fn put(&self, record: &TransactionRecord) {
        B::put(self, record, &payload_of(record.transaction_id.as_str())).await;
    }

    /// Every request published, in order, with repeats.
    pub async fn published(&self) -> Vec<Request> {
        B::published(self).await
    }

    /// Idempotency keys of every request published, with repeats.
    pub async fn keys(&self) -> Vec<String> {
        self.published()
            .await
            .iter()
            .map(|r| r.idempotency_key.to_string())
            .collect()
    }

    /// What the external service sees once it dedupes by idempotency key.
    pub async fn distinct_keys(&self) -> BTreeSet<String> {
        self.keys().await.into_iter().collect()
    }

    /// Changes applied to the transactions table so far.
    pub async fn change_count(&self) -> usize {
        B::change_count(self).await
    }

    pub async fn audit(&self, tx: &str) -> Vec<AuditEntry> {
        B::audit(self, &id(tx)).await
    }

    /// The audit trail as `FROM>TO@attempt` strings.
    pub async fn audit_path(&self, tx: &str) -> Vec<String> {
        testkit::trail::arrows(&self.audit(tx).await)
    }
}

/// A fixed random source, for decisions where jitter must not vary.
pub fn fixed() -> FixedRandom {
    FixedRandom(0.5)
}
