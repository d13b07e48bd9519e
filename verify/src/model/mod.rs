//! The exhaustive model check (stateright) of the whole protocol over small scopes. The
//! model drives the domain crate's real decisions: every handler execution is a
//! [`domain::Run`] built from the message it received, and every model step performs
//! **one** effect of one run (conditional writes through [`Write::apply`](domain::machine::Write::apply)) and feeds
//! back what it observed. The model holds no rule of its own; it only plays the world
//! around the handlers: three SQS queues as multisets (reordering, duplicates, crashes
//! returning a message), a Scheduler that fires at any moment, twice, or into its DLQ, a
//! deduplicating external service answering late and more than once, a reconciler that
//! runs at any moment, crashes between any two effects, and abstract time. Faults are
//! bounded by budgets ([`Scope`]) so the state space is finite; within those budgets
//! every interleaving is explored. Each in detail: `docs/verification.md#the-model`.

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
pub use explore::{OUTBOX_WITNESS, WITNESS};
pub use report::{check, CheckReport};
pub use scope::{Budgets, Scope, TICK_MS};
pub use step::ProtocolModel;
pub use testkit::oracle::{ServiceDedup, Violation};
pub use world::{Action, ActiveRun, Ev, Firing, Held, Img, Req, Resp, Sched, State};
