//! The guarantees of the pattern, written once: what every checker — the model checker,
//! the simulator, the domain's property tests, the demo's report over a real run —
//! calls a violation. Each guarantee is a [`Violation`]; each check is a pure function
//! of what a checker observed, when it observes it: a write or creation applied
//! ([`change`]); a request published ([`publish`]) and received by the deduplicating
//! service ([`Service`]); a schedule created ([`Instants`]); a run's disposition
//! ([`disposition`]); where a transaction ended ([`lost`], [`alert_missing`]); the
//! outbound rate ([`peak_in_window`]). [`evidence`] checks a real run after the fact,
//! from its three witnesses: the state records, the audit trail and the requests the
//! service saw. The guarantees: `docs/design.md#guarantees`.

pub mod evidence;

use domain::decide::{Delivery, Disposition, ScheduleSpec};
use domain::ids::{Attempt, IdempotencyKey, Timestamp, TransactionId};
use domain::machine::Counter;
use domain::machine::{transition, Event, TransactionRecord};
use domain::message::Outcome;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::ops::Add;

/// A broken guarantee.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Violation {
    /// The service accepted a second request for one (transaction, attempt), or a
    /// request whose idempotency key is not `<id>#<attempt>`.
    DuplicateAccepted,
    /// The service accepted attempt m > 1 although attempt m − 1 was not CANCELLED.
    RetryWithoutCancellation,
    /// A record, a published request or an accepted one went past `max_attempts`.
    ExceededMaxAttempts,
    /// A response for attempt n changed a record whose current attempt was past n.
    LateResponseApplied,
    /// A change that is not an arrow of the state machine.
    IllegalTransition,
    /// A schedule was created with an instant other than the persisted one.
    ScheduleNotFromPersistedInstant,
    /// Two schedules for one retry (one schedule name: an attempt, or a technical
    /// re-send of it) carried different instants.
    TwoInstantsForOneAttempt,
    /// The retry handler discarded an event for the attempt still pending.
    PendingRetryDropped,
    /// A message ended in a DLQ (a run rejected it).
    MessageRejected,
    /// The executor fed a run an observation it could not take.
    ImpossibleObservation,
    /// Nothing will move the transaction again, it is not terminal, and no
    /// dead-letter queue holds a message of it: a retry was lost.
    Lost,
    /// A transaction ended FAILED without its business alert.
    AlertMissing,
    /// More requests in one window than the outbound bound allows.
    RateExceeded,
    /// A transaction did not end SUCCEEDED or FAILED.
    Stuck,
    /// The state table and the external service disagree (an outcome, or a request
    /// for a transaction nobody started).
    Disagreement,
    /// The audit trail is not one unbroken chain ending in the current state.
    AuditGap,
    /// A record whose fields contradict its status ([`inconsistency`]).
    RecordInconsistent,
    /// A service that does not deduplicate ran one (transaction, attempt) a second
    /// time ([`Service::runs_again`]). Checked only where the service does not
    /// deduplicate: the idempotency key makes the repeat harmless otherwise.
    ExecutedTwice,
    /// The FIFO request queue accepted a second `SendMessage` for one (transaction,
    /// attempt, round) deduplication id ([`Sends::accept`]): outbox delivery published
    /// it twice. Checked only in outbox delivery.
    PublishedTwice,
}

impl Violation {
    /// The guarantee, as a sentence.
    pub const fn guarantee(self) -> &'static str {
        match self {
            Violation::DuplicateAccepted => {
                "service accepts at most one request per (transaction, attempt)"
            }
            Violation::RetryWithoutCancellation => "a retry is only sent after a cancellation",
            Violation::ExceededMaxAttempts => "no transaction exceeds max_attempts",
            Violation::LateResponseApplied => "a late response never changes state",
            Violation::IllegalTransition => "every transition is an arrow of the state machine",
            Violation::ScheduleNotFromPersistedInstant => {
                "every schedule is created from the persisted instant"
            }
            Violation::TwoInstantsForOneAttempt => {
                "one fire instant per retry schedule (an attempt, or a technical re-send of it)"
            }
            Violation::PendingRetryDropped => {
                "the retry handler never discards the event of the pending attempt"
            }
            Violation::MessageRejected => "no message ends in a DLQ",
            Violation::ImpossibleObservation => {
                "the executor never feeds a run an impossible observation"
            }
            Violation::Lost => "no transaction is lost",
            Violation::AlertMissing => "every exhausted transaction raised its business alert",
            Violation::RateExceeded => "never more requests in a window than the bound",
            Violation::Stuck => "every transaction ends SUCCEEDED or FAILED",
            Violation::Disagreement => "the state agrees with what the external service saw",
            Violation::AuditGap => {
                "the audit trail is one unbroken chain ending in the current state"
            }
            Violation::RecordInconsistent => {
                "every record says what it is: its fields agree with its status"
            }
            Violation::ExecutedTwice => {
                "a service that does not deduplicate runs each (transaction, attempt) at most once (a re-send after it answered ERROR, which it did not run, excepted)"
            }
            Violation::PublishedTwice => {
                "each (transaction, attempt, round) is published at most once: the FIFO request queue accepts one SendMessage per deduplication id"
            }
        }
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.guarantee())
    }
}

/// `attempt` is past the budget `max_attempts` (attempt 1 is the original request).
pub fn over_budget(attempt: u32, max_attempts: u32) -> bool {
    attempt > max_attempts
}

/// Who wrote a change, as far as the guarantees care.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Writer {
    /// The response handler, answering attempt `n`.
    Answering(u32),
    /// Anyone else.
    Other,
}

/// The violations of one change: `before` (`None` for a creation, then `event` is
/// [`Event::Start`]) became `after` by `event`, written by `writer`.
/// What each status implies of the record's other fields (`docs/design.md`, "The
/// transaction item"), the first that does not hold: a retry cycle (SCHEDULING,
/// SCHEDULED, SENDING) names the attempt it sends (the current one or the next) and
/// its instant, and waits on no answer; IN_PROGRESS waits on one answer and names no
/// next attempt; an ended record names neither and is out of the reconciler's index;
/// a live record carries no mark of how a transaction ended, an ended one no mark of
/// a request in flight; pauses are rounds, never more than them. The budget is
/// [`record_over_budget`]'s.
pub fn inconsistency(r: &TransactionRecord) -> Option<&'static str> {
    use domain::machine::Mark;
    let cycle = matches!(
        r.status,
        domain::Status::Scheduling | domain::Status::Scheduled | domain::Status::Sending
    );
    let ended = r.status.is_terminal();
    let ending_mark = matches!(
        r.mark,
        Some(Mark::TechnicalExhausted | Mark::Unanswered | Mark::Expired | Mark::Resolved)
    );
    // Outbox mode's start creates the intent of attempt 1 (SENDING, round 0), which
    // no schedule fires: it has no instant. Every other cycle has one.
    let queued_start = r.status == domain::Status::Sending
        && r.current_attempt == Attempt::FIRST
        && r.next_attempt == Some(Attempt::FIRST)
        && r.counts[Counter::Round] == 0;
    if cycle && (r.next_attempt.is_none() || (r.next_fire_at.is_none() && !queued_start)) {
        return Some("a retry cycle without its next attempt or instant");
    }
    if let Some(next) = r.next_attempt {
        if next.get() != r.current_attempt.get() && next.get() != r.current_attempt.get() + 1 {
            return Some("a next attempt neither the current one nor the one after");
        }
    }
    if !cycle && (r.next_attempt.is_some() || r.next_fire_at.is_some()) {
        return Some("a next attempt or instant outside a retry cycle");
    }
    if (r.status == domain::Status::InProgress) != r.answer_due_at.is_some() {
        return Some(
            "an answer deadline on a record not waiting for an answer, or none on one that is",
        );
    }
    if ended == r.reconcile.is_some() {
        return Some("a live record out of the reconciler's index, or an ended one in it");
    }
    if (r.status == domain::Status::Failed) != r.failed.is_some() {
        return Some("a FAILED record out of the failed listing, or another one in it");
    }
    if !ended && ending_mark {
        return Some("a live record marked with how it ended");
    }
    if ended
        && matches!(
            r.mark,
            Some(Mark::Probe | Mark::HeldOpen | Mark::HeldHalfOpen)
        )
    {
        return Some("an ended record marked with a request in flight");
    }
    if r.counts[Counter::ProbeErrors] > r.counts[Counter::Round] {
        return Some("more pauses than rounds");
    }
    None
}

/// The record names an attempt past its budget: its current one, or the next one its
/// retry cycle will send.
pub fn record_over_budget(r: &TransactionRecord) -> bool {
    let max = r.max_attempts.get();
    over_budget(r.current_attempt.get(), max)
        || r.next_attempt.is_some_and(|n| over_budget(n.get(), max))
}

/// The violations of the creation of `record`: a start ([`Event::Start`]), or outbox
/// mode's queued start ([`Event::StartQueued`]) when it was created SENDING.
pub fn creation(record: &TransactionRecord) -> Vec<Violation> {
    let event = if record.status == domain::machine::QUEUED {
        Event::StartQueued
    } else {
        Event::Start
    };
    change(None, event, record, Writer::Other)
}

pub fn change(
    before: Option<&TransactionRecord>,
    event: Event,
    after: &TransactionRecord,
    writer: Writer,
) -> Vec<Violation> {
    let mut v = Vec::new();
    if inconsistency(after).is_some() {
        v.push(Violation::RecordInconsistent);
    }
    if transition(before.map(|b| b.status), event) != Ok(after.status) {
        v.push(Violation::IllegalTransition);
    }
    if let (Writer::Answering(n), Some(b)) = (writer, before) {
        if n < b.current_attempt.get() {
            v.push(Violation::LateResponseApplied);
        }
    }
    if record_over_budget(after) {
        v.push(Violation::ExceededMaxAttempts);
    }
    v
}

/// A request for `attempt` published while the record is `record`.
pub fn publish(attempt: Attempt, record: Option<&TransactionRecord>) -> Option<Violation> {
    let max = record.map_or(u32::MAX, |r| r.max_attempts.get());
    over_budget(attempt.get(), max).then_some(Violation::ExceededMaxAttempts)
}

/// The violation a run's disposition shows: a rejected message, or a retry event
/// for `retry` (the attempt and the retry cycle's round it carries, when the run
/// handled one) dropped while that attempt is still pending on `record` in that
/// cycle (an event of an earlier cycle is not the pending one). In outbox delivery a
/// record SENDING holds the pending attempt's request itself (the publisher sends
/// it): an event dropped then loses nothing.
pub fn disposition(
    d: &Disposition,
    retry: Option<(u32, Option<u32>)>,
    record: Option<&TransactionRecord>,
    delivery: Delivery,
) -> Option<Violation> {
    match (d, retry, record) {
        (Disposition::Reject(_), _, _) => Some(Violation::MessageRejected),
        (Disposition::Drop(_), Some(_), Some(r))
            if delivery == Delivery::Outbox && r.status == domain::Status::Sending =>
        {
            None
        }
        (Disposition::Drop(_), Some((m, round)), Some(r))
            if r.status.is_intermediate()
                && r.next_attempt.map(Attempt::get) == Some(m)
                && round.is_none_or(|k| k >= r.counts[Counter::Round]) =>
        {
            Some(Violation::PendingRetryDropped)
        }
        _ => None,
    }
}

/// Nothing will move the transaction again (a checker's judgement), it is not
/// terminal and no dead-letter queue holds any of its `dead_lettered` messages.
pub fn lost(record: Option<&TransactionRecord>, dead_lettered: u32) -> bool {
    !record.is_some_and(|r| r.status.is_terminal()) && dead_lettered == 0
}

/// FAILED without a business alert — unless a dead-letter queue holds one of its
/// messages (the response that exhausted the budget may have gone there before its
/// alert; that queue's alarm covers it).
pub fn alert_missing(record: Option<&TransactionRecord>, alerts: u32, dead_lettered: u32) -> bool {
    record.is_some_and(|r| r.status == domain::Status::Failed) && alerts == 0 && dead_lettered == 0
}

/// The largest number of `times` inside any window `[t, t + window)`.
pub fn peak_in_window<T, W>(times: &[T], window: W) -> usize
where
    T: Copy + Ord + Add<W, Output = T>,
    W: Copy,
{
    let mut v = times.to_vec();
    v.sort_unstable();
    let (mut best, mut lo) = (0, 0);
    for hi in 0..v.len() {
        while v[lo] + window <= v[hi] {
            lo += 1;
        }
        best = best.max(hi - lo + 1);
    }
    best
}

/// Whether the external service a checker plays deduplicates requests. The
/// deployment's precondition is that it does; a checker run with a service that does
/// not measures what that precondition absorbs ([`Violation::ExecutedTwice`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum ServiceDedup {
    /// It deduplicates by idempotency key: a repeat of a key it ran runs nothing.
    #[default]
    ByKey,
    /// It runs every request message it receives (a copy of one message the queue
    /// delivered again excepted: it consumes each message once).
    NonIdempotent,
}

impl ServiceDedup {
    /// The names a command line takes.
    pub const NAMES: [&'static str; 2] = ["deduplicating", "non-idempotent"];

    pub const fn name(self) -> &'static str {
        match self {
            ServiceDedup::ByKey => Self::NAMES[0],
            ServiceDedup::NonIdempotent => Self::NAMES[1],
        }
    }

    /// Parses a command line's value, naming the flag in the error.
    pub fn parse(flag: &str, value: &str) -> Result<Self, String> {
        match value {
            "deduplicating" => Ok(ServiceDedup::ByKey),
            "non-idempotent" => Ok(ServiceDedup::NonIdempotent),
            other => Err(format!(
                "{flag} `{other}`: expected one of {}",
                Self::NAMES.join(", ")
            )),
        }
    }

    /// True when the service runs every message it receives.
    pub const fn runs_every_message(self) -> bool {
        matches!(self, ServiceDedup::NonIdempotent)
    }
}

/// The external service's side of the guarantees: it deduplicates requests by
/// idempotency key and remembers what it answered per (transaction, attempt). An
/// attempt it answered ERROR was not processed: a request with that key again is
/// processed anew (a technical re-send). `K` names a transaction the way the checker
/// does.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Service<K: Ord> {
    accepted: BTreeMap<(K, u32), Option<Outcome>>,
    /// The newest `round` received per (transaction, attempt): the one its answers
    /// echo (an answer covers every send of the key received so far).
    rounds: BTreeMap<(K, u32), u32>,
    keys: BTreeSet<String>,
    /// The attempts it ever answered CANCELLED: only these allow the next attempt.
    cancelled: BTreeSet<(K, u32)>,
    /// The attempts it answered ERROR with `execution UNKNOWN` (a timeout: the call
    /// may have run). For the guarantees they ran.
    may_have_run: BTreeSet<(K, u32)>,
}

impl<K: Ord> Default for Service<K> {
    fn default() -> Self {
        Self {
            accepted: BTreeMap::new(),
            rounds: BTreeMap::new(),
            keys: BTreeSet::new(),
            cancelled: BTreeSet::new(),
            may_have_run: BTreeSet::new(),
        }
    }
}

/// What the service did with a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    /// Its key had been seen: nothing happens.
    Deduplicated,
    /// A new key for an attempt already accepted (a [`Violation::DuplicateAccepted`]):
    /// nothing more happens.
    AlreadyAccepted,
    /// A new attempt, or one answered ERROR sent again: the service will answer it.
    Accepted,
}

/// A request received: its fate and every violation it shows, once per check that
/// failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Receipt {
    pub fate: Fate,
    pub violations: Vec<Violation>,
}

impl<K: Ord + Clone> Service<K> {
    pub fn new() -> Self {
        Self::default()
    }

    /// Receives a request for `attempt` of `tx` (whose id is `id`) carrying `key` and
    /// `round`, for a transaction allowed `max_attempts`.
    pub fn receive(
        &mut self,
        tx: K,
        id: &TransactionId,
        attempt: u32,
        key: &str,
        round: Option<u32>,
        max_attempts: u32,
    ) -> Receipt {
        if let Some(k) = round {
            let newest = self.rounds.entry((tx.clone(), attempt)).or_insert(k);
            *newest = (*newest).max(k);
        }
        let mut violations = Vec::new();
        let expected = Attempt::new(attempt).map(|a| IdempotencyKey::new(id, a));
        if expected.as_ref().map(IdempotencyKey::as_str) != Ok(key) {
            violations.push(Violation::DuplicateAccepted);
        }
        if !self.keys.insert(key.to_owned()) {
            let entry = self.accepted.get_mut(&(tx, attempt));
            if let Some(answer @ Some(Outcome::Error)) = entry {
                // Not processed the first time: processed now, answered again.
                *answer = None;
                return Receipt {
                    fate: Fate::Accepted,
                    violations,
                };
            }
            return Receipt {
                fate: Fate::Deduplicated,
                violations,
            };
        }
        if self.accepted.contains_key(&(tx.clone(), attempt)) {
            violations.push(Violation::DuplicateAccepted);
            return Receipt {
                fate: Fate::AlreadyAccepted,
                violations,
            };
        }
        if attempt > 1 && !self.cancelled.contains(&(tx.clone(), attempt - 1)) {
            violations.push(Violation::RetryWithoutCancellation);
        }
        if over_budget(attempt, max_attempts) {
            violations.push(Violation::ExceededMaxAttempts);
        }
        self.accepted.insert((tx, attempt), None);
        Receipt {
            fate: Fate::Accepted,
            violations,
        }
    }

    /// The service answers an attempt it accepted; false when it never accepted it.
    pub fn answer(&mut self, tx: K, attempt: u32, outcome: Outcome) -> bool {
        match self.accepted.get_mut(&(tx.clone(), attempt)) {
            Some(a) => {
                *a = Some(outcome);
                if outcome == Outcome::Cancelled {
                    self.cancelled.insert((tx, attempt));
                }
                true
            }
            None => false,
        }
    }

    /// The service answers ERROR to an attempt it accepted, saying it may have run it
    /// (`execution UNKNOWN`: a timeout, a crash mid-call); false when it never
    /// accepted it. For [`Self::runs_again`] the attempt ran.
    pub fn answer_error_unknown(&mut self, tx: K, attempt: u32) -> bool {
        let answered = self.answer(tx.clone(), attempt, Outcome::Error);
        if answered {
            self.may_have_run.insert((tx, attempt));
        }
        answered
    }

    /// True when the service answered the attempt ERROR saying it may have run it.
    pub fn may_have_run(&self, tx: &K, attempt: u32) -> bool {
        self.may_have_run.contains(&(tx.clone(), attempt))
    }

    /// How many attempts of `tx` the service answered CANCELLED: a record's
    /// `current_attempt` is at most one more (a technical failure consumes none).
    pub fn cancelled_attempts(&self, tx: &K) -> usize {
        self.cancelled.iter().filter(|(t, _)| t == tx).count()
    }

    /// The round its answers for an attempt echo: the newest received (`None`: the
    /// requests carried none).
    pub fn round_of(&self, tx: &K, attempt: u32) -> Option<u32> {
        self.rounds.get(&(tx.clone(), attempt)).copied()
    }

    /// What the service answered for an attempt (`None`: not accepted or not yet).
    pub fn answer_of(&self, tx: &K, attempt: u32) -> Option<Outcome> {
        self.accepted.get(&(tx.clone(), attempt)).copied().flatten()
    }

    /// True when the service accepted the attempt and has not answered it yet.
    pub fn awaits_answer(&self, tx: &K, attempt: u32) -> bool {
        self.accepted
            .get(&(tx.clone(), attempt))
            .is_some_and(Option::is_none)
    }

    /// The first accepted (transaction, attempt) not answered yet.
    pub fn first_unanswered(&self) -> Option<(K, u32)> {
        self.accepted
            .iter()
            .find(|(_, answer)| answer.is_none())
            .map(|(k, _)| k.clone())
    }

    /// Every accepted (transaction, attempt) with its answer so far.
    pub fn accepted(&self) -> impl Iterator<Item = (&(K, u32), Option<Outcome>)> {
        self.accepted.iter().map(|(k, a)| (k, *a))
    }

    /// A service that does not deduplicate, receiving a new request message for
    /// `attempt` of `tx` now, would run the attempt a second time: it already
    /// received the attempt and has not answered it ERROR (ERROR says the attempt did
    /// not run, so the re-send that follows runs it for the first time) — unless that
    /// ERROR said it may have run ([`Self::answer_error_unknown`]): then it ran. Call
    /// it for each distinct message (a copy of one message the queue delivered again
    /// is the same message), before [`Self::receive`].
    pub fn runs_again(&self, tx: &K, attempt: u32) -> Option<Violation> {
        match self.accepted.get(&(tx.clone(), attempt)) {
            Some(answer) if *answer != Some(Outcome::Error) || self.may_have_run(tx, attempt) => {
                Some(Violation::ExecutedTwice)
            }
            _ => None,
        }
    }

    /// True when a request with `key` was received.
    pub fn seen_key(&self, key: &str) -> bool {
        self.keys.contains(key)
    }
}

/// The `SendMessage` calls a FIFO request queue accepted, per deduplication id
/// (`RequestHeader::deduplication_id`, `<transaction_id>#<attempt>#<round>`). The
/// queue drops a repeat of an id it accepted within its deduplication window; what it
/// accepts is published. Outbox delivery's guarantee: each id is accepted once.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Sends {
    accepted: BTreeMap<String, u32>,
}

impl Sends {
    pub fn new() -> Self {
        Self::default()
    }

    /// The queue accepted a send with deduplication id `id` (it was not a repeat
    /// within the window): a [`Violation::PublishedTwice`] when it had accepted one
    /// before.
    pub fn accept(&mut self, id: &str) -> Option<Violation> {
        let n = self.accepted.entry(id.to_owned()).or_insert(0);
        *n += 1;
        (*n > 1).then_some(Violation::PublishedTwice)
    }

    /// True when a send with deduplication id `id` was accepted.
    pub fn accepted(&self, id: &str) -> bool {
        self.accepted.contains_key(id)
    }

    /// Deduplication ids accepted, and those accepted more than once.
    pub fn counts(&self) -> (usize, usize) {
        (
            self.accepted.len(),
            self.accepted.values().filter(|n| **n > 1).count(),
        )
    }
}

/// The instants schedules were created with, per (transaction, schedule name): one
/// name per attempt's retry and per technical re-send.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Instants<K: Ord> {
    first: BTreeMap<(K, String), Timestamp>,
}

impl<K: Ord> Default for Instants<K> {
    fn default() -> Self {
        Self {
            first: BTreeMap::new(),
        }
    }
}

impl<K: Ord + Clone> Instants<K> {
    pub fn new() -> Self {
        Self::default()
    }

    /// A schedule `spec` created for `tx` while its record is `record`: made from the
    /// persisted instant when the record's pending cycle is this schedule's (its
    /// attempt and name), else for a cycle the record has moved past (never for an
    /// attempt not yet decided); and the same instant as every earlier schedule of
    /// that name.
    pub fn created(
        &mut self,
        tx: K,
        record: Option<&TransactionRecord>,
        spec: &ScheduleSpec,
    ) -> Vec<Violation> {
        let mut v = Vec::new();
        let m = spec.event.attempt;
        if let Some(rec) = record {
            let this_cycle = rec.next_attempt == Some(m)
                && rec.schedule_name.as_ref().is_none_or(|n| *n == spec.name);
            let wrong = if this_cycle {
                rec.next_fire_at != Some(spec.fire_at)
            } else {
                rec.current_attempt < m && !rec.status.is_terminal()
            };
            if wrong {
                v.push(Violation::ScheduleNotFromPersistedInstant);
            }
        }
        let name = spec.name.as_str().to_owned();
        let first = *self.first.entry((tx, name)).or_insert(spec.fire_at);
        if first != spec.fire_at {
            v.push(Violation::TwoInstantsForOneAttempt);
        }
        v
    }
}

#[cfg(test)]
mod tests;
