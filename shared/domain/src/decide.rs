//! Decisions as plans, and the step machine that executes them.
//!
//! Each handler's rules are a pure function from (what is known of the record, the
//! message, the context, a random source) to a [`Plan`]: the ordered [`Effect`]s to
//! run, ending with exactly one of acknowledge, drop-with-reason or reject.
//!
//! Happy paths never read the state item: the first plan is made on an *unread*
//! record and its conditional writes say what must be true. When a write's condition
//! fails, the store hands back the current record and the [`Run`] decides again from
//! it. This is how "someone already did the work" becomes success, and how a late or
//! duplicated message becomes a drop, without a single extra read.
//!
//! Executors (Lambda handlers, the simulator, the model checker, `retryctl`) only
//! perform effects and feed back what they observed; they never restate a rule.

use crate::ids::{Attempt, MaxAttempts, ScheduleName, Timestamp, TransactionId};
use crate::machine::{
    transition, Actor, BudgetGuard, Change, Changes, Event, Guard, ReconcileKey, Status,
    TransactionRecord, Write,
};
use crate::message::{Origin, Outcome, Payload, Response, RetryEvent};
use crate::policy::{PolicySet, RandomSource};
use serde::Serialize;
use std::collections::VecDeque;
use std::time::Duration;

/// Known-bad designs from the article, kept switchable so the model checker and the
/// simulator can prove they would catch them. Production always uses
/// [`Flaws::NONE`]; nothing outside the verification crate sets any of these.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Flaws {
    /// B accepts only SCHEDULED, dropping an event that arrives while SCHEDULING.
    pub retry_rejects_scheduling: bool,
    /// A computes the fire time when creating the schedule (create first, persist after).
    pub fire_time_at_create: bool,
    /// B drops a redelivery found in SENDING instead of resuming it.
    pub retry_discards_sending: bool,
    /// The budget counts retries from zero: one attempt too many.
    pub attempts_from_zero: bool,
}

impl Flaws {
    pub const NONE: Flaws = Flaws {
        retry_rejects_scheduling: false,
        fire_time_at_create: false,
        retry_discards_sending: false,
        attempts_from_zero: false,
    };
}

/// Everything a decision needs besides the record and the message.
#[derive(Debug, Clone)]
pub struct Context {
    pub now: Timestamp,
    pub policies: PolicySet,
    /// Write shards of the reconciler index.
    pub shards: u16,
    /// How long an intermediate state may last before the reconciler acts.
    pub reconcile_threshold: Duration,
    pub flaws: Flaws,
}

impl Context {
    pub fn new(
        now: Timestamp,
        policies: PolicySet,
        shards: u16,
        reconcile_threshold: Duration,
    ) -> Self {
        Self {
            now,
            policies,
            shards: shards.max(1),
            reconcile_threshold,
            flaws: Flaws::NONE,
        }
    }

    fn reconcile_key(
        &self,
        status: Status,
        id: &TransactionId,
        fire: Option<Timestamp>,
    ) -> Change<ReconcileKey> {
        match ReconcileKey::derive(status, id, self.shards, self.now, fire) {
            Some(k) => Change::Set(k),
            None => Change::Clear,
        }
    }

    fn threshold_ms(&self) -> i64 {
        i64::try_from(self.reconcile_threshold.as_millis()).unwrap_or(i64::MAX)
    }
}

/// What is known of the stored record when deciding.
#[derive(Debug, Clone, Copy)]
pub enum Known<'a> {
    /// Not read: decide optimistically, the writes' conditions check.
    Unread,
    /// Read (or handed back by a failed condition): no such transaction.
    Missing,
    Record(&'a TransactionRecord),
}

/// What the external service will receive: the payload is read from the store by the
/// executor, so every attempt carries the bytes the transaction started with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RequestHeader {
    pub transaction_id: TransactionId,
    pub attempt: Attempt,
}

/// A one-time schedule to create: fires `event` on the retry queue at `fire_at`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ScheduleSpec {
    pub name: ScheduleName,
    pub fire_at: Timestamp,
    pub event: RetryEvent,
}

/// A business alert: attempts exhausted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Alert {
    pub transaction_id: TransactionId,
    pub attempts: Attempt,
    pub last_reason: Option<String>,
}

/// One thing to do.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub enum Effect {
    /// Read the record (only where no write can be tried blind).
    Read(TransactionId),
    /// Conditional create of a new transaction with its payload.
    Create {
        record: TransactionRecord,
        payload: Payload,
    },
    /// One conditional write (an arrow of the state machine).
    Write(Write),
    CreateSchedule(ScheduleSpec),
    DeleteSchedule(ScheduleName),
    PublishRequest(RequestHeader),
    PublishRetry(RetryEvent),
    Alert(Alert),
    /// Terminal: done, the message can be deleted.
    Ack(Ack),
    /// Terminal: nothing to do for this message (late, stale, duplicate); delete it.
    Drop(DropReason),
    /// Terminal: the message can never succeed; keep it for a human (DLQ).
    Reject(Rejection),
}

impl Effect {
    pub fn is_terminal(&self) -> bool {
        matches!(self, Effect::Ack(_) | Effect::Drop(_) | Effect::Reject(_))
    }

    /// A short name for logs, metrics and crash-point labels.
    pub fn label(&self) -> &'static str {
        match self {
            Effect::Read(_) => "read",
            Effect::Create { .. } => "create",
            Effect::Write(_) => "write",
            Effect::CreateSchedule(_) => "create-schedule",
            Effect::DeleteSchedule(_) => "delete-schedule",
            Effect::PublishRequest(_) => "publish-request",
            Effect::PublishRetry(_) => "publish-retry",
            Effect::Alert(_) => "alert",
            Effect::Ack(_) => "ack",
            Effect::Drop(_) => "drop",
            Effect::Reject(_) => "reject",
        }
    }
}

/// Why a message was acknowledged: the work it asked for is done.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Ack {
    Started,
    AlreadyStarted,
    Succeeded,
    Failed,
    Scheduled,
    /// SCHEDULED / SENDING / later found: another execution did the work.
    AlreadyHandled,
    Published,
    /// A redelivery found SENDING and finished the publish.
    Resumed,
    ReconcilerScheduled,
    ReconcilerRequeued,
    Resolved,
    AlreadyResolved,
    Replayed,
}

/// Why a message changed nothing.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(tag = "reason", rename_all = "kebab-case")]
pub enum DropReason {
    /// A response for an attempt that is no longer the current one.
    LateResponse { attempt: Attempt, current: Attempt },
    /// A response whose outcome contradicts what was already decided for that attempt.
    ConflictingOutcome { outcome: Outcome, status: Status },
    /// A redelivered response for work already finished.
    DuplicateResponse { status: Status },
    /// A retry event for an attempt that is not the pending one.
    StaleRetry {
        attempt: Attempt,
        pending: Option<Attempt>,
    },
    /// A retry event for an attempt already published.
    DuplicateRetry { attempt: Attempt, status: Status },
    /// The reconciler found the record no longer stuck.
    NotStuck { status: Status },
}

impl DropReason {
    pub fn label(&self) -> &'static str {
        match self {
            DropReason::LateResponse { .. } => "late-response",
            DropReason::ConflictingOutcome { .. } => "conflicting-outcome",
            DropReason::DuplicateResponse { .. } => "duplicate-response",
            DropReason::StaleRetry { .. } => "stale-retry",
            DropReason::DuplicateRetry { .. } => "duplicate-retry",
            DropReason::NotStuck { .. } => "not-stuck",
        }
    }
}

/// Why a message can never succeed as it is.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(tag = "reason", rename_all = "kebab-case")]
pub enum Rejection {
    UnknownTransaction {
        transaction_id: TransactionId,
    },
    /// `start` repeated with a payload different from the stored one.
    PayloadMismatch {
        transaction_id: TransactionId,
    },
    /// `resolve` on a transaction that is not waiting for a retry.
    NotResolvable {
        transaction_id: TransactionId,
        status: Status,
    },
    /// `replay` on a transaction that is not FAILED.
    NotReplayable {
        transaction_id: TransactionId,
        status: Status,
    },
    /// The run kept meeting a different state than its writes expected.
    TooManyRedecisions {
        transaction_id: TransactionId,
    },
}

impl Rejection {
    pub fn label(&self) -> &'static str {
        match self {
            Rejection::UnknownTransaction { .. } => "unknown-transaction",
            Rejection::PayloadMismatch { .. } => "payload-mismatch",
            Rejection::NotResolvable { .. } => "not-resolvable",
            Rejection::NotReplayable { .. } => "not-replayable",
            Rejection::TooManyRedecisions { .. } => "too-many-redecisions",
        }
    }
}

impl std::fmt::Display for Rejection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Rejection::UnknownTransaction { transaction_id } => {
                write!(f, "unknown transaction `{transaction_id}`: no such item in the state table")
            }
            Rejection::PayloadMismatch { transaction_id } => write!(
                f,
                "transaction `{transaction_id}` already exists with a different payload; nothing was published"
            ),
            Rejection::NotResolvable { transaction_id, status } => write!(
                f,
                "transaction `{transaction_id}` is {status}: only SCHEDULING or SCHEDULED can be resolved by other means"
            ),
            Rejection::NotReplayable { transaction_id, status: Status::Failed } => write!(
                f,
                "transaction `{transaction_id}` is FAILED at the highest max_attempts accepted ({}): no attempt is left to replay",
                crate::ids::MAX_ATTEMPTS_LIMIT
            ),
            Rejection::NotReplayable { transaction_id, status } => write!(
                f,
                "transaction `{transaction_id}` is {status}: only FAILED transactions can be replayed"
            ),
            Rejection::TooManyRedecisions { transaction_id } => write!(
                f,
                "transaction `{transaction_id}` kept changing under this message; giving up for now"
            ),
        }
    }
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum Disposition {
    Ack(Ack),
    Drop(DropReason),
    Reject(Rejection),
}

/// The ordered effects of one decision.
pub type Plan = Vec<Effect>;

/// What performing an effect observed.
#[derive(Debug, Clone, PartialEq)]
pub enum Observed {
    /// A read: the record, or `None` when there is no such transaction.
    Record(Option<TransactionRecord>),
    Created,
    /// The transaction already existed; `same_payload` compares the stored payload.
    AlreadyExists {
        record: TransactionRecord,
        same_payload: bool,
    },
    /// The write applied; the record as written.
    Written(TransactionRecord),
    /// The condition failed; the current record (`None`: no such transaction).
    ConditionFailed(Option<TransactionRecord>),
    ScheduleCreated,
    ScheduleAlreadyExists,
    ScheduleDeleted,
    ScheduleNotFound,
    Published,
    Alerted,
}

/// The input a run decides on.
#[derive(Debug, Clone, PartialEq)]
pub enum Input {
    Response(Response),
    Retry(RetryEvent),
    /// A record the reconciler's query returned.
    Reconcile(TransactionRecord),
    Start {
        transaction_id: TransactionId,
        payload: Payload,
        max_attempts: MaxAttempts,
    },
    Resolve(TransactionId),
    Replay {
        transaction_id: TransactionId,
        budget: u32,
    },
}

impl Input {
    pub fn transaction_id(&self) -> &TransactionId {
        match self {
            Input::Response(r) => &r.transaction_id,
            Input::Retry(e) => &e.transaction_id,
            Input::Reconcile(r) => &r.transaction_id,
            Input::Start { transaction_id, .. }
            | Input::Resolve(transaction_id)
            | Input::Replay { transaction_id, .. } => transaction_id,
        }
    }
}

// ---------------------------------------------------------------------------
// Decisions
// ---------------------------------------------------------------------------

fn changes(ctx: &Context, status: Status, actor: Actor) -> Changes {
    Changes {
        status,
        current_attempt: None,
        next_attempt: Change::Keep,
        max_attempts: None,
        next_fire_at: Change::Keep,
        schedule_name: Change::Keep,
        last_outcome: None,
        last_reason: Change::Keep,
        updated_at: ctx.now,
        actor,
        origin: Change::Keep,
        reconcile: Change::Clear,
    }
}

fn write(
    id: &TransactionId,
    from: Option<Status>,
    event: Event,
    guard: Guard,
    set: Changes,
) -> Effect {
    debug_assert!(
        guard
            .statuses
            .iter()
            .all(|s| transition(Some(*s), event) == Ok(set.status))
            || from.is_none(),
        "every write is an arrow of the state machine"
    );
    Effect::Write(Write {
        transaction_id: id.clone(),
        event,
        guard,
        set,
    })
}

fn guard(statuses: &[Status]) -> Guard {
    Guard {
        statuses: statuses.to_vec(),
        current_attempt: None,
        next_attempt: None,
        budget: None,
    }
}

/// The response handler (A), for a response `(id, n, outcome)`.
pub fn decide_response(
    known: Known<'_>,
    resp: &Response,
    ctx: &Context,
    rng: &mut dyn RandomSource,
) -> Plan {
    let id = &resp.transaction_id;
    let n = resp.attempt;
    let rec = match known {
        Known::Missing => {
            return vec![Effect::Reject(Rejection::UnknownTransaction {
                transaction_id: id.clone(),
            })]
        }
        Known::Unread => None,
        Known::Record(r) => Some(r),
    };
    if let Some(r) = rec {
        // The response for the attempt B is publishing (SENDING, next_attempt = n): it
        // proves request n left, so complete B's last arrow (SENDING → IN_PROGRESS(n))
        // and then handle the response. Dropping it as late would leave the
        // transaction IN_PROGRESS(n) waiting for a response already consumed (B's
        // final write comes after its publish, and a crash there leaves SENDING).
        if r.status == Status::Sending && r.next_attempt == Some(n) && r.current_attempt != n {
            let published = in_progress_write(id, n, ctx, Actor::ResponseHandler);
            if let Ok(after) = published.apply(r) {
                let mut plan = vec![Effect::Write(published)];
                plan.extend(decide_response(Known::Record(&after), resp, ctx, rng));
                return plan;
            }
        }
        // Rule 1: a response for another attempt is late: acknowledge, change nothing.
        if r.current_attempt != n {
            return vec![Effect::Drop(DropReason::LateResponse {
                attempt: n,
                current: r.current_attempt,
            })];
        }
    }
    let status = rec.map(|r| r.status);
    match (status, resp.outcome) {
        // Rule 2: SUCCESS and IN_PROGRESS → SUCCEEDED.
        (None | Some(Status::InProgress), Outcome::Success) => {
            let mut set = changes(ctx, Status::Succeeded, Actor::ResponseHandler);
            set.last_outcome = Some(Outcome::Success);
            set.last_reason = reason_change(resp);
            vec![
                write(
                    id,
                    Some(Status::InProgress),
                    Event::ResponseSuccess,
                    Guard {
                        current_attempt: Some(n),
                        ..guard(&[Status::InProgress])
                    },
                    set,
                ),
                Effect::Ack(Ack::Succeeded),
            ]
        }
        // Rule 3: CANCELLED with the budget spent → FAILED + business alert.
        (Some(Status::InProgress), Outcome::Cancelled) if budget_spent(rec, n, ctx) => {
            fail(id, n, resp, ctx)
        }
        // Rule 4: CANCELLED with attempts left: persist the instant first, then create
        // the schedule from it, then confirm.
        (None | Some(Status::InProgress), Outcome::Cancelled) => {
            schedule_retry(id, n, resp, ctx, rng)
        }
        // Rule 5: redelivery found SCHEDULING: reuse the stored instant.
        (Some(Status::Scheduling), Outcome::Cancelled) => match rec {
            Some(r) => resume_scheduling(r, ctx, Actor::ResponseHandler, Ack::Scheduled),
            None => vec![Effect::Ack(Ack::AlreadyHandled)],
        },
        // Someone did the work already.
        (Some(Status::Scheduled | Status::Sending), Outcome::Cancelled) => {
            vec![Effect::Ack(Ack::AlreadyHandled)]
        }
        (Some(Status::Succeeded), Outcome::Success) => {
            vec![Effect::Drop(DropReason::DuplicateResponse {
                status: Status::Succeeded,
            })]
        }
        // The redelivery of the response that exhausted the budget: the alert may not
        // have gone out before a crash, so raise it again (alerts are at-least-once).
        (Some(Status::Failed), Outcome::Cancelled) => {
            let attempts = rec.map(|r| r.current_attempt).unwrap_or(n);
            vec![
                Effect::Alert(Alert {
                    transaction_id: id.clone(),
                    attempts,
                    last_reason: resp.reason.clone(),
                }),
                Effect::Ack(Ack::Failed),
            ]
        }
        (Some(status), outcome) => vec![Effect::Drop(DropReason::ConflictingOutcome {
            outcome,
            status,
        })],
    }
}

fn reason_change(resp: &Response) -> Change<String> {
    match &resp.reason {
        Some(r) => Change::Set(r.clone()),
        None => Change::Clear,
    }
}

fn budget_spent(rec: Option<&TransactionRecord>, n: Attempt, ctx: &Context) -> bool {
    rec.is_some_and(|r| {
        if ctx.flaws.attempts_from_zero {
            n.get() > r.max_attempts.get()
        } else {
            r.max_attempts.exhausted_by(n)
        }
    })
}

fn fail(id: &TransactionId, n: Attempt, resp: &Response, ctx: &Context) -> Plan {
    let mut set = changes(ctx, Status::Failed, Actor::ResponseHandler);
    set.last_outcome = Some(Outcome::Cancelled);
    set.last_reason = reason_change(resp);
    let budget = if ctx.flaws.attempts_from_zero {
        None
    } else {
        Some(BudgetGuard::Exhausted)
    };
    vec![
        write(
            id,
            Some(Status::InProgress),
            Event::ResponseCancelledExhausted,
            Guard {
                current_attempt: Some(n),
                budget,
                ..guard(&[Status::InProgress])
            },
            set,
        ),
        Effect::Alert(Alert {
            transaction_id: id.clone(),
            attempts: n,
            last_reason: resp.reason.clone(),
        }),
        Effect::Ack(Ack::Failed),
    ]
}

fn schedule_retry(
    id: &TransactionId,
    n: Attempt,
    resp: &Response,
    ctx: &Context,
    rng: &mut dyn RandomSource,
) -> Plan {
    let next = n.next();
    let fire_at = ctx
        .policies
        .for_reason(resp.reason.as_deref())
        .fire_at(ctx.now, n, rng);
    let name = ScheduleName::for_retry(id, next);
    let mut set = changes(ctx, Status::Scheduling, Actor::ResponseHandler);
    set.next_attempt = Change::Set(next);
    set.next_fire_at = Change::Set(fire_at);
    set.schedule_name = Change::Set(name.clone());
    set.last_outcome = Some(Outcome::Cancelled);
    set.last_reason = reason_change(resp);
    set.origin = Change::Clear;
    set.reconcile = ctx.reconcile_key(Status::Scheduling, id, Some(fire_at));
    // A write guarded by `max_attempts > n`: when the budget is spent the condition
    // fails, hands back the record, and the re-decision takes rule 3.
    let budget = if ctx.flaws.attempts_from_zero {
        None
    } else {
        Some(BudgetGuard::Remaining)
    };
    let to_scheduling = write(
        id,
        Some(Status::InProgress),
        Event::ResponseCancelledRetry,
        Guard {
            current_attempt: Some(n),
            budget,
            ..guard(&[Status::InProgress])
        },
        set,
    );
    let create = Effect::CreateSchedule(ScheduleSpec {
        name,
        fire_at,
        event: RetryEvent {
            transaction_id: id.clone(),
            origin: Origin::RetryScheduler,
            attempt: next,
        },
    });
    let confirm = confirm_scheduled(id, next, ctx, Actor::ResponseHandler);
    if ctx.flaws.fire_time_at_create {
        // Known-bad: the schedule is created before the instant is persisted.
        vec![create, to_scheduling, confirm, Effect::Ack(Ack::Scheduled)]
    } else {
        vec![to_scheduling, create, confirm, Effect::Ack(Ack::Scheduled)]
    }
}

fn confirm_scheduled(id: &TransactionId, next: Attempt, ctx: &Context, actor: Actor) -> Effect {
    let mut set = changes(ctx, Status::Scheduled, actor);
    // The cycle's index key was set with SCHEDULING and stays (no index write).
    set.reconcile = Change::Keep;
    write(
        id,
        Some(Status::Scheduling),
        Event::ScheduleConfirmed,
        Guard {
            next_attempt: Some(next),
            ..guard(&[Status::Scheduling])
        },
        set,
    )
}

/// SCHEDULING found: create the schedule from the **stored** instant, then confirm.
fn resume_scheduling(r: &TransactionRecord, ctx: &Context, actor: Actor, ack: Ack) -> Plan {
    let (Some(next), Some(fire_at)) = (r.next_attempt, r.next_fire_at) else {
        // A SCHEDULING record always carries both; without them there is nothing to
        // schedule from, and the reconciler will report it.
        return vec![Effect::Ack(Ack::AlreadyHandled)];
    };
    let id = &r.transaction_id;
    let name = r
        .schedule_name
        .clone()
        .unwrap_or_else(|| ScheduleName::for_retry(id, next));
    vec![
        Effect::CreateSchedule(ScheduleSpec {
            name,
            fire_at,
            event: RetryEvent {
                transaction_id: id.clone(),
                origin: Origin::RetryScheduler,
                attempt: next,
            },
        }),
        confirm_scheduled(id, next, ctx, actor),
        Effect::Ack(ack),
    ]
}

/// The retry handler (B), for a retry event `(id, m)`.
pub fn decide_retry(known: Known<'_>, ev: &RetryEvent, ctx: &Context) -> Plan {
    let id = &ev.transaction_id;
    let m = ev.attempt;
    let accept_from: &[Status] = if ctx.flaws.retry_rejects_scheduling {
        &[Status::Scheduled]
    } else {
        &[Status::Scheduling, Status::Scheduled]
    };
    match known {
        Known::Missing => vec![Effect::Reject(Rejection::UnknownTransaction {
            transaction_id: id.clone(),
        })],
        Known::Unread => send(id, m, ev.origin, accept_from, ctx, Ack::Published),
        Known::Record(r) => {
            // Rule 1: an event for another attempt than the pending one is stale.
            if r.next_attempt != Some(m) {
                return if r.current_attempt >= m {
                    vec![Effect::Drop(DropReason::DuplicateRetry {
                        attempt: m,
                        status: r.status,
                    })]
                } else {
                    vec![Effect::Drop(DropReason::StaleRetry {
                        attempt: m,
                        pending: r.next_attempt,
                    })]
                };
            }
            match r.status {
                s if accept_from.contains(&s) => {
                    send(id, m, ev.origin, accept_from, ctx, Ack::Published)
                }
                // SENDING with next_attempt = m: resume (publish again, same key).
                Status::Sending if !ctx.flaws.retry_discards_sending => vec![
                    Effect::PublishRequest(RequestHeader {
                        transaction_id: id.clone(),
                        attempt: m,
                    }),
                    to_in_progress(id, m, ctx),
                    Effect::Ack(Ack::Resumed),
                ],
                status => vec![Effect::Drop(DropReason::DuplicateRetry {
                    attempt: m,
                    status,
                })],
            }
        }
    }
}

fn send(
    id: &TransactionId,
    m: Attempt,
    origin: Origin,
    accept_from: &[Status],
    ctx: &Context,
    ack: Ack,
) -> Plan {
    let mut set = changes(ctx, Status::Sending, Actor::RetryHandler);
    set.origin = Change::Set(origin);
    // Entered only from SCHEDULING, SCHEDULED or SENDING: the cycle's index key is
    // already there and stays (no index write).
    set.reconcile = Change::Keep;
    vec![
        write(
            id,
            None,
            Event::RetryEventAccepted,
            Guard {
                next_attempt: Some(m),
                ..guard(accept_from)
            },
            set,
        ),
        Effect::PublishRequest(RequestHeader {
            transaction_id: id.clone(),
            attempt: m,
        }),
        to_in_progress(id, m, ctx),
        Effect::Ack(ack),
    ]
}

fn to_in_progress(id: &TransactionId, m: Attempt, ctx: &Context) -> Effect {
    Effect::Write(in_progress_write(id, m, ctx, Actor::RetryHandler))
}

/// SENDING → IN_PROGRESS(m): request m left; `current_attempt = m`, next cleared.
fn in_progress_write(id: &TransactionId, m: Attempt, ctx: &Context, actor: Actor) -> Write {
    let mut set = changes(ctx, Status::InProgress, actor);
    set.current_attempt = Some(m);
    set.next_attempt = Change::Clear;
    set.next_fire_at = Change::Clear;
    Write {
        transaction_id: id.clone(),
        event: Event::RequestPublished,
        guard: Guard {
            next_attempt: Some(m),
            ..guard(&[Status::Sending])
        },
        set,
    }
}

/// True when the reconciler should act on this record now.
pub fn is_stuck(r: &TransactionRecord, ctx: &Context) -> bool {
    let threshold = ctx.threshold_ms();
    let since = match r.status {
        Status::Scheduling | Status::Sending => r.updated_at,
        Status::Scheduled => r.next_fire_at.unwrap_or(r.updated_at),
        _ => return false,
    };
    since.plus_millis(threshold) < ctx.now
}

/// The reconciler, for a record its query returned.
pub fn decide_reconcile(r: &TransactionRecord, ctx: &Context) -> Plan {
    if !is_stuck(r, ctx) {
        return vec![Effect::Drop(DropReason::NotStuck { status: r.status })];
    }
    let Some(next) = r.next_attempt else {
        return vec![Effect::Drop(DropReason::NotStuck { status: r.status })];
    };
    let requeue = || {
        vec![
            Effect::PublishRetry(RetryEvent {
                transaction_id: r.transaction_id.clone(),
                origin: Origin::Reconciler,
                attempt: next,
            }),
            Effect::Ack(Ack::ReconcilerRequeued),
        ]
    };
    match r.status {
        // SCHEDULING: create the schedule from the stored instant; if that instant has
        // already passed, a schedule would be pointless: put the event on the queue
        // (B accepts SCHEDULING).
        Status::Scheduling => match r.next_fire_at {
            Some(fire) if fire > ctx.now => {
                resume_scheduling(r, ctx, Actor::Reconciler, Ack::ReconcilerScheduled)
            }
            _ => requeue(),
        },
        // SCHEDULED long past its fire time, or SENDING: put the retry event back so B
        // resumes through its usual idempotent path.
        Status::Scheduled | Status::Sending => requeue(),
        status => vec![Effect::Drop(DropReason::NotStuck { status })],
    }
}

/// "Start a transaction": conditional create of IN_PROGRESS attempt 1 with its
/// payload, then publish attempt 1 (key `<id>#1`). Repeating it is harmless and never
/// publishes a different payload.
pub fn decide_start(
    known: Known<'_>,
    payload_matches: Option<bool>,
    id: &TransactionId,
    payload: &Payload,
    max_attempts: MaxAttempts,
    ctx: &Context,
) -> Plan {
    match known {
        Known::Unread | Known::Missing => vec![
            Effect::Create {
                record: TransactionRecord::started(id.clone(), max_attempts, ctx.now),
                payload: payload.clone(),
            },
            Effect::PublishRequest(RequestHeader {
                transaction_id: id.clone(),
                attempt: Attempt::FIRST,
            }),
            Effect::Ack(Ack::Started),
        ],
        Known::Record(_) if payload_matches == Some(false) => {
            vec![Effect::Reject(Rejection::PayloadMismatch {
                transaction_id: id.clone(),
            })]
        }
        // Still waiting on attempt 1: publishing again is harmless (same key).
        Known::Record(r)
            if r.status == Status::InProgress && r.current_attempt == Attempt::FIRST =>
        {
            vec![
                Effect::PublishRequest(RequestHeader {
                    transaction_id: id.clone(),
                    attempt: Attempt::FIRST,
                }),
                Effect::Ack(Ack::AlreadyStarted),
            ]
        }
        Known::Record(_) => vec![Effect::Ack(Ack::AlreadyStarted)],
    }
}

/// "Resolved by other means": SCHEDULING or SCHEDULED → SUCCEEDED, then delete the
/// schedule (not found is fine).
pub fn decide_resolve(known: Known<'_>, id: &TransactionId, ctx: &Context) -> Plan {
    match known {
        Known::Unread => vec![Effect::Read(id.clone())],
        Known::Missing => vec![Effect::Reject(Rejection::UnknownTransaction {
            transaction_id: id.clone(),
        })],
        Known::Record(r) => match r.status {
            Status::Scheduling | Status::Scheduled => {
                let mut set = changes(ctx, Status::Succeeded, Actor::Operator);
                set.last_reason = Change::Set("RESOLVED_BY_OTHER_MEANS".into());
                // next_attempt is absent outside SCHEDULING/SCHEDULED/SENDING (DESIGN
                // glossary); the fire time goes with it. The schedule name stays: it
                // names the schedule deleted below; earlier audit rows keep both values.
                set.next_attempt = Change::Clear;
                set.next_fire_at = Change::Clear;
                let mut plan = vec![write(
                    id,
                    Some(r.status),
                    Event::ResolvedElsewhere,
                    Guard {
                        current_attempt: Some(r.current_attempt),
                        next_attempt: r.next_attempt,
                        ..guard(&[r.status])
                    },
                    set,
                )];
                if let Some(name) = &r.schedule_name {
                    plan.push(Effect::DeleteSchedule(name.clone()));
                }
                plan.push(Effect::Ack(Ack::Resolved));
                plan
            }
            Status::Succeeded => vec![Effect::Ack(Ack::AlreadyResolved)],
            status => vec![Effect::Reject(Rejection::NotResolvable {
                transaction_id: id.clone(),
                status,
            })],
        },
    }
}

/// Operator replay: reopen a FAILED transaction with `budget` more attempts. The
/// record goes to SCHEDULING with the next attempt due now, and a retry event with
/// origin OPERATOR goes on the retry queue (if that publish is lost, the reconciler
/// finds the SCHEDULING record and requeues it).
pub fn decide_replay(known: Known<'_>, id: &TransactionId, budget: u32, ctx: &Context) -> Plan {
    match known {
        Known::Unread => vec![Effect::Read(id.clone())],
        Known::Missing => vec![Effect::Reject(Rejection::UnknownTransaction {
            transaction_id: id.clone(),
        })],
        Known::Record(r) if r.status == Status::Failed => {
            let next = r.current_attempt.next();
            let new_max = r
                .current_attempt
                .get()
                .saturating_add(budget.max(1))
                .min(crate::ids::MAX_ATTEMPTS_LIMIT);
            // At the highest budget accepted there is no attempt left to reopen with:
            // the reopened attempt must stay within max_attempts.
            let max = match MaxAttempts::new(new_max) {
                Ok(max) if !max.exhausted_by(r.current_attempt) => max,
                _ => {
                    return vec![Effect::Reject(Rejection::NotReplayable {
                        transaction_id: id.clone(),
                        status: r.status,
                    })]
                }
            };
            let mut set = changes(ctx, Status::Scheduling, Actor::Operator);
            set.next_attempt = Change::Set(next);
            set.next_fire_at = Change::Set(ctx.now);
            set.schedule_name = Change::Set(ScheduleName::for_retry(id, next));
            set.max_attempts = Some(max);
            set.origin = Change::Set(Origin::Operator);
            set.reconcile = ctx.reconcile_key(Status::Scheduling, id, Some(ctx.now));
            vec![
                write(
                    id,
                    Some(Status::Failed),
                    Event::OperatorReplay,
                    Guard {
                        current_attempt: Some(r.current_attempt),
                        ..guard(&[Status::Failed])
                    },
                    set,
                ),
                Effect::PublishRetry(RetryEvent {
                    transaction_id: id.clone(),
                    origin: Origin::Operator,
                    attempt: next,
                }),
                Effect::Ack(Ack::Replayed),
            ]
        }
        Known::Record(r) => vec![Effect::Reject(Rejection::NotReplayable {
            transaction_id: id.clone(),
            status: r.status,
        })],
    }
}

/// Decides for any input.
pub fn decide(
    input: &Input,
    known: Known<'_>,
    payload_matches: Option<bool>,
    ctx: &Context,
    rng: &mut dyn RandomSource,
) -> Plan {
    // Time never runs backwards within a transaction: a decision taken on a record
    // written later than this run's clock reading (another writer, or the record a
    // failed condition handed back) writes no earlier than that record's time.
    let later;
    let ctx = match known {
        Known::Record(r) if r.updated_at > ctx.now => {
            later = Context {
                now: r.updated_at,
                ..ctx.clone()
            };
            &later
        }
        _ => ctx,
    };
    match input {
        Input::Response(r) => decide_response(known, r, ctx, rng),
        Input::Retry(e) => decide_retry(known, e, ctx),
        Input::Reconcile(r) => match known {
            Known::Record(current) => decide_reconcile(current, ctx),
            Known::Missing => vec![Effect::Drop(DropReason::NotStuck { status: r.status })],
            Known::Unread => decide_reconcile(r, ctx),
        },
        Input::Start {
            transaction_id,
            payload,
            max_attempts,
        } => decide_start(
            known,
            payload_matches,
            transaction_id,
            payload,
            *max_attempts,
            ctx,
        ),
        Input::Resolve(id) => decide_resolve(known, id, ctx),
        Input::Replay {
            transaction_id,
            budget,
        } => decide_replay(known, transaction_id, *budget, ctx),
    }
}

// ---------------------------------------------------------------------------
// The step machine
// ---------------------------------------------------------------------------

/// How many times one run may decide again after a failed condition before it gives
/// up (each re-decision is made from the record the failure handed back, so in
/// practice two are the most a run ever needs).
pub const MAX_REDECISIONS: u8 = 4;

/// What the executor must do next.
#[derive(Debug, Clone, PartialEq)]
pub enum Step<'a> {
    Perform(&'a Effect),
    Done(&'a Disposition),
}

/// An effect the run did not expect back (an executor bug, never a data problem).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("effect `{effect}` cannot observe `{observed}`")]
pub struct UnexpectedObservation {
    pub effect: &'static str,
    pub observed: String,
}

/// One message being handled: the plan, where it is, and how to decide again.
#[derive(Debug, Clone)]
pub struct Run {
    input: Input,
    plan: VecDeque<Effect>,
    done: Option<Disposition>,
    redecisions: u8,
    /// Every effect performed so far, with what it observed (for logs and metrics).
    trail: Vec<(Effect, Observed)>,
}

impl Run {
    /// Starts a run from what is known (usually [`Known::Unread`]).
    pub fn new(input: Input, known: Known<'_>, ctx: &Context, rng: &mut dyn RandomSource) -> Self {
        let plan = decide(&input, known, None, ctx, rng);
        let mut run = Self {
            input,
            plan: plan.into(),
            done: None,
            redecisions: 0,
            trail: Vec::new(),
        };
        run.settle();
        run
    }

    pub fn input(&self) -> &Input {
        &self.input
    }

    /// The effects still to perform, the current one first.
    pub fn remaining(&self) -> impl Iterator<Item = &Effect> {
        self.plan.iter()
    }

    pub fn trail(&self) -> &[(Effect, Observed)] {
        &self.trail
    }

    pub fn redecisions(&self) -> u8 {
        self.redecisions
    }

    pub fn step(&self) -> Step<'_> {
        match (&self.done, self.plan.front()) {
            (Some(d), _) => Step::Done(d),
            (None, Some(e)) => Step::Perform(e),
            // A plan always ends with a terminal effect; an empty one is acknowledged.
            (None, None) => Step::Done(&Disposition::Ack(Ack::AlreadyHandled)),
        }
    }

    pub fn disposition(&self) -> Option<&Disposition> {
        self.done.as_ref()
    }

    /// Feeds back what the current effect observed.
    pub fn observe(
        &mut self,
        observed: Observed,
        ctx: &Context,
        rng: &mut dyn RandomSource,
    ) -> Result<(), UnexpectedObservation> {
        let Some(effect) = self.plan.pop_front() else {
            return Ok(());
        };
        let again = match (&effect, &observed) {
            (Effect::Read(_), Observed::Record(rec)) => Some((rec.clone(), None)),
            (Effect::Create { .. }, Observed::Created) => None,
            (
                Effect::Create { .. },
                Observed::AlreadyExists {
                    record,
                    same_payload,
                },
            ) => Some((Some(record.clone()), Some(*same_payload))),
            (Effect::Write(_), Observed::Written(_)) => None,
            (Effect::Write(_), Observed::ConditionFailed(rec)) => Some((rec.clone(), None)),
            (
                Effect::CreateSchedule(_),
                Observed::ScheduleCreated | Observed::ScheduleAlreadyExists,
            )
            | (Effect::DeleteSchedule(_), Observed::ScheduleDeleted | Observed::ScheduleNotFound)
            | (Effect::PublishRequest(_) | Effect::PublishRetry(_), Observed::Published)
            | (Effect::Alert(_), Observed::Alerted) => None,
            (e, o) => {
                let err = UnexpectedObservation {
                    effect: e.label(),
                    observed: format!("{o:?}"),
                };
                self.plan.push_front(effect);
                return Err(err);
            }
        };
        self.trail.push((effect, observed));
        if let Some((record, payload_matches)) = again {
            if self.redecisions >= MAX_REDECISIONS {
                self.plan = VecDeque::from([Effect::Reject(Rejection::TooManyRedecisions {
                    transaction_id: self.input.transaction_id().clone(),
                })]);
            } else {
                self.redecisions += 1;
                let known = match &record {
                    Some(r) => Known::Record(r),
                    None => Known::Missing,
                };
                self.plan = decide(&self.input, known, payload_matches, ctx, rng).into();
            }
        }
        self.settle();
        Ok(())
    }

    fn settle(&mut self) {
        if self.done.is_some() {
            return;
        }
        let terminal = match self.plan.front() {
            Some(Effect::Ack(a)) => Some(Disposition::Ack(*a)),
            Some(Effect::Drop(d)) => Some(Disposition::Drop(d.clone())),
            Some(Effect::Reject(r)) => Some(Disposition::Reject(r.clone())),
            _ => None,
        };
        if let Some(d) = terminal {
            self.plan.clear();
            self.done = Some(d);
        }
    }
}

#[cfg(test)]
mod tests;
