//! One test per row of the failure table of docs/design.md, scripted on the model (real plans,
//! one effect per step), plus the reconciler resuming each intermediate state.
//! After every scripted step the model's safety properties must hold.

use domain::machine::Status;
use domain::message::Outcome;
use verify::model::{Firing, Kind, ProtocolModel, Scope, State};

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
        ProtocolModel::next_effect(&s, Kind::ResponseHandler, TX).as_deref(),
        Some("write ResponseCancelledRetry")
    );
    s
}

/// Attempt 1 CANCELLED, schedule for attempt 2 confirmed (SCHEDULED).
fn scheduled(m: &ProtocolModel) -> State {
    let s = response_handler_running(m);
    let s = m.finish_run(s, Kind::ResponseHandler, TX);
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
fn row_a_dies_before_scheduling_repeats_the_whole_process_without_duplicates() {
    let m = model();
    let s = response_handler_running(&m);
    let s = m.crash(&s, Kind::ResponseHandler, TX);
    ok(&m, &s);
    assert_eq!(status(&s), Status::InProgress);
    assert_eq!(s.responses.len(), 1, "the response is redelivered");
    let s = m.deliver_response(&s, TX, false);
    let s = m.finish_run(s, Kind::ResponseHandler, TX);
    ok(&m, &s);
    assert_eq!(status(&s), Status::Scheduled);
    assert_eq!(s.schedules.len(), 1);
    ends_succeeded(&m, s, 2);
}

#[test]
fn row_a_dies_after_scheduling_before_creating_reuses_the_stored_instant() {
    let m = model();
    let s = response_handler_running(&m);
    let s = m.step_until(s, Kind::ResponseHandler, TX, "create-schedule");
    let s = m.crash(&s, Kind::ResponseHandler, TX);
    assert_eq!(status(&s), Status::Scheduling);
    assert!(s.schedules.is_empty());
    let stored = s.records[0].next_fire_at;
    // Time moves on before the redelivery: a recomputed instant would differ.
    let s = m.tick(&s);
    let s = m.deliver_response(&s, TX, false);
    let s = m.finish_run(s, Kind::ResponseHandler, TX);
    ok(&m, &s);
    assert_eq!(status(&s), Status::Scheduled);
    assert_eq!(s.schedules.len(), 1, "one retry");
    assert_eq!(
        Some(s.schedules[0].fire_at),
        stored,
        "the stored next_fire_at is reused"
    );
    ends_succeeded(&m, s, 2);
}

#[test]
fn row_a_dies_after_creating_before_scheduled_create_says_exists() {
    let m = model();
    let s = response_handler_running(&m);
    let s = m.step_until(s, Kind::ResponseHandler, TX, "write ScheduleConfirmed");
    let s = m.crash(&s, Kind::ResponseHandler, TX);
    assert_eq!(status(&s), Status::Scheduling);
    assert_eq!(s.schedules.len(), 1);
    let s = m.deliver_response(&s, TX, false);
    let s = m.step_until(s, Kind::ResponseHandler, TX, "write ScheduleConfirmed");
    let run = &s.runs[ProtocolModel::run_of(&s, Kind::ResponseHandler, TX).unwrap_or(0)];
    assert!(
        run.run
            .trail()
            .iter()
            .any(|(_, o)| *o == domain::Observed::ScheduleAlreadyExists),
        "the create answered `already exists` and the run went on"
    );
    let s = m.finish_run(s, Kind::ResponseHandler, TX);
    ok(&m, &s);
    assert_eq!(status(&s), Status::Scheduled);
    assert_eq!(s.schedules.len(), 1);
    ends_succeeded(&m, s, 2);
}

#[test]
fn row_retry_event_while_still_scheduling_is_accepted_and_a_later_condition_failure_is_success() {
    let m = model();
    let s = response_handler_running(&m);
    let s = m.step_until(s, Kind::ResponseHandler, TX, "write ScheduleConfirmed");
    assert_eq!(status(&s), Status::Scheduling);
    let s = m.fire(&s, TX, Firing::Once);
    let s = m.deliver_retry(&s, TX, false);
    let s = m.finish_run(s, Kind::RetryHandler, TX);
    ok(&m, &s);
    assert_eq!(status(&s), Status::InProgress);
    assert_eq!(s.records[0].current_attempt.get(), 2);
    // A resumes: its confirm finds IN_PROGRESS(2) and acknowledges.
    let s = m.finish_run(s, Kind::ResponseHandler, TX);
    ok(&m, &s);
    assert!(
        s.runs.is_empty() && s.responses.is_empty(),
        "A finished and acknowledged"
    );
    assert_eq!(status(&s), Status::InProgress);
    ends_succeeded(&m, s, 2);
}

#[test]
fn row_scheduler_cannot_deliver_the_dlq_keeps_it_and_the_reconciler_resumes() {
    let m = model();
    let s = scheduled(&m);
    let s = m.fire(&s, TX, Firing::Undeliverable);
    ok(&m, &s);
    assert_eq!(s.scheduler_dlq[0], 1, "the scheduler DLQ keeps the event");
    assert_eq!(status(&s), Status::Scheduled);
    assert!(s.schedules.is_empty() && s.retries.is_empty());
    let s = m.reconcile(&s, TX, true);
    let s = m.finish_run(s, Kind::Reconciler, TX);
    assert_eq!(
        s.retries.len(),
        1,
        "SCHEDULED long past its instant: the reconciler requeues"
    );
    ends_succeeded(&m, s, 2);
}

#[test]
fn row_event_delivered_twice_the_duplicate_is_dropped() {
    let m = model();
    let s = scheduled(&m);
    let s = m.fire(&s, TX, Firing::Twice);
    let s = m.fire(&s, TX, Firing::Once);
    assert_eq!(s.retries.len(), 2);
    let s = m.deliver_retry(&s, TX, false);
    let s = m.finish_run(s, Kind::RetryHandler, TX);
    assert_eq!(status(&s), Status::InProgress);
    let s = m.deliver_retry(&s, TX, false);
    let s = m.finish_run(s, Kind::RetryHandler, TX);
    ok(&m, &s);
    assert_eq!(s.requests.len(), 1, "the duplicate published nothing");
    ends_succeeded(&m, s, 2);
}

#[test]
fn row_event_delivered_twice_concurrently_resumes_a_half_done_run() {
    let m = model();
    let s = scheduled(&m);
    let s = m.fire(&s, TX, Firing::Once);
    let s = m.deliver_retry(&s, TX, true);
    let s = m.deliver_retry(&s, TX, false);
    assert_eq!(s.runs.len(), 2);
    // The first run moves to SENDING; the second finds SENDING and resumes it.
    let first = ProtocolModel::run_of(&s, Kind::RetryHandler, TX).unwrap_or(0);
    let s = m.apply(&s, &verify::model::Action::Step { run: first });
    assert_eq!(status(&s), Status::Sending);
    let fresh = s.runs.iter().position(|r| r.performed == 0).unwrap_or(0);
    let s = m.apply(&s, &verify::model::Action::Step { run: fresh });
    ok(&m, &s);
    assert_eq!(
        s.runs.len(),
        2,
        "the second run resumes instead of dropping"
    );
    let mut s = s;
    while !s.runs.is_empty() {
        s = m.apply(&s, &verify::model::Action::Step { run: 0 });
        ok(&m, &s);
    }
    assert_eq!(status(&s), Status::InProgress, "{}", s.summary());
    assert_eq!(s.requests.len(), 2, "both published, with one key");
    assert_eq!(s.requests[0].key, s.requests[1].key);
    let s = m.service_receives_all(s);
    assert_eq!(
        s.service.accepted().count(),
        2,
        "attempts 1 and 2, each accepted once"
    );
    ends_succeeded(&m, s, 2);
}

#[test]
fn row_b_dies_after_sending_before_publishing_redelivery_resumes_and_publishes() {
    let m = model();
    let s = retry_handler_running(&m);
    let s = m.step_until(s, Kind::RetryHandler, TX, "publish-request");
    let s = m.crash(&s, Kind::RetryHandler, TX);
    ok(&m, &s);
    assert_eq!(status(&s), Status::Sending);
    assert!(s.requests.is_empty());
    let s = m.deliver_retry(&s, TX, false);
    let s = m.finish_run(s, Kind::RetryHandler, TX);
    ok(&m, &s);
    assert_eq!(status(&s), Status::InProgress);
    assert_eq!(s.requests.len(), 1, "published once");
    ends_succeeded(&m, s, 2);
}

#[test]
fn row_b_dies_after_publishing_before_in_progress_republishes_and_the_service_dedupes() {
    let m = model();
    let s = retry_handler_running(&m);
    let s = m.step_until(s, Kind::RetryHandler, TX, "write RequestPublished");
    let s = m.crash(&s, Kind::RetryHandler, TX);
    assert_eq!(status(&s), Status::Sending);
    assert_eq!(s.requests.len(), 1);
    let s = m.deliver_retry(&s, TX, false);
    let s = m.finish_run(s, Kind::RetryHandler, TX);
    ok(&m, &s);
    assert_eq!(s.requests.len(), 2, "republished with the same key");
    assert_eq!(s.requests[0].key, s.requests[1].key);
    let s = m.service_receives_all(s);
    ok(&m, &s);
    assert_eq!(
        s.service.accepted().count(),
        2,
        "the service accepted attempt 2 once"
    );
    ends_succeeded(&m, s, 2);
}

#[test]
fn row_response_from_an_earlier_attempt_is_dropped_by_attempt_number() {
    let m = model();
    let s = retry_handler_running(&m);
    let s = m.finish_run(s, Kind::RetryHandler, TX);
    assert_eq!(s.records[0].current_attempt.get(), 2);
    for outcome in [Outcome::Success, Outcome::Cancelled] {
        let before = s.records[0].clone();
        let late = m.answer(&s, TX, 1, outcome);
        let late = m.deliver_response(&late, TX, false);
        let late = m.finish_run(late, Kind::ResponseHandler, TX);
        ok(&m, &late);
        assert_eq!(
            late.records[0], before,
            "a late {outcome:?} changes nothing"
        );
        assert!(
            late.runs.is_empty() && late.responses.is_empty(),
            "acknowledged"
        );
    }
}

#[test]
fn row_attempts_exhausted_fail_with_a_business_alert() {
    let m = model();
    let s = m.settle_with(m.initial_state(), Outcome::Cancelled);
    ok(&m, &s);
    assert_eq!(status(&s), Status::Failed);
    assert_eq!(s.records[0].current_attempt.get(), 3);
    assert!(s.alerted[0], "business alert raised");
    let accepted: Vec<u32> = s.service.accepted().map(|((_, a), _)| *a).collect();
    assert_eq!(accepted, vec![1, 2, 3], "never a fourth attempt");
}

#[test]
fn reconciler_resumes_scheduling_both_before_and_after_the_fire_instant() {
    let m = model();
    for late in [false, true] {
        let s = response_handler_running(&m);
        let s = m.step_until(s, Kind::ResponseHandler, TX, "create-schedule");
        let mut s = m.crash(&s, Kind::ResponseHandler, TX);
        s.responses.clear(); // the response went to its DLQ
        assert_eq!(status(&s), Status::Scheduling);
        let s = m.reconcile(&s, TX, late);
        let s = m.finish_run(s, Kind::Reconciler, TX);
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
    let s = m.step_until(s, Kind::RetryHandler, TX, "publish-request");
    let mut s = m.crash(&s, Kind::RetryHandler, TX);
    s.retries.clear(); // the event went to the retry DLQ
    assert_eq!(status(&s), Status::Sending);
    let s = m.reconcile(&s, TX, true);
    let s = m.finish_run(s, Kind::Reconciler, TX);
    assert_eq!(s.retries.len(), 1);
    let s = m.deliver_retry(&s, TX, false);
    let s = m.finish_run(s, Kind::RetryHandler, TX);
    ok(&m, &s);
    assert_eq!(status(&s), Status::InProgress);
    ends_succeeded(&m, s, 2);
}
