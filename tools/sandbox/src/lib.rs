//! The sandbox: the whole pipeline on one machine, against moto — what `retryctl demo`
//! runs, and what the tests and benchmarks start (`docs/operations.md`). No operator
//! build links it: `retryctl` takes it with its `demo` feature.
//!
//! - [`local`]: the local stack — emulators of the SQS event source mapping, EventBridge
//!   Scheduler, the audit stream, the reconciler's cron and a simulated external
//!   service; [`outputs`]: its outputs as CloudFormation describes a stack;
//!   [`staging`]: the staging harness on it.
//! - [`demo`]: the workload and its run ([`args`]: its flags); [`report`]: the
//!   demo's report and its checks. [`error`]: what they fail with.

pub mod args;
pub mod demo;
pub mod error;
pub mod local;
pub mod outputs;
pub mod report;
pub mod staging;

pub use args::{DemoArgs, ServiceSpec, ServiceVia, StartVia};
pub use error::Error;
