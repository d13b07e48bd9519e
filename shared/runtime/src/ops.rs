//! Library operations for the services around the pattern (and `retryctl`): thin
//! wrappers that build a domain [`Run`] and execute it through the given ports.
//!
//! - [`start_transaction`] ([`start_correlated`] with a correlation id): conditional
//!   create of IN_PROGRESS attempt 1 with its payload, then the publish of attempt 1
//!   with key `<id>#1`. Repeating it is
//!   harmless; a repeat with a *different* payload publishes nothing and is refused.
//!   In outbox mode (the context's delivery) the record is created SENDING and nothing
//!   is published here: the publisher sends attempt 1.
//! - [`resolve`]: "resolved by other means": SCHEDULING or SCHEDULED → SUCCEEDED, then
//!   the schedule deleted (not found is fine).
//! - [`replay`]: reopen a FAILED transaction with more attempts (operator).

use crate::settings::Seeds;
use domain::decide::{Ack, DropReason, Input, Rejection};
use domain::exec::{execute, ExecError, Perform, ReplayPorts, ResolvePorts, StartPorts};
use domain::ports::{
    Creates, Payloads, Records, RequestPublisher, RetryPublisher, ScheduleDeleter, Transitions,
};
use domain::{
    Context, CorrelationId, Disposition, Effect, Known, MaxAttempts, Observed, Payload, Run,
    TransactionId,
};
use std::time::Duration;
use thiserror::Error;

/// Why an operation did not complete.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum OpError {
    /// The domain refused it (unknown transaction, different payload, wrong state…).
    #[error("{0}")]
    Rejected(Rejection),
    /// It changed nothing (never expected from these operations; reported as is).
    #[error("nothing done: {}", .0.label())]
    Dropped(DropReason),
    /// A port failed (retryable ones can simply be repeated: every step is idempotent).
    #[error(transparent)]
    Failed(#[from] ExecError),
}

impl OpError {
    /// True when repeating the same call may succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            OpError::Failed(ExecError::Port(e)) => e.is_retryable(),
            OpError::Failed(ExecError::Stopped(_)) => true,
            _ => false,
        }
    }
}

/// A completed operation: how it was acknowledged and what was performed.
#[derive(Debug, Clone, PartialEq)]
pub struct Done {
    pub ack: Ack,
    pub trail: Vec<(Effect, Observed)>,
}

impl Done {
    /// True when a request or retry event was published by this call.
    pub fn published(&self) -> bool {
        self.trail.iter().any(|(e, o)| {
            matches!(e, Effect::PublishRequest(_) | Effect::PublishRetry(_))
                && *o == Observed::Published
        })
    }
}

async fn run_op<P: Perform>(input: Input, ports: &P, ctx: &Context) -> Result<Done, OpError> {
    let mut rng = Seeds::from_entropy().next();
    let mut run = Run::new(input, Known::Unread, ctx, &mut rng);
    let result = execute(&mut run, ports, ctx, &mut rng, &mut |_| true).await;
    for (effect, observed) in run.trail() {
        if let (Effect::PublishRequest(h), Observed::Published) = (effect, observed) {
            tracing::info!(
                transaction_id = %h.transaction_id,
                attempt = h.attempt.get(),
                correlation_id = h.correlation_id.as_ref().map(|c| c.as_str()),
                "request published"
            );
        }
    }
    match result? {
        Disposition::Ack(ack) => Ok(Done {
            ack,
            trail: run.trail().to_vec(),
        }),
        Disposition::Drop(d) => Err(OpError::Dropped(d)),
        Disposition::Reject(r) => Err(OpError::Rejected(r)),
    }
}

/// Starts a transaction: `Ack::Started`, or `Ack::AlreadyStarted` on a repeat with the
/// same payload (attempt 1 is published again only while it is still the current
/// one: same key, the service dedupes). A repeat with another payload is
/// `Err(Rejected(PayloadMismatch))` and publishes nothing.
///
/// `answer_timeout` is the deployment's answer timeout (`AnswerTimeoutSeconds`, the
/// functions' `ANSWER_TIMEOUT_SECONDS`): the record's first answer deadline is the
/// start plus it, whatever `ctx` carries, so no starter writes the built-in default
/// without naming it. No correlation id: [`start_correlated`] takes one.
pub async fn start_transaction<St, Rq>(
    ports: &StartPorts<'_, St, Rq>,
    id: TransactionId,
    payload: Payload,
    max_attempts: MaxAttempts,
    answer_timeout: Duration,
    ctx: &Context,
) -> Result<Done, OpError>
where
    St: Creates + Payloads,
    Rq: RequestPublisher,
{
    start_correlated(ports, id, payload, max_attempts, None, answer_timeout, ctx).await
}

/// [`start_transaction`] with the producer's `correlation_id`: stored on the record
/// and carried in every request of the transaction (a repeat keeps the first start's).
pub async fn start_correlated<St, Rq>(
    ports: &StartPorts<'_, St, Rq>,
    id: TransactionId,
    payload: Payload,
    max_attempts: MaxAttempts,
    correlation_id: Option<CorrelationId>,
    answer_timeout: Duration,
    ctx: &Context,
) -> Result<Done, OpError>
where
    St: Creates + Payloads,
    Rq: RequestPublisher,
{
    let input = Input::Start {
        transaction_id: id,
        payload,
        max_attempts,
        correlation_id,
    };
    let ctx = ctx
        .clone()
        .with_answer_deadline(answer_timeout, ctx.rules.answer_republish_max);
    run_op(input, ports, &ctx).await
}

/// Resolved by other means: `Ack::Resolved` or `Ack::AlreadyResolved`.
pub async fn resolve<St, Sc>(
    ports: &ResolvePorts<'_, St, Sc>,
    id: TransactionId,
    ctx: &Context,
) -> Result<Done, OpError>
where
    St: Records + Transitions,
    Sc: ScheduleDeleter,
{
    run_op(Input::Resolve(id), ports, ctx).await
}

/// Operator replay of a FAILED transaction with `budget` more attempts:
/// `Ack::Replayed`.
pub async fn replay<St, Rt>(
    ports: &ReplayPorts<'_, St, Rt>,
    id: TransactionId,
    budget: u32,
    ctx: &Context,
) -> Result<Done, OpError>
where
    St: Records + Transitions,
    Rt: RetryPublisher,
{
    run_op(
        Input::Replay {
            transaction_id: id,
            budget,
        },
        ports,
        ctx,
    )
    .await
}
