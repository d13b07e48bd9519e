//! The intake message: what a service in any language puts on the intake queue to
//! start a transaction, and its parser. Schema version 1:
//!
//! ```json
//! {"schema_version": 1, "transaction_id": "TX-42", "payload": {"order": 42},
//!  "max_attempts": 6, "correlation_id": "req-7f3a"}
//! ```
//!
//! `payload` is kept as the exact text it arrived as; `deadline` and unknown fields
//! are refused; every error names the field and the value ([`MessageError`]). The
//! fields, defaults and why: `docs/intake.md`.

use crate::ids::{CorrelationId, MaxAttempts, TransactionId, MAX_ATTEMPTS_LIMIT};
use crate::message::{
    correlation_id, present, read_body, transaction_id, truncate, wrong_type, Given, MessageError,
    Payload,
};
use serde::de::IgnoredAny;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::Value;
use std::collections::BTreeMap;

/// The schema version this parser reads.
pub const SCHEMA_VERSION: u32 = 1;
pub use crate::ids::MAX_CORRELATION_ID_CHARS;
/// The fields of schema version 1.
pub const FIELDS: [&str; 6] = [
    "schema_version",
    "transaction_id",
    "payload",
    "max_attempts",
    "deadline",
    "correlation_id",
];

/// A request to start a transaction, read from the intake queue.
#[derive(Debug, Clone, PartialEq)]
pub struct StartMessage {
    pub transaction_id: TransactionId,
    /// Stored and published unchanged, byte for byte.
    pub payload: Payload,
    /// `None`: the deployment's default budget.
    pub max_attempts: Option<MaxAttempts>,
    /// The producer's own reference: stored on the record, carried in its requests.
    pub correlation_id: Option<CorrelationId>,
}

/// A start message body as it arrives (`null` counts as absent, except for the
/// payload).
#[derive(Deserialize)]
struct StartBody {
    schema_version: Option<Given<u32>>,
    transaction_id: Option<Given<String>>,
    #[serde(default, deserialize_with = "present")]
    payload: Option<Box<RawValue>>,
    max_attempts: Option<Given<u32>>,
    deadline: Option<Value>,
    correlation_id: Option<Given<String>>,
}

/// The body a producer sends (schema version 1).
#[derive(Serialize)]
struct Outgoing<'a> {
    schema_version: u32,
    transaction_id: &'a TransactionId,
    payload: &'a Payload,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_attempts: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    correlation_id: Option<&'a str>,
}

impl StartMessage {
    /// Parses an intake body; the error names the first field at fault and its value.
    pub fn parse(body: &str) -> Result<Self, MessageError> {
        let b: StartBody = read_body(body)?;
        unknown_field(body)?;
        schema_version(b.schema_version)?;
        let transaction_id = transaction_id(b.transaction_id)?;
        let payload = b
            .payload
            .ok_or(MessageError::MissingField { field: "payload" })?;
        let payload = Payload::from_json(payload.get())?;
        let max_attempts = max_attempts(b.max_attempts)?;
        if let Some(deadline) = b.deadline {
            return Err(MessageError::InvalidValue {
                field: "deadline",
                value: truncate(&deadline.to_string()),
                reason: "not supported yet: a transaction expires the deployment's \
                         TransactionDeadlineSeconds after its start; leave the field out"
                    .into(),
            });
        }
        Ok(Self {
            transaction_id,
            payload,
            max_attempts,
            correlation_id: correlation_id(b.correlation_id)?,
        })
    }

    /// The body of this message, as a producer sends it.
    pub fn to_json(&self) -> String {
        serde_json::to_string(&Outgoing {
            schema_version: SCHEMA_VERSION,
            transaction_id: &self.transaction_id,
            payload: &self.payload,
            max_attempts: self.max_attempts.map(MaxAttempts::get),
            correlation_id: self.correlation_id.as_ref().map(CorrelationId::as_str),
        })
        .unwrap_or_default()
    }
}

/// The first field of the body that schema version 1 does not have.
fn unknown_field(body: &str) -> Result<(), MessageError> {
    let keys: BTreeMap<String, IgnoredAny> =
        serde_json::from_str(body).map_err(|e| MessageError::InvalidJson {
            detail: e.to_string(),
        })?;
    match keys.keys().find(|k| !FIELDS.contains(&k.as_str())) {
        None => Ok(()),
        Some(k) => Err(MessageError::InvalidValue {
            field: "body",
            value: truncate(k),
            reason: format!(
                "unknown field; schema_version {SCHEMA_VERSION} has {}",
                FIELDS.join(", ")
            ),
        }),
    }
}

fn schema_version(v: Option<Given<u32>>) -> Result<(), MessageError> {
    const FIELD: &str = "schema_version";
    let v = v.ok_or(MessageError::MissingField { field: FIELD })?;
    let reason = format!("this intake reads schema_version {SCHEMA_VERSION}");
    number(FIELD, v, "the number 1", reason, |n| {
        (n == SCHEMA_VERSION).then_some(())
    })
}

fn max_attempts(v: Option<Given<u32>>) -> Result<Option<MaxAttempts>, MessageError> {
    v.map(|v| {
        let reason = format!("must be a whole number from 1 to {MAX_ATTEMPTS_LIMIT}");
        number("max_attempts", v, "a whole number", reason, |n| {
            MaxAttempts::new(n).ok()
        })
    })
    .transpose()
}

/// A number field `check` accepts; any other number is refused for `reason`, any
/// other JSON type as not `expected`.
fn number<T>(
    field: &'static str,
    v: Given<u32>,
    expected: &'static str,
    reason: String,
    check: impl FnOnce(u32) -> Option<T>,
) -> Result<T, MessageError> {
    let invalid = |value: String| MessageError::InvalidValue {
        field,
        value,
        reason,
    };
    match v {
        Given::Expected(n) => check(n).ok_or_else(|| invalid(n.to_string())),
        Given::Other(Value::Number(n)) => Err(invalid(n.to_string())),
        Given::Other(other) => Err(wrong_type(field, expected, &other)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OK: &str = r#"{"schema_version":1,"transaction_id":"TX-1","payload":{"amount": 12.50}}"#;

    #[test]
    fn parses_the_documented_examples() {
        let m = StartMessage::parse(OK).unwrap();
        assert_eq!(m.transaction_id.as_str(), "TX-1");
        assert_eq!(
            m.payload.as_json(),
            r#"{"amount": 12.50}"#,
            "the exact text"
        );
        assert_eq!(
            (
                m.max_attempts,
                m.correlation_id.as_ref().map(|c| c.as_str())
            ),
            (None, None)
        );
        let full = StartMessage::parse(
            r#"{"schema_version":1,"transaction_id":"TX-2","payload":"plain text","max_attempts":6,"correlation_id":"req-7f3a","deadline":null}"#,
        )
        .unwrap();
        assert_eq!(full.payload.as_json(), r#""plain text""#);
        assert_eq!(full.max_attempts.map(MaxAttempts::get), Some(6));
        assert_eq!(
            full.correlation_id.as_ref().map(|c| c.as_str()),
            Some("req-7f3a")
        );
        // What a producer sends parses back to the same message.
        assert_eq!(StartMessage::parse(&full.to_json()).unwrap(), full);
        assert_eq!(StartMessage::parse(&m.to_json()).unwrap(), m);
        assert!(m.to_json().starts_with(r#"{"schema_version":1,"#));
    }

    /// One row per bad field: the error names the field and shows the value.
    #[test]
    fn each_bad_field_is_named_with_its_value() {
        let body = |extra: &str| {
            format!(r#"{{"schema_version":1,"transaction_id":"TX-1","payload":{{}}{extra}}}"#)
        };
        let cases: Vec<(String, &str, &str)> = vec![
            (
                r#"{"transaction_id":"TX-1","payload":{}}"#.into(),
                "schema_version",
                "field `schema_version` is missing",
            ),
            (
                r#"{"schema_version":2,"transaction_id":"TX-1","payload":{}}"#.into(),
                "schema_version",
                "field `schema_version` has invalid value `2`: this intake reads schema_version 1",
            ),
            (
                r#"{"schema_version":"1","transaction_id":"TX-1","payload":{}}"#.into(),
                "schema_version",
                "field `schema_version` must be the number 1, got a string `\"1\"`",
            ),
            (
                r#"{"schema_version":1,"payload":{}}"#.into(),
                "transaction_id",
                "field `transaction_id` is missing",
            ),
            (
                r#"{"schema_version":1,"transaction_id":"","payload":{}}"#.into(),
                "transaction_id",
                "field `transaction_id` has invalid value ``: must not be empty",
            ),
            (
                r#"{"schema_version":1,"transaction_id":42,"payload":{}}"#.into(),
                "transaction_id",
                "field `transaction_id` must be a string, got a number `42`",
            ),
            (
                r#"{"schema_version":1,"transaction_id":"TX-1"}"#.into(),
                "payload",
                "field `payload` is missing",
            ),
            (
                body(r#","max_attempts":0"#),
                "max_attempts",
                "field `max_attempts` has invalid value `0`: must be a whole number from 1 to 1000",
            ),
            (
                body(r#","max_attempts":1001"#),
                "max_attempts",
                "field `max_attempts` has invalid value `1001`",
            ),
            (
                body(r#","max_attempts":2.5"#),
                "max_attempts",
                "field `max_attempts` has invalid value `2.5`",
            ),
            (
                body(r#","max_attempts":"6""#),
                "max_attempts",
                "field `max_attempts` must be a whole number, got a string `\"6\"`",
            ),
            (
                body(r#","deadline":"2030-01-01T00:00:00Z""#),
                "deadline",
                "field `deadline` has invalid value `\"2030-01-01T00:00:00Z\"`: not supported yet",
            ),
            (
                body(r#","correlation_id":"""#),
                "correlation_id",
                "field `correlation_id` has invalid value ``: must not be empty",
            ),
            (
                body(r#","correlation_id":7"#),
                "correlation_id",
                "field `correlation_id` must be a string, got a number `7`",
            ),
            (
                body(r#","correlation_id":"a\u0007b""#),
                "correlation_id",
                "control character U+0007",
            ),
            (
                body(&format!(r#","correlation_id":"{}""#, "c".repeat(129))),
                "correlation_id",
                "129 characters; at most 128",
            ),
            (
                body(r#","max_attempt":6"#),
                "body",
                "field `body` has invalid value `max_attempt`: unknown field",
            ),
        ];
        for (body, field, expected) in &cases {
            let e = StartMessage::parse(body).unwrap_err();
            assert_eq!(e.field(), Some(*field), "{body}: {e}");
            let shown = e.to_string();
            assert!(
                shown.contains(expected),
                "{body}: got `{shown}`, wanted `{expected}`"
            );
        }
    }

    #[test]
    fn a_body_that_is_no_object_or_repeats_a_field_is_refused() {
        for (body, expected) in [
            ("not json", "not valid JSON"),
            ("[1]", "must be a JSON object, got an array"),
            (
                r#"{"schema_version":1,"transaction_id":"TX-1","transaction_id":"TX-2","payload":{}}"#,
                "duplicate field `transaction_id`",
            ),
        ] {
            let e = StartMessage::parse(body).unwrap_err().to_string();
            assert!(e.contains(expected), "{body}: {e}");
        }
        let huge = format!(
            r#"{{"schema_version":1,"transaction_id":"TX-1","payload":"{}"}}"#,
            "x".repeat(crate::message::MAX_PAYLOAD_BYTES)
        );
        assert!(matches!(
            StartMessage::parse(&huge),
            Err(MessageError::TooLarge {
                what: "payload",
                ..
            })
        ));
    }
}
