//! Integration tests of the domain crate: whole runs through the executor over the
//! in-memory adapters, and properties over arbitrary records, messages, policies,
//! ids and event interleavings.

// A test crate: helpers outside `#[test]` functions panic on purpose.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod decisions;
mod exec;
mod lost;
mod messages;
mod outbox;
mod policy;
mod protocol;
mod runs;
mod schedule_names;
mod world;

/// Attempts 1 to `small` mostly, and any attempt at all.
pub fn attempts(small: u32) -> impl proptest::strategy::Strategy<Value = domain::ids::Attempt> {
    use proptest::prelude::*;
    prop_oneof![1u32..=small, any::<u32>().prop_map(|n| n.max(1))]
        .prop_map(|n| domain::ids::Attempt::new(n).unwrap())
}

/// A property run of `cases` cases, failures not persisted to files.
pub fn cases(cases: u32) -> proptest::test_runner::Config {
    proptest::test_runner::Config {
        cases,
        failure_persistence: None,
        ..proptest::test_runner::Config::default()
    }
}
