//! The append-only audit trail: one entry per transition.
//!
//! Entries are derived from the change a transition made (the record before and
//! after), so any store that can hand over both images (DynamoDB Streams with
//! `NEW_AND_OLD_IMAGES`, an in-memory store) produces the same entries. Each entry has
//! a deterministic key ([`AuditEntry::sort_key`]), so a redelivered change writes the
//! same entry again instead of a second one.
//!
//! Stored, the entries are grouped one item per handler run: the two transitions one
//! run writes share a [`AuditEntry::group_key`] (the response handler's IN_PROGRESS(n)
//! → SCHEDULING → SCHEDULED, the retry handler's SCHEDULED → SENDING →
//! IN_PROGRESS(n+1)), so a store can keep them in one item written once.

use crate::ids::{Attempt, ScheduleName, Timestamp, TransactionId};
use crate::machine::{Actor, OperatorNote, Status, TransactionRecord};
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
    /// Who made an operator's transition and why (`None` for the other actors).
    #[serde(default)]
    pub operator: Option<OperatorNote>,
    /// Set on an entry that records an event, not a transition (`from` = `to`, the
    /// record unchanged): see [`Notice`].
    #[serde(default)]
    pub notice: Option<Notice>,
}

/// An event the audit trail keeps although the record did not change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Notice {
    /// The service answered SUCCESS for an attempt already answered CANCELLED, or for
    /// a transaction an operator resolved: it executed something the transaction
    /// considers not done (a possible double execution). The entry names that
    /// attempt (`current_attempt`) and the status the record had.
    ConflictingSuccess,
}

impl Notice {
    pub fn as_str(&self) -> &'static str {
        match self {
            Notice::ConflictingSuccess => "CONFLICTING_SUCCESS",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "CONFLICTING_SUCCESS" => Some(Notice::ConflictingSuccess),
            _ => None,
        }
    }
}

impl AuditEntry {
    /// The entry for a change, or `None` when the change was not a transition (the same
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
            operator: if new.last_actor == Actor::Operator {
                new.operator.as_deref().cloned()
            } else {
                None
            },
            notice: None,
        })
    }

    /// The entry for a SUCCESS answering `attempt` of `record` that conflicts with
    /// what the record holds (the attempt was answered CANCELLED, or the transaction
    /// was resolved), seen at `at`: the record's status as both ends, the attempt the
    /// answer names, its outcome and reason.
    pub fn conflicting_success(
        record: &TransactionRecord,
        attempt: Attempt,
        reason: Option<String>,
        at: Timestamp,
    ) -> Self {
        Self {
            transaction_id: record.transaction_id.clone(),
            at,
            actor: Actor::ResponseHandler,
            from: Some(record.status),
            to: record.status,
            current_attempt: attempt,
            next_attempt: record.next_attempt,
            max_attempts: record.max_attempts.get(),
            schedule_name: record.schedule_name.clone(),
            next_fire_at: record.next_fire_at,
            outcome: Some(Outcome::Success),
            reason,
            origin: None,
            operator: None,
            notice: Some(Notice::ConflictingSuccess),
        }
    }

    /// True for an entry of a transition (the record changed), false for a
    /// [`Notice`]: checks of the trail's chain of statuses skip notices.
    pub fn is_transition(&self) -> bool {
        self.notice.is_none()
    }

    /// Sort key within the transaction: `<at>#<attempt, 4 digits>#<rank>-<to>`.
    ///
    /// Sorts as text in the order the transitions happened, also when one run writes
    /// two transitions at the same instant (IN_PROGRESS → SCHEDULING → SCHEDULED in one
    /// response, SENDING(n) → IN_PROGRESS(n+1) in one retry): the attempt and then the
    /// status's place in the lifecycle break the tie. A redelivered change yields the
    /// same key, so it rewrites its entry instead of adding one.
    pub fn sort_key(&self) -> String {
        let rank = match self.to {
            Status::InProgress => 0,
            Status::Scheduling => 1,
            Status::Scheduled => 2,
            Status::Sending => 3,
            Status::Succeeded => 4,
            Status::Failed => 5,
        };
        let key = format!(
            "{}#{:04}#{rank}-{}",
            self.at.to_rfc3339(),
            self.current_attempt.get(),
            self.to.as_str()
        );
        match self.notice {
            // Never the key of a transition written at the same instant.
            Some(n) => format!("{key}#{}", n.as_str()),
            None => key,
        }
    }

    /// The group this entry is stored in: the entries of one handler run share it,
    /// different runs of a transaction (normally) do not. Derived from the entry
    /// alone, so a redelivered change lands in the same group.
    ///
    /// - `<attempt:04>#1-send`: the run that puts an attempt out — the creation
    ///   (IN_PROGRESS(1)) and the retry handler's SENDING (next attempt n+1) and
    ///   IN_PROGRESS(n+1), all keyed by the attempt being sent;
    /// - `<attempt:04>#2-answer`: the run that handles the answer to an attempt — the
    ///   response handler's SCHEDULING and SCHEDULED, or SUCCEEDED / FAILED, keyed by
    ///   the current attempt.
    ///
    /// - `<attempt:04>#3-notice`: the notices naming an attempt (never written by a
    ///   run that also writes transitions).
    ///
    /// Groups sort as text in the order the runs happen: attempt n is sent, then
    /// answered, then attempt n+1 is sent.
    pub fn group_key(&self) -> String {
        if self.notice.is_some() {
            // Apart from the stream's items: a redelivered change rewrites its item's
            // expiry from its own entries, which would shorten a later notice's.
            return format!("{:04}#3-notice", self.current_attempt.get());
        }
        match self.to {
            Status::InProgress => format!("{:04}#1-send", self.current_attempt.get()),
            Status::Sending => format!(
                "{:04}#1-send",
                self.next_attempt.unwrap_or(self.current_attempt).get()
            ),
            Status::Scheduling | Status::Scheduled | Status::Succeeded | Status::Failed => {
                format!("{:04}#2-answer", self.current_attempt.get())
            }
        }
    }

    /// True when this transition exhausted the budget (the business alert).
    pub fn is_exhaustion(&self) -> bool {
        self.is_transition() && self.to == Status::Failed && self.from == Some(Status::InProgress)
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

    fn attempt(n: u32) -> Attempt {
        Attempt::new(n).unwrap()
    }

    fn entry(to: Status, current: u32, next: Option<u32>) -> AuditEntry {
        let mut r = rec(to, 42);
        r.current_attempt = attempt(current);
        r.next_attempt = next.map(attempt);
        AuditEntry::from_change(None, &r).unwrap()
    }

    #[test]
    fn group_key_of_every_status() {
        for to in Status::ALL {
            let expected = match to {
                Status::InProgress => "0003#1-send",
                Status::Sending => "0004#1-send",
                Status::Scheduling | Status::Scheduled | Status::Succeeded | Status::Failed => {
                    "0003#2-answer"
                }
            };
            assert_eq!(entry(to, 3, Some(4)).group_key(), expected, "{to:?}");
        }
        // Without a next attempt, SENDING falls back to the current one; the other
        // statuses never look at it.
        assert_eq!(entry(Status::Sending, 3, None).group_key(), "0003#1-send");
        for to in Status::ALL {
            if to != Status::Sending {
                assert_eq!(
                    entry(to, 3, None).group_key(),
                    entry(to, 3, Some(4)).group_key()
                );
            }
        }
        assert_eq!(
            entry(Status::Failed, 1000, None).group_key(),
            "1000#2-answer"
        );
    }

    /// A whole lifecycle, run by run: the creation, then per cycle the response
    /// handler's two transitions and the retry handler's two, then the final answer.
    fn lifecycle(cycles: u32, end: Status) -> Vec<Vec<AuditEntry>> {
        let mut runs = Vec::new();
        let mut at = 0;
        let mut step = |old: &TransactionRecord, f: &dyn Fn(&mut TransactionRecord)| {
            let mut new = old.clone();
            f(&mut new);
            at += 1;
            new.updated_at = Timestamp::from_millis(at);
            let e = AuditEntry::from_change(Some(old), &new).unwrap();
            (new, e)
        };
        let mut r = rec(Status::InProgress, 0);
        runs.push(vec![AuditEntry::from_change(None, &r).unwrap()]);
        for n in 1..=cycles {
            let next = Some(attempt(n + 1));
            let (a, e1) = step(&r, &|x| {
                x.status = Status::Scheduling;
                x.next_attempt = next;
            });
            let (b, e2) = step(&a, &|x| x.status = Status::Scheduled);
            runs.push(vec![e1, e2]);
            let (c, e3) = step(&b, &|x| x.status = Status::Sending);
            let (d, e4) = step(&c, &|x| {
                x.status = Status::InProgress;
                x.current_attempt = attempt(n + 1);
                x.next_attempt = None;
            });
            runs.push(vec![e3, e4]);
            r = d;
        }
        let (_, last) = step(&r, &|x| x.status = end);
        runs.push(vec![last]);
        runs
    }

    #[test]
    fn each_handler_run_lands_in_one_group_and_runs_in_different_ones() {
        for end in [Status::Succeeded, Status::Failed] {
            let runs = lifecycle(3, end);
            assert_eq!(runs.len(), 1 + 3 * 2 + 1);
            let keys: Vec<String> = runs
                .iter()
                .map(|run| {
                    let key = run[0].group_key();
                    for e in run {
                        assert_eq!(e.group_key(), key, "{:?} → {:?}", e.from, e.to);
                    }
                    key
                })
                .collect();
            assert_eq!(
                keys,
                [
                    "0001#1-send",
                    "0001#2-answer",
                    "0002#1-send",
                    "0002#2-answer",
                    "0003#1-send",
                    "0003#2-answer",
                    "0004#1-send",
                    "0004#2-answer",
                ]
            );
            // Distinct per run, and sorted as the runs happened.
            let mut sorted = keys.clone();
            sorted.sort();
            sorted.dedup();
            assert_eq!(sorted, keys);
        }
    }

    #[test]
    fn a_no_op_rewrite_makes_no_row() {
        let a = rec(Status::Scheduled, 7);
        assert_eq!(AuditEntry::from_change(Some(&a), &a), None);
    }
}
