//! The staging harness: a stand-in for the external service, deployed next to the main
//! stack by `infra/template.yaml` and driven by `retryctl verify`.
//!
//! - [`rules`]: what it answers to a request and how late — a configured mix of
//!   replies, or a script carried in the transaction's payload. Pure, so the local
//!   stack's simulated service can answer by the same rules.
//! - [`config`]: the function's configuration from the environment.
//! - [`service`]: the function on AWS — request queue in, conditional put of the
//!   idempotency key in its own table, answer on the response queue with
//!   `DelaySeconds`.

pub mod config;
pub mod rules;
pub mod service;

pub use config::HarnessConfig;
pub use rules::{Behaviour, Draws, Latency, Mix, Plan, Reply, Script};
pub use service::{Harness, Received};
