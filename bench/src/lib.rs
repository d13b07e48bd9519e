//! Benchmarks of the deferred retry pattern, run by `scripts/bench.sh`, which writes
//! `docs/benchmarks.md`.
//!
//! - [`prices`]: the one price table (us-east-1, dated) with sources; [`model`]: billable
//!   quantities per retry → dollars, for the pattern and the alternatives (Step
//!   Functions Standard, Lambda durable functions, a sleeping process).
//! - [`dynamodb_rules`]: what DynamoDB bills, from item sizes (moto's figures are
//!   constants); [`cycle`]: one retry cycle against moto through the real handlers.
//! - [`template`]: the deployment settings from `template.yaml`; [`criterion_results`]:
//!   the handler CPU figures; [`init`]: release binary sizes and cold init time.
//! - [`capacity`]: the load a deployment holds and the quota that binds first
//!   (`docs/capacity.md`), from the template, the quotas and the per-cycle calls.
//! - [`burst`]: N CANCELLED responses through the local stack; [`tap`]: the recording
//!   pass-through that times every publish; [`report`]: the Markdown.

pub mod burst;
pub mod capacity;
pub mod criterion_results;
pub mod cycle;
pub mod dynamodb_rules;
pub mod init;
pub mod model;
pub mod prices;
pub mod report;
pub mod tap;
pub mod template;
