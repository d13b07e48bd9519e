//! Running a check and what it found.

use super::explore::{OUTBOX_WITNESS, WITNESS};
use super::scope::Scope;
use super::step::ProtocolModel;
use stateright::{Checker, HasDiscoveries, Model};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// What a model check found.
#[derive(Debug, Clone)]
pub struct CheckReport {
    pub scope: Scope,
    pub states: usize,
    pub unique_states: usize,
    pub max_depth: usize,
    /// Broken safety properties, each with the actions of a shortest counterexample.
    pub violations: BTreeMap<&'static str, Vec<String>>,
    /// Witnesses reached.
    pub witnessed: BTreeSet<&'static str>,
    pub elapsed: Duration,
}

impl CheckReport {
    /// The witnesses of `indices` ([`WITNESS`]) the check did not reach.
    pub fn unreached(&self, indices: &[usize]) -> Vec<&'static str> {
        indices
            .iter()
            .filter_map(|i| WITNESS.get(*i).copied())
            .filter(|w| !self.witnessed.contains(w))
            .collect()
    }
}

/// Checks `scope` exhaustively (breadth first) on `threads` threads. With
/// `stop_at_first_violation`, the check ends as soon as any safety property fails.
pub fn check(scope: Scope, threads: usize, stop_at_first_violation: bool) -> CheckReport {
    let started = std::time::Instant::now();
    let model = ProtocolModel::new(scope);
    let mut builder = model.clone().checker().threads(threads.max(1));
    if stop_at_first_violation {
        builder = builder.finish_when(HasDiscoveries::AnyFailures);
    }
    let checker = builder.spawn_bfs().join();
    let discoveries = checker.discoveries();
    let mut violations = BTreeMap::new();
    let mut witnessed = BTreeSet::new();
    for (name, path) in discoveries {
        if WITNESS.contains(&name) || OUTBOX_WITNESS.contains(&name) {
            witnessed.insert(name);
        } else {
            let steps = path
                .into_vec()
                .into_iter()
                .map(|(state, action)| match action {
                    Some(a) => format!("{a:?}   [before: {}]", state.summary()),
                    None => format!("(end)   [{}]", state.summary()),
                })
                .collect();
            violations.insert(name, steps);
        }
    }
    CheckReport {
        scope,
        states: checker.state_count(),
        unique_states: checker.unique_state_count(),
        max_depth: checker.max_depth(),
        violations,
        witnessed,
        elapsed: started.elapsed(),
    }
}
