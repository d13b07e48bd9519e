use super::evidence::{self, Seen};
use super::*;
use domain::audit::AuditEntry;
use domain::decide::{Delivery, DropReason, Rejection};
use domain::machine::Status;
use domain::message::{Origin, RetryEvent};
use domain::ScheduleName;
use std::time::{Duration, Instant};
use Violation as V;

fn id() -> TransactionId {
    TransactionId::parse("TX-1").unwrap()
}

fn a(n: u32) -> Attempt {
    Attempt::new(n).unwrap()
}

fn rec(status: Status, current: u32, next: Option<u32>, max: u32) -> TransactionRecord {
    crate::trail::record(id(), status, current, next, max)
}

#[test]
fn a_change_must_be_an_arrow_within_budget_and_never_a_late_answer() {
    let before = rec(Status::InProgress, 2, None, 3);
    let ok = rec(Status::Scheduling, 2, Some(3), 3);
    assert!(change(
        Some(&before),
        Event::ResponseCancelledRetry,
        &ok,
        Writer::Answering(2)
    )
    .is_empty());
    assert_eq!(
        change(Some(&before), Event::Success, &ok, Writer::Other),
        [V::IllegalTransition]
    );
    assert_eq!(
        change(
            Some(&before),
            Event::ResponseCancelledRetry,
            &ok,
            Writer::Answering(1)
        ),
        [V::LateResponseApplied]
    );
    let over = rec(Status::InProgress, 4, None, 3);
    let sending = rec(Status::Sending, 3, Some(4), 3);
    assert_eq!(
        change(
            Some(&sending),
            Event::RequestPublished,
            &over,
            Writer::Other
        ),
        [V::ExceededMaxAttempts]
    );
    // A creation is [*] → IN_PROGRESS on Start, nothing else.
    let created = rec(Status::InProgress, 1, None, 3);
    assert!(change(None, Event::Start, &created, Writer::Other).is_empty());
    assert_eq!(
        change(None, Event::Start, &ok, Writer::Other),
        [V::IllegalTransition]
    );
}

#[test]
fn a_publish_past_the_budget_is_a_violation() {
    let r = rec(Status::Sending, 2, Some(3), 3);
    assert_eq!(publish(a(3), Some(&r)), None);
    assert_eq!(publish(a(4), Some(&r)), Some(V::ExceededMaxAttempts));
    assert_eq!(publish(a(4), None), None, "no record: nothing to compare");
}

#[test]
fn the_service_accepts_one_request_per_attempt_after_a_cancellation() {
    let mut s = Service::<u8>::new();
    let key = |n: u32| IdempotencyKey::new(&id(), a(n)).as_str().to_owned();
    let r = s.receive(0, &id(), 1, &key(1), None, 3);
    assert_eq!((r.fate, r.violations), (Fate::Accepted, vec![]));
    // The same key again: deduplicated.
    let r = s.receive(0, &id(), 1, &key(1), None, 3);
    assert_eq!((r.fate, r.violations), (Fate::Deduplicated, vec![]));
    // Attempt 2 before attempt 1 was answered CANCELLED.
    let r = s.receive(0, &id(), 2, &key(2), None, 3);
    assert_eq!(r.violations, [V::RetryWithoutCancellation]);
    assert!(s.answer(0, 2, Outcome::Cancelled));
    assert!(!s.answer(0, 9, Outcome::Cancelled), "never accepted");
    // Another key for an accepted attempt: accepted twice.
    let r = s.receive(0, &id(), 2, "TX-1#2-again", None, 3);
    assert_eq!(r.fate, Fate::AlreadyAccepted);
    assert_eq!(r.violations, [V::DuplicateAccepted, V::DuplicateAccepted]);
    // Attempt 4 of 3, after a cancelled 3.
    s.receive(0, &id(), 3, &key(3), None, 3);
    s.answer(0, 3, Outcome::Cancelled);
    let r = s.receive(0, &id(), 4, &key(4), None, 3);
    assert_eq!(r.violations, [V::ExceededMaxAttempts]);
    assert_eq!(s.answer_of(&0, 3), Some(Outcome::Cancelled));
    assert!(s.seen_key(&key(4)));
    assert_eq!(s.accepted().count(), 4);
}

fn spec(attempt: u32, fire_ms: i64) -> ScheduleSpec {
    ScheduleSpec {
        name: ScheduleName::for_retry(&id(), a(attempt)),
        fire_at: Timestamp::from_millis(fire_ms),
        event: RetryEvent {
            transaction_id: id(),
            origin: Origin::RetryScheduler,
            attempt: a(attempt),
            round: None,
        },
    }
}

#[test]
fn a_schedule_is_made_from_the_persisted_instant_and_only_one_instant() {
    let mut persisted = rec(Status::Scheduling, 1, Some(2), 3);
    persisted.next_fire_at = Some(Timestamp::from_millis(5_000));
    let mut i = Instants::<u8>::new();
    assert!(i.created(0, Some(&persisted), &spec(2, 5_000)).is_empty());
    assert_eq!(
        i.created(0, Some(&persisted), &spec(2, 6_000)),
        [
            V::ScheduleNotFromPersistedInstant,
            V::TwoInstantsForOneAttempt
        ]
    );
    // A record that moved past the attempt: no persisted instant to compare with.
    let later = rec(Status::InProgress, 2, None, 3);
    assert_eq!(
        i.created(0, Some(&later), &spec(2, 7_000)),
        [V::TwoInstantsForOneAttempt]
    );
    // A schedule for an attempt not decided yet.
    assert_eq!(
        i.created(0, Some(&later), &spec(3, 9_000)),
        [V::ScheduleNotFromPersistedInstant]
    );
}

/// A technical re-send of attempt 2 is a retry of its own: its schedule (its own
/// name) must carry the instant persisted for it, and may carry another instant than
/// the schedule that sent attempt 2.
#[test]
fn a_re_send_has_its_own_schedule_and_instant() {
    let mut i = Instants::<u8>::new();
    let mut cycle = rec(Status::Scheduling, 1, Some(2), 3);
    cycle.next_fire_at = Some(Timestamp::from_millis(5_000));
    cycle.schedule_name = Some(ScheduleName::for_retry(&id(), a(2)));
    assert!(i.created(0, Some(&cycle), &spec(2, 5_000)).is_empty());
    let mut resend = rec(Status::Scheduling, 2, Some(2), 3);
    resend.next_fire_at = Some(Timestamp::from_millis(8_000));
    resend.schedule_name = Some(ScheduleName::for_resend(&id(), a(2), 1));
    let of_resend = |fire_ms| ScheduleSpec {
        name: ScheduleName::for_resend(&id(), a(2), 1),
        ..spec(2, fire_ms)
    };
    assert!(i.created(0, Some(&resend), &of_resend(8_000)).is_empty());
    assert_eq!(
        i.created(0, Some(&resend), &of_resend(9_000)),
        [
            V::ScheduleNotFromPersistedInstant,
            V::TwoInstantsForOneAttempt
        ]
    );
    // The schedule that sent attempt 2, created again late: the record moved on.
    assert!(i.created(0, Some(&resend), &spec(2, 5_000)).is_empty());
}

/// An attempt answered ERROR was not processed: the same key again is processed
/// anew; only a CANCELLED allows the next attempt, whatever was answered since.
#[test]
fn the_service_processes_a_re_send_after_error_and_counts_only_cancellations() {
    let mut s = Service::<u8>::new();
    let key = |n: u32| format!("TX-1#{n}");
    assert_eq!(
        s.receive(0, &id(), 1, &key(1), None, 3).fate,
        Fate::Accepted
    );
    s.answer(0, 1, Outcome::Error);
    let again = s.receive(0, &id(), 1, &key(1), None, 3);
    assert_eq!((again.fate, again.violations), (Fate::Accepted, vec![]));
    assert!(s.awaits_answer(&0, 1));
    // A copy of it while it is processed: deduplicated.
    assert_eq!(
        s.receive(0, &id(), 1, &key(1), None, 3).fate,
        Fate::Deduplicated
    );
    // Attempt 2 after an ERROR only: a retry without cancellation.
    s.answer(0, 1, Outcome::Error);
    assert_eq!(
        s.receive(0, &id(), 2, &key(2), None, 3).violations,
        [V::RetryWithoutCancellation]
    );
    let mut s = Service::<u8>::new();
    s.receive(0, &id(), 1, &key(1), None, 3);
    s.answer(0, 1, Outcome::Cancelled);
    s.answer(0, 1, Outcome::Error);
    assert_eq!(s.cancelled_attempts(&0), 1);
    assert!(s
        .receive(0, &id(), 2, &key(2), None, 3)
        .violations
        .is_empty());
}

/// A service that does not deduplicate runs every request message it receives: a
/// second message for an attempt it received runs it twice — answered or not yet —
/// unless it answered that attempt ERROR (it did not run it).
#[test]
fn a_second_message_for_an_attempt_runs_it_again_unless_it_was_answered_error() {
    let mut s = Service::<u8>::new();
    let key = |n: u32| format!("TX-1#{n}");
    assert_eq!(s.runs_again(&0, 1), None, "never received");
    s.receive(0, &id(), 1, &key(1), None, 3);
    assert_eq!(s.runs_again(&0, 1), Some(V::ExecutedTwice), "running");
    s.answer(0, 1, Outcome::Error);
    assert_eq!(
        s.runs_again(&0, 1),
        None,
        "did not run: the re-send runs it"
    );
    s.receive(0, &id(), 1, &key(1), None, 3);
    assert_eq!(
        s.runs_again(&0, 1),
        Some(V::ExecutedTwice),
        "the re-send runs"
    );
    for outcome in [Outcome::Success, Outcome::Cancelled, Outcome::Rejected] {
        s.answer(0, 1, outcome);
        assert_eq!(s.runs_again(&0, 1), Some(V::ExecutedTwice), "{outcome:?}");
    }
    assert_eq!(s.runs_again(&0, 2), None, "another attempt");
    assert_eq!(s.runs_again(&1, 1), None, "another transaction");
}

/// An ERROR that says the call may have run (`execution UNKNOWN`) is a run: a second
/// message for that attempt runs it twice, where one answered ERROR NOT_RUN does not.
#[test]
fn an_error_that_may_have_run_counts_as_a_run() {
    let mut s = Service::<u8>::new();
    let key = |n: u32| format!("TX-1#{n}");
    assert!(!s.answer_error_unknown(0, 1), "never accepted");
    s.receive(0, &id(), 1, &key(1), Some(0), 3);
    assert!(s.answer_error_unknown(0, 1));
    assert!(s.may_have_run(&0, 1));
    assert_eq!(s.answer_of(&0, 1), Some(Outcome::Error));
    assert_eq!(s.runs_again(&0, 1), Some(V::ExecutedTwice));
    s.receive(0, &id(), 2, &key(2), Some(0), 3);
    s.answer(0, 2, Outcome::Error);
    assert!(!s.may_have_run(&0, 2));
    assert_eq!(
        s.runs_again(&0, 2),
        None,
        "NOT_RUN: the re-send runs it once"
    );
}

/// The FIFO request queue's accepted sends: a deduplication id accepted twice is
/// published twice; another round of one attempt is another id.
#[test]
fn a_deduplication_id_accepted_twice_is_published_twice() {
    let mut sends = Sends::new();
    assert_eq!(sends.accept("TX-1#1#0"), None);
    assert!(sends.accepted("TX-1#1#0"));
    assert_eq!(sends.accept("TX-1#1#1"), None, "a new round is a new id");
    assert_eq!(sends.accept("TX-1#1#0"), Some(V::PublishedTwice));
    assert_eq!(sends.counts(), (2, 1));
}

/// Outbox mode's start creates SENDING(1) with no instant, by its own arrow.
#[test]
fn the_queued_start_is_a_consistent_creation() {
    let queued = TransactionRecord::started_queued(
        id(),
        domain::ids::MaxAttempts::new(3).unwrap(),
        domain::Timestamp::from_millis(0),
        4,
    );
    assert_eq!(creation(&queued), Vec::new());
    assert_eq!(inconsistency(&queued), None);
    let mut resent = queued.clone();
    resent.counts[Counter::Round] = 1;
    assert!(
        inconsistency(&resent).is_some(),
        "a re-send has its instant"
    );
}

#[test]
fn a_rejection_or_the_pending_event_dropped_is_a_violation() {
    let pending = rec(Status::Scheduled, 1, Some(2), 3);
    let drop = Disposition::Drop(DropReason::DuplicateRetry {
        attempt: a(2),
        status: Status::Scheduled,
    });
    // An event of an earlier retry cycle of the pending attempt is not pending.
    let mut resent = pending.clone();
    resent.counts[Counter::Round] = 2;
    // Outbox delivery: a record SENDING holds the request; its event dropped loses
    // nothing, one dropped while SCHEDULED still does.
    let sending = rec(Status::Sending, 1, Some(2), 3);
    let dropped = Some(V::PendingRetryDropped);
    let cases = [
        (Some((2, None)), &pending, Delivery::Direct, dropped),
        (Some((3, None)), &pending, Delivery::Direct, None),
        (None, &pending, Delivery::Direct, None),
        (Some((2, Some(1))), &resent, Delivery::Direct, None),
        (Some((2, Some(2))), &resent, Delivery::Direct, dropped),
        (Some((2, None)), &sending, Delivery::Direct, dropped),
        (Some((2, None)), &sending, Delivery::Outbox, None),
        (Some((2, None)), &pending, Delivery::Outbox, dropped),
    ];
    for (event, record, delivery, expected) in cases {
        assert_eq!(
            disposition(&drop, event, Some(record), delivery),
            expected,
            "{event:?} {:?} {delivery:?}",
            record.status
        );
    }
    let reject = Disposition::Reject(Rejection::UnknownTransaction {
        transaction_id: id(),
    });
    assert_eq!(
        disposition(&reject, None, None, Delivery::Direct),
        Some(V::MessageRejected)
    );
}

#[test]
fn lost_and_missing_alerts() {
    let stuck = rec(Status::Scheduled, 1, Some(2), 3);
    let failed = rec(Status::Failed, 3, None, 3);
    assert!(lost(Some(&stuck), 0));
    assert!(!lost(Some(&stuck), 1), "its DLQ's alarm tells");
    assert!(lost(None, 0));
    assert!(!lost(Some(&failed), 0));
    assert!(alert_missing(Some(&failed), 0, 0));
    assert!(!alert_missing(Some(&failed), 1, 0));
    assert!(!alert_missing(Some(&failed), 0, 1));
    assert!(!alert_missing(Some(&stuck), 0, 0));
}

#[test]
fn the_peak_counts_the_busiest_window_whatever_the_time_type() {
    assert_eq!(peak_in_window::<i64, i64>(&[], 1000), 0);
    assert_eq!(peak_in_window(&[0i64, 200, 400, 600, 800, 1000], 1000), 5);
    assert_eq!(peak_in_window(&[1000i64, 0, 999, 1998], 1000), 3);
    assert_eq!(peak_in_window(&[0i64, 1000, 2000], 1000), 1);
    assert_eq!(peak_in_window(&[5i64, 5, 5], 1000), 3);
    // Eleven starts 100 ms apart: ten in any second, unless the first is 3 ms late.
    let starts: Vec<Duration> = (0..11u64).map(|k| Duration::from_millis(100 * k)).collect();
    assert_eq!(peak_in_window(&starts, Duration::from_secs(1)), 10);
    let mut late = starts.clone();
    late[0] += Duration::from_millis(3);
    assert_eq!(peak_in_window(&late, Duration::from_secs(1)), 11);
    let t0 = Instant::now();
    let at: Vec<Instant> = [0u64, 999, 1000]
        .iter()
        .map(|m| t0 + Duration::from_millis(*m))
        .collect();
    assert_eq!(peak_in_window(&at, Duration::from_secs(1)), 2);
    assert_eq!(
        evidence::rate(&[0i64, 1, 2], 1000, 2),
        (3, Some(V::RateExceeded))
    );
    assert_eq!(evidence::rate(&[0i64, 1, 2], 1000, 3), (3, None));
}

// ---------------------------------------------------------------------------
// A real run's witnesses
// ---------------------------------------------------------------------------

fn row(at: i64, from: Option<Status>, to: Status, attempt: u32) -> AuditEntry {
    crate::trail::entry(id(), at, from, to, a(attempt))
}

/// The whole trail of a transaction that retried `retries` times and ended `end`:
/// its creation, one retry cycle per retry, its end; one entry per millisecond.
fn trail(retries: u32, end: Status) -> Vec<AuditEntry> {
    use Status::{InProgress, Scheduled, Scheduling, Sending};
    // (from, to, attempt after the arrow − the cycle's attempt)
    const CYCLE: [(Status, Status, u32); 4] = [
        (InProgress, Scheduling, 0),
        (Scheduling, Scheduled, 0),
        (Scheduled, Sending, 0),
        (Sending, InProgress, 1),
    ];
    let cycles = (1..=retries).flat_map(|k| CYCLE.map(|(from, to, d)| (Some(from), to, k + d)));
    std::iter::once((None, InProgress, 1))
        .chain(cycles)
        .chain(std::iter::once((Some(InProgress), end, retries + 1)))
        .zip(0..)
        .map(|((from, to, n), at)| row(at, from, to, n))
        .collect()
}

fn seen(answers: &[Outcome]) -> BTreeMap<u32, Seen> {
    (1..)
        .zip(answers)
        .map(|(k, o)| {
            (
                k,
                Seen {
                    raw: 1,
                    outcome: *o,
                },
            )
        })
        .collect()
}

/// What the evidence shows for the item `r`, the trail `t` and the service's `answers`.
fn found(r: TransactionRecord, t: &[AuditEntry], answers: &[Outcome]) -> Vec<evidence::Finding> {
    evidence::check(Some(&r), t, &seen(answers))
}

fn violations(f: &[evidence::Finding]) -> Vec<V> {
    f.iter().map(|f| f.violation).collect()
}

/// The findings are `expected`, the first one's reason saying `why`.
fn shows(f: &[evidence::Finding], expected: &[V], why: &str) {
    assert_eq!(violations(f), expected, "{f:?}");
    assert!(f[0].why.contains(why), "{f:?}");
}

use Outcome::{Cancelled as C, Success as OK};

#[test]
fn consistent_witnesses_show_nothing() {
    for (r, t, s) in [
        (
            rec(Status::Succeeded, 1, None, 4),
            trail(0, Status::Succeeded),
            seen(&[OK]),
        ),
        (
            rec(Status::Succeeded, 3, None, 4),
            trail(2, Status::Succeeded),
            seen(&[C, C, OK]),
        ),
        (
            rec(Status::Failed, 4, None, 4),
            trail(3, Status::Failed),
            seen(&[C, C, C, C]),
        ),
    ] {
        assert_eq!(evidence::check(Some(&r), &t, &s), [], "{r:?}");
    }
}

#[test]
fn each_broken_guarantee_is_found_with_its_reason() {
    // No item at all.
    assert_eq!(
        violations(&evidence::check(None, &[], &BTreeMap::new())),
        [V::Lost]
    );
    // FAILED before the budget was spent: a retry lost.
    let t = trail(1, Status::Failed);
    let f = found(rec(Status::Failed, 2, None, 4), &t, &[C, C]);
    shows(
        &f,
        &[V::Lost],
        "FAILED at attempt 2 with 4 attempts allowed",
    );
    // A request the state never accounts for, and a doubled publish.
    let mut s = seen(&[C, OK]);
    s.insert(
        3,
        Seen {
            raw: 1,
            outcome: OK,
        },
    );
    let mut t = trail(1, Status::Succeeded);
    t.push(row(2, Some(Status::Sending), Status::InProgress, 2));
    let f = evidence::check(Some(&rec(Status::Succeeded, 2, None, 4)), &t, &s);
    let expected = [V::DuplicateAccepted, V::AuditGap, V::DuplicateAccepted];
    shows(&f, &expected, "attempt 3");
    assert!(f[2].why.contains("published 2 times"));
    // The same attempt published again in a new technical round (an ERROR answer, a
    // breaker pause) is no duplicate; twice in one round is.
    let mut again = row(2, Some(Status::Sending), Status::InProgress, 2);
    again.resends = 1;
    let mut t = trail(1, Status::Succeeded);
    t.push(again.clone());
    let s = seen(&[C, OK]);
    let r = rec(Status::Succeeded, 2, None, 4);
    assert_eq!(
        violations(&evidence::check(Some(&r), &t, &s)),
        [V::AuditGap],
        "only the chain's order is off, no duplicate"
    );
    t.push(again);
    let f = evidence::check(Some(&r), &t, &s);
    assert!(
        f.iter().any(|f| f.violation == V::DuplicateAccepted
            && f.why.contains("published 2 times in technical round 1")),
        "{f:?}"
    );
    // Stuck in SCHEDULED.
    let t = trail(0, Status::InProgress);
    let f = found(rec(Status::Scheduled, 1, Some(2), 4), &t, &[C]);
    assert_eq!(violations(&f), [V::Stuck]);
    assert!(f[0].why.starts_with("SCHEDULED"));
    // The audit trail misses its first row.
    let t = trail(1, Status::Succeeded);
    let f = found(rec(Status::Succeeded, 2, None, 4), &t[1..], &[C, OK]);
    shows(
        &f,
        &[V::AuditGap],
        "audit row IN_PROGRESS → SCHEDULING (attempt 1",
    );
    // The service and the state disagree; an attempt over the budget.
    let t = trail(0, Status::Succeeded);
    let f = found(rec(Status::Succeeded, 1, None, 1), &t, &[C, C]);
    assert_eq!(
        violations(&f),
        [
            V::ExceededMaxAttempts,
            V::DuplicateAccepted,
            V::Disagreement
        ],
        "{f:?}"
    );
    // A row that is no arrow.
    let mut t = trail(0, Status::Succeeded);
    t[1].from = Some(Status::Sending);
    t.insert(1, row(1, Some(Status::InProgress), Status::Sending, 1));
    let f = found(rec(Status::Succeeded, 1, None, 4), &t, &[OK]);
    assert_eq!(
        violations(&f),
        [V::IllegalTransition, V::IllegalTransition],
        "{f:?}"
    );
}

/// An entry written with an earlier clock reading than the one before it still
/// links into the chain: not a gap, but noted.
#[test]
fn entries_out_of_time_order_link_and_are_noted() {
    let mut t = trail(1, Status::Succeeded);
    t[2].at = Timestamp::from_millis(-5);
    let r = rec(Status::Succeeded, 2, None, 4);
    assert_eq!(evidence::check(Some(&r), &t, &seen(&[C, OK])), []);
    let (chain, rest) = evidence::link(&t);
    assert!(rest.is_empty());
    assert_eq!(evidence::time_inversions(&chain).len(), 1);
}

/// An outbox start: the publisher's claim (SENDING → SENDING) and its mark
/// (SENDING → IN_PROGRESS) carry one instant; in whatever order the audit holds them
/// the claim links first and the chain has no gap.
#[test]
fn the_publishers_claim_and_mark_of_one_instant_link_in_order() {
    use Status::{InProgress, Sending, Succeeded};
    let trail = vec![
        row(0, None, Sending, 1),
        row(5, Some(Sending), InProgress, 1),
        row(5, Some(Sending), Sending, 1),
        row(9, Some(InProgress), Succeeded, 1),
    ];
    let (chain, rest) = evidence::link(&trail);
    assert!(rest.is_empty(), "{rest:?}");
    let arrows: Vec<_> = chain.iter().map(|e| (e.from, e.to)).collect();
    assert_eq!(arrows[1], (Some(Sending), Sending));
    assert_eq!(arrows[2], (Some(Sending), InProgress));
}

/// An operator resolved the transaction while it waited for its retry: SUCCEEDED by
/// other means after the service answered CANCELLED is no disagreement; the same
/// record not written by the operator's resolve is one.
#[test]
fn a_resolved_transaction_is_no_disagreement() {
    use Status::{Scheduled, Succeeded};
    // Created, then the first retry cycle up to SCHEDULED, then resolved.
    let mut trail = trail(1, Succeeded);
    trail.truncate(3);
    trail.push(row(3, Some(Scheduled), Succeeded, 1));
    let mut r = rec(Succeeded, 1, None, 4);
    r.last_actor = domain::machine::Actor::Operator;
    r.mark = Some(domain::machine::Mark::Resolved);
    assert_eq!(evidence::check(Some(&r), &trail, &seen(&[C])), []);
    r.last_actor = domain::machine::Actor::ResponseHandler;
    assert_eq!(
        violations(&evidence::check(Some(&r), &trail, &seen(&[C]))),
        [V::Disagreement]
    );
}

#[test]
fn a_record_that_contradicts_its_status_is_found() {
    use domain::machine::Mark;
    let live = [
        rec(Status::InProgress, 1, None, 3),
        rec(Status::Scheduling, 1, Some(2), 3),
        rec(Status::Scheduled, 2, Some(2), 3),
        rec(Status::Sending, 1, Some(2), 3),
    ];
    let ended = [
        rec(Status::Succeeded, 2, None, 3),
        rec(Status::Failed, 3, None, 3),
    ];
    for r in live.iter().chain(&ended) {
        assert_eq!(inconsistency(r), None, "{r:?}");
    }
    let broken = |r: &TransactionRecord, f: fn(&mut TransactionRecord)| {
        let mut r = r.clone();
        f(&mut r);
        inconsistency(&r)
    };
    for r in &live[1..] {
        assert!(broken(r, |r| r.next_fire_at = None).is_some(), "{r:?}");
        assert!(broken(r, |r| r.next_attempt = Some(a(r.current_attempt.get() + 2))).is_some());
        assert!(broken(r, |r| r.mark = Some(Mark::Expired)).is_some());
    }
    assert!(broken(&live[0], |r| r.answer_due_at = None).is_some());
    assert!(broken(&live[0], |r| r.next_attempt = Some(a(2))).is_some());
    assert!(broken(&live[0], |r| r.reconcile = None).is_some());
    assert!(broken(&live[0], |r| r.mark = Some(Mark::TechnicalExhausted)).is_some());
    assert!(
        broken(&live[0], |r| r.counts[Counter::ProbeErrors] = 1).is_some(),
        "pauses past resends"
    );
    assert_eq!(broken(&live[0], |r| r.mark = Some(Mark::Probe)), None);
    assert!(broken(&ended[1], |r| r.failed = None).is_some());
    assert!(broken(&ended[1], |r| r.mark = Some(Mark::HeldOpen)).is_some());
    assert_eq!(broken(&ended[1], |r| r.mark = Some(Mark::Unanswered)), None);
    assert!(broken(&ended[0], |r| r.answer_due_at = Some(r.updated_at)).is_some());
    assert!(record_over_budget(&rec(Status::Scheduling, 3, Some(4), 3)));
    assert!(!record_over_budget(&live[1]));
}
