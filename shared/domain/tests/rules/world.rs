//! A whole deployment in memory: the domain's in-memory adapters, driven by the
//! domain's own executor, plus an external service that deduplicates by idempotency
//! key. Tests move the clock by hand.

use domain::decide::{Context, Disposition, Effect, Input, Known, Run, Step};
use domain::exec::{execute, ExecError, Perform};
use domain::ids::{Attempt, IdempotencyKey, MaxAttempts, Timestamp, TransactionId};
use domain::machine::TransactionRecord;
use domain::message::{Outcome, Payload, Request, Response, RetryEvent};
use domain::policy::{PolicySet, RetryPolicy, SplitMix64};
use domain::ports::{StuckIndex, StuckQuery};
use std::collections::BTreeSet;
use std::time::Duration;
use testkit::memory::{block_on_ready, MemoryQueue, MemoryScheduler, MemoryStore};
use testkit::ports::AllPorts;

pub type MemPorts<'a> = AllPorts<
    'a,
    MemoryStore,
    MemoryScheduler,
    MemoryQueue<Request>,
    MemoryQueue<RetryEvent>,
    MemoryStore,
>;

/// 2026-10-03T12:00:00Z
pub fn t0() -> Timestamp {
    Timestamp::parse("2026-10-03T12:00:00Z").unwrap()
}

pub fn tx(raw: &str) -> TransactionId {
    TransactionId::parse(raw).unwrap()
}

pub fn a(n: u32) -> Attempt {
    Attempt::new(n).unwrap()
}

pub const HOUR_MS: i64 = 3_600_000;

pub struct World {
    pub store: MemoryStore,
    pub scheduler: MemoryScheduler,
    pub requests: MemoryQueue<Request>,
    pub retries: MemoryQueue<RetryEvent>,
    pub now: Timestamp,
    pub policies: PolicySet,
    pub shards: u16,
    pub threshold: Duration,
    pub rng: SplitMix64,
    /// The circuit breaker's hold every run decides under (`None`: it lets requests
    /// out).
    pub hold: Option<domain::breaker::Hold>,
    /// How the deployment delivers requests (direct unless a test says otherwise).
    pub delivery: domain::decide::Delivery,
    /// Every effect performed by every run, in order (terminal ones excluded).
    pub performed: Vec<Effect>,
    /// Idempotency keys the external service has answered (it answers a key once).
    answered: BTreeSet<IdempotencyKey>,
    /// How many published requests the external service has read.
    served: usize,
}

impl World {
    pub fn new() -> Self {
        Self {
            store: MemoryStore::new(),
            scheduler: MemoryScheduler::new(),
            requests: MemoryQueue::new(),
            retries: MemoryQueue::new(),
            now: t0(),
            policies: PolicySet::uniform(RetryPolicy::article_default()),
            shards: 4,
            threshold: Duration::from_secs(900),
            rng: SplitMix64::new(7),
            hold: None,
            delivery: domain::decide::Delivery::Direct,
            performed: Vec::new(),
            answered: BTreeSet::new(),
            served: 0,
        }
    }

    /// The context at `now`, with a 30-day transaction deadline: longer than the
    /// drains' two-day jumps over a whole budget, within reach of a long sequence.
    pub fn ctx(&self) -> Context {
        Context::new(self.now, self.policies.clone(), self.shards, self.threshold)
            .with_transaction_deadline(Duration::from_secs(30 * 24 * 3600))
            .with_hold(self.hold)
            .with_delivery(self.delivery)
    }

    pub fn advance_ms(&mut self, ms: i64) {
        self.now = self.now.plus_millis(ms);
    }

    pub fn record(&self, id: &TransactionId) -> TransactionRecord {
        self.store.record(id).unwrap()
    }

    /// Runs `input` through `execute` until its disposition, stopping (as a crash
    /// would) before effect number `crash_before` when given.
    pub fn run_crashing(
        &mut self,
        input: Input,
        crash_before: Option<usize>,
    ) -> Result<Disposition, ExecError> {
        let ctx = self.ctx();
        let mut run = Run::new(input, Known::Unread, &ctx, &mut self.rng);
        let ports: MemPorts<'_> = AllPorts {
            store: &self.store,
            scheduler: &self.scheduler,
            requests: &self.requests,
            retries: &self.retries,
            notes: &self.store,
        };
        let performed = &mut self.performed;
        let mut count = 0usize;
        let mut hook = |e: &Effect| {
            if crash_before == Some(count) {
                return false;
            }
            count += 1;
            performed.push(e.clone());
            true
        };
        block_on_ready(execute(&mut run, &ports, &ctx, &mut self.rng, &mut hook))
            .expect("in-memory ports never wait")
    }

    pub fn run(&mut self, input: Input) -> Disposition {
        self.run_crashing(input, None).unwrap()
    }

    pub fn start(&mut self, id: &TransactionId, max: u32) -> Disposition {
        self.run(start_input(id, max))
    }

    /// Outbox mode's publisher, handed the stored record of `id` as the stream would.
    pub fn publish(&mut self, id: &TransactionId) -> Disposition {
        let image = self.record(id);
        self.run(Input::Publish(image))
    }

    /// The external service reads the requests published since last time and answers
    /// each idempotency key once (a republished request is deduplicated).
    pub fn serve(&mut self, outcome: impl FnMut(&Request) -> Outcome) -> Vec<Response> {
        self.answer_new(true, outcome)
    }

    /// The external service reads the requests published since last time and answers
    /// every one of them, a request sent again with the same key included (a service
    /// that failed it for a technical reason processes it anew).
    pub fn serve_each(&mut self, outcome: impl FnMut(&Request) -> Outcome) -> Vec<Response> {
        self.answer_new(false, outcome)
    }

    fn answer_new(
        &mut self,
        once_per_key: bool,
        mut outcome: impl FnMut(&Request) -> Outcome,
    ) -> Vec<Response> {
        let all = self.requests.messages();
        let mut out = Vec::new();
        for req in &all[self.served..] {
            if self.answered.insert(req.idempotency_key.clone()) || !once_per_key {
                out.push(testkit::answers::response(
                    req.transaction_id.clone(),
                    req.attempt,
                    outcome(req),
                ));
            }
        }
        self.served = all.len();
        out
    }

    /// Retry events of the schedules due now (the scheduler fires and deletes them).
    pub fn fire_due(&mut self) -> Vec<RetryEvent> {
        self.scheduler
            .take_due(self.now)
            .into_iter()
            .map(|s| s.event)
            .collect()
    }

    /// What the reconciler's queries return now: every record stuck in an
    /// intermediate state for longer than the threshold, all shards.
    pub fn stuck(&self) -> Vec<TransactionRecord> {
        let threshold = i64::try_from(self.threshold.as_millis()).unwrap();
        let before = self.now.plus_millis(-threshold);
        let mut out = Vec::new();
        for shard in 0..self.shards {
            let mut cursor = None;
            loop {
                let q = StuckQuery {
                    shard,
                    before,
                    limit: 2,
                    cursor: cursor.take(),
                };
                let page = block_on_ready(self.store.query_stuck(&q)).unwrap().unwrap();
                out.extend(page.records);
                match page.next {
                    Some(c) => cursor = Some(c),
                    None => break,
                }
            }
        }
        out
    }

    /// One reconciler run: every stuck record through the reconciler's decision.
    pub fn reconcile(&mut self) -> Vec<Disposition> {
        self.stuck()
            .into_iter()
            .map(|r| self.run(Input::Reconcile(r)))
            .collect()
    }

    /// Attempts of the published requests, in publish order (republishes included).
    pub fn published(&self, id: &TransactionId) -> Vec<u32> {
        self.requests
            .messages()
            .iter()
            .filter(|r| &r.transaction_id == id)
            .map(|r| r.attempt.get())
            .collect()
    }

    pub fn alerts(&self) -> usize {
        self.performed
            .iter()
            .filter(|e| matches!(e, Effect::Alert(_)))
            .count()
    }
}

pub fn payload() -> Payload {
    Payload::from_json(r#"{"amount":12.50,"currency":"EUR"}"#).unwrap()
}

/// The correlation id every transaction of these tests is started with.
pub fn correlation(id: &TransactionId) -> domain::CorrelationId {
    domain::CorrelationId::new(&format!("corr-{id}")).unwrap()
}

pub fn start_input(id: &TransactionId, max: u32) -> Input {
    Input::Start {
        transaction_id: id.clone(),
        payload: payload(),
        max_attempts: MaxAttempts::new(max).unwrap(),
        correlation_id: Some(correlation(id)),
    }
}

pub fn response_input(id: &TransactionId, n: u32, outcome: Outcome) -> Input {
    Input::Response(testkit::answers::response(id.clone(), a(n), outcome))
}

pub fn retry_input(event: RetryEvent) -> Input {
    Input::Retry(event)
}

/// Performs the current effect of `run` through the in-memory ports and feeds back
/// what it observed. Returns the effect performed, or `None` when the run is done.
pub fn step_once(
    run: &mut Run,
    ports: &MemPorts<'_>,
    ctx: &Context,
    rng: &mut SplitMix64,
) -> Option<Effect> {
    let effect = match run.step() {
        Step::Done(_) => return None,
        Step::Perform(e) => e.clone(),
    };
    let observed = block_on_ready(ports.perform(&effect))
        .expect("in-memory ports never wait")
        .expect("in-memory ports do not fail");
    run.observe(observed, ctx, rng).unwrap();
    Some(effect)
}

/// The shape every record written by the handlers has: what its status implies of
/// its other fields and its budget, as every checker states them
/// (`testkit::oracle::inconsistency`, `record_over_budget`).
pub fn well_formed(r: &TransactionRecord) -> Result<(), String> {
    use testkit::oracle::{inconsistency, record_over_budget};
    match inconsistency(r) {
        None if record_over_budget(r) => Err(format!("an attempt past max_attempts: {r:?}")),
        None => Ok(()),
        Some(rule) => Err(format!("{rule}: {r:?}")),
    }
}
