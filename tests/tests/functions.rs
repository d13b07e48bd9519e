//! The three functions' invocation entry points, in process, fed with the event
//! files in `tests/events/` (the same files `cargo lambda invoke --data-file` uses and
//! the smoke test sends to the real binaries), over the memory adapters.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use domain::machine::Counter;
use domain::ports::{PortError, RequestPublisher, Transitions, WriteOutcome};
use domain::{Outcome, Request, RetryEvent, Status, TransactionId, Write};
use reconciler::{Limits, Reconciler};
use response_handler::ResponseHandler;
use retry_handler::RetryHandler;
use runtime::batch::undeliverable;
use runtime::function::SqsFunction;
use runtime::metrics::{names, Metrics};
use runtime::rate::{Paced, Pacer};
use runtime::settings::Seeds;
use runtime::{BatchOptions, SqsBatchResponse, SqsEvent};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use testkit::memory::{ManualClock, MemoryQueue, MemoryScheduler, MemoryStore};
use testkit::memory::{MemoryBreaker, MemoryDeadLetter};

fn event(name: &str) -> SqsEvent {
    let path = format!("{}/events/{name}", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

/// The function names the handlers count their metrics under.
const RESPONSE: &str = "response-handler";
const RETRY: &str = "retry-handler";

/// `$event` through `$handler`'s `handle_event`, counted into fresh metrics of
/// `$function`: (the batch response, the metrics).
macro_rules! run {
    ($handler:expr, $function:expr, $event:expr) => {{
        let m = Metrics::new("DeferredRetry", $function);
        let r = $handler.handle_event($event, &m).await.unwrap();
        (r, m)
    }};
}

/// A world where each of `txs` is started, at most 3 attempts.
async fn started(txs: &[&str]) -> World {
    let w = World::new();
    for tx in txs {
        w.start(tx, 3).await;
    }
    w
}

fn failures(r: &SqsBatchResponse) -> Vec<String> {
    r.batch_item_failures
        .iter()
        .map(|f| f.item_identifier.clone())
        .collect()
}

type A<'a> = ResponseHandler<
    &'a MemoryStore,
    &'a MemoryScheduler,
    &'a MemoryQueue<RetryEvent>,
    &'a MemoryStore,
    Arc<MemoryBreaker>,
    &'a MemoryDeadLetter,
    &'a ManualClock,
>;
type B<'a, Rq> = RetryHandler<
    &'a MemoryStore,
    Rq,
    &'a MemoryQueue<RetryEvent>,
    Arc<MemoryBreaker>,
    &'a MemoryDeadLetter,
    &'a ManualClock,
>;

fn response_handler<'a>(w: &'a World, dlq: &'a MemoryDeadLetter) -> A<'a> {
    ResponseHandler {
        store: &w.store,
        scheduler: &w.scheduler,
        retries: &w.retries,
        notes: &w.store,
        breaker: None,
        function: SqsFunction {
            dead_letter: dlq,
            clock: &w.clock,
            settings: w.settings.clone(),
            batch: BatchOptions::default(),
            seeds: Seeds::fixed(1),
            namespace: "DeferredRetry".into(),
        },
    }
}

fn retry_handler<'a, Rq: RequestPublisher>(
    w: &'a World,
    requests: Rq,
    dlq: &'a MemoryDeadLetter,
) -> B<'a, Rq> {
    RetryHandler {
        store: &w.store,
        requests,
        retries: &w.retries,
        breaker: None,
        pacer: None,
        function: SqsFunction {
            dead_letter: dlq,
            clock: &w.clock,
            settings: w.settings.clone(),
            batch: BatchOptions::default(),
            seeds: Seeds::fixed(2),
            namespace: "DeferredRetry".into(),
        },
    }
}

type Cron<'a> = Reconciler<
    &'a MemoryStore,
    &'a MemoryScheduler,
    &'a MemoryQueue<RetryEvent>,
    &'a MemoryQueue<Request>,
    &'a MemoryStore,
    Arc<MemoryBreaker>,
    &'a ManualClock,
>;

fn reconciler(
    w: &World,
    breaker: Option<runtime::breaker::BreakerGate<Arc<MemoryBreaker>>>,
) -> Cron<'_> {
    Reconciler {
        store: &w.store,
        scheduler: &w.scheduler,
        retries: &w.retries,
        requests: &w.requests,
        notes: &w.store,
        breaker,
        clock: &w.clock,
        settings: w.settings.clone(),
        limits: Limits::default(),
        seeds: Seeds::fixed(3),
        namespace: "DeferredRetry".into(),
    }
}

/// Every event file through the functions, in the order the smoke test sends them
/// to the binaries, with the state, the DLQs, the requests and the metrics checked
/// after each.
#[tokio::test]
async fn the_event_files_through_the_three_functions() {
    let w = started(&["TX-100200", "TX-100300", "TX-100400", "TX-100500"]).await;
    let response_dlq = MemoryDeadLetter::new();
    let retry_dlq = MemoryDeadLetter::new();
    let handler_a = response_handler(&w, &response_dlq);
    let handler_b = retry_handler(&w, &w.requests, &retry_dlq);

    // CANCELLED for attempt 1: SCHEDULED, one schedule from the persisted instant.
    let (r, m) = run!(handler_a, RESPONSE, event("response-cancelled.json"));
    assert!(failures(&r).is_empty());
    assert_eq!(w.status("TX-100200").await, Status::Scheduled);
    let live = w.scheduler.live();
    assert_eq!(live.len(), 1);
    assert_eq!(
        Some(live[0].fire_at),
        w.record("TX-100200").await.next_fire_at
    );
    assert_eq!(m.count(names::RESPONSE_CANCELLED), 1);
    assert_eq!(m.count(names::SCHEDULES_CREATED), 1);
    assert_eq!(m.count("AckScheduled"), 1);

    // The retry event: attempt 2 published with its key, IN_PROGRESS(2).
    w.set_time(live[0].fire_at);
    let (r, m) = run!(handler_b, RETRY, event("retry.json"));
    assert!(failures(&r).is_empty());
    let rec = w.record("TX-100200").await;
    assert_eq!(
        (rec.status, rec.current_attempt),
        (Status::InProgress, a(2))
    );
    assert_eq!(m.count(names::RETRIES_PUBLISHED), 1);
    let last = w.requests.messages().pop().unwrap();
    assert_eq!(last.idempotency_key.as_str(), "TX-100200#2");
    assert_eq!(
        last.payload.as_json(),
        r#"{"order":"TX-100200","amount":12.5}"#
    );

    // Delivered twice more (scheduler and reconciler): both dropped as duplicates.
    let (r, m) = run!(handler_b, RETRY, event("retry-duplicate.json"));
    assert!(failures(&r).is_empty());
    assert_eq!(m.count("DropDuplicateRetry"), 2);
    assert_eq!(m.count(names::REQUESTS_PUBLISHED), 0);

    // An event for an attempt that is not pending: stale.
    let (r, m) = run!(handler_b, RETRY, event("retry-stale.json"));
    assert!(failures(&r).is_empty());
    assert_eq!(m.count("DropStaleRetry"), 1);

    // A late response for attempt 1 changes nothing.
    let before = w.record("TX-100200").await;
    let (r, m) = run!(handler_a, RESPONSE, event("response-late.json"));
    assert!(failures(&r).is_empty());
    assert_eq!(w.record("TX-100200").await, before);
    assert_eq!(m.count("DropLateResponse"), 1);

    // A SUCCESS for attempt 1, answered CANCELLED before: changes nothing either, but
    // is a business alert (possible double execution).
    let (r, m) = run!(
        handler_a,
        RESPONSE,
        event("response-conflicting-success.json")
    );
    assert!(failures(&r).is_empty());
    assert_eq!(w.record("TX-100200").await, before);
    assert_eq!(m.count(names::CONFLICTING_SUCCESS), 1);
    assert_eq!(m.count("DropLateResponse"), 0);
    let trail = w
        .store
        .audit(&domain::TransactionId::parse("TX-100200").unwrap());
    let notice = trail.last().unwrap();
    assert_eq!(
        (
            notice.notice,
            notice.current_attempt.get(),
            notice.from,
            notice.to
        ),
        (
            Some(domain::audit::Notice::ConflictingSuccess),
            1,
            Some(Status::InProgress),
            Status::InProgress
        ),
        "the audit trail names the attempt answered SUCCESS: {trail:?}"
    );

    // SUCCESS.
    let (r, m) = run!(handler_a, RESPONSE, event("response-success.json"));
    assert!(failures(&r).is_empty());
    assert_eq!(w.status("TX-100300").await, Status::Succeeded);
    assert_eq!(m.count(names::RESPONSE_SUCCESS), 1);

    // Unknown transaction and malformed body: permanent, to the DLQ unchanged, acked.
    let m = Metrics::new("DeferredRetry", "response-handler");
    let unknown = event("response-unknown.json");
    let r = handler_a.handle_event(unknown.clone(), &m).await.unwrap();
    assert!(failures(&r).is_empty());
    assert_eq!(m.count("PermanentErrorUnknownTransaction"), 1);
    let malformed = event("response-malformed.json");
    let r = handler_a.handle_event(malformed.clone(), &m).await.unwrap();
    assert!(failures(&r).is_empty());
    assert_eq!(m.count("PermanentErrorMalformedBody"), 1);
    assert_eq!(
        response_dlq.messages(),
        vec![
            undeliverable(&unknown.records[0]),
            undeliverable(&malformed.records[0])
        ],
        "the original messages, body and attributes unchanged"
    );

    // The mixed batch: only the malformed record is affected, and it ends in the DLQ
    // unchanged; its neighbours are handled normally.
    let m = Metrics::new("DeferredRetry", "response-handler");
    let mixed = event("response-mixed.json");
    let r = handler_a.handle_event(mixed.clone(), &m).await.unwrap();
    assert!(failures(&r).is_empty());
    assert_eq!(
        w.status("TX-100400").await,
        Status::Succeeded,
        "EXITOSO is SUCCESS"
    );
    assert_eq!(w.status("TX-100500").await, Status::Scheduled);
    assert_eq!(m.count("DropLateResponse"), 1);
    assert_eq!(m.count(names::PERMANENT_ERRORS), 1);
    let dlq = response_dlq.messages();
    assert_eq!(dlq.len(), 3);
    assert_eq!(dlq[2], undeliverable(&mixed.records[1]));
    assert_eq!(
        dlq[2].attributes["trace_id"].string_value.as_deref(),
        Some("trace-7f3a")
    );

    // A malformed retry event goes to the retry queue's DLQ.
    let m = Metrics::new("DeferredRetry", "retry-handler");
    let bad = event("retry-malformed.json");
    let r = handler_b.handle_event(bad.clone(), &m).await.unwrap();
    assert!(failures(&r).is_empty());
    assert_eq!(
        retry_dlq.messages(),
        bad.records.iter().map(undeliverable).collect::<Vec<_>>()
    );

    // The cron event: TX-100500 is SCHEDULED and its schedule never delivers; once
    // its instant is past the threshold the reconciler requeues its retry event.
    let fire = w.record("TX-100500").await.next_fire_at.unwrap();
    w.set_time(fire.plus_millis(16 * 60 * 1000));
    let reconciler = reconciler(&w, None);
    let cron: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(format!(
            "{}/events/{}",
            env!("CARGO_MANIFEST_DIR"),
            "cron.json"
        ))
        .unwrap(),
    )
    .unwrap();
    let report = reconciler.invoke(cron).await.unwrap();
    assert_eq!(
        report.count(
            Status::Scheduled,
            reconciler::Action::Done(domain::decide::Ack::ReconcilerRequeued)
        ),
        1,
        "{report:?}"
    );
    // The other record the index returns is TX-100200, IN_PROGRESS(2) since the
    // retry above and long before its answer deadline: its entry only moves there.
    assert_eq!(
        report.count(
            Status::InProgress,
            reconciler::Action::Done(domain::decide::Ack::ReconcilerAwaiting)
        ),
        1,
        "{report:?}"
    );
    assert_eq!(report.examined, 2);
    let requeued = w.retries.drain();
    assert_eq!(requeued.len(), 1);
    assert_eq!(requeued[0].transaction_id.as_str(), "TX-100500");

    // Audit rows of TX-100200: one per transition, the notice of the conflicting
    // SUCCESS for attempt 1 and the reconciler's move of its index entry to the
    // answer deadline included.
    let mut want: Vec<&str> = testkit::trail::TO_ATTEMPT_2.to_vec();
    want.push("IN_PROGRESS>IN_PROGRESS@1");
    want.push("IN_PROGRESS>IN_PROGRESS@2");
    assert_eq!(w.audit_path("TX-100200").await, want);
}

/// Technical failures through the response handler: ERROR (with the service's wait)
/// and its Spanish alias ERROR_TECNICO re-send attempt 1 under a schedule of its own,
/// counted as `TechnicalFailures`, the attempt not consumed; a `retry_after_seconds`
/// out of range goes to the DLQ unchanged.
#[tokio::test]
async fn the_technical_error_event_files_through_the_response_handler() {
    let w = started(&["TX-100600", "TX-100700"]).await;
    let dlq = MemoryDeadLetter::new();
    let handler_a = response_handler(&w, &dlq);
    let (r, m) = run!(handler_a, RESPONSE, event("response-error.json"));
    assert!(failures(&r).is_empty());
    assert_eq!(m.count(names::TECHNICAL_FAILURES), 2);
    assert_eq!(m.count("AckResend"), 2);
    assert_eq!(m.count(names::SCHEDULES_CREATED), 2);
    for tx in ["TX-100600", "TX-100700"] {
        let rec = w.record(tx).await;
        assert_eq!(
            (
                rec.status,
                rec.current_attempt,
                rec.next_attempt,
                rec.counts[Counter::Round]
            ),
            (Status::Scheduled, a(1), Some(a(1)), 1),
            "{tx}"
        );
        let name = format!("retry-{tx}-1.1");
        assert_eq!(rec.schedule_name.unwrap().as_str(), name);
    }
    // The service asked for 120 s, longer than the first re-send's 54–66 s.
    let asked = w.record("TX-100600").await.next_fire_at.unwrap();
    assert_eq!(asked, w.now().plus_millis(120_000).ceil_to_second());
    let backoff = w.record("TX-100700").await.next_fire_at.unwrap();
    assert!(backoff >= w.now().plus_millis(54_000) && backoff <= w.now().plus_millis(67_000));
    assert!(dlq.messages().is_empty());

    let m = Metrics::new("DeferredRetry", "response-handler");
    let invalid = event("response-error-invalid.json");
    let r = handler_a.handle_event(invalid.clone(), &m).await.unwrap();
    assert!(failures(&r).is_empty());
    assert_eq!(m.count("PermanentErrorMalformedBody"), 1);
    assert_eq!(m.count(names::TECHNICAL_FAILURES), 0);
    assert_eq!(dlq.messages(), vec![undeliverable(&invalid.records[0])]);
    assert_eq!(
        w.record("TX-100600").await.counts[Counter::Round],
        1,
        "nothing changed"
    );
}

/// An outage through the functions with a circuit breaker: the response handler's
/// batch of two ERROR answers opens it (min 2 answers, half of them technical); the
/// retry events of the two re-sends, due while it is open, are held — each back on
/// the retry queue delayed to the end of the cool-down or later, the record
/// untouched, nothing published, nothing consumed; a copy of an event is held the
/// same way; once the cool-down is over, a retry event is a probe and goes out; its
/// SUCCESS closes the breaker.
#[tokio::test]
async fn an_outage_opens_the_breaker_and_retries_wait_instead_of_going_out() {
    let w = started(&["TX-100600", "TX-100700"]).await;
    let settings = domain::breaker::BreakerSettings {
        min_calls: 2,
        cooldown: Duration::from_secs(300),
        probes: 1,
        ..domain::breaker::BreakerSettings::default()
    };
    let shared = Arc::new(MemoryBreaker::new(settings));
    let gate = |by: &str| Some(gate(&shared, settings, by));
    let dlq = MemoryDeadLetter::new();
    let mut handler_a = response_handler(&w, &dlq);
    handler_a.breaker = gate("response-handler");
    let (r, m) = run!(handler_a, RESPONSE, event("response-error.json"));
    assert!(failures(&r).is_empty());
    assert_eq!(m.count(names::BREAKER_OPENED), 1, "{:?}", m.snapshot());
    assert_eq!(m.count(names::BREAKER_STATE), 2, "open");
    let opened = shared.breaker();
    let domain::breaker::BreakerState::Open { until, .. } = opened.state else {
        panic!("not open: {opened:?}");
    };

    let mut handler_b = retry_handler(&w, &w.requests, &dlq);
    handler_b.breaker = gate("retry-handler");
    let published = w.keys().await.len();
    let retry_of = |tx: &str| -> SqsEvent {
        let body = RetryEvent {
            transaction_id: id(tx),
            origin: domain::Origin::RetryScheduler,
            attempt: a(1),
            round: None,
        }
        .to_json();
        serde_json::from_value(serde_json::json!({
            "Records": [{"messageId": format!("m-{tx}"), "body": body}]
        }))
        .unwrap()
    };
    // The re-sends come due (the service asked 120 s for one), the breaker still open.
    w.advance(Duration::from_secs(130));
    for tx in ["TX-100600", "TX-100700"] {
        let before = w.record(tx).await;
        let (r, m) = run!(handler_b, RETRY, retry_of(tx));
        assert!(failures(&r).is_empty());
        assert_eq!(m.count(names::RETRIES_PAUSED_BY_BREAKER), 1, "{tx}");
        assert_eq!(
            w.record(tx).await,
            before,
            "{tx}: held, the record untouched"
        );
        assert_eq!(before.status, Status::Scheduled);
    }
    assert_eq!(
        w.keys().await.len(),
        published,
        "nothing published while open"
    );
    // A copy of an event while the breaker is still open: deferred too, nothing
    // changes.
    let before = w.record("TX-100600").await;
    let (_, m) = run!(handler_b, RETRY, retry_of("TX-100600"));
    assert_eq!(m.count(names::RETRIES_PAUSED_BY_BREAKER), 1);
    assert_eq!(w.record("TX-100600").await, before);
    // Each held event is back on the retry queue, delayed to the probe instant or
    // later (within SQS's 15 minutes), the same attempt and round.
    let held = w.retries.delayed();
    assert_eq!(held.len(), 3);
    let now = w.now();
    for (ev, delay) in &held {
        assert_eq!((ev.attempt, ev.round), (a(1), None));
        assert!(
            now.plus_millis(i64::from(*delay) * 1_000) >= until,
            "{delay} s"
        );
        assert!(*delay <= 900);
    }

    // The cool-down is over and the held events are delivered: the first is the
    // round's one probe, the second is held again.
    w.set_time(until.plus_millis(1_000));
    let (_, m) = run!(handler_b, RETRY, retry_of("TX-100600"));
    assert_eq!(m.count(names::RETRIES_PAUSED_BY_BREAKER), 0);
    assert_eq!(w.status("TX-100600").await, Status::InProgress);
    assert_eq!(w.keys().await.len(), published + 1, "the probe went out");
    let (_, m) = run!(handler_b, RETRY, retry_of("TX-100700"));
    assert_eq!(
        m.count(names::RETRIES_PAUSED_BY_BREAKER),
        1,
        "one probe per round"
    );

    // The probe is answered: closed.
    let m = Metrics::new("DeferredRetry", "response-handler");
    let answer = domain::Response {
        transaction_id: id("TX-100600"),
        attempt: a(1),
        outcome: domain::Outcome::Success,
        reason: None,
        retry_after_seconds: None,
        round: None,
        execution: None,
    };
    let ev: SqsEvent = serde_json::from_value(serde_json::json!({
        "Records": [{"messageId": "m-answer", "body": answer.to_json()}]
    }))
    .unwrap();
    handler_a.handle_event(ev, &m).await.unwrap();
    assert_eq!(w.status("TX-100600").await, Status::Succeeded);
    assert_eq!(shared.breaker().state.name(), "CLOSED");
    assert_eq!(m.count(names::BREAKER_STATE), 0);
}

/// The shared breaker as `by` asks it, its view cached for 5 s.
fn gate(
    shared: &Arc<MemoryBreaker>,
    settings: domain::breaker::BreakerSettings,
    by: &str,
) -> runtime::breaker::BreakerGate<Arc<MemoryBreaker>> {
    runtime::breaker::BreakerGate::new(Arc::clone(shared), settings, Duration::from_secs(5), by)
}

/// A breaker with one probe per round, opened by an operator now.
async fn opened_by_operator(w: &World) -> (Arc<MemoryBreaker>, domain::breaker::BreakerSettings) {
    let settings = domain::breaker::BreakerSettings {
        probes: 1,
        ..domain::breaker::BreakerSettings::default()
    };
    let shared = Arc::new(MemoryBreaker::new(settings));
    let (open, change) = domain::breaker::Breaker::default().force(true, w.now(), &settings);
    let note = domain::ports::BreakerNote {
        at: w.now(),
        by: "operator".into(),
        change,
        reason: None,
    };
    assert!(domain::ports::BreakerWrites::save(
        &*shared,
        &domain::breaker::Breaker::default(),
        &open,
        &note
    )
    .await
    .unwrap());
    (shared, settings)
}

/// The retry handler's probe: a retry due while the breaker is HALF_OPEN goes out as
/// the round's probe, marked on the record (`BREAKER_PROBE`) and carrying its round;
/// the service, still down, answers it ERROR, echoing the round: counted among the
/// probe ERRORs, not a technical failure, so probe rounds never spend the
/// transaction's re-sends. In the next round a stale copy of the first retry event,
/// delivered first, spends no probe (the record is read before the breaker is asked):
/// the current event is the round's one probe. A copy of the first ERROR delivered
/// again once the next round is open is stale and changes nothing.
#[tokio::test]
async fn a_probe_answered_error_spends_no_resend() {
    let w = World::new();
    w.start("TX-100800", 3).await;
    w.respond("TX-100800", 1, Outcome::Cancelled).await;
    let (shared, settings) = opened_by_operator(&w).await;
    let gate = |by: &str| Some(gate(&shared, settings, by));
    // The retry and the cool-down are past: the retry is the round's probe.
    w.advance(Duration::from_secs(2 * 86_400));
    let due = w.fire_due().await;
    assert_eq!(due.len(), 1);
    assert_eq!(due[0].round, Some(0), "the cycle's round");
    let dlq = MemoryDeadLetter::new();
    let mut handler_b = retry_handler(&w, &w.requests, &dlq);
    handler_b.breaker = gate("retry-handler");
    let batch = |body: String| -> SqsEvent {
        serde_json::from_value(serde_json::json!({
            "Records": [{"messageId": "m-1", "body": body}]
        }))
        .unwrap()
    };
    run!(handler_b, RETRY, batch(due[0].to_json()));
    let probe = w.record("TX-100800").await;
    assert_eq!(
        (probe.status, probe.current_attempt, probe.mark),
        (Status::InProgress, a(2), Some(domain::machine::Mark::Probe))
    );
    let sent = w.requests.messages();
    let request = sent.last().unwrap();
    assert_eq!((request.attempt, request.round), (a(2), Some(0)));
    assert_eq!(shared.breaker().state.name(), "HALF_OPEN");

    // Down still: the probe is answered ERROR, the round echoed.
    let mut handler_a = response_handler(&w, &dlq);
    handler_a.breaker = gate("response-handler");
    let error = domain::Response {
        transaction_id: id("TX-100800"),
        attempt: a(2),
        outcome: Outcome::Error,
        reason: Some("HTTP_503".into()),
        retry_after_seconds: None,
        round: request.round,
        execution: None,
    };
    run!(handler_a, RESPONSE, batch(error.to_json()));
    let r = w.record("TX-100800").await;
    assert_eq!(
        (
            r.status,
            r.current_attempt,
            r.next_attempt,
            r.counts[Counter::Round],
            r.counts[Counter::ProbeErrors]
        ),
        (Status::Scheduled, a(2), Some(a(2)), 1, 1),
        "a probe's ERROR: no technical re-send spent"
    );
    assert_eq!(shared.breaker().state.name(), "OPEN", "the probe failed");
    // The next round's probe goes out (round 1); the first probe's ERROR delivered
    // again (round 0) is stale: nothing changes.
    w.advance(Duration::from_secs(2 * 86_400));
    let again = w.fire_due().await;
    assert_eq!(again[0].round, Some(1));
    let open = shared.breaker();
    let (_, m) = run!(handler_b, RETRY, batch(due[0].to_json()));
    assert_eq!(m.count("DropStaleCycle"), 1, "{:?}", m.snapshot());
    assert_eq!(shared.breaker(), open, "the stale event spent no probe");
    run!(handler_b, RETRY, batch(again[0].to_json()));
    let before = w.record("TX-100800").await;
    assert_eq!(
        (before.status, before.counts[Counter::Round]),
        (Status::InProgress, 1),
        "{before:?}"
    );
    let (_, m) = run!(handler_a, RESPONSE, batch(error.to_json()));
    assert_eq!(m.count("DropStaleError"), 1, "{:?}", m.snapshot());
    assert_eq!(w.record("TX-100800").await, before);
}

/// A silent outage with nothing left to retry: the breaker is OPEN past its
/// cool-down and the only requests in flight are unanswered. The reconciler's
/// republishes ask the breaker like the retry handler's requests: the first is the
/// half-open round's probe and goes out (spending no republish: it tests the service
/// for everyone), the rest wait for the next round (their deadlines move, no
/// republish spent) — so the breaker is probed, and closes when
/// the service answers, even though no retry comes due.
#[tokio::test]
async fn unanswered_requests_probe_an_open_breaker() {
    let w = started(&["TX-100600", "TX-100700"]).await;
    let (shared, settings) = opened_by_operator(&w).await;
    // Both deadlines and the cool-down are past.
    w.advance(Duration::from_secs(2 * 86_400));
    let published = w.keys().await.len();
    let reconciler = reconciler(&w, Some(gate(&shared, settings, "reconciler")));
    let m = Metrics::new("DeferredRetry", "reconciler");
    let report = reconciler.run(&m).await;
    let held = report.count(
        Status::InProgress,
        reconciler::Action::Done(domain::decide::Ack::ReconcilerHeld),
    );
    let probed = report.count(
        Status::InProgress,
        reconciler::Action::Done(domain::decide::Ack::ReconcilerProbed),
    );
    assert_eq!((probed, held), (1, 1), "{report:?}");
    assert_eq!(w.keys().await.len(), published + 1, "one probe went out");
    assert_eq!(shared.breaker().state.name(), "HALF_OPEN");
    let records = [w.record("TX-100600").await, w.record("TX-100700").await];
    // One held, one probe: neither spent a republish.
    for reason in ["BREAKER_HALF_OPEN", "BREAKER_PROBE"] {
        let with: Vec<_> = records
            .iter()
            .filter(|r| r.last_reason.as_deref() == Some(reason))
            .collect();
        assert_eq!(with.len(), 1, "{reason}: {records:?}");
        assert_eq!(with[0].counts[Counter::Republishes], 0, "{reason}");
    }
}

/// Every file of `tests/events` is one the tests above send through the functions.
#[test]
fn every_event_file_is_exercised() {
    let dir = format!("{}/events", env!("CARGO_MANIFEST_DIR"));
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    let source = include_str!("functions.rs");
    for f in &files {
        assert!(
            source.contains(&format!("\"{f}\"")),
            "tests/events/{f} is sent by no test of this file"
        );
    }
    assert!(files.len() >= 14, "{files:?}");
}

/// A store that fails (retryably) or panics for one transaction.
struct Faulty<'a> {
    inner: &'a MemoryStore,
    fail: &'static str,
    panic: &'static str,
}

impl Faulty<'_> {
    fn check(&self, id: &TransactionId) -> Result<(), PortError> {
        if id.as_str() == self.panic {
            panic!("adapter bug for {id}");
        }
        if id.as_str() == self.fail {
            return Err(PortError::retryable(
                "UpdateItem",
                "ProvisionedThroughputExceededException",
            ));
        }
        Ok(())
    }
}

/// The response handler's one store port, failing or panicking for one record each.
impl Transitions for Faulty<'_> {
    async fn transition(&self, w: &Write) -> Result<WriteOutcome, PortError> {
        self.check(&w.transaction_id)?;
        self.inner.transition(w).await
    }
}

/// In the mixed batch, a retryable store error on one record and a panic on another:
/// exactly those two are batch item failures; the malformed one still goes to the
/// DLQ; the others are done.
#[tokio::test]
async fn retryable_errors_and_panics_fail_only_their_records() {
    let w = started(&["TX-100200", "TX-100400", "TX-100500"]).await;
    let dlq = MemoryDeadLetter::new();
    let handler_a = ResponseHandler {
        store: Faulty {
            inner: &w.store,
            fail: "TX-100400",
            panic: "TX-100200",
        },
        scheduler: &w.scheduler,
        retries: &w.retries,
        notes: &w.store,
        breaker: None::<runtime::breaker::BreakerGate<Arc<MemoryBreaker>>>,
        function: SqsFunction {
            dead_letter: &dlq,
            clock: &w.clock,
            settings: w.settings.clone(),
            batch: BatchOptions { concurrency: 2 },
            seeds: Seeds::fixed(1),
            namespace: "DeferredRetry".into(),
        },
    };
    let m = Metrics::new("DeferredRetry", "response-handler");
    let mixed = event("response-mixed.json");
    let r = handler_a.handle_event(mixed.clone(), &m).await.unwrap();
    let ids: Vec<String> = mixed
        .records
        .iter()
        .map(|r| r.message_id.clone().unwrap())
        .collect();
    // Records: 0 TX-100400 (retryable), 1 malformed, 2 TX-100500 ok, 3 TX-100200 (panic).
    assert_eq!(failures(&r), vec![ids[0].clone(), ids[3].clone()]);
    assert_eq!(w.status("TX-100500").await, Status::Scheduled);
    assert_eq!(
        w.status("TX-100400").await,
        Status::InProgress,
        "untouched, retried later"
    );
    assert_eq!(dlq.messages(), vec![undeliverable(&mixed.records[1])]);
    assert_eq!(m.count(names::RECORD_PANICS), 1);
    assert_eq!(m.count(names::RETRYABLE_ERRORS), 2);
    // The same batch redelivered once the faults are gone: everything completes.
    let handler_a = response_handler(&w, &dlq);
    let retry: SqsEvent = serde_json::from_value(serde_json::json!({
        "Records": [mixed.records[0].clone(), mixed.records[3].clone()]
    }))
    .unwrap();
    let r = handler_a.handle_event(retry, &m).await.unwrap();
    assert!(failures(&r).is_empty());
    assert_eq!(w.status("TX-100400").await, Status::Succeeded);
}

/// A request publisher that notes the instant of every publish (tokio's clock).
struct Timed {
    inner: MemoryQueue<Request>,
    at: Mutex<Vec<tokio::time::Instant>>,
}

impl RequestPublisher for Timed {
    async fn publish(&self, r: &Request) -> Result<(), PortError> {
        self.at.lock().unwrap().push(tokio::time::Instant::now());
        self.inner.publish(r).await
    }
}

/// The outbound rate bound at the function level: 3 warm invocations of 10 retry
/// events each (BATCH_CONCURRENCY 10) with MAX_REQUESTS_PER_SECOND = 4, on tokio's
/// paused clock: no window [t, t + 1 s) holds more than 4 publishes, across the invocations
/// too (one pacer per process), and every request left.
#[tokio::test(start_paused = true)]
async fn the_retry_handler_never_exceeds_its_rate() {
    let w = World::new();
    let mut events = Vec::new();
    for i in 0..30 {
        let tx = format!("TX-R{i:02}");
        w.start(&tx, 3).await;
        w.respond(&tx, 1, domain::Outcome::Cancelled).await;
        events.push(RetryEvent {
            transaction_id: id(&tx),
            origin: domain::Origin::RetryScheduler,
            attempt: a(2),
            round: None,
        });
    }
    let origin = tokio::time::Instant::now();
    let pacer = Arc::new(Pacer::per_second(4.0).unwrap());
    let timed = Timed {
        inner: MemoryQueue::new(),
        at: Mutex::new(Vec::new()),
    };
    let dlq = MemoryDeadLetter::new();
    let mut handler_b = retry_handler(
        &w,
        Paced {
            inner: &timed,
            pacer: Arc::clone(&pacer),
            max_wait: Duration::from_secs(20),
        },
        &dlq,
    );
    handler_b.pacer = Some(Arc::clone(&pacer));
    w.advance(Duration::from_secs(3 * 86_400));
    for (n, chunk) in events.chunks(10).enumerate() {
        let records: Vec<serde_json::Value> = chunk
            .iter()
            .enumerate()
            .map(|(i, e)| {
                serde_json::json!({"messageId": format!("m-{n}-{i}"), "body": e.to_json()})
            })
            .collect();
        let ev: SqsEvent =
            serde_json::from_value(serde_json::json!({ "Records": records })).unwrap();
        let (r, m) = run!(handler_b, RETRY, ev);
        assert!(failures(&r).is_empty(), "invocation {n}");
        assert_eq!(m.count(names::RETRIES_PUBLISHED), 10);
        assert!(
            m.count(names::PACED_PUBLISHES) >= 9,
            "invocation {n}: {:?}",
            m.snapshot()
        );
    }
    let times = timed.at.lock().unwrap().clone();
    assert_eq!(times.len(), 30);
    assert_eq!(
        testkit::oracle::peak_in_window(&times, Duration::from_secs(1)),
        4
    );
    assert_eq!(
        tokio::time::Instant::now() - origin,
        Duration::from_millis(29 * 250),
        "paced, not dropped"
    );
    assert_eq!(timed.inner.len(), 30);
    assert!(w.store.records().iter().all(|r| r.current_attempt == a(2)));
}
