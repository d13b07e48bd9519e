//! The durable deferred retry pattern, as pure rules.
//!
//! This crate holds every rule of the pattern exactly once. Lambda handlers, AWS
//! adapters, the simulator, the model checker and the operator CLI *execute* what it
//! decides; none of them restates a rule.
//!
//! - [`ids`]: validated identifiers (transaction id, attempt, schedule name, idempotency key) and UTC timestamps.
//! - [`message`]: the three message contracts (request, response, retry event) and their parsers.
//! - [`machine`]: **the whole state machine in one file** — statuses, events, the
//!   transition function, the transaction record and the conditional writes.
//! - [`policy`]: the backoff policy `wait(k) = min(base × factor^(k−1), cap) × (1 + u)`.
//! - [`decide`]: what the response handler, the retry handler, the reconciler and the
//!   library operations do, as plans of effects, and [`decide::Run`], the step machine
//!   that executes a plan and re-decides when a conditional write finds another state.
//! - [`ports`]: one trait per capability (state store, scheduler, publishers, clock).
//! - [`audit`]: the append-only audit row derived from a transition.
//! - [`breaker`]: the circuit breaker of the external service (CLOSED, OPEN, HALF_OPEN).
//! - [`defaults`]: every default of a deployment, with its variable and parameter.

pub mod audit;
pub mod breaker;
pub mod decide;
pub mod defaults;
pub mod ids;
pub mod machine;
pub mod message;
pub mod policy;
pub mod ports;

pub use decide::{Context, Disposition, Effect, Known, Observed, Run, Step};
pub use ids::{Attempt, IdempotencyKey, MaxAttempts, ScheduleName, Timestamp, TransactionId};
pub use machine::{Event, Status, TransactionRecord, Write};
pub use message::{Origin, Outcome, Payload, Request, Response, RetryEvent};
pub use policy::{PolicySet, RandomSource, RetryPolicy};
pub mod exec;
