//! Decisions as plans, and the step machine that executes them. Each handler's rules are
//! a pure function from (what is known of the record, the message, the context, a random
//! source) to a [`Plan`]: ordered [`Effect`]s ending with exactly one of acknowledge,
//! drop-with-reason or reject. Happy paths never read the state item: the first plan is
//! made on an *unread* record; when a write's condition fails, the store hands back the
//! current record and the [`Run`] decides again from it, so "someone already did the
//! work" becomes success and a late or duplicated message a drop, with no extra read.
//!
//! This module holds the vocabulary (context, effects, dispositions, inputs), [`decide`]
//! and [`Run`]; each decider has a module of its own and names the arrows it takes
//! ([`crate::arrow!`]), never the status a write enters. Executors only perform effects.
//! The rules per handler: `docs/design.md#handler-rules`.

mod cycle;
mod expire;
mod publish;
mod reconcile;
mod replay;
mod resolve;
mod response;
mod retry;
mod run;
mod start;

pub use expire::{expires, EXPIRED_REASON};
pub use publish::decide_publish;
pub use reconcile::{asks_breaker, decide_reconcile, is_stuck, UNANSWERED_REASON};
pub use replay::decide_replay;
pub use resolve::decide_resolve;
pub use response::decide_response;
pub use response::{AMBIGUOUS_REASON, TECHNICAL_EXHAUSTED_REASON};
pub use retry::decide_retry;
pub use run::{
    retry_asks_breaker, Decide, Question, Rules, Run, Step, UnexpectedObservation, MAX_REDECISIONS,
};
pub use start::decide_start;

use crate::breaker::Hold;
use crate::ids::{Attempt, CorrelationId, MaxAttempts, ScheduleName, Timestamp, TransactionId};
use crate::machine::{Status, TransactionRecord, Write};
use crate::message::{Outcome, Payload, Response, RetryEvent};
use crate::policy::{PolicySet, RandomSource, RetryPolicy};
use serde::{Deserialize, Serialize};
use std::time::Duration;
use strum::{IntoStaticStr, VariantArray};

/// How a deployment's requests reach the external service (`REQUEST_DELIVERY`,
/// template parameter `RequestDelivery`; `docs/design.md#outbox-mode`).
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Delivery {
    /// The function that decides a send publishes the request right after its
    /// write. The service must deduplicate by the idempotency key.
    #[default]
    Direct,
    /// The deciding write leaves the record SENDING, the request's intent; the
    /// publisher sends it to a FIFO request queue once per (transaction, attempt,
    /// round) and records that it did. For services that cannot deduplicate.
    Outbox,
}

impl Delivery {
    pub const ALL: [Delivery; 2] = [Delivery::Direct, Delivery::Outbox];

    /// The configured form: `direct`, `outbox`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Delivery::Direct => "direct",
            Delivery::Outbox => "outbox",
        }
    }

    /// The delivery a configured value names (exactly `direct` or `outbox`).
    pub fn parse(raw: &str) -> Option<Delivery> {
        Delivery::ALL.into_iter().find(|d| d.as_str() == raw)
    }

    pub const fn is_outbox(self) -> bool {
        matches!(self, Delivery::Outbox)
    }
}

impl std::fmt::Display for Delivery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The deployment's rules: the bounds and policies one deployment is configured
/// with, the same for every decision it makes.
#[derive(Debug, Clone)]
pub struct Deployment {
    /// How requests reach the service (default [`Delivery::Direct`]).
    pub delivery: Delivery,
    pub policies: PolicySet,
    /// Write shards of the reconciler index.
    pub shards: u16,
    /// How long an intermediate state may last before the reconciler acts.
    pub reconcile_threshold: Duration,
    /// How long a request may go unanswered (ANSWER_TIMEOUT_SECONDS).
    pub answer_timeout: Duration,
    /// Republishes of an unanswered request before FAILED/UNANSWERED.
    pub answer_republish_max: u32,
    /// Requeues of one retry cycle without progress before it is parked.
    pub requeue_max: u32,
    /// Technical re-sends of one transaction before an ERROR ends it FAILED.
    pub technical_resend_max: u32,
    /// The backoff of technical re-sends.
    pub technical_policy: RetryPolicy,
    /// How long a transaction may live before it ends FAILED, `EXPIRED`
    /// (TRANSACTION_DEADLINE_SECONDS), counted from its creation or its last replay.
    pub transaction_deadline: Duration,
}

impl Default for Deployment {
    /// Every setting at its default (`crate::defaults`).
    fn default() -> Self {
        Self::new(
            PolicySet::default(),
            crate::defaults::RECONCILE_SHARDS,
            crate::defaults::RECONCILE_THRESHOLD,
        )
    }
}

impl Deployment {
    /// The context of one decision made at `now` under these rules.
    pub fn context(&self, now: Timestamp) -> Context {
        Context::at(self.clone(), now)
    }

    /// These policies, shards and reconcile threshold, every other bound at its
    /// default (`crate::defaults`).
    pub fn new(policies: PolicySet, shards: u16, reconcile_threshold: Duration) -> Self {
        Self {
            delivery: Delivery::Direct,
            policies,
            shards: shards.max(1),
            reconcile_threshold,
            answer_timeout: crate::defaults::ANSWER_TIMEOUT,
            answer_republish_max: crate::defaults::ANSWER_REPUBLISH_MAX,
            requeue_max: crate::defaults::RECONCILE_REQUEUE_MAX,
            technical_resend_max: crate::defaults::TECHNICAL_RESEND_MAX,
            technical_policy: RetryPolicy::technical_default(),
            transaction_deadline: crate::defaults::TRANSACTION_DEADLINE,
        }
    }

    /// Republishes of an unanswered request this deployment makes: none in outbox
    /// mode (a republish is a second publish of the attempt), `answer_republish_max`
    /// otherwise.
    pub fn answer_republishes(&self) -> u32 {
        match self.delivery {
            Delivery::Direct => self.answer_republish_max,
            Delivery::Outbox => 0,
        }
    }
}

/// Everything a decision needs besides the record and the message: the deployment's
/// rules, and the facts of this one call — when it is made, for which operator, and
/// what the circuit breaker said.
#[derive(Debug, Clone)]
pub struct Context {
    pub rules: Deployment,
    pub now: Timestamp,
    /// The operator a decision is made for (replay, resolve), recorded by its write.
    pub operator: Option<crate::machine::OperatorNote>,
    /// The circuit breaker holds requests back (its admission paused them): no
    /// request goes out now; retry cycles and answer deadlines wait until then.
    pub hold: Option<Hold>,
    /// The breaker lets this request out as a half-open round's probe: it tests the
    /// service for everyone, so it spends nothing of the transaction's own.
    pub probe: bool,
}

impl Context {
    /// A call at `now` under `rules`, for no operator, the breaker saying nothing.
    pub fn at(rules: Deployment, now: Timestamp) -> Self {
        Self {
            rules,
            now,
            operator: None,
            hold: None,
            probe: false,
        }
    }

    /// A call at `now` under [`Deployment::new`]`(policies, shards, reconcile_threshold)`.
    pub fn new(
        now: Timestamp,
        policies: PolicySet,
        shards: u16,
        reconcile_threshold: Duration,
    ) -> Self {
        Self::at(Deployment::new(policies, shards, reconcile_threshold), now)
    }

    /// The same context with this answer deadline and republish bound.
    pub fn with_answer_deadline(mut self, timeout: Duration, republish_max: u32) -> Self {
        self.rules.answer_timeout = timeout;
        self.rules.answer_republish_max = republish_max;
        self
    }

    /// The same context under this request delivery.
    pub fn with_delivery(mut self, delivery: Delivery) -> Self {
        self.rules.delivery = delivery;
        self
    }

    /// True when this deployment delivers requests through the outbox.
    pub fn outbox(&self) -> bool {
        self.rules.delivery.is_outbox()
    }

    /// The same context with this bound on requeues without progress.
    pub fn with_requeue_max(mut self, requeue_max: u32) -> Self {
        self.rules.requeue_max = requeue_max;
        self
    }

    /// The same context with this bound on technical re-sends.
    pub fn with_technical_resend_max(mut self, max: u32) -> Self {
        self.rules.technical_resend_max = max;
        self
    }

    /// The same context with this transaction deadline.
    pub fn with_transaction_deadline(mut self, deadline: Duration) -> Self {
        self.rules.transaction_deadline = deadline;
        self
    }

    /// The instant `r` expires at: its own deadline, or its creation plus the
    /// deployment's.
    pub fn expires_at(&self, r: &TransactionRecord) -> Timestamp {
        crate::machine::Deadline::of(r, millis(self.rules.transaction_deadline))
    }

    /// True when `r`'s deadline has passed: its next decision ends it FAILED,
    /// `EXPIRED`, unless it succeeds or another budget ends it first.
    pub fn expired(&self, r: &TransactionRecord) -> bool {
        !self.live().is_live(r)
    }

    /// The condition "the deadline is still ahead", for a write decided blind.
    pub fn live(&self) -> crate::machine::Deadline {
        crate::machine::Deadline {
            now: self.now,
            born_after: self
                .now
                .plus_millis(-millis(self.rules.transaction_deadline)),
        }
    }

    /// The same context with the breaker holding requests back (`None`: it lets them
    /// out).
    pub fn with_hold(mut self, hold: Option<Hold>) -> Self {
        self.hold = hold;
        self
    }

    /// The same context, the request let out as the breaker's probe (`true`) or not.
    pub fn with_probe(mut self, probe: bool) -> Self {
        self.probe = probe;
        self
    }

    /// The same context, deciding for the operator `note` describes.
    pub fn for_operator(mut self, note: crate::machine::OperatorNote) -> Self {
        self.operator = Some(note);
        self
    }

    fn threshold_ms(&self) -> i64 {
        millis(self.rules.reconcile_threshold)
    }

    /// The answer deadline of a request that leaves now.
    pub fn answer_due(&self) -> Timestamp {
        self.now.plus_millis(millis(self.rules.answer_timeout))
    }
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
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
    /// The send's round: the record's `resends` as it leaves. `None` in a plan made
    /// blind, filled by [`Run`] from the record the write before it returned.
    pub round: Option<u32>,
    /// The record's correlation id, carried in the request; in a plan made blind,
    /// filled by [`Run`] with the round (it never changes, so any record of the
    /// transaction has the one to send).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub correlation_id: Option<CorrelationId>,
}

impl RequestHeader {
    /// The FIFO request queue's `MessageDeduplicationId`:
    /// `<transaction_id>#<attempt>#<round>` (an unknown round counts as 0). The round is
    /// part of it, so the re-send an ERROR `NOT_RUN` opens is a new message.
    pub fn deduplication_id(&self) -> String {
        format!(
            "{}#{}#{}",
            self.transaction_id,
            self.attempt,
            self.round.unwrap_or(0)
        )
    }

    /// The FIFO request queue's `MessageGroupId`: the transaction id (deduplication
    /// is scoped to the group; transactions are spread over groups for throughput).
    pub fn group_id(&self) -> String {
        self.transaction_id.to_string()
    }

    /// The request for `attempt` of `r`, sent in the record's round with its
    /// correlation id.
    pub fn of(r: &TransactionRecord, attempt: Attempt) -> Self {
        Self {
            transaction_id: r.transaction_id.clone(),
            attempt,
            round: Some(r.counts[crate::machine::Counter::Round]),
            correlation_id: r.correlation_id.clone(),
        }
    }
}

/// A one-time schedule to create: fires `event` on the retry queue at `fire_at`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ScheduleSpec {
    pub name: ScheduleName,
    pub fire_at: Timestamp,
    pub event: RetryEvent,
}

/// How far ahead of the moment a schedule is created its instant must lie, at least:
/// the longest a `CreateSchedule` attempt may take (5 s). An instant persisted
/// earlier may have passed by then (a run that stalled or crashed between the write
/// and the schedule, a pause due a second later), and EventBridge Scheduler refuses
/// an instant in the past.
pub const SCHEDULE_LEAD: Duration = Duration::from_secs(5);

impl ScheduleSpec {
    /// The instant the schedule is created for when it is created at `now`: the
    /// persisted `fire_at`, or [`SCHEDULE_LEAD`] after `now` (a whole second) when
    /// that is later. Only the firing moves: the record keeps its instant and the
    /// event its round, and an event a few seconds late is one the protocol handles
    /// as any late fire.
    pub fn create_at(&self, now: Timestamp) -> Timestamp {
        self.fire_at
            .max(now.plus_millis(millis(SCHEDULE_LEAD)).ceil_to_second())
    }
}

/// The longest SQS holds a message back before delivering it (`DelaySeconds`, 15 min).
pub const MAX_DEFER_SECONDS: u32 = 900;

/// A retry event put back on the retry queue, delivered again `delay_seconds` later
/// (SQS `DelaySeconds`): how the circuit breaker holds a retry without writing its
/// record. Holds longer than [`MAX_DEFER_SECONDS`] are deferred again when they come
/// back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Deferred {
    pub event: RetryEvent,
    pub delay_seconds: u32,
}

impl Deferred {
    /// `event` deferred from `now` until `until`: at least one second, at most
    /// [`MAX_DEFER_SECONDS`].
    pub fn until(event: RetryEvent, now: Timestamp, until: Timestamp) -> Self {
        let ms = until.millis().saturating_sub(now.millis()).max(0);
        let seconds = u32::try_from(ms.saturating_add(999) / 1_000).unwrap_or(u32::MAX);
        Self {
            event,
            delay_seconds: seconds.clamp(1, MAX_DEFER_SECONDS),
        }
    }
}

/// A business alert: the transaction ended FAILED.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Alert {
    pub kind: AlertKind,
    pub transaction_id: TransactionId,
    pub attempts: Attempt,
    pub last_reason: Option<String>,
}

impl Alert {
    /// The effect raising alert `kind` for transaction `id`, ended at `attempts`.
    pub(crate) fn raise(
        kind: AlertKind,
        id: &TransactionId,
        attempts: Attempt,
        last_reason: Option<String>,
    ) -> Effect {
        Effect::Alert(Alert {
            kind,
            transaction_id: id.clone(),
            attempts,
            last_reason,
        })
    }
}

/// Why a transaction ended FAILED.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
#[derive(IntoStaticStr)]
#[strum(serialize_all = "kebab-case")]
pub enum AlertKind {
    /// Every attempt was answered CANCELLED.
    AttemptsExhausted,
    /// A request stayed unanswered past its deadline and every republish.
    Unanswered,
    /// Every technical re-send was answered ERROR again.
    TechnicalExhausted,
    /// The transaction's deadline passed before it ended.
    Expired,
    /// The service answered REJECTED: the request can never succeed as it is, and
    /// is not retried (an operator case).
    Rejected,
    /// Outbox mode: an ERROR that does not say the call did not run; the request may
    /// have been executed and is not sent again (resolve or replay).
    Ambiguous,
}

impl AlertKind {
    pub fn label(self) -> &'static str {
        self.into()
    }
}

/// One thing to do.
#[derive(Debug, Clone, PartialEq, Serialize, IntoStaticStr)]
#[strum(serialize_all = "kebab-case")]
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
    /// The retry event handled now, back on the retry queue for later.
    DeferRetry(Deferred),
    /// What this answer tells the circuit breaker: given only by an answer the
    /// decision takes as the one in flight (never a late, stale or duplicate one).
    Signal(crate::breaker::Signal),
    Alert(Alert),
    /// Append an audit entry for an event that changes no record (a notice).
    Note(crate::audit::AuditEntry),
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
        self.into()
    }
}

/// Why a message was acknowledged: the work it asked for is done.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
#[derive(IntoStaticStr, VariantArray)]
#[strum(serialize_all = "kebab-case")]
pub enum Ack {
    Started,
    AlreadyStarted,
    Succeeded,
    Failed,
    Scheduled,
    /// ERROR for the current attempt: its re-send persisted and scheduled.
    Resend,
    /// SCHEDULED / SENDING / later found: another execution did the work.
    AlreadyHandled,
    Published,
    /// A redelivery found SENDING and finished the publish.
    Resumed,
    ReconcilerScheduled,
    ReconcilerRequeued,
    /// An unanswered request found before its deadline: its index entry moved there.
    ReconcilerAwaiting,
    /// An unanswered request past its deadline published again (same key).
    ReconcilerRepublished,
    /// An unanswered request past its deadline with its republishes spent: FAILED.
    Unanswered,
    /// The transaction's deadline passed: FAILED, `EXPIRED`.
    Expired,
    /// The service answered REJECTED: FAILED, `REJECTED`.
    Rejected,
    Resolved,
    AlreadyResolved,
    Replayed,
    /// The circuit breaker held the request back: its retry event is back on the
    /// retry queue until the breaker's resume instant, the record untouched.
    Paused,
    /// The circuit breaker held an unanswered request back: its deadline moved to
    /// the breaker's resume instant, nothing republished.
    ReconcilerHeld,
    /// A request the breaker held back, published again (same key) once it let
    /// requests out: not a fresh deadline for the breaker.
    ReconcilerRepublishedAfterHold,
    /// An unanswered request published again (same key) as the breaker's half-open
    /// probe: its republish count untouched, its deadline not the breaker's signal.
    ReconcilerProbed,
    /// Outbox mode: the send decided and written (SENDING); the publisher sends it.
    Enqueued,
    /// Outbox mode: a SENDING record claimed longer ago than the resend window: not
    /// published again (a repeat could escape SQS's deduplication), IN_PROGRESS so the
    /// answer deadline watches it.
    PublishUnconfirmed,
}

impl Ack {
    /// Every variant, in declaration order.
    pub const ALL: &'static [Ack] = <Self as VariantArray>::VARIANTS;

    /// The kebab-case name (as serialized): `already-handled`.
    pub fn label(self) -> &'static str {
        self.into()
    }
}

impl Disposition {
    /// The kebab-case name of how a run ended.
    pub fn label(&self) -> &'static str {
        match self {
            Disposition::Ack(a) => a.label(),
            Disposition::Drop(d) => d.label(),
            Disposition::Reject(r) => r.label(),
        }
    }
}

/// Why a message changed nothing.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(tag = "reason", rename_all = "kebab-case")]
#[derive(IntoStaticStr)]
#[strum(serialize_all = "kebab-case")]
pub enum DropReason {
    /// A response for an attempt that is no longer the current one.
    LateResponse { attempt: Attempt, current: Attempt },
    /// An ERROR answering an earlier send (`round`) of the attempt than the one in
    /// flight (`current`): delivered late or twice, its re-send already went out.
    StaleError {
        attempt: Attempt,
        round: u32,
        current: u32,
    },
    /// A response whose outcome contradicts what was already decided for that attempt.
    ConflictingOutcome { outcome: Outcome, status: Status },
    /// A SUCCESS for an attempt already answered CANCELLED (a later attempt went out,
    /// or the budget was spent) or resolved by other means: the service executed
    /// something this side considers not done — the one sign of a possible double
    /// execution. Changes nothing; raised as a business alert by the handler.
    ConflictingSuccess { attempt: Attempt, status: Status },
    /// A redelivered response for work already finished.
    DuplicateResponse { status: Status },
    /// A retry event for an attempt that is not the pending one.
    StaleRetry {
        attempt: Attempt,
        pending: Option<Attempt>,
    },
    /// A retry event of an earlier retry cycle (`round`) of the pending attempt than
    /// the one in force (`current`).
    StaleCycle {
        attempt: Attempt,
        round: u32,
        current: u32,
    },
    /// A retry event for an attempt already published.
    DuplicateRetry { attempt: Attempt, status: Status },
    /// The reconciler found the record no longer stuck.
    NotStuck { status: Status },
    /// The reconciler requeued this retry cycle `requeues` times and nothing moved:
    /// it is parked (not requeued again) until something makes progress; reported.
    Parked { status: Status, requeues: u32 },
    /// The reconciler found a retry cycle past its instant while the circuit breaker
    /// holds requests back: its event waits on the retry queue (held), nothing is
    /// requeued or counted.
    HeldByBreaker { status: Status },
    /// Outbox mode: the publisher's record is no longer the SENDING it was handed
    /// (another copy published it, or it moved on): nothing to publish.
    AlreadyPublished { status: Status },
}

impl DropReason {
    pub fn label(&self) -> &'static str {
        self.into()
    }
}

/// Why a message can never succeed as it is.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(tag = "reason", rename_all = "kebab-case")]
#[derive(IntoStaticStr)]
#[strum(serialize_all = "kebab-case")]
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
        self.into()
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
                "transaction `{transaction_id}` already exists with a different payload; nothing was published (payloads are compared as exact text, white space included: `retryctl show {transaction_id} --payload` prints the stored one)"
            ),
            Rejection::NotResolvable { transaction_id, status: Status::Failed } => write!(
                f,
                "transaction `{transaction_id}` is FAILED: only SCHEDULING or SCHEDULED can be resolved by other means; to give it new attempts, `retryctl replay {transaction_id}`"
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
    Noted,
    /// A signal handed to the breaker's tally.
    Signalled,
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
        /// The producer's reference, stored on the record it creates.
        correlation_id: Option<CorrelationId>,
    },
    Resolve(TransactionId),
    Replay {
        transaction_id: TransactionId,
        budget: u32,
    },
    /// Outbox mode: a SENDING record to publish (the stream's new image).
    Publish(TransactionRecord),
}

impl Input {
    pub fn transaction_id(&self) -> &TransactionId {
        match self {
            Input::Response(r) => &r.transaction_id,
            Input::Retry(e) => &e.transaction_id,
            Input::Reconcile(r) | Input::Publish(r) => &r.transaction_id,
            Input::Start { transaction_id, .. }
            | Input::Resolve(transaction_id)
            | Input::Replay { transaction_id, .. } => transaction_id,
        }
    }
}

/// The record an operator decision needs read first: `Err` holds the plan until it
/// is (read it; or reject an unknown transaction).
fn read_first<'a>(known: Known<'a>, id: &TransactionId) -> Result<&'a TransactionRecord, Plan> {
    match known {
        Known::Unread => Err(vec![Effect::Read(id.clone())]),
        Known::Missing => Err(vec![Effect::Reject(Rejection::UnknownTransaction {
            transaction_id: id.clone(),
        })]),
        Known::Record(r) => Ok(r),
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
            // The breaker was asked (or not) for the record the query returned: a
            // record that has since become one that must ask it (a request due to go
            // out again) is left to the next run, which asks. Decided with no verdict
            // it would go out as if the breaker were CLOSED — into an outage, or
            // clearing the mark of a probe in flight.
            Known::Record(current) if asks_breaker(current, ctx) && !asks_breaker(r, ctx) => {
                vec![Effect::Drop(DropReason::NotStuck {
                    status: current.status,
                })]
            }
            Known::Record(current) => decide_reconcile(current, ctx),
            Known::Missing => vec![Effect::Drop(DropReason::NotStuck { status: r.status })],
            Known::Unread => decide_reconcile(r, ctx),
        },
        Input::Start {
            transaction_id,
            payload,
            max_attempts,
            correlation_id,
        } => decide_start(
            known,
            payload_matches,
            transaction_id,
            payload,
            *max_attempts,
            correlation_id.as_ref(),
            ctx,
        ),
        Input::Resolve(id) => decide_resolve(known, id, ctx),
        Input::Replay {
            transaction_id,
            budget,
        } => decide_replay(known, transaction_id, *budget, ctx),
        Input::Publish(image) => match known {
            Known::Unread => decide_publish(image, ctx, crate::machine::Actor::Publisher),
            Known::Missing => vec![Effect::Reject(Rejection::UnknownTransaction {
                transaction_id: image.transaction_id.clone(),
            })],
            // The send the image holds, still pending: publish it. Any other record
            // (published, answered, another round) has nothing of this image's left.
            Known::Record(current) if publish::same_send(image, current) => {
                decide_publish(current, ctx, crate::machine::Actor::Publisher)
            }
            Known::Record(current) => vec![Effect::Drop(DropReason::AlreadyPublished {
                status: current.status,
            })],
        },
    }
}

#[cfg(test)]
mod tests;
