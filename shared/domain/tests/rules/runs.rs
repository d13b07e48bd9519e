//! Whole runs through `domain::exec::execute` over the in-memory adapters: the happy
//! path, a budget of one, repeated starts, technical errors, the reconciler resuming
//! each intermediate state, resolve and replay, and the bound on re-decisions. The
//! failure table of docs/design.md is run by one suite, through the functions' handler
//! cores on the memory and moto backends: `tests/tests/failure_table.rs`.

use crate::world::*;
use domain::decide::{Ack, Context, Disposition, DropReason, Effect, Input, Known, Rejection, Run};
use domain::decide::{Step, MAX_REDECISIONS};
use domain::exec::{execute, ExecError, RetryPorts};
use domain::machine::Counter;
use domain::machine::{Status, TransactionRecord, Write};
use domain::message::{Origin, Outcome, Payload, Request, RetryEvent};
use domain::policy::SplitMix64;
use domain::ports::{Payloads, PortError, Transitions, WriteOutcome};
use std::sync::atomic::{AtomicUsize, Ordering};
use testkit::memory::{block_on_ready, MemoryQueue, MemoryStore};
use testkit::ports::AllPorts;

use Status::*;

fn summary(w: &World, id: &domain::TransactionId) -> (Status, u32, Option<u32>) {
    let r = w.record(id);
    (
        r.status,
        r.current_attempt.get(),
        r.next_attempt.map(|n| n.get()),
    )
}

/// A new world where transaction `name` (budget `max`) started and attempt 1 was
/// answered CANCELLED: the world, the id and the response message.
fn cancelled_in_flight(name: &str, max: u32) -> (World, domain::TransactionId, Input) {
    let (mut w, id) = (World::new(), tx(name));
    assert_eq!(w.start(&id, max), Disposition::Ack(Ack::Started));
    let responses = w.serve(|_| Outcome::Cancelled);
    assert_eq!(responses.len(), 1);
    let resp = Input::Response(responses[0].clone());
    (w, id, resp)
}

fn ports(w: &World) -> MemPorts<'_> {
    AllPorts {
        store: &w.store,
        scheduler: &w.scheduler,
        requests: &w.requests,
        retries: &w.retries,
        notes: &w.store,
    }
}

/// A new world with transaction `name` up to its retry event of attempt 2 being due.
fn scheduled_and_due(name: &str) -> (World, domain::TransactionId, RetryEvent) {
    let (mut w, id, resp) = cancelled_in_flight(name, 4);
    assert_eq!(w.run(resp), Disposition::Ack(Ack::Scheduled));
    w.now = w.record(&id).next_fire_at.unwrap();
    let ev = w.fire_due().pop().unwrap();
    (w, id, ev)
}

/// GIVEN max_attempts = 4 WHEN attempts 1, 2, 3 are CANCELLED and attempt 4 succeeds
/// THEN the transaction ends SUCCEEDED after exactly four requests (keys `<id>#1..4`),
/// three schedules at 2 h / 4 h / 8 h ±10 %, no alert, and not one read of the state item.
#[test]
fn three_retries_then_success() {
    let mut w = World::new();
    let id = tx("TX-100200");
    let policy = w.policies.default.clone();
    assert_eq!(w.start(&id, 4), Disposition::Ack(Ack::Started));
    assert_eq!(w.published(&id), [1]);
    assert_eq!(
        w.requests.messages()[0].idempotency_key.as_str(),
        "TX-100200#1"
    );
    assert_eq!(
        w.requests.messages()[0].payload.as_json(),
        r#"{"amount":12.50,"currency":"EUR"}"#
    );
    for n in 1..=3u32 {
        let responses = w.serve(|_| Outcome::Cancelled);
        assert_eq!(responses.len(), 1);
        assert_eq!(responses[0].attempt, a(n));
        let answered_at = w.now;
        assert_eq!(
            w.run(Input::Response(responses[0].clone())),
            Disposition::Ack(Ack::Scheduled)
        );
        assert_eq!(summary(&w, &id), (Scheduled, n, Some(n + 1)));
        let fire = w.record(&id).next_fire_at.unwrap();
        assert_eq!(fire.millis() % 1000, 0, "a whole second");
        let (lo, hi) = policy.bounds(a(n));
        let wait = u128::try_from(fire.millis() - answered_at.millis()).unwrap();
        assert!(
            wait >= lo.as_millis() && wait < hi.as_millis() + 1000,
            "attempt {n}: waited {wait} ms, bounds {lo:?}..{hi:?}"
        );
        let nominal_h = [2, 4, 8][n as usize - 1];
        assert_eq!(policy.nominal(a(n)).as_secs(), nominal_h * 3600);
        let live = w.scheduler.live();
        assert_eq!(live.len(), 1);
        assert_eq!(live[0].name.as_str(), format!("retry-TX-100200-{}", n + 1));
        assert_eq!(
            live[0].fire_at, fire,
            "the schedule uses the persisted instant"
        );
        assert_eq!(
            live[0].event,
            RetryEvent {
                transaction_id: id.clone(),
                origin: Origin::RetryScheduler,
                attempt: a(n + 1),
                round: Some(0),
            }
        );
        // Nothing fires a millisecond early.
        w.now = fire.plus_millis(-1);
        assert!(w.fire_due().is_empty());
        w.now = fire;
        let events = w.fire_due();
        assert_eq!(events.len(), 1);
        assert_eq!(
            w.run(retry_input(events[0].clone())),
            Disposition::Ack(Ack::Published)
        );
        assert_eq!(summary(&w, &id), (InProgress, n + 1, None));
        assert_eq!(w.record(&id).next_fire_at, None);
        assert_eq!(w.published(&id), (1..=n + 1).collect::<Vec<_>>());
        let last = w.requests.messages().last().unwrap().clone();
        assert_eq!(
            last.idempotency_key.as_str(),
            format!("TX-100200#{}", n + 1)
        );
    }
    let responses = w.serve(|_| Outcome::Success);
    assert_eq!(
        w.run(Input::Response(responses[0].clone())),
        Disposition::Ack(Ack::Succeeded)
    );
    assert_eq!(summary(&w, &id), (Succeeded, 4, None));
    assert_eq!(w.alerts(), 0);
    assert_eq!(w.scheduler.created(), 3);
    assert_eq!(w.scheduler.conflicts(), 0);
    let calls = w.store.calls();
    assert_eq!(calls.reads, 0, "happy paths never read the state item");
    assert_eq!(calls.failed_conditions, 0);
    let trail: Vec<(Option<Status>, Status)> =
        w.store.audit(&id).iter().map(|e| (e.from, e.to)).collect();
    let mut want = vec![(None, InProgress)];
    for _ in 0..3 {
        want.extend([
            (Some(InProgress), Scheduling),
            (Some(Scheduling), Scheduled),
            (Some(Scheduled), Sending),
            (Some(Sending), InProgress),
        ]);
    }
    want.push((Some(InProgress), Succeeded));
    assert_eq!(trail, want);
}

/// max_attempts = 1 means the original request only: CANCELLED fails at once.
#[test]
fn a_budget_of_one_never_retries() {
    let (mut w, id, resp) = cancelled_in_flight("TX-1", 1);
    assert_eq!(w.run(resp), Disposition::Ack(Ack::Failed));
    assert_eq!(summary(&w, &id), (Failed, 1, None));
    assert_eq!(w.scheduler.created(), 0);
    assert_eq!(w.alerts(), 1);
    assert_eq!(w.published(&id), [1]);
}

/// Repeating a start is harmless: no second record, the same attempt-1 request again
/// while attempt 1 is still out, and a different payload is refused.
#[test]
fn repeated_start_is_harmless() {
    let mut w = World::new();
    let id = tx("TX-5");
    assert_eq!(w.start(&id, 3), Disposition::Ack(Ack::Started));
    assert_eq!(w.start(&id, 3), Disposition::Ack(Ack::AlreadyStarted));
    assert_eq!(w.published(&id), [1, 1]);
    assert!(w
        .requests
        .messages()
        .iter()
        .all(|r| r.idempotency_key.as_str() == "TX-5#1" && r.payload == payload()));
    let other = Input::Start {
        transaction_id: id.clone(),
        payload: Payload::from_json(r#"{"amount":99}"#).unwrap(),
        max_attempts: domain::MaxAttempts::new(3).unwrap(),
        correlation_id: None,
    };
    assert_eq!(
        w.run(other),
        Disposition::Reject(Rejection::PayloadMismatch {
            transaction_id: id.clone()
        })
    );
    assert_eq!(w.published(&id), [1, 1]);
    // A crash between the create and the publish: the repeat publishes attempt 1.
    let id2 = tx("TX-6");
    assert_eq!(
        w.run_crashing(start_input(&id2, 3), Some(1)),
        Err(ExecError::Stopped("publish-request"))
    );
    assert!(w.published(&id2).is_empty());
    assert_eq!(w.start(&id2, 3), Disposition::Ack(Ack::AlreadyStarted));
    assert_eq!(w.published(&id2), [1]);
    // Once past attempt 1, a repeat publishes nothing.
    let resp = w.serve(|_| Outcome::Cancelled);
    let resp = resp.into_iter().find(|r| r.transaction_id == id2).unwrap();
    assert_eq!(
        w.run(Input::Response(resp)),
        Disposition::Ack(Ack::Scheduled)
    );
    w.advance_ms(3 * HOUR_MS);
    let ev = w.fire_due();
    w.run(retry_input(ev[0].clone()));
    let before = w.requests.len();
    assert_eq!(w.start(&id2, 3), Disposition::Ack(Ack::AlreadyStarted));
    assert_eq!(w.requests.len(), before);
}

// ---------------------------------------------------------------------------
// Technical errors: an ERROR answer sends the same attempt again.
// ---------------------------------------------------------------------------

/// Answers every request published since last time with `outcome`, then lets the
/// schedules due in the next two hours fire and the retry handler run.
fn answer_each_and_fire(w: &mut World, outcome: Outcome) -> Vec<Disposition> {
    let mut out = Vec::new();
    for resp in w.serve_each(|_| outcome) {
        out.push(w.run(Input::Response(resp)));
    }
    w.advance_ms(2 * HOUR_MS);
    for ev in w.fire_due() {
        w.run(retry_input(ev));
    }
    out
}

/// GIVEN max_attempts = 2 WHEN attempt 1 is answered ERROR three times, then
/// CANCELLED, and attempt 2 ERROR twice, then SUCCESS THEN the transaction ends
/// SUCCEEDED at attempt 2: each ERROR sent the same attempt again with the same key
/// under a schedule of its own (`retry-<id>-<n>.<seq>`), counted on the record, no
/// attempt consumed, no alert; every transition is in the audit trail, each run in a
/// group of its own.
#[test]
fn technical_errors_never_consume_an_attempt() {
    let mut w = World::new();
    let id = tx("TX-T1");
    assert_eq!(w.start(&id, 2), Disposition::Ack(Ack::Started));
    for _ in 0..3 {
        assert_eq!(
            answer_each_and_fire(&mut w, Outcome::Error),
            [Disposition::Ack(Ack::Resend)]
        );
        assert_eq!(summary(&w, &id), (InProgress, 1, None));
    }
    assert_eq!(
        answer_each_and_fire(&mut w, Outcome::Cancelled),
        [Disposition::Ack(Ack::Scheduled)]
    );
    assert_eq!(summary(&w, &id), (InProgress, 2, None));
    for _ in 0..2 {
        answer_each_and_fire(&mut w, Outcome::Error);
    }
    assert_eq!(
        answer_each_and_fire(&mut w, Outcome::Success),
        [Disposition::Ack(Ack::Succeeded)]
    );
    let r = w.record(&id);
    assert_eq!(
        (r.status, r.current_attempt.get(), r.counts[Counter::Round]),
        (Succeeded, 2, 5)
    );
    assert_eq!(w.published(&id), [1, 1, 1, 1, 2, 2, 2]);
    let keys: Vec<String> = w
        .requests
        .messages()
        .iter()
        .map(|q| q.idempotency_key.to_string())
        .collect();
    assert_eq!(keys[..4], ["TX-T1#1"; 4]);
    assert_eq!(w.scheduler.created(), 6);
    assert_eq!(w.scheduler.conflicts(), 0);
    let names: Vec<String> = w
        .performed
        .iter()
        .filter_map(|e| match e {
            Effect::CreateSchedule(s) => Some(s.name.to_string()),
            _ => None,
        })
        .collect();
    assert_eq!(
        names,
        [
            "retry-TX-T1-1.1",
            "retry-TX-T1-1.2",
            "retry-TX-T1-1.3",
            "retry-TX-T1-2",
            "retry-TX-T1-2.4",
            "retry-TX-T1-2.5"
        ]
    );
    assert_eq!(w.alerts(), 0);
    // 1 creation, 6 cycles of 4 transitions, the SUCCESS.
    let audit = w.store.audit(&id);
    assert_eq!(audit.len(), 1 + 6 * 4 + 1);
    let mut groups: Vec<String> = audit.iter().map(|e| e.group_key()).collect();
    groups.dedup();
    assert_eq!(groups.len(), 1 + 6 * 2 + 1, "{groups:?}");
    let mut sorted = groups.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(
        sorted, groups,
        "one group per run, in the order of the runs"
    );
}

/// GIVEN a service that answers ERROR to every request WHEN TECHNICAL_RESEND_MAX
/// re-sends are spent THEN the next ERROR ends the transaction FAILED with the reason
/// TECHNICAL_EXHAUSTED and one business alert, at attempt 1; that ERROR delivered
/// again raises the alert again and writes nothing.
#[test]
fn technical_errors_past_the_bound_end_failed_with_an_alert() {
    let mut w = World::new();
    let id = tx("TX-T2");
    let max = w.ctx().rules.technical_resend_max;
    w.start(&id, 4);
    for _ in 0..=max {
        answer_each_and_fire(&mut w, Outcome::Error);
    }
    let r = w.record(&id);
    assert_eq!(
        (r.status, r.current_attempt.get(), r.counts[Counter::Round]),
        (Failed, 1, max)
    );
    assert_eq!(r.last_reason.as_deref(), Some("TECHNICAL_EXHAUSTED"));
    assert_eq!(w.published(&id).len(), 1 + max as usize);
    assert!(w.published(&id).iter().all(|n| *n == 1));
    assert_eq!(w.alerts(), 1);
    assert!(w.store.audit(&id).last().unwrap().is_exhaustion());
    let before = w.store.change_count();
    assert_eq!(
        w.run(response_input(&id, 1, Outcome::Error)),
        Disposition::Ack(Ack::Failed)
    );
    assert_eq!(w.alerts(), 2);
    assert_eq!(w.store.change_count(), before);
}

/// GIVEN an ERROR handled (SCHEDULED, re-send pending) WHEN it is delivered again,
/// before and after the re-send left THEN the first is already handled and the
/// second, taken as the re-send's own answer, opens the next re-send: one schedule
/// per re-send, never two for one.
#[test]
fn a_redelivered_error_schedules_nothing_twice() {
    let mut w = World::new();
    let id = tx("TX-T3");
    w.start(&id, 4);
    let resp = w.serve_each(|_| Outcome::Error).remove(0);
    assert_eq!(
        w.run(Input::Response(resp.clone())),
        Disposition::Ack(Ack::Resend)
    );
    assert_eq!(
        w.run(Input::Response(resp.clone())),
        Disposition::Ack(Ack::AlreadyHandled)
    );
    assert_eq!(w.scheduler.created(), 1);
    assert_eq!(summary(&w, &id), (Scheduled, 1, Some(1)));
    w.advance_ms(2 * HOUR_MS);
    for ev in w.fire_due() {
        w.run(retry_input(ev.clone()));
        // The event delivered twice: the re-send left once.
        assert!(matches!(
            w.run(retry_input(ev)),
            Disposition::Drop(DropReason::DuplicateRetry { .. })
        ));
    }
    assert_eq!(w.published(&id), [1, 1]);
    assert_eq!(w.run(Input::Response(resp)), Disposition::Ack(Ack::Resend));
    assert_eq!(w.scheduler.created(), 2);
    assert_eq!(w.record(&id).counts[Counter::Round], 2);
}

/// GIVEN attempt 1 answered ERROR, its re-send waiting (SCHEDULED) WHEN the service's
/// answer for a copy of request 1 it did process arrives, SUCCESS or CANCELLED, THEN
/// it is taken as from IN_PROGRESS(1): SUCCEEDED at attempt 1, or the cycle of attempt
/// 2 replacing the re-send; the re-send's schedule, firing, is dropped and request 1
/// does not leave again.
#[test]
fn an_answer_while_the_re_send_waits_is_taken() {
    for outcome in [Outcome::Success, Outcome::Cancelled] {
        let mut w = World::new();
        let id = tx("TX-T4");
        w.start(&id, 3);
        let resp = w.serve_each(|_| Outcome::Error).remove(0);
        assert_eq!(w.run(Input::Response(resp)), Disposition::Ack(Ack::Resend));
        assert_eq!(summary(&w, &id), (Scheduled, 1, Some(1)));
        let d = w.run(response_input(&id, 1, outcome));
        let after = match outcome {
            Outcome::Success => {
                assert_eq!(d, Disposition::Ack(Ack::Succeeded));
                (Succeeded, 1, None)
            }
            _ => {
                assert_eq!(d, Disposition::Ack(Ack::Scheduled));
                (Scheduled, 1, Some(2))
            }
        };
        assert_eq!(summary(&w, &id), after);
        // The re-send's schedule (the earlier one) fires: nothing leaves for attempt 1.
        w.advance_ms(5 * 60 * 1000);
        for ev in w.fire_due() {
            assert_eq!(ev.attempt, a(1));
            assert!(matches!(
                w.run(retry_input(ev)),
                Disposition::Drop(DropReason::DuplicateRetry { .. })
            ));
        }
        assert_eq!(w.published(&id), [1], "{outcome}");
        assert_eq!(w.record(&id).counts[Counter::Round], 1);
    }
}

// ---------------------------------------------------------------------------
// The reconciler resumes transactions stuck in each intermediate state.
// ---------------------------------------------------------------------------

fn past_threshold(w: &mut World) {
    w.advance_ms(i64::try_from(w.threshold.as_millis()).unwrap() + 1_000);
}

#[test]
fn reconciler_resumes_scheduling() {
    // The index keys a cycle by its fire time: while the fire time is ahead (or
    // passed by less than the threshold) the reconciler does not see it, even long
    // after the crash.
    let (mut w, id, resp) = cancelled_in_flight("TX-R2", 4);
    let _ = w.run_crashing(resp, Some(1)); // SCHEDULING, response lost to its DLQ
    let stored = w.record(&id).next_fire_at.unwrap();
    past_threshold(&mut w);
    assert!(w.now < stored);
    assert!(w.stuck().is_empty());
    assert!(w.reconcile().is_empty());
    w.now = stored;
    assert!(w.reconcile().is_empty());
    // Fire time past by the threshold: the event goes straight on the retry queue
    // (B accepts SCHEDULING); no schedule is created for an instant already gone.
    past_threshold(&mut w);
    assert_eq!(w.reconcile(), [Disposition::Ack(Ack::ReconcilerRequeued)]);
    assert!(w.scheduler.live().is_empty());
    let ev = w.retries.drain().pop().unwrap();
    assert_eq!(w.run(retry_input(ev)), Disposition::Ack(Ack::Published));
    assert_eq!(summary(&w, &id), (InProgress, 2, None));
}

/// GIVEN a retry event due while the circuit breaker holds requests back WHEN its
/// handler defers it and dies before SQS deletes it (so SQS delivers it again, and
/// that delivery is deferred too) THEN the record was never written, both copies
/// come back after the hold, and exactly one request 2 goes out: a hold is no arrow,
/// so there is no half-done pause for a crash to leave behind.
#[test]
fn a_held_event_crashed_before_its_ack_is_held_again_and_sent_once() {
    let (mut w, id, ev) = scheduled_and_due("TX-R9");
    let before = w.record(&id);
    w.hold = Some(domain::breaker::Hold {
        until: w.now.plus_millis(120_000),
        state: domain::breaker::BreakerState::Open {
            until: w.now.plus_millis(120_000),
            cooldown_ms: 120_000,
        },
    });
    // The first delivery deferred its event, then its handler died before SQS deleted
    // it: the same event is delivered again, and deferred again.
    assert_eq!(
        w.run(retry_input(ev.clone())),
        Disposition::Ack(Ack::Paused)
    );
    assert_eq!(w.run(retry_input(ev)), Disposition::Ack(Ack::Paused));
    assert_eq!(w.record(&id), before, "a hold writes nothing");
    let held = w.retries.delayed();
    assert_eq!(held.len(), 2);
    assert!(held
        .iter()
        .all(|(e, delay)| e.round == Some(0) && *delay == 120));
    // Past the hold, the breaker lets requests out: both copies are delivered.
    w.hold = None;
    w.advance_ms(120_000);
    w.retries.deliver_delayed();
    let outcomes: Vec<_> = w
        .retries
        .drain()
        .into_iter()
        .map(|e| w.run(retry_input(e)))
        .collect();
    assert_eq!(outcomes[0], Disposition::Ack(Ack::Published));
    assert_eq!(outcomes[1].label(), "duplicate-retry");
    assert_eq!(w.published(&id), [1, 2]);
    assert_eq!(summary(&w, &id), (InProgress, 2, None));
}

#[test]
fn reconciler_resumes_sending() {
    let (mut w, id, ev) = scheduled_and_due("TX-R3");
    let _ = w.run_crashing(retry_input(ev), Some(1)); // SENDING; event lost to its DLQ
    assert!(w.reconcile().is_empty());
    past_threshold(&mut w);
    // The reconciler completes the send itself (same key): no arrow leaves SENDING
    // but the publish's completion or an answer, and no requeue is counted.
    assert_eq!(w.reconcile(), [Disposition::Ack(Ack::Resumed)]);
    assert!(w.retries.drain().is_empty());
    assert_eq!(summary(&w, &id), (InProgress, 2, None));
    assert_eq!(w.record(&id).counts[Counter::Requeues], 0);
    assert_eq!(w.published(&id), [1, 2]);
    // IN_PROGRESS keeps the cycle's index entry (no index write) for its answer
    // deadline; found before it, the entry only moves to the deadline.
    let found = w.stuck();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].status, InProgress);
    assert_eq!(w.reconcile(), [Disposition::Ack(Ack::ReconcilerAwaiting)]);
    assert!(w.stuck().is_empty(), "its entry waits for the deadline");
    assert_eq!(
        w.published(&id),
        [1, 2],
        "nothing republished before the deadline"
    );
}

/// The reconciler's record may be stale (the index is eventually consistent): its
/// actions are conditional or go through B, so acting on a stale copy changes nothing.
#[test]
fn reconciler_acting_on_a_stale_record_is_harmless() {
    let (mut w, id, resp) = cancelled_in_flight("TX-R4", 4);
    let _ = w.run_crashing(resp.clone(), Some(1));
    w.now = w.record(&id).next_fire_at.unwrap();
    past_threshold(&mut w);
    let stale = w.stuck();
    assert_eq!(stale.len(), 1);
    // Meanwhile the response is redelivered, past the fire time: no schedule can be
    // set in the past, so the retry event goes straight to the retry queue, and the
    // retry goes out.
    w.run(resp);
    assert!(w.fire_due().is_empty(), "no schedule created in the past");
    let ev = w.retries.drain().pop().unwrap();
    assert_eq!(ev.origin, Origin::RetryScheduler);
    w.run(retry_input(ev));
    let settled = w.record(&id);
    assert_eq!(settled.status, InProgress);
    let changes = w.store.change_count();
    let published = w.published(&id);
    // Decided from the current record (IN_PROGRESS, its answer not yet due), it
    // publishes nothing: at most its index entry moves to the answer deadline.
    let ctx = w.ctx();
    let plan = domain::decide::decide(
        &Input::Reconcile(stale[0].clone()),
        Known::Record(&settled),
        None,
        &ctx,
        &mut SplitMix64::new(1),
    );
    assert!(
        plan.iter().all(|e| !matches!(
            e,
            Effect::PublishRequest(_) | Effect::PublishRetry(_) | Effect::CreateSchedule(_)
        )),
        "{plan:?}"
    );
    assert_eq!(plan.last(), Some(&Effect::Ack(Ack::ReconcilerAwaiting)));
    assert_eq!(w.store.change_count(), changes);
    // Run from the stale copy (SCHEDULING, fire time passed): its counted requeue is
    // a conditional write, which fails on the current record; the run decides again
    // on that record, so no retry event is put back at all — only the entry moves.
    let d = w.run(Input::Reconcile(stale[0].clone()));
    assert_eq!(d, Disposition::Ack(Ack::ReconcilerAwaiting));
    assert!(w.retries.drain().is_empty(), "nothing requeued");
    assert_eq!(w.store.change_count(), changes + 1);
    let after = w.record(&id);
    assert_eq!(
        (
            after.status,
            after.current_attempt,
            after.counts[Counter::Requeues]
        ),
        (settled.status, settled.current_attempt, 0)
    );
    assert_eq!(w.published(&id), published);
}

/// Resolved by other means while waiting: SUCCEEDED, the schedule deleted, and a
/// retry event that still arrives is dropped.
#[test]
fn resolve_while_waiting_deletes_the_schedule() {
    let (mut w, id, resp) = cancelled_in_flight("TX-R5", 4);
    w.run(resp);
    let ev = w.scheduler.live()[0].event.clone();
    assert_eq!(
        w.run(Input::Resolve(id.clone())),
        Disposition::Ack(Ack::Resolved)
    );
    let r = w.record(&id);
    assert_eq!(
        (r.status, r.next_attempt, r.next_fire_at),
        (Succeeded, None, None)
    );
    assert!(w.scheduler.live().is_empty());
    assert!(matches!(
        w.run(retry_input(ev)),
        Disposition::Drop(DropReason::StaleRetry { .. })
    ));
    assert_eq!(w.published(&id), [1]);
    assert_eq!(
        w.run(Input::Resolve(id.clone())),
        Disposition::Ack(Ack::AlreadyResolved)
    );
}

/// Operator replay reopens a FAILED transaction with more attempts: attempt n+1 goes
/// out through B, and the new budget is respected.
#[test]
fn replay_reopens_with_a_fresh_budget() {
    let (mut w, id, resp) = cancelled_in_flight("TX-R6", 1);
    w.run(resp);
    assert_eq!(summary(&w, &id), (Failed, 1, None));
    let replay = Input::Replay {
        transaction_id: id.clone(),
        budget: 1,
    };
    assert_eq!(w.run(replay.clone()), Disposition::Ack(Ack::Replayed));
    assert_eq!(summary(&w, &id), (Scheduling, 1, Some(2)));
    assert_eq!(w.record(&id).max_attempts.get(), 2);
    let ev = w.retries.drain().pop().unwrap();
    assert_eq!(ev.origin, Origin::Operator);
    assert_eq!(w.run(retry_input(ev)), Disposition::Ack(Ack::Published));
    assert_eq!(w.published(&id), [1, 2]);
    let resp = w.serve(|_| Outcome::Cancelled);
    assert_eq!(
        w.run(Input::Response(resp[0].clone())),
        Disposition::Ack(Ack::Failed)
    );
    assert_eq!(summary(&w, &id), (Failed, 2, None));
    assert!(matches!(
        w.run(Input::Replay {
            transaction_id: id.clone(),
            budget: 1
        }),
        Disposition::Ack(Ack::Replayed)
    ));
    assert!(matches!(
        w.run(replay),
        Disposition::Reject(Rejection::NotReplayable { .. })
    ));
}

/// At the highest budget accepted, replay has no attempt left to reopen with.
#[test]
fn replay_at_the_attempt_limit_is_refused() {
    let mut w = World::new();
    let id = tx("TX-R7");
    let limit = domain::ids::MAX_ATTEMPTS_LIMIT;
    let mut r =
        TransactionRecord::started(id.clone(), domain::MaxAttempts::new(limit).unwrap(), w.now);
    r.status = Failed;
    r.current_attempt = a(limit);
    w.store.put(r.clone(), Some(payload()));
    let d = w.run(Input::Replay {
        transaction_id: id.clone(),
        budget: 5,
    });
    let Disposition::Reject(rejection) = d else {
        panic!("{d:?}")
    };
    assert_eq!(
        rejection.to_string(),
        "transaction `TX-R7` is FAILED at the highest max_attempts accepted (1000): no attempt is left to replay"
    );
    assert_eq!(w.record(&id), r);
    assert!(w.retries.is_empty());
}

// ---------------------------------------------------------------------------
// The bound on re-decisions.
// ---------------------------------------------------------------------------

/// A store where another writer always gets there first: before each conditional
/// write it moves the record between SCHEDULED and SENDING (same pending attempt).
struct Contended {
    inner: MemoryStore,
    writes: AtomicUsize,
}

impl Transitions for Contended {
    async fn transition(&self, write: &Write) -> Result<WriteOutcome, PortError> {
        self.writes.fetch_add(1, Ordering::Relaxed);
        let mut r = self.inner.record(&write.transaction_id).unwrap();
        r.status = if r.status == Sending {
            Scheduled
        } else {
            Sending
        };
        self.inner.put(r, None);
        self.inner.transition(write).await
    }
}

impl Payloads for Contended {
    async fn payload(&self, id: &domain::TransactionId) -> Result<Option<Payload>, PortError> {
        self.inner.payload(id).await
    }
}

/// GIVEN a record that changes under every write WHEN a retry event is handled THEN
/// the run re-decides exactly MAX_REDECISIONS times and then gives up with a
/// rejection (the message goes to its DLQ instead of looping).
#[test]
fn redecisions_are_bounded() {
    let w = World::new();
    let id = tx("TX-R8");
    let mut r = TransactionRecord::started(id.clone(), domain::MaxAttempts::new(4).unwrap(), w.now);
    r.status = Scheduled;
    r.next_attempt = Some(a(2));
    r.next_fire_at = Some(w.now);
    let store = Contended {
        inner: MemoryStore::new(),
        writes: AtomicUsize::new(0),
    };
    store.inner.put(r, Some(payload()));
    let requests = MemoryQueue::<Request>::new();
    let retries = MemoryQueue::<RetryEvent>::new();
    let ports = RetryPorts {
        store: &store,
        requests: &requests,
        retries: &retries,
    };
    let ctx: Context = w.ctx();
    let mut rng = SplitMix64::new(1);
    let ev = RetryEvent {
        transaction_id: id.clone(),
        origin: Origin::RetryScheduler,
        attempt: a(2),
        round: None,
    };
    let mut run = Run::new(retry_input(ev), Known::Unread, &ctx, &mut rng);
    let d = block_on_ready(execute(&mut run, &ports, &ctx, &mut rng, &mut |_| true))
        .unwrap()
        .unwrap();
    assert_eq!(
        d,
        Disposition::Reject(Rejection::TooManyRedecisions {
            transaction_id: id.clone()
        })
    );
    assert_eq!(run.redecisions(), MAX_REDECISIONS);
    assert_eq!(
        store.writes.load(Ordering::Relaxed),
        usize::from(MAX_REDECISIONS) + 1
    );
    assert_eq!(run.step(), Step::Done(&d));
    assert!(requests.messages().iter().all(|r| r.attempt == a(2)));
}

/// Without contention a run never needs more than one re-decision, and its writes
/// never fail twice (see the property over arbitrary records in `decisions`).
#[test]
fn uncontended_runs_redecide_at_most_once() {
    let mut w = World::new();
    let id = tx("TX-R9");
    w.start(&id, 3);
    for _ in 0..6 {
        for resp in w.serve(|_| Outcome::Cancelled) {
            let ctx = w.ctx();
            let mut run = Run::new(Input::Response(resp), Known::Unread, &ctx, &mut w.rng);
            let ports = ports(&w);
            let mut rng = SplitMix64::new(5);
            let _ = block_on_ready(execute(&mut run, &ports, &ctx, &mut rng, &mut |_| true));
            assert!(run.redecisions() <= 1);
        }
        w.advance_ms(30 * HOUR_MS);
        for ev in w.fire_due() {
            w.run(retry_input(ev));
        }
    }
    assert_eq!(summary(&w, &id), (Failed, 3, None));
}
