//! The bridge against a real HTTP server on 127.0.0.1: what goes out (method, path,
//! key, headers, the payload's bytes unchanged, the auth value), what comes back
//! (a 5xx, a slow endpoint past the timeout, 413, 422, a refused connection), and a
//! secret that cannot be read (messages kept).
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use domain::ports::PortError;
use domain::{Outcome, Response};
use http::{HeaderMap, HeaderName, Method};
use http_body_util::{BodyExt, Full};
use http_bridge::call::{Caller, Target};
use http_bridge::classify::{OperatorCases, Rules};
use http_bridge::secret::{Cached, Secret, SecretSource};
use http_bridge::{names, Answers, Bridge};
use hyper::body::{Bytes, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use runtime::batch::BatchOptions;
use runtime::metrics::{names as runtime_names, Metrics};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use testkit::memory::MemoryDeadLetter;

/// What the endpoint received.
#[derive(Debug, Clone)]
struct Received {
    method: Method,
    path: String,
    headers: HeaderMap,
    body: Bytes,
}

/// The endpoint's answer to every request: status, headers, body, delay.
#[derive(Debug, Clone)]
struct Script {
    status: u16,
    headers: Vec<(&'static str, String)>,
    body: String,
    delay: Duration,
}

fn script(status: u16) -> Script {
    Script {
        status,
        headers: Vec::new(),
        body: String::new(),
        delay: Duration::ZERO,
    }
}

/// A loopback HTTP/1.1 server answering every request by `script`.
async fn serve(script: Script) -> (SocketAddr, Arc<Mutex<Vec<Received>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen: Arc<Mutex<Vec<Received>>> = Arc::default();
    let log = Arc::clone(&seen);
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let (log, script) = (Arc::clone(&log), script.clone());
            tokio::spawn(async move {
                let service = service_fn(move |req: http::Request<Incoming>| {
                    let (log, script) = (Arc::clone(&log), script.clone());
                    async move {
                        let (parts, body) = req.into_parts();
                        let body = body.collect().await?.to_bytes();
                        log.lock().unwrap().push(Received {
                            method: parts.method,
                            path: parts.uri.path().to_owned(),
                            headers: parts.headers,
                            body,
                        });
                        tokio::time::sleep(script.delay).await;
                        let mut b = http::Response::builder().status(script.status);
                        for (n, v) in &script.headers {
                            b = b.header(*n, v);
                        }
                        Ok::<_, hyper::Error>(b.body(Full::new(Bytes::from(script.body))).unwrap())
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    (addr, seen)
}

#[derive(Default)]
struct RecordedAnswers(Mutex<Vec<Response>>);

impl Answers for RecordedAnswers {
    async fn send(&self, response: &Response) -> Result<(), PortError> {
        self.0.lock().unwrap().push(response.clone());
        Ok(())
    }
}

/// A secret that reads `Ok(value)` or fails, counting reads.
struct FakeSecret(Result<&'static str, &'static str>, AtomicU32);

impl SecretSource for FakeSecret {
    async fn read(&self) -> Result<Secret, String> {
        self.1.fetch_add(1, Ordering::SeqCst);
        self.0.map(Secret::new).map_err(str::to_owned)
    }
    fn id(&self) -> &str {
        "arn:aws:secretsmanager:eu-west-1:1:secret:pay"
    }
}

type TestBridge = Bridge<RecordedAnswers, FakeSecret, MemoryDeadLetter>;

fn bridge(addr: SocketAddr, secret: Option<FakeSecret>, timeout: Duration) -> TestBridge {
    let target = Target {
        method: Method::POST,
        endpoint: format!("http://{addr}/payments/{{transaction_id}}"),
        headers: HeaderMap::from_iter([(
            HeaderName::from_static("x-api-version"),
            "2024-05-01".parse().unwrap(),
        )]),
        idempotency_header: HeaderName::from_static("idempotency-key"),
        auth_header: HeaderName::from_static("authorization"),
    };
    Bridge {
        caller: Caller::new(target, Duration::from_secs(1), timeout).unwrap(),
        rules: Rules::default(),
        answers: RecordedAnswers::default(),
        auth: secret.map(Cached::new),
        dead_letter: MemoryDeadLetter::new(),
        batch: BatchOptions::default(),
        namespace: "DeferredRetry".into(),
    }
}

fn ok_secret() -> Option<FakeSecret> {
    Some(FakeSecret(Ok("Bearer s3cr3t"), AtomicU32::new(0)))
}

/// The payload exactly as stored: spacing and `12.50` kept.
const PAYLOAD: &str = r#"{"order": "A-1",  "amount": 12.50}"#;

fn request_body(tx: &str, attempt: u32, round: u32) -> String {
    format!(
        r#"{{"transaction_id":"{tx}","attempt":{attempt},"idempotency_key":"{tx}#{attempt}","round":{round},"payload":{PAYLOAD}}}"#
    )
}

fn failures(r: &runtime::SqsBatchResponse) -> Vec<String> {
    r.batch_item_failures
        .iter()
        .map(|f| f.item_identifier.clone())
        .collect()
}

async fn run(b: &TestBridge, bodies: &[String]) -> (Vec<String>, Metrics) {
    let metrics = Metrics::new("DeferredRetry", "http-bridge");
    let r = b
        .handle_event(testkit::events::sqs(bodies), &metrics)
        .await
        .unwrap();
    (failures(&r), metrics)
}

fn answers(b: &TestBridge) -> Vec<Response> {
    b.answers.0.lock().unwrap().clone()
}

#[tokio::test]
async fn sends_the_stored_payload_with_the_key_and_answers_success() {
    let (addr, seen) = serve(script(201)).await;
    let b = bridge(addr, ok_secret(), Duration::from_secs(5));
    let (failed, metrics) = run(
        &b,
        &[request_body("TX 9/é", 3, 2), request_body("TX-2", 1, 0)],
    )
    .await;
    assert!(failed.is_empty(), "{failed:?}");
    let mut seen = seen.lock().unwrap().clone();
    seen.sort_by(|a, b| a.path.cmp(&b.path));
    assert_eq!(seen.len(), 2);
    let r = &seen[0];
    assert_eq!(r.method, Method::POST);
    assert_eq!(r.path, "/payments/TX%209%2F%C3%A9");
    assert_eq!(r.body, PAYLOAD.as_bytes(), "the payload's bytes unchanged");
    assert_eq!(
        r.headers["idempotency-key"].as_bytes(),
        "TX 9/é#3".as_bytes()
    );
    assert_eq!(r.headers["authorization"], "Bearer s3cr3t");
    assert_eq!(r.headers["x-api-version"], "2024-05-01");
    assert_eq!(r.headers["content-type"], "application/json");
    assert_eq!(seen[1].path, "/payments/TX-2");
    assert_eq!(seen[1].headers["idempotency-key"], "TX-2#1");
    let mut got = answers(&b);
    got.sort_by_key(|r| r.attempt);
    assert_eq!(got.len(), 2);
    assert_eq!(
        (got[1].outcome, got[1].round, got[1].attempt.get()),
        (Outcome::Success, Some(2), 3)
    );
    assert_eq!(got[1].transaction_id.as_str(), "TX 9/é");
    assert_eq!(metrics.count(names::HTTP_SUCCESS), 2);
}

fn secret_reads(b: &TestBridge) -> u32 {
    b.auth
        .as_ref()
        .map_or(0, |c| c.source().1.load(Ordering::SeqCst))
}

#[tokio::test]
async fn the_secret_is_read_once_per_environment() {
    let (addr, _) = serve(script(200)).await;
    let counter = FakeSecret(Ok("k"), AtomicU32::new(0));
    let b = bridge(addr, Some(counter), Duration::from_secs(5));
    run(&b, &[request_body("TX-1", 1, 0)]).await;
    run(
        &b,
        &[request_body("TX-2", 1, 0), request_body("TX-3", 1, 0)],
    )
    .await;
    assert_eq!(answers(&b).len(), 3);
    assert_eq!(secret_reads(&b), 1);
}

#[tokio::test]
async fn a_5xx_becomes_error_with_retry_after() {
    let mut s = script(503);
    s.headers.push(("retry-after", "120".into()));
    s.body = "upstream down".into();
    let (addr, _) = serve(s).await;
    let b = bridge(addr, None, Duration::from_secs(5));
    let (failed, metrics) = run(&b, &[request_body("TX-5", 2, 4)]).await;
    assert!(failed.is_empty());
    let got = answers(&b);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].outcome, Outcome::Error);
    assert_eq!(got[0].reason.as_deref(), Some("HTTP_503"));
    assert_eq!(got[0].retry_after_seconds, Some(120));
    assert_eq!(got[0].round, Some(4));
    assert_eq!(metrics.count(names::HTTP_ERROR), 1);
}

#[tokio::test]
async fn a_slow_endpoint_hits_the_timeout_and_answers_error() {
    let mut s = script(200);
    s.delay = Duration::from_secs(3);
    let (addr, seen) = serve(s).await;
    let b = bridge(addr, None, Duration::from_millis(300));
    let started = std::time::Instant::now();
    let (failed, metrics) = run(&b, &[request_body("TX-6", 1, 0)]).await;
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert!(failed.is_empty());
    assert_eq!(
        seen.lock().unwrap().len(),
        1,
        "the call went out: ambiguous"
    );
    let got = answers(&b);
    assert_eq!(got.len(), 1);
    assert_eq!(
        (got[0].outcome, got[0].reason.as_deref()),
        (Outcome::Error, Some("TIMEOUT"))
    );
    assert_eq!(metrics.count(names::HTTP_TIMEOUTS), 1);
}

#[tokio::test]
async fn a_refused_connection_answers_error() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    // The listener is dropped: nothing listens there any more.
    let b = bridge(port, None, Duration::from_secs(5));
    run(&b, &[request_body("TX-7", 1, 0)]).await;
    let got = answers(&b);
    assert_eq!(
        (got[0].outcome, got[0].reason.as_deref()),
        (Outcome::Error, Some("CONNECT"))
    );
}

#[tokio::test]
async fn a_secret_that_cannot_be_read_keeps_every_message() {
    let (addr, seen) = serve(script(200)).await;
    let denied = FakeSecret(
        Err("AccessDeniedException: not authorized"),
        AtomicU32::new(0),
    );
    let b = bridge(addr, Some(denied), Duration::from_secs(5));
    let bodies = [request_body("TX-8", 1, 0), request_body("TX-9", 1, 0)];
    let (failed, metrics) = run(&b, &bodies).await;
    assert_eq!(failed, ["m0", "m1"], "reported as batch item failures");
    assert!(
        seen.lock().unwrap().is_empty(),
        "nothing sent without the secret"
    );
    assert!(answers(&b).is_empty());
    assert!(b.dead_letter.messages().is_empty(), "not dead-lettered");
    assert_eq!(metrics.count(names::AUTH_SECRET_FAILURES), 2);
    assert_eq!(secret_reads(&b), 2, "a failed read is not kept");
    assert_eq!(metrics.count(runtime_names::RETRYABLE_ERRORS), 2);
}

#[tokio::test]
async fn a_body_too_large_and_a_reused_key_go_to_the_request_dlq() {
    for (status, body) in [
        (413, "payload too large"),
        (422, "key reused with another payload"),
    ] {
        let mut s = script(status);
        s.body = body.into();
        let (addr, _) = serve(s).await;
        let b = bridge(addr, None, Duration::from_secs(5));
        let sent = request_body("TX-10", 1, 0);
        let (failed, metrics) = run(&b, std::slice::from_ref(&sent)).await;
        assert!(failed.is_empty(), "acknowledged once dead-lettered");
        assert!(answers(&b).is_empty(), "{status}: no answer: never retried");
        let parked = b.dead_letter.messages();
        assert_eq!(parked.len(), 1);
        assert_eq!(parked[0].body, sent, "the request unchanged");
        assert_eq!(metrics.count(names::HTTP_OPERATOR_CASES), 1);
        assert_eq!(metrics.count(runtime_names::DEAD_LETTERED), 1);
    }
}

/// With `HTTP_OPERATOR_CASES=reject` the same 422 is answered REJECTED on the
/// response queue (round echoed) and nothing goes to the DLQ.
#[tokio::test]
async fn with_reject_a_reused_key_is_answered_rejected() {
    let mut s = script(422);
    s.body = "key reused with another payload".into();
    let (addr, _) = serve(s).await;
    let mut b = bridge(addr, None, Duration::from_secs(5));
    b.rules = Rules::default()
        .with_operator_cases(OperatorCases::Reject)
        .unwrap();
    let (failed, metrics) = run(&b, &[request_body("TX-11", 2, 1)]).await;
    assert!(failed.is_empty());
    let sent = answers(&b);
    assert_eq!(sent.len(), 1);
    assert_eq!(
        (sent[0].transaction_id.as_str(), sent[0].attempt.get()),
        ("TX-11", 2)
    );
    assert_eq!(sent[0].outcome, Outcome::Rejected);
    assert_eq!(sent[0].reason.as_deref(), Some("HTTP_422"));
    assert_eq!(
        (sent[0].round, sent[0].retry_after_seconds),
        (Some(1), None)
    );
    assert!(
        b.dead_letter.messages().is_empty(),
        "answered, not dead-lettered"
    );
    assert_eq!(metrics.count(names::HTTP_REJECTED), 1);
    assert_eq!(metrics.count(names::HTTP_OPERATOR_CASES), 0);
}

#[tokio::test]
async fn a_refused_secret_is_read_again() {
    let (addr, _) = serve(script(401)).await;
    let b = bridge(addr, ok_secret(), Duration::from_secs(5));
    run(&b, &[request_body("TX-11", 1, 0)]).await;
    run(&b, &[request_body("TX-12", 1, 0)]).await;
    assert_eq!(secret_reads(&b), 2, "forgotten after the 401");
    assert_eq!(b.dead_letter.messages().len(), 2, "401 is for the operator");
}

#[tokio::test]
async fn a_malformed_request_goes_to_the_dlq() {
    let (addr, seen) = serve(script(200)).await;
    let b = bridge(addr, None, Duration::from_secs(5));
    let (failed, _) = run(&b, &[r#"{"transaction_id":"TX-1","attempt":0}"#.to_owned()]).await;
    assert!(failed.is_empty());
    assert!(seen.lock().unwrap().is_empty());
    assert_eq!(b.dead_letter.messages().len(), 1);
}
