//! The guarantees checked after a real run, from the witnesses it leaves for each
//! transaction: its record in the state table, its audit trail, and what the external
//! service received (per attempt: how many requests, and what it answered). The
//! outbound rate is checked from the publish instants ([`rate`]).
//!
//! Each finding names the [`Violation`] and says why, in words an operator can act
//! on; the checks are the guarantees the model checker and the simulator check as the
//! run happens, seen from its end.

use super::{over_budget, Violation};
use domain::audit::AuditEntry;
use domain::machine::{transition, Actor, Event, Status, TransactionRecord};
use domain::message::Outcome;
use std::collections::BTreeMap;

/// What the external service received for one attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seen {
    /// Requests received with this attempt's key (duplicates included).
    pub raw: u32,
    /// The answer given (the same for every duplicate).
    pub outcome: Outcome,
}

/// One transaction that broke a guarantee, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub violation: Violation,
    pub why: String,
}

fn finding(violation: Violation, why: String) -> Finding {
    Finding { violation, why }
}

fn name(s: Option<Status>) -> &'static str {
    s.map_or("[*]", Status::as_str)
}

/// What one transaction's witnesses show: `record` (`None`: no item), its `audit`
/// entries (any order) and what the service `seen` per attempt.
pub fn check(
    record: Option<&TransactionRecord>,
    audit: &[AuditEntry],
    seen: &BTreeMap<u32, Seen>,
) -> Vec<Finding> {
    let Some(rec) = record else {
        return vec![finding(
            Violation::Lost,
            "no item in the state table".into(),
        )];
    };
    let mut out = budget(rec, seen);
    if let Some(why) = super::inconsistency(rec) {
        out.push(finding(
            Violation::RecordInconsistent,
            format!("{} {why}", rec.status),
        ));
    }
    if !rec.status.is_terminal() {
        out.push(finding(
            Violation::Stuck,
            format!(
                "{} (attempt {}, next {}, updated {})",
                rec.status,
                rec.current_attempt,
                rec.next_attempt.map_or("-".to_owned(), |a| a.to_string()),
                rec.updated_at
            ),
        ));
        return out;
    }
    out.extend(requests(rec, seen));
    out.extend(trail(rec, audit));
    out
}

/// Past the budget: the record, or a request the service received.
fn budget(rec: &TransactionRecord, seen: &BTreeMap<u32, Seen>) -> Vec<Finding> {
    let (current, max) = (rec.current_attempt.get(), rec.max_attempts.get());
    let mut out = Vec::new();
    if over_budget(current, max) {
        out.push(finding(
            Violation::ExceededMaxAttempts,
            format!("current attempt {current} > max_attempts {max}"),
        ));
    }
    if let Some(&k) = seen.keys().next_back().filter(|k| over_budget(**k, max)) {
        out.push(finding(
            Violation::ExceededMaxAttempts,
            format!("the external service received attempt {k} > max_attempts {max}"),
        ));
    }
    out
}

/// A terminal record against the requests the service received: every attempt up to
/// the current one reached it, none after; the answers agree with the end.
fn requests(rec: &TransactionRecord, seen: &BTreeMap<u32, Seen>) -> Vec<Finding> {
    let (current, max) = (rec.current_attempt.get(), rec.max_attempts.get());
    let answer = |k: u32| seen.get(&k).map(|s| s.outcome);
    // Ended for want of an answer, or at its deadline: its last request may never
    // have reached the service (that is why it ended), at any attempt, with no answer
    // to agree with.
    let unanswered = rec.status == Status::Failed
        && matches!(
            rec.mark,
            Some(domain::machine::Mark::Unanswered | domain::machine::Mark::Expired)
        );
    let mut out: Vec<Finding> = (1..=current)
        .filter(|k| !(seen.contains_key(k) || (unanswered && *k == current)))
        .map(|k| {
            finding(
                Violation::Lost,
                format!(
                    "attempt {k} never reached the external service (state says attempt {current})"
                ),
            )
        })
        .collect();
    out.extend(seen.keys().filter(|k| **k > current).map(|k| {
        finding(
            Violation::DuplicateAccepted,
            format!(
                "attempt {k} reached the external service but the state ended at attempt {current}"
            ),
        )
    }));
    // Resolved by an operator: SUCCEEDED by other means, whatever the service last
    // answered (the attempt it was asked for was answered CANCELLED).
    let resolved =
        rec.last_actor == Actor::Operator && rec.mark == Some(domain::machine::Mark::Resolved);
    let ended = match rec.status {
        Status::Succeeded if resolved => None,
        Status::Succeeded => Some(Outcome::Success),
        Status::Failed if unanswered => None,
        Status::Failed => Some(Outcome::Cancelled),
        _ => None,
    };
    if rec.status == Status::Failed && current < max && !unanswered {
        out.push(finding(
            Violation::Lost,
            format!("FAILED at attempt {current} with {max} attempts allowed: a retry was lost"),
        ));
    }
    if ended.is_some() && answer(current) != ended {
        out.push(finding(
            Violation::Disagreement,
            format!(
                "{} at attempt {current} but the service answered {:?}",
                rec.status,
                answer(current)
            ),
        ));
    }
    out.extend(
        (1..current)
            .filter(|k| answer(*k) == Some(Outcome::Success))
            .map(|k| {
                finding(
                    Violation::Disagreement,
                    format!(
                        "the service answered SUCCESS for attempt {k}, yet attempt {} followed",
                        k + 1
                    ),
                )
            }),
    );
    out
}

/// The audit trail: one unbroken chain of arrows from the creation to the current
/// state, and one publish (SENDING → IN_PROGRESS) per retry.
fn trail(rec: &TransactionRecord, audit: &[AuditEntry]) -> Vec<Finding> {
    let mut out = Vec::new();
    let (rows, orphans) = link(audit);
    let last = rows.last().map(|e| e.to);
    if let Some(o) = orphans.first() {
        out.push(finding(
            Violation::AuditGap,
            format!(
                "audit row {} → {} (attempt {}, at {}) does not continue the chain, which ends in {}",
                name(o.from),
                o.to,
                o.current_attempt,
                o.at,
                name(last)
            ),
        ));
    } else if last != Some(rec.status) {
        out.push(finding(
            Violation::AuditGap,
            format!(
                "audit trail ends in {} but the state is {}",
                name(last),
                rec.status
            ),
        ));
    }
    out.extend(rows.iter().filter(|e| !is_arrow(e)).map(|e| {
        finding(
            Violation::IllegalTransition,
            format!(
                "audit row {} → {} (attempt {}) is no arrow of the state machine",
                name(e.from),
                e.to,
                e.current_attempt
            ),
        )
    }));
    // One publish per attempt and technical round: an ERROR answer or a breaker
    // pause sends the attempt again in a new round (its `resends` count), which is
    // no duplicate.
    for k in 2..=rec.current_attempt.get() {
        let mut rounds: BTreeMap<u32, usize> = BTreeMap::new();
        for e in audit.iter().filter(|e| {
            e.from == Some(Status::Sending)
                && e.to == Status::InProgress
                && e.current_attempt.get() == k
        }) {
            *rounds.entry(e.resends).or_insert(0) += 1;
        }
        if rounds.is_empty() {
            out.push(finding(
                Violation::AuditGap,
                format!("no SENDING → IN_PROGRESS row for attempt {k}"),
            ));
        }
        for (round, n) in rounds.into_iter().filter(|(_, n)| *n > 1) {
            let of_round = if round == 0 {
                String::new()
            } else {
                format!(" in technical round {round}")
            };
            out.push(finding(
                Violation::DuplicateAccepted,
                format!(
                    "attempt {k} was published {n} times{of_round} according to the audit trail"
                ),
            ));
        }
    }
    out
}

/// True when some event takes the entry's `from` to its `to`.
pub fn is_arrow(e: &AuditEntry) -> bool {
    Event::ALL
        .iter()
        .copied()
        .any(|ev| transition(e.from, ev) == Ok(e.to))
}

/// Links a transaction's audit entries into the chain of its transitions: from the
/// creation, each next entry is one leaving the status the previous entry entered
/// (lowest attempt first, then earliest). Linked by status rather than sorted by
/// time, an entry written with an earlier clock reading is still placed where it
/// belongs. Returns the chain and the transitions left over (notices are neither).
pub fn link(entries: &[AuditEntry]) -> (Vec<AuditEntry>, Vec<AuditEntry>) {
    // Notices (a conflicting SUCCESS) record events, not transitions: no link.
    let mut rest: Vec<AuditEntry> = entries
        .iter()
        .filter(|e| e.is_transition())
        .cloned()
        .collect();
    let mut chain: Vec<AuditEntry> = Vec::with_capacity(rest.len());
    let mut reached: Option<Status> = None;
    while let Some(i) = next_leaving(&rest, reached) {
        let entry = rest.remove(i);
        reached = Some(entry.to);
        chain.push(entry);
    }
    (chain, rest)
}

/// The entry leaving `status` (`None`: the creation) with the lowest attempt, then
/// the earliest, then a loop on the status before an exit from it (the outbox
/// publisher's claim, SENDING → SENDING, and its mark, SENDING → IN_PROGRESS, are
/// decided at one instant).
fn next_leaving(entries: &[AuditEntry], status: Option<Status>) -> Option<usize> {
    let leaving = entries.iter().enumerate().filter(|(_, e)| e.from == status);
    leaving
        .min_by_key(|(_, e)| (e.current_attempt, e.at, Some(e.to) != e.from))
        .map(|(i, _)| i)
}

/// Entries of a chain written with an earlier time than the entry before them (their
/// writer read the clock before the previous write landed): not a violation, worth
/// a note.
pub fn time_inversions(chain: &[AuditEntry]) -> Vec<String> {
    chain
        .windows(2)
        .filter(|pair| pair[1].at < pair[0].at)
        .map(|pair| {
            format!(
                "{} → {} written at {} follows {} → {} written at {}",
                name(pair[1].from),
                pair[1].to,
                pair[1].at,
                name(pair[0].from),
                pair[0].to,
                pair[0].at
            )
        })
        .collect()
}

/// The outbound rate: the most requests published in any window `[t, t + window)`
/// against `bound`, from the publish instants.
pub fn rate<T, W>(instants: &[T], window: W, bound: usize) -> (usize, Option<Violation>)
where
    T: Copy + Ord + std::ops::Add<W, Output = T>,
    W: Copy,
{
    let peak = super::peak_in_window(instants, window);
    (peak, (peak > bound).then_some(Violation::RateExceeded))
}
