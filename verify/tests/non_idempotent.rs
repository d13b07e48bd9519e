//! A service that does not deduplicate: it runs every request message it receives, so
//! the checkers count its runs per (transaction, attempt). Direct delivery (today's
//! design) publishes one attempt more than once — two deliveries of one retry event, a
//! crash after publishing, an answer deadline that fires while the service still
//! works — and such a service runs it twice: the known-bad both checkers must catch,
//! with its counterexample. What does not count as running twice: a copy of one
//! message the queue delivers again (consumed once), and the re-send of an attempt
//! the service answered ERROR (it did not run it).

use verify::model::{check, Action, CheckReport, ProtocolModel, Scope};
use verify::sim::{simulate, Report, ServiceDedup, SimConfig};

/// One transaction, max_attempts 2, every interleaving, against the service given.
fn one(service: ServiceDedup, f: impl FnOnce(&mut Scope)) -> Scope {
    let mut s = Scope::quiet(1, 2);
    s.service = service;
    f(&mut s);
    s
}

/// The scope passes with the deduplicating service, and the very same scope with a
/// service that does not deduplicate breaks "runs at most once"; the counterexample's
/// actions are returned.
fn caught(f: fn(&mut Scope)) -> Vec<String> {
    let control = check(one(ServiceDedup::ByKey, f), 1, false);
    assert!(
        control.violations.is_empty(),
        "control: {:#?}",
        control.violations
    );
    let r = check(one(ServiceDedup::NonIdempotent, f), 1, false);
    let trace = r
        .violations
        .get(ProtocolModel::EXECUTED_ONCE)
        .unwrap_or_else(|| panic!("not caught; found {:#?}", r.violations));
    println!("{}: counterexample of {} steps", r.scope, trace.len());
    for (i, step) in trace.iter().enumerate() {
        println!("{i:>3}. {step}");
    }
    trace.clone()
}

fn has(trace: &[String], action: &str) -> bool {
    trace.iter().any(|s| s.starts_with(action))
}

/// The action that ran the attempt twice: the last of the trace.
fn last_action(trace: &[String]) -> &str {
    trace
        .iter()
        .rev()
        .find(|s| !s.starts_with("(end)"))
        .map_or("", String::as_str)
}

/// A response or a retry event delivered twice: two runs end up publishing the
/// same attempt (the one that finds SENDING completes the send it finds).
#[test]
fn a_message_delivered_twice_makes_two_runs_publish_one_attempt() {
    let trace = caught(|s| s.faults.duplicate_deliveries = 1);
    assert!(
        trace.iter().any(
            |s| (s.starts_with("DeliverRetry") || s.starts_with("DeliverResponse"))
                && s.contains("duplicate: true")
        ),
        "a handler's message is delivered twice: {trace:#?}"
    );
    assert!(
        trace
            .iter()
            .filter(|s| s.starts_with("ServiceReceive"))
            .count()
            >= 3,
        "attempt 1, then attempt 2 twice"
    );
    assert!(
        !has(&trace, "ServiceReceive { i: 0, duplicate: true }"),
        "a copy of one request message is run once, not twice"
    );
    assert!(last_action(&trace).starts_with("ServiceReceive"));
}

#[test]
fn a_crash_and_the_redelivery_of_its_message_publish_one_attempt_again() {
    let trace = caught(|s| s.faults.crashes = 1);
    assert!(has(&trace, "Crash"), "{trace:#?}");
    assert!(last_action(&trace).starts_with("ServiceReceive"));
}

#[test]
fn the_answer_deadline_republishes_an_attempt_the_service_is_running() {
    let trace = caught(|s| s.faults.reconciler_runs = 1);
    assert!(has(&trace, "Reconcile"), "{trace:#?}");
    assert!(last_action(&trace).starts_with("ServiceReceive"));
}

/// Without faults nothing is published twice: the property holds over every
/// interleaving of two transactions, and the service option changes nothing of the
/// exploration but the property checked.
#[test]
fn without_faults_every_attempt_runs_once_and_the_exploration_is_the_same() {
    let mut by_key = Scope::quiet(2, 2);
    by_key.interleave = true;
    let a = check(by_key, 1, false);
    let b: CheckReport = check(by_key.non_idempotent(), 1, false);
    assert!(b.violations.is_empty(), "{:#?}", b.violations);
    assert_eq!(
        (a.states, a.unique_states),
        (b.states, b.unique_states),
        "the same states explored"
    );
    assert!(!ProtocolModel::new(by_key)
        .safety()
        .contains(&ProtocolModel::EXECUTED_ONCE));
    assert!(ProtocolModel::new(by_key.non_idempotent())
        .safety()
        .contains(&ProtocolModel::EXECUTED_ONCE));
}

/// An ERROR answer says the attempt did not run: the technical re-send that follows
/// (same attempt, same key) runs it for the first time.
#[test]
fn the_re_send_after_an_error_answer_is_no_second_run() {
    let s = Scope::quiet(1, 3)
        .non_idempotent()
        .with_faults(|b| b.technical_answers = 1);
    let r = check(s, 1, false);
    assert!(r.violations.is_empty(), "{:#?}", r.violations);
    // "a transaction succeeds after a technical re-send"
    assert!(r.unreached(&[8]).is_empty(), "no re-send explored");
}

/// A copy of one request message the queue delivers again is run once: a scope whose
/// only duplicate may be the request's holds, the copy explored.
#[test]
fn a_copy_of_one_request_message_is_run_once() {
    let s = Scope::quiet(1, 1).non_idempotent();
    let model = ProtocolModel::new(s);
    let mut st = model.apply(
        &init(&model),
        &Action::ServiceReceive {
            i: 0,
            duplicate: false,
        },
    );
    assert!(st.violations.is_empty());
    // The same, with the copy first: one run.
    let mut dup = s;
    dup.faults.duplicate_deliveries = 1;
    let model = ProtocolModel::new(dup);
    st = model.apply(
        &init(&model),
        &Action::ServiceReceive {
            i: 0,
            duplicate: true,
        },
    );
    assert_eq!(st.requests.len(), 1, "the message stays queued");
    st = model.apply(
        &st,
        &Action::ServiceReceive {
            i: 0,
            duplicate: false,
        },
    );
    assert!(st.violations.is_empty(), "{:?}", st.violations);
    // A second message for the attempt (a republish) is a second run.
    let republished = init(&model).requests[0].clone();
    assert!(!republished.delivered);
    st.requests.push(republished);
    st = model.apply(
        &st,
        &Action::ServiceReceive {
            i: 0,
            duplicate: false,
        },
    );
    assert_eq!(
        st.violations.iter().copied().collect::<Vec<_>>(),
        [verify::model::Violation::ExecutedTwice]
    );
}

fn init(model: &ProtocolModel) -> verify::model::State {
    use stateright::Model;
    model.init_states().remove(0)
}

// -- the simulator ---------------------------------------------------------

fn sim(transactions: usize, service: ServiceDedup) -> SimConfig {
    SimConfig {
        transactions,
        service,
        ..SimConfig::default()
    }
}

/// No fault of any kind: every request reaches the service once.
fn quiet(c: SimConfig) -> SimConfig {
    SimConfig {
        duplicate_rate: 0.0,
        crash_rate: 0.0,
        throttle_rate: 0.0,
        late_fire_rate: 0.0,
        double_fire_rate: 0.0,
        scheduler_failure_rate: 0.0,
        late_response_rate: 0.0,
        request_duplicate_rate: 0.0,
        ..c.answered()
    }
}

/// Every fault on: the run is the same run (same digest, same ends), and the service
/// that does not deduplicate ran attempts twice — the simulator reports it a violation.
#[test]
fn the_simulator_counts_runs_of_the_same_run_and_catches_the_doubles() {
    let by_key = simulate(&sim(3_000, ServiceDedup::ByKey), 1);
    let none = simulate(&sim(3_000, ServiceDedup::NonIdempotent), 1);
    println!("{none}");
    assert!(by_key.is_valid(), "{:?}", by_key.violations());
    assert_eq!(by_key.digest, none.digest, "the same run");
    assert_eq!(
        (by_key.succeeded, by_key.failed, by_key.requests_published),
        (none.succeeded, none.failed, none.requests_published)
    );
    assert_eq!(by_key.attempts_run, 0, "counted only without dedup");
    assert!(none.executed_twice > 0, "{none}");
    assert!(none.extra_runs >= none.executed_twice);
    assert_eq!(none.runs, none.attempts_run + none.extra_runs);
    assert_eq!(
        none.ran_again_by.values().sum::<u64>(),
        none.extra_runs,
        "every extra run has its publisher"
    );
    assert!(none
        .violations()
        .iter()
        .any(|(k, n)| *k == "executed-twice" && *n == none.executed_twice));
    assert!(none.to_string().contains("executed twice"));
    assert!(!by_key.to_string().contains("executed twice"));
}

#[test]
fn without_faults_the_simulated_service_runs_each_attempt_once() {
    let r = simulate(&quiet(sim(2_000, ServiceDedup::NonIdempotent)), 3);
    assert!(r.is_valid(), "{:?}\n{r}", r.violations());
    assert_eq!(r.executed_twice, 0);
    assert_eq!(r.runs, r.requests_published, "one run per request");
    assert_eq!(r.attempts_run, r.requests_published);
    assert_eq!(r.most_runs, 1);
}

/// ERROR answers and their re-sends, copies of one message: neither is a second run.
#[test]
fn error_re_sends_and_queue_copies_are_no_second_run() {
    let c = SimConfig {
        technical_rate: 0.2,
        request_duplicate_rate: 0.3,
        ..quiet(sim(2_000, ServiceDedup::NonIdempotent))
    };
    let r: Report = simulate(&c, 5);
    assert!(r.is_valid(), "{:?}\n{r}", r.violations());
    assert!(r.technical_resends > 0 && r.request_copies > 0, "{r}");
    assert_eq!(r.executed_twice, 0);
}
