//! `retryctl`: the operator CLI of the deferred retry pattern, and `retryctl demo`, the
//! whole pipeline on one machine (`docs/operations.md`).
//!
//! - [`cli`]: the command line; [`run`]: the commands' dispatch; [`bulk`]:
//!   `replay`/`resolve` over many transactions; [`stack`]: `--stack NAME`.
//! - [`local`]: the local stack — emulators of the SQS event source mapping, EventBridge
//!   Scheduler, the audit stream, the reconciler's cron and a simulated external
//!   service, all against moto; [`report`]: the demo's report and its checks.
//! - [`view`], [`table`], [`list`]: what the commands print and read.
//! - [`verify`]: `retryctl verify`, the post-deploy check with the staging harness.

pub mod breaker;
pub mod bulk;
pub mod cli;
pub mod commands;
pub mod demo;
pub mod error;
pub mod list;
pub mod local;
pub mod report;
pub mod run;
pub mod stack;
pub mod table;
pub mod verify;
pub mod view;

/// Version of the JSON documents `--json` prints; raised when a key changes meaning or
/// goes away (new keys do not raise it).
pub const SCHEMA_VERSION: u32 = 1;
