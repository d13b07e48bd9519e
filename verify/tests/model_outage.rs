//! The exhaustive model check with an outage of the service and its circuit breaker
//! (docs/verification.md, "Outages and the circuit breaker in the model").

use domain::machine::Counter;
use verify::model::{check, CheckReport, OutageMode, ProtocolModel, Scope};
use verify::Flaws;

const P: [&str; 24] = ProtocolModel::SAFETY;

/// "An outage ends no transaction FAILED".
const FAILED_BY_OUTAGE: usize = 17;

/// "Each ERROR answer spends at most one technical re-send".
const ONE_RESEND_PER_ERROR: usize = 18;

/// One transaction, max_attempts 1, the service down answering ERROR, at most two
/// retry cycles (a technical re-send and a pause).
fn error_scope() -> Scope {
    let mut s = Scope::quiet(1, 1).with_outage(OutageMode::Error);
    s.rounds = 2;
    s
}

/// One transaction, max_attempts 2, the service down answering ERROR, one retry
/// cycle per attempt: attempt 1 answered before the outage leaves the breaker below
/// its ratio at attempt 2's first ERROR, so its re-send goes out into the outage.
fn error_scope_two_attempts() -> Scope {
    let mut s = Scope::quiet(1, 2).with_outage(OutageMode::Error);
    s.rounds = 1;
    s
}

/// One transaction, max_attempts 2, the service down and silent, one reconciler run
/// (the answer deadline), one retry cycle per attempt.
fn silent_scope() -> Scope {
    let mut s = Scope::quiet(1, 2)
        .with_outage(OutageMode::Silent)
        .with_faults(|b| b.reconciler_runs = 1);
    s.rounds = 1;
    s
}

fn run(scope: Scope) -> CheckReport {
    let r = check(scope, 1, false);
    println!(
        "{}: {} states ({} unique) in {:.1} s; broken: {:?}",
        r.scope,
        r.states,
        r.unique_states,
        r.elapsed.as_secs_f64(),
        r.violations.keys().collect::<Vec<_>>()
    );
    r
}

fn reached(r: &CheckReport, witnesses: &[usize]) {
    let unreached = r.unreached(witnesses);
    assert!(unreached.is_empty(), "not reached: {unreached:?}");
}

/// A silent outage: the answer deadline opens the breaker, the reconciler's request
/// past its deadline is held or let out as the probe, retries wait; every property
/// holds, and nothing in flight means terminal once the service is back.
#[test]
fn a_silent_outage_breaks_no_guarantee() {
    let r = run(silent_scope());
    assert!(r.violations.is_empty(), "{:#?}", r.violations);
    assert!(r.unique_states >= 10_000, "{}", r.unique_states);
    reached(&r, &[0, 1, 11]);
}

/// An outage answering ERROR: the breaker opens on the first ERROR, pauses the
/// re-send, lets one probe out per round. Every property holds, "an outage ends no
/// transaction FAILED" included, with the model's one technical re-send: an ERROR
/// answering an earlier round (a response handler's run deciding it again after its
/// own re-send went out, or the answer delivered twice) is dropped, and the probe's
/// ERROR is counted a pause.
#[test]
fn an_error_outage_breaks_no_guarantee() {
    let r = run(error_scope());
    assert!(r.violations.is_empty(), "{:#?}", r.violations);
    reached(&r, &[0, 8, 10, 11, 12]);
    let r = run(error_scope_two_attempts());
    assert!(r.violations.is_empty(), "{:#?}", r.violations);
    reached(&r, &[0, 1]);
}

/// "Past its deadline a transaction ends, whatever holds it".
const ENDS_PAST_DEADLINE: usize = 19;

/// One transaction, max_attempts 1, the service down answering ERROR, two waits for
/// the attempt (its re-send and one hold, so that the held event comes back as the
/// half-open probe), one reconciler run (late: past every threshold and answer
/// deadline).
fn error_scope_reconciled() -> Scope {
    let mut s = Scope::quiet(1, 1)
        .with_outage(OutageMode::Error)
        .with_faults(|b| b.reconciler_runs = 1);
    s.rounds = 2;
    s
}

/// The same and the silent scope, with the clock jumping past the transaction's
/// deadline once (the reconciler's late run is past it too).
fn with_deadline(mut s: Scope) -> Scope {
    s.faults.deadlines = 1;
    s
}

/// An error outage with a reconciler run. Found by this scope: the reconciler's run
/// queried a SCHEDULING record (the breaker not asked), its requeue failed on the
/// record its own requeued event had moved on, and decided again from what came back
/// — an IN_PROGRESS probe past its deadline — it republished as if the breaker were
/// CLOSED and cleared the probe's mark, so the probe's ERROR spent the technical
/// re-send: FAILED/TECHNICAL_EXHAUSTED by the outage. A record that now must ask the
/// breaker is left to the next run.
#[test]
fn a_reconciler_run_in_an_error_outage_breaks_no_guarantee() {
    let r = run(error_scope_reconciled());
    assert!(r.violations.is_empty(), "{:#?}", r.violations);
    reached(&r, &[0, 11]);
}

/// Past the deadline, the outage going on: every transaction ends, FAILED/EXPIRED —
/// by a handler's decision or the reconciler's — and every other property holds.
#[test]
fn past_its_deadline_every_transaction_ends_in_an_outage() {
    let r = run(with_deadline(error_scope_reconciled()));
    assert!(r.violations.is_empty(), "{:#?}", r.violations);
    reached(&r, &[0, 11, 13, 14]);
    let r = run(with_deadline(silent_scope()));
    assert!(r.violations.is_empty(), "{:#?}", r.violations);
    reached(&r, &[0, 13]);
}

/// Without a transaction deadline, a transaction held by an outage that never ends
/// stays open. Scripted (the exhaustive search of the flawed design is slow: every
/// state past the deadline replays the reconciler's runs without end): the service
/// down answering ERROR, the re-send held, then the deadline passes; the property
/// holds with the deadline and breaks without it. (In a silent outage the republish
/// bound ends the transaction UNANSWERED either way, so the scope must answer ERROR.)
#[test]
fn no_transaction_deadline_is_caught() {
    assert_eq!(
        held_when_the_deadline_passes(Flaws::NONE),
        Vec::<&str>::new()
    );
    let broken = held_when_the_deadline_passes(Flaws::only(|f| f.no_transaction_deadline = true));
    assert_eq!(broken, [P[ENDS_PAST_DEADLINE]]);
}

/// The properties a state breaks once the deadline has passed over a transaction
/// whose re-send the breaker held.
fn held_when_the_deadline_passes(flaws: Flaws) -> Vec<&'static str> {
    use domain::machine::Actor;
    use domain::message::Outcome;
    use verify::model::{Action, Firing};
    let m = ProtocolModel::new(with_deadline(error_scope_reconciled()).with_flaws(flaws));
    let s = m.service_receives_all(m.initial_state());
    let s = m.apply(&s, &Action::OutageStarts);
    let s = m.answer(&s, 0, 1, Outcome::Error);
    let s = m.deliver_response(&s, 0, false);
    let s = m.finish_run(s, Actor::ResponseHandler, 0);
    let s = m.fire(&s, 0, Firing::Once);
    let s = m.deliver_retry(&s, 0, false);
    let mut s = m.finish_run(s, Actor::RetryHandler, 0);
    assert_eq!(s.held[0], 1, "{}", s.summary());
    // The held event lost on its way back (the property looks at a transaction with
    // nothing in flight): only the reconciler can end it now.
    s.retries.clear();
    s.lost[0] += 1;
    let s = m.apply(&s, &Action::DeadlinePasses);
    m.broken(&s)
}

/// The design before answers echoed their round: an ERROR delivered again (or
/// decided again by a stalled run) after its re-send went out spends a second
/// re-send, the last one: FAILED/TECHNICAL_EXHAUSTED after one ERROR. One
/// transaction, max_attempts 1, one ERROR answer, one duplicate delivery.
#[test]
fn an_error_counted_twice_is_caught() {
    let flaws = Flaws::only(|f| f.error_round_ignored = true);
    let s = Scope::quiet(1, 1).with_faults(|b| {
        b.technical_answers = 1;
        b.duplicate_deliveries = 1;
    });
    model_finds(flaws, s, ONE_RESEND_PER_ERROR);
}

/// The design before the retry handler marked its probe: the probe's ERROR spends
/// the last re-send.
#[test]
fn a_probe_spending_a_resend_is_caught() {
    let flaws = Flaws::only(|f| f.probe_spends_resend = true);
    model_finds(flaws, error_scope(), FAILED_BY_OUTAGE);
}

/// The broken variant breaks `primary`, which the same scope without it does not.
fn model_finds(flaws: Flaws, scope: Scope, primary: usize) {
    let clean = run(scope);
    assert!(
        !clean.violations.contains_key(P[primary]),
        "control: {:#?}",
        clean.violations
    );
    let r = run(scope.with_flaws(flaws));
    assert!(
        r.violations.contains_key(P[primary]),
        "{flaws:?}: `{}` not caught",
        P[primary]
    );
}

#[test]
fn technical_failure_handled_as_cancelled_is_caught_with_an_outage() {
    let flaws = Flaws::only(|f| f.technical_as_cancelled = true);
    let mut s = Scope::quiet(1, 2).with_outage(OutageMode::Error);
    s.rounds = 1;
    model_finds(flaws, s, 13);
}

#[test]
fn a_retry_handler_ignoring_the_breaker_is_caught() {
    let flaws = Flaws::only(|f| f.ignores_breaker = true);
    model_finds(flaws, error_scope(), 15);
}

#[test]
fn a_held_event_beginning_its_send_is_caught() {
    let flaws = Flaws::only(|f| f.held_event_begins_send = true);
    model_finds(flaws, error_scope(), 14);
}

/// The probe, scripted: one transaction, the service down answering ERROR. The
/// first ERROR opens the breaker; its re-send's event is held (deferred, the record
/// untouched); it comes back after the cool-down and the re-send goes out as the
/// HALF_OPEN probe, marked; the service, still down, answers ERROR: a cycle that
/// spends nothing (`pauses` + 1), the transaction waits for the next round. With the probe not marked (the known-bad variant), the same
/// answer spends the technical re-send and ends it FAILED/TECHNICAL_EXHAUSTED.
#[test]
fn a_probe_answered_error_is_counted_a_pause() {
    let paused = probe_answered_error(Flaws::NONE);
    assert_eq!(
        (paused.status, paused.current_attempt.get()),
        (domain::Status::Scheduling, 1)
    );
    assert_eq!(
        (
            paused.counts[Counter::Round],
            paused.counts[Counter::ProbeErrors]
        ),
        (2, 1),
        "{paused:?}"
    );
    let spent = probe_answered_error(Flaws::only(|f| f.probe_spends_resend = true));
    assert_eq!(
        (spent.status, spent.last_reason.as_deref()),
        (
            domain::Status::Failed,
            Some(domain::decide::TECHNICAL_EXHAUSTED_REASON)
        ),
        "{spent:?}"
    );
    assert_eq!(
        (
            spent.current_attempt.get(),
            spent.counts[Counter::ProbeErrors]
        ),
        (1, 0)
    );
}

/// The record after the probe's ERROR was decided (the run stopped before creating
/// the next round's schedule, when there is one).
fn probe_answered_error(flaws: Flaws) -> domain::TransactionRecord {
    use domain::machine::Actor;
    use domain::message::Outcome;
    use verify::model::{Action, Firing};
    let m = ProtocolModel::new(error_scope().with_flaws(flaws));
    let s = m.service_receives_all(m.initial_state());
    let s = m.apply(&s, &Action::OutageStarts);
    let s = m.answer(&s, 0, 1, Outcome::Error);
    let s = m.deliver_response(&s, 0, false);
    let s = m.finish_run(s, Actor::ResponseHandler, 0);
    assert_eq!(s.records[0].counts[Counter::Round], 1, "{}", s.summary());
    // The re-send's schedule fires while the breaker is OPEN: held, the event
    // deferred, the record untouched.
    let before = s.records[0].clone();
    let s = m.fire(&s, 0, Firing::Once);
    let s = m.deliver_retry(&s, 0, false);
    let s = m.finish_run(s, Actor::RetryHandler, 0);
    assert_eq!((s.held[0], &s.records[0]), (1, &before), "{}", s.summary());
    // The held event comes back after the cool-down: the probe goes out.
    let s = m.deliver_retry(&s, 0, false);
    let s = m.finish_run(s, Actor::RetryHandler, 0);
    assert!(
        s.breaker.as_ref().is_some_and(|b| !b.probes.is_empty()),
        "{}",
        s.summary()
    );
    assert_eq!(
        s.records[0].is_probing(),
        !flaws.probe_spends_resend,
        "{}",
        s.summary()
    );
    let s = m.service_receives_all(s);
    let s = m.answer(&s, 0, 1, Outcome::Error);
    let s = m.deliver_response(&s, 0, false);
    // Decided and written; the next round's schedule left for the run to create.
    let s = m.step_until(s, Actor::ResponseHandler, 0, "create-schedule");
    s.records[0].clone()
}

/// The design before signals were tied to the probe: any SUCCESS or CANCELLED closed
/// a HALF_OPEN breaker. Caught where the breaker is told of a probe's answer for a
/// record the store found unmarked.
#[test]
fn any_answer_closing_the_breaker_is_caught() {
    let flaws = Flaws::only(|f| f.any_answer_closes = true);
    model_finds(flaws, error_scope_two_attempts(), 21);
}
