//! Decision tests in GIVEN / WHEN / THEN shape.

use super::*;
use crate::breaker::BreakerState;
use crate::ids::MaxAttempts;
use crate::machine::{BudgetGuard, Change, Counter, Event, FailedKey, Mark, ReconcileKey};
use crate::message::{Execution, Origin};
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
        retry_after_seconds: None,
        round: None,
        execution: None,
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
    // THEN: write SCHEDULING (the breaker told of an answer), create the schedule
    // from that instant, confirm, ack.
    assert_eq!(
        labels(&plan),
        ["write", "signal", "create-schedule", "write", "ack"]
    );
    let (Effect::Write(w), Effect::CreateSchedule(s)) = (&plan[0], &plan[2]) else {
        panic!("{plan:?}")
    };
    assert_eq!(w.to(), Status::Scheduling);
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

/// A SUCCESS for an attempt an operator resolved by other means: the service
/// executed it as well — a conflicting success, not a duplicate; a SUCCESS repeated
/// for an attempt the service itself answered SUCCESS stays a duplicate.
#[test]
fn success_after_a_resolve_is_a_conflict_not_a_duplicate() {
    let mut resolved = record(Status::Succeeded, 2, None, 4);
    resolved.mark = Some(Mark::Resolved);
    let decide = |r: &TransactionRecord| {
        decide_response(
            Known::Record(r),
            &response(2, Outcome::Success),
            &ctx_at(0),
            &mut FixedRandom(0.5),
        )
    };
    let resp = response(2, Outcome::Success);
    assert_eq!(
        decide(&resolved),
        vec![
            Effect::Note(crate::audit::AuditEntry::conflicting_success(
                &resolved,
                a(2),
                resp.reason.clone(),
                ctx_at(0).now
            )),
            Effect::Drop(DropReason::ConflictingSuccess {
                attempt: a(2),
                status: Status::Succeeded
            })
        ]
    );
    let mut answered = record(Status::Succeeded, 2, None, 4);
    answered.last_outcome = Some(Outcome::Success);
    assert_eq!(
        decide(&answered),
        vec![Effect::Drop(DropReason::DuplicateResponse {
            status: Status::Succeeded
        })]
    );
}

#[test]
fn late_response_changes_nothing() {
    let r = record(Status::Scheduled, 3, Some(4), 4);
    let plan = decide_response(
        Known::Record(&r),
        &response(2, Outcome::Cancelled),
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

/// GIVEN attempt 1 of 4 in flight WHEN the service answers REJECTED THEN the
/// transaction ends FAILED/REJECTED with three attempts left, nothing scheduled or
/// published; the service's reason reaches the alert only. A CANCELLED whose reason
/// reads "REJECTED" is still a CANCELLED: the outcome decides, never the text.
#[test]
fn a_rejected_answer_ends_the_transaction_whatever_budget_is_left() {
    let r = record(Status::InProgress, 1, None, 4);
    let ctx = ctx_at(0);
    let plan = decide_response(
        Known::Record(&r),
        &response(1, Outcome::Rejected),
        &ctx,
        &mut FixedRandom(0.5),
    );
    assert_eq!(labels(&plan), ["write", "signal", "alert", "ack"]);
    let after = first_write(&plan).apply(&r).unwrap();
    assert_eq!(after.status, Status::Failed);
    assert_eq!(after.mark, Some(Mark::Rejected));
    assert_eq!(after.last_outcome, Some(Outcome::Rejected));
    assert_eq!((after.current_attempt, after.next_attempt), (a(1), None));
    assert!(
        plan.contains(&Effect::Signal(crate::breaker::Signal::Answered)),
        "{plan:?}"
    );
    assert!(plan.contains(&Effect::Alert(Alert {
        kind: AlertKind::Rejected,
        transaction_id: id(),
        attempts: a(1),
        last_reason: Some("NOT_AVAILABLE".into()),
    })));
    let text = Response {
        reason: Some("REJECTED".into()),
        ..response(1, Outcome::Cancelled)
    };
    let plan = decide_response(Known::Record(&r), &text, &ctx, &mut FixedRandom(0.5));
    assert_eq!(first_write(&plan).to(), Status::Scheduling);
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
    assert_eq!(rest, ["write", "signal", "alert", "ack"]);
    let Step::Perform(Effect::Write(w)) = run.step() else {
        panic!()
    };
    assert_eq!(w.to(), Status::Failed);
}

/// The retry handler decides blind: its request carries the round of the record its
/// accepting write returned.
#[test]
fn a_blind_request_carries_the_round_its_write_returned() {
    let ctx = ctx_at(0);
    let mut rng = FixedRandom(0.5);
    let ev = RetryEvent {
        transaction_id: id(),
        origin: Origin::RetryScheduler,
        attempt: a(2),
        round: None,
    };
    let mut run = Run::new(Input::Retry(ev), Known::Unread, &ctx, &mut rng);
    let mut written = record(Status::Sending, 1, Some(2), 3);
    written.counts[Counter::Round] = 4;
    run.observe(Observed::Written(written), &ctx, &mut rng)
        .unwrap();
    let Step::Perform(Effect::PublishRequest(h)) = run.step() else {
        panic!("{:?}", run.step())
    };
    assert_eq!((h.attempt, h.round), (a(2), Some(4)));
}

/// A stalled response handler's run decides its ERROR again after the re-send it
/// opened went out (its confirmation failed on IN_PROGRESS with one more round): the
/// answer's round is stale, dropped, no second re-send.
#[test]
fn an_error_decided_again_after_its_resend_left_is_dropped() {
    let ctx = ctx_at(0);
    let mut rng = FixedRandom(0.5);
    let mut resp = response(2, Outcome::Error);
    resp.round = Some(0);
    let mut run = Run::new(Input::Response(resp), Known::Unread, &ctx, &mut rng);
    let mut resent = record(Status::InProgress, 2, None, 3);
    resent.counts[Counter::Round] = 1;
    run.observe(Observed::ConditionFailed(Some(resent)), &ctx, &mut rng)
        .unwrap();
    assert_eq!(
        run.step(),
        Step::Done(&Disposition::Drop(DropReason::StaleError {
            attempt: a(2),
            round: 0,
            current: 1
        }))
    );
}

/// Hole 5: breaker signals not tied to the probe. GIVEN answers of every kind WHEN
/// decided THEN only an answer the record takes is a signal (a late answer, a
/// duplicate, a stale ERROR give none — before, every answer in a batch counted), and
/// only the answer to the probe's request (its record marked PROBE) is the probe's —
/// the one signal that closes a HALF_OPEN breaker. Decided blind, the answer's write
/// is conditional on no probe mark, so a probe's answer is decided again from its
/// record.
#[test]
fn only_an_answer_the_record_takes_is_a_signal_and_only_the_probes_closes() {
    use crate::breaker::Signal;
    let signals = |known: Known<'_>, resp: Response| -> Vec<Signal> {
        decide_response(known, &resp, &ctx_at(0), &mut FixedRandom(0.5))
            .iter()
            .filter_map(|e| match e {
                Effect::Signal(s) => Some(*s),
                _ => None,
            })
            .collect()
    };
    let in_flight = record(Status::InProgress, 2, None, 3);
    let mut probing = in_flight.clone();
    probing.mark = Some(Mark::Probe);
    for outcome in [Outcome::Success, Outcome::Cancelled] {
        assert_eq!(
            signals(Known::Unread, response(2, outcome)),
            [Signal::Answered]
        );
        assert_eq!(
            signals(Known::Record(&in_flight), response(2, outcome)),
            [Signal::Answered]
        );
        assert_eq!(
            signals(Known::Record(&probing), response(2, outcome)),
            [Signal::ProbeAnswered]
        );
        let blind = decide_response(
            Known::Unread,
            &response(2, outcome),
            &ctx_at(0),
            &mut FixedRandom(0.5),
        );
        let Effect::Write(w) = &blind[0] else {
            panic!("{blind:?}")
        };
        assert!(
            w.holds(&in_flight) && !w.holds(&probing),
            "{outcome}: {w:?}"
        );
        // Late (attempt 1 while 2 is in flight): no signal.
        assert!(signals(Known::Record(&in_flight), response(1, outcome)).is_empty());
    }
    assert_eq!(
        signals(Known::Record(&probing), response(2, Outcome::Error)),
        [Signal::Technical]
    );
    // A duplicate of an answer already recorded: no signal.
    let done = record(Status::Succeeded, 2, None, 3);
    assert!(signals(Known::Record(&done), response(2, Outcome::Success)).is_empty());
    // An ERROR of an earlier send (round 0 while round 1 is in flight): no signal.
    let mut resent = in_flight.clone();
    resent.counts[Counter::Round] = 1;
    let stale = Response {
        round: Some(0),
        ..response(2, Outcome::Error)
    };
    assert!(signals(Known::Record(&resent), stale).is_empty());
}

/// Hole: a CANCELLED cycle's confirmation without its round. GIVEN the response
/// handler opened attempt 3's cycle blind (round 2 as its write returned) and created
/// its schedule, then stalled WHEN a pause of an earlier release (whose retry handler
/// still runs while the stack upgrades) opened that cycle again meanwhile
/// (SCHEDULING, round 3, its own schedule not yet created) THEN the stalled
/// confirmation does not hold on the paused record: confirmed, it would leave it
/// SCHEDULED with no schedule for its instant.
#[test]
fn a_stalled_confirmation_never_confirms_a_later_cycle() {
    let ctx = ctx_at(0);
    let mut rng = FixedRandom(0.5);
    let resp = response(2, Outcome::Cancelled);
    let mut run = Run::new(Input::Response(resp), Known::Unread, &ctx, &mut rng);
    let mut opened = record(Status::Scheduling, 2, Some(3), 4);
    opened.counts[Counter::Round] = 2;
    run.observe(Observed::Written(opened.clone()), &ctx, &mut rng)
        .unwrap();
    run.observe(Observed::Signalled, &ctx, &mut rng).unwrap();
    run.observe(Observed::ScheduleCreated, &ctx, &mut rng)
        .unwrap();
    let Step::Perform(Effect::Write(confirm)) = run.step() else {
        panic!("{:?}", run.step())
    };
    assert!(confirm.holds(&opened), "it confirms its own cycle");
    let mut paused = opened.clone();
    paused.counts[Counter::Round] = 3;
    paused.counts[Counter::ProbeErrors] = 1;
    paused.schedule_name = Some(ScheduleName::for_resend(&id(), a(3), 3));
    assert!(!confirm.holds(&paused), "{confirm:?}");
}

/// Hole: operator actions without the round they read. GIVEN an operator read
/// SCHEDULED (round 1) WHEN the retry handler paused that cycle and it was
/// confirmed again (SCHEDULED, round 2, another schedule) THEN the resolve decided on
/// the first read does not hold: it would delete the first round's schedule and
/// leave the live one.
#[test]
fn operator_writes_are_guarded_by_the_round_they_read() {
    let ctx = ctx_at(0)
        .for_operator(crate::machine::OperatorNote::new("arn:aws:iam::1:user/a", None).unwrap());
    let round = |status, next, k| {
        let mut r = record(status, 1, next, 4);
        r.counts[Counter::Round] = k;
        r
    };
    let resolve = |r: &TransactionRecord| decide_resolve(Known::Record(r), &id(), &ctx);
    let replay = |r: &TransactionRecord| decide_replay(Known::Record(r), &id(), 2, &ctx);
    type Decision<'a> = &'a dyn Fn(&TransactionRecord) -> Plan;
    let cases: [(Decision<'_>, Status, Option<u32>); 2] = [
        (&resolve, Status::Scheduled, Some(2)),
        (&replay, Status::Failed, None),
    ];
    for (decision, status, next) in cases {
        let (read, moved) = (round(status, next, 1), round(status, next, 2));
        let plan = decision(&read);
        let Effect::Write(w) = &plan[0] else {
            panic!("{plan:?}")
        };
        assert!(w.holds(&read), "{w:?}");
        assert!(!w.holds(&moved), "{w:?}");
    }
}

#[test]
fn retry_event_found_sending_resumes_the_publish() {
    let r = record(Status::Sending, 1, Some(2), 3);
    let ev = RetryEvent {
        transaction_id: id(),
        origin: Origin::RetryScheduler,
        attempt: a(2),
        round: None,
    };
    let plan = decide_retry(Known::Record(&r), &ev, &ctx_at(0));
    assert_eq!(labels(&plan), ["publish-request", "write", "ack"]);
    assert_eq!(plan[2], Effect::Ack(Ack::Resumed));
}

// ---------------------------------------------------------------------------
// Exhaustive decision table: every status × every input kind × what is known.
// ---------------------------------------------------------------------------

use crate::machine::transition as arrow;

/// The fixed "now" of the table: 2026-10-03T12:00:00Z.
fn t0() -> Timestamp {
    Timestamp::parse("2026-10-03T12:00:00Z").unwrap()
}

fn at(secs: i64) -> Timestamp {
    t0().plus_millis(secs * 1000)
}

fn table_ctx() -> Context {
    Context::new(
        t0(),
        PolicySet::uniform(RetryPolicy::article_default()),
        8,
        Duration::from_secs(600),
    )
    .with_answer_deadline(Duration::from_secs(1800), 3)
}

/// Times relative to the table's now, in seconds.
fn rel(t: Timestamp) -> String {
    let ms = t.millis() - t0().millis();
    if ms % 1000 == 0 {
        format!("T0{:+}s", ms / 1000)
    } else {
        format!("T0{ms:+}ms")
    }
}

fn change<T>(out: &mut String, name: &str, c: &Change<T>, show: impl Fn(&T) -> String) {
    match c {
        Change::Keep => {}
        Change::Set(v) => out.push_str(&format!(" {name}={}", show(v))),
        Change::Clear => out.push_str(&format!(" {name}=-")),
    }
}

/// One line per effect with every field a decision chooses.
fn describe(e: &Effect) -> String {
    match e {
        Effect::Read(id) => format!("read {id}"),
        Effect::Create { record, payload } => format!(
            "create {} c={}{} max={} payload={}",
            record.status,
            record.current_attempt,
            record
                .next_attempt
                .map(|n| format!(" n={n}"))
                .unwrap_or_default(),
            record.max_attempts,
            payload.as_json()
        ),
        Effect::Write(w) => {
            let g = &w.guard;
            let statuses: Vec<&str> = w.from().iter().map(|s| s.as_str()).collect();
            let mut s = format!("write {:?} if {}", w.event(), statuses.join("|"));
            if let Some(c) = g.current_attempt {
                s.push_str(&format!(" c={c}"));
            }
            if let Some(n) = g.next_attempt {
                s.push_str(&format!(" n={n}"));
            }
            if let Some(b) = g.budget {
                s.push_str(&format!(" {b:?}"));
            }
            if let Some(k) = g.counts[Counter::Republishes] {
                s.push_str(&format!(" rp={k}"));
            }
            if let Some(k) = g.counts[Counter::Requeues] {
                s.push_str(&format!(" rq={k}"));
            }
            if let Some(k) = g.counts[Counter::Round] {
                s.push_str(&format!(" rs={k}"));
            }
            match g.probe {
                Some(true) => s.push_str(" probing"),
                Some(false) => s.push_str(" !probing"),
                None => {}
            }
            if let Some(d) = g.live {
                s.push_str(&format!(" live@{}", rel(d.now)));
            }
            if g.unclaimed {
                s.push_str(" unclaimed");
            }
            let c = &w.set;
            s.push_str(&format!(" -> {}", w.to()));
            if let Some(a) = c.current_attempt {
                s.push_str(&format!(" c={a}"));
            }
            change(&mut s, "n", &c.next_attempt, |a| a.to_string());
            change(&mut s, "fire", &c.next_fire_at, |t| rel(*t));
            change(&mut s, "name", &c.schedule_name, |n| n.to_string());
            if let Some(m) = c.max_attempts {
                s.push_str(&format!(" max={m}"));
            }
            if let Some(o) = c.last_outcome {
                s.push_str(&format!(" outcome={o}"));
            }
            change(&mut s, "reason", &c.last_reason, Clone::clone);
            change(&mut s, "mark", &c.mark, |m| m.to_string());
            change(&mut s, "origin", &c.origin, |o| o.to_string());
            change(&mut s, "rk", &c.reconcile, |k| {
                format!("{}@{}", k.partition, rel(k.at))
            });
            change(&mut s, "due", &c.answer_due_at, |t| rel(*t));
            change(&mut s, "rp", &c.counts[Counter::Republishes], |k| {
                k.to_string()
            });
            if let Change::Set(k) = &c.counts[Counter::Requeues] {
                s.push_str(&format!(" rq={k}"));
            }
            change(&mut s, "rs", &c.counts[Counter::Round], |k| k.to_string());
            change(&mut s, "ps", &c.counts[Counter::ProbeErrors], |k| {
                k.to_string()
            });
            change(&mut s, "expires", &c.expires_at, |t| rel(*t));
            // Only the claim: every write leaving SENDING clears it (checked apart).
            if let Change::Set(t) = &c.publishing_since {
                s.push_str(&format!(" claim={}", rel(*t)));
            }
            s.push_str(&format!(" by={}", c.actor.as_str()));
            s
        }
        Effect::CreateSchedule(spec) => format!(
            "create-schedule {} at {} event={}/{}/{}{}",
            spec.name,
            rel(spec.fire_at),
            spec.event.transaction_id,
            spec.event.attempt,
            spec.event.origin,
            spec.event
                .round
                .map(|k| format!(" round={k}"))
                .unwrap_or_default()
        ),
        Effect::DeleteSchedule(name) => format!("delete-schedule {name}"),
        Effect::PublishRequest(h) => format!(
            "publish-request {}#{}{}",
            h.transaction_id,
            h.attempt,
            h.round.map(|k| format!(" round={k}")).unwrap_or_default()
        ),
        Effect::PublishRetry(ev) => format!(
            "publish-retry {}/{}/{}{}",
            ev.transaction_id,
            ev.attempt,
            ev.origin,
            ev.round.map(|k| format!(" round={k}")).unwrap_or_default()
        ),
        Effect::DeferRetry(d) => format!(
            "defer-retry {}/{}/{}{} delay={}s",
            d.event.transaction_id,
            d.event.attempt,
            d.event.origin,
            d.event
                .round
                .map(|k| format!(" round={k}"))
                .unwrap_or_default(),
            d.delay_seconds
        ),
        Effect::Signal(s) => format!("signal {s:?}"),
        Effect::Alert(a) => format!(
            "alert {} attempts={} reason={}",
            a.transaction_id,
            a.attempts,
            a.last_reason.as_deref().unwrap_or("-")
        ),
        Effect::Note(n) => format!(
            "note {} {} attempt={} in {} outcome={} reason={} at={} group={}",
            n.transaction_id,
            n.notice.map_or("-", |x| x.as_str()),
            n.current_attempt,
            n.to,
            n.outcome.map_or("-", |o| o.as_str()),
            n.reason.as_deref().unwrap_or("-"),
            rel(n.at),
            n.group_key()
        ),
        Effect::Ack(a) => format!("ack {a:?}"),
        Effect::Drop(d) => match d {
            DropReason::LateResponse { attempt, current } => {
                format!("drop late-response attempt={attempt} current={current}")
            }
            DropReason::StaleError {
                attempt,
                round,
                current,
            } => format!("drop stale-error attempt={attempt} round={round} current={current}"),
            DropReason::ConflictingOutcome { outcome, status } => {
                format!("drop conflicting-outcome {outcome} in {status}")
            }
            DropReason::ConflictingSuccess { attempt, status } => {
                format!("drop conflicting-success attempt={attempt} in {status}")
            }
            DropReason::DuplicateResponse { status } => {
                format!("drop duplicate-response in {status}")
            }
            DropReason::StaleRetry { attempt, pending } => format!(
                "drop stale-retry attempt={attempt} pending={}",
                pending.map_or("-".to_string(), |p| p.to_string())
            ),
            DropReason::StaleCycle {
                attempt,
                round,
                current,
            } => format!("drop stale-cycle attempt={attempt} round={round} current={current}"),
            DropReason::DuplicateRetry { attempt, status } => {
                format!("drop duplicate-retry attempt={attempt} in {status}")
            }
            DropReason::NotStuck { status } => format!("drop not-stuck {status}"),
            DropReason::Parked { status, requeues } => {
                format!("drop parked {status} requeues={requeues}")
            }
            DropReason::HeldByBreaker { status } => format!("drop held-by-breaker {status}"),
            DropReason::AlreadyPublished { status } => format!("drop already-published {status}"),
        },
        Effect::Reject(r) => format!("reject {}", r.label()),
    }
}

/// A well-formed record in `status` after attempt `current`: intermediate states carry
/// `next_attempt = current + 1`, its fire time (T0+1h) and its schedule name;
/// IN_PROGRESS its answer deadline (sent at T0−1h, due 30 min later) and the key the
/// cycle that sent it left.
fn rec_in(status: Status, current: u32, max: u32) -> TransactionRecord {
    let mut r = TransactionRecord::started(id(), MaxAttempts::new(max).unwrap(), at(-7200));
    r.status = status;
    r.current_attempt = a(current);
    r.updated_at = at(-3600);
    if status.is_intermediate() {
        let next = a(current + 1);
        r.next_attempt = Some(next);
        r.next_fire_at = Some(at(3600));
        r.schedule_name = Some(ScheduleName::for_retry(&id(), next));
        r.reconcile = ReconcileKey::derive(status, &id(), 8, r.updated_at, r.next_fire_at);
    }
    if status == Status::InProgress {
        r.answer_due_at = Some(at(-1800));
        r.reconcile = ReconcileKey::derive(status, &id(), 8, r.updated_at, None);
    }
    r
}

/// The answer `outcome` for attempt `n`.
fn answer(
    n: u32,
    outcome: Outcome,
    reason: Option<&str>,
    retry_after_seconds: Option<u32>,
) -> Input {
    Input::Response(Response {
        transaction_id: id(),
        attempt: a(n),
        outcome,
        reason: reason.map(str::to_owned),
        retry_after_seconds,
        round: None,
        execution: None,
    })
}

/// A record in an intermediate `status` of the re-send of attempt `current` after
/// an ERROR, the `resends`-th: `next_attempt = current`, its fire time (T0+1h) and the
/// re-send's schedule name.
fn rec_resending(status: Status, current: u32, resends: u32) -> TransactionRecord {
    let mut r = rec_in(status, current, 4);
    r.next_attempt = Some(a(current));
    r.counts[Counter::Round] = resends;
    r.last_outcome = Some(Outcome::Error);
    r.schedule_name = Some(ScheduleName::for_resend(&id(), a(current), resends));
    r
}

fn known_name(k: &Known<'_>) -> String {
    match k {
        Known::Unread => "unread".into(),
        Known::Missing => "missing".into(),
        Known::Record(r) => rec_name(r),
    }
}

fn rec_name(r: &TransactionRecord) -> String {
    format!(
        "{} c={} max={}",
        r.status, r.current_attempt, r.max_attempts
    )
}

/// The plan of case `name` of the table: only effects the function handling its
/// input performs.
fn row(name: &str, input: &Input, known: Known<'_>, same: Option<bool>, ctx: &Context) -> Plan {
    let plan = decide(input, known, same, ctx, &mut FixedRandom(0.5));
    for e in &plan {
        assert!(crate::exec::performs(input, e), "{name}: {e:?}");
    }
    plan
}

/// Every (case, plan) of the table.
fn all_cases() -> Vec<(String, Plan)> {
    let ctx = table_ctx();
    let mut out = Vec::new();
    let mut push = |name: String, input: &Input, known: Known<'_>, same: Option<bool>| {
        out.push((name.clone(), row(&name, input, known, same, &ctx)));
    };

    // Records a message can meet: every status with budget remaining (current 2 of
    // 4); and with the budget spent (current 2 of 2) for the states that can carry it
    // (an intermediate state always has next_attempt <= max_attempts).
    let mut records = Vec::new();
    for &s in Status::ALL {
        records.push(rec_in(s, 2, 4));
        if !s.is_intermediate() {
            records.push(rec_in(s, 2, 2));
        }
    }

    // Response handler (A): SUCCESS / CANCELLED for the matching attempt (2), a late
    // one (1) and a future one (3 = the pending attempt of intermediate states).
    for &outcome in Outcome::ALL {
        for n in [1, 2, 3] {
            let resp = answer(n, outcome, Some("NOT_AVAILABLE"), None);
            let mut knowns = vec![Known::Unread, Known::Missing];
            knowns.extend(records.iter().map(Known::Record));
            for k in knowns {
                push(
                    format!("response {outcome} n={n} / {}", known_name(&k)),
                    &resp,
                    k,
                    None,
                );
            }
        }
    }

    // The last attempt answered while B has not yet written IN_PROGRESS.
    let last = rec_in(Status::Sending, 3, 4);
    for &outcome in Outcome::ALL {
        let resp = answer(4, outcome, None, None);
        push(
            format!("response {outcome} n=4 / {}", rec_name(&last)),
            &resp,
            Known::Record(&last),
            None,
        );
    }

    // Technical failures. The re-send of attempt 2 (one re-send made) in each state of
    // its cycle, answered for attempt 2; the re-sends spent; FAILED by them; the
    // service's Retry-After shorter and longer than the technical backoff.
    let resend_records: Vec<TransactionRecord> = Status::INTERMEDIATE
        .iter()
        .map(|s| rec_resending(*s, 2, 1))
        .collect();
    for &outcome in Outcome::ALL {
        let resp = answer(2, outcome, None, None);
        for r in &resend_records {
            push(
                format!("response {outcome} n=2 / {} resend=1", rec_name(r)),
                &resp,
                Known::Record(r),
                None,
            );
        }
    }
    let mut spent = rec_in(Status::InProgress, 2, 4);
    spent.counts[Counter::Round] = ctx.rules.technical_resend_max;
    push(
        format!(
            "response ERROR n=2 / IN_PROGRESS c=2 max=4 resends={}",
            spent.counts[Counter::Round]
        ),
        &answer(2, Outcome::Error, Some("HTTP_503"), None),
        Known::Record(&spent),
        None,
    );
    // FAILED by its re-sends spent, and by a REJECTED answer: met by every answer for
    // that attempt.
    let mut exhausted = rec_in(Status::Failed, 2, 4);
    exhausted.counts[Counter::Round] = ctx.rules.technical_resend_max;
    exhausted.last_outcome = Some(Outcome::Error);
    exhausted.mark = Some(Mark::TechnicalExhausted);
    let mut rejected = rec_in(Status::Failed, 2, 4);
    rejected.last_outcome = Some(Outcome::Rejected);
    rejected.mark = Some(Mark::Rejected);
    for (r, reason) in [(&exhausted, None), (&rejected, Some("HTTP_422"))] {
        for &outcome in Outcome::ALL {
            push(
                format!(
                    "response {outcome} n=2 / FAILED c=2 max=4 {}",
                    r.mark.map_or("-", Mark::as_str)
                ),
                &answer(2, outcome, reason, None),
                Known::Record(r),
                None,
            );
        }
    }
    let mut twice = rec_in(Status::InProgress, 2, 4);
    twice.counts[Counter::Round] = 1;
    for after in [10, 7_200] {
        push(
            format!("response ERROR n=2 retry-after={after} / IN_PROGRESS c=2 max=4 resends=1"),
            &answer(2, Outcome::Error, Some("HTTP_503"), Some(after)),
            Known::Record(&twice),
            None,
        );
    }
    // The retry event of a re-send, its duplicate after it left, and the reconciler
    // finding a re-send stuck.
    let resend_event = retry(2);
    for r in &resend_records {
        push(
            format!("retry m=2 RETRY_SCHEDULER / {} resend=1", rec_name(r)),
            &resend_event,
            Known::Record(r),
            None,
        );
        let stuck = stuck(r);
        push(
            format!("reconcile {} stuck resend=1 / current", r.status),
            &Input::Reconcile(stuck.clone()),
            Known::Record(&stuck),
            None,
        );
    }
    let mut resent = rec_in(Status::InProgress, 2, 4);
    resent.counts[Counter::Round] = 1;
    push(
        "retry m=2 RETRY_SCHEDULER / IN_PROGRESS c=2 max=4 resends=1".into(),
        &resend_event,
        Known::Record(&resent),
        None,
    );

    // Retry handler (B): m = current (2), m = next_attempt of intermediate states (3),
    // m beyond anything pending (4); every origin on the path that records it.
    for m in [2, 3, 4] {
        for origin in [Origin::RetryScheduler, Origin::Reconciler, Origin::Operator] {
            let ev = Input::Retry(RetryEvent {
                transaction_id: id(),
                origin,
                attempt: a(m),
                round: None,
            });
            let mut knowns = vec![Known::Unread, Known::Missing];
            knowns.extend(
                records
                    .iter()
                    .filter(|r| r.max_attempts.get() == 4)
                    .map(Known::Record),
            );
            for k in knowns {
                // Every origin is decided the same way; the table shows all three only
                // where the origin is written (the SENDING arrow).
                let shows_origin = matches!(k, Known::Unread)
                    || matches!(k, Known::Record(r) if m == 3 && r.status.is_intermediate());
                if origin != Origin::RetryScheduler && !shows_origin {
                    continue;
                }
                push(
                    format!("retry m={m} {origin} / {}", known_name(&k)),
                    &ev,
                    k,
                    None,
                );
            }
        }
    }

    // Reconciler: every status, stuck or not; decided from the query's record
    // (unread), from the current record, and when the record is gone.
    for &s in Status::ALL {
        let mut variants: Vec<(&str, TransactionRecord)> = Vec::new();
        let mut fresh = rec_in(s, 2, 4);
        fresh.updated_at = at(-60);
        variants.push(("fresh", fresh));
        let mut stuck = rec_in(s, 2, 4);
        if s == Status::Scheduled {
            stuck.next_fire_at = Some(at(-3600));
        }
        variants.push(("stuck", stuck));
        if s == Status::Scheduling {
            let mut passed = rec_in(s, 2, 4);
            passed.next_fire_at = Some(at(-1200));
            variants.push(("stuck fire-passed", passed));
        }
        if s == Status::Scheduled {
            let mut due = rec_in(s, 2, 4);
            due.next_fire_at = Some(at(-300));
            variants.push(("fire-passed-within-threshold", due));
        }
        if s.is_intermediate() {
            // Requeued as often as allowed with no progress since: parked.
            let mut parked = rec_in(s, 2, 4);
            parked.next_fire_at = Some(at(-3600));
            parked.counts[Counter::Requeues] = 5;
            variants.push(("parked", parked));
        }
        if s == Status::InProgress {
            // Found before its deadline with the key its cycle left: the key moves.
            let mut waiting = rec_in(s, 2, 4);
            waiting.answer_due_at = Some(at(1200));
            variants.push(("answer-due-later", waiting.clone()));
            // Its key already at the deadline (minus the threshold): nothing to do.
            waiting.reconcile = ReconcileKey::derive(s, &id(), 8, at(600), None);
            variants.push(("answer-due-later key-moved", waiting));
            let mut once = rec_in(s, 2, 4);
            once.counts[Counter::Republishes] = 2;
            variants.push(("answer-overdue republished-2", once));
            let mut spent = rec_in(s, 2, 4);
            spent.counts[Counter::Republishes] = 3;
            variants.push(("answer-overdue republished-3", spent));
        }
        for (variant, r) in &variants {
            let input = Input::Reconcile(r.clone());
            push(
                format!("reconcile {s} {variant} / unread"),
                &input,
                Known::Unread,
                None,
            );
            push(
                format!("reconcile {s} {variant} / current"),
                &input,
                Known::Record(r),
                None,
            );
            push(
                format!("reconcile {s} {variant} / missing"),
                &input,
                Known::Missing,
                None,
            );
        }
    }
    // The query's record is stale: the current one has moved on.
    let stale = Input::Reconcile(rec_in(Status::Scheduling, 2, 4));
    let moved = rec_in(Status::InProgress, 3, 4);
    push(
        "reconcile SCHEDULING stuck / current IN_PROGRESS c=3".into(),
        &stale,
        Known::Record(&moved),
        None,
    );

    // Start: fresh, repeated with the same or another payload, in every status.
    let start = Input::Start {
        transaction_id: id(),
        payload: Payload::from_json(r#"{"amount":12.50}"#).unwrap(),
        max_attempts: MaxAttempts::new(4).unwrap(),
        correlation_id: None,
    };
    push("start / unread".into(), &start, Known::Unread, None);
    push("start / missing".into(), &start, Known::Missing, None);
    let mut start_records: Vec<TransactionRecord> =
        Status::ALL.iter().map(|s| rec_in(*s, 2, 4)).collect();
    start_records.push(rec_in(Status::InProgress, 1, 4));
    for r in &start_records {
        for same in [true, false] {
            push(
                format!(
                    "start / {} payload={}",
                    rec_name(r),
                    if same { "same" } else { "different" }
                ),
                &start,
                Known::Record(r),
                Some(same),
            );
        }
    }

    // Resolve and replay, in every status.
    let resolve = Input::Resolve(id());
    let replay = Input::Replay {
        transaction_id: id(),
        budget: 3,
    };
    for (name, input) in [("resolve", &resolve), ("replay", &replay)] {
        push(format!("{name} / unread"), input, Known::Unread, None);
        push(format!("{name} / missing"), input, Known::Missing, None);
        for &s in Status::ALL {
            let r = rec_in(s, 2, if s == Status::Failed { 2 } else { 4 });
            push(
                format!("{name} / {}", rec_name(&r)),
                input,
                Known::Record(&r),
                None,
            );
        }
    }
    // Replay of a transaction that used the highest budget accepted.
    let limit = crate::ids::MAX_ATTEMPTS_LIMIT;
    let at_limit = rec_in(Status::Failed, limit, limit);
    push(
        format!("replay / FAILED c={limit} max={limit}"),
        &replay,
        Known::Record(&at_limit),
        None,
    );

    // Let out again, the request the breaker held back is republished; its deadline
    // is marked as the hold's, not a fresh silence.
    let mut after_hold = rec_in(Status::InProgress, 2, 4);
    after_hold.counts[Counter::Republishes] = 1;
    after_hold.mark = Some(Mark::HeldOpen);
    push(
        "reconcile IN_PROGRESS past deadline rp=1 after a hold / current".into(),
        &Input::Reconcile(after_hold.clone()),
        Known::Record(&after_hold),
        None,
    );
    // The circuit breaker holds requests back until T0+95.5s (OPEN): retry events in
    // every status (the pending attempt 3, a stale 2), a re-send's and an already
    // paused cycle's events, an unanswered request past its deadline, and an ERROR
    // on a record whose rounds are mostly pauses (not technical failures).
    let held = ctx.clone().with_hold(Some(Hold {
        until: t0().plus_millis(95_500),
        state: BreakerState::Open {
            until: at(60),
            cooldown_ms: 60_000,
        },
    }));
    let mut push_held = |name: String, input: &Input, known: Known<'_>| {
        let plan = decide(input, known, None, &held, &mut FixedRandom(0.5));
        for e in &plan {
            assert!(crate::exec::performs(input, e), "{name}: {e:?}");
        }
        out.push((format!("held: {name}"), plan));
    };
    for m in [2, 3] {
        let ev = retry(m);
        for k in knowns(&records) {
            push_held(format!("retry m={m} / {}", known_name(&k)), &ev, k);
        }
    }
    let resend_event = retry(2);
    for r in &resend_records {
        push_held(
            format!("retry m=2 / {} resend=1", rec_name(r)),
            &resend_event,
            Known::Record(r),
        );
    }
    // The same cycles come due (their instant passed): paused.
    for st in Status::INTERMEDIATE {
        let mut due = rec_in(st, 2, 4);
        due.next_fire_at = Some(at(-60));
        push_held(
            format!("retry m=3 / {} due", rec_name(&due)),
            &retry(3),
            Known::Record(&due),
        );
    }
    let mut paused = rec_in(Status::Scheduled, 2, 4);
    paused.counts[Counter::Round] = 2;
    paused.counts[Counter::ProbeErrors] = 2;
    paused.mark = Some(Mark::HeldOpen);
    paused.next_fire_at = Some(at(-1));
    push_held(
        "retry m=3 / SCHEDULED c=2 max=4 resends=2 pauses=2".into(),
        &retry(3),
        Known::Record(&paused),
    );
    let mut unanswered = rec_in(Status::InProgress, 2, 4);
    unanswered.counts[Counter::Republishes] = 1;
    push_held(
        "reconcile IN_PROGRESS past deadline rp=1 / current".into(),
        &Input::Reconcile(unanswered.clone()),
        Known::Record(&unanswered),
    );
    let mut rounds = rec_in(Status::InProgress, 2, 4);
    rounds.counts[Counter::Round] = held.rules.technical_resend_max + 3;
    rounds.counts[Counter::ProbeErrors] = 4;
    push_held(
        format!(
            "response ERROR n=2 / IN_PROGRESS c=2 max=4 resends={} pauses=4",
            rounds.counts[Counter::Round]
        ),
        &answer(2, Outcome::Error, Some("HTTP_503"), None),
        Known::Record(&rounds),
    );
    // Let out as the breaker's probe (half-open): republished without spending.
    let probing = ctx.clone().with_probe(true);
    let plan = decide(
        &Input::Reconcile(unanswered.clone()),
        Known::Record(&unanswered),
        None,
        &probing,
        &mut FixedRandom(0.5),
    );
    out.push((
        "probe: reconcile IN_PROGRESS past deadline rp=1 / current".into(),
        plan,
    ));
    // Past its deadline again after going out as the probe (unanswered): a failed
    // probe spends a republish, held or probed again (or let out with the breaker
    // closed, its mark cleared); every republish spent ends it whatever the breaker
    // says.
    let mut failed_probe = unanswered.clone();
    failed_probe.mark = Some(Mark::Probe);
    let mut spent = unanswered.clone();
    spent.counts[Counter::Republishes] = ctx.rules.answer_republish_max;
    for (name, r) in [("probing rp=1", &failed_probe), ("rp=3", &spent)] {
        for (mode, c) in [("held", &held), ("probe", &probing), ("closed", &ctx)] {
            let plan = decide(
                &Input::Reconcile(r.clone()),
                Known::Record(r),
                None,
                c,
                &mut FixedRandom(0.5),
            );
            out.push((
                format!("{mode}: reconcile IN_PROGRESS past deadline {name} / current"),
                plan,
            ));
        }
    }
    // The retry handler's probe: marked before it leaves.
    let due = rec_in(Status::Scheduled, 2, 4);
    for (name, known) in [
        ("unread", Known::Unread),
        ("SCHEDULED c=2 max=4", Known::Record(&due)),
    ] {
        let plan = decide(&retry(3), known, None, &probing, &mut FixedRandom(0.5));
        out.push((format!("probe: retry m=3 / {name}"), plan));
    }
    // An ERROR answering the probe: a pause, whatever the technical count.
    let mut probed = rec_in(Status::InProgress, 2, 4);
    probed.counts[Counter::Round] = ctx.rules.technical_resend_max + 3;
    probed.counts[Counter::ProbeErrors] = 3;
    probed.mark = Some(Mark::Probe);
    for k in [Known::Unread, Known::Record(&probed)] {
        let name = match k {
            Known::Record(_) => format!(
                "IN_PROGRESS c=2 max=4 probing resends={} pauses=3",
                probed.counts[Counter::Round]
            ),
            _ => known_name(&k),
        };
        let plan = decide(
            &answer(2, Outcome::Error, Some("HTTP_503"), None),
            k,
            None,
            &ctx,
            &mut FixedRandom(0.5),
        );
        out.push((format!("probe answered: response ERROR n=2 / {name}"), plan));
    }
    // A retry event's round: an event of an earlier cycle of the pending attempt is
    // stale; decided blind, its cycle is a condition of the write.
    let mut resent = rec_resending(Status::Scheduled, 2, 2);
    resent.next_fire_at = Some(at(-1));
    for round in [1, 2] {
        let ev = Input::Retry(RetryEvent {
            transaction_id: id(),
            origin: Origin::RetryScheduler,
            attempt: a(2),
            round: Some(round),
        });
        for k in [Known::Unread, Known::Record(&resent)] {
            let name = match k {
                Known::Record(_) => "SCHEDULED c=2 n=2 resends=2".to_owned(),
                _ => known_name(&k),
            };
            let plan = decide(&ev, k, None, &ctx, &mut FixedRandom(0.5));
            out.push((format!("retry m=2 round={round} / {name}"), plan));
        }
    }
    // An ERROR's round: one earlier than the record's is stale.
    for st in [Status::InProgress, Status::Sending] {
        let mut r = rec_in(st, 2, 4);
        if st == Status::Sending {
            r.current_attempt = a(1);
            r.next_attempt = Some(a(2));
        }
        r.counts[Counter::Round] = 1;
        for round in [0, 1] {
            let mut input = answer(2, Outcome::Error, None, None);
            if let Input::Response(resp) = &mut input {
                resp.round = Some(round);
            }
            let plan = decide(&input, Known::Record(&r), None, &ctx, &mut FixedRandom(0.5));
            out.push((
                format!("response ERROR n=2 round={round} / {st} resends=1"),
                plan,
            ));
        }
    }
    // The reconciler decided again from a record that moved on since its query: one
    // that now must ask the breaker (a request due to go out again) waits for the
    // next run, which asks; one the query's record already asked for is decided.
    let queried = rec_in(Status::Scheduling, 2, 4);
    let mut probing_now = rec_in(Status::InProgress, 2, 4);
    probing_now.mark = Some(Mark::Probe);
    let mut overdue = rec_in(Status::InProgress, 2, 4);
    overdue.counts[Counter::Republishes] = 1;
    for (name, input, current) in [
        (
            "SCHEDULING, now IN_PROGRESS past its deadline probing",
            &queried,
            &probing_now,
        ),
        (
            "IN_PROGRESS past its deadline, now rp=1",
            &probing_now,
            &overdue,
        ),
    ] {
        let plan = decide(
            &Input::Reconcile(input.clone()),
            Known::Record(current),
            None,
            &ctx,
            &mut FixedRandom(0.5),
        );
        out.push((format!("reconcile decided again: queried {name}"), plan));
    }
    expiry_cases(&ctx, &mut out);
    outbox_cases(&ctx, &mut out);
    out
}

/// The scheduler's retry event for attempt `m`, any round.
fn retry(m: u32) -> Input {
    Input::Retry(RetryEvent {
        transaction_id: id(),
        origin: Origin::RetryScheduler,
        attempt: a(m),
        round: None,
    })
}

/// `r` as the reconciler finds it stuck: a SCHEDULED one an hour past its fire time.
fn stuck(r: &TransactionRecord) -> TransactionRecord {
    let mut stuck = r.clone();
    if stuck.status == Status::Scheduled {
        stuck.next_fire_at = Some(at(-3600));
    }
    stuck
}

/// Unread, missing, and each of `records`.
fn knowns(records: &[TransactionRecord]) -> Vec<Known<'_>> {
    let mut k = vec![Known::Unread, Known::Missing];
    k.extend(records.iter().map(Known::Record));
    k
}

/// A SENDING(3) record of round `round` claimed by a publisher at `claimed` (seconds
/// from T0), or unclaimed.
fn rec_sending(round: u32, claimed: Option<i64>) -> TransactionRecord {
    let mut r = rec_in(Status::Sending, 2, 4);
    r.counts[Counter::Round] = round;
    r.publishing_since = claimed.map(at);
    r
}

/// Outbox mode (`Delivery::Outbox`): every path that decides a send, the publisher's
/// decision on each record it can meet, and the answers outbox mode decides otherwise
/// (an ERROR by what it says of the call's execution).
fn outbox_cases(ctx: &Context, out: &mut Vec<(String, Plan)>) {
    let outbox = ctx.clone().with_delivery(Delivery::Outbox);
    let probing = outbox.clone().with_probe(true);
    let mut push = |name: String, input: &Input, known: Known<'_>, same: Option<bool>| {
        out.push((
            format!("outbox: {name}"),
            row(&name, input, known, same, &outbox),
        ));
    };
    let records: Vec<TransactionRecord> = Status::ALL.iter().map(|s| rec_in(*s, 2, 4)).collect();

    // Start: the create is the intent (SENDING(1)); a repeat publishes nothing.
    let start = Input::Start {
        transaction_id: id(),
        payload: Payload::from_json(r#"{"amount":12.50}"#).unwrap(),
        max_attempts: MaxAttempts::new(4).unwrap(),
        correlation_id: None,
    };
    let mut start_records = records.clone();
    start_records.push(rec_in(Status::InProgress, 1, 4));
    for k in knowns(&start_records) {
        for same in [Some(true), Some(false)] {
            if matches!(k, Known::Unread | Known::Missing) && same == Some(false) {
                continue;
            }
            let payload = match (k, same) {
                (Known::Record(_), Some(true)) => " payload=same",
                (Known::Record(_), _) => " payload=different",
                _ => "",
            };
            push(
                format!("start / {}{payload}", known_name(&k)),
                &start,
                k,
                same.filter(|_| matches!(k, Known::Record(_))),
            );
        }
    }

    // Retry handler: the pending attempt's event (3) and a stale one (2), in every
    // status; the accept is the intent.
    for m in [2, 3] {
        let ev = retry(m);
        for k in knowns(&records) {
            push(format!("retry m={m} / {}", known_name(&k)), &ev, k, None);
        }
    }

    // The publisher: the image of a SENDING(3) round 1, unclaimed, claimed 100 s ago
    // (within the resend window) and 600 s ago (past it), decided on itself (the
    // stream's image), unread, and on a current record that moved on.
    let images = [
        ("unclaimed", rec_sending(1, None)),
        ("claimed T0-100s", rec_sending(1, Some(-100))),
        ("claimed T0-240s", rec_sending(1, Some(-240))),
        ("claimed T0-600s", rec_sending(1, Some(-600))),
    ];
    let mut published = rec_in(Status::InProgress, 3, 4);
    published.counts[Counter::Round] = 1;
    let mut next_round = rec_sending(2, None);
    next_round.current_attempt = a(2);
    let mut other_attempt = rec_in(Status::Sending, 3, 4);
    other_attempt.counts[Counter::Round] = 1;
    let mut probe = rec_sending(1, None);
    probe.mark = Some(Mark::Probe);
    for (name, image) in &images {
        let input = Input::Publish(image.clone());
        push(
            format!("publish {name} / itself"),
            &input,
            Known::Record(image),
            None,
        );
        for (current, r) in [
            ("IN_PROGRESS c=3 round=1", &published),
            ("SENDING n=3 round=2", &next_round),
            ("SENDING n=4 round=1", &other_attempt),
        ] {
            push(
                format!("publish {name} / current {current}"),
                &input,
                Known::Record(r),
                None,
            );
        }
    }
    let unclaimed = Input::Publish(images[0].1.clone());
    push(
        "publish unclaimed / unread".into(),
        &unclaimed,
        Known::Unread,
        None,
    );
    push(
        "publish unclaimed / missing".into(),
        &unclaimed,
        Known::Missing,
        None,
    );
    push(
        "publish unclaimed PROBE / itself".into(),
        &Input::Publish(probe.clone()),
        Known::Record(&probe),
        None,
    );
    for r in records.iter().filter(|r| r.status != Status::Sending) {
        push(
            format!("publish {} / itself", rec_name(r)),
            &Input::Publish(r.clone()),
            Known::Record(r),
            None,
        );
    }

    // Reconciler: a stuck SENDING by its claim; every status stuck; an unanswered
    // request past its deadline is never republished, with or without the breaker's
    // verdict.
    for (name, image) in &images {
        push(
            format!("reconcile SENDING stuck {name} / current"),
            &Input::Reconcile(image.clone()),
            Known::Record(image),
            None,
        );
    }
    for r in &records {
        let stuck = stuck(r);
        push(
            format!("reconcile {} stuck / current", stuck.status),
            &Input::Reconcile(stuck.clone()),
            Known::Record(&stuck),
            None,
        );
    }
    let mut overdue_probe = rec_in(Status::InProgress, 2, 4);
    overdue_probe.mark = Some(Mark::Probe);
    push(
        "reconcile IN_PROGRESS overdue PROBE / current".into(),
        &Input::Reconcile(overdue_probe.clone()),
        Known::Record(&overdue_probe),
        None,
    );

    // Answers: an ERROR by what it says of the execution, for the request in flight
    // (unread, IN_PROGRESS, SENDING before the publisher's last write); every answer
    // meeting a transaction ended AMBIGUOUS.
    let error = |execution: Option<Execution>| {
        Input::Response(Response {
            transaction_id: id(),
            attempt: a(2),
            outcome: Outcome::Error,
            reason: Some("TIMEOUT".into()),
            retry_after_seconds: None,
            round: None,
            execution,
        })
    };
    let mut in_flight = rec_in(Status::Sending, 1, 4);
    in_flight.counts[Counter::Round] = 0;
    let in_progress = rec_in(Status::InProgress, 2, 4);
    for execution in [None, Some(Execution::Unknown), Some(Execution::NotRun)] {
        let label = execution.map_or("absent", Execution::as_str);
        for k in [
            Known::Unread,
            Known::Record(&in_progress),
            Known::Record(&in_flight),
        ] {
            push(
                format!("response ERROR n=2 execution={label} / {}", known_name(&k)),
                &error(execution),
                k,
                None,
            );
        }
    }
    let mut ambiguous = rec_in(Status::Failed, 2, 4);
    ambiguous.last_outcome = Some(Outcome::Error);
    ambiguous.mark = Some(Mark::Ambiguous);
    for &outcome in Outcome::ALL {
        push(
            format!("response {outcome} n=2 / FAILED c=2 max=4 AMBIGUOUS"),
            &answer(2, outcome, None, None),
            Known::Record(&ambiguous),
            None,
        );
    }
    // Replay of a transaction ended AMBIGUOUS: as in direct mode (attempt 3, round 0).
    let replay = Input::Replay {
        transaction_id: id(),
        budget: 1,
    };
    push(
        "replay / FAILED c=2 max=4 AMBIGUOUS".into(),
        &replay,
        Known::Record(&ambiguous),
        None,
    );

    // The breaker lets the pending retry out as a probe: its SENDING write carries
    // the mark, which the publisher keeps.
    let ev = retry(3);
    let scheduled = rec_in(Status::Scheduled, 2, 4);
    let plan = decide(
        &ev,
        Known::Record(&scheduled),
        None,
        &probing,
        &mut FixedRandom(0.5),
    );
    out.push(("outbox: probe retry m=3 / SCHEDULED c=2 max=4".into(), plan));
}

/// The transaction deadline: records created at T0−2h under a deadline of one hour
/// (expired since T0−1h), each decision that would make them wait again.
fn expiry_cases(ctx: &Context, out: &mut Vec<(String, Plan)>) {
    let late = ctx
        .clone()
        .with_transaction_deadline(Duration::from_secs(3600));
    let held = late.clone().with_hold(Some(crate::breaker::Hold {
        until: at(600),
        state: crate::breaker::BreakerState::Open {
            until: at(600),
            cooldown_ms: 600_000,
        },
    }));
    let mut push = |name: String, input: &Input, known: Known<'_>, c: &Context| {
        out.push((
            format!("expired: {name}"),
            row(&name, input, known, None, c),
        ));
    };
    let working = rec_in(Status::InProgress, 2, 4);
    let last = rec_in(Status::InProgress, 2, 2);
    let mut ended = rec_in(Status::Failed, 2, 4);
    ended.mark = Some(Mark::Expired);
    let waiting = rec_resending(Status::Scheduled, 2, 1);
    for (o, reason) in [
        (Outcome::Success, None),
        (Outcome::Cancelled, Some("NOT_AVAILABLE")),
        (Outcome::Error, Some("HTTP_503")),
        (Outcome::Rejected, Some("HTTP_422")),
    ] {
        let input = answer(2, o, reason, None);
        push(
            format!("response {o} n=2 / unread"),
            &input,
            Known::Unread,
            &late,
        );
        for (name, r) in [
            ("IN_PROGRESS c=2 max=4", &working),
            ("IN_PROGRESS c=2 max=2", &last),
            ("FAILED c=2 EXPIRED", &ended),
            ("SCHEDULED c=2 n=2 resends=1", &waiting),
        ] {
            push(
                format!("response {o} n=2 / {name}"),
                &input,
                Known::Record(r),
                &late,
            );
        }
    }
    let retry = retry(3);
    for st in [Status::Scheduling, Status::Scheduled, Status::Sending] {
        let mut r = rec_in(st, 2, 4);
        r.next_fire_at = Some(at(-60));
        for (mode, c) in [("closed", &late), ("held", &held)] {
            push(
                format!("{mode}: retry m=3 / {st} c=2"),
                &retry,
                Known::Record(&r),
                c,
            );
        }
    }
    push("retry m=3 / unread".into(), &retry, Known::Unread, &late);
    push(
        "held: retry m=3 / unread".into(),
        &retry,
        Known::Unread,
        &held,
    );
    // The reconciler: a request before its own answer deadline is left to it; one
    // past it ends; stuck cycles end (parked ones too); SENDING completes its send.
    let mut early = working.clone();
    early.answer_due_at = Some(at(600));
    early.reconcile = Some(ReconcileKey {
        partition: ReconcileKey::partition_for(id().shard(8)),
        at: at(-3600),
    });
    let mut parked = rec_in(Status::Scheduled, 2, 4);
    parked.next_fire_at = Some(at(-3600));
    parked.counts[Counter::Requeues] = late.rules.requeue_max;
    let mut stuck = [Status::Scheduling, Status::Sending].map(|st| rec_in(st, 2, 4));
    for r in &mut stuck {
        r.updated_at = at(-3600);
    }
    for (name, r) in [
        ("IN_PROGRESS before its answer deadline", &early),
        ("IN_PROGRESS past its answer deadline", &working),
        ("SCHEDULED parked", &parked),
        ("SCHEDULING stuck", &stuck[0]),
        ("SENDING stuck", &stuck[1]),
    ] {
        for (mode, c) in [("closed", &late), ("held", &held)] {
            let input = Input::Reconcile(r.clone());
            push(
                format!("{mode}: reconcile {name}"),
                &input,
                Known::Record(r),
                c,
            );
        }
    }
    // A replay gives a whole deadline from now.
    let failed = rec_in(Status::Failed, 2, 2);
    let replay = Input::Replay {
        transaction_id: id(),
        budget: 2,
    };
    push(
        "replay / FAILED c=2".into(),
        &replay,
        Known::Record(&failed),
        &late,
    );
}

/// The table, row by row, as one reviewed file
/// (`snapshots/domain__decide__tests__decision_table.snap`): each case names the input,
/// what is known of the record and its status; each indented line under it is one effect
/// of its plan. A change to a decision shows up there as a diff of one line per effect
/// (`cargo insta review`, or `INSTA_UPDATE=always` and `git diff`).
#[test]
fn every_status_times_every_input_is_the_reviewed_plan() {
    let mut seen = std::collections::BTreeSet::new();
    let mut table = String::new();
    for (name, plan) in all_cases() {
        table.push_str(&name);
        table.push('\n');
        for effect in &plan {
            table.push_str("  ");
            table.push_str(&describe(effect));
            table.push('\n');
        }
        assert!(seen.insert(name), "a case is produced twice");
    }
    insta::assert_snapshot!("decision_table", table);
}

/// Every plan of the table: it ends with exactly one terminal effect (ack, drop or
/// reject) and nothing after it; every write is an arrow of the state machine from
/// each status its guard accepts; every write is stamped with the decision's now,
/// carries the reconciler key exactly when it enters a non-terminal state and the
/// answer deadline exactly when it enters IN_PROGRESS.
#[test]
fn every_plan_is_well_formed_and_every_write_is_an_arrow() {
    let ctx = table_ctx();
    let mut writes = 0;
    for (name, plan) in all_cases() {
        let terminal: Vec<usize> = plan
            .iter()
            .enumerate()
            .filter(|(_, e)| e.is_terminal())
            .map(|(i, _)| i)
            .collect();
        let ends_with_terminal = plan.len() == 1 && plan[0] == Effect::Read(id());
        assert!(
            ends_with_terminal || terminal == vec![plan.len() - 1],
            "{name}: one terminal effect, last: {plan:?}"
        );
        for e in &plan {
            if let Effect::Write(w) = e {
                writes += 1;
                assert!(!w.from().is_empty(), "{name}");
                for from in w.from().iter() {
                    assert_eq!(
                        arrow(Some(from), w.event()),
                        Ok(w.to()),
                        "{name}: {from} --{:?}--> {}",
                        w.event(),
                        w.to()
                    );
                }
                assert_eq!(w.set.updated_at, ctx.now, "{name}");
                assert_eq!(w.transaction_id, id(), "{name}");
                assert_eq!(
                    w.set.reconcile == Change::Clear,
                    w.to().is_terminal(),
                    "{name}: the reconciler key exists exactly in non-terminal states"
                );
                assert_eq!(
                    w.set.answer_due_at == Change::Clear,
                    w.to() != Status::InProgress,
                    "{name}: the answer deadline exists exactly in IN_PROGRESS"
                );
                let listed = matches!(&w.set.failed, Change::Set(k) if k.partition == FailedKey::partition_for(id().shard(ctx.rules.shards)));
                assert_eq!(
                    listed,
                    w.to() == Status::Failed,
                    "{name}: the failed-listing key is set by the writes entering FAILED"
                );
                assert_eq!(
                    w.set.failed == Change::Clear,
                    w.from().contains(Status::Failed),
                    "{name}: the failed-listing key is removed by the writes leaving FAILED"
                );
                let leaves_sending =
                    w.from().contains(Status::Sending) && w.to() != Status::Sending;
                assert_eq!(
                    w.set.publishing_since == Change::Clear,
                    leaves_sending,
                    "{name}: the publisher's claim is removed by the writes leaving SENDING"
                );
                assert_eq!(
                    matches!(w.set.publishing_since, Change::Set(t) if t == ctx.now),
                    w.event() == Event::PublishClaimed,
                    "{name}: only the claim sets the claim, at its instant"
                );
                assert_eq!(
                    w.guard.unclaimed,
                    w.event() == Event::PublishClaimed,
                    "{name}: the claim, and only it, expects no claim"
                );
            }
        }
    }
    assert!(writes > 60, "the table exercises {writes} writes");
}

/// GIVEN a record written later than this run's clock reading (another writer's
/// clock, or the record a failed condition hands back) WHEN the run decides on it
/// THEN its writes carry that record's time, never an earlier one; unread, the run's
/// own reading is used.
#[test]
fn writes_never_carry_a_time_before_the_record_they_replace() {
    let ctx = ctx_at(1_000);
    let mut r = record(Status::InProgress, 1, None, 4);
    r.updated_at = Timestamp::from_millis(5_000);
    let input = Input::Response(response(1, Outcome::Cancelled));
    let times = |known: Known<'_>| -> Vec<Timestamp> {
        decide(&input, known, None, &ctx, &mut FixedRandom(0.5))
            .iter()
            .filter_map(|e| match e {
                Effect::Write(w) => Some(w.set.updated_at),
                _ => None,
            })
            .collect()
    };
    let known = times(Known::Record(&r));
    assert!(!known.is_empty());
    assert!(known.iter().all(|t| *t == r.updated_at), "{known:?}");
    let unread = times(Known::Unread);
    assert!(!unread.is_empty());
    assert!(unread.iter().all(|t| *t == ctx.now), "{unread:?}");
    // A record older than the reading changes nothing.
    r.updated_at = Timestamp::from_millis(10);
    assert!(times(Known::Record(&r)).iter().all(|t| *t == ctx.now));
}

/// Every acknowledgement's label is its serialized name.
#[test]
fn ack_labels_are_their_serialized_names() {
    for &a in Ack::ALL {
        assert_eq!(serde_json::to_value(a).unwrap(), a.label(), "{a:?}");
    }
    let labels: std::collections::BTreeSet<&str> = Ack::ALL.iter().map(|a| a.label()).collect();
    assert_eq!(labels.len(), Ack::ALL.len(), "one label each");
}

/// The first write of a plan.
fn first_write(plan: &Plan) -> &Write {
    plan.iter()
        .find_map(|e| match e {
            Effect::Write(w) => Some(w),
            _ => None,
        })
        .unwrap()
}

/// GIVEN an operator's note (caller and reason) in the context WHEN a replay or a
/// resolve is decided THEN its write records the note and so does the audit entry of
/// the transition; without a note a previous one is removed; the handlers' writes keep
/// the note and their audit entries carry none.
#[test]
fn operator_writes_record_who_and_why() {
    use crate::audit::AuditEntry;
    use crate::machine::OperatorNote;
    let note = OperatorNote::new(
        "arn:aws:iam::123456789012:user/alice",
        Some("service fixed"),
    )
    .unwrap();
    let noted = ctx_at(1_000).for_operator(note.clone());
    let failed = rec_in(Status::Failed, 2, 2);
    let scheduled = rec_in(Status::Scheduled, 2, 4);
    let replay = Input::Replay {
        transaction_id: id(),
        budget: 1,
    };
    let resolve = Input::Resolve(id());
    for (input, r) in [(&replay, &failed), (&resolve, &scheduled)] {
        let plan = decide(input, Known::Record(r), None, &noted, &mut FixedRandom(0.5));
        let w = first_write(&plan);
        assert_eq!(w.set.operator, Change::Set(note.clone()));
        let after = w.apply(r).unwrap();
        let entry = AuditEntry::from_change(Some(r), &after).unwrap();
        assert_eq!(entry.operator, Some(note.clone()));
        let plain = decide(
            input,
            Known::Record(r),
            None,
            &ctx_at(1_000),
            &mut FixedRandom(0.5),
        );
        assert_eq!(first_write(&plain).set.operator, Change::Clear);
    }
    let mut answered = rec_in(Status::InProgress, 1, 4);
    answered.operator = Some(Box::new(note.clone()));
    answered.last_actor = crate::machine::Actor::Operator;
    let plan = decide(
        &Input::Response(response(1, Outcome::Cancelled)),
        Known::Record(&answered),
        None,
        &noted,
        &mut FixedRandom(0.5),
    );
    let w = first_write(&plan);
    assert_eq!(w.set.operator, Change::Keep);
    let after = w.apply(&answered).unwrap();
    assert_eq!(after.operator.as_deref(), Some(&note));
    assert_eq!(
        AuditEntry::from_change(Some(&answered), &after)
            .unwrap()
            .operator,
        None
    );
    // The reason is checked.
    assert!(OperatorNote::new("x", Some("")).is_err());
    assert!(OperatorNote::new("x", Some(&"r".repeat(257))).is_err());
    assert!(OperatorNote::new("x", Some("a\nb")).is_err());
    assert!(OperatorNote::new("x", None).is_ok());
}

/// GIVEN a record an identical write left at the same instant for another attempt
/// WHEN a write guarded on that other attempt asks whether it produced it THEN no:
/// a bogus retry event for attempt 3 meeting the SENDING of attempt 2 is not taken
/// for done (its guard on the attempt it keeps fails), while attempt 2's is.
#[test]
fn an_identical_write_for_another_attempt_is_not_its_own() {
    let ctx = ctx_at(9_000_000);
    let rec = record(Status::Scheduled, 1, Some(2), 2);
    let plan = |m: u32| {
        let ev = RetryEvent {
            transaction_id: id(),
            origin: Origin::RetryScheduler,
            attempt: a(m),
            round: None,
        };
        decide(
            &Input::Retry(ev),
            Known::Unread,
            None,
            &ctx,
            &mut FixedRandom(0.5),
        )
    };
    let (Effect::Write(second), Effect::Write(third)) = (&plan(2)[0], &plan(3)[0]) else {
        panic!("{:?}", plan(2))
    };
    let sending = second.apply(&rec).unwrap();
    assert!(second.produced(&sending));
    assert!(!third.produced(&sending), "guarded on attempt 3");
    let mut later = sending.clone();
    later.updated_at = later.updated_at.plus_millis(1);
    assert!(!second.produced(&later), "another instant: another write");
}

// ---------------------------------------------------------------------------
// The service's free text steers nothing.
// ---------------------------------------------------------------------------

/// Reasons a service may give, among them every string the protocol ever used as a
/// control marker (and the stored forms of its marks).
const REASONS: &[Option<&str>] = &[
    None,
    Some("NOT_AVAILABLE"),
    Some(""),
    Some("BREAKER_PROBE"),
    Some("BREAKER_OPEN"),
    Some("BREAKER_HALF_OPEN"),
    Some("BREAKER_"),
    Some("BREAKER_CLOSED"),
    Some("TECHNICAL_EXHAUSTED"),
    Some("UNANSWERED"),
    Some("RESOLVED_BY_OTHER_MEANS"),
    Some("PROBE"),
    Some("HELD_OPEN"),
    Some("NONE"),
];

/// The plan with every copy of a free-text reason blanked: what the decision chose,
/// not what it recorded of the text.
fn without_reasons(plan: &Plan) -> Plan {
    plan.iter()
        .cloned()
        .map(|e| match e {
            Effect::Write(mut w) => {
                // The service's reason is recorded by the writes that clear the mark.
                if w.set.mark == Change::Clear {
                    w.set.last_reason = Change::Keep;
                }
                Effect::Write(w)
            }
            Effect::Alert(mut a) => {
                a.last_reason = None;
                Effect::Alert(a)
            }
            Effect::Note(mut n) => {
                n.reason = None;
                Effect::Note(n)
            }
            other => other,
        })
        .collect()
}

mod free_text {
    use super::*;
    use proptest::prelude::*;

    fn record(
        status: Status,
        (current, max): (u32, u32),
        resend: bool,
        (resends, pauses, republishes): (u32, u32, u32),
        mark: Option<Mark>,
    ) -> TransactionRecord {
        let mut r = rec_in(status, current, max);
        if resend && status.is_intermediate() {
            r = rec_resending(status, current, resends.max(1));
        }
        r.counts[Counter::Round] = r.counts[Counter::Round].max(resends);
        r.counts[Counter::ProbeErrors] = pauses.min(r.counts[Counter::Round]);
        r.counts[Counter::Republishes] = republishes;
        r.mark = mark;
        r
    }

    fn input(
        kind: u8,
        outcome: Outcome,
        n: u32,
        round: Option<u32>,
        reason: Option<&str>,
    ) -> Input {
        match kind {
            0 => Input::Response(Response {
                transaction_id: id(),
                attempt: a(n),
                outcome,
                reason: reason.map(str::to_owned),
                retry_after_seconds: None,
                round,
                execution: None,
            }),
            _ => Input::Retry(RetryEvent {
                transaction_id: id(),
                origin: Origin::RetryScheduler,
                attempt: a(n),
                round,
            }),
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4000))]
        /// GIVEN any record (every status, attempt, budget, count and mark) and any
        /// answer, retry event or reconciler pass, with or without the breaker holding
        /// or probing, WHEN only the service's reason changes — on the record and in
        /// the answer, drawn from a set holding every marker the protocol ever wrote
        /// THEN the plan is the same but for the reason it records (the backoff is
        /// uniform here, so its per-reason lookup changes nothing).
        #[test]
        fn decisions_do_not_change_with_the_services_reason(
            status in proptest::sample::select(Status::ALL.to_vec()),
            budget in (1u32..=3, 0u32..=2),
            resend in any::<bool>(),
            counts in (0u32..=4, 0u32..=4, 0u32..=3),
            mark in proptest::option::of(proptest::sample::select(Mark::ALL.to_vec())),
            kind in 0u8..=2,
            outcome in proptest::sample::select(vec![Outcome::Success, Outcome::Cancelled, Outcome::Error]),
            n in 1u32..=4,
            round in proptest::option::of(0u32..=4),
            breaker in 0u8..=2,
            reasons in (
                proptest::sample::select(REASONS.to_vec()),
                proptest::sample::select(REASONS.to_vec()),
                proptest::sample::select(REASONS.to_vec()),
                proptest::sample::select(REASONS.to_vec()),
            ),
        ) {
            let (current, extra) = budget;
            let max = current + extra;
            let ctx = table_ctx()
                .with_technical_resend_max(2)
                .with_hold((breaker == 1).then_some(Hold {
                    until: at(600),
                    state: crate::breaker::BreakerState::Open {
                        until: at(600),
                        cooldown_ms: 600_000,
                    },
                }))
                .with_probe(breaker == 2);
            let plan_for = |record_reason: Option<&str>, answer_reason: Option<&str>| {
                let mut r = record(status, (current, max.max(current)), resend, counts, mark);
                r.last_reason = record_reason.map(str::to_owned);
                let input = if kind == 2 {
                    Input::Reconcile(r.clone())
                } else {
                    input(kind, outcome, n, round, answer_reason)
                };
                without_reasons(&decide(&input, Known::Record(&r), None, &ctx, &mut FixedRandom(0.5)))
            };
            let (r1, r2, q1, q2) = reasons;
            prop_assert_eq!(plan_for(r1, q1), plan_for(r2, q2));
        }
    }
}

/// GIVEN a schedule's persisted instant WHEN it is created at `now` THEN it keeps that
/// instant while it lies at least the lead ahead, and is moved to the lead (a whole
/// second) otherwise — never into the past.
#[test]
fn a_schedule_is_created_at_least_the_lead_ahead() {
    let spec = |fire_at| ScheduleSpec {
        name: ScheduleName::for_retry(&id(), a(2)),
        fire_at,
        event: RetryEvent {
            transaction_id: id(),
            origin: Origin::RetryScheduler,
            attempt: a(2),
            round: None,
        },
    };
    let now = at(0).plus_millis(250);
    assert_eq!(spec(at(3600)).create_at(now), at(3600));
    assert_eq!(spec(at(6)).create_at(now), at(6));
    for past in [at(-86_400), at(-1), at(0), at(5)] {
        assert_eq!(spec(past).create_at(now), at(6), "{past}");
    }
}

/// Hole: a pause from SENDING threw the real answer away. GIVEN SENDING(2) — request
/// 2 may be out (the run published and crashed) WHEN its retry event comes back while
/// the breaker holds requests THEN the send is completed (published again, same key,
/// IN_PROGRESS(2)), never paused back to attempt 1: the service's SUCCESS for 2 is
/// then the answer in flight and ends the transaction SUCCEEDED, not dropped as late.
#[test]
fn a_held_event_finding_sending_completes_the_send() {
    let sending = record(Status::Sending, 1, Some(2), 3);
    let ev = RetryEvent {
        transaction_id: id(),
        origin: Origin::RetryScheduler,
        attempt: a(2),
        round: Some(0),
    };
    let held = ctx_at(0).with_hold(Some(Hold {
        until: Timestamp::from_millis(600_000),
        state: BreakerState::Open {
            until: Timestamp::from_millis(600_000),
            cooldown_ms: 600_000,
        },
    }));
    let plan = decide_retry(Known::Record(&sending), &ev, &held);
    assert_eq!(
        labels(&plan),
        ["publish-request", "write", "ack"],
        "{plan:?}"
    );
    let Effect::Write(w) = &plan[1] else {
        panic!("{plan:?}")
    };
    let sent = w.apply(&sending).unwrap();
    assert_eq!(
        (sent.status, sent.current_attempt),
        (Status::InProgress, a(2))
    );
    let answer = decide_response(
        Known::Record(&sent),
        &response(2, Outcome::Success),
        &held,
        &mut FixedRandom(0.5),
    );
    let Effect::Write(w) = &answer[0] else {
        panic!("{answer:?}")
    };
    assert_eq!(w.apply(&sent).unwrap().status, Status::Succeeded);
    // By construction: the only arrow from SENDING to another status is the
    // publish's completion.
    for &e in Event::ALL {
        if let Ok(to) = arrow(Some(Status::Sending), e) {
            assert!(
                to == Status::Sending || e == Event::RequestPublished,
                "SENDING --{e:?}--> {to}"
            );
        }
    }
}

/// A deployment delivers directly unless told otherwise; `direct` and `outbox` are
/// the configured names (exactly), and serde writes the same; only outbox mode
/// forgoes the answer deadline's republishes.
#[test]
fn delivery_defaults_to_direct_and_names_itself() {
    let rules = Deployment::default();
    assert_eq!(rules.delivery, Delivery::Direct);
    assert_eq!(Delivery::default(), Delivery::Direct);
    assert!(!ctx_at(0).outbox());
    assert!(ctx_at(0).with_delivery(Delivery::Outbox).outbox());
    for d in Delivery::ALL {
        assert_eq!(Delivery::parse(d.as_str()), Some(d));
        assert_eq!(
            serde_json::to_string(&d).unwrap(),
            format!("\"{}\"", d.as_str())
        );
        assert_eq!(d.to_string(), d.as_str());
    }
    assert_eq!(Delivery::ALL.map(Delivery::as_str), ["direct", "outbox"]);
    for bad in ["Outbox", "OUTBOX", " direct", "fifo", ""] {
        assert_eq!(Delivery::parse(bad), None, "{bad:?}");
    }
    assert_eq!(
        rules.answer_republishes(),
        crate::defaults::ANSWER_REPUBLISH_MAX
    );
    let outbox = ctx_at(0).with_delivery(Delivery::Outbox);
    assert_eq!(outbox.rules.answer_republishes(), 0);
    assert_eq!(
        outbox.rules.answer_republish_max,
        crate::defaults::ANSWER_REPUBLISH_MAX,
        "the setting itself is kept"
    );
}

/// GIVEN outbox mode WHEN the retry handler reads a record THEN it asks the breaker
/// exactly for an event whose plan enqueues a send (the pending cycle), not for one
/// finding SENDING (the publisher sends it, no resume); the reconciler never asks it
/// for an unanswered request (no republish). Direct mode asks for both.
#[test]
fn outbox_asks_the_breaker_only_for_a_send_it_enqueues() {
    let ev = RetryEvent {
        transaction_id: id(),
        origin: Origin::RetryScheduler,
        attempt: a(3),
        round: None,
    };
    let scheduled = record(Status::Scheduled, 2, Some(3), 4);
    let sending = record(Status::Sending, 2, Some(3), 4);
    let direct = ctx_at(0);
    let outbox = ctx_at(0).with_delivery(Delivery::Outbox);
    assert!(retry_asks_breaker(&Rules, &scheduled, &ev, &outbox));
    assert!(!retry_asks_breaker(&Rules, &sending, &ev, &outbox));
    assert!(retry_asks_breaker(&Rules, &scheduled, &ev, &direct));
    assert!(retry_asks_breaker(&Rules, &sending, &ev, &direct));
    let mut overdue = record(Status::InProgress, 2, None, 4);
    overdue.answer_due_at = Some(Timestamp::from_millis(1_000));
    let later = |c: &Context| c.clone().with_probe(false);
    let direct_later = Context {
        now: Timestamp::from_millis(10_000),
        ..later(&direct)
    };
    let outbox_later = Context {
        now: Timestamp::from_millis(10_000),
        ..later(&outbox)
    };
    assert!(asks_breaker(&overdue, &direct_later));
    assert!(!asks_breaker(&overdue, &outbox_later));
    // Let out as a probe, the reconciler still republishes nothing in outbox mode.
    let probed = decide_reconcile(&overdue, &outbox_later.clone().with_probe(true));
    assert!(
        !probed
            .iter()
            .any(|e| matches!(e, Effect::PublishRequest(_))),
        "{probed:?}"
    );
    assert_eq!(probed.last(), Some(&Effect::Ack(Ack::Unanswered)));
}

/// GIVEN outbox mode WHEN an ERROR answers the request in flight THEN only one that
/// says NOT_RUN is sent again (a new round: a new deduplication id); any other ends
/// the transaction FAILED, `AMBIGUOUS`, with its alert and the breaker's technical
/// signal, spending nothing. Direct mode sends both again.
#[test]
fn an_error_that_may_have_run_is_not_sent_again_in_outbox_mode() {
    let r = record(Status::InProgress, 2, None, 4);
    let error = |execution| Response {
        execution,
        ..response(2, Outcome::Error)
    };
    let outbox = ctx_at(0).with_delivery(Delivery::Outbox);
    for (execution, resend) in [
        (None, false),
        (Some(Execution::Unknown), false),
        (Some(Execution::NotRun), true),
    ] {
        let plan = decide_response(
            Known::Record(&r),
            &error(execution),
            &outbox,
            &mut FixedRandom(0.5),
        );
        let w = first_write(&plan);
        assert!(plan.contains(&Effect::Signal(crate::breaker::Signal::Technical)));
        if resend {
            assert_eq!(w.event(), Event::ResponseTechnicalRetry, "{execution:?}");
            assert_eq!(w.set.counts[Counter::Round], Change::Set(1));
        } else {
            assert_eq!(w.event(), Event::Exhausted, "{execution:?}");
            let after = w.apply(&r).unwrap();
            assert_eq!(after.status, Status::Failed);
            assert_eq!(after.mark, Some(Mark::Ambiguous));
            assert_eq!(after.current_attempt, a(2), "no attempt spent");
            assert!(after.failed.is_some(), "listed FAILED");
            assert!(plan.iter().any(|e| matches!(
                e,
                Effect::Alert(Alert {
                    kind: AlertKind::Ambiguous,
                    ..
                })
            )));
            assert_eq!(plan.last(), Some(&Effect::Ack(Ack::Failed)));
        }
        let direct = decide_response(
            Known::Record(&r),
            &error(execution),
            &ctx_at(0),
            &mut FixedRandom(0.5),
        );
        assert_eq!(
            first_write(&direct).event(),
            Event::ResponseTechnicalRetry,
            "direct mode ignores {execution:?}"
        );
    }
    assert!(!Mark::LEGACY.contains(&Mark::Ambiguous));
    assert_eq!(Mark::parse("AMBIGUOUS"), Some(Mark::Ambiguous));
}

/// The FIFO request queue's message ids: the deduplication id carries the round, so
/// each (transaction, attempt, round) is one message; the group is the transaction.
#[test]
fn a_request_is_deduplicated_per_attempt_and_round() {
    let mut r = record(Status::Sending, 1, Some(2), 4);
    let h = RequestHeader::of(&r, a(2));
    assert_eq!(h.deduplication_id(), "TX-100200#2#0");
    r.counts[Counter::Round] = 3;
    let resent = RequestHeader::of(&r, a(2));
    assert_eq!(resent.deduplication_id(), "TX-100200#2#3");
    assert_eq!(resent.group_id(), "TX-100200");
    assert_ne!(h.deduplication_id(), resent.deduplication_id());
}
