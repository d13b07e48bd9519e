//! The durable deferred retry pattern, as pure rules: every rule exactly once. Lambda
//! handlers, AWS adapters, the simulator, the model checker and the operator CLI
//! *execute* what it decides; none restates a rule (`docs/design.md#pieces-and-their-single-responsibilities`).
//!
//! - [`ids`]: validated identifiers and UTC timestamps; [`message`]: the three message
//!   contracts and their parsers; [`intake`]: the start message of the intake queue;
//!   [`defaults`]: every default of a deployment.
//! - [`machine`]: **the whole state machine in one file**; [`policy`]: the backoff
//!   `wait(k) = min(base × factor^(k−1), cap) × (1 + u)`.
//! - [`decide`]: what each handler, the reconciler and the library operations do, as
//!   plans of effects, and [`decide::Run`], which re-decides when a write finds another
//!   state; [`ports`]: one trait per capability; [`audit`]: the audit row of a
//!   transition; [`breaker`]: the circuit breaker (CLOSED, OPEN, HALF_OPEN);
//!   [`retention`]: how long a finished transaction is kept, what an erasure removes.

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
