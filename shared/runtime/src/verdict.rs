//! What became of one record ([`Verdict`]), and why a record can never succeed as it is
//! ([`Permanent`]): what the batch processor acts on, the drive returns and the metrics
//! are named after. See `docs/functions.md#sqs-batches-partial-batch-failures`.

use domain::decide::{Ack, DropReason, Rejection};
use domain::message::MessageError;
use domain::ports::PortError;

/// What became of one record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The work the message asked for is done: acknowledge.
    Done(Ack),
    /// Done, for a consumer outside the domain's vocabulary (the staging harness):
    /// the kebab-case name of what was done. Acknowledge.
    Handled(&'static str),
    /// Nothing to do (late, stale, duplicate): acknowledge.
    Dropped(DropReason),
    /// Try again later: report as a batch item failure.
    Retry { error: String },
    /// Can never succeed as it is: DLQ, then acknowledge.
    Permanent(Permanent),
}

impl Verdict {
    pub fn is_acknowledged(&self) -> bool {
        matches!(
            self,
            Verdict::Done { .. } | Verdict::Handled(_) | Verdict::Dropped { .. }
        )
    }

    /// The kebab-case name of the verdict (`scheduled`, `late-response`, `retry`,
    /// `malformed-body`).
    pub fn label(&self) -> &'static str {
        match self {
            Verdict::Done(a) => a.label(),
            Verdict::Handled(label) => label,
            Verdict::Dropped(d) => d.label(),
            Verdict::Retry { .. } => "retry",
            Verdict::Permanent(p) => p.reason.label(),
        }
    }
}

/// Why a record can never succeed as it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PermanentReason {
    /// The body is not a message of the queue's contract.
    MalformedBody,
    /// The domain refused the message (unknown transaction, …).
    Rejected(Rejection),
    /// A port call that can never succeed (bad input or configuration).
    PortError,
    /// A well-formed message asking for something this consumer cannot do (the
    /// staging harness given a script it cannot follow).
    Unprocessable,
}

impl PermanentReason {
    /// Kebab-case: `malformed-body`, `unknown-transaction`, `permanent-port-error`…
    pub fn label(&self) -> &'static str {
        match self {
            PermanentReason::MalformedBody => "malformed-body",
            PermanentReason::Rejected(r) => r.label(),
            PermanentReason::PortError => "permanent-port-error",
            PermanentReason::Unprocessable => "unprocessable",
        }
    }
}

/// A permanent error: what the log line and the metric say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Permanent {
    pub reason: PermanentReason,
    /// The field at fault, when there is one.
    pub field: Option<String>,
    /// The value at fault (cut short by the parser), when there is one.
    pub value: Option<String>,
    /// The full explanation.
    pub detail: String,
}

/// At most this many characters of a body are echoed in a log line.
const ECHO_CHARS: usize = 80;

fn echo(body: &str) -> String {
    let mut cut: String = body.chars().take(ECHO_CHARS).collect();
    if body.chars().count() > ECHO_CHARS {
        cut.push('…');
    }
    cut
}

impl Permanent {
    /// A body the domain parser rejected.
    pub fn malformed(err: &MessageError, body: &str) -> Self {
        let value = match err {
            MessageError::WrongType { value, .. } | MessageError::InvalidValue { value, .. } => {
                Some(value.clone())
            }
            MessageError::MissingField { .. } => None,
            MessageError::InvalidJson { .. }
            | MessageError::NotAnObject { .. }
            | MessageError::TooLarge { .. } => Some(echo(body)),
        };
        Self {
            reason: PermanentReason::MalformedBody,
            field: Some(err.field().unwrap_or("body").to_owned()),
            value,
            detail: err.to_string(),
        }
    }

    /// A domain rejection (unknown transaction, …).
    pub fn rejected(r: &Rejection) -> Self {
        let (field, value) = match r {
            Rejection::UnknownTransaction { transaction_id }
            | Rejection::PayloadMismatch { transaction_id }
            | Rejection::NotResolvable { transaction_id, .. }
            | Rejection::NotReplayable { transaction_id, .. }
            | Rejection::TooManyRedecisions { transaction_id } => {
                ("transaction_id", transaction_id.to_string())
            }
        };
        Self {
            reason: PermanentReason::Rejected(r.clone()),
            field: Some(field.to_owned()),
            value: Some(value),
            detail: r.to_string(),
        }
    }

    /// A port call that can never succeed (bad input or configuration).
    pub fn port(e: &PortError) -> Self {
        Self {
            reason: PermanentReason::PortError,
            field: None,
            value: None,
            detail: e.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use domain::Response;

    #[test]
    fn malformed_verdict_names_field_and_value() {
        let body = r#"{"transaction_id":"TX-1","attempt":"two","outcome":"SUCCESS"}"#;
        let err = Response::parse(body).unwrap_err();
        let p = Permanent::malformed(&err, body);
        assert_eq!(p.reason, PermanentReason::MalformedBody);
        assert_eq!(p.field.as_deref(), Some("attempt"));
        assert_eq!(p.value.as_deref(), Some("\"two\""));
        let p = Permanent::malformed(&Response::parse("nope").unwrap_err(), "nope");
        assert_eq!(p.field.as_deref(), Some("body"));
        assert_eq!(p.value.as_deref(), Some("nope"));
    }
}
