//! Every port at once, for what drives any run: the domain's own tests, and tools
//! that hold every adapter. A function never uses this: each performs its plans
//! through the bundle of exactly its ports (`domain::exec`).

use domain::decide::{Effect, Observed};
use domain::exec::{Perform, ReplayPorts, ResolvePorts, ResponsePorts, RetryPorts, StartPorts};
use domain::ports::{
    AuditNotes, Creates, Payloads, PortError, Records, RequestPublisher, RetryPublisher,
    ScheduleCreator, ScheduleDeleter, Transitions,
};

/// A store, a scheduler, both publishers and the audit notes: performs any effect, through the
/// function bundle that performs it.
#[derive(Debug, Clone, Copy)]
pub struct AllPorts<'a, St, Sc, Rq, Rt, Nt> {
    pub store: &'a St,
    pub scheduler: &'a Sc,
    pub requests: &'a Rq,
    pub retries: &'a Rt,
    pub notes: &'a Nt,
}

impl<St, Sc, Rq, Rt, Nt> Perform for AllPorts<'_, St, Sc, Rq, Rt, Nt>
where
    St: Transitions + Records + Creates + Payloads,
    Nt: AuditNotes,
    Sc: ScheduleCreator + ScheduleDeleter,
    Rq: RequestPublisher,
    Rt: RetryPublisher,
{
    async fn perform(&self, effect: &Effect) -> Result<Observed, PortError> {
        let (store, scheduler, requests, retries, notes) = (
            self.store,
            self.scheduler,
            self.requests,
            self.retries,
            self.notes,
        );
        match effect {
            Effect::Read(_) | Effect::DeleteSchedule(_) => {
                ResolvePorts { store, scheduler }.perform(effect).await
            }
            Effect::Create { .. } => StartPorts { store, requests }.perform(effect).await,
            Effect::PublishRequest(_) | Effect::DeferRetry(_) => {
                RetryPorts {
                    store,
                    requests,
                    retries,
                }
                .perform(effect)
                .await
            }
            Effect::PublishRetry(_) => ReplayPorts { store, retries }.perform(effect).await,
            _ => {
                ResponsePorts {
                    store,
                    scheduler,
                    retries,
                    notes,
                }
                .perform(effect)
                .await
            }
        }
    }
}
