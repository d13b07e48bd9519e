//! The response handler (A): reads the external service's answers from the response
//! queue and runs the domain's response plans (late responses dropped by attempt;
//! SCHEDULING persisted before the schedule is created from the persisted instant;
//! "already exists" and a failed condition on the way to SCHEDULED are success;
//! FAILED raises the business alert).
//!
//! With a circuit breaker, the batch's answers are its signals, as the domain's plans
//! give them (`Effect::Signal`: only an answer its record takes; SUCCESS and CANCELLED
//! say the service is up — the probe's answer alone closes a half-open breaker —,
//! ERROR that it failed technically). They are counted once per batch (one write),
//! and the breaker moves when they change it.
//! See `docs/functions.md#response-handler-a`; its AWS wiring: [`wiring`].

use domain::breaker::Tally;
use domain::decide::Input;
use domain::exec::ResponsePorts;
use domain::policy::RandomSource;
use domain::ports::{
    AuditNotes, Clock, DeadLetter, RetryPublisher, ScheduleCreator, SystemClock, Transitions,
};
use domain::{Context, Effect, Observed, Outcome, Response};
use runtime::batch::BatchError;
use runtime::breaker::{BreakerGate, BreakerStore};
use runtime::drive::{drive, run_all, verdict};
use runtime::function::SqsFunction;
use runtime::metric::invocation;
use runtime::metrics::{names, Metrics};
use runtime::verdict::Verdict;
use runtime::{SqsBatchResponse, SqsEvent};
use std::sync::Mutex;

pub mod wiring;

/// The function's name (binary, `cargo lambda` function, metrics dimension).
pub const FUNCTION: &str = "response-handler";

/// Handles one parsed response: the core, over the ports A has (conditional writes,
/// schedule creation, the retry queue for an instant already past). `hook` may stop
/// the plan before an effect (tests simulate crashes). Returns the verdict and the
/// breaker signals the plan gave (counted once per batch by the caller).
pub async fn handle<St: Transitions, Sc: ScheduleCreator, Rt: RetryPublisher, Nt: AuditNotes>(
    ports: &ResponsePorts<'_, St, Sc, Rt, Nt>,
    response: &Response,
    ctx: &Context,
    rng: &mut (dyn RandomSource + Send),
    hook: &mut (dyn FnMut(&Effect) -> bool + Send),
    metrics: &Metrics,
) -> (Verdict, Tally) {
    metrics.incr(match response.outcome {
        Outcome::Success => names::RESPONSE_SUCCESS,
        Outcome::Cancelled => names::RESPONSE_CANCELLED,
        Outcome::Error => names::TECHNICAL_FAILURES,
        Outcome::Rejected => names::RESPONSE_REJECTED,
    });
    let driven = drive(Input::Response(response.clone()), ports, ctx, rng, hook).await;
    let mut signals = Tally::default();
    for (effect, observed) in driven.run.trail() {
        if let (Effect::Signal(s), Observed::Signalled) = (effect, observed) {
            signals.add(*s);
        }
    }
    (verdict(&driven, metrics), signals)
}

/// The response handler with its ports, built once per process.
pub struct ResponseHandler<St, Sc, Rt, Nt, Br, D, C = SystemClock> {
    pub store: St,
    pub scheduler: Sc,
    /// The retry queue (RETRY_QUEUE_URL), for a retry whose instant has passed.
    pub retries: Rt,
    /// The audit table (AUDIT_TABLE), for a conflicting SUCCESS's entry.
    pub notes: Nt,
    /// The circuit breaker the answers feed (`None`: no breaker).
    pub breaker: Option<BreakerGate<Br>>,
    /// Its dead-letter queue is the response DLQ.
    pub function: SqsFunction<D, C>,
}

impl<St, Sc, Rt, Nt, Br, D, C> ResponseHandler<St, Sc, Rt, Nt, Br, D, C>
where
    St: Transitions,
    Sc: ScheduleCreator,
    Rt: RetryPublisher,
    Nt: AuditNotes,
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
        let signals = Mutex::new(Tally::default());
        let signals = &signals;
        let result = self
            .function
            .each(
                event,
                metrics,
                |response: Response, ctx, mut rng| async move {
                    let ports = ResponsePorts {
                        store: &self.store,
                        scheduler: &self.scheduler,
                        retries: &self.retries,
                        notes: &self.notes,
                    };
                    let (verdict, given) =
                        handle(&ports, &response, &ctx, &mut rng, &mut run_all, metrics).await;
                    let mut tally = signals.lock().unwrap_or_else(|e| e.into_inner());
                    *tally = tally.plus(given);
                    verdict
                },
            )
            .await;
        if let Some(gate) = &self.breaker {
            let tally = *signals.lock().unwrap_or_else(|e| e.into_inner());
            let now = self.function.clock.now();
            gate.observe_counted(&tally, now, metrics).await;
            gate.gauge(now, metrics).await;
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
