//! Benchmarks of the deferred retry pattern, run by `scripts/bench.sh`, which writes
//! `docs/benchmarks.md`.
//!
//! - [`prices`]: the one price table (us-east-1, dated) with sources.
//! - [`dynamodb_rules`]: what DynamoDB bills, from item sizes and its published rules
//!   (moto's `ConsumedCapacity` figures are constants).
//! - [`model`]: billable quantities per retry → dollars, for the pattern and the
//!   alternatives (Step Functions Standard, Lambda durable functions, a sleeping
//!   process), with every assumption named.
//! - [`cycle`]: one retry cycle against moto through the real handlers and adapters.
//! - [`template`]: the deployment settings, read from `template.yaml`.
//! - [`criterion_results`]: the handler CPU figures criterion wrote.
//! - [`init`]: release binary sizes and cold init time against a local runtime API.
//! - [`burst`]: N CANCELLED responses through the local stack; [`tap`]: the recording
//!   pass-through in front of moto that times every publish.
//! - [`report`]: the Markdown.

pub mod burst;
pub mod criterion_results;
pub mod cycle;
pub mod dynamodb_rules;
pub mod init;
pub mod model;
pub mod prices;
pub mod report;
pub mod tap;
pub mod template;
