//! Audit trails written as `FROM>TO@attempt` strings (`*` for the creation), the form
//! tests compare whole trails in.

use domain::audit::AuditEntry;
use domain::machine::Actor;
use domain::{Attempt, Status, Timestamp, TransactionId};

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
