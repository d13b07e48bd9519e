//! The retry handler (B): reads retry events from the retry queue and runs the
//! domain's retry plans (stale and duplicate events dropped; SCHEDULING accepted;
//! SENDING resumed; the request published with key `<id>#<m>` through the pacer,
//! [`runtime::rate`]; SENDING → IN_PROGRESS).
//!
//! With a circuit breaker ([`BreakerGate`]) an event that would publish asks it
//! first; while it holds requests back the retry event is deferred on the retry queue
//! until the resume instant, the record untouched. While it may hand out a probe the
//! record is read first ([`domain::decide::retry_asks_breaker`]). Why and how:
//! `docs/functions.md#retry-handler-b`; its AWS wiring: [`wiring`].

use domain::decide::{retry_asks_breaker, Input, Rules};
use domain::exec::RetryPorts;
use domain::policy::RandomSource;
use domain::ports::{
    Clock, DeadLetter, Payloads, Records, RequestPublisher, RetryPublisher, SystemClock,
    Transitions,
};
use domain::{Context, Effect, Known, RetryEvent};
use runtime::batch::BatchError;
use runtime::breaker::{BreakerGate, BreakerStore};
use runtime::drive::{drive_from, run_all, verdict};
use runtime::function::SqsFunction;
use runtime::metric::invocation;
use runtime::metrics::Metrics;
use runtime::rate::{self, Pacer};
use runtime::verdict::Verdict;
use runtime::{SqsBatchResponse, SqsEvent};
use std::sync::Arc;

pub mod wiring;

/// The function's name (binary, `cargo lambda` function, metrics dimension).
pub const FUNCTION: &str = "retry-handler";

/// Handles one parsed retry event: the core, over the ports B has (conditional
/// writes, payload reads, request publishes, the retry queue for a held event),
/// decided from what is `known` of the record (usually unread). `ctx` carries the
/// breaker's hold, if any. `hook` may stop the plan before an effect (tests).
pub async fn handle<St: Transitions + Payloads, Rq: RequestPublisher, Rt: RetryPublisher>(
    ports: &RetryPorts<'_, St, Rq, Rt>,
    event: &RetryEvent,
    known: Known<'_>,
    ctx: &Context,
    rng: &mut (dyn RandomSource + Send),
    hook: &mut (dyn FnMut(&Effect) -> bool + Send),
    metrics: &Metrics,
) -> Verdict {
    let driven = drive_from(Input::Retry(event.clone()), known, ports, ctx, rng, hook).await;
    verdict(&driven, metrics)
}

/// The retry handler with its ports, built once per process. `requests` is normally
/// a [`runtime::rate::Paced`] publisher; `pacer` is the same pacer, for its counters.
/// `breaker`: the circuit breaker of the external service (`None`: requests always
/// go out).
pub struct RetryHandler<St, Rq, Rt, Br, D, C = SystemClock> {
    pub store: St,
    pub requests: Rq,
    /// The retry queue, for an event the breaker holds back (deferred).
    pub retries: Rt,
    pub breaker: Option<BreakerGate<Br>>,
    pub pacer: Option<Arc<Pacer>>,
    /// Its dead-letter queue is the retry DLQ.
    pub function: SqsFunction<D, C>,
}

impl<St, Rq, Rt, Br, D, C> RetryHandler<St, Rq, Rt, Br, D, C>
where
    St: Transitions + Payloads + Records,
    Rq: RequestPublisher,
    Rt: RetryPublisher,
    Br: BreakerStore,
    D: DeadLetter,
    C: Clock,
{
    /// Processes one SQS batch, counting into `metrics`.
    pub async fn handle_event(
        &self,
        event: SqsEvent,
        metrics: &Metrics,
    ) -> Result<SqsBatchResponse, BatchError> {
        let batch = self.function.each(
            event,
            metrics,
            |retry: RetryEvent, ctx, mut rng| async move {
                let now = ctx.now;
                // While the breaker may let this request out as a probe, the record is
                // read first: only an event that would publish asks (a stale or
                // duplicate one, or one past its deadline, spends no probe of the
                // round), and the run decides from that record.
                // `None`: not read (or unreadable: decided blind and asked, as before).
                let read = match &self.breaker {
                    Some(gate) if gate.may_probe(now).await => {
                        self.store.get(&retry.transaction_id).await.ok()
                    }
                    _ => None,
                };
                let known = match &read {
                    Some(Some(r)) => Known::Record(r),
                    Some(None) => Known::Missing,
                    None => Known::Unread,
                };
                let asks = match known {
                    Known::Record(r) => retry_asks_breaker(&Rules, r, &retry, &ctx),
                    Known::Missing => false,
                    Known::Unread => true,
                };
                let (hold, probe) = match &self.breaker {
                    Some(gate) if asks => gate.admission(now, &mut rng, metrics).await,
                    _ => (None, false),
                };
                let ctx = ctx.with_hold(hold).with_probe(probe);
                let ports = RetryPorts {
                    store: &self.store,
                    requests: &self.requests,
                    retries: &self.retries,
                };
                handle(&ports, &retry, known, &ctx, &mut rng, &mut run_all, metrics).await
            },
        );
        let result = rate::counted(self.pacer.as_deref(), metrics, batch).await;
        if let Some(gate) = &self.breaker {
            gate.gauge(self.function.clock.now(), metrics).await;
        }
        result
    }

    /// One invocation: the batch, then the metrics line on stdout.
    pub async fn invoke(&self, event: SqsEvent) -> Result<SqsBatchResponse, BatchError> {
        invocation(&self.function.namespace, FUNCTION, async |m| {
            self.handle_event(event, m).await
        })
        .await
    }
}
