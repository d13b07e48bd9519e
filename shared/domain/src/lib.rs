//! The durable deferred retry pattern, as pure rules: every rule exactly once. Lambda
//! handlers, AWS adapters, the simulator, the model checker and the operator CLI
//! *execute* what it decides; none restates a rule (`docs/design.md#pieces-and-their-single-responsibilities`).
//!
//! - [`ids`], [`message`], [`intake`], [`defaults`]: identifiers, message contracts,
//!   the intake's start message, a deployment's defaults.
//! - [`machine`]: **the whole state machine in one file**; [`policy`]: the backoff.
//! - [`decide`]: every handler's decisions as plans of effects, and [`decide::Run`],
//!   which re-decides when a write finds another state; [`ports`]: one trait per
//!   capability; [`audit`], [`breaker`], [`retention`]: the audit row, the circuit
//!   breaker, what is kept and erased.

pub mod audit;
pub mod breaker;
pub mod decide;
pub mod defaults;
pub mod ids;
pub mod intake;
pub mod machine;
pub mod message;
pub mod policy;
pub mod ports;
pub mod retention;

pub use decide::{Context, Disposition, Effect, Known, Observed, Run, Step};
pub use ids::{
    Attempt, CorrelationId, IdempotencyKey, MaxAttempts, ScheduleName, Timestamp, TransactionId,
};
pub use machine::{Event, Status, TransactionRecord, Write};
pub use message::{Origin, Outcome, Payload, Request, Response, RetryEvent};
pub use policy::{PolicySet, RandomSource, RetryPolicy};
pub mod exec;
