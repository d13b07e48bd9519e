//! Known-bad designs from the article, switched on around the production rules so
//! the model checker and the simulator can prove they would catch them.
//!
//! [`Flaws`] decides like [`domain::decide::Rules`] and then rewrites what the rules
//! see or plan; with every switch off it is the rules, untouched. The production
//! rules carry no switch: nothing but this crate builds a flawed decision.

use domain::decide::{
    Ack, Context, Decide, Delivery, DropReason, Effect, Input, Known, Plan, Question,
    RequestHeader, Rules,
};
use domain::ids::MaxAttempts;
use domain::machine::{Event, Status, TransactionRecord};
use domain::message::Outcome;
use domain::policy::RandomSource;

/// The switches, one per known-bad design.
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
    /// No answer deadline: the reconciler leaves IN_PROGRESS alone, so a request never
    /// answered (or a start that crashed before publishing) waits forever.
    pub no_answer_deadline: bool,
    /// A technical failure taken for a business rejection: an ERROR answer is handled
    /// as CANCELLED, so an outage consumes attempts.
    pub technical_as_cancelled: bool,
    /// The retry handler ignores the circuit breaker: a retry due while the service is
    /// down is sent into it instead of paused.
    pub ignores_breaker: bool,
    /// A retry event the breaker holds back begins its send before it is deferred
    /// (SCHEDULED → SENDING written): the record says a request may be out though
    /// none left, and the hold has become an arrow that meets every other.
    pub held_event_begins_send: bool,
    /// The answer's `round` not read: an ERROR delivered late or twice, or decided
    /// again by a run whose re-send already went out, spends a second re-send.
    pub error_round_ignored: bool,
    /// The retry handler's probe sent like any request: an ERROR answering it spends a
    /// technical re-send, so the breaker's probe rounds exhaust the transaction the
    /// probe happens to pick.
    pub probe_spends_resend: bool,
    /// No transaction deadline: a transaction paused, held or waiting when its
    /// deadline passes goes on cycling (an outage that never ends keeps it for ever).
    pub no_transaction_deadline: bool,
    /// Any answer closes a HALF_OPEN breaker (the design before signals were tied to
    /// the probe): a late answer, or one redriven from the response DLQ, closes it
    /// while the service may still be down.
    pub any_answer_closes: bool,
    /// Outbox delivery: the publisher sends an intent again whatever the age of its
    /// claim (no publish window), so a repeat can come after the FIFO queue forgot
    /// the first send.
    pub resends_old_claim: bool,
    /// Outbox delivery: the retry handler still publishes the request itself, as in
    /// direct delivery, beside the publisher.
    pub retry_publishes_in_outbox: bool,
}

impl Flaws {
    pub const NONE: Flaws = Flaws {
        retry_rejects_scheduling: false,
        fire_time_at_create: false,
        retry_discards_sending: false,
        attempts_from_zero: false,
        no_answer_deadline: false,
        technical_as_cancelled: false,
        ignores_breaker: false,
        held_event_begins_send: false,
        error_round_ignored: false,
        probe_spends_resend: false,
        no_transaction_deadline: false,
        any_answer_closes: false,
        resends_old_claim: false,
        retry_publishes_in_outbox: false,
    };

    /// The designs `set` switches on, and no other.
    pub fn only(set: impl FnOnce(&mut Flaws)) -> Flaws {
        let mut flaws = Flaws::NONE;
        set(&mut flaws);
        flaws
    }

    /// The known-bad designs by the names the command lines take.
    pub const NAMES: [&'static str; 14] = [
        "retry-rejects-scheduling",
        "fire-time-at-create",
        "retry-discards-sending",
        "attempts-from-zero",
        "no-answer-deadline",
        "technical-as-cancelled",
        "ignores-breaker",
        "held-event-begins-send",
        "error-round-ignored",
        "probe-spends-resend",
        "no-transaction-deadline",
        "any-answer-closes",
        "resends-old-claim",
        "retry-publishes-in-outbox",
    ];

    /// Switches on the design called `name` (one of [`Flaws::NAMES`]); false for an
    /// unknown name.
    pub fn switch_on(&mut self, name: &str) -> bool {
        let flag = match name {
            "retry-rejects-scheduling" => &mut self.retry_rejects_scheduling,
            "fire-time-at-create" => &mut self.fire_time_at_create,
            "retry-discards-sending" => &mut self.retry_discards_sending,
            "attempts-from-zero" => &mut self.attempts_from_zero,
            "no-answer-deadline" => &mut self.no_answer_deadline,
            "technical-as-cancelled" => &mut self.technical_as_cancelled,
            "ignores-breaker" => &mut self.ignores_breaker,
            "held-event-begins-send" => &mut self.held_event_begins_send,
            "error-round-ignored" => &mut self.error_round_ignored,
            "probe-spends-resend" => &mut self.probe_spends_resend,
            "no-transaction-deadline" => &mut self.no_transaction_deadline,
            "any-answer-closes" => &mut self.any_answer_closes,
            "resends-old-claim" => &mut self.resends_old_claim,
            "retry-publishes-in-outbox" => &mut self.retry_publishes_in_outbox,
            _ => return false,
        };
        *flag = true;
        true
    }

    /// The retry handler discards the pending attempt's event found in `status`.
    fn discards(&self, status: Status) -> bool {
        (self.retry_rejects_scheduling && status == Status::Scheduling)
            || (self.retry_discards_sending && status == Status::Sending)
    }
}

impl Decide for Flaws {
    fn decide(&self, q: Question<'_>, ctx: &Context, rng: &mut dyn RandomSource) -> Plan {
        // An ERROR read as CANCELLED; the answer's round not read.
        let rewritten;
        let input = match q.input {
            Input::Response(r)
                if (self.technical_as_cancelled && r.outcome == Outcome::Error)
                    || (self.error_round_ignored && r.round.is_some()) =>
            {
                let mut r = r.clone();
                if self.technical_as_cancelled && r.outcome == Outcome::Error {
                    r.outcome = Outcome::Cancelled;
                }
                if self.error_round_ignored {
                    r.round = None;
                }
                rewritten = Input::Response(r);
                &rewritten
            }
            input => input,
        };
        let q = Question { input, ..q };
        // The deadline never reached.
        let undated;
        let ctx = if self.no_transaction_deadline {
            undated = ctx
                .clone()
                .with_transaction_deadline(std::time::Duration::from_secs(u64::from(u32::MAX)));
            &undated
        } else {
            ctx
        };
        // The retry handler decides as in direct delivery.
        let direct;
        let ctx = match input {
            Input::Retry(_)
                if self.retry_publishes_in_outbox && ctx.rules.delivery == Delivery::Outbox =>
            {
                direct = ctx.clone().with_delivery(Delivery::Direct);
                &direct
            }
            _ => ctx,
        };
        // The breaker's hold not consulted; its probe not told.
        let unheld;
        let ctx = match input {
            Input::Retry(_)
                if (self.ignores_breaker && ctx.hold.is_some())
                    || (self.probe_spends_resend && ctx.probe) =>
            {
                let mut c = ctx.clone();
                if self.ignores_breaker {
                    c = c.with_hold(None);
                }
                if self.probe_spends_resend {
                    c = c.with_probe(false);
                }
                unheld = c;
                &unheld
            }
            _ => ctx,
        };
        // Counting from zero spends the budget at n > max instead of n >= max: the
        // rules decide as if the record allowed one attempt more.
        let widened;
        let known = match (input, q.known) {
            (Input::Response(_), Known::Record(r)) if self.attempts_from_zero => {
                widened = TransactionRecord {
                    max_attempts: MaxAttempts::new(r.max_attempts.get() + 1)
                        .unwrap_or(r.max_attempts),
                    ..r.clone()
                };
                Known::Record(&widened)
            }
            (_, known) => known,
        };
        let q = Question { known, ..q };
        if self.no_answer_deadline {
            let waiting = match (input, known) {
                (Input::Reconcile(_), Known::Record(r)) => Some(r.status),
                (Input::Reconcile(r), Known::Unread) => Some(r.status),
                _ => None,
            };
            if let Some(status @ Status::InProgress) = waiting {
                return vec![Effect::Drop(DropReason::NotStuck { status })];
            }
        }
        if let (Input::Retry(ev), Known::Record(r)) = (input, known) {
            if r.next_attempt == Some(ev.attempt) && self.discards(r.status) {
                return vec![Effect::Drop(DropReason::DuplicateRetry {
                    attempt: ev.attempt,
                    status: r.status,
                })];
            }
        }
        let mut plan = Rules.decide(q, ctx, rng);
        if self.resends_old_claim {
            resend_old_claim(&mut plan, input, known);
        }
        for effect in &mut plan {
            let Effect::Write(w) = effect else { continue };
            if self.attempts_from_zero {
                w.guard.budget = None;
            }
            if self.retry_rejects_scheduling && w.event() == Event::RetryEventAccepted {
                if let Ok(narrow) = w.clone().only_from(&[Status::Scheduled]) {
                    *w = narrow;
                }
            }
        }
        if let (true, Input::Retry(ev), Some(_)) = (self.held_event_begins_send, input, ctx.hold) {
            if matches!(plan.first(), Some(Effect::DeferRetry(_))) {
                if let Ok(arrow) = domain::machine::Arrow::new(
                    &[Status::Scheduling, Status::Scheduled],
                    Event::RetryEventAccepted,
                ) {
                    let mut w = domain::machine::Write::new(
                        ev.transaction_id.clone(),
                        arrow,
                        ctx.now,
                        domain::machine::Actor::RetryHandler,
                    );
                    w.guard.next_attempt = Some(ev.attempt);
                    plan.insert(0, Effect::Write(w));
                }
            }
        }
        if self.any_answer_closes {
            for effect in &mut plan {
                if let Effect::Signal(s @ domain::breaker::Signal::Answered) = effect {
                    *s = domain::breaker::Signal::ProbeAnswered;
                }
            }
        }
        if self.fire_time_at_create {
            // The schedule is created before its instant is persisted.
            let persist = plan.iter().position(
                |e| matches!(e, Effect::Write(w) if w.event() == Event::ResponseCancelledRetry),
            );
            // (The breaker's signal after the write stays after it.)
            if let Some(i) = persist {
                let create = (i + 1..plan.len())
                    .find(|&j| !matches!(plan[j], Effect::Signal(_)))
                    .filter(|&j| matches!(plan[j], Effect::CreateSchedule(_)));
                if let Some(j) = create {
                    let schedule = plan.remove(j);
                    plan.insert(i, schedule);
                }
            }
        }
        plan
    }
}

/// A plan that leaves a claim older than the publish window unsent
/// (`Ack::PublishUnconfirmed`) sends it again before its write to IN_PROGRESS.
fn resend_old_claim(plan: &mut Plan, input: &Input, known: Known<'_>) {
    if !plan
        .iter()
        .any(|e| matches!(e, Effect::Ack(Ack::PublishUnconfirmed)))
    {
        return;
    }
    let record = match (known, input) {
        (Known::Record(r), _) => r,
        (_, Input::Publish(r) | Input::Reconcile(r)) => r,
        _ => return,
    };
    let Some(attempt) = record.next_attempt else {
        return;
    };
    let at = plan
        .iter()
        .position(|e| matches!(e, Effect::Write(_)))
        .unwrap_or(0);
    plan.insert(
        at,
        Effect::PublishRequest(RequestHeader::of(record, attempt)),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use domain::message::Response;
    use domain::policy::FixedRandom;
    use domain::{RetryEvent, Timestamp, TransactionId};

    /// With every switch off the flawed rules are the rules, plan for plan.
    #[test]
    fn no_flaw_decides_like_the_rules() {
        let ctx = crate::fixture::context(
            Timestamp::from_millis(crate::fixture::EPOCH_MS),
            &crate::fixture::article_policies(),
            std::time::Duration::ZERO,
        );
        let id = TransactionId::parse("TX-1").unwrap();
        let mut inputs = Vec::new();
        for n in 1..=3 {
            let attempt = domain::Attempt::new(n).unwrap();
            for outcome in [Outcome::Success, Outcome::Cancelled, Outcome::Error] {
                inputs.push(Input::Response(Response {
                    transaction_id: id.clone(),
                    attempt,
                    outcome,
                    reason: None,
                    retry_after_seconds: None,
                    round: None,
                    execution: None,
                }));
            }
            inputs.push(Input::Retry(RetryEvent {
                transaction_id: id.clone(),
                origin: domain::Origin::RetryScheduler,
                attempt,
                round: None,
            }));
        }
        let mut records = Vec::new();
        for &status in Status::ALL {
            let mut r = TransactionRecord::started(
                id.clone(),
                MaxAttempts::new(2).unwrap(),
                Timestamp::from_millis(0),
            );
            r.status = status;
            r.next_attempt = Some(domain::Attempt::new(2).unwrap());
            r.next_fire_at = Some(Timestamp::from_millis(1));
            records.push(r);
        }
        for input in &inputs {
            let mut knowns = vec![Known::Unread, Known::Missing];
            knowns.extend(records.iter().map(Known::Record));
            for known in knowns {
                let q = Question {
                    input,
                    known,
                    payload_matches: None,
                };
                assert_eq!(
                    Flaws::NONE.decide(q, &ctx, &mut FixedRandom(0.3)),
                    Rules.decide(q, &ctx, &mut FixedRandom(0.3)),
                    "{input:?} / {known:?}"
                );
            }
        }
    }

    #[test]
    fn every_name_switches_one_design_on() {
        for name in Flaws::NAMES {
            let mut f = Flaws::NONE;
            assert!(f.switch_on(name), "{name}");
            assert_ne!(f, Flaws::NONE, "{name}");
        }
        let mut f = Flaws::NONE;
        assert!(!f.switch_on("nope"));
    }
}
