//! Properties of every decision over arbitrary records and messages.
//!
//! - A plan made from a known record (the record a failed condition hands back) never
//!   contains a write whose guard fails against that record as the plan's own earlier
//!   writes leave it: re-deciding can never loop by itself.
//! - Every write is an arrow of the state machine.
//! - Executed against a store holding any record, with no other writer, a run
//!   re-decides at most once and never gives up.
//! - From a well-formed record, every decision keeps it well-formed, never publishes
//!   or schedules an attempt beyond `max_attempts`, publishes exactly the pending
//!   attempt (attempt 1 for a start), and creates schedules only from the persisted
//!   instant.

use crate::world::*;
use domain::decide::{decide, Context, Disposition, Effect, Input, Known, Rejection, Run};
use domain::exec::execute;
use domain::ids::{MaxAttempts, ScheduleName, Timestamp, TransactionId};
use domain::machine::{transition, FailedKey, Mark, ReconcileKey, Status, TransactionRecord};
use domain::message::{Origin, Outcome, Payload, Request, Response, RetryEvent};
use domain::policy::{FixedRandom, PolicySet, RetryPolicy, SplitMix64};
use proptest::prelude::*;
use std::time::Duration;
use testkit::memory::{block_on_ready, MemoryQueue, MemoryScheduler, MemoryStore};
use testkit::oracle::{self, Violation, Writer};
use testkit::ports::AllPorts;

const MIN_MS: i64 = 60_000;

fn ctx() -> Context {
    Context::new(
        t0(),
        PolicySet::uniform(RetryPolicy::article_default()),
        4,
        Duration::from_secs(900),
    )
}

fn status() -> impl Strategy<Value = Status> {
    prop::sample::select(Status::ALL.to_vec())
}

fn outcome() -> impl Strategy<Value = Outcome> {
    prop::sample::select(vec![Outcome::Success, Outcome::Cancelled])
}

fn origin() -> impl Strategy<Value = Origin> {
    prop::sample::select(vec![
        Origin::RetryScheduler,
        Origin::Reconciler,
        Origin::Operator,
    ])
}

/// Any record at all, including ones no handler would write (next_attempt in the
/// wrong state, beyond the budget, fire time missing, ...).
fn any_record() -> impl Strategy<Value = TransactionRecord> {
    (
        status(),
        1u32..=6,
        prop::option::of(1u32..=8),
        1u32..=6,
        prop::option::of(-3000i64..3000),
        -120i64..=0,
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(
            |(status, current, next, max, fire, updated, named, keyed)| {
                let id = tx("TX-P");
                let mut r = record_at(&id, max, status, current, updated);
                r.next_attempt = next.map(a);
                r.next_fire_at = fire.map(|m| t0().plus_millis(m * MIN_MS));
                if named {
                    r.schedule_name = Some(ScheduleName::for_retry(&id, a(current + 1)));
                }
                if keyed {
                    r.reconcile =
                        ReconcileKey::derive(status, &id, 4, r.updated_at, r.next_fire_at);
                }
                r
            },
        )
}

/// A record of `id` started 200 minutes before t0 with at most `max` attempts, now
/// `status` at attempt `current`, last written `updated` minutes from t0.
fn record_at(
    id: &TransactionId,
    max: u32,
    status: Status,
    current: u32,
    updated: i64,
) -> TransactionRecord {
    let mut r = TransactionRecord::started(
        id.clone(),
        MaxAttempts::new(max).unwrap(),
        t0().plus_millis(-200 * MIN_MS),
    );
    r.status = status;
    r.current_attempt = a(current);
    r.updated_at = t0().plus_millis(updated * MIN_MS);
    r
}

/// A record some sequence of handler writes can produce: current <= max; in an
/// intermediate state next = current + 1 <= max with its fire time; the index key in
/// every non-terminal state; in IN_PROGRESS an answer deadline.
fn well_formed_record() -> impl Strategy<Value = TransactionRecord> {
    (status(), 1u32..=6, 0u32..6, -3000i64..3000, -120i64..=0).prop_map(
        |(status, max, seed, fire, updated)| {
            let id = tx("TX-W");
            let current = 1 + seed % max;
            let status = if status.is_intermediate() && current >= max {
                Status::InProgress
            } else {
                status
            };
            let mut r = record_at(&id, max, status, current, updated);
            if status.is_intermediate() {
                r.next_attempt = Some(a(current + 1));
                r.next_fire_at = Some(t0().plus_millis(fire * MIN_MS));
                r.schedule_name = Some(ScheduleName::for_retry(&id, a(current + 1)));
            }
            if status == Status::InProgress {
                r.answer_due_at = Some(t0().plus_millis(fire * MIN_MS));
            }
            r.reconcile = ReconcileKey::derive(status, &id, 4, r.updated_at, r.next_fire_at);
            r.failed = FailedKey::derive(status, &id, 4);
            // How an ended transaction ended, as its mark says.
            r.mark = match status {
                Status::Failed => [
                    None,
                    Some(Mark::TechnicalExhausted),
                    Some(Mark::Unanswered),
                    Some(Mark::Expired),
                ][(seed % 4) as usize],
                Status::Succeeded => [None, Some(Mark::Resolved)][(seed % 2) as usize],
                _ => None,
            };
            r
        },
    )
}

#[derive(Debug, Clone)]
enum Msg {
    Response(u32, Outcome),
    Retry(u32, Origin),
    Reconcile,
    Start(bool),
    Resolve,
    Replay(u32),
}

fn msg() -> impl Strategy<Value = Msg> {
    prop_oneof![
        3 => (1u32..=8, outcome()).prop_map(|(n, o)| Msg::Response(n, o)),
        3 => (1u32..=8, origin()).prop_map(|(m, o)| Msg::Retry(m, o)),
        1 => Just(Msg::Reconcile),
        1 => any::<bool>().prop_map(Msg::Start),
        1 => Just(Msg::Resolve),
        1 => (0u32..4).prop_map(Msg::Replay),
    ]
}

fn input(msg: &Msg, r: &TransactionRecord) -> (Input, Option<bool>) {
    let id = r.transaction_id.clone();
    match msg {
        Msg::Response(n, outcome) => (
            Input::Response(Response {
                transaction_id: id,
                attempt: a(*n),
                outcome: *outcome,
                reason: Some("NOT_AVAILABLE".into()),
                retry_after_seconds: None,
                round: None,
                execution: None,
            }),
            None,
        ),
        Msg::Retry(m, origin) => (
            Input::Retry(RetryEvent {
                transaction_id: id,
                origin: *origin,
                attempt: a(*m),
                round: None,
            }),
            None,
        ),
        Msg::Reconcile => (Input::Reconcile(r.clone()), None),
        Msg::Start(same) => (
            Input::Start {
                transaction_id: id,
                payload: payload(),
                max_attempts: MaxAttempts::new(3).unwrap(),
                correlation_id: None,
            },
            Some(*same),
        ),
        Msg::Resolve => (Input::Resolve(id), None),
        Msg::Replay(budget) => (
            Input::Replay {
                transaction_id: id,
                budget: *budget,
            },
            None,
        ),
    }
}

/// Simulates a plan against `start`: each write applied in turn when its guard holds.
/// `strict`: a failing guard is a property violation (plans made from a known
/// record); otherwise the simulation stops there (the real run would re-decide).
/// `check` sees every effect with the record as the plan's earlier writes left it.
fn simulate(
    plan: &[Effect],
    start: &TransactionRecord,
    strict: bool,
    mut check: impl FnMut(&Effect, &TransactionRecord) -> Result<(), TestCaseError>,
) -> Result<TransactionRecord, TestCaseError> {
    let mut state = start.clone();
    for e in plan {
        check(e, &state)?;
        match e {
            Effect::Write(w) => {
                for from in w.from().iter() {
                    prop_assert_eq!(transition(Some(from), w.event()), Ok(w.to()));
                }
                match w.apply(&state) {
                    Ok(next) => {
                        // Any record, well-formed or not: every change is an arrow (the
                        // budget is checked from well-formed records below).
                        let broken = oracle::change(Some(&state), w.event(), &next, Writer::Other);
                        prop_assert!(
                            !broken.contains(&Violation::IllegalTransition),
                            "{state:?} -> {next:?}"
                        );
                        state = next;
                    }
                    Err(_) if strict => {
                        return Err(TestCaseError::fail(format!(
                            "guard {:?} fails against {state:?}",
                            w.guard
                        )))
                    }
                    Err(_) => return Ok(state),
                }
            }
            // A create on an existing record is answered "already exists": re-decided.
            Effect::Create { .. } | Effect::Read(_) if !strict => return Ok(state),
            Effect::Create { .. } | Effect::Read(_) => {
                return Err(TestCaseError::fail(
                    "a plan made from a known record neither reads nor creates",
                ))
            }
            _ => {}
        }
    }
    Ok(state)
}

fn ends_with_one_terminal(plan: &[Effect]) -> bool {
    let terminals = plan.iter().filter(|e| e.is_terminal()).count();
    match plan.last() {
        Some(Effect::Read(_)) => terminals == 0 && plan.len() == 1,
        Some(last) => terminals == 1 && last.is_terminal(),
        None => false,
    }
}

proptest! {
    #![proptest_config(crate::cases(2000))]

    /// The plan made from the record a failed condition hands back never fails its
    /// own conditions against that record: re-deciding cannot loop by itself.
    #[test]
    fn plans_from_a_known_record_hold_against_it(
        r in any_record(),
        m in msg(),
        u in 0.0f64..1.0,
    ) {
        let (input, same) = input(&m, &r);
        let plan = decide(&input, Known::Record(&r), same, &ctx(), &mut FixedRandom(u));
        prop_assert!(ends_with_one_terminal(&plan), "{plan:?}");
        simulate(&plan, &r, true, |_, _| Ok(()))?;
    }

    /// Optimistic (unread) plans too: every write is an arrow, every plan ends once.
    #[test]
    fn unread_plans_are_arrows(r in any_record(), m in msg(), u in 0.0f64..1.0) {
        let (input, same) = input(&m, &r);
        for known in [Known::Unread, Known::Missing, Known::Record(&r)] {
            let plan = decide(&input, known, same, &ctx(), &mut FixedRandom(u));
            prop_assert!(ends_with_one_terminal(&plan), "{plan:?}");
            prop_assert!(plan.iter().all(|e| domain::exec::performs(&input, e)), "{plan:?}");
            simulate(&plan, &r, false, |_, _| Ok(()))?;
        }
    }

    /// Executed through the executor against a store holding any record and no other
    /// writer, a run re-decides at most once and never gives up.
    #[test]
    fn uncontended_runs_never_loop(r in any_record(), m in msg(), seed in any::<u64>()) {
        let store = MemoryStore::new();
        let stored_payload = if matches!(m, Msg::Start(false)) {
            Payload::from_json(r#"{"other":true}"#).unwrap()
        } else {
            payload()
        };
        store.put(r.clone(), Some(stored_payload));
        let (scheduler, requests, retries) =
            (MemoryScheduler::new(), MemoryQueue::<Request>::new(), MemoryQueue::<RetryEvent>::new());
        let ports = AllPorts { store: &store, scheduler: &scheduler, requests: &requests, retries: &retries, notes: &store };
        let ctx = ctx();
        let mut rng = SplitMix64::new(seed);
        let (input, _) = input(&m, &r);
        let mut run = Run::new(input, Known::Unread, &ctx, &mut rng);
        let d = block_on_ready(execute(&mut run, &ports, &ctx, &mut rng, &mut |_| true))
            .unwrap()
            .unwrap();
        prop_assert!(run.redecisions() <= 1, "{} re-decisions", run.redecisions());
        prop_assert!(
            !matches!(d, Disposition::Reject(Rejection::TooManyRedecisions { .. })),
            "{d:?}"
        );
        prop_assert!(store.calls().failed_conditions <= 1);
    }

    /// From a well-formed record, a decision (from the record, or optimistic) keeps
    /// it well-formed and never goes past max_attempts; it publishes exactly the
    /// pending attempt (or attempt 1 of a start), and schedules only the persisted
    /// instant of the pending attempt.
    #[test]
    fn well_formed_records_stay_within_budget(
        r in well_formed_record(),
        m in msg(),
        u in 0.0f64..1.0,
    ) {
        prop_assert!(well_formed(&r).is_ok(), "{:?}", well_formed(&r));
        let (input, same) = input(&m, &r);
        for known in [Known::Record(&r), Known::Unread] {
            let strict = matches!(known, Known::Record(_));
            let plan = decide(&input, known, same, &ctx(), &mut FixedRandom(u));
            let end = simulate(&plan, &r, strict, |e, s| {
                let max = s.max_attempts.get();
                match e {
                    Effect::PublishRequest(h) => {
                        let n = h.attempt;
                        prop_assert_eq!(oracle::publish(n, Some(s)), None, "publishes {} > max {}", n, max);
                        let first = n.get() == 1 && s.current_attempt.get() == 1
                            && s.status == Status::InProgress;
                        let pending = s.status == Status::Sending && s.next_attempt == Some(n);
                        // The reconciler republishes the request still unanswered.
                        let unanswered = matches!(input, Input::Reconcile(_))
                            && s.status == Status::InProgress
                            && s.current_attempt == n;
                        prop_assert!(first || pending || unanswered, "publishes {n} from {s:?}");
                    }
                    Effect::CreateSchedule(spec) => {
                        prop_assert_eq!(s.status, Status::Scheduling);
                        prop_assert_eq!(Some(spec.event.attempt), s.next_attempt);
                        prop_assert!(!oracle::over_budget(spec.event.attempt.get(), max));
                        prop_assert_eq!(Some(spec.fire_at), s.next_fire_at, "persisted first");
                        let broken = oracle::Instants::new().created((), Some(s), spec);
                        prop_assert!(broken.is_empty(), "{broken:?}");
                    }
                    Effect::PublishRetry(ev) => {
                        prop_assert_eq!(Some(ev.attempt), s.next_attempt);
                        prop_assert!(!oracle::over_budget(ev.attempt.get(), max));
                    }
                    _ => {}
                }
                Ok(())
            })?;
            prop_assert!(well_formed(&end).is_ok(), "{:?}", well_formed(&end));
        }
    }
}

/// The fire time a CANCELLED response persists is the policy's, from the decision's
/// now, within the bounds of the attempt that just failed.
#[test]
fn scheduling_persists_a_fire_time_within_bounds() {
    let policy = RetryPolicy::article_default();
    for n in 1..=5u32 {
        for u in [0.0, 0.25, 0.5, 0.999_999] {
            let resp = Response {
                transaction_id: tx("TX-F"),
                attempt: a(n),
                outcome: Outcome::Cancelled,
                reason: None,
                retry_after_seconds: None,
                round: None,
                execution: None,
            };
            let plan =
                domain::decide::decide_response(Known::Unread, &resp, &ctx(), &mut FixedRandom(u));
            let Effect::Write(w) = &plan[0] else {
                panic!("{plan:?}")
            };
            let domain::machine::Change::Set(fire) = w.set.next_fire_at else {
                panic!("{w:?}")
            };
            let (lo, hi) = policy.bounds(a(n));
            let wait = Duration::from_millis(u64::try_from(fire.millis() - t0().millis()).unwrap());
            assert!(
                wait >= lo && wait < hi + Duration::from_secs(1),
                "n={n} u={u}: {wait:?}"
            );
            assert_eq!(fire, Timestamp::from_millis(fire.millis() / 1000 * 1000));
        }
    }
}
