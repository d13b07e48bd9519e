//! `retryctl`: the operator CLI of the deferred retry pattern (`docs/operations.md`).
//!
//! - [`cli`]: the command line; [`run`]: the commands' dispatch; [`bulk`]:
//!   `replay`/`resolve` over many transactions; [`stack`]: `--stack NAME`.
//! - [`view`], [`table`], [`list`]: what the commands print and read.
//! - [`versions`]: which version and release each function runs.
//! - Feature `verify`: [`verify`], the post-deploy check, and [`loadtest`], a bounded
//!   load, both through the staging harness. Feature `demo`: `retryctl demo`, the
//!   local stack of `deferred-retry-sandbox`. The operator build
//!   (`--no-default-features`) links neither.

pub mod breaker;
pub mod bulk;
pub mod cli;
pub mod commands;
pub mod erase;
pub mod error;
pub mod list;
#[cfg(feature = "verify")]
pub mod loadtest;
pub mod run;
pub mod stack;
pub mod table;
#[cfg(feature = "verify")]
pub mod verify;
pub mod versions;
pub mod view;

/// Version of the JSON documents `--json` prints; raised when a key changes meaning or
/// goes away (new keys do not raise it).
pub const SCHEMA_VERSION: u32 = 1;
