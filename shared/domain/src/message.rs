//! The three message contracts (request, response, retry event: JSON bodies) and their
//! parsers; the fields, `round`, the ERROR answer with `retry_after_seconds` and the
//! Spanish aliases are in `docs/design.md#the-transaction-item` and
//! `docs/design.md#glossary`.
//!
//! Each message has one parse function returning a [`MessageError`] that names the
//! field and the value at fault: serde reads the body into a struct whose fields keep
//! any JSON value (`Given`), then a check per field makes the message's type (serde's
//! own messages name neither). Unknown fields are ignored (forward compatibility); a
//! field given twice, or under both its names, is refused. `round` is optional in
//! answers: an answer without it is taken for the send in flight.

use crate::ids::{Attempt, CorrelationId, IdError, IdempotencyKey, TransactionId};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::value::RawValue;
use serde_json::Value;
use std::fmt;
use strum::{IntoStaticStr, VariantArray};
use thiserror::Error;

/// Largest message body accepted, in bytes (SQS's limit is 256 KiB).
pub const MAX_BODY_BYTES: usize = 256 * 1024;
/// Largest request payload accepted, in bytes, leaving room for the envelope.
pub const MAX_PAYLOAD_BYTES: usize = 240 * 1024;
/// Longest `reason` accepted, in characters.
pub const MAX_REASON_CHARS: usize = 256;
/// Largest `retry_after_seconds` accepted: one day.
pub const MAX_RETRY_AFTER_SECONDS: u32 = 86_400;

/// What the external service answered for an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
#[derive(IntoStaticStr, VariantArray)]
#[strum(serialize_all = "SCREAMING_SNAKE_CASE")]
pub enum Outcome {
    #[serde(alias = "EXITOSO")]
    Success,
    #[serde(alias = "CANCELADO")]
    Cancelled,
    /// The attempt failed for a technical reason: the request was not processed and
    /// is sent again, with the same key, without consuming an attempt.
    #[serde(alias = "ERROR_TECNICO")]
    Error,
    /// The service refuses the request for good (an operator case: the key reused
    /// with another payload, a payload it will never accept): the transaction ends
    /// FAILED at once, never retried.
    #[serde(alias = "RECHAZADO")]
    Rejected,
}

impl Outcome {
    /// Every variant, in declaration order.
    pub const ALL: &'static [Outcome] = <Self as VariantArray>::VARIANTS;

    /// The outcome a name or an alias stands for.
    pub fn parse(raw: &str) -> Option<Self> {
        by_name(raw)
    }

    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// With an ERROR: whether the service says the call did not run. Outbox mode sends a
/// request again only after `NOT_RUN`; any other ERROR may have been executed
/// (a timeout) and ends the transaction FAILED, `AMBIGUOUS`, for an operator. Direct
/// mode, whose service deduplicates by the key, ignores it.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
#[derive(IntoStaticStr)]
#[strum(serialize_all = "SCREAMING_SNAKE_CASE")]
pub enum Execution {
    /// The service did not execute the request (refused before running it).
    #[serde(alias = "NO_EJECUTADA")]
    NotRun,
    /// The service cannot say (a timeout, a lost connection): it may have run. What
    /// an ERROR without the field means.
    #[default]
    #[serde(alias = "DESCONOCIDA")]
    Unknown,
}

impl Execution {
    /// The value a name or an alias stands for.
    pub fn parse(raw: &str) -> Option<Self> {
        by_name(raw)
    }

    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// Who put a retry event on the retry queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
#[derive(IntoStaticStr)]
#[strum(serialize_all = "SCREAMING_SNAKE_CASE")]
pub enum Origin {
    #[serde(alias = "PLANIFICADOR_REINTENTO")]
    RetryScheduler,
    #[serde(alias = "RECONCILIADOR")]
    Reconciler,
    #[serde(alias = "OPERADOR")]
    Operator,
}

impl Origin {
    /// The origin a name or an alias stands for.
    pub fn parse(raw: &str) -> Option<Self> {
        by_name(raw)
    }

    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// A request payload: any JSON value, kept as the exact text it arrived as, so the
/// bytes published for every attempt are the bytes the transaction was started with.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Payload(Box<RawValue>);

impl Payload {
    /// Validates JSON text as a payload (well-formed, at most [`MAX_PAYLOAD_BYTES`]).
    pub fn from_json(text: &str) -> Result<Self, MessageError> {
        if text.len() > MAX_PAYLOAD_BYTES {
            return Err(MessageError::TooLarge {
                what: "payload",
                bytes: text.len(),
                max: MAX_PAYLOAD_BYTES,
            });
        }
        RawValue::from_string(text.to_owned())
            .map(Self)
            .map_err(|e| MessageError::InvalidJson {
                detail: e.to_string(),
            })
    }

    pub fn as_json(&self) -> &str {
        self.0.get()
    }

    pub fn len(&self) -> usize {
        self.0.get().len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.get().is_empty()
    }
}

impl PartialEq for Payload {
    fn eq(&self, other: &Self) -> bool {
        self.as_json() == other.as_json()
    }
}

/// The request for attempt `attempt`, published on the request queue.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Request {
    pub transaction_id: TransactionId,
    pub attempt: Attempt,
    pub idempotency_key: IdempotencyKey,
    /// Which send of the key this is (the transaction's retry rounds when it left);
    /// the service echoes it in its answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub round: Option<u32>,
    /// The transaction's correlation id, when it was started with one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub correlation_id: Option<CorrelationId>,
    pub payload: Payload,
}

impl Request {
    pub fn new(transaction_id: TransactionId, attempt: Attempt, payload: Payload) -> Self {
        let idempotency_key = IdempotencyKey::new(&transaction_id, attempt);
        Self {
            transaction_id,
            attempt,
            idempotency_key,
            round: None,
            correlation_id: None,
            payload,
        }
    }

    /// The same request, carrying the transaction's correlation id.
    pub fn with_correlation_id(mut self, correlation_id: Option<CorrelationId>) -> Self {
        self.correlation_id = correlation_id;
        self
    }

    /// The same request, sent as round `round`.
    pub fn with_round(mut self, round: Option<u32>) -> Self {
        self.round = round;
        self
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Parses a request body (used by the simulated external service and tests).
    pub fn parse(body: &str) -> Result<Self, MessageError> {
        let b: RequestBody = read_body(body)?;
        let transaction_id = transaction_id(b.transaction_id)?;
        let attempt = attempt(b.attempt)?;
        let key = string("idempotency_key", b.idempotency_key)?;
        let expected = IdempotencyKey::new(&transaction_id, attempt);
        if key != expected.as_str() {
            return Err(MessageError::InvalidValue {
                field: "idempotency_key",
                value: truncate(&key),
                reason: format!("must be `{expected}`"),
            });
        }
        // The payload's exact text (not re-serialised: `12.50` stays `12.50`).
        let payload = b
            .payload
            .ok_or(MessageError::MissingField { field: "payload" })?;
        Ok(Self {
            transaction_id,
            attempt,
            idempotency_key: expected,
            payload: Payload::from_json(payload.get())?,
            round: round(b.round)?,
            correlation_id: correlation_id(b.correlation_id)?,
        })
    }
}

/// The external service's answer for one attempt, read from the response queue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Response {
    pub transaction_id: TransactionId,
    pub attempt: Attempt,
    pub outcome: Outcome,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// With ERROR: the least wait, in seconds, before the request is sent again (the
    /// service's Retry-After; 0 to [`MAX_RETRY_AFTER_SECONDS`]). Ignored with the
    /// other outcomes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_after_seconds: Option<u32>,
    /// The `round` of the request answered, echoed by the service (`None`: not
    /// echoed, taken for the send in flight).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub round: Option<u32>,
    /// With ERROR: whether the call ran, as the service says (`None`: not said,
    /// taken as [`Execution::Unknown`]; see [`Response::execution`]). Ignored with the
    /// other outcomes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub execution: Option<Execution>,
}

impl Response {
    /// What the answer says of the call's execution: [`Execution::Unknown`] unless
    /// the service said otherwise.
    pub fn execution(&self) -> Execution {
        self.execution.unwrap_or_default()
    }

    pub fn parse(body: &str) -> Result<Self, MessageError> {
        let b: ResponseBody = read_body(body)?;
        let transaction_id = transaction_id(b.transaction_id)?;
        let attempt = attempt(b.attempt)?;
        let raw = string("outcome", b.outcome)?;
        let outcome = Outcome::parse(&raw).ok_or_else(|| MessageError::InvalidValue {
            field: "outcome",
            value: truncate(&raw),
            reason: "expected SUCCESS, CANCELLED, ERROR or REJECTED (or EXITOSO / CANCELADO / ERROR_TECNICO / RECHAZADO)"
                .into(),
        })?;
        let reason = match b
            .reason
            .map(|r| r.expect("reason", "a string"))
            .transpose()?
        {
            Some(s) if s.chars().count() > MAX_REASON_CHARS => {
                return Err(MessageError::InvalidValue {
                    field: "reason",
                    value: truncate(&s),
                    reason: format!(
                        "{} characters; at most {MAX_REASON_CHARS}",
                        s.chars().count()
                    ),
                })
            }
            reason => reason,
        };
        Ok(Self {
            transaction_id,
            attempt,
            outcome,
            reason,
            retry_after_seconds: whole(
                "retry_after_seconds",
                b.retry_after_seconds,
                MAX_RETRY_AFTER_SECONDS,
                "a whole number of seconds",
            )?,
            round: round(b.round)?,
            execution: b
                .execution
                .map(|e| e.expect("execution", "a string"))
                .transpose()?
                .map(|raw| {
                    Execution::parse(&raw).ok_or_else(|| MessageError::InvalidValue {
                        field: "execution",
                        value: truncate(&raw),
                        reason: "expected NOT_RUN or UNKNOWN (or NO_EJECUTADA / DESCONOCIDA)"
                            .into(),
                    })
                })
                .transpose()?,
        })
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// A retry event, delivered on the retry queue by the scheduler, the reconciler or an
/// operator.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct RetryEvent {
    pub transaction_id: TransactionId,
    pub origin: Origin,
    pub attempt: Attempt,
    /// The retry cycle it was made for: the record's `resends` when the cycle opened
    /// (`None`: any cycle of `attempt`). An event of an earlier cycle is stale.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub round: Option<u32>,
}

impl RetryEvent {
    pub fn parse(body: &str) -> Result<Self, MessageError> {
        let b: RetryEventBody = read_body(body)?;
        let transaction_id = transaction_id(b.transaction_id)?;
        let raw = string("origin", b.origin)?;
        let origin = Origin::parse(&raw).ok_or_else(|| MessageError::InvalidValue {
            field: "origin",
            value: truncate(&raw),
            reason: "expected RETRY_SCHEDULER, RECONCILER or OPERATOR".into(),
        })?;
        Ok(Self {
            transaction_id,
            origin,
            attempt: attempt(b.attempt)?,
            round: round(b.round)?,
        })
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// Why a message body was rejected. Every variant names the field and the value, so a
/// log line is enough to fix the producer.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum MessageError {
    #[error("body is not valid JSON: {detail}")]
    InvalidJson { detail: String },
    #[error("body must be a JSON object, got {found}")]
    NotAnObject { found: &'static str },
    #[error("{what} has {bytes} bytes; at most {max} are accepted")]
    TooLarge {
        what: &'static str,
        bytes: usize,
        max: usize,
    },
    #[error("field `{field}` is missing")]
    MissingField { field: &'static str },
    #[error("field `{field}` must be {expected}, got {found} `{value}`")]
    WrongType {
        field: &'static str,
        expected: &'static str,
        found: &'static str,
        value: String,
    },
    #[error("field `{field}` has invalid value `{value}`: {reason}")]
    InvalidValue {
        field: &'static str,
        value: String,
        reason: String,
    },
}

impl MessageError {
    /// The field at fault, when there is one (for metrics and structured logs).
    pub fn field(&self) -> Option<&'static str> {
        match self {
            Self::MissingField { field }
            | Self::WrongType { field, .. }
            | Self::InvalidValue { field, .. } => Some(field),
            _ => None,
        }
    }
}

/// An optional `correlation_id` field ([`CorrelationId`]'s rules).
pub(crate) fn correlation_id(
    v: Option<Given<String>>,
) -> Result<Option<CorrelationId>, MessageError> {
    const FIELD: &str = "correlation_id";
    let Some(v) = v else { return Ok(None) };
    let s = v.expect(FIELD, "a string")?;
    CorrelationId::new(&s)
        .map(Some)
        .map_err(|reason| MessageError::InvalidValue {
            field: FIELD,
            value: truncate(&s),
            reason,
        })
}

/// A field's value as given: of the type the field expects, or any other JSON value
/// (kept, so that the error names it).
#[derive(Deserialize)]
#[serde(untagged)]
pub(crate) enum Given<T> {
    Expected(T),
    Other(Value),
}

impl<T> Given<T> {
    /// The value, or the error that names the field, the type expected and the value.
    pub(crate) fn expect(
        self,
        field: &'static str,
        expected: &'static str,
    ) -> Result<T, MessageError> {
        match self {
            Self::Expected(v) => Ok(v),
            Self::Other(other) => Err(wrong_type(field, expected, &other)),
        }
    }
}

/// A request body as it arrives (`null` counts as absent, except for the payload).
#[derive(Deserialize)]
struct RequestBody {
    #[serde(alias = "transaccion_id")]
    transaction_id: Option<Given<String>>,
    attempt: Option<Given<u32>>,
    idempotency_key: Option<Given<String>>,
    #[serde(default, deserialize_with = "present")]
    payload: Option<Box<RawValue>>,
    #[serde(alias = "ronda")]
    round: Option<Given<u32>>,
    correlation_id: Option<Given<String>>,
}

/// A response body as it arrives.
#[derive(Deserialize)]
struct ResponseBody {
    #[serde(alias = "transaccion_id")]
    transaction_id: Option<Given<String>>,
    #[serde(alias = "intento")]
    attempt: Option<Given<u32>>,
    #[serde(alias = "resultado")]
    outcome: Option<Given<String>>,
    #[serde(alias = "motivo")]
    reason: Option<Given<String>>,
    retry_after_seconds: Option<Given<u32>>,
    #[serde(alias = "ronda")]
    round: Option<Given<u32>>,
    #[serde(alias = "ejecucion")]
    execution: Option<Given<String>>,
}

/// A retry event body as it arrives.
#[derive(Deserialize)]
struct RetryEventBody {
    #[serde(alias = "transaccion_id")]
    transaction_id: Option<Given<String>>,
    #[serde(alias = "origen")]
    origin: Option<Given<String>>,
    #[serde(alias = "intento")]
    attempt: Option<Given<u32>>,
    #[serde(alias = "ronda")]
    round: Option<Given<u32>>,
}

/// A field present with any value, `null` included.
pub(crate) fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Box<RawValue>>, D::Error> {
    Box::<RawValue>::deserialize(d).map(Some)
}

/// The enum variant a name or an alias stands for (the enum's serde names).
fn by_name<'a, T: Deserialize<'a>>(raw: &'a str) -> Option<T> {
    use serde::de::value::{Error, StrDeserializer};
    T::deserialize(StrDeserializer::<Error>::new(raw)).ok()
}

/// Reads a body no larger than [`MAX_BODY_BYTES`] that is a JSON object.
pub(crate) fn read_body<'a, T: Deserialize<'a>>(body: &'a str) -> Result<T, MessageError> {
    if body.len() > MAX_BODY_BYTES {
        return Err(MessageError::TooLarge {
            what: "body",
            bytes: body.len(),
            max: MAX_BODY_BYTES,
        });
    }
    let invalid = |e: serde_json::Error| MessageError::InvalidJson {
        detail: e.to_string(),
    };
    // A struct would also be read from an array: anything but an object is refused
    // first, naming what it is.
    if !body.trim_start().starts_with('{') {
        let other: Value = serde_json::from_str(body).map_err(invalid)?;
        return Err(MessageError::NotAnObject {
            found: type_name(&other),
        });
    }
    serde_json::from_str(body).map_err(invalid)
}

fn required<T>(field: &'static str, v: Option<Given<T>>) -> Result<Given<T>, MessageError> {
    v.ok_or(MessageError::MissingField { field })
}

fn string(field: &'static str, v: Option<Given<String>>) -> Result<String, MessageError> {
    required(field, v)?.expect(field, "a string")
}

pub(crate) fn transaction_id(v: Option<Given<String>>) -> Result<TransactionId, MessageError> {
    const FIELD: &str = "transaction_id";
    let raw = string(FIELD, v)?;
    TransactionId::parse(&raw).map_err(|e| MessageError::InvalidValue {
        field: FIELD,
        value: truncate(&raw),
        reason: e.to_string(),
    })
}

fn attempt(v: Option<Given<u32>>) -> Result<Attempt, MessageError> {
    const FIELD: &str = "attempt";
    let invalid = |value: String, reason: String| MessageError::InvalidValue {
        field: FIELD,
        value,
        reason,
    };
    match required(FIELD, v)? {
        Given::Expected(n) => {
            Attempt::new(n).map_err(|e: IdError| invalid(n.to_string(), e.to_string()))
        }
        Given::Other(Value::Number(n)) => Err(invalid(
            n.to_string(),
            if n.as_u64().is_some() {
                "is too large"
            } else {
                "must be a whole number >= 1"
            }
            .into(),
        )),
        Given::Other(other) => Err(wrong_type(FIELD, "a whole number >= 1", &other)),
    }
}

/// An optional whole number from 0 to `max`; `expected` says what it must be.
fn whole(
    field: &'static str,
    v: Option<Given<u32>>,
    max: u32,
    expected: &'static str,
) -> Result<Option<u32>, MessageError> {
    let out_of_range = |value: String| MessageError::InvalidValue {
        field,
        value,
        reason: format!("must be {expected} from 0 to {max}"),
    };
    match v {
        None => Ok(None),
        Some(Given::Expected(n)) if n <= max => Ok(Some(n)),
        Some(Given::Expected(n)) => Err(out_of_range(n.to_string())),
        Some(Given::Other(Value::Number(n))) => Err(out_of_range(n.to_string())),
        Some(Given::Other(other)) => Err(wrong_type(field, expected, &other)),
    }
}

/// `round` (alias `ronda`): a whole number, absent or null when not given.
fn round(v: Option<Given<u32>>) -> Result<Option<u32>, MessageError> {
    whole("round", v, u32::MAX, "a whole number")
}

pub(crate) fn wrong_type(
    field: &'static str,
    expected: &'static str,
    found: &Value,
) -> MessageError {
    MessageError::WrongType {
        field,
        expected,
        found: type_name(found),
        value: truncate(&found.to_string()),
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Values echoed in errors are cut to 80 characters so a hostile body cannot flood logs.
pub(crate) fn truncate(s: &str) -> String {
    if s.chars().count() <= 80 {
        s.to_owned()
    } else {
        let mut cut: String = s.chars().take(80).collect();
        cut.push('…');
        cut
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_design_examples() {
        let r = Response::parse(
            r#"{"transaction_id":"TX-100200","attempt":2,"outcome":"CANCELLED","reason":"NOT_AVAILABLE"}"#,
        )
        .unwrap();
        assert_eq!(r.transaction_id.as_str(), "TX-100200");
        assert_eq!(r.attempt.get(), 2);
        assert_eq!(r.outcome, Outcome::Cancelled);
        assert_eq!(r.reason.as_deref(), Some("NOT_AVAILABLE"));

        let e = RetryEvent::parse(
            r#"{"transaction_id":"TX-100200","origin":"RETRY_SCHEDULER","attempt":2}"#,
        )
        .unwrap();
        assert_eq!(e.origin, Origin::RetryScheduler);
        assert_eq!(
            e.to_json(),
            r#"{"transaction_id":"TX-100200","origin":"RETRY_SCHEDULER","attempt":2}"#
        );
    }

    #[test]
    fn accepts_the_articles_spanish_names() {
        let r = Response::parse(r#"{"transaccion_id":"TX-1","intento":1,"resultado":"EXITOSO"}"#)
            .unwrap();
        assert_eq!(r.outcome, Outcome::Success);
        let e = RetryEvent::parse(
            r#"{"transaccion_id":"TX-100200","origen":"PLANIFICADOR_REINTENTO","intento":2}"#,
        )
        .unwrap();
        assert_eq!(e.origin, Origin::RetryScheduler);
        assert_eq!(e.attempt.get(), 2);
    }

    /// A technical failure: ERROR or its Spanish alias, a reason, the service's wait
    /// from 0 to a day; round-trips through its JSON form.
    #[test]
    fn parses_technical_errors() {
        let r = Response::parse(
            r#"{"transaction_id":"TX-1","attempt":3,"outcome":"ERROR","reason":"HTTP_503","retry_after_seconds":120}"#,
        )
        .unwrap();
        assert_eq!(r.outcome, Outcome::Error);
        assert_eq!(r.reason.as_deref(), Some("HTTP_503"));
        assert_eq!(r.retry_after_seconds, Some(120));
        assert_eq!(Response::parse(&r.to_json()).unwrap(), r);
        let es = Response::parse(
            r#"{"transaccion_id":"TX-1","intento":1,"resultado":"ERROR_TECNICO","motivo":"TIMEOUT"}"#,
        )
        .unwrap();
        assert_eq!(es.outcome, Outcome::Error);
        assert_eq!(es.retry_after_seconds, None);
        for ok in [0, MAX_RETRY_AFTER_SECONDS] {
            let body = format!(
                r#"{{"transaction_id":"TX-1","attempt":1,"outcome":"ERROR","retry_after_seconds":{ok}}}"#
            );
            assert_eq!(
                Response::parse(&body).unwrap().retry_after_seconds,
                Some(ok)
            );
        }
        assert_eq!(Outcome::parse("error"), None, "outcomes are upper case");
    }

    /// `round` (or `ronda`) is echoed from the request; optional, a whole number,
    /// and a bad one is named with its value.
    #[test]
    fn a_round_is_carried_by_requests_and_echoed_by_answers() {
        let payload = Payload::from_json("{}").unwrap();
        let id = TransactionId::parse("TX-9").unwrap();
        let req = Request::new(id, Attempt::new(2).unwrap(), payload).with_round(Some(3));
        assert!(req.to_json().contains(r#""round":3"#), "{}", req.to_json());
        assert_eq!(Request::parse(&req.to_json()).unwrap().round, Some(3));
        let bare = Request::new(req.transaction_id.clone(), req.attempt, req.payload.clone());
        assert!(!bare.to_json().contains("round"), "{}", bare.to_json());
        let r =
            Response::parse(r#"{"transaction_id":"TX-1","attempt":2,"outcome":"ERROR","round":4}"#)
                .unwrap();
        assert_eq!(r.round, Some(4));
        assert_eq!(Response::parse(&r.to_json()).unwrap(), r);
        let es = Response::parse(
            r#"{"transaccion_id":"TX-1","intento":2,"resultado":"ERROR_TECNICO","ronda":1}"#,
        )
        .unwrap();
        assert_eq!(es.round, Some(1));
        let none =
            Response::parse(r#"{"transaction_id":"TX-1","attempt":2,"outcome":"ERROR"}"#).unwrap();
        assert_eq!(none.round, None);
        for (bad, field_value) in [("-1", "-1"), ("1.5", "1.5"), ("4294967296", "4294967296")] {
            let body = format!(
                r#"{{"transaction_id":"TX-1","attempt":2,"outcome":"ERROR","round":{bad}}}"#
            );
            let e = Response::parse(&body).unwrap_err();
            assert_eq!(e.field(), Some("round"), "{e}");
            assert!(e.to_string().contains(field_value), "{e}");
        }
        let e = Response::parse(
            r#"{"transaction_id":"TX-1","attempt":2,"outcome":"ERROR","round":"2"}"#,
        )
        .unwrap_err();
        assert_eq!(e.field(), Some("round"), "{e}");
    }

    #[test]
    fn request_round_trips_with_exact_payload_bytes() {
        let payload = Payload::from_json(r#"{"amount": 12.50, "items":[1,2]}"#).unwrap();
        let id = TransactionId::parse("TX-9").unwrap();
        let req = Request::new(id, Attempt::new(3).unwrap(), payload.clone());
        let body = req.to_json();
        assert!(body.contains(r#""idempotency_key":"TX-9#3""#), "{body}");
        assert!(
            body.contains(r#"{"amount": 12.50, "items":[1,2]}"#),
            "{body}"
        );
        let back = Request::parse(&body).unwrap();
        assert_eq!(back.attempt.get(), 3);
        assert_eq!(back.idempotency_key.as_str(), "TX-9#3");
    }

    /// One row per malformed input: the error must name the field and say why.
    #[test]
    fn response_bad_inputs_name_field_and_value() {
        let cases: &[(&str, &str)] = &[
            ("not json", "not valid JSON"),
            ("[1]", "must be a JSON object, got an array"),
            (
                r#"{"attempt":1,"outcome":"SUCCESS"}"#,
                "field `transaction_id` is missing",
            ),
            (
                r#"{"transaction_id":7,"attempt":1,"outcome":"SUCCESS"}"#,
                "field `transaction_id` must be a string, got a number `7`",
            ),
            (
                r#"{"transaction_id":"","attempt":1,"outcome":"SUCCESS"}"#,
                "field `transaction_id` has invalid value ``: must not be empty",
            ),
            (
                r#"{"transaction_id":"TX-1","attempt":0,"outcome":"SUCCESS"}"#,
                "field `attempt` has invalid value `0`: must be at least 1",
            ),
            (
                r#"{"transaction_id":"TX-1","attempt":"2","outcome":"SUCCESS"}"#,
                "field `attempt` must be a whole number >= 1, got a string `\"2\"`",
            ),
            (
                r#"{"transaction_id":"TX-1","attempt":1.5,"outcome":"SUCCESS"}"#,
                "field `attempt` has invalid value `1.5`",
            ),
            (
                r#"{"transaction_id":"TX-1","attempt":1}"#,
                "field `outcome` is missing",
            ),
            (
                r#"{"transaction_id":"TX-1","attempt":1,"outcome":"MAYBE"}"#,
                "field `outcome` has invalid value `MAYBE`: expected SUCCESS, CANCELLED, ERROR or REJECTED",
            ),
            (
                r#"{"transaction_id":"TX-1","attempt":1,"outcome":"SUCCESS","reason":5}"#,
                "field `reason` must be a string, got a number `5`",
            ),
            (
                r#"{"transaction_id":"TX-1","attempt":1,"outcome":"ERROR","retry_after_seconds":-1}"#,
                "field `retry_after_seconds` has invalid value `-1`: must be a whole number of seconds from 0 to 86400",
            ),
            (
                r#"{"transaction_id":"TX-1","attempt":1,"outcome":"ERROR","retry_after_seconds":86401}"#,
                "field `retry_after_seconds` has invalid value `86401`",
            ),
            (
                r#"{"transaction_id":"TX-1","attempt":1,"outcome":"ERROR","retry_after_seconds":1.5}"#,
                "field `retry_after_seconds` has invalid value `1.5`",
            ),
            (
                r#"{"transaction_id":"TX-1","attempt":1,"outcome":"ERROR","retry_after_seconds":"60"}"#,
                "field `retry_after_seconds` must be a whole number of seconds, got a string `\"60\"`",
            ),
        ];
        for (body, expected) in cases {
            let err = Response::parse(body).unwrap_err().to_string();
            assert!(
                err.contains(expected),
                "{body}: got `{err}`, wanted `{expected}`"
            );
        }
        let oversized = format!(
            r#"{{"transaction_id":"{}","attempt":1,"outcome":"SUCCESS"}}"#,
            "x".repeat(200)
        );
        let err = Response::parse(&oversized).unwrap_err();
        assert_eq!(err.field(), Some("transaction_id"));
        assert!(err.to_string().contains("at most 128"), "{err}");
    }

    #[test]
    fn retry_event_bad_inputs_name_field_and_value() {
        let cases: &[(&str, &str)] = &[
            ("{", "not valid JSON"),
            (
                r#"{"transaction_id":"TX-1","attempt":2}"#,
                "field `origin` is missing",
            ),
            (
                r#"{"transaction_id":"TX-1","origin":"CRON","attempt":2}"#,
                "field `origin` has invalid value `CRON`: expected RETRY_SCHEDULER, RECONCILER or OPERATOR",
            ),
            (
                r#"{"transaction_id":"TX-1","origin":"RECONCILER","attempt":0}"#,
                "field `attempt` has invalid value `0`",
            ),
            (
                r#"{"transaction_id":"TX-1","origin":"RECONCILER"}"#,
                "field `attempt` is missing",
            ),
            (
                r#"{"origin":"RECONCILER","attempt":2}"#,
                "field `transaction_id` is missing",
            ),
            (
                r#"{"transaction_id":"TX\u0001","origin":"RECONCILER","attempt":2}"#,
                "control character U+0001",
            ),
        ];
        for (body, expected) in cases {
            let err = RetryEvent::parse(body).unwrap_err().to_string();
            assert!(
                err.contains(expected),
                "{body}: got `{err}`, wanted `{expected}`"
            );
        }
    }

    #[test]
    fn request_bad_inputs_name_field_and_value() {
        let cases: &[(&str, &str)] = &[
            (
                r#"{"transaction_id":"TX-1","attempt":1,"payload":{}}"#,
                "field `idempotency_key` is missing",
            ),
            (
                r#"{"transaction_id":"TX-1","attempt":1,"idempotency_key":"TX-1#2","payload":{}}"#,
                "field `idempotency_key` has invalid value `TX-1#2`: must be `TX-1#1`",
            ),
            (
                r#"{"transaction_id":"TX-1","attempt":1,"idempotency_key":"TX-1#1"}"#,
                "field `payload` is missing",
            ),
        ];
        for (body, expected) in cases {
            let err = Request::parse(body).unwrap_err().to_string();
            assert!(
                err.contains(expected),
                "{body}: got `{err}`, wanted `{expected}`"
            );
        }
        let huge = format!("\"{}\"", "x".repeat(MAX_PAYLOAD_BYTES));
        assert!(matches!(
            Payload::from_json(&huge),
            Err(MessageError::TooLarge {
                what: "payload",
                ..
            })
        ));
    }

    /// A field given twice, or under its name and its alias, is refused naming it
    /// (which of the two to believe is not guessed); a payload of `null` is a payload.
    #[test]
    fn a_field_given_twice_is_refused_naming_it() {
        for body in [
            r#"{"transaction_id":"TX-1","attempt":1,"outcome":"SUCCESS","outcome":"CANCELLED"}"#,
            r#"{"transaction_id":"TX-1","attempt":1,"outcome":"SUCCESS","resultado":"CANCELADO"}"#,
        ] {
            let e = Response::parse(body).unwrap_err();
            assert!(
                matches!(&e, MessageError::InvalidJson { detail } if detail.contains("duplicate field `outcome`")),
                "{e}"
            );
        }
        let r = Request::parse(
            r#"{"transaction_id":"TX-1","attempt":1,"idempotency_key":"TX-1#1","payload":null}"#,
        )
        .unwrap();
        assert_eq!(r.payload.as_json(), "null");
    }
}
