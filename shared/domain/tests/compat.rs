//! The compatibility policy (`docs/compatibility.md`), enforced: every message shape a
//! release has written — retry events (every origin, with and without `round`, as the
//! retry queue and EventBridge schedules hold them for up to a day), requests, answers
//! (every outcome, with and without `round`, `retry_after_seconds`) and intake
//! messages — is committed under `tests/fixtures/compat/`, byte for byte, and
//! `cases.json` says what the rules must decide for each from a given state. Each case
//! decodes the file with today's parser and runs today's decision on today's executor
//! over the in-memory adapters. A fixture is never edited once committed: a release
//! that can no longer decide one as written breaks the release before it and the
//! schedules it left behind. Records have their own fixtures, in the adapter crate
//! (`shared/aws/tests/fixtures/previous-release-items.json`).

// A test crate: helpers outside `#[test]` functions panic on purpose.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[allow(dead_code)]
#[path = "rules/world.rs"]
mod world;

use domain::decide::{Delivery, Disposition, Input};
use domain::ids::{MaxAttempts, TransactionId};
use domain::intake::StartMessage;
use domain::message::{Origin, Outcome, Request, Response, RetryEvent};
use serde::Deserialize;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use world::{a, tx, World, HOUR_MS};

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/compat")
}

/// One line of `cases.json`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Case {
    /// The fixture, relative to the fixtures directory; its directory is its kind.
    message: String,
    /// The state the transaction is in when the message arrives (see [`given`]).
    given: String,
    /// The disposition's label, or for a request what is checked of it.
    expect: String,
    /// Intake: the budget the started transaction must have.
    max_attempts: Option<u32>,
    /// ERROR: the re-send's schedule lies at least this far ahead.
    waits_at_least_seconds: Option<i64>,
    /// The deployment's request delivery (`direct` when absent).
    delivery: Option<String>,
}

fn cases() -> Vec<Case> {
    let text = std::fs::read_to_string(dir().join("cases.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn body(case: &Case) -> String {
    let path = dir().join(&case.message);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.trim_end_matches('\n').to_owned()
}

fn id() -> TransactionId {
    tx("TX-100200")
}

/// Runs `input` and returns its disposition's label.
fn label(w: &mut World, input: Input) -> String {
    match w.run(input) {
        Disposition::Ack(a) => a.label().to_owned(),
        Disposition::Drop(d) => d.label().to_owned(),
        Disposition::Reject(r) => r.label().to_owned(),
    }
}

fn answer(outcome: Outcome, round: Option<u32>) -> Input {
    Input::Response(Response {
        transaction_id: id(),
        attempt: a(1),
        outcome,
        reason: None,
        retry_after_seconds: None,
        round,
        execution: None,
    })
}

/// Every schedule due by now fired and its retry event handled; `expect` each.
fn fire(w: &mut World, expect: &str) {
    w.advance_ms(3 * HOUR_MS);
    let due = w.fire_due();
    assert_eq!(due.len(), 1, "one schedule due");
    for ev in due {
        assert_eq!(label(w, Input::Retry(ev)), expect);
    }
}

/// The world with TX-100200 (4 attempts) in the named state, delivering requests as
/// the case says (outbox mode: the start's request published by the publisher).
fn given(name: &str, delivery: Option<&str>) -> World {
    let mut w = World::new();
    w.delivery = delivery.map_or(Delivery::Direct, |d| {
        Delivery::parse(d).unwrap_or_else(|| panic!("cases.json: unknown delivery `{d}`"))
    });
    let id = id();
    if name == "nothing" {
        return w;
    }
    assert_eq!(w.start(&id, 4).label(), "started");
    if w.delivery == Delivery::Outbox {
        assert_eq!(w.publish(&id).label(), "published");
    }
    match name {
        // IN_PROGRESS(1), round 0.
        "in-progress" => {}
        // CANCELLED(1): SCHEDULED, attempt 2 pending, round 0.
        "scheduled" => {
            assert_eq!(
                label(&mut w, answer(Outcome::Cancelled, Some(0))),
                "scheduled"
            );
        }
        // Then its retry sent: IN_PROGRESS(2).
        "retried" => {
            assert_eq!(
                label(&mut w, answer(Outcome::Cancelled, Some(0))),
                "scheduled"
            );
            fire(&mut w, "published");
        }
        // ERROR(1): a re-send of attempt 1 scheduled, round 1.
        "resend-scheduled" => {
            assert_eq!(label(&mut w, answer(Outcome::Error, Some(0))), "resend");
        }
        // Then the re-send gone out: IN_PROGRESS(1), round 1.
        "resent" => {
            assert_eq!(label(&mut w, answer(Outcome::Error, Some(0))), "resend");
            fire(&mut w, "published");
        }
        other => panic!("cases.json: unknown state `{other}`"),
    }
    w
}

/// A request fixture: decoded with its key and exact payload text, and written by
/// today's code as the same JSON (fields and values).
fn check_request(case: &Case, text: &str) {
    let r = Request::parse(text).unwrap_or_else(|e| panic!("{}: {e}", case.message));
    assert_eq!(
        r.idempotency_key.as_str(),
        format!("{}#{}", r.transaction_id, r.attempt.get())
    );
    let raw: serde_json::Value = serde_json::from_str(text).unwrap();
    let written = Request::new(r.transaction_id.clone(), r.attempt, r.payload.clone())
        .with_round(r.round)
        .with_correlation_id(r.correlation_id.clone())
        .to_json();
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&written).unwrap(),
        raw,
        "{}: today's request differs",
        case.message
    );
    keeps_payload_text(case, text, &r.payload);
    match case.expect.as_str() {
        "same-request" => {}
        // A start of this transaction with this payload publishes exactly this request.
        "published-by-start" => {
            let mut w = given(&case.given, case.delivery.as_deref());
            assert_eq!(
                label(
                    &mut w,
                    Input::Start {
                        transaction_id: r.transaction_id.clone(),
                        payload: r.payload.clone(),
                        max_attempts: MaxAttempts::new(4).unwrap(),
                        correlation_id: r.correlation_id.clone(),
                    }
                ),
                "started"
            );
            let published = w.requests.messages();
            assert_eq!(published.len(), 1);
            assert_eq!(
                serde_json::from_str::<serde_json::Value>(&published[0].to_json()).unwrap(),
                raw,
                "{}: the start's request differs",
                case.message
            );
        }
        other => panic!("{}: unknown request check `{other}`", case.message),
    }
}

/// The fixture's text holds `payload` exactly as it was written.
fn keeps_payload_text(case: &Case, text: &str, payload: &domain::message::Payload) {
    let kept = text.contains(payload.as_json());
    assert!(kept, "{}: payload text", case.message);
}

/// The case's world after deciding `input`, which must end as the case expects, and
/// the instant it decided at.
fn decided(case: &Case, input: Input) -> (World, domain::ids::Timestamp) {
    let mut w = given(&case.given, case.delivery.as_deref());
    let now = w.now;
    assert_eq!(label(&mut w, input), case.expect, "{}", case.message);
    (w, now)
}

/// Decodes the case's fixture and decides it from its state; returns the decoded
/// retry event or answer, for the coverage checks.
fn run_case(case: &Case) -> Option<(String, bool)> {
    let text = body(case);
    let kind = case.message.split('/').next().unwrap_or_default();
    let decoded = match kind {
        "request" => {
            check_request(case, &text);
            return None;
        }
        "retry-event" => {
            let ev = RetryEvent::parse(&text).unwrap_or_else(|e| panic!("{}: {e}", case.message));
            decided(case, Input::Retry(ev.clone()));
            Some((ev.origin.as_str().to_owned(), ev.round.is_some()))
        }
        "response" => {
            let r = Response::parse(&text).unwrap_or_else(|e| panic!("{}: {e}", case.message));
            let (w, now) = decided(case, Input::Response(r.clone()));
            if let Some(secs) = case.waits_at_least_seconds {
                let schedule = w.scheduler.live();
                assert_eq!(schedule.len(), 1, "{}: one re-send scheduled", case.message);
                let wait_ms = schedule[0].fire_at.millis() - now.millis();
                assert!(
                    wait_ms >= secs * 1000,
                    "{}: the re-send waits {wait_ms} ms, asked {secs} s",
                    case.message
                );
            }
            Some((r.outcome.as_str().to_owned(), r.round.is_some()))
        }
        "intake" => {
            let m = StartMessage::parse(&text).unwrap_or_else(|e| panic!("{}: {e}", case.message));
            let default = MaxAttempts::new(domain::defaults::MAX_ATTEMPTS).unwrap();
            let (w, _) = decided(
                case,
                Input::Start {
                    transaction_id: m.transaction_id.clone(),
                    payload: m.payload.clone(),
                    max_attempts: m.max_attempts.unwrap_or(default),
                    correlation_id: m.correlation_id.clone(),
                },
            );
            let record = w.record(&m.transaction_id);
            assert_eq!(
                Some(record.max_attempts.get()),
                case.max_attempts,
                "{}",
                case.message
            );
            // The first request carries the payload exactly as the producer wrote it.
            let first = &w.requests.messages()[0];
            assert_eq!(first.payload, m.payload, "{}", case.message);
            // A fresh start stores the correlation id given and sends it; a repeat
            // sends the stored one.
            if case.given == "nothing" {
                assert_eq!(record.correlation_id, m.correlation_id, "{}", case.message);
            }
            assert_eq!(
                first.correlation_id, record.correlation_id,
                "{}",
                case.message
            );
            keeps_payload_text(case, &text, &first.payload);
            None
        }
        other => panic!("{}: unknown kind `{other}`", case.message),
    };
    decoded.map(|(name, round)| (format!("{kind} {name}"), round))
}

/// The dispositions that take a message on its way (not dropped as late, stale or
/// duplicate): each origin and outcome must reach one, with and without `round`.
const MOVES_ON: [&str; 5] = ["published", "succeeded", "scheduled", "resend", "rejected"];

#[test]
fn every_committed_shape_is_decoded_and_decided_as_written() {
    let cases = cases();
    let mut seen = BTreeSet::new();
    let mut decided = BTreeSet::new();
    for case in &cases {
        seen.insert(case.message.clone());
        if let Some((shape, round)) = run_case(case) {
            if MOVES_ON.contains(&case.expect.as_str()) {
                decided.insert((shape, round));
            }
        }
    }
    // Every fixture committed is a case.
    let mut files = BTreeSet::new();
    for kind in ["retry-event", "request", "response", "intake"] {
        for entry in std::fs::read_dir(dir().join(kind)).unwrap() {
            let name = entry.unwrap().file_name().into_string().unwrap();
            files.insert(format!("{kind}/{name}"));
        }
    }
    assert_eq!(
        files, seen,
        "fixtures without a case, or cases without a fixture"
    );
    // Every origin and every outcome, with and without `round`, decided on its way.
    for origin in [Origin::RetryScheduler, Origin::Reconciler, Origin::Operator] {
        for round in [false, true] {
            let shape = (format!("retry-event {}", origin.as_str()), round);
            assert!(decided.contains(&shape), "no fixture of {shape:?}");
        }
    }
    for &outcome in Outcome::ALL {
        for round in [false, true] {
            let shape = (format!("response {}", outcome.as_str()), round);
            assert!(decided.contains(&shape), "no fixture of {shape:?}");
        }
    }
}

/// A fixture decided otherwise than `cases.json` says fails, naming it: the check is
/// not vacuous.
#[test]
fn a_case_decided_otherwise_is_named() {
    let case = Case {
        message: "response/cancelled.json".into(),
        given: "in-progress".into(),
        expect: "succeeded".into(),
        max_attempts: None,
        waits_at_least_seconds: None,
        delivery: None,
    };
    let failed = std::panic::catch_unwind(|| run_case(&case)).unwrap_err();
    let text = failed.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(text.contains("response/cancelled.json"), "{text}");
}
