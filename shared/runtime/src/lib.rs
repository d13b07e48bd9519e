//! What the Lambda functions share, over the domain's ports. No rule of the pattern is
//! written here: every decision comes from the domain crate as a plan, and this crate
//! only performs plans and reports what happened (`docs/functions.md`).
//!
//! - [`batch`]: the SQS batch processor; [`function`]: what every SQS-driven function
//!   holds besides its ports; [`verdict`]: what became of a record; [`drive`]: one
//!   [`domain::Run`] through [`domain::exec::execute`] into a [`Verdict`], logs and
//!   metrics; [`ops`]: start, resolve, replay; [`rate`]: the outbound pacing;
//!   [`breaker`]: the circuit breaker as the functions read, count and move it;
//!   [`settings`]: what a handler decides with.
//! - [`metrics`], [`metric`]: EMF, one JSON line per invocation; [`telemetry`]: tracing;
//!   [`lambda`]: start-up and event loop; [`wiring`]: what the functions' wirings share.

pub mod batch;
pub mod breaker;
pub mod drive;
pub mod function;
pub mod lambda;
pub mod metric;
pub mod metrics;
pub mod ops;
pub mod rate;
pub mod settings;
pub mod telemetry;
pub mod verdict;
pub mod wiring;

pub use batch::{BatchOptions, Inbound};
pub use domain::ports::DeadLetter;
pub use metrics::Metrics;
pub use settings::Settings;
pub use verdict::{Permanent, PermanentReason, Verdict};

/// Re-exported so the functions and the local stack use the same event types.
pub use aws_lambda_events::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent, SqsMessage};
