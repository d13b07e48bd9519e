//! Audit trails written as `FROM>TO@attempt` strings (`*` for the creation), the form
//! tests compare whole trails in.

use domain::audit::AuditEntry;

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
