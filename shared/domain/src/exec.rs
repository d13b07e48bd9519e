//! The executor: performs a [`Run`]'s effects through ports until it is done.
//!
//! Each function performs its plans through a bundle of exactly the ports it has
//! ([`ResponsePorts`], [`RetryPorts`], [`ReconcilePorts`], [`StartPorts`],
//! [`ResolvePorts`], [`ReplayPorts`], [`PublishPorts`]): a function wired without a port it needs does
//! not compile. Which effects each input's plans hold is the domain's rule
//! ([`performs`]); a bundle asked for another effect reports a permanent error (a
//! decision bug, which the decision tests rule out). Free of any async runtime, so the
//! Lambda handlers, the local stack and `retryctl` all drive plans through this one
//! loop. A `hook` sees every effect before it is performed and may stop the run there:
//! that is how tests simulate a crash between two effects.

use crate::audit::AuditEntry;
use crate::decide::{
    Context, Decide, Disposition, Effect, Input, Observed, RequestHeader, Run, ScheduleSpec, Step,
    UnexpectedObservation,
};
use crate::ids::{ScheduleName, TransactionId};
use crate::machine::{TransactionRecord, Write};
use crate::message::{Payload, Request, RetryEvent};
use crate::policy::RandomSource;
use crate::ports::{
    AuditNotes, CreateOutcome, Creates, Payloads, PortError, Records, RequestPublisher,
    RetryPublisher, ScheduleCreated, ScheduleCreator, ScheduleDeleted, ScheduleDeleter,
    Transitions, WriteOutcome,
};
use std::future::Future;
use thiserror::Error;

/// True when a plan for `input` may hold `effect`: the effects the function that
/// handles such an input performs, and the terminal ones.
pub fn performs(input: &Input, effect: &Effect) -> bool {
    use Effect as E;
    effect.is_terminal()
        || match input {
            Input::Response(_) => {
                matches!(
                    effect,
                    E::Write(_)
                        | E::CreateSchedule(_)
                        | E::PublishRetry(_)
                        | E::Alert(_)
                        | E::Note(_)
                        | E::Signal(_)
                )
            }
            Input::Retry(_) => {
                matches!(
                    effect,
                    E::Write(_) | E::PublishRequest(_) | E::DeferRetry(_) | E::Alert(_)
                )
            }
            Input::Reconcile(_) => {
                matches!(
                    effect,
                    E::Write(_)
                        | E::CreateSchedule(_)
                        | E::PublishRetry(_)
                        | E::PublishRequest(_)
                        | E::Alert(_)
                        | E::Note(_)
                )
            }
            Input::Publish(_) => {
                matches!(effect, E::Write(_) | E::PublishRequest(_) | E::Note(_))
            }
            Input::Start { .. } => matches!(effect, E::Create { .. } | E::PublishRequest(_)),
            Input::Resolve(_) => {
                matches!(effect, E::Read(_) | E::Write(_) | E::DeleteSchedule(_))
            }
            Input::Replay { .. } => {
                matches!(effect, E::Read(_) | E::Write(_) | E::PublishRetry(_))
            }
        }
}

/// Performs a plan's effects over one function's ports.
pub trait Perform: Send + Sync {
    /// Performs one effect. Terminal effects are not performed (the run ends on them).
    fn perform(&self, effect: &Effect) -> impl Future<Output = Result<Observed, PortError>> + Send;
}

/// An effect the function does not perform: a decision bug, never retried.
fn not_performed(function: &str, effect: &Effect) -> PortError {
    if effect.is_terminal() {
        return PortError::permanent("execute", "terminal effects are not performed");
    }
    PortError::permanent(
        "execute",
        format!("the {function} does not perform `{}`", effect.label()),
    )
}

/// A write's outcome. A condition that failed on a retried call, on a record that is
/// exactly this write's result, failed on the write itself: applied by the earlier
/// attempt whose answer was lost. It is done, and observed as written.
async fn write<T: Transitions>(store: &T, w: &Write) -> Result<Observed, PortError> {
    Ok(match store.transition(w).await? {
        WriteOutcome::Written(r) => Observed::Written(r),
        WriteOutcome::ConditionFailedOnRetry(Some(r)) if w.produced(&r) => Observed::Written(r),
        WriteOutcome::ConditionFailed(r) | WriteOutcome::ConditionFailedOnRetry(r) => {
            Observed::ConditionFailed(r)
        }
    })
}

async fn read<G: Records>(store: &G, id: &TransactionId) -> Result<Observed, PortError> {
    Ok(Observed::Record(store.get(id).await?))
}

async fn create<C: Creates>(
    store: &C,
    record: &TransactionRecord,
    payload: &Payload,
) -> Result<Observed, PortError> {
    Ok(match store.create(record, payload).await? {
        CreateOutcome::Created => Observed::Created,
        // Found by a retried call exactly as this create writes it: its own.
        CreateOutcome::FoundOnRetry {
            record: found,
            same_payload: true,
        } if *found == *record => Observed::Created,
        CreateOutcome::AlreadyExists {
            record,
            same_payload,
        }
        | CreateOutcome::FoundOnRetry {
            record,
            same_payload,
        } => Observed::AlreadyExists {
            record: *record,
            same_payload,
        },
    })
}

async fn create_schedule<S: ScheduleCreator>(
    scheduler: &S,
    spec: &ScheduleSpec,
) -> Result<Observed, PortError> {
    Ok(match scheduler.create(spec).await? {
        ScheduleCreated::Created => Observed::ScheduleCreated,
        ScheduleCreated::AlreadyExists => Observed::ScheduleAlreadyExists,
    })
}

async fn delete_schedule<S: ScheduleDeleter>(
    scheduler: &S,
    name: &ScheduleName,
) -> Result<Observed, PortError> {
    Ok(match scheduler.delete(name).await? {
        ScheduleDeleted::Deleted => Observed::ScheduleDeleted,
        ScheduleDeleted::NotFound => Observed::ScheduleNotFound,
    })
}

/// The request for `h`, with the payload the transaction started with.
async fn publish_request<P: Payloads, R: RequestPublisher>(
    payloads: &P,
    requests: &R,
    h: &RequestHeader,
) -> Result<Observed, PortError> {
    let payload = payloads.payload(&h.transaction_id).await?.ok_or_else(|| {
        PortError::permanent(
            "GetItem",
            format!("no stored payload for transaction `{}`", h.transaction_id),
        )
    })?;
    let request = Request::new(h.transaction_id.clone(), h.attempt, payload)
        .with_round(h.round)
        .with_correlation_id(h.correlation_id.clone());
    requests.publish(&request).await?;
    Ok(Observed::Published)
}

async fn publish_retry<Q: RetryPublisher>(
    retries: &Q,
    event: &RetryEvent,
    delay_seconds: u32,
) -> Result<Observed, PortError> {
    retries.publish(event, delay_seconds).await?;
    Ok(Observed::Published)
}

async fn note<N: AuditNotes>(notes: &N, entry: &AuditEntry) -> Result<Observed, PortError> {
    notes.note(entry).await?;
    Ok(Observed::Noted)
}

/// Declares a function's bundle: its ports (each a reference, with the bounds it
/// needs) and the effects it performs; any other effect is [`not_performed`].
macro_rules! bundle {
    (
        $(#[$doc:meta])*
        $name:ident, $function:literal,
        { $($field:ident: $ty:ident: $bound:ident $(+ $more:ident)*),+ $(,)? }
        { $($effect:pat => $perform:expr),+ $(,)? }
    ) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy)]
        pub struct $name<'a, $($ty),+> {
            $(pub $field: &'a $ty),+
        }

        impl<$($ty: $bound $(+ $more)*),+> Perform for $name<'_, $($ty),+> {
            async fn perform(&self, effect: &Effect) -> Result<Observed, PortError> {
                let Self { $($field),+ } = *self;
                match effect {
                    $($effect => $perform.await,)+
                    other => Err(not_performed($function, other)),
                }
            }
        }
    };
}

bundle! {
    /// The response handler's ports: conditional writes, schedule creation, and the
    /// retry queue for a retry whose instant has already passed (no schedule can be
    /// set in the past), and the audit table for a notice (a conflicting SUCCESS).
    /// Alerts are raised by the caller from the run's trail (log + metric).
    ResponsePorts, "response handler",
    {
        store: St: Transitions,
        scheduler: Sc: ScheduleCreator,
        retries: Rt: RetryPublisher,
        notes: Nt: AuditNotes,
    }
    {
        Effect::Write(w) => write(store, w),
        Effect::CreateSchedule(spec) => create_schedule(scheduler, spec),
        Effect::PublishRetry(event) => publish_retry(retries, event, 0),
        Effect::Alert(_) => std::future::ready(Ok(Observed::Alerted)),
        Effect::Note(entry) => note(notes, entry),
        // Counted by the caller from the run's trail, once per batch.
        Effect::Signal(_) => std::future::ready(Ok(Observed::Signalled)),
    }
}

bundle! {
    /// The retry handler's ports: conditional writes, payload reads, request
    /// publishes, and the retry queue for an event the circuit breaker holds back
    /// (deferred). Alerts (a transaction past its deadline) are raised by the caller
    /// from the run's trail (log + metric).
    ///
    /// A store that cannot read payloads makes no retry handler:
    ///
    /// ```
    /// use domain::exec::{Perform, RetryPorts};
    /// use testkit::memory::{MemoryQueue, MemoryStore};
    /// fn performer<P: Perform>(_: &P) {}
    /// let (store, requests) = (MemoryStore::new(), MemoryQueue::<domain::Request>::new());
    /// let retries = MemoryQueue::<domain::RetryEvent>::new();
    /// performer(&RetryPorts { store: &store, requests: &requests, retries: &retries });
    /// ```
    ///
    /// ```compile_fail
    /// use domain::exec::{Perform, RetryPorts};
    /// use testkit::memory::{MemoryQueue, MemoryScheduler};
    /// fn performer<P: Perform>(_: &P) {}
    /// let (store, requests) = (MemoryScheduler::new(), MemoryQueue::<domain::Request>::new());
    /// let retries = MemoryQueue::<domain::RetryEvent>::new();
    /// performer(&RetryPorts { store: &store, requests: &requests, retries: &retries });
    /// ```
    RetryPorts, "retry handler",
    {
        store: St: Transitions + Payloads,
        requests: Rq: RequestPublisher,
        retries: Rt: RetryPublisher,
    }
    {
        Effect::Write(w) => write(store, w),
        Effect::PublishRequest(h) => publish_request(store, requests, h),
        Effect::DeferRetry(d) => publish_retry(retries, &d.event, d.delay_seconds),
        Effect::Alert(_) => std::future::ready(Ok(Observed::Alerted)),
    }
}

bundle! {
    /// The reconciler's ports: conditional writes, schedule creation, retry events,
    /// and — for a request left unanswered past its deadline — payload reads and the
    /// request queue (its store also answers the index query,
    /// [`crate::ports::StuckIndex`]), and the audit table for a notice (outbox mode:
    /// a publish left unconfirmed). Alerts are raised by the caller from the run's
    /// trail (log + metric).
    ReconcilePorts, "reconciler",
    {
        store: St: Transitions + Payloads,
        scheduler: Sc: ScheduleCreator,
        retries: Rt: RetryPublisher,
        requests: Rq: RequestPublisher,
        notes: Nt: AuditNotes,
    }
    {
        Effect::Write(w) => write(store, w),
        Effect::CreateSchedule(spec) => create_schedule(scheduler, spec),
        Effect::PublishRetry(event) => publish_retry(retries, event, 0),
        Effect::PublishRequest(h) => publish_request(store, requests, h),
        Effect::Alert(_) => std::future::ready(Ok(Observed::Alerted)),
        Effect::Note(entry) => note(notes, entry),
    }
}

bundle! {
    /// Outbox mode's publisher: conditional writes (the claim, SENDING →
    /// IN_PROGRESS), payload reads, the request queue, and the audit table for a
    /// publish left unconfirmed.
    PublishPorts, "publisher",
    {
        store: St: Transitions + Payloads,
        requests: Rq: RequestPublisher,
        notes: Nt: AuditNotes,
    }
    {
        Effect::Write(w) => write(store, w),
        Effect::PublishRequest(h) => publish_request(store, requests, h),
        Effect::Note(entry) => note(notes, entry),
    }
}

bundle! {
    /// Starting a transaction: the conditional create, the payload read back, the
    /// first request.
    StartPorts, "start operation",
    { store: St: Creates + Payloads, requests: Rq: RequestPublisher }
    {
        Effect::Create { record, payload } => create(store, record, payload),
        Effect::PublishRequest(h) => publish_request(store, requests, h),
    }
}

bundle! {
    /// "Resolved by other means": a read, a conditional write, the schedule deleted.
    ResolvePorts, "resolve operation",
    { store: St: Records + Transitions, scheduler: Sc: ScheduleDeleter }
    {
        Effect::Read(id) => read(store, id),
        Effect::Write(w) => write(store, w),
        Effect::DeleteSchedule(name) => delete_schedule(scheduler, name),
    }
}

bundle! {
    /// Operator replay: a read, a conditional write, a retry event.
    ReplayPorts, "replay operation",
    { store: St: Records + Transitions, retries: Rt: RetryPublisher }
    {
        Effect::Read(id) => read(store, id),
        Effect::Write(w) => write(store, w),
        Effect::PublishRetry(event) => publish_retry(retries, event, 0),
    }
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

/// Runs `run` to its disposition. `hook(effect)` returning `false` stops the run
/// before that effect, as a crash would.
pub async fn execute<D: Decide, P: Perform>(
    run: &mut Run<D>,
    ports: &P,
    ctx: &Context,
    rng: &mut (dyn RandomSource + Send),
    hook: &mut (dyn FnMut(&Effect) -> bool + Send),
) -> Result<Disposition, ExecError> {
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
