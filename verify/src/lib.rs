//! Proof of the pattern's guarantees.
//!
//! - [`model`]: an exhaustive model check (stateright) of the protocol over small
//!   scopes, driving the domain crate's real decisions one effect at a time.
//! - [`sim`]: a seeded, deterministic fault-injection simulator for large scopes
//!   (thousands of transactions per seed), reporting like Jepsen's queue checker.
//!
//! Neither restates a rule: both build [`domain::Run`]s and perform their effects.

pub mod fixture;
pub mod model;
pub mod sim;
pub mod simcli;

use domain::decide::Flaws;

/// The known-bad designs by the names the command lines take.
pub const FLAW_NAMES: [&str; 4] = [
    "retry-rejects-scheduling",
    "fire-time-at-create",
    "retry-discards-sending",
    "attempts-from-zero",
];

/// The switch for a known-bad design, by name.
pub fn flaw_by_name(name: &str) -> Option<fn(&mut Flaws)> {
    Some(match name {
        "retry-rejects-scheduling" => |f: &mut Flaws| f.retry_rejects_scheduling = true,
        "fire-time-at-create" => |f: &mut Flaws| f.fire_time_at_create = true,
        "retry-discards-sending" => |f: &mut Flaws| f.retry_discards_sending = true,
        "attempts-from-zero" => |f: &mut Flaws| f.attempts_from_zero = true,
        _ => return None,
    })
}
