//! Decision tests in GIVEN / WHEN / THEN shape.

use super::*;
use crate::ids::MaxAttempts;
use crate::policy::{FixedRandom, RetryPolicy};

pub(crate) fn ctx_at(ms: i64) -> Context {
    Context::new(
        Timestamp::from_millis(ms),
        PolicySet::uniform(RetryPolicy::article_default()),
        8,
        Duration::from_secs(600),
    )
}

fn id() -> TransactionId {
    TransactionId::parse("TX-100200").unwrap()
}

fn a(n: u32) -> Attempt {
    Attempt::new(n).unwrap()
}

fn response(n: u32, outcome: Outcome) -> Response {
    Response {
        transaction_id: id(),
        attempt: a(n),
        outcome,
        reason: Some("NOT_AVAILABLE".into()),
    }
}

fn record(status: Status, current: u32, next: Option<u32>, max: u32) -> TransactionRecord {
    let mut r = TransactionRecord::started(
        id(),
        MaxAttempts::new(max).unwrap(),
        Timestamp::from_millis(0),
    );
    r.status = status;
    r.current_attempt = a(current);
    r.next_attempt = next.map(a);
    if next.is_some() {
        r.next_fire_at = Some(Timestamp::from_millis(7_200_000));
        r.schedule_name = Some(ScheduleName::for_retry(&id(), a(next.unwrap_or(1))));
    }
    r
}

fn labels(plan: &Plan) -> Vec<&'static str> {
    plan.iter().map(Effect::label).collect()
}

#[test]
fn cancelled_unread_persists_the_instant_before_creating_the_schedule() {
    // GIVEN an unread record WHEN CANCELLED for attempt 1 arrives
    let plan = decide_response(
        Known::Unread,
        &response(1, Outcome::Cancelled),
        &ctx_at(0),
        &mut FixedRandom(0.5),
    );
    // THEN: write SCHEDULING, create the schedule from that instant, confirm, ack.
    assert_eq!(labels(&plan), ["write", "create-schedule", "write", "ack"]);
    let (Effect::Write(w), Effect::CreateSchedule(s)) = (&plan[0], &plan[1]) else {
        panic!("{plan:?}")
    };
    assert_eq!(w.set.status, Status::Scheduling);
    assert_eq!(w.set.next_fire_at, Change::Set(s.fire_at));
    assert_eq!(
        s.fire_at,
        Timestamp::from_millis(2 * 3600 * 1000),
        "2 h nominal"
    );
    assert_eq!(s.name.as_str(), "retry-TX-100200-2");
    assert_eq!(s.event.attempt, a(2));
    assert_eq!(w.guard.budget, Some(BudgetGuard::Remaining));
}

#[test]
fn late_response_changes_nothing() {
    let r = record(Status::Scheduled, 3, Some(4), 4);
    let plan = decide_response(
        Known::Record(&r),
        &response(2, Outcome::Success),
        &ctx_at(0),
        &mut FixedRandom(0.5),
    );
    assert_eq!(
        plan,
        vec![Effect::Drop(DropReason::LateResponse {
            attempt: a(2),
            current: a(3)
        })]
    );
}

#[test]
fn run_redecides_when_the_budget_is_spent() {
    // GIVEN attempt 4 of 4 WHEN CANCELLED arrives and the optimistic SCHEDULING write fails
    let ctx = ctx_at(0);
    let mut rng = FixedRandom(0.5);
    let mut run = Run::new(
        Input::Response(response(4, Outcome::Cancelled)),
        Known::Unread,
        &ctx,
        &mut rng,
    );
    let current = record(Status::InProgress, 4, None, 4);
    run.observe(Observed::ConditionFailed(Some(current)), &ctx, &mut rng)
        .unwrap();
    // THEN the run writes FAILED and raises the business alert.
    let rest: Vec<_> = run.remaining().map(Effect::label).collect();
    assert_eq!(rest, ["write", "alert", "ack"]);
    let Step::Perform(Effect::Write(w)) = run.step() else {
        panic!()
    };
    assert_eq!(w.set.status, Status::Failed);
}

#[test]
fn retry_event_found_sending_resumes_the_publish() {
    let r = record(Status::Sending, 1, Some(2), 3);
    let ev = RetryEvent {
        transaction_id: id(),
        origin: Origin::RetryScheduler,
        attempt: a(2),
    };
    let plan = decide_retry(Known::Record(&r), &ev, &ctx_at(0));
    assert_eq!(labels(&plan), ["publish-request", "write", "ack"]);
    assert_eq!(plan[2], Effect::Ack(Ack::Resumed));
}
