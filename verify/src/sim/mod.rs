//! The seeded, deterministic fault-injection simulator.
//!
//! One simulation is a discrete-event run on a virtual clock: thousands of
//! transactions go through the real plans of the response handler, the retry handler
//! and the reconciler ([`domain::Run`]s, one effect per event), against
//!
//! - a state store with DynamoDB's conditional semantics ([`Write::apply`]) and the
//!   sparse, write-sharded reconciler index;
//! - at-least-once SQS queues: duplicate deliveries, reordering among the visible
//!   messages, visibility timeouts, redrive to a DLQ after `maxReceiveCount` receives;
//! - EventBridge Scheduler with one-minute precision, firing late, firing twice, or
//!   failing to deliver (its DLQ);
//! - crashes (a run stops before an effect), throttling (a port call fails with a
//!   retryable error), both leaving the message to reappear after its visibility timeout;
//! - the external service: deduplicates by idempotency key, cancels with a
//!   configurable probability, answers after a latency, sometimes again much later;
//! - the retry handler's outbound pacing (one publish per `1/rate` per warm instance,
//!   `concurrency` instances);
//! - the reconciler on a virtual cron;
//! - outage windows (the service answers ERROR, or nothing) and the circuit breaker
//!   the handlers consult and feed, moved by the domain's rules.
//!
//! Everything random comes from one seed (SplitMix64 streams), nothing reads the wall
//! clock, and every collection iterates in a defined order: the same seed replays the
//! same run exactly (the report carries a digest of every event to prove it).

mod actors;
mod breaker;
mod config;
mod effects;
mod queue;
mod report;
mod world;

pub use breaker::{Outage, OutageMode};
pub use config::SimConfig;
pub use report::Report;

use world::World;

/// Runs one seed.
pub fn simulate(cfg: &SimConfig, seed: u64) -> Report {
    World::new(cfg, seed).run()
}
