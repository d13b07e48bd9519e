//! Audit trails written as `FROM>TO@attempt` strings (`*` for the creation), the form
//! tests compare whole trails in.

use domain::audit::AuditEntry;
use domain::machine::Actor;
use domain::{Attempt, MaxAttempts, Status, Timestamp, TransactionId, TransactionRecord};

/// An audit entry of `id` at `at` (ms) for the arrow `from` → `to` leaving
/// `attempt` current, written by the response handler, budget 4, nothing else set:
/// what tests of trail checks build trails from.
pub fn entry(
    id: TransactionId,
    at: i64,
    from: Option<Status>,
    to: Status,
    attempt: Attempt,
) -> AuditEntry {
    AuditEntry {
        transaction_id: id,
        at: Timestamp::from_millis(at),
        actor: Actor::ResponseHandler,
        from,
        to,
        current_attempt: attempt,
        next_attempt: None,
        max_attempts: 4,
        schedule_name: None,
        next_fire_at: None,
        outcome: None,
        reason: None,
        mark: None,
        origin: None,
        operator: None,
        notice: None,
        resends: 0,
        erased: domain::retention::ErasedSet::default(),
        correlation_id: None,
    }
}

/// The trail of one retry cycle: started, attempt 1 answered with a retryable
/// failure, scheduled, the schedule fired, attempt 2 sent.
pub const TO_ATTEMPT_2: [&str; 5] = [
    "*>IN_PROGRESS@1",
    "IN_PROGRESS>SCHEDULING@1",
    "SCHEDULING>SCHEDULED@1",
    "SCHEDULED>SENDING@1",
    "SENDING>IN_PROGRESS@2",
];

/// A record of `id` in `status` at instant 0, attempt `current` of `max`, with the
/// fields that status implies (`next` and its instant in a retry cycle, the answer
/// deadline in IN_PROGRESS, the index and failed-listing keys): what tests of the
/// checks on final records build them from.
pub fn record(
    id: TransactionId,
    status: Status,
    current: u32,
    next: Option<u32>,
    max: u32,
) -> TransactionRecord {
    use domain::machine::{FailedKey, ReconcileKey};
    let t = Timestamp::from_millis(0);
    let attempt = |n: u32| Attempt::new(n).unwrap_or_else(|e| panic!("attempt {n}: {e}"));
    let max = MaxAttempts::new(max).unwrap_or_else(|e| panic!("max_attempts {max}: {e}"));
    let next_fire_at = next.map(|_| t);
    TransactionRecord {
        status,
        current_attempt: attempt(current),
        next_attempt: next.map(attempt),
        next_fire_at,
        answer_due_at: (status == Status::InProgress).then_some(t),
        reconcile: ReconcileKey::derive(status, &id, 4, t, next_fire_at),
        failed: FailedKey::derive(status, &id, 4),
        ..TransactionRecord::started(id, max, t)
    }
}
/// One entry as `FROM>TO@attempt`.
pub fn arrow(e: &AuditEntry) -> String {
    format!(
        "{}>{}@{}",
        e.from.map(|s| s.as_str()).unwrap_or("*"),
        e.to.as_str(),
        e.current_attempt.get()
    )
}

/// A trail, one arrow per entry, in order.
pub fn arrows(entries: &[AuditEntry]) -> Vec<String> {
    entries.iter().map(arrow).collect()
}
