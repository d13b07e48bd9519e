//! The append-only audit trail: one row per transition.
//!
//! Rows are derived from the change a transition made (the record before and after),
//! so any store that can hand over both images (DynamoDB Streams with
//! `NEW_AND_OLD_IMAGES`, an in-memory store) produces the same rows. The row key is
//! deterministic, so a redelivered change writes the same row again instead of a
//! second one.

use crate::ids::{Attempt, ScheduleName, Timestamp, TransactionId};
use crate::machine::{Actor, Status, TransactionRecord};
use crate::message::{Origin, Outcome};
use serde::{Deserialize, Serialize};

/// One transition, as kept in the audit table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditEntry {
    pub transaction_id: TransactionId,
    /// When the transition was written (the record's `updated_at`).
    pub at: Timestamp,
    /// Who wrote it.
    pub actor: Actor,
    /// `None` for the creation of the transaction.
    pub from: Option<Status>,
    pub to: Status,
    pub current_attempt: Attempt,
    pub next_attempt: Option<Attempt>,
    pub max_attempts: u32,
    pub schedule_name: Option<ScheduleName>,
    pub next_fire_at: Option<Timestamp>,
    pub outcome: Option<Outcome>,
    pub reason: Option<String>,
    pub origin: Option<Origin>,
}

impl AuditEntry {
    /// The row for a change, or `None` when the change was not a transition (the same
    /// status, attempt and write time: a no-op rewrite).
    pub fn from_change(old: Option<&TransactionRecord>, new: &TransactionRecord) -> Option<Self> {
        if let Some(o) = old {
            if o.status == new.status
                && o.current_attempt == new.current_attempt
                && o.next_attempt == new.next_attempt
                && o.updated_at == new.updated_at
            {
                return None;
            }
        }
        Some(Self {
            transaction_id: new.transaction_id.clone(),
            at: new.updated_at,
            actor: new.last_actor,
            from: old.map(|o| o.status),
            to: new.status,
            current_attempt: new.current_attempt,
            next_attempt: new.next_attempt,
            max_attempts: new.max_attempts.get(),
            schedule_name: new.schedule_name.clone(),
            next_fire_at: new.next_fire_at,
            outcome: new.last_outcome,
            reason: new.last_reason.clone(),
            origin: new.last_origin,
        })
    }

    /// Sort key within the transaction: `<at>#<attempt, 4 digits>#<rank>-<to>`.
    ///
    /// Sorts as text in the order the transitions happened, also when one run writes
    /// two transitions at the same instant (IN_PROGRESS → SCHEDULING → SCHEDULED in one
    /// response, SENDING(n) → IN_PROGRESS(n+1) in one retry): the attempt and then the
    /// status's place in the lifecycle break the tie. A redelivered change yields the
    /// same key, so it rewrites its row instead of adding one.
    pub fn sort_key(&self) -> String {
        let rank = match self.to {
            Status::InProgress => 0,
            Status::Scheduling => 1,
            Status::Scheduled => 2,
            Status::Sending => 3,
            Status::Succeeded => 4,
            Status::Failed => 5,
        };
        format!(
            "{}#{:04}#{rank}-{}",
            self.at.to_rfc3339(),
            self.current_attempt.get(),
            self.to.as_str()
        )
    }

    /// True when this transition exhausted the budget (the business alert).
    pub fn is_exhaustion(&self) -> bool {
        self.to == Status::Failed && self.from == Some(Status::InProgress)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::MaxAttempts;

    fn rec(status: Status, at: i64) -> TransactionRecord {
        let mut r = TransactionRecord::started(
            TransactionId::parse("TX-1").unwrap(),
            MaxAttempts::new(3).unwrap(),
            Timestamp::from_millis(0),
        );
        r.status = status;
        r.updated_at = Timestamp::from_millis(at);
        r
    }

    #[test]
    fn creation_and_transitions_make_rows() {
        let start = rec(Status::InProgress, 0);
        let row = AuditEntry::from_change(None, &start).unwrap();
        assert_eq!(row.from, None);
        assert_eq!(row.to, Status::InProgress);
        assert_eq!(row.actor, Actor::Starter);
        assert_eq!(
            row.sort_key(),
            "1970-01-01T00:00:00.000Z#0001#0-IN_PROGRESS"
        );

        let mut failed = rec(Status::Failed, 5);
        failed.last_actor = Actor::ResponseHandler;
        let row = AuditEntry::from_change(Some(&start), &failed).unwrap();
        assert_eq!(row.from, Some(Status::InProgress));
        assert!(row.is_exhaustion());
    }

    /// One run writes several transitions at the same instant; their keys must still
    /// sort in the order they happened.
    #[test]
    fn keys_sort_in_lifecycle_order_at_one_instant() {
        let chain = [
            (Status::InProgress, 2),
            (Status::Scheduling, 2),
            (Status::Scheduled, 2),
            (Status::Sending, 2),
            (Status::InProgress, 3),
            (Status::Succeeded, 3),
        ];
        let keys: Vec<String> = chain
            .iter()
            .map(|(status, attempt)| {
                let mut r = rec(*status, 42);
                r.current_attempt = crate::ids::Attempt::new(*attempt).unwrap();
                AuditEntry::from_change(None, &r).unwrap().sort_key()
            })
            .collect();
        let mut sorted = keys.clone();
        sorted.sort();
        assert_eq!(keys, sorted);
        let mut late = rec(Status::Failed, 41);
        late.current_attempt = crate::ids::Attempt::new(10).unwrap();
        assert!(AuditEntry::from_change(None, &late).unwrap().sort_key() < keys[0]);
    }

    #[test]
    fn a_no_op_rewrite_makes_no_row() {
        let a = rec(Status::Scheduled, 7);
        assert_eq!(AuditEntry::from_change(Some(&a), &a), None);
    }
}
