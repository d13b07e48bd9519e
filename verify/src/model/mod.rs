//! The exhaustive model check (stateright) of the whole protocol over small scopes.
//!
//! The model drives the domain crate's real decisions: every handler execution is a
//! [`domain::Run`] built from the message it received, and every model step performs
//! **one** effect of one run on the model's state (conditional writes through
//! [`Write::apply`]) and feeds back what it observed. The model holds no rule of its
//! own; it only plays the world around the handlers:
//!
//! - three SQS queues (request, response, retry) as multisets: any message may be
//!   delivered next (reordering), delivered again while a first delivery is running
//!   (duplicates), or returned to the queue by a crash;
//! - EventBridge Scheduler: a live schedule may fire at any moment, fire twice, or fail
//!   to deliver (its event goes to the scheduler DLQ);
//! - the external service: it deduplicates requests by idempotency key and answers any
//!   attempt it accepted, with SUCCESS or CANCELLED, late and more than once;
//! - the reconciler: may run on any transaction in an intermediate state at any moment,
//!   either before or after the stored fire instant;
//! - crashes: a running handler may stop between any two effects; its message goes back
//!   to its queue for redelivery;
//! - time: abstract. Handlers decide at the model's clock, which may advance; schedules
//!   fire when the model chooses.
//!
//! Faults are bounded by budgets ([`Scope`]) so the state space is finite; within those
//! budgets every interleaving is explored.

mod breaker;
mod explore;
mod report;
mod scope;
mod script;
mod step;
mod world;

pub use breaker::{
    settings as breaker_settings, BreakerViolation, ModelBreaker, OutageMode, Verdict,
};
pub use explore::WITNESS;
pub use report::{check, CheckReport};
pub use scope::{Budgets, Scope, TICK_MS};
pub use step::ProtocolModel;
pub use testkit::oracle::Violation;
pub use world::{Action, ActiveRun, Ev, Firing, Held, Kind, Req, Resp, Sched, State};
