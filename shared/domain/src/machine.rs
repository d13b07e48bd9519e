//! The whole state machine in one file: statuses, events, the transition function, the
//! transaction record and the conditional writes. Every arrow with its event, and the
//! condition each write carries, is in `docs/design.md#the-state-machine`; why a
//! technical failure, a breaker pause or an answer deadline consumes no attempt is in
//! `docs/design.md#technical-failures-never-consume-an-attempt` and
//! `docs/design.md#the-circuit-breaker-an-outage-pauses-retries`.
//!
//! Every arrow is a **conditional write** ([`Write`]): it applies only when the stored
//! status is one the arrow leaves and the attempts are exactly the expected ones
//! ([`Guard`]). [`Write::apply`] is the semantics every store implements (the DynamoDB
//! adapter translates the same condition into a `ConditionExpression`).

use crate::ids::{Attempt, CorrelationId, MaxAttempts, ScheduleName, Timestamp, TransactionId};
use crate::message::{Origin, Outcome};
use serde::{Deserialize, Serialize};
use std::fmt;
use strum::{EnumString, IntoStaticStr, VariantArray};
use thiserror::Error;

/// The six statuses of a transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
#[derive(IntoStaticStr, VariantArray, EnumString)]
#[strum(serialize_all = "SCREAMING_SNAKE_CASE")]
pub enum Status {
    /// Request for attempt n is out at the external service (article: EN_CURSO).
    InProgress,
    /// Retry decided, fire time persisted, schedule may not exist yet (PLANIFICANDO).
    Scheduling,
    /// Schedule confirmed (PLANIFICADO).
    Scheduled,
    /// Retry event received, request n+1 being published (ENVIANDO).
    Sending,
    /// Terminal (EXITOSA).
    Succeeded,
    /// Terminal, attempts exhausted: a business alert (FALLIDA).
    Failed,
}

impl Status {
    /// Every variant, in declaration order.
    pub const ALL: &'static [Status] = <Self as VariantArray>::VARIANTS;

    /// The states of the retry cycle, between an answer CANCELLED and the next request.
    pub const INTERMEDIATE: [Status; 3] = [Status::Scheduling, Status::Scheduled, Status::Sending];

    pub fn as_str(self) -> &'static str {
        self.into()
    }

    pub fn parse(raw: &str) -> Option<Self> {
        raw.parse().ok()
    }

    pub fn is_terminal(self) -> bool {
        matches!(self, Status::Succeeded | Status::Failed)
    }

    pub fn is_intermediate(self) -> bool {
        Status::INTERMEDIATE.contains(&self)
    }

    /// The states the reconciler watches: every non-terminal one (they carry the
    /// reconciler index key) — the retry cycle's, and IN_PROGRESS for its answer
    /// deadline.
    pub fn is_watched(self) -> bool {
        !self.is_terminal()
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What happened, as far as the state machine is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
#[derive(VariantArray)]
pub enum Event {
    Start,
    /// The transaction's work is done: the service answered SUCCESS, or (mark
    /// `RESOLVED`) it was resolved by other means while a retry waited.
    Success,
    /// A budget of the transaction is spent: its attempts (CANCELLED for the last),
    /// its technical re-sends (mark `TECHNICAL_EXHAUSTED`), its republishes (mark
    /// `UNANSWERED`) or its time (mark `EXPIRED`); or the service refused the
    /// request for good (mark `REJECTED`): it ends the same way, never retried.
    Exhausted,
    ResponseCancelledRetry,
    ResponseTechnicalRetry,
    ScheduleConfirmed,
    RetryEventAccepted,
    RequestPublished,
    OperatorReplay,
    AnswerAwaited,
    AnswerRepublished,
    ReconcilerRequeued,
    /// Outbox mode's start: the record is created SENDING(1), the request left to the
    /// publisher (`docs/design.md#outbox-mode`).
    StartQueued,
    /// Outbox mode: the publisher claims the SENDING record it is about to publish
    /// (`publishing_since` set), so that no other copy of it publishes past SQS's
    /// deduplication window.
    PublishClaimed,
}

impl Event {
    /// Every variant, in declaration order.
    pub const ALL: &'static [Event] = <Self as VariantArray>::VARIANTS;
}

/// An event that has no arrow from the given state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[error("no transition from {} on {event:?}", from.map(Status::as_str).unwrap_or("[*]"))]
pub struct IllegalTransition {
    pub from: Option<Status>,
    pub event: Event,
}

/// The transition function: every arrow of the diagram above, nothing more.
/// `from = None` is the initial pseudo-state `[*]`.
pub const fn transition(from: Option<Status>, event: Event) -> Result<Status, IllegalTransition> {
    use Event as E;
    use Status as S;
    match (from, event) {
        (None, E::Start) => Ok(S::InProgress),
        (Some(S::InProgress | S::Scheduling | S::Scheduled), E::Success) => Ok(S::Succeeded),
        (Some(S::InProgress | S::Scheduling | S::Scheduled), E::Exhausted) => Ok(S::Failed),
        (Some(S::InProgress | S::Scheduling | S::Scheduled), E::ResponseCancelledRetry) => {
            Ok(S::Scheduling)
        }
        (Some(S::InProgress), E::ResponseTechnicalRetry) => Ok(S::Scheduling),
        (Some(S::Scheduling), E::ScheduleConfirmed) => Ok(S::Scheduled),
        (Some(S::Scheduling | S::Scheduled), E::RetryEventAccepted) => Ok(S::Sending),
        (Some(S::Sending), E::RequestPublished) => Ok(S::InProgress),
        (Some(S::Failed), E::OperatorReplay) => Ok(S::Scheduling),
        (Some(S::InProgress), E::AnswerAwaited | E::AnswerRepublished) => Ok(S::InProgress),
        (Some(S::Scheduling), E::ReconcilerRequeued) => Ok(S::Scheduling),
        (Some(S::Scheduled), E::ReconcilerRequeued) => Ok(S::Scheduled),
        (None, E::StartQueued) => Ok(S::Sending),
        (Some(S::Sending), E::PublishClaimed) => Ok(S::Sending),
        (from, event) => Err(IllegalTransition { from, event }),
    }
}

/// The status a transaction is created in: the arrow `[*] → ?` on [`Event::Start`].
pub const CREATED: Status = match transition(None, Event::Start) {
    Ok(status) => status,
    Err(_) => panic!("the machine has no arrow from [*] on Start"),
};

/// The status an outbox-mode transaction is created in: the arrow `[*] → ?` on
/// [`Event::StartQueued`].
pub const QUEUED: Status = match transition(None, Event::StartQueued) {
    Ok(status) => status,
    Err(_) => panic!("the machine has no arrow from [*] on StartQueued"),
};

/// A set of statuses (the statuses a write may leave). Iterates, prints and
/// serializes in the order of [`Status::ALL`].
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct StatusSet(u8);

impl StatusSet {
    const fn bit(s: Status) -> u8 {
        1 << (s as u8)
    }

    /// The set of `statuses`.
    pub const fn of(statuses: &[Status]) -> StatusSet {
        let mut bits = 0;
        let mut i = 0;
        while i < statuses.len() {
            bits |= Self::bit(statuses[i]);
            i += 1;
        }
        StatusSet(bits)
    }

    pub const fn contains(self, s: Status) -> bool {
        self.0 & Self::bit(s) != 0
    }

    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// True when every status of `self` is in `other`.
    pub const fn is_subset(self, other: StatusSet) -> bool {
        self.0 & !other.0 == 0
    }

    pub fn iter(self) -> impl Iterator<Item = Status> {
        Status::ALL
            .iter()
            .copied()
            .filter(move |s| self.contains(*s))
    }

    pub fn len(self) -> usize {
        self.0.count_ones() as usize
    }

    /// The only status of the set, when it has exactly one.
    pub fn single(self) -> Option<Status> {
        let mut it = self.iter();
        match (it.next(), it.next()) {
            (Some(s), None) => Some(s),
            _ => None,
        }
    }
}

impl fmt::Debug for StatusSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl Serialize for StatusSet {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.iter())
    }
}

/// Why statuses and an event make no [`Arrow`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum ArrowError {
    /// One of the statuses has no arrow on the event.
    #[error(transparent)]
    Illegal(#[from] IllegalTransition),
    /// The statuses lead to different statuses on the event: one write enters one.
    #[error("{event:?} leads from {from} to {to} but from {other_from} to {other_to}: a write enters one status")]
    Diverging {
        event: Event,
        from: Status,
        to: Status,
        other_from: Status,
        other_to: Status,
    },
    /// No status to leave.
    #[error("an arrow on {event:?} must leave at least one status")]
    NoSource { event: Event },
    /// A narrowed arrow may only leave statuses the arrow already leaves.
    #[error("the arrow on {event:?} does not leave {status}")]
    NotLeft { event: Event, status: Status },
}

/// An arrow of the machine, taken from any of a set of statuses: every status of
/// `from` leads, on `event`, to the same status `to`, as [`transition`] says. Only
/// [`Arrow::new`] (or [`arrow!`], its compile-time form) and [`Arrow::only_from`] make
/// one, so a write built on an arrow enters exactly the status the machine says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct Arrow {
    from: StatusSet,
    event: Event,
    to: Status,
}

impl Arrow {
    /// The arrow `event` takes from each of `from`, or why there is none.
    pub const fn new(from: &[Status], event: Event) -> Result<Arrow, ArrowError> {
        if from.is_empty() {
            return Err(ArrowError::NoSource { event });
        }
        let first = from[0];
        let to = match transition(Some(first), event) {
            Ok(to) => to,
            Err(e) => return Err(ArrowError::Illegal(e)),
        };
        // A status with no arrow at all is the first thing wrong; then divergence.
        let mut i = 1;
        while i < from.len() {
            if let Err(e) = transition(Some(from[i]), event) {
                return Err(ArrowError::Illegal(e));
            }
            i += 1;
        }
        let mut i = 1;
        while i < from.len() {
            match transition(Some(from[i]), event) {
                Ok(other_to) if other_to as u8 == to as u8 => {}
                Ok(other_to) => {
                    return Err(ArrowError::Diverging {
                        event,
                        from: first,
                        to,
                        other_from: from[i],
                        other_to,
                    })
                }
                Err(e) => return Err(ArrowError::Illegal(e)),
            }
            i += 1;
        }
        Ok(Arrow {
            from: StatusSet::of(from),
            event,
            to,
        })
    }

    /// The same arrow, leaving only `from` (a narrower condition): a non-empty part
    /// of the statuses it leaves.
    pub fn only_from(self, from: &[Status]) -> Result<Arrow, ArrowError> {
        if from.is_empty() {
            return Err(ArrowError::NoSource { event: self.event });
        }
        if let Some(status) = from.iter().find(|s| !self.from.contains(**s)) {
            return Err(ArrowError::NotLeft {
                event: self.event,
                status: *status,
            });
        }
        Ok(Arrow {
            from: StatusSet::of(from),
            ..self
        })
    }

    /// The statuses the arrow leaves.
    pub const fn from(self) -> StatusSet {
        self.from
    }

    pub const fn event(self) -> Event {
        self.event
    }

    /// The status the arrow enters.
    pub const fn to(self) -> Status {
        self.to
    }

    /// The arrow stays among the watched (non-terminal) statuses: the record keeps its
    /// reconciler index key unless the write sets a new one.
    pub fn keeps_watch(self) -> bool {
        self.to.is_watched() && self.from.iter().all(Status::is_watched)
    }
}

/// An [`Arrow`] checked at compile time: `arrow!([Status::InProgress],
/// Event::Success)`. Statuses and an event without an arrow of the machine
/// do not compile.
///
/// ```
/// use domain::machine::{Event, Status};
/// let a = domain::arrow!([Status::Scheduling, Status::Scheduled], Event::RetryEventAccepted);
/// assert_eq!(a.to(), Status::Sending);
/// ```
///
/// ```compile_fail
/// use domain::machine::{Event, Status};
/// // SENDING never succeeds but by its publish and then its answer: the request may be out.
/// let a = domain::arrow!([Status::Scheduling, Status::Sending], Event::Success);
/// ```
///
/// ```compile_fail
/// use domain::machine::{Event, Status};
/// // Only a SENDING record is claimed by a publisher.
/// let a = domain::arrow!([Status::Scheduled], Event::PublishClaimed);
/// ```
#[macro_export]
macro_rules! arrow {
    ([$($from:expr),+ $(,)?], $event:expr) => {
        const {
            match $crate::machine::Arrow::new(&[$($from),+], $event) {
                Ok(arrow) => arrow,
                Err(_) => panic!("not an arrow of the state machine"),
            }
        }
    };
}

/// Who wrote a record (kept on the item and copied into the audit trail).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[derive(IntoStaticStr, VariantArray, EnumString)]
#[strum(serialize_all = "kebab-case")]
pub enum Actor {
    /// The library operation "start a transaction" (services and `retryctl submit`).
    Starter,
    ResponseHandler,
    RetryHandler,
    Reconciler,
    /// `retryctl resolve` / `replay`, or a service resolving by other means.
    Operator,
    /// Outbox mode's publisher: publishes the request a SENDING record holds.
    Publisher,
}

impl Actor {
    /// Every variant, in declaration order.
    pub const ALL: &'static [Actor] = <Self as VariantArray>::VARIANTS;

    pub fn as_str(self) -> &'static str {
        self.into()
    }

    pub fn parse(raw: &str) -> Option<Self> {
        raw.parse().ok()
    }
}

/// The reconciler index key of a record in a non-terminal state: partition
/// `CYCLE#<shard>` (write-sharded so no partition takes all writes) and a sort key
/// instant after which, plus the threshold, the reconciler looks at the record.
///
/// The key is put when the transaction starts (at its answer deadline minus the
/// threshold, so the reconciler finds it exactly when its first request is overdue)
/// and changed once per retry cycle, when the record enters SCHEDULING (to the fire
/// time persisted by that same write). It is kept unchanged through SCHEDULED,
/// SENDING and the IN_PROGRESS that follows — the next request goes out at about the
/// fire time — and removed when the record ends. With a keys-only projection the
/// index is therefore written twice per cycle (a key change is one delete and one
/// put) however many transitions the cycle takes, plus one put at the start and one
/// delete at the end. The reconciler queries `at` before `now − threshold` and reads
/// each such record before deciding by its status ([`crate::decide::is_stuck`]); an
/// IN_PROGRESS found before its answer deadline has its key moved to the deadline
/// (one write, only for requests unanswered longer than the threshold). Terminal
/// records carry no key (the index is sparse).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ReconcileKey {
    pub partition: String,
    pub at: Timestamp,
}

impl ReconcileKey {
    pub fn partition_for(shard: u16) -> String {
        format!("CYCLE#{shard}")
    }

    /// A key of a record with these values, if it carries one: the same for every
    /// status of one cycle (the fire time when there is one).
    pub fn derive(
        status: Status,
        id: &TransactionId,
        shards: u16,
        updated_at: Timestamp,
        next_fire_at: Option<Timestamp>,
    ) -> Option<ReconcileKey> {
        if !status.is_watched() {
            return None;
        }
        Some(ReconcileKey {
            partition: Self::partition_for(id.shard(shards)),
            at: next_fire_at.unwrap_or(updated_at),
        })
    }
}

/// The failed-listing key of a FAILED record: partition `FAILED#<shard>` of the sparse
/// index `failed-index`, whose sort key is the record's own `updated_at` (the time it
/// failed, since nothing writes a FAILED record but the replay that leaves it).
///
/// Set by the one write entering FAILED (the exhausted CANCELLED) and removed by the
/// one write leaving it (the operator replay): with a keys-only projection the index
/// costs one write when a transaction fails and one when it is replayed, and listing
/// the FAILED transactions is a Query per shard instead of a Scan of the table.
/// Write-sharded like the reconciler index so that a burst of failures spreads over
/// the partitions.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct FailedKey {
    pub partition: String,
}

impl FailedKey {
    pub fn partition_for(shard: u16) -> String {
        format!("FAILED#{shard}")
    }

    /// The key a record in `status` carries, if any: only FAILED records have one.
    pub fn derive(status: Status, id: &TransactionId, shards: u16) -> Option<FailedKey> {
        (status == Status::Failed).then(|| FailedKey {
            partition: Self::partition_for(id.shard(shards)),
        })
    }
}

/// What the protocol itself notes on a record, kept apart from `last_reason` (the
/// external service's free text, which no decision reads): the request in flight is
/// the breaker's probe, the cycle or deadline is held by the breaker, or why the
/// transaction ended when the service's answer alone does not say it.
///
/// Records written before this attribute existed carried the mark in `last_reason`;
/// [`Mark::from_legacy_reason`] reads those, and only those (docs/design.md, "The
/// record").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
#[derive(IntoStaticStr, VariantArray, EnumString)]
#[strum(serialize_all = "SCREAMING_SNAKE_CASE")]
pub enum Mark {
    /// The request in flight went out as a half-open round's probe: its ERROR or its
    /// silence spends nothing of the transaction's own budgets.
    Probe,
    /// The breaker, OPEN, held the unanswered request (or, in a record written by a
    /// release before holds stopped writing the record, a retry cycle).
    HeldOpen,
    /// The breaker, HALF_OPEN with every probe of the round out, held it.
    HeldHalfOpen,
    /// FAILED: every technical re-send was answered ERROR.
    TechnicalExhausted,
    /// FAILED: a request stayed unanswered past every republish.
    Unanswered,
    /// SUCCEEDED by an operator's resolve (resolved by other means).
    Resolved,
    /// FAILED: the transaction's deadline passed (`TRANSACTION_DEADLINE_SECONDS`).
    Expired,
    /// FAILED: the service answered REJECTED (an operator case), never retried.
    Rejected,
    /// FAILED (outbox mode): an ERROR that does not say the call did not run (a
    /// timeout): the request may have been executed, so it is not sent again; an
    /// operator resolves or replays it.
    Ambiguous,
}

impl Mark {
    /// Every variant, in declaration order.
    pub const ALL: &'static [Mark] = <Self as VariantArray>::VARIANTS;

    /// The marks the previous release wrote into `last_reason` (before the `mark`
    /// attribute existed). Later marks were never written there by that release, so a
    /// `last_reason` equal to one of their names on an old item is the service's text.
    pub const LEGACY: [Mark; 6] = [
        Mark::Probe,
        Mark::HeldOpen,
        Mark::HeldHalfOpen,
        Mark::TechnicalExhausted,
        Mark::Unanswered,
        Mark::Resolved,
    ];

    /// The stored form (the `mark` attribute).
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    pub fn parse(s: &str) -> Option<Self> {
        s.parse().ok()
    }

    /// The `last_reason` the mark was written as before the `mark` attribute existed
    /// (and still is, alongside it, so that a function of the previous release reads a
    /// record this one wrote the way it always did).
    pub const fn legacy_reason(self) -> &'static str {
        match self {
            Mark::Probe => "BREAKER_PROBE",
            Mark::HeldOpen => "BREAKER_OPEN",
            Mark::HeldHalfOpen => "BREAKER_HALF_OPEN",
            Mark::TechnicalExhausted => "TECHNICAL_EXHAUSTED",
            Mark::Unanswered => "UNANSWERED",
            Mark::Resolved => "RESOLVED_BY_OTHER_MEANS",
            Mark::Expired => "EXPIRED",
            Mark::Rejected => "REJECTED",
            Mark::Ambiguous => "AMBIGUOUS",
        }
    }

    /// The mark of a record stored without the `mark` attribute: written by the
    /// previous release, whose writes put the mark in `last_reason`. Never used for a
    /// record that has the attribute.
    pub fn from_legacy_reason(reason: Option<&str>) -> Option<Mark> {
        let reason = reason?;
        Mark::LEGACY
            .into_iter()
            .find(|m| m.legacy_reason() == reason)
    }

    /// The breaker's marks: a probe, or a hold.
    pub const fn is_breakers(self) -> bool {
        matches!(self, Mark::Probe | Mark::HeldOpen | Mark::HeldHalfOpen)
    }

    /// For a breaker's hold, the state that caused it (`OPEN`, `HALF_OPEN`).
    pub const fn held_by(self) -> Option<&'static str> {
        match self {
            Mark::HeldOpen => Some("OPEN"),
            Mark::HeldHalfOpen => Some("HALF_OPEN"),
            _ => None,
        }
    }
}

impl fmt::Display for Mark {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Who an operator write was made by and why (`retryctl replay|resolve --reason`):
/// kept on the record until the next operator write, and in the audit entry of the
/// operator's transition.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct OperatorNote {
    /// The caller's identity (the ARN STS GetCallerIdentity gives).
    pub caller: String,
    /// The reason the operator gave, if any.
    pub reason: Option<String>,
}

/// Longest reason an operator may give, in characters.
pub const OPERATOR_REASON_MAX: usize = 256;

impl OperatorNote {
    /// A note, the reason checked: 1–256 characters, no control characters.
    pub fn new(caller: impl Into<String>, reason: Option<&str>) -> Result<Self, String> {
        if let Some(r) = reason {
            let n = r.chars().count();
            if n == 0 || n > OPERATOR_REASON_MAX {
                return Err(format!(
                    "must be 1–{OPERATOR_REASON_MAX} characters (it has {n})"
                ));
            }
            if r.chars().any(char::is_control) {
                return Err("must not contain control characters".into());
            }
        }
        Ok(Self {
            caller: caller.into(),
            reason: reason.map(str::to_owned),
        })
    }
}

/// Declares the record's counters: a counter is one line — its variant with what it
/// counts, its attribute, and what a write that says nothing of it does (`Keep`, or
/// `Clear` for a count that every other write resets). Guards, writes, the store's
/// encoding and the views all go through [`Counter::ALL`].
macro_rules! counters {
    ($( $(#[$doc:meta])* $v:ident = $attr:literal, $untouched:ident; )+) => {
        /// One of the record's counters ([`PerCounter`]).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        pub enum Counter { $( $(#[$doc])* $v, )+ }

        impl Counter {
            /// How many counters the record has.
            pub const N: usize = [$($attr),+].len();
            pub const ALL: [Counter; Counter::N] = [$(Counter::$v),+];

            /// Its attribute name, in the table and in JSON views.
            pub const fn attribute(self) -> &'static str {
                match self { $(Counter::$v => $attr,)+ }
            }

            /// What a write that does not name it does to it.
            pub const fn untouched(self) -> Change<u32> {
                match self { $(Counter::$v => Change::$untouched,)+ }
            }
        }
    };
}

counters! {
    /// Times request `current_attempt` was published again for want of an answer; a
    /// new request resets it. At ANSWER_REPUBLISH_MAX the next deadline ends the
    /// transaction FAILED/UNANSWERED.
    Republishes = "republishes", Keep;
    /// Times the reconciler requeued this retry cycle's event with no progress since
    /// (every other write is progress). At RECONCILE_REQUEUE_MAX the record is parked.
    Requeues = "requeues", Clear;
    /// The round: retry cycles opened by an ERROR answer since the start or the last
    /// replay. It numbers each re-send's schedule and audit rows, and travels in
    /// requests, answers and retry events as `round`.
    Round = "resends", Keep;
    /// Rounds opened by an ERROR that answered the breaker's probe: they test the
    /// service for everyone and spend no technical re-send (see
    /// [`PerCounter::technical_resends`]). Stored as `pauses`, the name the
    /// attribute has had since breaker holds were written on the record.
    ProbeErrors = "pauses", Keep;
}

/// One value per [`Counter`]: the record's counts, a guard's expected counts, a
/// write's changes. Shown as an object keyed by attribute names (flattened into the
/// record's own).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PerCounter<T>([T; Counter::N]);

impl<T: Default> Default for PerCounter<T> {
    fn default() -> Self {
        Self(std::array::from_fn(|_| T::default()))
    }
}

impl<T> PerCounter<T> {
    pub fn from_fn(mut f: impl FnMut(Counter) -> T) -> Self {
        Self(std::array::from_fn(|i| f(Counter::ALL[i])))
    }

    /// Each counter with its value.
    pub fn iter(&self) -> impl Iterator<Item = (Counter, &T)> {
        Counter::ALL.into_iter().zip(self.0.iter())
    }
}

impl<T> std::ops::Index<Counter> for PerCounter<T> {
    type Output = T;
    fn index(&self, c: Counter) -> &T {
        &self.0[c as usize]
    }
}

impl<T> std::ops::IndexMut<Counter> for PerCounter<T> {
    fn index_mut(&mut self, c: Counter) -> &mut T {
        &mut self.0[c as usize]
    }
}

impl PerCounter<u32> {
    /// Technical re-sends spent: the rounds not opened by a probe's ERROR. At
    /// TECHNICAL_RESEND_MAX the next ERROR that is not a probe's ends the transaction
    /// FAILED, `TECHNICAL_EXHAUSTED`. Derived, not stored: the releases that can run
    /// side by side all keep the round and the probe ERRORs, so it never falls out of
    /// step with them.
    pub fn technical_resends(&self) -> u32 {
        self[Counter::Round].saturating_sub(self[Counter::ProbeErrors])
    }
}

impl<T: Serialize> Serialize for PerCounter<T> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(Counter::N))?;
        for (c, v) in self.iter() {
            m.serialize_entry(c.attribute(), v)?;
        }
        m.end()
    }
}

impl<'de, T: Deserialize<'de> + Default> Deserialize<'de> for PerCounter<T> {
    /// From an object keyed by attribute names, other keys ignored (the record's own,
    /// when flattened into it); a missing counter takes its default.
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de> + Default> serde::de::Visitor<'de> for Visit<T> {
            type Value = PerCounter<T>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object keyed by counter attributes")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut a: A,
            ) -> Result<Self::Value, A::Error> {
                let mut out = PerCounter::<T>::default();
                while let Some(key) = a.next_key::<String>()? {
                    match Counter::ALL.into_iter().find(|c| c.attribute() == key) {
                        Some(c) => out[c] = a.next_value()?,
                        None => {
                            a.next_value::<serde::de::IgnoredAny>()?;
                        }
                    }
                }
                Ok(out)
            }
        }
        d.deserialize_map(Visit(std::marker::PhantomData))
    }
}

/// One item per transaction: the state the handlers agree on. Small on purpose: the
/// request payload lives apart, written once.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TransactionRecord {
    pub transaction_id: TransactionId,
    pub status: Status,
    /// Last attempt whose request left (article: intento_actual).
    pub current_attempt: Attempt,
    /// The attempt to send while SCHEDULING/SCHEDULED/SENDING, absent otherwise
    /// (intento_siguiente): n+1 after CANCELLED, n itself after ERROR.
    pub next_attempt: Option<Attempt>,
    pub max_attempts: MaxAttempts,
    /// UTC instant of the retry, jitter applied, persisted before any schedule exists.
    pub next_fire_at: Option<Timestamp>,
    /// Name of the last schedule created for this transaction.
    pub schedule_name: Option<ScheduleName>,
    pub last_outcome: Option<Outcome>,
    /// The external service's reason, as it gave it: shown, and used to pick a
    /// `BACKOFF_OVERRIDES` entry, never read for control.
    pub last_reason: Option<String>,
    /// The protocol's own note ([`Mark`]); absent when there is none.
    #[serde(default)]
    pub mark: Option<Mark>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    pub last_actor: Actor,
    /// Origin of the retry event that last moved the record, when one did.
    pub last_origin: Option<Origin>,
    /// Reconciler index key; present in every non-terminal state.
    pub reconcile: Option<ReconcileKey>,
    /// While IN_PROGRESS: the instant after which request `current_attempt` counts as
    /// unanswered (sent + ANSWER_TIMEOUT_SECONDS).
    #[serde(default)]
    pub answer_due_at: Option<Timestamp>,
    /// Its counters ([`Counter`]), each one count of one thing.
    #[serde(flatten)]
    pub counts: PerCounter<u32>,
    /// Failed-listing key; present only in FAILED.
    #[serde(default)]
    pub failed: Option<FailedKey>,
    /// Who made the last operator write, and why (boxed: rare, and the record is
    /// passed by value).
    #[serde(default)]
    pub operator: Option<Box<OperatorNote>>,
    /// The transaction's deadline when an operator replay set one; absent:
    /// `created_at` + TRANSACTION_DEADLINE_SECONDS ([`Deadline::of`]).
    #[serde(default)]
    pub expires_at: Option<Timestamp>,
    /// The producer's reference given at the start ([`CorrelationId`]): written by the
    /// create, never changed by a write, carried in every request. Absent on records
    /// started without one and on records written before the attribute existed.
    #[serde(default)]
    pub correlation_id: Option<CorrelationId>,
    /// Outbox mode: when the publisher claimed this SENDING record's request (set by
    /// [`Event::PublishClaimed`], removed by every write leaving SENDING). Absent on
    /// records never claimed and on records written before the attribute existed.
    #[serde(default)]
    pub publishing_since: Option<Timestamp>,
}

impl TransactionRecord {
    /// True when the request in flight went out as the circuit breaker's probe.
    pub fn is_probing(&self) -> bool {
        self.mark == Some(Mark::Probe)
    }

    /// A new transaction: IN_PROGRESS, attempt 1.
    pub fn started(
        transaction_id: TransactionId,
        max_attempts: MaxAttempts,
        now: Timestamp,
    ) -> Self {
        Self {
            transaction_id,
            status: CREATED,
            current_attempt: Attempt::FIRST,
            next_attempt: None,
            max_attempts,
            next_fire_at: None,
            schedule_name: None,
            last_outcome: None,
            last_reason: None,
            mark: None,
            created_at: now,
            updated_at: now,
            last_actor: Actor::Starter,
            last_origin: None,
            reconcile: None,
            answer_due_at: None,
            counts: PerCounter::default(),
            failed: None,
            operator: None,
            expires_at: None,
            correlation_id: None,
            publishing_since: None,
        }
    }

    /// A new transaction in outbox mode: SENDING attempt 1 (`next_attempt = 1`, round
    /// 0, the shape a technical re-send of attempt 1 has), its request left to the
    /// publisher; watched by the reconciler from now (partition by `shards`), so a
    /// request the publisher never sends is rescued after the threshold.
    pub fn started_queued(
        transaction_id: TransactionId,
        max_attempts: MaxAttempts,
        now: Timestamp,
        shards: u16,
    ) -> Self {
        let reconcile = ReconcileKey::derive(QUEUED, &transaction_id, shards.max(1), now, None);
        Self {
            status: QUEUED,
            next_attempt: Some(Attempt::FIRST),
            reconcile,
            ..Self::started(transaction_id, max_attempts, now)
        }
    }

    /// The same new record, started with the producer's reference `correlation_id`.
    pub fn correlated(mut self, correlation_id: Option<CorrelationId>) -> Self {
        self.correlation_id = correlation_id;
        self
    }

    /// The same record awaiting the answer to its current request until `due`,
    /// watched from `due − threshold` in the reconciler index (partition by `shards`).
    pub fn awaiting(mut self, due: Timestamp, threshold_ms: i64, shards: u16) -> Self {
        self.answer_due_at = Some(due);
        self.reconcile = Some(ReconcileKey {
            partition: ReconcileKey::partition_for(self.transaction_id.shard(shards)),
            at: due.plus_millis(-threshold_ms),
        });
        self
    }
}

/// Expected value of `max_attempts` relative to the current attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum BudgetGuard {
    /// `max_attempts > current_attempt`: a retry is still allowed.
    Remaining,
    /// `max_attempts <= current_attempt`: the budget is spent.
    Exhausted,
}

/// The conditions of a conditional write besides its status (the statuses it may
/// leave are its [`Arrow`]'s).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Guard {
    pub current_attempt: Option<Attempt>,
    pub next_attempt: Option<Attempt>,
    pub budget: Option<BudgetGuard>,
    /// The counts the write expects (an absent attribute is 0).
    pub counts: PerCounter<Option<u32>>,
    /// Whether the write expects the request in flight to be the breaker's probe
    /// (the record's mark is [`Mark::Probe`]) or not; `None`: either.
    pub probe: Option<bool>,
    /// The write expects the transaction's deadline still ahead (see [`Deadline`]).
    pub live: Option<Deadline>,
    /// The write expects no publisher's claim on the record (`publishing_since`
    /// absent): outbox mode's claim is taken once.
    #[serde(default)]
    pub unclaimed: bool,
}

/// The transaction deadline as a write's condition sees it at `now`: a record whose
/// `expires_at` is after `now`, or — without one — created after `born_after`
/// (`now` − TRANSACTION_DEADLINE_SECONDS), is live.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Deadline {
    pub now: Timestamp,
    pub born_after: Timestamp,
}

impl Deadline {
    /// The instant `rec` expires at under a deadline of `deadline_ms`.
    pub fn of(rec: &TransactionRecord, deadline_ms: i64) -> Timestamp {
        rec.expires_at
            .unwrap_or_else(|| rec.created_at.plus_millis(deadline_ms))
    }

    pub fn is_live(&self, rec: &TransactionRecord) -> bool {
        match rec.expires_at {
            Some(at) => at > self.now,
            None => rec.created_at > self.born_after,
        }
    }
}

impl Guard {
    pub fn holds(&self, rec: &TransactionRecord) -> bool {
        self.current_attempt
            .is_none_or(|a| rec.current_attempt == a)
            && self
                .next_attempt
                .is_none_or(|a| rec.next_attempt == Some(a))
            && match self.budget {
                None => true,
                Some(BudgetGuard::Remaining) => !rec.max_attempts.exhausted_by(rec.current_attempt),
                Some(BudgetGuard::Exhausted) => rec.max_attempts.exhausted_by(rec.current_attempt),
            }
            && self
                .counts
                .iter()
                .all(|(c, k)| k.is_none_or(|k| rec.counts[c] == k))
            && self.probe.is_none_or(|p| rec.is_probing() == p)
            && self.live.is_none_or(|d| d.is_live(rec))
            && (!self.unclaimed || rec.publishing_since.is_none())
    }
}

/// How a write changes an optional attribute.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Change<T> {
    #[default]
    Keep,
    Set(T),
    Clear,
}

impl<T: Clone> Change<T> {
    fn apply_to(&self, slot: &mut Option<T>) {
        match self {
            Change::Keep => {}
            Change::Set(v) => *slot = Some(v.clone()),
            Change::Clear => *slot = None,
        }
    }
}

/// The attributes a write sets besides its status (which is its arrow's).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Changes {
    pub current_attempt: Option<Attempt>,
    pub next_attempt: Change<Attempt>,
    pub max_attempts: Option<MaxAttempts>,
    pub next_fire_at: Change<Timestamp>,
    pub schedule_name: Change<ScheduleName>,
    pub last_outcome: Option<Outcome>,
    pub last_reason: Change<String>,
    /// The protocol's note. A write that records the service's reason clears it.
    pub mark: Change<Mark>,
    pub updated_at: Timestamp,
    pub actor: Actor,
    pub origin: Change<Origin>,
    /// Reconciler index key after the write (`Clear` when the record ends).
    pub reconcile: Change<ReconcileKey>,
    /// The answer deadline (`Clear` when leaving IN_PROGRESS).
    pub answer_due_at: Change<Timestamp>,
    /// The counters (`Clear` = 0; see [`Counter::untouched`] for a write that does
    /// not name one).
    pub counts: PerCounter<Change<u32>>,
    /// Failed-listing key after the write (`Set` entering FAILED, `Clear` leaving it).
    pub failed: Change<FailedKey>,
    /// The operator's note: set (or cleared) by operator writes, kept by the others.
    pub operator: Change<OperatorNote>,
    /// The deadline an operator replay gives (kept by every other write).
    pub expires_at: Change<Timestamp>,
    /// The publisher's claim (`Set` by [`Event::PublishClaimed`], `Clear` by every
    /// write leaving SENDING).
    pub publishing_since: Change<Timestamp>,
}

/// One conditional write: an arrow of the state machine on one transaction.
///
/// A write cannot name its new status: it is built from an [`Arrow`], and an arrow is
/// made only by asking [`transition`] — for every status it leaves, the same status it
/// enters. Decisions make their arrows with [`arrow!`](crate::arrow!), which evaluates
/// that question at compile time: an arrow the machine does not have does not compile.
/// A new arrow is therefore written once, as a line of [`transition`]; the writes that
/// take it follow.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Write {
    pub transaction_id: TransactionId,
    arrow: Arrow,
    pub guard: Guard,
    pub set: Changes,
}

/// The guard of a write did not hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[error("condition failed")]
pub struct ConditionFailed;

impl Write {
    /// A write taking `arrow` on `transaction_id`, written at `at` by `actor`, with no
    /// condition but the arrow's statuses and no other change: attempts, fire time,
    /// schedule name, outcome, reason, origin and republish count kept; the
    /// reconciler index key kept among the non-terminal statuses and removed otherwise
    /// (a write entering the cycle sets it with [`Write::open_cycle`]); the answer
    /// deadline kept only by an arrow that enters IN_PROGRESS.
    pub fn new(transaction_id: TransactionId, arrow: Arrow, at: Timestamp, actor: Actor) -> Self {
        Self {
            transaction_id,
            arrow,
            guard: Guard::default(),
            set: Changes {
                current_attempt: None,
                next_attempt: Change::Keep,
                max_attempts: None,
                next_fire_at: Change::Keep,
                schedule_name: Change::Keep,
                last_outcome: None,
                last_reason: Change::Keep,
                mark: Change::Keep,
                updated_at: at,
                actor,
                origin: Change::Keep,
                reconcile: if arrow.keeps_watch() {
                    Change::Keep
                } else {
                    Change::Clear
                },
                answer_due_at: if arrow.to() == Status::InProgress {
                    Change::Keep
                } else {
                    Change::Clear
                },
                counts: PerCounter::from_fn(Counter::untouched),
                failed: if arrow.from().contains(Status::Failed) {
                    Change::Clear
                } else {
                    Change::Keep
                },
                operator: Change::Keep,
                expires_at: Change::Keep,
                publishing_since: if arrow.from().contains(Status::Sending)
                    && arrow.to() != Status::Sending
                {
                    Change::Clear
                } else {
                    Change::Keep
                },
            },
        }
    }

    /// Enters FAILED listed: the failed-listing key of the record (partition by
    /// `shards`), so that `retryctl list --status FAILED` finds it without a Scan.
    pub fn listed_failed(mut self, shards: u16) -> Self {
        self.set.failed = match FailedKey::derive(self.arrow.to(), &self.transaction_id, shards) {
            Some(k) => Change::Set(k),
            None => Change::Clear,
        };
        self
    }

    /// Opens the retry cycle of attempt `next`, due at `fire_at` under the schedule
    /// `name`: the three are persisted with the reconciler index key the record keeps
    /// until it leaves the cycle (partition by `shards`, sorted by the fire time).
    pub fn open_cycle(
        mut self,
        next: Attempt,
        fire_at: Timestamp,
        name: ScheduleName,
        shards: u16,
    ) -> Self {
        self.set.next_attempt = Change::Set(next);
        self.set.next_fire_at = Change::Set(fire_at);
        self.set.schedule_name = Change::Set(name);
        self.set.reconcile = match ReconcileKey::derive(
            self.arrow.to(),
            &self.transaction_id,
            shards,
            self.set.updated_at,
            Some(fire_at),
        ) {
            Some(k) => Change::Set(k),
            None => Change::Clear,
        };
        self
    }

    /// An operator's write: records who made it and why (`None`: no note, and a
    /// previous operator's note is removed).
    pub fn noted(mut self, note: Option<&OperatorNote>) -> Self {
        self.set.operator = match note {
            Some(n) => Change::Set(n.clone()),
            None => Change::Clear,
        };
        self
    }

    /// Notes `mark` on the record. While records of the previous release may still
    /// be read by its functions, the mark is written as its old `last_reason` too;
    /// no decision of this one reads that text.
    pub fn marked(mut self, mark: Mark) -> Self {
        self.set.mark = Change::Set(mark);
        self.set.last_reason = Change::Set(mark.legacy_reason().to_owned());
        self
    }

    /// The same write, taken only from `from` (see [`Arrow::only_from`]).
    pub fn only_from(mut self, from: &[Status]) -> Result<Self, ArrowError> {
        self.arrow = self.arrow.only_from(from)?;
        Ok(self)
    }

    pub fn arrow(&self) -> Arrow {
        self.arrow
    }

    pub fn event(&self) -> Event {
        self.arrow.event()
    }

    /// The statuses the write may find.
    pub fn from(&self) -> StatusSet {
        self.arrow.from()
    }

    /// The status the write enters.
    pub fn to(&self) -> Status {
        self.arrow.to()
    }

    /// The status the write expects, when it expects exactly one.
    pub fn from_status(&self) -> Option<Status> {
        self.arrow.from().single()
    }

    /// True when the write applies to `rec`: its transaction, a status the arrow
    /// leaves, and the guard.
    pub fn holds(&self, rec: &TransactionRecord) -> bool {
        rec.transaction_id == self.transaction_id
            && self.arrow.from().contains(rec.status)
            && self.guard.holds(rec)
    }

    /// True when `rec` is what this very write leaves behind: its status, every
    /// attribute it sets or clears, its instant and its actor, and the guard still
    /// true of every attribute the write keeps (so some record the write applies to
    /// gives `rec`). A condition that fails on such a record failed on the write
    /// itself, applied once already: its answer was lost on the way back and the SDK
    /// sent it again. The write is done. Only a retried call can meet its own result:
    /// the executor asks only then ([`crate::ports::WriteOutcome::ConditionFailedOnRetry`]),
    /// as the same fields at the same instant could come from a twin run.
    pub fn produced(&self, rec: &TransactionRecord) -> bool {
        let (s, g) = (&self.set, &self.guard);
        let keeps_current = s.current_attempt.is_none();
        let guard_kept = g
            .current_attempt
            .is_none_or(|a| !keeps_current || rec.current_attempt == a)
            && g.next_attempt
                .is_none_or(|a| s.next_attempt != Change::Keep || rec.next_attempt == Some(a))
            && match g.budget {
                Some(BudgetGuard::Remaining) if keeps_current && s.max_attempts.is_none() => {
                    !rec.max_attempts.exhausted_by(rec.current_attempt)
                }
                Some(BudgetGuard::Exhausted) if keeps_current && s.max_attempts.is_none() => {
                    rec.max_attempts.exhausted_by(rec.current_attempt)
                }
                _ => true,
            }
            && g.counts
                .iter()
                .all(|(c, k)| k.is_none_or(|k| s.counts[c] != Change::Keep || rec.counts[c] == k))
            && g.probe
                .is_none_or(|p| s.mark != Change::Keep || rec.is_probing() == p)
            && g.live
                .is_none_or(|d| s.expires_at != Change::Keep || d.is_live(rec))
            && (!g.unclaimed
                || s.publishing_since != Change::Keep
                || rec.publishing_since.is_none());
        guard_kept && self.result_is(rec)
    }

    /// `rec` carries this write's status, instant, actor and every change it makes.
    fn result_is(&self, rec: &TransactionRecord) -> bool {
        fn matches<T: PartialEq>(change: &Change<T>, slot: &Option<T>) -> bool {
            match change {
                Change::Keep => true,
                Change::Set(v) => slot.as_ref() == Some(v),
                Change::Clear => slot.is_none(),
            }
        }
        let s = &self.set;
        rec.transaction_id == self.transaction_id
            && rec.status == self.arrow.to()
            && rec.updated_at == s.updated_at
            && rec.last_actor == s.actor
            && s.current_attempt.is_none_or(|a| rec.current_attempt == a)
            && s.max_attempts.is_none_or(|m| rec.max_attempts == m)
            && s.last_outcome.is_none_or(|o| rec.last_outcome == Some(o))
            && matches(&s.next_attempt, &rec.next_attempt)
            && matches(&s.next_fire_at, &rec.next_fire_at)
            && matches(&s.schedule_name, &rec.schedule_name)
            && matches(&s.last_reason, &rec.last_reason)
            && matches(&s.mark, &rec.mark)
            && matches(&s.origin, &rec.last_origin)
            && matches(&s.reconcile, &rec.reconcile)
            && matches(&s.answer_due_at, &rec.answer_due_at)
            && s.counts
                .iter()
                .all(|(c, change)| matches(change, &Some(rec.counts[c]).filter(|n| *n > 0)))
            && matches(&s.failed, &rec.failed)
            && matches(&s.expires_at, &rec.expires_at)
            && matches(&s.publishing_since, &rec.publishing_since)
            && match &s.operator {
                Change::Keep => true,
                Change::Set(n) => rec.operator.as_deref() == Some(n),
                Change::Clear => rec.operator.is_none(),
            }
    }

    /// The semantics of a conditional write: the new record if the condition holds.
    pub fn apply(&self, rec: &TransactionRecord) -> Result<TransactionRecord, ConditionFailed> {
        if !self.holds(rec) {
            return Err(ConditionFailed);
        }
        let mut next = rec.clone();
        let s = &self.set;
        next.status = self.arrow.to();
        if let Some(a) = s.current_attempt {
            next.current_attempt = a;
        }
        if let Some(m) = s.max_attempts {
            next.max_attempts = m;
        }
        s.next_attempt.apply_to(&mut next.next_attempt);
        s.next_fire_at.apply_to(&mut next.next_fire_at);
        s.schedule_name.apply_to(&mut next.schedule_name);
        if let Some(o) = s.last_outcome {
            next.last_outcome = Some(o);
        }
        s.last_reason.apply_to(&mut next.last_reason);
        s.mark.apply_to(&mut next.mark);
        next.updated_at = s.updated_at;
        next.last_actor = s.actor;
        s.origin.apply_to(&mut next.last_origin);
        s.reconcile.apply_to(&mut next.reconcile);
        s.answer_due_at.apply_to(&mut next.answer_due_at);
        for (c, change) in s.counts.iter() {
            let mut n = Some(next.counts[c]).filter(|n| *n > 0);
            change.apply_to(&mut n);
            next.counts[c] = n.unwrap_or(0);
        }
        s.failed.apply_to(&mut next.failed);
        s.expires_at.apply_to(&mut next.expires_at);
        s.publishing_since.apply_to(&mut next.publishing_since);
        match &s.operator {
            Change::Keep => {}
            Change::Set(n) => next.operator = Some(Box::new(n.clone())),
            Change::Clear => next.operator = None,
        }
        Ok(next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;
    use Event as E;
    use Status as S;

    /// GIVEN each counter WHEN a write expects it, sets it and clears it THEN the guard,
    /// the change and `produced` treat it as every other, and no other counter moves
    /// but those a write clears when it does not name them: a new counter is its line
    /// of `counters!` and needs nothing here.
    #[test]
    fn every_counter_is_guarded_set_and_cleared_alike() {
        let arrow = Arrow::new(&[S::InProgress], E::AnswerRepublished).unwrap();
        let id = crate::TransactionId::parse("TX-C").unwrap();
        let mut rec = TransactionRecord::started(
            id.clone(),
            MaxAttempts::new(3).unwrap(),
            Timestamp::from_millis(0),
        );
        rec.counts = PerCounter::from_fn(|c| c as u32 + 1);
        for c in Counter::ALL {
            let mut w = Write::new(
                id.clone(),
                arrow,
                Timestamp::from_millis(5),
                Actor::Reconciler,
            );
            w.guard.counts[c] = Some(rec.counts[c]);
            w.set.counts[c] = Change::Set(40);
            let next = w.apply(&rec).unwrap();
            assert!(w.produced(&next), "{c:?}");
            for other in Counter::ALL {
                let expected = match (other == c, other.untouched()) {
                    (true, _) => 40,
                    (false, Change::Clear) => 0,
                    (false, _) => rec.counts[other],
                };
                assert_eq!(next.counts[other], expected, "{c:?} moved {other:?}");
            }
            assert_eq!(
                w.apply(&next),
                Err(ConditionFailed),
                "{c:?}: guard on the old count"
            );
            let mut clear = w.clone();
            clear.guard.counts[c] = Some(40);
            clear.set.counts[c] = Change::Clear;
            let cleared = clear.apply(&next).unwrap();
            assert_eq!(cleared.counts[c], 0, "{c:?}");
            assert!(clear.produced(&cleared) && !clear.produced(&next), "{c:?}");
            // Shown under its attribute, and read back.
            let json = serde_json::to_value(&next).unwrap();
            assert_eq!(json[c.attribute()], 40, "{c:?}");
            let back: TransactionRecord = serde_json::from_value(json).unwrap();
            assert_eq!(back.counts, next.counts, "{c:?}");
        }
    }

    /// GIVEN every state (and `[*]`) WHEN every event arrives THEN the result is
    /// exactly the arrow of the diagram, or an IllegalTransition naming both.
    #[test]
    fn every_state_times_every_event() {
        let waiting: &[Status] = &[S::InProgress, S::Scheduling, S::Scheduled];
        let arrows: &[(&[Status], Event, Status)] = &[
            (waiting, E::Success, S::Succeeded),
            (waiting, E::Exhausted, S::Failed),
            (waiting, E::ResponseCancelledRetry, S::Scheduling),
            (&[S::InProgress], E::ResponseTechnicalRetry, S::Scheduling),
            (&[S::Scheduling], E::ScheduleConfirmed, S::Scheduled),
            (
                &[S::Scheduling, S::Scheduled],
                E::RetryEventAccepted,
                S::Sending,
            ),
            (&[S::Sending], E::RequestPublished, S::InProgress),
            (&[S::Failed], E::OperatorReplay, S::Scheduling),
            (&[S::InProgress], E::AnswerAwaited, S::InProgress),
            (&[S::InProgress], E::AnswerRepublished, S::InProgress),
            (&[S::Scheduling], E::ReconcilerRequeued, S::Scheduling),
            (&[S::Scheduled], E::ReconcilerRequeued, S::Scheduled),
            (&[S::Sending], E::PublishClaimed, S::Sending),
        ];
        // From `[*]`, then every arrow of the table from each of its states.
        let expected: Vec<(Option<Status>, Event, Status)> =
            [
                (None, E::Start, S::InProgress),
                (None, E::StartQueued, S::Sending),
            ]
            .into_iter()
            .chain(arrows.iter().flat_map(|&(froms, event, to)| {
                froms.iter().map(move |from| (Some(*from), event, to))
            }))
            .collect();
        assert_eq!(expected.len(), 22);
        let mut states = vec![None];
        states.extend(Status::ALL.iter().copied().map(Some));
        let mut legal = 0;
        for from in &states {
            for &event in Event::ALL {
                let want = expected
                    .iter()
                    .find(|(f, e, _)| f == from && *e == event)
                    .map(|(_, _, to)| *to);
                let got = transition(*from, event);
                match want {
                    Some(to) => {
                        assert_eq!(got, Ok(to), "{from:?} on {event:?}");
                        legal += 1;
                    }
                    None => assert_eq!(
                        got,
                        Err(IllegalTransition { from: *from, event }),
                        "{from:?} on {event:?} must be illegal"
                    ),
                }
            }
        }
        assert_eq!(legal, expected.len());
        assert_eq!(states.len() * Event::ALL.len(), 98);
    }

    #[test]
    fn terminal_states_have_no_way_out_but_operator_replay() {
        for &event in Event::ALL {
            assert!(transition(Some(S::Succeeded), event).is_err());
            if event != E::OperatorReplay {
                assert!(transition(Some(S::Failed), event).is_err());
            }
        }
    }

    #[test]
    fn illegal_transition_message_names_state_and_event() {
        let e = transition(Some(S::Sending), E::Success).unwrap_err();
        assert_eq!(e.to_string(), "no transition from SENDING on Success");
        let e = transition(None, E::Success).unwrap_err();
        assert_eq!(e.to_string(), "no transition from [*] on Success");
    }

    /// GIVEN every status, actor, mark, outcome and acknowledgement WHEN named (the
    /// stored, logged and printed form) and serialized THEN both say the same, and the
    /// name parses back: a name spelt its own way by one of the two derives fails here.
    #[test]
    fn names_are_the_serialized_form_and_parse_back() {
        use crate::decide::Ack;
        use crate::message::Outcome;
        fn same<T: Serialize + PartialEq + fmt::Debug>(
            all: &[T],
            name: impl Fn(&T) -> &'static str,
            parse: Option<fn(&str) -> Option<T>>,
        ) {
            for v in all {
                let json = serde_json::to_value(v).unwrap();
                assert_eq!(json, serde_json::json!(name(v)), "{v:?}");
                if let Some(parse) = parse {
                    assert_eq!(parse(name(v)).as_ref(), Some(v), "{v:?}");
                }
            }
        }
        same(S::ALL, |s| s.as_str(), Some(S::parse));
        same(Actor::ALL, |a| a.as_str(), Some(Actor::parse));
        same(Mark::ALL, |m| m.as_str(), Some(Mark::parse));
        same(Outcome::ALL, |o| o.as_str(), Some(Outcome::parse));
        // Acknowledgements are named, never parsed.
        same(Ack::ALL, |a| a.label(), None);
        assert_eq!(Status::parse("in_progress"), None, "names are exact");
        assert_eq!(
            Status::ALL.iter().filter(|s| s.is_intermediate()).count(),
            3
        );
        assert_eq!(Status::ALL.iter().filter(|s| s.is_terminal()).count(), 2);
    }

    fn record(status: Status, current: u32, next: Option<u32>, max: u32) -> TransactionRecord {
        let mut r = TransactionRecord::started(
            TransactionId::parse("TX-1").unwrap(),
            MaxAttempts::new(max).unwrap(),
            Timestamp::from_millis(0),
        );
        r.status = status;
        r.current_attempt = Attempt::new(current).unwrap();
        r.next_attempt = next.map(|n| Attempt::new(n).unwrap());
        r
    }

    fn id() -> TransactionId {
        TransactionId::parse("TX-1").unwrap()
    }

    fn write(from: &[Status], event: Event) -> Write {
        Write::new(
            id(),
            Arrow::new(from, event).unwrap(),
            Timestamp::from_millis(5),
            Actor::ResponseHandler,
        )
    }

    /// GIVEN a record created at 0 WHEN a write guarded by the deadline is tried
    /// THEN without `expires_at` it holds while the creation is after `now − deadline`,
    /// and with one (a replay's) it holds while that instant is ahead.
    #[test]
    fn the_deadline_guard_reads_a_replays_deadline_or_the_creation() {
        let rec = record(S::InProgress, 1, None, 4);
        let at = |now: i64, deadline: i64| Deadline {
            now: Timestamp::from_millis(now),
            born_after: Timestamp::from_millis(now - deadline),
        };
        assert!(at(999, 1000).is_live(&rec));
        assert!(
            !at(1000, 1000).is_live(&rec),
            "expired at created + deadline"
        );
        let replayed = TransactionRecord {
            expires_at: Some(Timestamp::from_millis(5000)),
            ..rec.clone()
        };
        assert!(at(4999, 1000).is_live(&replayed));
        assert!(!at(5000, 1000).is_live(&replayed));
        assert_eq!(Deadline::of(&rec, 1000), Timestamp::from_millis(1000));
        assert_eq!(Deadline::of(&replayed, 1000), Timestamp::from_millis(5000));
        let mut w = write(&[S::InProgress], E::ResponseCancelledRetry);
        w.guard.live = Some(at(1000, 1000));
        assert!(!w.holds(&rec));
        assert!(w.holds(&replayed));
    }

    #[test]
    fn guard_checks_status_attempts_and_budget() {
        let mut w = write(&[S::InProgress], E::ResponseCancelledRetry);
        w.guard = Guard {
            current_attempt: Some(Attempt::new(2).unwrap()),
            next_attempt: None,
            budget: Some(BudgetGuard::Remaining),
            counts: PerCounter::default(),
            probe: None,
            live: None,
            unclaimed: false,
        };
        assert!(w.holds(&record(S::InProgress, 2, None, 4)));
        assert!(
            !w.holds(&record(S::InProgress, 1, None, 4)),
            "stale attempt"
        );
        assert!(
            !w.holds(&record(S::Scheduling, 2, Some(3), 4)),
            "stale status"
        );
        assert!(!w.holds(&record(S::InProgress, 2, None, 2)), "budget spent");
        let mut exhausted = write(&[S::InProgress], E::Exhausted);
        exhausted.guard = Guard {
            budget: Some(BudgetGuard::Exhausted),
            ..w.guard.clone()
        };
        assert!(exhausted.holds(&record(S::InProgress, 2, None, 2)));
        assert!(!exhausted.holds(&record(S::InProgress, 2, None, 3)));
        let mut next = write(&[S::Scheduling, S::Scheduled], E::RetryEventAccepted);
        next.guard.next_attempt = Some(Attempt::new(3).unwrap());
        assert!(next.holds(&record(S::Scheduled, 2, Some(3), 4)));
        assert!(!next.holds(&record(S::Scheduled, 2, Some(4), 5)));
        assert!(!next.holds(&record(S::Sending, 2, Some(3), 4)));
        let mut other = record(S::Scheduled, 2, Some(3), 4);
        other.transaction_id = TransactionId::parse("TX-2").unwrap();
        assert!(!next.holds(&other), "another transaction");
    }

    /// Every set of statuses × every event: an arrow exactly when each status of the
    /// set has an arrow on the event and all of them enter the same status; the error
    /// says which of the three rules failed.
    #[test]
    fn an_arrow_is_made_only_from_the_transition_function() {
        let mut arrows = 0;
        for bits in 0u8..64 {
            let from: Vec<Status> = Status::ALL
                .iter()
                .copied()
                .filter(|s| bits & (1 << (*s as u8)) != 0)
                .collect();
            for &event in Event::ALL {
                let targets: Vec<Result<Status, IllegalTransition>> =
                    from.iter().map(|s| transition(Some(*s), event)).collect();
                let got = Arrow::new(&from, event);
                match (from.first(), targets.iter().find(|t| t.is_err())) {
                    (None, _) => assert_eq!(got, Err(ArrowError::NoSource { event })),
                    (Some(_), Some(Err(e))) => assert_eq!(got, Err(ArrowError::Illegal(*e))),
                    (Some(_), _) => {
                        let to: BTreeSet<Status> = targets.iter().filter_map(|t| t.ok()).collect();
                        if to.len() == 1 {
                            let a = got.unwrap();
                            assert_eq!(Some(a.to()), to.first().copied());
                            assert_eq!(a.from().iter().collect::<Vec<_>>(), from);
                            assert_eq!(a.event(), event);
                            arrows += 1;
                        } else {
                            assert!(
                                matches!(got, Err(ArrowError::Diverging { .. })),
                                "{from:?} {event:?}: {got:?}"
                            );
                        }
                    }
                }
            }
        }
        // One per non-empty subset of the sources of each event: Start and
        // StartQueued have none (they leave [*]); Success, Exhausted and
        // ResponseCancelledRetry 7 each, RetryEventAccepted 3, ReconcilerRequeued one
        // per status (its arrows diverge), the rest 1 each.
        assert_eq!(arrows, 3 * 7 + 3 + 2 + 7);
    }

    #[test]
    fn a_narrowed_arrow_leaves_only_statuses_it_left() {
        let a = Arrow::new(&[S::Scheduling, S::Scheduled], E::Success).unwrap();
        let one = a.only_from(&[S::Scheduled]).unwrap();
        assert_eq!(one.to(), S::Succeeded);
        assert_eq!(one.from().single(), Some(S::Scheduled));
        assert_eq!(
            one.only_from(&[S::Scheduling]),
            Err(ArrowError::NotLeft {
                event: E::Success,
                status: S::Scheduling
            })
        );
        assert_eq!(
            a.only_from(&[]),
            Err(ArrowError::NoSource { event: E::Success })
        );
        let e = ArrowError::NotLeft {
            event: E::Success,
            status: S::Sending,
        };
        assert_eq!(e.to_string(), "the arrow on Success does not leave SENDING");
    }

    #[test]
    fn the_macro_checks_the_arrow_at_compile_time() {
        const CONFIRM: Arrow = crate::arrow!([Status::Scheduling], Event::ScheduleConfirmed);
        assert_eq!(CONFIRM.to(), S::Scheduled);
        const CLAIM: Arrow = crate::arrow!([Status::Sending], Event::PublishClaimed);
        assert_eq!(CLAIM.to(), S::Sending);
        assert!(CLAIM.keeps_watch());
        assert_eq!(CREATED, S::InProgress);
        assert_eq!(QUEUED, S::Sending);
        let queued = TransactionRecord::started_queued(
            id(),
            MaxAttempts::new(3).unwrap(),
            Timestamp::from_millis(7),
            8,
        );
        assert_eq!(
            (queued.status, queued.current_attempt, queued.next_attempt),
            (S::Sending, Attempt::FIRST, Some(Attempt::FIRST))
        );
        assert_eq!(
            queued.reconcile,
            ReconcileKey::derive(S::Sending, &id(), 8, Timestamp::from_millis(7), None)
        );
        assert_eq!(queued.publishing_since, None);
        assert_eq!(
            TransactionRecord::started(
                id(),
                MaxAttempts::new(3).unwrap(),
                Timestamp::from_millis(0)
            )
            .status,
            CREATED
        );
    }

    /// A write enters its arrow's status, whatever else it sets, and keeps the
    /// reconciler index key exactly while it stays among the non-terminal statuses;
    /// only a write entering IN_PROGRESS keeps the answer deadline.
    #[test]
    fn a_write_enters_the_status_of_its_arrow() {
        let mut w = write(&[S::Scheduling], E::ScheduleConfirmed);
        w.guard.next_attempt = Some(Attempt::new(2).unwrap());
        let before = record(S::Scheduling, 1, Some(2), 4);
        let after = w.apply(&before).unwrap();
        assert_eq!(after.status, S::Scheduled);
        assert_eq!(w.set.reconcile, Change::Keep);
        assert_eq!(w.from_status(), Some(S::Scheduling));
        assert_eq!(w.set.answer_due_at, Change::Clear);
        let published = write(&[S::Sending], E::RequestPublished);
        assert_eq!(published.set.reconcile, Change::Keep);
        assert_eq!(published.set.answer_due_at, Change::Keep);
        let succeeded = write(&[S::InProgress], E::Success);
        assert_eq!(succeeded.set.reconcile, Change::Clear);
        assert_eq!(succeeded.set.answer_due_at, Change::Clear);
        assert_eq!(
            write(&[S::InProgress], E::Exhausted).set.reconcile,
            Change::Clear
        );
        let replayed = write(&[S::Failed], E::OperatorReplay);
        assert_eq!(replayed.set.reconcile, Change::Clear);
        let entering = write(&[S::InProgress], E::ResponseCancelledRetry);
        assert_eq!(entering.set.reconcile, Change::Keep);
        assert_eq!(entering.set.answer_due_at, Change::Clear);
        let fire = Timestamp::from_millis(9_000);
        let opened = entering.open_cycle(
            Attempt::new(2).unwrap(),
            fire,
            ScheduleName::for_retry(&id(), Attempt::new(2).unwrap()),
            8,
        );
        assert_eq!(
            opened.set.reconcile,
            Change::Set(
                ReconcileKey::derive(
                    S::Scheduling,
                    &id(),
                    8,
                    Timestamp::from_millis(5),
                    Some(fire)
                )
                .unwrap()
            )
        );
        assert_eq!(opened.to(), S::Scheduling);
        assert_eq!(
            write(&[S::Scheduling, S::Scheduled], E::RetryEventAccepted).from_status(),
            None
        );
    }

    /// GIVEN the publisher's claim WHEN applied THEN it holds only without a claim,
    /// sets it, and recognises its own result (a retried call meeting it) but not
    /// another claim; a write leaving SENDING removes it, one staying keeps it.
    #[test]
    fn the_claim_is_taken_once_and_removed_on_leaving_sending() {
        let rec = record(S::Sending, 1, Some(2), 4);
        let mut claim = write(&[S::Sending], E::PublishClaimed);
        claim.guard.unclaimed = true;
        claim.set.publishing_since = Change::Set(Timestamp::from_millis(5));
        let claimed = claim.apply(&rec).unwrap();
        assert_eq!(claimed.publishing_since, Some(Timestamp::from_millis(5)));
        assert_eq!(claim.apply(&claimed), Err(ConditionFailed));
        assert!(claim.produced(&claimed));
        let other = TransactionRecord {
            publishing_since: Some(Timestamp::from_millis(4)),
            ..claimed.clone()
        };
        assert!(!claim.produced(&other));
        let published = write(&[S::Sending], E::RequestPublished);
        assert_eq!(published.set.publishing_since, Change::Clear);
        assert_eq!(published.apply(&claimed).unwrap().publishing_since, None);
        assert_eq!(
            write(&[S::Sending], E::PublishClaimed).set.publishing_since,
            Change::Keep
        );
        assert_eq!(
            write(&[S::Scheduled], E::RetryEventAccepted)
                .set
                .publishing_since,
            Change::Keep
        );
    }

    #[test]
    fn reconcile_key_is_sparse_and_sharded() {
        let id = TransactionId::parse("TX-1").unwrap();
        let t = Timestamp::from_millis(1_000);
        let fire = Timestamp::from_millis(9_000);
        assert_eq!(
            ReconcileKey::derive(S::InProgress, &id, 8, t, None),
            Some(ReconcileKey {
                partition: ReconcileKey::partition_for(id.shard(8)),
                at: t
            })
        );
        assert_eq!(ReconcileKey::derive(S::Succeeded, &id, 8, t, None), None);
        assert_eq!(ReconcileKey::derive(S::Failed, &id, 8, t, None), None);
        // One key for the whole cycle: whatever the intermediate status and the
        // last write's time, the shard and the fire time.
        let keys: Vec<ReconcileKey> = S::INTERMEDIATE
            .iter()
            .zip([
                t,
                Timestamp::from_millis(2_000),
                Timestamp::from_millis(12_000),
            ])
            .map(|(s, at)| ReconcileKey::derive(*s, &id, 8, at, Some(fire)).unwrap())
            .collect();
        assert!(keys.iter().all(|k| *k == keys[0]), "{keys:?}");
        assert_eq!(keys[0].at, fire);
        assert_eq!(keys[0].partition, format!("CYCLE#{}", id.shard(8)));
        // Shards spread the partitions.
        let parts: std::collections::BTreeSet<String> = (0..200)
            .map(|n| {
                let id = TransactionId::parse(&format!("TX-{n}")).unwrap();
                ReconcileKey::derive(S::Sending, &id, 8, t, Some(fire))
                    .unwrap()
                    .partition
            })
            .collect();
        assert_eq!(parts.len(), 8);
    }

    #[test]
    fn failed_key_is_sparse_and_sharded() {
        let id = TransactionId::parse("TX-1").unwrap();
        for &s in Status::ALL {
            let k = FailedKey::derive(s, &id, 8);
            assert_eq!(k.is_some(), s == S::Failed, "{s}");
        }
        assert_eq!(
            FailedKey::derive(S::Failed, &id, 8).unwrap().partition,
            format!("FAILED#{}", id.shard(8))
        );
        // The partition is never one the reconciler queries.
        assert_ne!(FailedKey::partition_for(0), ReconcileKey::partition_for(0));
    }
}

#[cfg(test)]
mod size {
    use super::*;

    /// The protocol's size as docs/design.md publishes it: the legal arrows (each
    /// (status or `[*]`, event) pair `transition` accepts), the events, and the record's
    /// fields. A change to any of them fails here until the document says it.
    #[test]
    fn the_published_size_of_the_protocol_is_the_machines() {
        let froms = std::iter::once(None).chain(Status::ALL.iter().copied().map(Some));
        let arrows = froms
            .flat_map(|from| Event::ALL.iter().copied().map(move |e| (from, e)))
            .filter(|(from, e)| transition(*from, *e).is_ok())
            .count();
        let record = TransactionRecord::started(
            crate::TransactionId::parse("TX-1").unwrap(),
            MaxAttempts::new(1).unwrap(),
            Timestamp::from_millis(0),
        );
        let fields = match serde_json::to_value(&record).unwrap() {
            serde_json::Value::Object(m) => m.len(),
            other => panic!("{other}"),
        };
        let line = format!(
            "Its size: {arrows} legal arrows, {} events, {fields} record fields.",
            Event::ALL.len()
        );
        let doc = include_str!("../../../docs/design.md");
        assert!(doc.contains(&line), "docs/design.md should say: {line}");
    }
}
