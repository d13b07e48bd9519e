//! What the Lambda functions share, over the domain's ports.
//!
//! - [`batch`]: the one SQS batch processor both SQS handlers use (each body parsed on
//!   its own, bounded concurrency, one span per record, panics caught per record,
//!   partial batch failures, permanent errors to the queue's dead-letter queue).
//! - [`drive`]: runs one domain [`domain::Run`] through [`domain::exec::execute`] and
//!   turns its disposition and trail into a [`batch::Verdict`], logs and metrics.
//! - [`response`], [`retry`], [`reconcile`]: the three functions' cores and their
//!   invocation entry points (the Lambda `main`s and the local stack call the same ones).
//! - [`ops`]: library operations for services: start, resolve, replay.
//! - [`rate`]: the retry handler's outbound pacing limiter.
//! - [`breaker`]: the circuit breaker as the functions read, count and move it.
//! - [`metrics`]: CloudWatch Embedded Metric Format, one JSON line per invocation;
//!   [`metric`]: the metrics named after what a run ended in.
//! - [`telemetry`]: tracing initialisation for Lambda (JSON logs, level from env).
//! - [`lambda`]: what every `main` does around its handler (start-up, event loop).
//! - [`wiring`]: each function built from its configuration and the AWS adapters
//!   (what the `main`s and the local stack call).
//!
//! No rule of the pattern is written here: every decision comes from the domain crate
//! as a plan, and this crate only performs plans and reports what happened.

pub mod batch;
pub mod breaker;
pub mod drive;
pub mod lambda;
pub mod metric;
pub mod metrics;
pub mod ops;
pub mod rate;
pub mod reconcile;
pub mod response;
pub mod retry;
pub mod settings;
pub mod telemetry;
pub mod wiring;

pub use batch::{BatchOptions, Inbound, Permanent, PermanentReason, Verdict};
pub use domain::ports::DeadLetter;
pub use metrics::Metrics;
pub use settings::Settings;

/// Re-exported so the functions and the local stack use the same event types.
pub use aws_lambda_events::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent, SqsMessage};
