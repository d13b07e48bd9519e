//! The exhaustive model check, CI-sized: every scope must explore without a single
//! violation, and must reach the situations the guarantees talk about (witnesses), so
//! a passing check cannot be a vacuous one. Larger scopes run with the `model-check`
//! binary (docs/verification.md).

use verify::model::{check, CheckReport, Scope};

fn scope(f: impl FnOnce(&mut Scope)) -> Scope {
    let mut s = Scope::quiet(2, 3);
    s.interleave = false;
    f(&mut s);
    s
}

fn passes(scope: Scope, min_states: usize, witnesses: &[usize]) -> CheckReport {
    let r = check(scope, 1, false);
    println!(
        "{}: {} states ({} unique) in {:.1} s",
        r.scope,
        r.states,
        r.unique_states,
        r.elapsed.as_secs_f64()
    );
    assert!(r.violations.is_empty(), "{}: {:#?}", r.scope, r.violations);
    assert!(
        r.unique_states >= min_states,
        "explored only {} states",
        r.unique_states
    );
    let unreached = r.unreached(witnesses);
    assert!(unreached.is_empty(), "not reached: {unreached:?}");
    r
}

#[test]
fn two_transactions_every_interleaving_one_attempt_budget() {
    // Every interleaving of two transactions' steps (max_attempts 2 keeps it CI-sized;
    // the release run in the docs does max_attempts 3).
    let mut s = Scope::quiet(2, 2);
    s.interleave = true;
    passes(s, 1_000, &[0, 1, 2]);
}

#[test]
fn two_transactions_crash_between_any_two_effects() {
    passes(scope(|s| s.faults.crashes = 1), 10_000, &[0, 1, 2, 3, 5]);
}

#[test]
fn two_transactions_duplicated_and_reordered_deliveries() {
    passes(
        scope(|s| s.faults.duplicate_deliveries = 1),
        50_000,
        &[0, 1, 2, 5],
    );
}

#[test]
fn two_transactions_late_and_repeated_answers() {
    passes(scope(|s| s.faults.extra_answers = 1), 50_000, &[0, 1, 4]);
}

#[test]
fn two_transactions_scheduler_fires_twice_or_cannot_deliver_and_clock_moves() {
    passes(
        scope(|s| {
            s.faults.double_fires = 1;
            s.faults.undeliverable_fires = 1;
        }),
        10_000,
        &[0, 1, 2],
    );
    passes(scope(|s| s.faults.ticks = 1), 5_000, &[0, 1]);
}

#[test]
fn reconciler_at_any_moment_rescues_an_undeliverable_event() {
    let mut s = Scope::quiet(1, 2);
    s.faults.reconciler_runs = 1;
    s.faults.undeliverable_fires = 1;
    passes(s, 2_000, &[6, 7]);
}

/// A request lost before the service reads it (as after a start that crashed before
/// its publish) or an answer lost after the service executed, at any moment, with
/// the reconciler running at any moment: every transaction still ends terminal once
/// its deadline passes (property "terminal after the reconciler"), never above the
/// budget, never a second accepted request per attempt.
#[test]
fn lost_requests_and_answers_end_terminal_through_the_answer_deadline() {
    let mut s = Scope::quiet(1, 2);
    s.faults.lost_messages = 1;
    s.faults.reconciler_runs = 1;
    passes(s, 1_000, &[0, 1]);
}

/// The service answers ERROR (a technical failure) at any moment, up to twice per
/// execution: the attempt is sent again with the same key, never consumed (property
/// "a technical failure never consumes an attempt"), every transaction still ends
/// terminal, and both ends are reached: a success after a re-send, and FAILED once
/// the re-sends (one in the model) are spent.
#[test]
fn technical_failures_never_consume_an_attempt_and_still_end() {
    let mut s = Scope::quiet(1, 2);
    s.faults.technical_answers = 2;
    passes(s, 1_000, &[0, 1, 8, 9]);
    let mut s = Scope::quiet(1, 3);
    s.faults.technical_answers = 1;
    passes(s, 5_000, &[0, 1, 8]);
}
