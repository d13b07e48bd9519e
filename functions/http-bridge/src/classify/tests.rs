use super::*;
use domain::{Attempt, Payload, TransactionId};
use http::HeaderValue;
use std::time::Duration;

fn request() -> Request {
    Request::new(
        TransactionId::parse("TX-7").unwrap(),
        Attempt::new(2).unwrap(),
        Payload::from_json(r#"{"amount":12.50}"#).unwrap(),
    )
    .with_round(Some(3))
}

/// 2024-05-01T00:00:00Z.
fn now() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_714_521_600)
}

fn headers(retry_after: Option<&str>) -> HeaderMap {
    let mut h = HeaderMap::new();
    if let Some(v) = retry_after {
        h.insert(RETRY_AFTER, HeaderValue::from_str(v).unwrap());
    }
    h
}

fn answer_with(rules: &Rules, status: u16, retry: Option<&str>, body: &[u8]) -> Classified {
    let h = headers(retry);
    let a = HttpAnswer {
        status,
        headers: &h,
        body,
    };
    classify(rules, &request(), Ok(a), now())
}

fn answer(status: u16, retry: Option<&str>) -> Classified {
    answer_with(&Rules::default(), status, retry, b"")
}

fn expect_response(c: Classified) -> Response {
    match c {
        Classified::Answer(r) => r,
        Classified::Operator(o) => panic!("expected an answer, got {o:?}"),
    }
}

fn expect_operator(c: Classified) -> OperatorCase {
    match c {
        Classified::Operator(o) => o,
        Classified::Answer(r) => panic!("expected an operator case, got {r:?}"),
    }
}

/// (outcome, reason, retry_after_seconds) of an answer.
fn summary(c: Classified) -> (Outcome, String, Option<u32>) {
    let r = expect_response(c);
    assert_eq!(r.transaction_id.as_str(), "TX-7");
    assert_eq!(r.attempt.get(), 2);
    assert_eq!(r.round, Some(3), "the request's round is echoed");
    (
        r.outcome,
        r.reason.unwrap_or_default(),
        r.retry_after_seconds,
    )
}

#[test]
fn every_default_row() {
    use Outcome::*;
    // (status, what it becomes): the table in docs/http-bridge.md.
    let answers: &[(u16, Outcome)] = &[
        (200, Success),
        (201, Success),
        (202, Success),
        (204, Success),
        (299, Success),
        (408, Error),
        (409, Error),
        (423, Error),
        (425, Error),
        (429, Error),
        (500, Error),
        (502, Error),
        (503, Error),
        (504, Error),
        (599, Error),
    ];
    for &(status, outcome) in answers {
        let (o, reason, after) = summary(answer(status, Some("7")));
        assert_eq!(o, outcome, "status {status}");
        assert_eq!(reason, format!("HTTP_{status}"), "status {status}");
        let expected_after = (outcome == Error).then_some(7);
        assert_eq!(
            after, expected_after,
            "status {status}: Retry-After only with ERROR"
        );
    }
    for status in [400, 401, 403, 404, 405, 410, 413, 415, 422, 451, 499] {
        let o = expect_operator(answer(status, Some("7")));
        assert_eq!(o.status, status);
        assert_eq!(o.reason, format!("HTTP_{status}"));
    }
}

/// With `HTTP_OPERATOR_CASES=reject` every default operator case is answered
/// REJECTED (its status the reason, no `retry_after_seconds`); the other rows are
/// unchanged; a rule saying OPERATOR still sends its status to the DLQ, and a rule
/// may say REJECTED, body rules too.
#[test]
fn with_reject_the_operator_cases_answer_rejected() {
    let reject = |json: &str| {
        rules(json)
            .with_operator_cases(OperatorCases::Reject)
            .unwrap()
    };
    let r = reject("");
    for status in [400, 401, 403, 404, 405, 410, 413, 415, 422, 451, 499] {
        assert_eq!(
            summary(answer_with(&r, status, Some("7"), b"")),
            (Outcome::Rejected, format!("HTTP_{status}"), None),
            "status {status}"
        );
    }
    for (status, outcome) in [
        (200, Outcome::Success),
        (409, Outcome::Error),
        (503, Outcome::Error),
    ] {
        assert_eq!(summary(answer_with(&r, status, None, b"")).0, outcome);
    }
    let r = reject(
        r#"{"statuses":[{"from":401,"to":403,"outcome":"OPERATOR","reason":"AUTH"},{"from":500,"outcome":"REJECTED"}],
            "body":[{"pointer":"/code","values":{"KEY_REUSED":{"outcome":"REJECTED","reason":"KEY_REUSED"}}}]}"#,
    );
    assert_eq!(
        expect_operator(answer_with(&r, 401, None, b"")).reason,
        "AUTH"
    );
    assert_eq!(
        summary(answer_with(&r, 500, Some("7"), b"")),
        (Outcome::Rejected, "HTTP_500".into(), None)
    );
    assert_eq!(
        summary(answer_with(&r, 409, None, br#"{"code":"KEY_REUSED"}"#)),
        (Outcome::Rejected, "KEY_REUSED".into(), None)
    );
}

#[test]
fn defaults_cover_every_status_once() {
    for status in 0..=999u16 {
        let d = default_decision(status);
        let expected = match status {
            200..=299 => Some(Decision::Success),
            408 | 409 | 423 | 425 | 429 | 500..=599 => Some(Decision::Error),
            400..=499 => Some(Decision::Operator),
            _ => None,
        };
        assert_eq!(d, expected, "status {status}");
    }
}

#[test]
fn unclassifiable_answers_are_errors_with_status_and_body() {
    for status in [100, 301, 304, 600, 999] {
        let (o, reason, after) = summary(answer_with(
            &Rules::default(),
            status,
            Some("30"),
            b"moved\nelsewhere",
        ));
        assert_eq!(o, Outcome::Error);
        assert_eq!(
            reason,
            format!("HTTP_{status} unclassified: moved elsewhere")
        );
        assert_eq!(after, Some(30));
    }
    // A long body is cut short; the reason stays within the contract's limit.
    let body = "x".repeat(10_000);
    let (_, reason, _) = summary(answer_with(&Rules::default(), 302, None, body.as_bytes()));
    assert!(reason.starts_with("HTTP_302 unclassified: xxx"), "{reason}");
    assert!(reason.ends_with('…'));
    assert!(reason.chars().count() <= MAX_REASON_CHARS);
    // Not UTF-8: still a reason, never a drop.
    let (o, reason, _) = summary(answer_with(
        &Rules::default(),
        302,
        None,
        &[0xff, 0xfe, b'a'],
    ));
    assert_eq!(o, Outcome::Error);
    assert!(reason.ends_with("\u{fffd}\u{fffd}a"), "{reason}");
}

/// GIVEN a call that brought no answer THEN ERROR without `Retry-After`; NOT_RUN when
/// nothing was sent (no connection, a failed handshake), UNKNOWN when the request may
/// have run (a timeout, a connection lost after sending).
#[test]
fn transport_failures_are_errors_without_retry_after() {
    for (t, reason, execution) in [
        (Transport::Timeout, "TIMEOUT", Execution::Unknown),
        (
            Transport::Connect("refused".into()),
            "CONNECT",
            Execution::NotRun,
        ),
        (
            Transport::Tls("unknown issuer".into()),
            "TLS",
            Execution::NotRun,
        ),
        (
            Transport::Other("reset".into()),
            "TRANSPORT",
            Execution::Unknown,
        ),
    ] {
        let r = expect_response(classify(&Rules::default(), &request(), Err(t), now()));
        assert_eq!(r.execution, Some(execution), "{reason}");
        assert_eq!(
            summary(Classified::Answer(r)),
            (Outcome::Error, reason.to_owned(), None)
        );
    }
}

/// GIVEN an HTTP answer classified ERROR THEN its `execution` is NOT_RUN only for a
/// refusal before processing (408, 409, 423, 425, 429, a 503 with `Retry-After`),
/// UNKNOWN for any other (500, 502, 504, a 503 without `Retry-After`, an unclassifiable
/// status, a body rule's ERROR on 200); absent with every other outcome.
#[test]
fn an_error_says_whether_the_request_may_have_run() {
    let execution = |c: Classified| expect_response(c).execution;
    for (status, retry, want) in [
        (408, None, Execution::NotRun),
        (409, None, Execution::NotRun),
        (423, None, Execution::NotRun),
        (425, None, Execution::NotRun),
        (429, None, Execution::NotRun),
        (503, Some("30"), Execution::NotRun),
        (503, None, Execution::Unknown),
        (500, None, Execution::Unknown),
        (502, Some("30"), Execution::Unknown),
        (504, None, Execution::Unknown),
        (302, None, Execution::Unknown),
    ] {
        assert_eq!(
            execution(answer(status, retry)),
            Some(want),
            "{status} {retry:?}"
        );
    }
    let down = rules(r#"{"body":[{"pointer":"/state","values":{"DOWN":{"outcome":"ERROR"}}}]}"#);
    let c = answer_with(&down, 200, None, br#"{"state":"DOWN"}"#);
    assert_eq!(execution(c), Some(Execution::Unknown));
    for status in [200, 201] {
        assert_eq!(execution(answer(status, None)), None);
    }
}

#[test]
fn round_absent_stays_absent() {
    let mut r = request();
    r.round = None;
    let h = HeaderMap::new();
    let a = HttpAnswer {
        status: 200,
        headers: &h,
        body: b"",
    };
    let c = expect_response(classify(&Rules::default(), &r, Ok(a), now()));
    assert_eq!(c.round, None);
}

#[test]
fn retry_after_forms() {
    let at = |v: &str| retry_after(&headers(Some(v)), now());
    assert_eq!(at("0"), Some(0));
    assert_eq!(at("120"), Some(120));
    assert_eq!(at(" 45 "), Some(45));
    // Capped at the contract's one day, also past u64.
    assert_eq!(at("86401"), Some(MAX_RETRY_AFTER_SECONDS));
    assert_eq!(at("99999999999999999999999"), Some(MAX_RETRY_AFTER_SECONDS));
    // The three HTTP-date forms, relative to now (2024-05-01T00:00:00Z).
    assert_eq!(at("Wed, 01 May 2024 00:02:00 GMT"), Some(120));
    assert_eq!(at("Wednesday, 01-May-24 00:02:00 GMT"), Some(120));
    assert_eq!(at("Wed May  1 00:02:00 2024"), Some(120));
    // A date past, or now: no wait beyond the backoff.
    assert_eq!(at("Tue, 30 Apr 2024 23:00:00 GMT"), Some(0));
    assert_eq!(at("Wed, 01 May 2024 00:00:00 GMT"), Some(0));
    // A date far ahead: capped.
    assert_eq!(
        at("Fri, 01 May 2026 00:00:00 GMT"),
        Some(MAX_RETRY_AFTER_SECONDS)
    );
    // Unreadable: ignored.
    for bad in [
        "",
        "-5",
        "1.5",
        "soon",
        "120s",
        "Wed, 32 May 2024 00:00:00 GMT",
    ] {
        assert_eq!(at(bad), None, "{bad:?}");
    }
    assert_eq!(retry_after(&HeaderMap::new(), now()), None);
}

#[test]
fn retry_after_date_rounds_up_a_fraction() {
    let just_before = now() - Duration::from_millis(300);
    let h = headers(Some("Wed, 01 May 2024 00:00:10 GMT"));
    assert_eq!(retry_after(&h, just_before), Some(11));
}

#[test]
fn a_503_with_an_http_date_waits_until_then() {
    let (o, reason, after) = summary(answer(503, Some("Wed, 01 May 2024 00:05:00 GMT")));
    assert_eq!(
        (o, reason.as_str(), after),
        (Outcome::Error, "HTTP_503", Some(300))
    );
}

fn rules(json: &str) -> Rules {
    Rules::from_json(json).unwrap()
}

#[test]
fn status_rules_come_before_the_defaults_in_order() {
    let r = rules(
        r#"{"statuses":[
            {"from":404,"outcome":"CANCELLED","reason":"NOT_FOUND_YET"},
            {"from":400,"to":499,"outcome":"ERROR"},
            {"from":200,"to":200,"outcome":"CANCELLED","reason":"SHADOWED"},
            {"from":429,"outcome":"CANCELLED","reason":"NEVER_REACHED"}
        ]}"#,
    );
    let (o, reason, after) = summary(answer_with(&r, 404, Some("5"), b""));
    assert_eq!(
        (o, reason.as_str(), after),
        (Outcome::Cancelled, "NOT_FOUND_YET", None)
    );
    let (o, reason, after) = summary(answer_with(&r, 429, Some("5"), b""));
    assert_eq!(
        (o, reason.as_str(), after),
        (Outcome::Error, "HTTP_429", Some(5))
    );
    let (o, reason, _) = summary(answer_with(&r, 422, None, b""));
    assert_eq!((o, reason.as_str()), (Outcome::Error, "HTTP_422"));
    let (o, reason, _) = summary(answer_with(&r, 200, None, b""));
    assert_eq!((o, reason.as_str()), (Outcome::Cancelled, "SHADOWED"));
    // Untouched statuses keep their defaults.
    assert_eq!(summary(answer_with(&r, 201, None, b"")).0, Outcome::Success);
    assert_eq!(summary(answer_with(&r, 500, None, b"")).0, Outcome::Error);
    // An override may send a status to the operator, or make a 3xx known.
    let r = rules(
        r#"{"statuses":[{"from":500,"to":501,"outcome":"OPERATOR","reason":"NOT_IMPLEMENTED"},{"from":303,"outcome":"SUCCESS"}]}"#,
    );
    let o = expect_operator(answer_with(&r, 501, None, b"nope"));
    assert_eq!(
        (o.status, o.reason.as_str(), o.body.as_str()),
        (501, "NOT_IMPLEMENTED", "nope")
    );
    assert_eq!(
        summary(answer_with(&r, 303, None, b"")),
        (Outcome::Success, "HTTP_303".into(), None)
    );
}

#[test]
fn body_rules_read_a_configured_value_at_a_pointer() {
    let r = rules(
        r#"{"body":[{"pointer":"/result/status","from":200,"to":299,"values":{
            "DECLINED":{"outcome":"CANCELLED","reason":"CARD_DECLINED"},
            "PENDING":{"outcome":"ERROR","reason":"PENDING"},
            "7":{"outcome":"OPERATOR"},
            "false":{"outcome":"CANCELLED"}
        }}],
        "statuses":[{"from":200,"outcome":"CANCELLED","reason":"STATUS_RULE"}]}"#,
    );
    let with = |status: u16, body: &str| answer_with(&r, status, Some("9"), body.as_bytes());
    let (o, reason, _) = summary(with(200, r#"{"result":{"status":"DECLINED"}}"#));
    assert_eq!((o, reason.as_str()), (Outcome::Cancelled, "CARD_DECLINED"));
    let (o, reason, after) = summary(with(202, r#"{"result":{"status":"PENDING"}}"#));
    assert_eq!(
        (o, reason.as_str(), after),
        (Outcome::Error, "PENDING", Some(9))
    );
    assert_eq!(
        expect_operator(with(201, r#"{"result":{"status":7}}"#)).reason,
        "HTTP_201"
    );
    let (o, reason, _) = summary(with(201, r#"{"result":{"status":false}}"#));
    assert_eq!((o, reason.as_str()), (Outcome::Cancelled, "HTTP_201"));
    // No value, another value, not JSON, not a scalar: the status rule, then the
    // defaults, decide.
    for body in [
        r#"{"result":{}}"#,
        r#"{"result":{"status":"declined"}}"#,
        "<html>",
        r#"{"result":{"status":["DECLINED"]}}"#,
    ] {
        let (o, reason, _) = summary(with(200, body));
        assert_eq!(
            (o, reason.as_str()),
            (Outcome::Cancelled, "STATUS_RULE"),
            "{body}"
        );
        assert_eq!(summary(with(204, body)).0, Outcome::Success, "{body}");
    }
    // Outside the rule's statuses the body is not read.
    assert_eq!(
        summary(with(503, r#"{"result":{"status":"DECLINED"}}"#)).0,
        Outcome::Error
    );
}

#[test]
fn rules_are_checked_naming_the_field() {
    let err = |json: &str| Rules::from_json(json).unwrap_err();
    assert_eq!(Rules::from_json("  ").unwrap(), Rules::default());
    assert_eq!(
        err(r#"{"statuses":[{"from":99,"outcome":"ERROR"}]}"#).field,
        "statuses[0].from"
    );
    assert_eq!(
        err(r#"{"statuses":[{"from":500,"to":600,"outcome":"ERROR"}]}"#).field,
        "statuses[0].to"
    );
    let e = err(r#"{"statuses":[{"from":200},{"from":500,"to":400,"outcome":"ERROR"}]}"#);
    assert_eq!(e.field, "(json)");
    assert!(e.reason.contains("outcome"), "{e}");
    assert_eq!(
        err(r#"{"statuses":[{"from":500,"to":400,"outcome":"ERROR"}]}"#).field,
        "statuses[0].to"
    );
    assert_eq!(
        err(r#"{"statuses":[{"from":500,"outcome":"ERROR","reason":" "}]}"#).field,
        "statuses[0].reason"
    );
    let long = "R".repeat(MAX_REASON_CHARS + 1);
    let e = err(&format!(
        r#"{{"statuses":[{{"from":500,"outcome":"CANCELLED","reason":"{long}"}}]}}"#
    ));
    assert_eq!(e.field, "statuses[0].reason");
    assert_eq!(
        err(r#"{"body":[{"pointer":"status","values":{"A":{"outcome":"SUCCESS"}}}]}"#).field,
        "body[0].pointer"
    );
    assert_eq!(
        err(r#"{"body":[{"pointer":"/s","values":{}}]}"#).field,
        "body[0].values"
    );
    assert_eq!(err(r#"{"body":[{"pointer":"/s","from":300,"to":200,"values":{"A":{"outcome":"SUCCESS"}}}]}"#).field, "body[0].to");
    assert_eq!(
        err(r#"{"body":[{"pointer":"/s","values":{"A":{"outcome":"SUCCESS","reason":""}}}]}"#)
            .field,
        "body[0].values[\"A\"].reason"
    );
    // Unknown fields and outcomes are refused, not ignored.
    assert!(err(r#"{"status":[]}"#).reason.contains("unknown field"));
    assert!(err(r#"{"statuses":[{"from":500,"outcome":"RETRY"}]}"#)
        .reason
        .contains("unknown variant"));
    assert!(err("[1]").reason.contains("invalid type"));
}
