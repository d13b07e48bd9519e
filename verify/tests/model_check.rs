//! The exhaustive model check, CI-sized: every scope must explore without a single
//! violation, and must reach the situations the guarantees talk about (witnesses), so
//! a passing check cannot be a vacuous one. Larger scopes run with the `model-check`
//! binary (docs/verification.md).

use domain::machine::Actor;
use domain::machine::Status;
use domain::message::Outcome;
use verify::faults;
use verify::model::{check, Budgets, CheckReport, Firing, ProtocolModel, Scope, State};

/// Two transactions, max_attempts 3, in transaction order, with the budgets `f` sets.
fn scope(f: impl FnOnce(&mut Budgets)) -> Scope {
    let s = Scope::quiet(2, 3).with_faults(f);
    Scope {
        interleave: false,
        ..s
    }
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
    passes(scope(faults!(crashes)), 10_000, &[0, 1, 2, 3, 5]);
}

#[test]
fn two_transactions_duplicated_and_reordered_deliveries() {
    passes(scope(faults!(duplicate_deliveries)), 50_000, &[0, 1, 2, 5]);
}

#[test]
fn two_transactions_late_and_repeated_answers() {
    passes(scope(faults!(extra_answers)), 50_000, &[0, 1, 4]);
}

#[test]
fn two_transactions_scheduler_fires_twice_or_cannot_deliver_and_clock_moves() {
    passes(
        scope(faults!(double_fires, undeliverable_fires)),
        10_000,
        &[0, 1, 2],
    );
    passes(scope(faults!(ticks)), 5_000, &[0, 1]);
}

#[test]
fn operators_resolving_and_replaying_race_the_handlers_without_breaking_a_guarantee() {
    // An operator's `resolve` of a transaction waiting for its retry, or `replay` of
    // one that failed, at any moment: read, then write guarded by what was read,
    // against handlers that crash between two effects or get a message twice.
    let operators = |f: fn(&mut Budgets)| {
        Scope::quiet(1, 2)
            .with_faults(faults!(operator_actions))
            .with_faults(f)
    };
    passes(operators(faults!(crashes)), 10_000, &[0, 1, 15, 16]);
    passes(
        operators(faults!(duplicate_deliveries)),
        30_000,
        &[0, 1, 15, 16],
    );
    // Two commands: a replay, then a resolve of the replayed transaction.
    passes(operators(|b| b.operator_actions = 2), 5_000, &[15, 16]);
}

#[test]
fn reconciler_at_any_moment_rescues_an_undeliverable_event() {
    let s = Scope::quiet(1, 2).with_faults(faults!(reconciler_runs, undeliverable_fires));
    passes(s, 2_000, &[6, 7]);
}

/// A request lost before the service reads it (as after a start that crashed before
/// its publish) or an answer lost after the service executed, at any moment, with
/// the reconciler running at any moment: every transaction still ends terminal once
/// its deadline passes (property "terminal after the reconciler"), never above the
/// budget, never a second accepted request per attempt.
#[test]
fn lost_requests_and_answers_end_terminal_through_the_answer_deadline() {
    let s = Scope::quiet(1, 2).with_faults(faults!(lost_messages, reconciler_runs));
    passes(s, 1_000, &[0, 1]);
}

/// The service answers ERROR (a technical failure) at any moment, up to twice per
/// execution: the attempt is sent again with the same key, never consumed (property
/// "a technical failure never consumes an attempt"), every transaction still ends
/// terminal, and both ends are reached: a success after a re-send, and FAILED once
/// the re-sends (one in the model) are spent.
#[test]
fn technical_failures_never_consume_an_attempt_and_still_end() {
    let s = Scope::quiet(1, 2).with_faults(|b| b.technical_answers = 2);
    passes(s, 1_000, &[0, 1, 8, 9]);
    let s = Scope::quiet(1, 3).with_faults(|b| b.technical_answers = 1);
    passes(s, 5_000, &[0, 1, 8]);
}

/// The service answers REJECTED at any moment, with a crash and a duplicate
/// delivery, then with a technical answer and a duplicate delivery: no request goes
/// out after the rejection is recorded (but from a send that began before it), the
/// transaction ends FAILED/REJECTED, and that end is reached (witness 17).
#[test]
fn a_rejected_answer_ends_the_transaction_and_nothing_is_sent_after_it() {
    let mut s =
        Scope::quiet(1, 2).with_faults(faults!(rejected_answers, crashes, duplicate_deliveries));
    passes(s, 20_000, &[0, 1, 17]);
    s.faults.crashes = 0;
    s.faults.technical_answers = 1;
    passes(s, 100_000, &[0, 1, 8, 17]);
}

// ---------------------------------------------------------------------------
// The reconciler resuming each intermediate state, scripted on the model (real
// plans, one effect per step); after every scripted step the model's safety
// properties must hold. The exhaustive scopes above reach these states among all
// the others; these two pin what the reconciler does in each.
// ---------------------------------------------------------------------------

const TX: u8 = 0;

fn model() -> ProtocolModel {
    ProtocolModel::new(Scope::quiet(1, 3))
}

fn ok(m: &ProtocolModel, s: &State) {
    assert!(
        m.broken(s).is_empty(),
        "broken: {:?}\n{}",
        m.broken(s),
        s.summary()
    );
    assert!(s.violations.is_empty(), "{}", s.summary());
}

fn status(s: &State) -> Status {
    s.records[0].status
}

/// Attempt 1 was CANCELLED and its response is being handled by A (not started yet).
fn response_handler_running(m: &ProtocolModel) -> State {
    let s = m.service_receives_all(m.initial_state());
    let s = m.answer(&s, TX, 1, Outcome::Cancelled);
    let s = m.deliver_response(&s, TX, false);
    assert_eq!(
        ProtocolModel::next_effect(&s, Actor::ResponseHandler, TX).as_deref(),
        Some("write ResponseCancelledRetry")
    );
    s
}

/// Attempt 1 CANCELLED, schedule for attempt 2 confirmed (SCHEDULED).
fn scheduled(m: &ProtocolModel) -> State {
    let s = response_handler_running(m);
    let s = m.finish_run(s, Actor::ResponseHandler, TX);
    assert_eq!(status(&s), Status::Scheduled);
    s
}

/// The retry handler has received the event for attempt 2.
fn retry_handler_running(m: &ProtocolModel) -> State {
    let s = scheduled(m);
    let s = m.fire(&s, TX, Firing::Once);
    m.deliver_retry(&s, TX, false)
}

/// Finishes with SUCCESS for whatever is outstanding and checks the end state.
fn ends_succeeded(m: &ProtocolModel, s: State, attempts: u32) -> State {
    let s = m.settle_with(s, Outcome::Success);
    ok(m, &s);
    assert_eq!(status(&s), Status::Succeeded, "{}", s.summary());
    assert_eq!(s.records[0].current_attempt.get(), attempts);
    let accepted: Vec<u32> = s.service.accepted().map(|((_, a), _)| *a).collect();
    assert_eq!(
        accepted,
        (1..=attempts).collect::<Vec<_>>(),
        "one accepted request per attempt"
    );
    s
}

#[test]
fn reconciler_resumes_scheduling_both_before_and_after_the_fire_instant() {
    let m = model();
    for late in [false, true] {
        let s = response_handler_running(&m);
        let s = m.step_until(s, Actor::ResponseHandler, TX, "create-schedule");
        let mut s = m.crash(&s, Actor::ResponseHandler, TX);
        s.responses.clear(); // the response went to its DLQ
        assert_eq!(status(&s), Status::Scheduling);
        let s = m.reconcile(&s, TX, late);
        let s = m.finish_run(s, Actor::Reconciler, TX);
        ok(&m, &s);
        if late {
            assert_eq!(
                s.retries.len(),
                1,
                "past the instant: the event is put on the queue"
            );
        } else {
            assert_eq!(
                status(&s),
                Status::Scheduled,
                "before the instant: schedule created and confirmed"
            );
            assert_eq!(Some(s.schedules[0].fire_at), s.records[0].next_fire_at);
        }
        ends_succeeded(&m, s, 2);
    }
}

#[test]
fn reconciler_resumes_sending() {
    let m = model();
    let s = retry_handler_running(&m);
    let s = m.step_until(s, Actor::RetryHandler, TX, "publish-request");
    let mut s = m.crash(&s, Actor::RetryHandler, TX);
    s.retries.clear(); // the event went to the retry DLQ
    assert_eq!(status(&s), Status::Sending);
    let requests = s.requests.len();
    let s = m.reconcile(&s, TX, true);
    let s = m.finish_run(s, Actor::Reconciler, TX);
    // The reconciler completes the send itself (same key): nothing requeued.
    assert!(s.retries.is_empty());
    assert_eq!(s.requests.len(), requests + 1);
    ok(&m, &s);
    assert_eq!(status(&s), Status::InProgress);
    ends_succeeded(&m, s, 2);
}
