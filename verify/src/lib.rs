//! Proof of the pattern's guarantees.
//!
//! - [`model`]: an exhaustive model check (stateright) of the protocol over small
//!   scopes, driving the domain crate's real decisions one effect at a time.
//! - [`sim`]: a seeded, deterministic fault-injection simulator for large scopes
//!   (thousands of transactions per seed), reporting like Jepsen's queue checker.
//! - [`study`]: the adaptive backoff study — wait policies compared on services with a
//!   recovery time, against an objective, on the same seeds.
//!
//! Neither restates a rule: both build [`domain::Run`]s and perform their effects.

pub mod fixture;
pub mod flaws;
pub mod model;
pub mod sim;
pub mod simcli;
pub mod study;

pub use flaws::Flaws;
