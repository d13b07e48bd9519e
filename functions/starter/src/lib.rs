//! The starter: reads start messages from the intake queue (`domain::intake`, schema
//! version 1) and starts each transaction exactly as the library operation
//! (`runtime::ops::start_transaction`) does: the domain's start plan — conditional
//! create of IN_PROGRESS attempt 1 with its payload, then the request with key
//! `<id>#1` — with the deployment's settings (default budget, answer timeout, index
//! shards and threshold). A repeated message is acknowledged (`already-started`;
//! attempt 1 published again only while it is still the current one, same key). A
//! message that can never start — malformed, or a repeat with another payload — is
//! a permanent error: logged naming the field and the value, sent unchanged to the
//! intake DLQ, acknowledged. Its first requests go through the outbound pacer
//! ([`runtime::rate`]); a burst of starts waits on the intake queue.
//! See `docs/intake.md`; its AWS wiring: [`wiring`].

use domain::decide::Input;
use domain::exec::StartPorts;
use domain::intake::StartMessage;
use domain::policy::RandomSource;
use domain::ports::{Clock, Creates, DeadLetter, Payloads, RequestPublisher, SystemClock};
use domain::{Context, Effect, MaxAttempts};
use runtime::batch::BatchError;
use runtime::drive::{drive, run_all, verdict};
use runtime::function::SqsFunction;
use runtime::metric::invocation;
use runtime::metrics::Metrics;
use runtime::rate::{self, Pacer};
use runtime::verdict::Verdict;
use runtime::{SqsBatchResponse, SqsEvent};
use std::sync::Arc;
use tracing::Instrument;

pub mod wiring;

/// The function's name (binary, `cargo lambda` function, metrics dimension).
pub const FUNCTION: &str = "starter";

/// Starts the transaction `message` asks for, over the start's ports; a message
/// without `max_attempts` gets `default_max_attempts` (the deployment's). `hook` may
/// stop the plan before an effect (tests).
pub async fn handle<St: Creates + Payloads, Rq: RequestPublisher>(
    ports: &StartPorts<'_, St, Rq>,
    message: &StartMessage,
    default_max_attempts: MaxAttempts,
    ctx: &Context,
    rng: &mut (dyn RandomSource + Send),
    hook: &mut (dyn FnMut(&Effect) -> bool + Send),
    metrics: &Metrics,
) -> Verdict {
    let input = Input::Start {
        transaction_id: message.transaction_id.clone(),
        payload: message.payload.clone(),
        max_attempts: message.max_attempts.unwrap_or(default_max_attempts),
        correlation_id: message.correlation_id.clone(),
    };
    let span = tracing::info_span!(
        "start",
        correlation_id = message
            .correlation_id
            .as_ref()
            .map(|c| c.as_str())
            .unwrap_or("")
    );
    let driven = drive(input, ports, ctx, rng, hook).instrument(span).await;
    verdict(&driven, metrics)
}

/// The starter with its ports, built once per process. `requests` is normally a
/// [`runtime::rate::Paced`] publisher; `pacer` is the same pacer, for its counters.
pub struct Starter<St, Rq, D, C = SystemClock> {
    pub store: St,
    pub requests: Rq,
    /// DEFAULT_MAX_ATTEMPTS.
    pub default_max_attempts: MaxAttempts,
    pub pacer: Option<Arc<Pacer>>,
    /// Its dead-letter queue is the intake DLQ.
    pub function: SqsFunction<D, C>,
}

impl<St, Rq, D, C> Starter<St, Rq, D, C>
where
    St: Creates + Payloads,
    Rq: RequestPublisher,
    D: DeadLetter,
    C: Clock,
{
    /// Processes one SQS batch of start messages, counting into `metrics`.
    pub async fn handle_event(
        &self,
        event: SqsEvent,
        metrics: &Metrics,
    ) -> Result<SqsBatchResponse, BatchError> {
        let batch = self.function.each(
            event,
            metrics,
            |message: StartMessage, ctx, mut rng| async move {
                let ports = StartPorts {
                    store: &self.store,
                    requests: &self.requests,
                };
                let max = self.default_max_attempts;
                handle(&ports, &message, max, &ctx, &mut rng, &mut run_all, metrics).await
            },
        );
        rate::counted(self.pacer.as_deref(), metrics, batch).await
    }

    /// One invocation: the batch, then the metrics line on stdout.
    pub async fn invoke(&self, event: SqsEvent) -> Result<SqsBatchResponse, BatchError> {
        invocation(&self.function.namespace, FUNCTION, async |m| {
            self.handle_event(event, m).await
        })
        .await
    }
}
