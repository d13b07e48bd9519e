//! Outbox delivery: the decision to send attempt n and the intent are one write (the
//! record SENDING); a publisher reading the table's stream sends it to a FIFO request
//! queue whose deduplication id is `<transaction_id>#<attempt>#<round>`. The
//! guarantees checked here, against a service that does not deduplicate: each
//! (transaction, attempt, round) is published at most once (the queue accepts each id
//! once) and each (transaction, attempt) is executed at most once — under each fault
//! the checkers inject, every other guarantee holding too. The window assumption: a
//! repeat of a send comes within the queue's 5-minute deduplication window
//! (`window_expiries = 0`); with one expiry the property still holds, because the
//! domain does not send a claim older than `PUBLISH_RESEND_WINDOW` again. The
//! known-bad outbox designs (`Flaws`) are caught.

use domain::decide::Delivery;
use verify::faults;
use verify::model::{
    check, Budgets, CheckReport, OutageMode, ProtocolModel, Scope, OUTBOX_WITNESS,
};
use verify::sim::{simulate, Report, ServiceDedup, SimConfig};
use verify::Flaws;

/// One transaction, max_attempts 2, every interleaving, outbox delivery, a service
/// that does not deduplicate, with the fault budgets `f` sets.
fn outbox(f: impl FnOnce(&mut Budgets)) -> Scope {
    Scope::quiet(1, 2).outbox().non_idempotent().with_faults(f)
}

/// Checks `scope`: no violation, both outbox properties among those checked; prints
/// the counts (the figures of docs/verification.md).
fn holds(scope: Scope) -> CheckReport {
    let model = ProtocolModel::new(scope);
    assert!(model.safety().contains(&ProtocolModel::PUBLISHED_ONCE));
    assert!(model.safety().contains(&ProtocolModel::EXECUTED_ONCE));
    let r = check(scope, 2, false);
    println!(
        "{}: {} states ({} unique), max depth {}, {:.1} s",
        r.scope,
        r.states,
        r.unique_states,
        r.max_depth,
        r.elapsed.as_secs_f64()
    );
    assert!(r.violations.is_empty(), "{:#?}", r.violations);
    r
}

fn reached(r: &CheckReport, witness: usize) -> bool {
    r.witnessed.contains(OUTBOX_WITNESS[witness])
}

#[test]
fn no_fault_every_interleaving_of_two_transactions() {
    let mut s = Scope::quiet(2, 2).outbox().non_idempotent();
    s.interleave = true;
    let r = holds(s);
    assert!(reached(&r, 0), "the publisher's claim explored");
}

/// A publisher run stopped between its claim, its send and its mark: the stream
/// record comes back, the send is repeated within the window and the FIFO queue
/// drops it.
#[test]
fn crashes_of_the_publisher_and_the_handlers() {
    let r = holds(outbox(faults!(crashes)));
    assert!(reached(&r, 1), "a repeated send dropped by the queue");
}

/// A stream record, a retry event or an answer delivered twice.
#[test]
fn duplicate_deliveries() {
    let r = holds(outbox(faults!(duplicate_deliveries)));
    assert!(reached(&r, 1), "a repeated send dropped by the queue");
}

/// The reconciler rescues a stuck SENDING through the publisher's own decision, and
/// never republishes an unanswered request.
#[test]
fn reconciler_runs_and_lost_messages() {
    let r = holds(outbox(faults!(reconciler_runs, lost_messages)));
    assert!(reached(&r, 4), "an unconfirmed intent ends UNANSWERED");
}

#[test]
fn reconciler_run_and_a_crash() {
    holds(outbox(faults!(reconciler_runs, crashes)));
}

#[test]
fn extra_answers_double_and_undeliverable_fires_ticks() {
    holds(outbox(faults!(
        extra_answers,
        double_fires,
        undeliverable_fires,
        ticks
    )));
}

/// ERROR NOT_RUN sends the attempt again in a new round (a new deduplication id, its
/// first run); ERROR UNKNOWN ends the transaction FAILED/AMBIGUOUS, never sent again.
#[test]
fn technical_answers_of_both_kinds() {
    let r = holds(Scope {
        max_attempts: 3,
        ..outbox(|b| b.technical_answers = 2)
    });
    assert!(reached(&r, 2), "FAILED/AMBIGUOUS after an ERROR UNKNOWN");
    assert!(reached(&r, 3), "a success after a NOT_RUN re-send");
}

#[test]
fn rejected_answers_deadline_and_operators() {
    holds(outbox(faults!(
        rejected_answers,
        deadlines,
        operator_actions
    )));
}

#[test]
fn outages_with_the_breaker() {
    for mode in [OutageMode::Error, OutageMode::Silent] {
        let mut s = outbox(faults!(reconciler_runs)).with_outage(mode);
        s.rounds = 1;
        holds(s);
    }
}

/// The window passes once: the queue forgets every deduplication id, and a claim made
/// before is older than `PUBLISH_RESEND_WINDOW`. The domain does not send it again:
/// the transaction waits for its answer deadline and, when the send never went out,
/// ends FAILED/UNANSWERED.
#[test]
fn one_window_expiry_still_publishes_each_round_once() {
    let r = holds(outbox(faults!(crashes, window_expiries)));
    assert!(reached(&r, 5), "an old claim not sent again");
    holds(outbox(faults!(reconciler_runs, window_expiries)));
}

// -- known-bad designs ----------------------------------------------------------

/// The scope passes with the correct design, and breaks `property` with `flaw` on;
/// the counterexample's length is returned.
fn caught(scope: Scope, flaw: &str, property: &str) -> usize {
    holds(scope);
    let mut flaws = Flaws::NONE;
    assert!(flaws.switch_on(flaw));
    let r = check(scope.with_flaws(flaws), 2, false);
    let trace = r
        .violations
        .get(property)
        .unwrap_or_else(|| panic!("{flaw} not caught; found {:#?}", r.violations));
    println!("{flaw}: counterexample of {} steps", trace.len());
    for (i, step) in trace.iter().enumerate() {
        println!("{i:>3}. {step}");
    }
    trace.len()
}

/// A publisher that sends again whatever its claim's age: after the window passed,
/// the queue accepts the repeat and the service runs the attempt twice.
#[test]
fn a_publisher_resending_an_old_claim_is_caught() {
    let scope = outbox(faults!(crashes, window_expiries));
    caught(scope, "resends-old-claim", ProtocolModel::PUBLISHED_ONCE);
}

/// The retry handler publishing itself beside the publisher: its send and the
/// publisher's share an id the queue forgets once the window passed.
#[test]
fn a_retry_handler_still_publishing_in_outbox_is_caught() {
    let scope = outbox(faults!(duplicate_deliveries, window_expiries));
    caught(
        scope,
        "retry-publishes-in-outbox",
        ProtocolModel::PUBLISHED_ONCE,
    );
}

/// Direct delivery's scopes are explored as before: the delivery field and the window
/// budget add nothing to them.
#[test]
fn direct_delivery_explores_what_it_did() {
    let s = Scope::quiet(1, 2)
        .non_idempotent()
        .with_faults(|b| b.crashes = 1);
    assert_eq!(s.delivery, Delivery::Direct);
    assert!(!ProtocolModel::new(s)
        .safety()
        .contains(&ProtocolModel::PUBLISHED_ONCE));
    let r = check(s, 1, false);
    assert!(r.violations.contains_key(ProtocolModel::EXECUTED_ONCE));
}

// -- the simulator ------------------------------------------------------------

fn sim_outbox(transactions: usize) -> SimConfig {
    SimConfig {
        transactions,
        service: ServiceDedup::NonIdempotent,
        delivery: Delivery::Outbox,
        technical_rate: 0.05,
        rejected_rate: 0.01,
        operator_rate: 0.01,
        ..SimConfig::default()
    }
}

/// Every fault on, ERROR answers of both kinds: nothing published twice, nothing
/// executed twice, every other guarantee holding; the publisher's repeats were
/// there to be dropped.
#[test]
fn the_simulator_publishes_and_runs_each_attempt_once_in_outbox() {
    let mut total = Report::default();
    for seed in 1..=3 {
        let r = simulate(&sim_outbox(2_000), seed);
        assert!(r.is_valid(), "seed {seed}: {:?}\n{r}", r.violations());
        total.merge(&r);
    }
    println!("{total}");
    assert!(total.outbox && total.non_idempotent);
    assert_eq!((total.published_twice, total.executed_twice), (0, 0));
    assert!(total.stream_redeliveries > 0, "{total}");
    assert!(total.fifo_deduplicated > 0, "{total}");
    assert!(
        total.errors_unknown > 0 && total.errors_not_run > 0,
        "{total}"
    );
    assert_eq!(total.fifo_accepted, total.requests_published);
    assert!(total.to_string().contains("published twice 0"));
}

/// The same seeds in direct delivery draw nothing of the outbox's: the outbox lines
/// are absent and the digest is that of a run without them.
#[test]
fn direct_delivery_in_the_simulator_is_the_run_it_was() {
    let c = SimConfig {
        transactions: 1_000,
        ..SimConfig::default()
    };
    let a = simulate(&c, 4);
    let b = simulate(
        &SimConfig {
            unknown_error_share: 0.9,
            ..c.clone()
        },
        4,
    );
    assert_eq!(a.digest, b.digest);
    assert!(!a.outbox && a.stream_records == 0);
    assert!(!a.to_string().contains("outbox delivery"));
}
