//! The simulated external service as an HTTP API on 127.0.0.1, for the HTTP bridge
//! (`retryctl demo --service http`).
//!
//! Its answers are those of the queue service ([`super::external`]), by the same seed
//! and mix, keyed by `Idempotency-Key` (a repeated key gets the answer already
//! given). On the wire: SUCCESS `200 {"status":"DONE"}`; CANCELLED `200` with the
//! reason in the body, read by [`CLASSIFICATION`]; an error outage `503` with
//! `Retry-After`; a lost answer, the connection closed after processing; silence,
//! the call held past the bridge's timeout; no readable key, `400` (`malformed`).
//! The table: `docs/http-bridge.md#running-it-locally`.

use super::external::{Behaviour, ExternalSettings, ExternalStats, Reply};
use super::stop::Stop;
use domain::ports::{Clock, SystemClock};
use domain::Outcome;
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// The path of the endpoint; the bridge replaces `{transaction_id}`.
pub const PATH_TEMPLATE: &str = "/transactions/{transaction_id}/attempts";

/// The bridge's `HTTP_CLASSIFICATION` for this service: a 2xx whose `/status` is the
/// cancel reason is CANCELLED with that reason; everything else follows the defaults.
pub fn classification(cancel_reason: &str) -> String {
    serde_json::json!({
        "body": [{
            "pointer": "/status",
            "from": 200,
            "to": 299,
            "values": {cancel_reason: {"outcome": "CANCELLED", "reason": cancel_reason}}
        }]
    })
    .to_string()
}

/// How long a call the service never answers is held (the bridge gives up first:
/// `HTTP_TIMEOUT_SECONDS` is at most 25 s).
const HOLD: Duration = Duration::from_secs(60);

/// The answer lost on the way back: the connection is closed without a response.
#[derive(Debug)]
struct AnswerLost;

impl std::fmt::Display for AnswerLost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the answer was lost after the request was processed")
    }
}

impl std::error::Error for AnswerLost {}

/// Starts the service on 127.0.0.1 (a port of its own); `settings`' queue fields are
/// not used. Returns its address, its task and its counters.
pub async fn spawn(
    settings: ExternalSettings,
    stop: Stop,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>, Arc<ExternalStats>)> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let stats = Arc::new(ExternalStats::default());
    let behaviour = Arc::new(Behaviour::new(settings, stats.clone()));
    let handle = tokio::spawn(accept(listener, behaviour, stop));
    Ok((addr, handle, stats))
}

async fn accept(listener: tokio::net::TcpListener, behaviour: Arc<Behaviour>, mut stop: Stop) {
    loop {
        let stream = tokio::select! {
            a = listener.accept() => match a {
                Ok((stream, _)) => stream,
                Err(e) => {
                    tracing::warn!(error = %e, "HTTP service: accept failed");
                    continue;
                }
            },
            () = stop.stopped() => return,
        };
        let (behaviour, mut stop, held) = (behaviour.clone(), stop.clone(), stop.clone());
        tokio::spawn(async move {
            let service = service_fn(move |req: http::Request<Incoming>| {
                let (behaviour, stop) = (behaviour.clone(), held.clone());
                async move { answer(&behaviour, req, stop).await }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service);
            tokio::select! {
                _ = conn => {}
                () = stop.stopped() => {}
            }
        });
    }
}

/// `<transaction_id>#<attempt>`, split at the last `#`.
fn key_parts(key: &str) -> Option<(&str, u32)> {
    let (id, attempt) = key.rsplit_once('#')?;
    Some((id, attempt.parse().ok().filter(|a| *a >= 1)?))
}

fn response(status: u16, body: String) -> http::Response<Full<Bytes>> {
    let mut r = http::Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = http::StatusCode::from_u16(status).unwrap_or(http::StatusCode::OK);
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    r
}

async fn answer(
    behaviour: &Behaviour,
    req: http::Request<Incoming>,
    mut stop: Stop,
) -> Result<http::Response<Full<Bytes>>, AnswerLost> {
    let stats = &behaviour.stats;
    let key = req
        .headers()
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .and_then(key_parts)
        .map(|(id, attempt)| (id.to_owned(), attempt));
    let Some((id, attempt)) = key else {
        stats.missing_key_attribute.fetch_add(1, Ordering::Relaxed);
        return Ok(response(
            400,
            r#"{"error":"Idempotency-Key <transaction_id>#<attempt> required"}"#.into(),
        ));
    };
    match behaviour
        .reply(&id, attempt, Some(SystemClock.now().millis()), None)
        .await
    {
        Reply::Silent => {
            // Never answered: the bridge's timeout ends the call.
            stop.sleep(HOLD).await;
            Err(AnswerLost)
        }
        Reply::Answer { twice: true, .. } => Err(AnswerLost),
        Reply::Answer {
            outcome,
            reason,
            retry_after,
            ..
        } => {
            stats.responses_sent.fetch_add(1, Ordering::Relaxed);
            Ok(match outcome {
                Outcome::Success => response(200, r#"{"status":"DONE"}"#.into()),
                Outcome::Cancelled => response(
                    200,
                    serde_json::json!({ "status": reason.unwrap_or_default() }).to_string(),
                ),
                Outcome::Error => {
                    let mut r = response(503, r#"{"error":"unavailable"}"#.into());
                    let seconds = retry_after.unwrap_or(Duration::ZERO).as_secs().max(1);
                    r.headers_mut()
                        .insert(http::header::RETRY_AFTER, http::HeaderValue::from(seconds));
                    r
                }
                // The operator case the bridge answers REJECTED with `reject`.
                Outcome::Rejected => {
                    response(422, r#"{"error":"key reused with another payload"}"#.into())
                }
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_is_split_at_its_last_hash() {
        assert_eq!(key_parts("TX-000001#3"), Some(("TX-000001", 3)));
        assert_eq!(key_parts("a#b#12"), Some(("a#b", 12)));
        assert_eq!(key_parts("TX-1#0"), None);
        assert_eq!(key_parts("TX-1"), None);
        assert_eq!(key_parts("TX-1#x"), None);
    }
}
