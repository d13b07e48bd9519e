//! The append-only audit trail: one entry per transition, derived from the record before
//! and after, so any store that hands over both images (DynamoDB Streams with
//! `NEW_AND_OLD_IMAGES`, an in-memory store) produces the same entries. Each entry has a
//! deterministic key ([`AuditEntry::sort_key`]): a redelivered change writes the same
//! entry again. The two transitions of one handler run share an
//! [`AuditEntry::group_key`], so a store can keep them in one item written once; an
//! entry that repeats without bound (a breaker's hold, a notice) has its own.
//!
//! A technical re-send sends attempt n again, so the keys also carry the *round*, the
//! number of re-sends made when the entry's request left ([`AuditEntry::round`]); round
//! 0 keeps the keys' original form. Storage and keys:
//! `docs/adapters.md#audit-dynamodb-streams--audit-writer--audit-table`.

use crate::ids::{Attempt, CorrelationId, ScheduleName, Timestamp, TransactionId};
use crate::machine::{Actor, Counter, Mark, OperatorNote, Status, TransactionRecord};
use crate::message::{Origin, Outcome};
use crate::retention::ErasedSet;
use serde::{Deserialize, Serialize};
use strum::{EnumString, IntoStaticStr};

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
    /// The record's mark after the transition (absent in entries written before it
    /// existed: their `reason` carried it).
    #[serde(default)]
    pub mark: Option<Mark>,
    pub origin: Option<Origin>,
    /// Who made an operator's transition and why (`None` for the other actors).
    #[serde(default)]
    pub operator: Option<OperatorNote>,
    /// Set on an entry that records an event, not a transition (`from` = `to`, the
    /// record unchanged): see [`Notice`].
    #[serde(default)]
    pub notice: Option<Notice>,
    /// The record's technical re-send count after the transition.
    #[serde(default)]
    pub resends: u32,
    /// For a [`Notice::Erased`] entry, what the erasure removed (never the data).
    #[serde(default, skip_serializing_if = "ErasedSet::is_empty")]
    pub erased: ErasedSet,
    /// On the entry of the creation only (`from` = `None`): the transaction's
    /// correlation id, when it was started with one (it never changes, so no later
    /// entry repeats it). Boxed: rare, and entries are passed by value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub correlation_id: Option<Box<CorrelationId>>,
}

/// An event the audit trail keeps although the record did not change.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, IntoStaticStr, EnumString,
)]
#[strum(serialize_all = "SCREAMING_SNAKE_CASE")]
pub enum Notice {
    /// The service answered SUCCESS for an attempt already answered CANCELLED, or for
    /// a transaction an operator resolved: it executed something the transaction
    /// considers not done (a possible double execution). The entry names that
    /// attempt (`current_attempt`) and the status the record had.
    ConflictingSuccess,
    /// An operator erased the transaction's personal data (`retryctl erase`): the
    /// entry names what was removed ([`AuditEntry::erased`]), who and why
    /// ([`AuditEntry::operator`]).
    Erased,
    /// Outbox mode: a SENDING record's claim was older than the resend window, so
    /// its request was not published again; whether the claimed send went out is not
    /// known (its answer, or the answer deadline, tells). The entry names the attempt
    /// and the record's status.
    PublishUnconfirmed,
}

impl Notice {
    pub fn as_str(&self) -> &'static str {
        self.into()
    }

    pub fn parse(s: &str) -> Option<Self> {
        s.parse().ok()
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
            mark: new.mark,
            origin: new.last_origin,
            operator: if new.last_actor == Actor::Operator {
                new.operator.as_deref().cloned()
            } else {
                None
            },
            notice: None,
            resends: new.counts[Counter::Round],
            erased: ErasedSet::default(),
            correlation_id: if old.is_none() {
                new.correlation_id.clone().map(Box::new)
            } else {
                None
            },
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
            mark: record.mark,
            origin: None,
            operator: None,
            notice: Some(Notice::ConflictingSuccess),
            resends: record.counts[Counter::Round],
            erased: ErasedSet::default(),
            correlation_id: None,
        }
    }

    /// The entry of a publish left unconfirmed (outbox mode): `record`, SENDING and
    /// claimed longer ago than the resend window, seen at `at` by `actor`; its pending
    /// attempt is the one named.
    pub fn publish_unconfirmed(record: &TransactionRecord, actor: Actor, at: Timestamp) -> Self {
        Self {
            transaction_id: record.transaction_id.clone(),
            at,
            actor,
            from: Some(record.status),
            to: record.status,
            current_attempt: record.next_attempt.unwrap_or(record.current_attempt),
            next_attempt: record.next_attempt,
            max_attempts: record.max_attempts.get(),
            schedule_name: record.schedule_name.clone(),
            next_fire_at: record.next_fire_at,
            outcome: None,
            reason: None,
            mark: record.mark,
            origin: None,
            operator: None,
            notice: Some(Notice::PublishUnconfirmed),
            resends: record.counts[Counter::Round],
            erased: ErasedSet::default(),
            correlation_id: None,
        }
    }

    /// The entry of an erasure of `record` at `at` by the operator `note` (who and
    /// why): what it removed, the record's status at both ends, no reason text.
    pub fn erasure(
        record: &TransactionRecord,
        erased: ErasedSet,
        note: OperatorNote,
        at: Timestamp,
    ) -> Self {
        Self {
            transaction_id: record.transaction_id.clone(),
            at,
            actor: Actor::Operator,
            from: Some(record.status),
            to: record.status,
            current_attempt: record.current_attempt,
            next_attempt: record.next_attempt,
            max_attempts: record.max_attempts.get(),
            schedule_name: record.schedule_name.clone(),
            next_fire_at: record.next_fire_at,
            outcome: record.last_outcome,
            reason: None,
            mark: record.mark,
            origin: None,
            operator: Some(note),
            notice: Some(Notice::Erased),
            resends: record.counts[Counter::Round],
            erased,
            correlation_id: None,
        }
    }

    /// True for an entry of a transition (the record changed), false for a
    /// [`Notice`]: checks of the trail's chain of statuses skip notices.
    pub fn is_transition(&self) -> bool {
        self.notice.is_none()
    }

    /// The record's mark after this entry's transition; for an entry older than the
    /// mark, the one its reason carried.
    pub fn noted_mark(&self) -> Option<Mark> {
        self.mark
            .or_else(|| Mark::from_legacy_reason(self.reason.as_deref()))
    }

    /// For the entry of a pause by the circuit breaker (the retry handler opening the
    /// cycle again instead of sending: → SCHEDULING from SCHEDULING, SCHEDULED or
    /// SENDING), the breaker state that caused it (`OPEN`, `HALF_OPEN`), as its write
    /// recorded in its mark (or, in an entry older than the mark, in its reason).
    pub fn paused_by(&self) -> Option<&str> {
        let from_cycle = matches!(
            self.from,
            Some(Status::Scheduling | Status::Scheduled | Status::Sending)
        );
        if self.is_transition()
            && self.actor == Actor::RetryHandler
            && self.to == Status::Scheduling
            && from_cycle
        {
            self.noted_mark().and_then(Mark::held_by)
        } else {
            None
        }
    }

    /// True for the retry cycle of a technical re-send: SCHEDULING, SCHEDULED or
    /// SENDING with the current attempt pending again.
    fn is_resend_cycle(&self) -> bool {
        self.to.is_intermediate() && self.next_attempt == Some(self.current_attempt)
    }

    /// The round of the request this entry follows: the re-send count when it left.
    /// A re-send's cycle counts its re-send already but still follows the request
    /// answered ERROR, one round earlier; every other entry follows the request of
    /// the record's count (the count only grows, and an operator replay that clears
    /// it also opens a new attempt).
    pub fn round(&self) -> u32 {
        if self.is_resend_cycle() {
            self.resends.saturating_sub(1)
        } else {
            self.resends
        }
    }

    /// `<attempt:04>` in round 0, `<attempt:04>.<round:04>` after: sorts after every
    /// round-0 key of the attempt (`.` > `#`) and before the next attempt's.
    fn attempt_round(attempt: Attempt, round: u32) -> String {
        if round == 0 {
            format!("{:04}", attempt.get())
        } else {
            format!("{:04}.{round:04}", attempt.get())
        }
    }

    /// Sort key within the transaction: `<at>#<attempt, 4 digits>#<rank>-<to>`, the
    /// attempt followed by `.<round, 4 digits>` from the first technical re-send on.
    ///
    /// Sorts as text in the order the transitions happened, also when one run writes
    /// two transitions at the same instant (IN_PROGRESS → SCHEDULING → SCHEDULED in one
    /// response, SENDING(n) → IN_PROGRESS(n+1) in one retry, SENDING(n) →
    /// IN_PROGRESS(n) in a re-send): the attempt, the round and then the status's
    /// place in the lifecycle break the tie. A redelivered change yields the same key,
    /// so it rewrites its entry instead of adding one.
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
            "{}#{}#{rank}-{}",
            self.at.to_rfc3339(),
            Self::attempt_round(self.current_attempt, self.round()),
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
    ///   the current attempt;
    /// - `<attempt:04>#3-notice`: the notices naming an attempt (never written by a
    ///   run that also writes transitions).
    ///
    /// From the first technical re-send on, the attempt is followed by
    /// `.<round:04>`: the re-send's SENDING and IN_PROGRESS(n) are the send of round
    /// k, the SCHEDULING and SCHEDULED that follow an ERROR the answer of the round
    /// before, so no run of a re-sent attempt shares another's group.
    ///
    /// Groups sort as text in the order the runs happen: attempt n is sent, then
    /// answered, then sent again after an ERROR and answered again, then attempt n+1
    /// is sent.
    ///
    /// An entry that repeats as often as the world makes it — the reconciler's
    /// IN_PROGRESS → IN_PROGRESS (a request held by the circuit breaker, awaited or
    /// republished: a long outage holds one request thousands of times) and a
    /// notice (one per SUCCESS the service sends) — has an item of its own: its
    /// run's key followed by `#<at>` (`0003#1-send#2026-…Z`, `0003#3-notice#…`),
    /// which sorts after that key and before the next run's. So no item grows with
    /// an outage or with the service's answers ([`AuditEntry::stands_alone`]).
    pub fn group_key(&self) -> String {
        let run = self.run_key();
        if self.stands_alone() {
            format!("{run}#{}", self.at.to_rfc3339())
        } else {
            run
        }
    }

    /// True for an entry stored in an item of its own ([`AuditEntry::group_key`]):
    /// a notice, or the reconciler's write that leaves a request IN_PROGRESS (same
    /// attempt, same round), the one transition that repeats without bound.
    pub fn stands_alone(&self) -> bool {
        self.notice.is_some()
            || (self.from == Some(Status::InProgress) && self.to == Status::InProgress)
    }

    /// The key of the run this entry belongs to, the group key of every entry that
    /// does not stand alone.
    fn run_key(&self) -> String {
        if self.notice.is_some() {
            // Apart from the stream's items: a redelivered change rewrites its item's
            // expiry from its own entries, which would shorten a later notice's.
            return format!("{:04}#3-notice", self.current_attempt.get());
        }
        match self.to {
            Status::InProgress => format!(
                "{}#1-send",
                Self::attempt_round(self.current_attempt, self.resends)
            ),
            Status::Sending => format!(
                "{}#1-send",
                Self::attempt_round(
                    self.next_attempt.unwrap_or(self.current_attempt),
                    self.resends
                )
            ),
            Status::Scheduling | Status::Scheduled | Status::Succeeded | Status::Failed => {
                format!(
                    "{}#2-answer",
                    Self::attempt_round(self.current_attempt, self.round())
                )
            }
        }
    }

    /// True when this transition ended the transaction FAILED (the business alert):
    /// from IN_PROGRESS, or from the wait of a technical re-send.
    pub fn is_exhaustion(&self) -> bool {
        self.is_transition()
            && self.to == Status::Failed
            && self.from.is_some_and(|f| f != Status::Failed)
    }

    /// True for the transition that opens a finished transaction again (an operator's
    /// replay): its deadline moves, and so must its earlier rows' retention.
    pub fn reopens(&self) -> bool {
        self.is_transition() && self.from.is_some_and(|f| f.is_terminal()) && !self.to.is_terminal()
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
        for &to in Status::ALL {
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
        for &to in Status::ALL {
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

    /// The group key of each run, checked to be the key of every entry of the run.
    fn group_keys(runs: &[Vec<AuditEntry>]) -> Vec<String> {
        runs.iter()
            .map(|run| {
                let key = run[0].group_key();
                for e in run {
                    assert_eq!(e.group_key(), key, "{:?} → {:?}", e.from, e.to);
                }
                key
            })
            .collect()
    }

    #[test]
    fn each_handler_run_lands_in_one_group_and_runs_in_different_ones() {
        for end in [Status::Succeeded, Status::Failed] {
            let runs = lifecycle(3, end);
            assert_eq!(runs.len(), 1 + 3 * 2 + 1);
            let keys = group_keys(&runs);
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

    /// Attempt 2 answered ERROR twice (two re-sends of attempt 2), then CANCELLED;
    /// attempt 3 answered ERROR once, then SUCCESS: every run has its own group, no
    /// two entries share a sort key, and both sort as the transitions happened, also
    /// when every transition of the lifecycle is written at the same instant.
    #[test]
    fn re_sends_of_one_attempt_keep_every_entry_and_sort_in_order() {
        for same_instant in [false, true] {
            let mut at = 0;
            let mut step = |old: &TransactionRecord, f: &dyn Fn(&mut TransactionRecord)| {
                let mut new = old.clone();
                f(&mut new);
                if !same_instant {
                    at += 1;
                }
                new.updated_at = Timestamp::from_millis(at);
                let e = AuditEntry::from_change(Some(old), &new).unwrap();
                (new, e)
            };
            let mut runs: Vec<Vec<AuditEntry>> = Vec::new();
            let mut r = rec(Status::InProgress, 0);
            r.current_attempt = attempt(2);
            runs.push(vec![AuditEntry::from_change(None, &r).unwrap()]);
            // (next attempt of the cycle, re-send count after the answer)
            let cycles = [(2, 1), (2, 2), (3, 2), (3, 3)];
            for (next, resends) in cycles {
                let (a, e1) = step(&r, &|x| {
                    x.status = Status::Scheduling;
                    x.next_attempt = Some(attempt(next));
                    x.counts[Counter::Round] = resends;
                });
                let (b, e2) = step(&a, &|x| x.status = Status::Scheduled);
                let (c, e3) = step(&b, &|x| x.status = Status::Sending);
                let (d, e4) = step(&c, &|x| {
                    x.status = Status::InProgress;
                    x.current_attempt = attempt(next);
                    x.next_attempt = None;
                });
                runs.push(vec![e1, e2]);
                runs.push(vec![e3, e4]);
                r = d;
            }
            let (_, last) = step(&r, &|x| x.status = Status::Succeeded);
            runs.push(vec![last]);
            let keys = group_keys(&runs);
            assert_eq!(
                keys,
                [
                    "0002#1-send",
                    "0002#2-answer",
                    "0002.0001#1-send",
                    "0002.0001#2-answer",
                    "0002.0002#1-send",
                    "0002.0002#2-answer",
                    "0003.0002#1-send",
                    "0003.0002#2-answer",
                    "0003.0003#1-send",
                    "0003.0003#2-answer",
                ]
            );
            let mut sorted = keys.clone();
            sorted.sort();
            sorted.dedup();
            assert_eq!(sorted, keys, "one group per run, in run order");
            let entries: Vec<String> = runs.iter().flatten().map(AuditEntry::sort_key).collect();
            let mut sorted = entries.clone();
            sorted.sort();
            sorted.dedup();
            assert_eq!(sorted, entries, "one sort key per entry, in order");
        }
    }

    /// The most entries one item of the audit table holds, whatever the number of
    /// holds or notices: the two transitions of one handler run.
    const MOST_ENTRIES_PER_GROUP: usize = 2;

    /// The entries grouped as the adapter stores them, one item per group key and one
    /// attribute per sort key, groups in the order they were first written.
    fn stored_items(entries: &[AuditEntry]) -> Vec<(String, std::collections::BTreeSet<String>)> {
        let mut items: Vec<(String, std::collections::BTreeSet<String>)> = Vec::new();
        for e in entries {
            let key = e.group_key();
            match items.iter_mut().find(|(k, _)| *k == key) {
                Some((_, attributes)) => {
                    attributes.insert(e.sort_key());
                }
                None => items.push((key, [e.sort_key()].into())),
            }
        }
        items
    }

    /// Request 1 sent, then held `holds` times by the circuit breaker (OPEN, then
    /// HALF_OPEN with every probe out, in turn): each time the reconciler finds it
    /// past its deadline and moves the deadline to the breaker's resume instant, as
    /// `decide_reconcile` plans it. Then the breaker lets it out (the republish after
    /// the hold) and the service answers CANCELLED.
    fn held_then_answered(holds: usize) -> Vec<AuditEntry> {
        use crate::breaker::BreakerState;
        use crate::breaker::Hold;
        use crate::decide::{decide_reconcile, Context, Effect};
        use crate::policy::{PolicySet, RetryPolicy};
        let ctx = |now: Timestamp| {
            Context::new(
                now,
                PolicySet::uniform(RetryPolicy::article_default()),
                8,
                std::time::Duration::from_secs(600),
            )
        };
        let write = |r: &TransactionRecord, ctx: &Context| {
            let w = decide_reconcile(r, ctx)
                .into_iter()
                .find_map(|e| match e {
                    Effect::Write(w) => Some(w),
                    _ => None,
                })
                .unwrap();
            let new = w.apply(r).unwrap();
            let e = AuditEntry::from_change(Some(r), &new).unwrap();
            (new, e)
        };
        let mut r = rec(Status::InProgress, 0);
        r.answer_due_at = Some(Timestamp::from_millis(1_800_000));
        let mut entries = vec![AuditEntry::from_change(None, &r).unwrap()];
        for i in 0..holds {
            let now = r.answer_due_at.unwrap().plus_millis(1);
            let state = if i % 2 == 0 {
                BreakerState::Open {
                    until: now.plus_millis(30_000),
                    cooldown_ms: 30_000,
                }
            } else {
                BreakerState::HalfOpen {
                    since: now,
                    admitted: 1,
                    cooldown_ms: 30_000,
                }
            };
            let held = ctx(now).with_hold(Some(Hold {
                until: now.plus_millis(30_000),
                state,
            }));
            let (new, e) = write(&r, &held);
            assert_eq!(
                (e.from, e.to),
                (Some(Status::InProgress), Status::InProgress)
            );
            assert!(e.noted_mark().and_then(Mark::held_by).is_some(), "{e:?}");
            assert_eq!(
                new.counts[Counter::Republishes],
                0,
                "a hold spends no republish"
            );
            entries.push(e);
            r = new;
        }
        let now = r.answer_due_at.unwrap().plus_millis(1);
        let (out, e) = write(&r, &ctx(now));
        assert_eq!(e.to, Status::InProgress);
        assert_eq!(
            out.counts[Counter::Republishes],
            1,
            "let out: the republish after the hold"
        );
        entries.push(e);
        let mut answered = out.clone();
        answered.status = Status::Scheduling;
        answered.next_attempt = Some(attempt(2));
        answered.last_actor = Actor::ResponseHandler;
        answered.updated_at = now.plus_millis(5_000);
        entries.push(AuditEntry::from_change(Some(&out), &answered).unwrap());
        entries
    }

    /// A long outage holds one unanswered request thousands of times: each hold is an
    /// entry, and an item of the audit table must stay far below DynamoDB's 400 KB
    /// (a redrive cannot write an item past it).
    #[test]
    fn the_audit_item_of_a_request_stays_bounded_whatever_its_holds() {
        const HOLDS: usize = 2_000;
        let entries = held_then_answered(HOLDS);
        assert_eq!(entries.len(), 1 + HOLDS + 2);
        let items = stored_items(&entries);
        let stored: usize = items.iter().map(|(_, a)| a.len()).sum();
        assert_eq!(stored, entries.len(), "every entry kept, none overwritten");
        for (key, attributes) in &items {
            assert!(
                attributes.len() <= MOST_ENTRIES_PER_GROUP,
                "{key}: {} entries",
                attributes.len()
            );
        }
        // The send's item keeps its form; the answer's item comes after every hold.
        assert_eq!(items[0].0, "0001#1-send");
        assert_eq!(items.last().map(|(k, _)| k.as_str()), Some("0001#2-answer"));
        // Groups sort as text in the order they were written.
        let keys: Vec<&String> = items.iter().map(|(k, _)| k).collect();
        let mut sorted = keys.clone();
        sorted.sort();
        assert_eq!(sorted, keys);
        // Every change delivered again lands in the items already written.
        assert_eq!(stored_items(&[entries.clone(), entries].concat()), items);
    }

    /// A service that keeps answering SUCCESS to an attempt answered CANCELLED: every
    /// answer is a notice of that attempt, and their items stay bounded too.
    #[test]
    fn the_audit_item_of_an_attempts_notices_stays_bounded_whatever_their_number() {
        const NOTICES: i64 = 2_000;
        let mut r = rec(Status::Scheduled, 10);
        r.next_attempt = Some(attempt(2));
        let notices: Vec<AuditEntry> = (0..NOTICES)
            .map(|i| {
                AuditEntry::conflicting_success(
                    &r,
                    attempt(1),
                    Some("DONE".into()),
                    Timestamp::from_millis(1_000 + i * 250),
                )
            })
            .collect();
        let items = stored_items(&notices);
        let stored: usize = items.iter().map(|(_, a)| a.len()).sum();
        assert_eq!(stored, notices.len(), "every notice kept");
        for (key, attributes) in &items {
            assert!(key.starts_with("0001#3-notice"), "{key}");
            assert!(
                attributes.len() <= MOST_ENTRIES_PER_GROUP,
                "{key}: {} entries",
                attributes.len()
            );
        }
        let keys: Vec<&String> = items.iter().map(|(k, _)| k).collect();
        let mut sorted = keys.clone();
        sorted.sort();
        assert_eq!(sorted, keys, "in the order they were seen");
    }

    #[test]
    fn a_no_op_rewrite_makes_no_row() {
        let a = rec(Status::Scheduled, 7);
        assert_eq!(AuditEntry::from_change(Some(&a), &a), None);
    }
}
