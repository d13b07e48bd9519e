//! Proof that the checks can fail: each known-bad design from the article, switched
//! on in the model checker and in the simulator, must be caught, by the property that
//! names its harm. The correct design passes the very same scopes (control).

use domain::machine::Actor;
use domain::message::Outcome;
use verify::model::{check, ProtocolModel, Scope, Violation};
use verify::sim::{simulate, Report, SimConfig};
use verify::Flaws;

const P: [&str; 24] = ProtocolModel::SAFETY;

/// Checks `scope` with and without the flaw: the correct design passes, the flawed
/// one breaks `primary` (an execution stops at its first violation, so other
/// properties the flaw would break later on the same path are not reported).
fn model_finds(flaws: Flaws, scope: Scope, primary: usize) {
    let clean = check(scope, 1, false);
    assert!(
        clean.violations.is_empty(),
        "control: {:#?}",
        clean.violations
    );
    let r = check(scope.with_flaws(flaws), 1, false);
    assert!(
        r.violations.contains_key(P[primary]),
        "{flaws:?}: `{}` not caught; found {:?}",
        P[primary],
        r.violations.keys().collect::<Vec<_>>()
    );
    println!(
        "{flaws:?}: caught by {:?}; counterexample of {} steps",
        r.violations.keys().collect::<Vec<_>>(),
        r.violations[P[primary]].len()
    );
}

fn sim_finds(flaws: Flaws, cfg: SimConfig, check: impl Fn(&Report) -> bool, what: &str) {
    let control = simulate(&cfg, 1);
    assert!(
        control.is_valid(),
        "control: {:?}\n{control}",
        control.violations()
    );
    let bad = simulate(&SimConfig { flaws, ..cfg }, 1);
    assert!(
        !bad.is_valid(),
        "{flaws:?} not caught by the simulator\n{bad}"
    );
    assert!(
        check(&bad),
        "{flaws:?}: expected {what}; got {:?}",
        bad.violations()
    );
}

/// [`model_finds`] on `scope`, then [`sim_finds`] on [`sim_cfg`].
fn both_find(flaws: Flaws, scope: Scope, primary: usize, check: fn(&Report) -> bool, what: &str) {
    model_finds(flaws, scope, primary);
    sim_finds(flaws, sim_cfg(), check, what);
}

fn sim_cfg() -> SimConfig {
    SimConfig {
        transactions: 2_000,
        ..SimConfig::default()
    }
}

#[test]
fn retry_handler_rejecting_scheduling_is_caught() {
    let flaws = Flaws::only(|f| f.retry_rejects_scheduling = true);
    // The event overtakes A: B drops it, A confirms SCHEDULED, no schedule is left.
    model_finds(flaws, Scope::quiet(1, 3), 12);
    // In the simulator the overtaking needs a fire instant shorter than the response
    // queue's visibility timeout (A crashed after creating the schedule).
    let cfg = SimConfig {
        backoff_base_ms: 30_000,
        backoff_cap_ms: 120_000,
        reconciler: false,
        scheduler_failure_rate: 0.0,
        max_receive_count: 100,
        // Without the reconciler an unanswered request is never republished.
        ..sim_cfg().answered()
    };
    sim_finds(
        flaws,
        cfg,
        |r| r.pending_retries_dropped > 0,
        "pending retries dropped",
    );
}

#[test]
fn fire_time_computed_at_create_is_caught() {
    let flaws = Flaws::only(|f| f.fire_time_at_create = true);
    // The schedule is created before its instant is persisted.
    model_finds(flaws, Scope::quiet(1, 3), 5);
    // Its consequence, scripted: a crash after creating, the clock moves, the
    // redelivery computes another instant and persists it: the schedule ("already
    // exists") fires at one instant, the record says another.
    let m = ProtocolModel::new(Scope::quiet(1, 3).with_flaws(flaws));
    let s = m.service_receives_all(m.initial_state());
    let s = m.answer(&s, 0, 1, Outcome::Cancelled);
    let s = m.deliver_response(&s, 0, false);
    let s = m.step_until(s, Actor::ResponseHandler, 0, "write ResponseCancelledRetry");
    let s = m.crash(&s, Actor::ResponseHandler, 0);
    let s = m.tick(&s);
    let s = m.deliver_response(&s, 0, false);
    let s = m.finish_run(s, Actor::ResponseHandler, 0);
    assert!(
        s.violations.contains(&Violation::TwoInstantsForOneAttempt),
        "{}",
        s.summary()
    );
    assert_ne!(Some(s.schedules[0].fire_at), s.records[0].next_fire_at);
    sim_finds(
        flaws,
        sim_cfg(),
        |r| r.instant_mismatches > 0,
        "instant mismatches",
    );
}

#[test]
fn retry_handler_discarding_a_redelivery_in_sending_is_caught() {
    // With the reconciler, which completes a stuck SENDING itself, nothing is lost in
    // the end: the dropped pending retry is what gives the flaw away.
    both_find(
        Flaws::only(|f| f.retry_discards_sending = true),
        Scope::quiet(1, 3).with_faults(|b| b.crashes = 1),
        9,
        |r| r.pending_retries_dropped > 0,
        "pending retries dropped",
    );
}

#[test]
fn counting_attempts_from_zero_is_caught() {
    let ordered = Scope {
        interleave: false,
        ..Scope::quiet(2, 3)
    };
    let flaws = Flaws::only(|f| f.attempts_from_zero = true);
    both_find(flaws, ordered, 2, |r| r.exceeded_max > 0, "exceeded max");
}

/// Without an answer deadline, a start that crashed before its publish, a request the
/// service never received and an answer lost after the service executed each leave
/// IN_PROGRESS with nothing in flight and nothing in a DLQ: lost. The simulator
/// catches it; the control (the deadline on, the same faults) loses nothing and
/// ends every such transaction by a republish or FAILED/UNANSWERED.
#[test]
fn no_answer_deadline_is_caught() {
    let flaws = Flaws::only(|f| f.no_answer_deadline = true);
    let cfg = SimConfig {
        start_crash_rate: 0.01,
        silent_rate: 0.02,
        lost_answer_rate: 0.01,
        ..sim_cfg()
    };
    let control = simulate(&cfg, 1);
    assert!(
        control.republished > 0 && control.unanswered > 0,
        "{control}"
    );
    assert_eq!(control.stuck, 0, "{control}");
    sim_finds(flaws, cfg, |r| r.lost > 0, "lost transactions");
}

/// The model checker catches the same design: a lost request or answer leaves
/// IN_PROGRESS that no reconciler run ends.
#[test]
fn no_answer_deadline_is_caught_by_the_model_checker() {
    let flaws = Flaws::only(|f| f.no_answer_deadline = true);
    model_finds(
        flaws,
        Scope::quiet(1, 2).with_faults(|b| b.lost_messages = 1),
        9,
    );
}

/// A technical failure taken for a business rejection (ERROR handled as CANCELLED):
/// an outage consumes attempts. The model checker finds the next attempt sent after
/// an ERROR alone; the simulator counts each such request as a retry without a
/// cancellation (`duplicated`).
#[test]
fn technical_failure_handled_as_cancelled_is_caught() {
    let flaws = Flaws::only(|f| f.technical_as_cancelled = true);
    let scope = Scope::quiet(1, 3).with_faults(|b| b.technical_answers = 1);
    model_finds(flaws, scope, 13);
    model_finds(flaws, scope, 1);
    sim_finds(
        flaws,
        SimConfig {
            technical_rate: 0.2,
            ..sim_cfg()
        },
        |r| r.duplicated > 0 && r.technical_failures > 0,
        "retries without a cancellation",
    );
}
