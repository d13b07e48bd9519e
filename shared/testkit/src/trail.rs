//! Audit trails written as `FROM>TO@attempt` strings (`*` for the creation), the form
//! tests compare whole trails in.

use domain::audit::AuditEntry;

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
