//! `retryctl`: the operator CLI of the deferred retry pattern, and `retryctl demo`, the
//! whole pipeline on one machine.
//!
//! - [`cli`]: the command line; [`bulk`]: `replay`/`resolve` over many transactions.
//! - [`local`]: the local stack: emulators of Lambda's SQS event source mapping, of
//!   EventBridge Scheduler, of the DynamoDB stream feeding the audit writer, the
//!   reconciler's cron and a simulated external service, all against moto.
//! - [`report`]: the demo's final report and its checks.
//! - [`view`], [`table`]: what the operator commands print and read; [`list`]: the
//!   listing of transactions by status, attempt and time.
//! - [`run`]: the operator commands' dispatch.
//! - [`stack`]: `--stack NAME`, the settings read from the deployed stack.
//! - [`verify`]: `retryctl verify`, the post-deploy check of a stack with the staging
//!   harness.

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
