//! The HTTP bridge: the external service's consumer of the request queue, for a
//! service that speaks HTTP. Each request goes to the configured endpoint
//! ([`call`]): the stored payload's bytes unchanged as the body, header
//! `Idempotency-Key: <transaction_id>#<attempt>`, the static headers and the auth
//! header read from Secrets Manager or SSM ([`secret`]). The answer, or the failure
//! to get one, is classified ([`classify`]) and sent to the response queue with the
//! request's `round`; an answer that says the request can never succeed (422, 413,
//! other 4xx by default) sends the request unchanged to the request DLQ instead, for
//! the operator, or with `HTTP_OPERATOR_CASES=reject` is answered `REJECTED`. A secret that cannot be read, or a response that cannot be sent,
//! keeps the message (a batch item failure). See `docs/http-bridge.md`; its AWS
//! wiring: [`wiring`].

use crate::call::Caller;
use crate::classify::{classify, Classified, Rules};
use crate::secret::{Cached, SecretSource};
use domain::ports::{DeadLetter, PortError};
use domain::{Outcome, Request, Response};
use runtime::batch::{process_batch, BatchError, BatchOptions};
use runtime::metric::invocation;
use runtime::metrics::Metrics;
use runtime::verdict::{Permanent, PermanentReason, Verdict};
use runtime::{SqsBatchResponse, SqsEvent};
use std::future::Future;
use std::time::SystemTime;

pub mod call;
pub mod classify;
pub mod secret;
pub mod wiring;

/// The function's name (binary, `cargo lambda` function, metrics dimension).
pub const FUNCTION: &str = "http-bridge";

/// The bridge's own metrics.
pub mod names {
    /// Answers sent to the response queue, by outcome.
    pub const HTTP_SUCCESS: &str = "HttpSuccess";
    pub const HTTP_CANCELLED: &str = "HttpCancelled";
    pub const HTTP_ERROR: &str = "HttpError";
    /// Operator cases answered REJECTED (`HTTP_OPERATOR_CASES=reject`).
    pub const HTTP_REJECTED: &str = "HttpRejected";
    /// Calls that ran into the total timeout (their ERROR re-sends the same key).
    pub const HTTP_TIMEOUTS: &str = "HttpTimeouts";
    /// Requests the endpoint said can never succeed (to the request DLQ).
    pub const HTTP_OPERATOR_CASES: &str = "HttpOperatorCases";
    /// Records kept because the auth secret could not be read.
    pub const AUTH_SECRET_FAILURES: &str = "AuthSecretFailures";
}

/// Where answers go: the response queue.
pub trait Answers: Send + Sync {
    fn send(&self, response: &Response) -> impl Future<Output = Result<(), PortError>> + Send;
}

impl Answers for aws::sqs::SqsResponsePublisher {
    async fn send(&self, response: &Response) -> Result<(), PortError> {
        self.publish(response).await
    }
}

/// The bridge with its ports, built once per process.
pub struct Bridge<A, S, D> {
    pub caller: Caller,
    pub rules: Rules,
    /// The response queue.
    pub answers: A,
    /// The auth header's value; `None`: no auth header.
    pub auth: Option<Cached<S>>,
    /// The request DLQ.
    pub dead_letter: D,
    pub batch: BatchOptions,
    /// METRICS_NAMESPACE.
    pub namespace: String,
}

impl<A, S, D> Bridge<A, S, D>
where
    A: Answers,
    S: SecretSource,
    D: DeadLetter,
{
    /// One request: call, classify, answer.
    pub async fn handle(&self, request: Request, metrics: &Metrics) -> Verdict {
        let secret = match &self.auth {
            None => None,
            Some(auth) => match auth.get().await {
                Ok(s) => Some(s),
                Err(error) => {
                    metrics.incr(names::AUTH_SECRET_FAILURES);
                    return Verdict::Retry { error };
                }
            },
        };
        let http = match self.caller.build(&request, secret.as_ref()) {
            Ok(h) => h,
            Err(e @ call::Unsendable::Secret(_)) => {
                metrics.incr(names::AUTH_SECRET_FAILURES);
                return Verdict::Retry {
                    error: e.to_string(),
                };
            }
            Err(e @ call::Unsendable::Request(_)) => {
                return Verdict::Permanent(Permanent {
                    reason: PermanentReason::Unprocessable,
                    field: Some("transaction_id".to_owned()),
                    value: Some(request.transaction_id.to_string()),
                    detail: e.to_string(),
                })
            }
        };
        let reply = self.caller.send(http).await;
        if let (Some(auth), Ok(401 | 403)) = (&self.auth, reply.as_ref().map(|r| r.status)) {
            // Perhaps rotated: the next request reads the secret again.
            auth.forget().await;
        }
        if let Err(failure) = &reply {
            if *failure == classify::Transport::Timeout {
                metrics.incr(names::HTTP_TIMEOUTS);
            }
            tracing::warn!(failure = ?failure, "no HTTP answer");
        }
        let answer = reply
            .as_ref()
            .map(call::Reply::answer)
            .map_err(Clone::clone);
        match classify(&self.rules, &request, answer, SystemTime::now()) {
            Classified::Answer(response) => {
                if let Err(e) = self.answers.send(&response).await {
                    return Verdict::Retry {
                        error: e.to_string(),
                    };
                }
                let (metric, label) = match response.outcome {
                    Outcome::Success => (names::HTTP_SUCCESS, "answered-success"),
                    Outcome::Cancelled => (names::HTTP_CANCELLED, "answered-cancelled"),
                    Outcome::Error => (names::HTTP_ERROR, "answered-error"),
                    Outcome::Rejected => (names::HTTP_REJECTED, "answered-rejected"),
                };
                metrics.incr(metric);
                tracing::info!(
                    outcome = response.outcome.as_str(),
                    reason = response.reason.as_deref().unwrap_or(""),
                    "answer sent"
                );
                Verdict::Handled(label)
            }
            Classified::Operator(case) => {
                metrics.incr(names::HTTP_OPERATOR_CASES);
                Verdict::Permanent(Permanent {
                    reason: PermanentReason::Unprocessable,
                    field: Some("status".to_owned()),
                    value: Some(case.status.to_string()),
                    detail: format!(
                        "the endpoint answered {} ({}): never retried; body: {}",
                        case.status, case.reason, case.body
                    ),
                })
            }
        }
    }

    /// Processes one SQS batch of requests, counting into `metrics`.
    pub async fn handle_event(
        &self,
        event: SqsEvent,
        metrics: &Metrics,
    ) -> Result<SqsBatchResponse, BatchError> {
        process_batch(
            event,
            &self.batch,
            &self.dead_letter,
            metrics,
            |request: Request| self.handle(request, metrics),
        )
        .await
    }

    /// One invocation: the batch, then the metrics line on stdout.
    pub async fn invoke(&self, event: SqsEvent) -> Result<SqsBatchResponse, BatchError> {
        invocation(&self.namespace, FUNCTION, async |m| {
            self.handle_event(event, m).await
        })
        .await
    }
}
