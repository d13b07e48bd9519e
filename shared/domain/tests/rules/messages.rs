//! Bad-input tables for the three messages: every malformed case the contract names
//! (invalid JSON, missing or mistyped field, empty or oversized id, attempt 0, unknown
//! outcome, unknown origin), for each message type, asserting that the error names
//! the field and says why.

use domain::message::{MessageError, Payload, Request, Response, RetryEvent, MAX_BODY_BYTES};
use serde_json::{json, Value};

#[derive(Clone, Copy, Debug)]
enum Kind {
    Request,
    Response,
    Retry,
}

impl Kind {
    fn valid(self) -> Value {
        match self {
            Kind::Request => json!({
                "transaction_id": "TX-100200",
                "attempt": 2,
                "idempotency_key": "TX-100200#2",
                "payload": {"amount": 12.5}
            }),
            Kind::Response => json!({
                "transaction_id": "TX-100200",
                "attempt": 2,
                "outcome": "CANCELLED",
                "reason": "NOT_AVAILABLE"
            }),
            Kind::Retry => json!({
                "transaction_id": "TX-100200",
                "origin": "RETRY_SCHEDULER",
                "attempt": 2
            }),
        }
    }

    /// Required string fields (besides `transaction_id` and `attempt`).
    fn string_fields(self) -> &'static [&'static str] {
        match self {
            Kind::Request => &["idempotency_key"],
            Kind::Response => &["outcome"],
            Kind::Retry => &["origin"],
        }
    }

    fn parse(self, body: &str) -> Result<(), MessageError> {
        match self {
            Kind::Request => Request::parse(body).map(drop),
            Kind::Response => Response::parse(body).map(drop),
            Kind::Retry => RetryEvent::parse(body).map(drop),
        }
    }
}

const KINDS: [Kind; 3] = [Kind::Request, Kind::Response, Kind::Retry];

fn with(kind: Kind, field: &str, value: Value) -> String {
    let mut v = kind.valid();
    v[field] = value;
    v.to_string()
}

fn without(kind: Kind, field: &str) -> String {
    let mut v = kind.valid();
    v.as_object_mut().unwrap().remove(field);
    v.to_string()
}

/// (body, field the error must name (None: the body as a whole), text it must contain)
type Case = (String, Option<&'static str>, String);

fn cases(kind: Kind) -> Vec<Case> {
    let mut out: Vec<Case> = vec![
        // Invalid JSON and non-objects.
        ("".into(), None, "body is not valid JSON".into()),
        ("not json".into(), None, "body is not valid JSON".into()),
        ("{".into(), None, "body is not valid JSON".into()),
        (format!("{} trailing", kind.valid()), None, "body is not valid JSON".into()),
        ("[1]".into(), None, "body must be a JSON object, got an array".into()),
        ("\"TX-1\"".into(), None, "body must be a JSON object, got a string".into()),
        ("null".into(), None, "body must be a JSON object, got null".into()),
        ("42".into(), None, "body must be a JSON object, got a number".into()),
        (
            format!("{{\"pad\":\"{}\"}}", "x".repeat(MAX_BODY_BYTES)),
            None,
            format!("body has {} bytes; at most {MAX_BODY_BYTES} are accepted", MAX_BODY_BYTES + 10),
        ),
        // transaction_id: missing, mistyped, empty, oversized, control characters,
        // surrounding white space.
        (without(kind, "transaction_id"), Some("transaction_id"), "field `transaction_id` is missing".into()),
        (with(kind, "transaction_id", Value::Null), Some("transaction_id"), "field `transaction_id` is missing".into()),
        (with(kind, "transaction_id", json!(7)), Some("transaction_id"), "field `transaction_id` must be a string, got a number `7`".into()),
        (with(kind, "transaction_id", json!(["TX"])), Some("transaction_id"), "field `transaction_id` must be a string, got an array `[\"TX\"]`".into()),
        (with(kind, "transaction_id", json!({"id": 1})), Some("transaction_id"), "must be a string, got an object".into()),
        (with(kind, "transaction_id", json!(true)), Some("transaction_id"), "must be a string, got a boolean `true`".into()),
        (with(kind, "transaction_id", json!("")), Some("transaction_id"), "field `transaction_id` has invalid value ``: must not be empty".into()),
        (
            with(kind, "transaction_id", json!("x".repeat(129))),
            Some("transaction_id"),
            "has 129 characters; at most 128 are accepted".into(),
        ),
        (
            with(kind, "transaction_id", json!("é".repeat(200))),
            Some("transaction_id"),
            "has 200 characters; at most 128 are accepted".into(),
        ),
        (with(kind, "transaction_id", json!("TX\u{1}1")), Some("transaction_id"), "contains the control character U+0001 at position 2".into()),
        (with(kind, "transaction_id", json!("TX\n")), Some("transaction_id"), "control character U+000A".into()),
        (with(kind, "transaction_id", json!(" TX-1")), Some("transaction_id"), "must not start or end with white space".into()),
        // attempt: missing, mistyped, 0, negative, fractional, too large.
        (without(kind, "attempt"), Some("attempt"), "field `attempt` is missing".into()),
        (with(kind, "attempt", Value::Null), Some("attempt"), "field `attempt` is missing".into()),
        (with(kind, "attempt", json!("2")), Some("attempt"), "field `attempt` must be a whole number >= 1, got a string `\"2\"`".into()),
        (with(kind, "attempt", json!(true)), Some("attempt"), "field `attempt` must be a whole number >= 1, got a boolean `true`".into()),
        (with(kind, "attempt", json!([2])), Some("attempt"), "must be a whole number >= 1, got an array".into()),
        (with(kind, "attempt", json!(0)), Some("attempt"), "field `attempt` has invalid value `0`: must be at least 1 (attempt 1 is the original request), got 0".into()),
        (with(kind, "attempt", json!(-1)), Some("attempt"), "field `attempt` has invalid value `-1`: must be a whole number >= 1".into()),
        (with(kind, "attempt", json!(1.5)), Some("attempt"), "field `attempt` has invalid value `1.5`: must be a whole number >= 1".into()),
        (with(kind, "attempt", json!(1u64 << 40)), Some("attempt"), "field `attempt` has invalid value `1099511627776`: is too large".into()),
    ];
    // The type's own string fields: missing and mistyped.
    for field in kind.string_fields() {
        out.push((
            without(kind, field),
            Some(field),
            format!("field `{field}` is missing"),
        ));
        out.push((
            with(kind, field, json!(3)),
            Some(field),
            format!("field `{field}` must be a string, got a number `3`"),
        ));
        out.push((
            with(kind, field, json!({"x": 1})),
            Some(field),
            format!("field `{field}` must be a string, got an object"),
        ));
    }
    match kind {
        Kind::Request => {
            out.push((
                with(kind, "idempotency_key", json!("TX-100200#3")),
                Some("idempotency_key"),
                "field `idempotency_key` has invalid value `TX-100200#3`: must be `TX-100200#2`"
                    .into(),
            ));
            out.push((
                with(kind, "idempotency_key", json!("TX-100200-2")),
                Some("idempotency_key"),
                "must be `TX-100200#2`".into(),
            ));
            out.push((
                without(kind, "payload"),
                Some("payload"),
                "field `payload` is missing".into(),
            ));
        }
        Kind::Response => {
            for outcome in [
                "MAYBE",
                "success",
                "CANCELED",
                "error",
                "rejected",
                "ERROR_TECNICAL",
                "",
            ] {
                out.push((
                    with(kind, "outcome", json!(outcome)),
                    Some("outcome"),
                    format!("field `outcome` has invalid value `{outcome}`: expected SUCCESS, CANCELLED, ERROR or REJECTED (or EXITOSO / CANCELADO / ERROR_TECNICO / RECHAZADO)"),
                ));
            }
            for (value, reason) in [
                (json!(-1), "field `retry_after_seconds` has invalid value `-1`: must be a whole number of seconds from 0 to 86400"),
                (json!(86_401), "field `retry_after_seconds` has invalid value `86401`: must be a whole number of seconds from 0 to 86400"),
                (json!(0.5), "field `retry_after_seconds` has invalid value `0.5`"),
                (json!("30"), "field `retry_after_seconds` must be a whole number of seconds, got a string `\"30\"`"),
            ] {
                out.push((
                    with(kind, "retry_after_seconds", value),
                    Some("retry_after_seconds"),
                    reason.into(),
                ));
            }
            for value in ["RUN", "not_run", "NOTRUN", "NO_EJECUTADO", ""] {
                out.push((
                    with(kind, "execution", json!(value)),
                    Some("execution"),
                    format!("field `execution` has invalid value `{value}`: expected NOT_RUN or UNKNOWN (or NO_EJECUTADA / DESCONOCIDA)"),
                ));
            }
            out.push((
                with(kind, "execution", json!(true)),
                Some("execution"),
                "field `execution` must be a string, got a boolean `true`".into(),
            ));
            out.push((
                with(kind, "reason", json!(5)),
                Some("reason"),
                "field `reason` must be a string, got a number `5`".into(),
            ));
            out.push((
                with(kind, "reason", json!("r".repeat(257))),
                Some("reason"),
                "257 characters; at most 256".into(),
            ));
        }
        Kind::Retry => {
            for origin in ["CRON", "retry_scheduler", "SCHEDULER", ""] {
                out.push((
                    with(kind, "origin", json!(origin)),
                    Some("origin"),
                    format!("field `origin` has invalid value `{origin}`: expected RETRY_SCHEDULER, RECONCILER or OPERATOR"),
                ));
            }
        }
    }
    out
}

/// One row per malformed input, for every message type.
#[test]
fn every_malformed_input_names_the_field_and_the_reason() {
    let mut rows = 0;
    for kind in KINDS {
        kind.parse(&kind.valid().to_string())
            .unwrap_or_else(|e| panic!("{kind:?}: the valid body is refused: {e}"));
        for (body, field, reason) in cases(kind) {
            let Err(err) = kind.parse(&body) else {
                panic!("{kind:?} accepted {}", &body[..body.len().min(120)]);
            };
            let text = err.to_string();
            assert!(
                text.contains(&reason),
                "{kind:?} {}: got `{text}`, wanted `{reason}`",
                &body[..body.len().min(120)]
            );
            assert_eq!(err.field(), field, "{kind:?}: {text}");
            if let Some(f) = field {
                assert!(text.contains(&format!("`{f}`")), "{text}");
            }
            assert!(text.chars().count() < 400, "error text is bounded: {text}");
            rows += 1;
        }
    }
    assert!(rows > 100, "{rows} rows");
}

/// A hostile value is echoed cut to 80 characters, so logs stay readable.
#[test]
fn echoed_values_are_cut() {
    let body = with(Kind::Response, "outcome", json!("Z".repeat(10_000)));
    let text = Response::parse(&body).unwrap_err().to_string();
    assert!(text.contains(&format!("`{}…`", "Z".repeat(80))), "{text}");
}

/// The Spanish aliases are accepted, and an error on an aliased field names the
/// contract's field.
#[test]
fn spanish_aliases() {
    let r = Response::parse(
        r#"{"transaccion_id":"TX-1","intento":2,"resultado":"CANCELADO","motivo":"NO_DISPONIBLE"}"#,
    )
    .unwrap();
    assert_eq!(
        (r.attempt.get(), r.outcome.as_str(), r.reason.as_deref()),
        (2, "CANCELLED", Some("NO_DISPONIBLE"))
    );
    let e =
        RetryEvent::parse(r#"{"transaccion_id":"TX-1","origen":"OPERADOR","intento":3}"#).unwrap();
    assert_eq!((e.origin.as_str(), e.attempt.get()), ("OPERATOR", 3));
    let err = Response::parse(r#"{"transaccion_id":"TX-1","intento":0,"resultado":"EXITOSO"}"#)
        .unwrap_err();
    assert_eq!(err.field(), Some("attempt"));
}

/// Every attempt carries the bytes the transaction started with: parsing a request
/// keeps the payload's exact text (number formatting, spacing, key order).
#[test]
fn request_payload_keeps_its_exact_bytes() {
    let text = r#"{"amount": 12.50, "z":1, "a":[1.0e2, "é"]}"#;
    let body = format!(
        r#"{{"transaction_id":"TX-9","attempt":3,"idempotency_key":"TX-9#3","payload":{text}}}"#
    );
    let req = Request::parse(&body).unwrap();
    assert_eq!(req.payload.as_json(), text);
    assert_eq!(req.payload, Payload::from_json(text).unwrap());
    assert_eq!(Request::parse(&req.to_json()).unwrap(), req);
}

/// An answer's `execution`: NOT_RUN or UNKNOWN, under its name or its Spanish alias
/// (`ejecucion`: NO_EJECUTADA, DESCONOCIDA); absent is UNKNOWN (the call may have run),
/// and written back only when the service gave it.
#[test]
fn execution_names_aliases_and_absence() {
    use domain::message::Execution;
    let parse = |extra: &str| {
        Response::parse(&format!(
            r#"{{"transaction_id":"TX-1","attempt":2,"outcome":"ERROR"{extra}}}"#
        ))
        .unwrap()
    };
    for (extra, given) in [
        (r#","execution":"NOT_RUN""#, Some(Execution::NotRun)),
        (r#","execution":"NO_EJECUTADA""#, Some(Execution::NotRun)),
        (r#","ejecucion":"NO_EJECUTADA""#, Some(Execution::NotRun)),
        (r#","execution":"UNKNOWN""#, Some(Execution::Unknown)),
        (r#","ejecucion":"DESCONOCIDA""#, Some(Execution::Unknown)),
        (r#","execution":null"#, None),
        ("", None),
    ] {
        let r = parse(extra);
        assert_eq!(r.execution, given, "{extra}");
        assert_eq!(
            r.execution(),
            given.unwrap_or(Execution::Unknown),
            "{extra}"
        );
        let written: Value = serde_json::from_str(&r.to_json()).unwrap();
        assert_eq!(
            written.get("execution").and_then(Value::as_str),
            given.map(Execution::as_str),
            "{extra}"
        );
        assert_eq!(Response::parse(&r.to_json()).unwrap(), r, "{extra}");
    }
    for e in [Execution::NotRun, Execution::Unknown] {
        assert_eq!(Execution::parse(e.as_str()), Some(e));
    }
    let twice = Response::parse(
        r#"{"transaction_id":"TX-1","attempt":2,"outcome":"ERROR","execution":"NOT_RUN","ejecucion":"NO_EJECUTADA"}"#,
    );
    assert!(twice.is_err(), "a field under both its names is refused");
}
