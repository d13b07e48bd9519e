//! The executor: performs a [`Run`]'s effects through ports until it is done.
//!
//! Generic over the ports and free of any async runtime, so the Lambda handlers, the
//! local stack and `retryctl` all drive plans through this one loop. A `hook` sees
//! every effect before it is performed and may stop the run there: that is how tests
//! simulate a crash between two effects.

use crate::decide::{
    Context, Decide, Disposition, Effect, Observed, Run, Step, UnexpectedObservation,
};
use crate::message::Request;
use crate::policy::RandomSource;
use crate::ports::{
    CreateOutcome, PortError, RequestPublisher, RetryPublisher, ScheduleCreated, ScheduleDeleted,
    Scheduler, StateStore, WriteOutcome,
};
use thiserror::Error;

/// The ports a function has. Functions pass [`crate::ports::Unwired`] for the ones
/// they do not have.
#[derive(Debug, Clone, Copy)]
pub struct Ports<'a, St, Sc, Rq, Rt> {
    pub store: &'a St,
    pub scheduler: &'a Sc,
    pub requests: &'a Rq,
    pub retries: &'a Rt,
}

/// Why a run stopped before its disposition.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ExecError {
    #[error(transparent)]
    Port(#[from] PortError),
    /// The hook stopped the run before this effect (a simulated crash).
    #[error("stopped before `{0}`")]
    Stopped(&'static str),
    #[error(transparent)]
    Unexpected(#[from] UnexpectedObservation),
}

impl<St, Sc, Rq, Rt> Ports<'_, St, Sc, Rq, Rt>
where
    St: StateStore,
    Sc: Scheduler,
    Rq: RequestPublisher,
    Rt: RetryPublisher,
{
    /// Performs one effect. Terminal effects are not performed (the run ends on them).
    pub async fn perform(&self, effect: &Effect) -> Result<Observed, PortError> {
        Ok(match effect {
            Effect::Read(id) => Observed::Record(self.store.get(id).await?),
            Effect::Create { record, payload } => match self.store.create(record, payload).await? {
                CreateOutcome::Created => Observed::Created,
                CreateOutcome::AlreadyExists {
                    record,
                    same_payload,
                } => Observed::AlreadyExists {
                    record,
                    same_payload,
                },
            },
            Effect::Write(w) => match self.store.transition(w).await? {
                WriteOutcome::Written(r) => Observed::Written(r),
                WriteOutcome::ConditionFailed(r) => Observed::ConditionFailed(r),
            },
            Effect::CreateSchedule(spec) => match self.scheduler.create(spec).await? {
                ScheduleCreated::Created => Observed::ScheduleCreated,
                ScheduleCreated::AlreadyExists => Observed::ScheduleAlreadyExists,
            },
            Effect::DeleteSchedule(name) => match self.scheduler.delete(name).await? {
                ScheduleDeleted::Deleted => Observed::ScheduleDeleted,
                ScheduleDeleted::NotFound => Observed::ScheduleNotFound,
            },
            Effect::PublishRequest(h) => {
                let payload = self
                    .store
                    .payload(&h.transaction_id)
                    .await?
                    .ok_or_else(|| {
                        PortError::permanent(
                            "GetItem",
                            format!("no stored payload for transaction `{}`", h.transaction_id),
                        )
                    })?;
                let request = Request::new(h.transaction_id.clone(), h.attempt, payload);
                RequestPublisher::publish(self.requests, &request).await?;
                Observed::Published
            }
            Effect::PublishRetry(event) => {
                RetryPublisher::publish(self.retries, event).await?;
                Observed::Published
            }
            // Alerts are raised by the caller from the run's trail (log + metric).
            Effect::Alert(_) => Observed::Alerted,
            Effect::Ack(_) | Effect::Drop(_) | Effect::Reject(_) => {
                return Err(PortError::permanent(
                    "execute",
                    "terminal effects are not performed",
                ))
            }
        })
    }
}

/// Runs `run` to its disposition. `hook(effect)` returning `false` stops the run
/// before that effect, as a crash would.
pub async fn execute<D, St, Sc, Rq, Rt>(
    run: &mut Run<D>,
    ports: &Ports<'_, St, Sc, Rq, Rt>,
    ctx: &Context,
    rng: &mut (dyn RandomSource + Send),
    hook: &mut (dyn FnMut(&Effect) -> bool + Send),
) -> Result<Disposition, ExecError>
where
    D: Decide,
    St: StateStore,
    Sc: Scheduler,
    Rq: RequestPublisher,
    Rt: RetryPublisher,
{
    loop {
        let effect = match run.step() {
            Step::Done(d) => return Ok(d.clone()),
            Step::Perform(e) => e.clone(),
        };
        if !hook(&effect) {
            return Err(ExecError::Stopped(effect.label()));
        }
        let observed = ports.perform(&effect).await?;
        run.observe(observed, ctx, rng)?;
    }
}
