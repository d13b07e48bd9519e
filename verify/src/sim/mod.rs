//! The seeded, deterministic fault-injection simulator: a discrete-event run on a
//! virtual clock in which thousands of transactions go through the real plans of the
//! response handler, the retry handler and the reconciler ([`domain::Run`]s, one effect
//! per event), against a store with DynamoDB's conditional semantics ([`Write::apply`](domain::machine::Write::apply))
//! and the sharded reconciler index; at-least-once SQS queues (duplicates, reordering,
//! visibility timeouts, redrive to a DLQ); a Scheduler firing late, twice or not at all;
//! crashes and throttling; a deduplicating external service that cancels, answers late
//! and sometimes twice; the outbound pacing; the reconciler's cron; outage windows and
//! the circuit breaker. Everything random comes from one seed (SplitMix64 streams),
//! nothing reads the wall clock, every collection iterates in a defined order: a seed
//! replays its run exactly (the report carries a digest of every event). The faults in
//! detail: `docs/verification.md#the-simulator`.

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
pub use testkit::oracle::ServiceDedup;

/// The seed's randomness, one stream per use: shared with the backoff study.
pub(crate) use queue::Rng;

use world::World;

/// Runs one seed.
pub fn simulate(cfg: &SimConfig, seed: u64) -> Report {
    World::new(cfg, seed).run()
}
