//! The whole state machine in one file.
//!
//! ```text
//! [*] → IN_PROGRESS(n)                 request n sent                       Event::Start
//! IN_PROGRESS(n) → SUCCEEDED           response SUCCESS for n               Event::ResponseSuccess
//! IN_PROGRESS(n) → FAILED              CANCELLED for n, n = max_attempts    Event::ResponseCancelledExhausted
//! IN_PROGRESS(n) → SCHEDULING          CANCELLED for n < max_attempts       Event::ResponseCancelledRetry
//! SCHEDULING → SCHEDULED               schedule created (or existed)        Event::ScheduleConfirmed
//! SCHEDULING → SENDING                 retry event before A confirmed       Event::RetryEventAccepted
//! SCHEDULED  → SENDING                 retry event for n+1                  Event::RetryEventAccepted
//! SENDING    → SENDING                 redelivery resumes the publish       Event::RetryEventAccepted
//! SENDING    → IN_PROGRESS(n+1)        request n+1 published                Event::RequestPublished
//! SCHEDULING | SCHEDULED → SUCCEEDED   resolved by other means              Event::ResolvedElsewhere
//! FAILED → SCHEDULING                  operator replay (`retryctl replay`)  Event::OperatorReplay
//! ```
//!
//! The last arrow is the only one beyond DESIGN.md: an operator reopening an exhausted
//! transaction with a fresh budget. "Resolved by other means" is allowed from
//! SCHEDULING and SCHEDULED but not from SENDING: there the request is in flight and
//! the external service's response decides.
//!
//! Every arrow is a **conditional write** ([`Write`]): it applies only when the stored
//! status and attempt are exactly the expected ones ([`Guard`]). [`Write::apply`] is
//! the semantics every store implements (the DynamoDB adapter translates the same
//! guard into a `ConditionExpression`).

use crate::ids::{Attempt, MaxAttempts, ScheduleName, Timestamp, TransactionId};
use crate::message::{Origin, Outcome};
use serde::{Deserialize, Serialize};
use std::fmt;
use thiserror::Error;

/// The six statuses of a transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
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
    pub const ALL: [Status; 6] = [
        Status::InProgress,
        Status::Scheduling,
        Status::Scheduled,
        Status::Sending,
        Status::Succeeded,
        Status::Failed,
    ];

    /// The states the reconciler watches (they carry the reconciler index key).
    pub const INTERMEDIATE: [Status; 3] = [Status::Scheduling, Status::Scheduled, Status::Sending];

    pub fn as_str(self) -> &'static str {
        match self {
            Status::InProgress => "IN_PROGRESS",
            Status::Scheduling => "SCHEDULING",
            Status::Scheduled => "SCHEDULED",
            Status::Sending => "SENDING",
            Status::Succeeded => "SUCCEEDED",
            Status::Failed => "FAILED",
        }
    }

    pub fn parse(raw: &str) -> Option<Status> {
        Status::ALL.into_iter().find(|s| s.as_str() == raw)
    }

    pub fn is_terminal(self) -> bool {
        matches!(self, Status::Succeeded | Status::Failed)
    }

    pub fn is_intermediate(self) -> bool {
        Status::INTERMEDIATE.contains(&self)
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
pub enum Event {
    Start,
    ResponseSuccess,
    ResponseCancelledExhausted,
    ResponseCancelledRetry,
    ScheduleConfirmed,
    RetryEventAccepted,
    RequestPublished,
    ResolvedElsewhere,
    OperatorReplay,
}

impl Event {
    pub const ALL: [Event; 9] = [
        Event::Start,
        Event::ResponseSuccess,
        Event::ResponseCancelledExhausted,
        Event::ResponseCancelledRetry,
        Event::ScheduleConfirmed,
        Event::RetryEventAccepted,
        Event::RequestPublished,
        Event::ResolvedElsewhere,
        Event::OperatorReplay,
    ];
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
pub fn transition(from: Option<Status>, event: Event) -> Result<Status, IllegalTransition> {
    use Event as E;
    use Status as S;
    match (from, event) {
        (None, E::Start) => Ok(S::InProgress),
        (Some(S::InProgress), E::ResponseSuccess) => Ok(S::Succeeded),
        (Some(S::InProgress), E::ResponseCancelledExhausted) => Ok(S::Failed),
        (Some(S::InProgress), E::ResponseCancelledRetry) => Ok(S::Scheduling),
        (Some(S::Scheduling), E::ScheduleConfirmed) => Ok(S::Scheduled),
        (Some(S::Scheduling | S::Scheduled | S::Sending), E::RetryEventAccepted) => Ok(S::Sending),
        (Some(S::Sending), E::RequestPublished) => Ok(S::InProgress),
        (Some(S::Scheduling | S::Scheduled), E::ResolvedElsewhere) => Ok(S::Succeeded),
        (Some(S::Failed), E::OperatorReplay) => Ok(S::Scheduling),
        (from, event) => Err(IllegalTransition { from, event }),
    }
}

/// Who wrote a record (kept on the item and copied into the audit trail).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Actor {
    /// The library operation "start a transaction" (services and `retryctl submit`).
    Starter,
    ResponseHandler,
    RetryHandler,
    Reconciler,
    /// `retryctl resolve` / `replay`, or a service resolving by other means.
    Operator,
}

impl Actor {
    pub fn as_str(self) -> &'static str {
        match self {
            Actor::Starter => "starter",
            Actor::ResponseHandler => "response-handler",
            Actor::RetryHandler => "retry-handler",
            Actor::Reconciler => "reconciler",
            Actor::Operator => "operator",
        }
    }

    pub fn parse(raw: &str) -> Option<Actor> {
        [
            Actor::Starter,
            Actor::ResponseHandler,
            Actor::RetryHandler,
            Actor::Reconciler,
            Actor::Operator,
        ]
        .into_iter()
        .find(|a| a.as_str() == raw)
    }
}

/// The reconciler index key of a record in an intermediate state: partition
/// `CYCLE#<shard>` (write-sharded so no partition takes all writes) and sort key the
/// retry's persisted fire time (`next_fire_at`).
///
/// The key is set once per retry cycle, when the record enters SCHEDULING (the fire
/// time is persisted by that same write), kept unchanged through SCHEDULED and
/// SENDING, and removed when the record leaves the intermediate states. With a
/// keys-only projection the index is therefore written twice per cycle (one put, one
/// delete) instead of at every transition; the reconciler queries `at` before
/// `now − threshold` — only cycles whose fire time is long past, which is exactly what
/// it may have to act on — and reads each such record before deciding by its status
/// ([`crate::decide::is_stuck`]). Records in other states carry no key (the index is
/// sparse).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ReconcileKey {
    pub partition: String,
    pub at: Timestamp,
}

impl ReconcileKey {
    pub fn partition_for(shard: u16) -> String {
        format!("CYCLE#{shard}")
    }

    /// The key a record with these values carries, if any: the same for every
    /// intermediate status of one cycle.
    pub fn derive(
        status: Status,
        id: &TransactionId,
        shards: u16,
        updated_at: Timestamp,
        next_fire_at: Option<Timestamp>,
    ) -> Option<ReconcileKey> {
        if !status.is_intermediate() {
            return None;
        }
        Some(ReconcileKey {
            partition: Self::partition_for(id.shard(shards)),
            at: next_fire_at.unwrap_or(updated_at),
        })
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
    /// n+1 while SCHEDULING/SCHEDULED/SENDING, absent otherwise (intento_siguiente).
    pub next_attempt: Option<Attempt>,
    pub max_attempts: MaxAttempts,
    /// UTC instant of the retry, jitter applied, persisted before any schedule exists.
    pub next_fire_at: Option<Timestamp>,
    /// Name of the last schedule created for this transaction.
    pub schedule_name: Option<ScheduleName>,
    pub last_outcome: Option<Outcome>,
    pub last_reason: Option<String>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    pub last_actor: Actor,
    /// Origin of the retry event that last moved the record, when one did.
    pub last_origin: Option<Origin>,
    /// Reconciler index key; present only in intermediate states.
    pub reconcile: Option<ReconcileKey>,
}

impl TransactionRecord {
    /// A new transaction: IN_PROGRESS, attempt 1.
    pub fn started(
        transaction_id: TransactionId,
        max_attempts: MaxAttempts,
        now: Timestamp,
    ) -> Self {
        Self {
            transaction_id,
            status: Status::InProgress,
            current_attempt: Attempt::FIRST,
            next_attempt: None,
            max_attempts,
            next_fire_at: None,
            schedule_name: None,
            last_outcome: None,
            last_reason: None,
            created_at: now,
            updated_at: now,
            last_actor: Actor::Starter,
            last_origin: None,
            reconcile: None,
        }
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

/// The condition of a conditional write.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Guard {
    /// `status` must be one of these (never empty).
    pub statuses: Vec<Status>,
    pub current_attempt: Option<Attempt>,
    pub next_attempt: Option<Attempt>,
    pub budget: Option<BudgetGuard>,
}

impl Guard {
    pub fn holds(&self, rec: &TransactionRecord) -> bool {
        self.statuses.contains(&rec.status)
            && self
                .current_attempt
                .is_none_or(|a| rec.current_attempt == a)
            && self
                .next_attempt
                .is_none_or(|a| rec.next_attempt == Some(a))
            && match self.budget {
                None => true,
                Some(BudgetGuard::Remaining) => !rec.max_attempts.exhausted_by(rec.current_attempt),
                Some(BudgetGuard::Exhausted) => rec.max_attempts.exhausted_by(rec.current_attempt),
            }
    }
}

/// How a write changes an optional attribute.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Change<T> {
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

/// The attributes a write sets.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Changes {
    pub status: Status,
    pub current_attempt: Option<Attempt>,
    pub next_attempt: Change<Attempt>,
    pub max_attempts: Option<MaxAttempts>,
    pub next_fire_at: Change<Timestamp>,
    pub schedule_name: Change<ScheduleName>,
    pub last_outcome: Option<Outcome>,
    pub last_reason: Change<String>,
    pub updated_at: Timestamp,
    pub actor: Actor,
    pub origin: Change<Origin>,
    /// Reconciler index key after the write (`Clear` when leaving intermediate states).
    pub reconcile: Change<ReconcileKey>,
}

/// One conditional write: an arrow of the state machine on one transaction.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Write {
    pub transaction_id: TransactionId,
    pub event: Event,
    pub guard: Guard,
    pub set: Changes,
}

/// The guard of a write did not hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[error("condition failed")]
pub struct ConditionFailed;

impl Write {
    /// The semantics of a conditional write: the new record if the guard holds.
    pub fn apply(&self, rec: &TransactionRecord) -> Result<TransactionRecord, ConditionFailed> {
        if rec.transaction_id != self.transaction_id || !self.guard.holds(rec) {
            return Err(ConditionFailed);
        }
        let mut next = rec.clone();
        let s = &self.set;
        next.status = s.status;
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
        next.updated_at = s.updated_at;
        next.last_actor = s.actor;
        s.origin.apply_to(&mut next.last_origin);
        s.reconcile.apply_to(&mut next.reconcile);
        Ok(next)
    }

    /// The status the guard expects, when it names exactly one.
    pub fn from_status(&self) -> Option<Status> {
        match self.guard.statuses.as_slice() {
            [one] => Some(*one),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Event as E;
    use Status as S;

    /// GIVEN every state (and `[*]`) WHEN every event arrives THEN the result is
    /// exactly the arrow of the diagram, or an IllegalTransition naming both.
    #[test]
    fn every_state_times_every_event() {
        let expected: &[(Option<Status>, Event, Option<Status>)] = &[
            (None, E::Start, Some(S::InProgress)),
            (Some(S::InProgress), E::ResponseSuccess, Some(S::Succeeded)),
            (
                Some(S::InProgress),
                E::ResponseCancelledExhausted,
                Some(S::Failed),
            ),
            (
                Some(S::InProgress),
                E::ResponseCancelledRetry,
                Some(S::Scheduling),
            ),
            (
                Some(S::Scheduling),
                E::ScheduleConfirmed,
                Some(S::Scheduled),
            ),
            (Some(S::Scheduling), E::RetryEventAccepted, Some(S::Sending)),
            (Some(S::Scheduled), E::RetryEventAccepted, Some(S::Sending)),
            (Some(S::Sending), E::RetryEventAccepted, Some(S::Sending)),
            (Some(S::Sending), E::RequestPublished, Some(S::InProgress)),
            (
                Some(S::Scheduling),
                E::ResolvedElsewhere,
                Some(S::Succeeded),
            ),
            (Some(S::Scheduled), E::ResolvedElsewhere, Some(S::Succeeded)),
            (Some(S::Failed), E::OperatorReplay, Some(S::Scheduling)),
        ];
        let mut states = vec![None];
        states.extend(Status::ALL.map(Some));
        let mut legal = 0;
        for from in &states {
            for event in Event::ALL {
                let want = expected
                    .iter()
                    .find(|(f, e, _)| f == from && *e == event)
                    .and_then(|(_, _, to)| *to);
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
        assert_eq!(states.len() * Event::ALL.len(), 63);
    }

    #[test]
    fn terminal_states_have_no_way_out_but_operator_replay() {
        for event in Event::ALL {
            assert!(transition(Some(S::Succeeded), event).is_err());
            if event != E::OperatorReplay {
                assert!(transition(Some(S::Failed), event).is_err());
            }
        }
    }

    #[test]
    fn illegal_transition_message_names_state_and_event() {
        let e = transition(Some(S::Sending), E::ResolvedElsewhere).unwrap_err();
        assert_eq!(
            e.to_string(),
            "no transition from SENDING on ResolvedElsewhere"
        );
        let e = transition(None, E::ResponseSuccess).unwrap_err();
        assert_eq!(e.to_string(), "no transition from [*] on ResponseSuccess");
    }

    #[test]
    fn status_names_round_trip() {
        for s in Status::ALL {
            assert_eq!(Status::parse(s.as_str()), Some(s));
            assert_eq!(
                serde_json::to_string(&s).unwrap(),
                format!("\"{}\"", s.as_str())
            );
        }
        assert_eq!(Status::parse("in_progress"), None);
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

    #[test]
    fn guard_checks_status_attempts_and_budget() {
        let g = Guard {
            statuses: vec![S::InProgress],
            current_attempt: Some(Attempt::new(2).unwrap()),
            next_attempt: None,
            budget: Some(BudgetGuard::Remaining),
        };
        assert!(g.holds(&record(S::InProgress, 2, None, 4)));
        assert!(
            !g.holds(&record(S::InProgress, 1, None, 4)),
            "stale attempt"
        );
        assert!(
            !g.holds(&record(S::Scheduling, 2, Some(3), 4)),
            "stale status"
        );
        assert!(!g.holds(&record(S::InProgress, 2, None, 2)), "budget spent");
        let exhausted = Guard {
            budget: Some(BudgetGuard::Exhausted),
            ..g.clone()
        };
        assert!(exhausted.holds(&record(S::InProgress, 2, None, 2)));
        assert!(!exhausted.holds(&record(S::InProgress, 2, None, 3)));
        let next = Guard {
            statuses: vec![S::Scheduling, S::Scheduled],
            current_attempt: None,
            next_attempt: Some(Attempt::new(3).unwrap()),
            budget: None,
        };
        assert!(next.holds(&record(S::Scheduled, 2, Some(3), 4)));
        assert!(!next.holds(&record(S::Scheduled, 2, Some(4), 5)));
        assert!(!next.holds(&record(S::Sending, 2, Some(3), 4)));
    }

    #[test]
    fn reconcile_key_is_sparse_and_sharded() {
        let id = TransactionId::parse("TX-1").unwrap();
        let t = Timestamp::from_millis(1_000);
        let fire = Timestamp::from_millis(9_000);
        assert_eq!(ReconcileKey::derive(S::InProgress, &id, 8, t, None), None);
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
}
