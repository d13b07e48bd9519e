//! Benchmarks of the deferred retry pattern, run by `scripts/bench.sh`, which writes
//! `docs/benchmarks.md`.
//!
//! - [`prices`], [`model`]: the dated price table and billable quantities per retry →
//!   dollars, for the pattern and the alternatives; [`dynamodb_rules`]: what DynamoDB bills.
//! - [`delivery`]: direct against outbox delivery, cost and duplicates, in one run.
//! - [`cycle`]: one retry cycle against moto through the real handlers; [`burst`]: N
//!   CANCELLED through the local stack; [`tap`]: the recording pass-through.
//! - [`template`], [`criterion_results`], [`init`]: settings, handler CPU, binary sizes.
//! - [`capacity`]: the load a deployment holds (`docs/capacity.md`); [`report`]: the
//!   Markdown.

pub mod burst;
pub mod capacity;
pub mod criterion_results;
pub mod cycle;
pub mod delivery;
pub mod dynamodb_rules;
pub mod init;
pub mod model;
pub mod prices;
pub mod report;
pub mod tap;
pub mod template;
