//! In-memory adapters of every port, with DynamoDB's conditional semantics (a write
//! applies only when its guard holds; a failed condition hands back the current
//! record). Used by handler tests, the simulator, benchmarks and examples.
//!
//! Every change is also kept as a (before, after) pair, like a DynamoDB stream with
//! `NEW_AND_OLD_IMAGES`, so the audit trail derives from it exactly as in AWS.

use domain::audit::AuditEntry;
use domain::decide::ScheduleSpec;
use domain::ids::{ScheduleName, Timestamp, TransactionId};
use domain::machine::{ReconcileKey, TransactionRecord, Write};
use domain::message::{Payload, Request, RetryEvent};
use domain::ports::{
    AuditNotes, Clock, CreateOutcome, Creates, DeadLetter, Payloads, PortError, Records,
    RequestPublisher, RetryPublisher, ScheduleCreated, ScheduleCreator, ScheduleDeleted,
    ScheduleDeleter, StuckIndex, StuckPage, StuckQuery, Transitions, Undeliverable, WriteOutcome,
};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A poisoned lock only means another test thread panicked; the data is still usable.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Calls made to a store, by operation (to assert the cost of a handler path).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoreCalls {
    pub creates: u64,
    pub writes: u64,
    pub failed_conditions: u64,
    pub reads: u64,
    pub payload_reads: u64,
    pub queries: u64,
}

#[derive(Debug, Default)]
struct StoreState {
    records: BTreeMap<TransactionId, TransactionRecord>,
    payloads: BTreeMap<TransactionId, Payload>,
    changes: Vec<(Option<TransactionRecord>, TransactionRecord)>,
    /// Audit entries that are not transitions, as appended (`AuditNotes`).
    notes: Vec<AuditEntry>,
    calls: StoreCalls,
    /// The write (or create) call, counted from 1, whose answer is lost.
    lose_write: Option<u64>,
    lose_create: Option<u64>,
}

/// The state store in memory.
#[derive(Debug, Default)]
pub struct MemoryStore {
    state: Mutex<StoreState>,
}

impl MemoryStore {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn record(&self, id: &TransactionId) -> Option<TransactionRecord> {
        lock(&self.state).records.get(id).cloned()
    }

    pub fn records(&self) -> Vec<TransactionRecord> {
        lock(&self.state).records.values().cloned().collect()
    }

    /// Inserts or replaces a record as is (test set-up).
    pub fn put(&self, record: TransactionRecord, payload: Option<Payload>) {
        let mut s = lock(&self.state);
        if let Some(p) = payload {
            s.payloads.insert(record.transaction_id.clone(), p);
        }
        s.records.insert(record.transaction_id.clone(), record);
    }

    /// The audit trail, derived from every change as the stream consumer does, with
    /// the notes appended through [`AuditNotes`] placed at their instant (after the
    /// transitions of that instant).
    pub fn audit(&self, id: &TransactionId) -> Vec<AuditEntry> {
        let s = lock(&self.state);
        let mut trail: Vec<AuditEntry> = s
            .changes
            .iter()
            .filter(|(_, new)| &new.transaction_id == id)
            .filter_map(|(old, new)| AuditEntry::from_change(old.as_ref(), new))
            .collect();
        for note in s.notes.iter().filter(|e| &e.transaction_id == id) {
            let at = trail.partition_point(|e| e.at <= note.at);
            trail.insert(at, note.clone());
        }
        trail
    }

    /// Number of changes applied (stream records).
    pub fn change_count(&self) -> usize {
        lock(&self.state).changes.len()
    }

    pub fn calls(&self) -> StoreCalls {
        lock(&self.state).calls
    }

    /// Loses the answer of the `n`-th write from now (counted from 1) as DynamoDB
    /// behind a cut connection would: the write applies, the SDK sends it again, and
    /// the retry fails its condition on the record the first try wrote
    /// (`WriteOutcome::ConditionFailedOnRetry`).
    pub fn lose_answer_of_write(&self, n: u64) {
        let mut s = lock(&self.state);
        s.lose_write = Some(s.calls.writes + n);
    }

    /// The same for the `n`-th create from now: it applies, and the retry finds the
    /// transaction (`CreateOutcome::FoundOnRetry`).
    pub fn lose_answer_of_create(&self, n: u64) {
        let mut s = lock(&self.state);
        s.lose_create = Some(s.calls.creates + n);
    }

    pub fn reset_calls(&self) {
        lock(&self.state).calls = StoreCalls::default();
    }
}

impl Creates for MemoryStore {
    async fn create(
        &self,
        record: &TransactionRecord,
        payload: &Payload,
    ) -> Result<CreateOutcome, PortError> {
        let mut s = lock(&self.state);
        s.calls.creates += 1;
        if let Some(existing) = s.records.get(&record.transaction_id).cloned() {
            let same_payload = s.payloads.get(&record.transaction_id) == Some(payload);
            return Ok(CreateOutcome::AlreadyExists {
                record: Box::new(existing),
                same_payload,
            });
        }
        s.payloads
            .insert(record.transaction_id.clone(), payload.clone());
        s.records
            .insert(record.transaction_id.clone(), record.clone());
        s.changes.push((None, record.clone()));
        if s.lose_create == Some(s.calls.creates) {
            return Ok(CreateOutcome::FoundOnRetry {
                record: Box::new(record.clone()),
                same_payload: true,
            });
        }
        Ok(CreateOutcome::Created)
    }
}

impl Transitions for MemoryStore {
    async fn transition(&self, write: &Write) -> Result<WriteOutcome, PortError> {
        let mut s = lock(&self.state);
        s.calls.writes += 1;
        let Some(current) = s.records.get(&write.transaction_id).cloned() else {
            s.calls.failed_conditions += 1;
            return Ok(WriteOutcome::ConditionFailed(None));
        };
        match write.apply(&current) {
            Ok(next) => {
                s.records.insert(next.transaction_id.clone(), next.clone());
                s.changes.push((Some(current), next.clone()));
                if s.lose_write == Some(s.calls.writes) {
                    s.calls.failed_conditions += 1;
                    return Ok(WriteOutcome::ConditionFailedOnRetry(Some(next)));
                }
                Ok(WriteOutcome::Written(next))
            }
            Err(_) => {
                s.calls.failed_conditions += 1;
                Ok(WriteOutcome::ConditionFailed(Some(current)))
            }
        }
    }
}

impl AuditNotes for MemoryStore {
    async fn note(&self, entry: &AuditEntry) -> Result<(), PortError> {
        lock(&self.state).notes.push(entry.clone());
        Ok(())
    }
}

impl Records for MemoryStore {
    async fn get(&self, id: &TransactionId) -> Result<Option<TransactionRecord>, PortError> {
        let mut s = lock(&self.state);
        s.calls.reads += 1;
        Ok(s.records.get(id).cloned())
    }
}

impl Payloads for MemoryStore {
    async fn payload(&self, id: &TransactionId) -> Result<Option<Payload>, PortError> {
        let mut s = lock(&self.state);
        s.calls.payload_reads += 1;
        Ok(s.payloads.get(id).cloned())
    }
}

impl StuckIndex for MemoryStore {
    async fn query_stuck(&self, q: &StuckQuery) -> Result<StuckPage, PortError> {
        let mut s = lock(&self.state);
        s.calls.queries += 1;
        let partition = ReconcileKey::partition_for(q.shard);
        let mut matching: Vec<&TransactionRecord> = s
            .records
            .values()
            .filter(|r| {
                r.reconcile
                    .as_ref()
                    .is_some_and(|k| k.partition == partition && k.at < q.before)
            })
            .collect();
        let key = |r: &TransactionRecord| {
            (
                r.reconcile.as_ref().map_or(0, |k| k.at.millis()),
                r.transaction_id.as_str().to_owned(),
            )
        };
        matching.sort_by_key(|r| key(r));
        // The cursor is the last key returned, as DynamoDB's LastEvaluatedKey: the next
        // page starts after it, whatever was written meanwhile (an offset would skip
        // entries when earlier ones leave the range between two pages).
        let after: Option<(i64, String)> = q.cursor.as_deref().and_then(|c| {
            let (at, id) = c.split_once('|')?;
            Some((at.parse().ok()?, id.to_owned()))
        });
        let limit = usize::try_from(q.limit.max(1)).unwrap_or(usize::MAX);
        let rest: Vec<&TransactionRecord> = matching
            .into_iter()
            .filter(|r| after.as_ref().is_none_or(|a| key(r) > *a))
            .collect();
        let records: Vec<TransactionRecord> =
            rest.iter().take(limit).map(|r| (*r).clone()).collect();
        let next = (records.len() < rest.len())
            .then(|| records.last().map(key))
            .flatten()
            .map(|(at, id)| format!("{at}|{id}"));
        Ok(StuckPage {
            records,
            undecodable: Vec::new(),
            next,
        })
    }
}

/// The scheduler in memory: live schedules by name, fired on demand.
#[derive(Debug, Default)]
pub struct MemoryScheduler {
    live: Mutex<BTreeMap<ScheduleName, ScheduleSpec>>,
    created: AtomicU64,
    conflicts: AtomicU64,
}

impl MemoryScheduler {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn live(&self) -> Vec<ScheduleSpec> {
        lock(&self.live).values().cloned().collect()
    }

    pub fn get(&self, name: &ScheduleName) -> Option<ScheduleSpec> {
        lock(&self.live).get(name).cloned()
    }

    /// Removes and returns every schedule due at `now` (what `ActionAfterCompletion =
    /// DELETE` does after firing).
    pub fn take_due(&self, now: Timestamp) -> Vec<ScheduleSpec> {
        let mut live = lock(&self.live);
        let due: Vec<ScheduleName> = live
            .iter()
            .filter(|(_, s)| s.fire_at <= now)
            .map(|(n, _)| n.clone())
            .collect();
        due.iter().filter_map(|n| live.remove(n)).collect()
    }

    pub fn created(&self) -> u64 {
        self.created.load(Ordering::Relaxed)
    }

    pub fn conflicts(&self) -> u64 {
        self.conflicts.load(Ordering::Relaxed)
    }
}

impl ScheduleCreator for MemoryScheduler {
    async fn create(&self, spec: &ScheduleSpec) -> Result<ScheduleCreated, PortError> {
        let mut live = lock(&self.live);
        if live.contains_key(&spec.name) {
            self.conflicts.fetch_add(1, Ordering::Relaxed);
            return Ok(ScheduleCreated::AlreadyExists);
        }
        live.insert(spec.name.clone(), spec.clone());
        self.created.fetch_add(1, Ordering::Relaxed);
        Ok(ScheduleCreated::Created)
    }
}

impl ScheduleDeleter for MemoryScheduler {
    async fn delete(&self, name: &ScheduleName) -> Result<ScheduleDeleted, PortError> {
        Ok(match lock(&self.live).remove(name) {
            Some(_) => ScheduleDeleted::Deleted,
            None => ScheduleDeleted::NotFound,
        })
    }
}

/// A queue in memory (requests or retry events), in publish order. A retry event
/// deferred by the breaker is kept with its delay ([`MemoryQueue::delayed`]).
#[derive(Debug)]
pub struct MemoryQueue<T> {
    messages: Mutex<Vec<T>>,
    delayed: Mutex<Vec<(T, u32)>>,
}

impl<T> Default for MemoryQueue<T> {
    fn default() -> Self {
        Self {
            messages: Mutex::new(Vec::new()),
            delayed: Mutex::new(Vec::new()),
        }
    }
}

impl<T: Clone> MemoryQueue<T> {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn messages(&self) -> Vec<T> {
        lock(&self.messages).clone()
    }

    pub fn drain(&self) -> Vec<T> {
        std::mem::take(&mut *lock(&self.messages))
    }

    /// The messages published with a delay, with it (seconds), in order; they are
    /// not among [`Self::messages`] until [`Self::deliver_delayed`].
    pub fn delayed(&self) -> Vec<(T, u32)> {
        lock(&self.delayed).clone()
    }

    /// The delayed messages' delays have passed: they join the queue.
    pub fn deliver_delayed(&self) {
        let due = std::mem::take(&mut *lock(&self.delayed));
        lock(&self.messages).extend(due.into_iter().map(|(m, _)| m));
    }

    pub fn len(&self) -> usize {
        lock(&self.messages).len()
    }

    pub fn is_empty(&self) -> bool {
        lock(&self.messages).is_empty()
    }
}

impl RequestPublisher for MemoryQueue<Request> {
    async fn publish(&self, request: &Request) -> Result<(), PortError> {
        lock(&self.messages).push(request.clone());
        Ok(())
    }
}

impl RetryPublisher for MemoryQueue<RetryEvent> {
    async fn publish(&self, event: &RetryEvent, delay_seconds: u32) -> Result<(), PortError> {
        if delay_seconds == 0 {
            lock(&self.messages).push(event.clone());
        } else {
            lock(&self.delayed).push((event.clone(), delay_seconds));
        }
        Ok(())
    }
}

/// A dead-letter queue in memory. It can be told to fail, to prove that a failed
/// send never loses a record.
#[derive(Debug, Default)]
pub struct MemoryDeadLetter {
    messages: Mutex<Vec<Undeliverable>>,
    failing: Mutex<bool>,
}

impl MemoryDeadLetter {
    pub fn new() -> Self {
        Self::default()
    }

    /// The messages received, in order.
    pub fn messages(&self) -> Vec<Undeliverable> {
        lock(&self.messages).clone()
    }

    /// While `true`, every send fails with a retryable error.
    pub fn set_failing(&self, failing: bool) {
        *lock(&self.failing) = failing;
    }
}

impl DeadLetter for MemoryDeadLetter {
    async fn send(&self, message: &Undeliverable) -> Result<(), PortError> {
        if *lock(&self.failing) {
            return Err(PortError::retryable(
                "SendMessage",
                "dead-letter queue unavailable",
            ));
        }
        lock(&self.messages).push(message.clone());
        Ok(())
    }
}

/// A clock tests move by hand.
#[derive(Debug, Default)]
pub struct ManualClock(AtomicI64);

impl ManualClock {
    pub fn at(t: Timestamp) -> Self {
        Self(AtomicI64::new(t.millis()))
    }

    pub fn set(&self, t: Timestamp) {
        self.0.store(t.millis(), Ordering::Relaxed);
    }

    pub fn advance_millis(&self, ms: i64) {
        self.0.fetch_add(ms, Ordering::Relaxed);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        Timestamp::from_millis(self.0.load(Ordering::Relaxed))
    }
}

/// Polls a future that never waits (every in-memory port) to completion without an
/// async runtime: what the synchronous simulator and model checker use.
pub fn block_on_ready<F: std::future::Future>(fut: F) -> Option<F::Output> {
    use std::task::{Context, Poll, Waker};
    let mut fut = std::pin::pin!(fut);
    let mut cx = Context::from_waker(Waker::noop());
    match fut.as_mut().poll(&mut cx) {
        Poll::Ready(v) => Some(v),
        Poll::Pending => None,
    }
}

/// The circuit breaker in memory: the item with its version check, the change log,
/// and the window's buckets (as `aws::breaker::DynamoBreaker` keeps them).
#[derive(Debug)]
pub struct MemoryBreaker {
    settings: domain::breaker::BreakerSettings,
    state: Mutex<MemoryBreakerState>,
}

#[derive(Debug, Default)]
struct MemoryBreakerState {
    breaker: domain::breaker::Breaker,
    log: Vec<domain::ports::BreakerNote>,
    buckets: BTreeMap<Timestamp, domain::breaker::Tally>,
    /// Calls, to assert the cost of a path.
    reads: u64,
    window_reads: u64,
    saves: u64,
    counts: u64,
}

/// Calls made to a [`MemoryBreaker`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BreakerCalls {
    /// `load` calls (one GetItem each in DynamoDB).
    pub loads: u64,
    /// Those that also read the window (one Query each in DynamoDB).
    pub window_reads: u64,
    /// Conditional saves tried.
    pub saves: u64,
    /// Counting writes (one ADD each).
    pub counts: u64,
}

impl MemoryBreaker {
    pub fn new(settings: domain::breaker::BreakerSettings) -> Self {
        Self {
            settings,
            state: Mutex::new(MemoryBreakerState::default()),
        }
    }

    pub fn breaker(&self) -> domain::breaker::Breaker {
        lock(&self.state).breaker
    }

    /// Every change written, oldest first.
    pub fn log(&self) -> Vec<domain::ports::BreakerNote> {
        lock(&self.state).log.clone()
    }

    pub fn calls(&self) -> BreakerCalls {
        let s = lock(&self.state);
        BreakerCalls {
            loads: s.reads,
            window_reads: s.window_reads,
            saves: s.saves,
            counts: s.counts,
        }
    }

    /// Sets the breaker as is (test set-up).
    pub fn put(&self, breaker: domain::breaker::Breaker) {
        lock(&self.state).breaker = breaker;
    }
}

impl domain::ports::BreakerReads for MemoryBreaker {
    async fn load(
        &self,
        now: Timestamp,
        window: bool,
    ) -> Result<domain::ports::BreakerView, PortError> {
        let mut s = lock(&self.state);
        s.reads += 1;
        let window = if window {
            s.window_reads += 1;
            domain::breaker::window_total(
                s.buckets.iter().map(|(k, v)| (*k, v)),
                now,
                &self.settings,
            )
        } else {
            domain::breaker::Tally::default()
        };
        Ok(domain::ports::BreakerView {
            breaker: s.breaker,
            window,
        })
    }
}

impl domain::ports::BreakerWrites for MemoryBreaker {
    async fn save(
        &self,
        read: &domain::breaker::Breaker,
        new: &domain::breaker::Breaker,
        note: &domain::ports::BreakerNote,
    ) -> Result<bool, PortError> {
        let mut s = lock(&self.state);
        s.saves += 1;
        if s.breaker.version != read.version {
            return Ok(false);
        }
        s.breaker = *new;
        s.log.push(note.clone());
        Ok(true)
    }
}

impl domain::ports::BreakerCounts for MemoryBreaker {
    async fn count(&self, at: Timestamp, tally: &domain::breaker::Tally) -> Result<(), PortError> {
        let mut s = lock(&self.state);
        s.counts += 1;
        let b = s
            .buckets
            .entry(domain::breaker::bucket_of(at, &self.settings))
            .or_default();
        b.answered += tally.answered;
        b.technical += tally.technical;
        b.deadlines += tally.deadlines;
        Ok(())
    }
}
