//! The step machine: one message being handled, its plan performed effect by effect,
//! decided again from the record a failed condition hands back.

use super::{
    decide, Ack, Context, Disposition, DropReason, Effect, Input, Known, Observed, Plan, Rejection,
};
use crate::machine::{Counter, TransactionRecord};
use crate::message::RetryEvent;
use crate::policy::RandomSource;
use std::collections::VecDeque;

/// How many times one run may decide again after a failed condition before it gives
/// up (each re-decision is made from the record the failure handed back, so in
/// practice two are the most a run ever needs; an answer racing another answer for the
/// same attempt through a technical re-send can need five).
pub const MAX_REDECISIONS: u8 = 6;

/// What decides a run's plans: the pattern's [`Rules`] in production. The
/// verification crate wraps them to switch on known-bad designs and prove its checks
/// catch them; nothing else implements this.
pub trait Decide: Clone + std::fmt::Debug {
    fn decide(&self, q: Question<'_>, ctx: &Context, rng: &mut dyn RandomSource) -> Plan;
}

/// What a decision is asked: the input, what is known of its record, and whether the
/// stored payload is the one given (known after a create found the transaction).
#[derive(Debug, Clone, Copy)]
pub struct Question<'a> {
    pub input: &'a Input,
    pub known: Known<'a>,
    pub payload_matches: Option<bool>,
}

/// The rules of the pattern ([`decide`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Rules;

impl Decide for Rules {
    fn decide(&self, q: Question<'_>, ctx: &Context, rng: &mut dyn RandomSource) -> Plan {
        decide(q.input, q.known, q.payload_matches, ctx, rng)
    }
}

/// True when the retry event `ev`, decided by `rules` on the record `r` with no
/// breaker verdict, would publish a request (its cycle pending and in force before the
/// deadline, or a send to resume) or, in outbox mode, enqueue one for the publisher: the only events the retry handler asks the breaker
/// about once it has read the record. A stale or duplicate event, or one past its
/// deadline, publishes nothing and spends no half-open round's probe.
pub fn retry_asks_breaker<D: Decide>(
    rules: &D,
    r: &TransactionRecord,
    ev: &RetryEvent,
    ctx: &Context,
) -> bool {
    let unheld = Context {
        hold: None,
        probe: false,
        ..ctx.clone()
    };
    let input = Input::Retry(ev.clone());
    let question = Question {
        input: &input,
        known: Known::Record(r),
        payload_matches: None,
    };
    // A retry's decision draws no jitter.
    rules
        .decide(question, &unheld, &mut crate::policy::FixedRandom(0.5))
        .iter()
        .any(|e| matches!(e, Effect::PublishRequest(_) | Effect::Ack(Ack::Enqueued)))
}

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
pub struct Run<D = Rules> {
    rules: D,
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
        Run::with_rules(Rules, input, known, ctx, rng)
    }
}

impl<D: Decide> Run<D> {
    /// Starts a run decided by `rules`.
    pub fn with_rules(
        rules: D,
        input: Input,
        known: Known<'_>,
        ctx: &Context,
        rng: &mut dyn RandomSource,
    ) -> Self {
        let question = Question {
            input: &input,
            known,
            payload_matches: None,
        };
        let plan = rules.decide(question, ctx, rng);
        let mut run = Self {
            rules,
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
            | (
                Effect::PublishRequest(_) | Effect::PublishRetry(_) | Effect::DeferRetry(_),
                Observed::Published,
            )
            | (Effect::Alert(_), Observed::Alerted)
            | (Effect::Note(_), Observed::Noted)
            | (Effect::Signal(_), Observed::Signalled) => None,
            (e, o) => {
                let err = UnexpectedObservation {
                    effect: e.label(),
                    observed: format!("{o:?}"),
                };
                self.plan.push_front(effect);
                return Err(err);
            }
        };
        // A request or a retry event decided blind carries the round of the record the
        // write just before it returned (accept → publish; open a cycle → its
        // schedule), and so does the confirmation of the cycle that write opened: it
        // confirms that round only, never a later cycle of the same attempt. A later
        // write fills its own.
        if let Observed::Written(rec) = &observed {
            for e in self.plan.iter_mut() {
                let (id, round) = match e {
                    Effect::Write(w) if w.event() == crate::machine::Event::ScheduleConfirmed => {
                        if w.guard.counts[Counter::Round].is_none()
                            && w.transaction_id == rec.transaction_id
                        {
                            w.guard.counts[Counter::Round] = Some(rec.counts[Counter::Round]);
                        }
                        break;
                    }
                    Effect::Write(_) | Effect::Create { .. } => break,
                    Effect::PublishRequest(h) => {
                        // Its correlation id with its round: the record's, never changed.
                        if h.round.is_none() && h.transaction_id == rec.transaction_id {
                            h.correlation_id.clone_from(&rec.correlation_id);
                        }
                        (&h.transaction_id, &mut h.round)
                    }
                    Effect::CreateSchedule(spec) => {
                        (&spec.event.transaction_id, &mut spec.event.round)
                    }
                    Effect::PublishRetry(ev) => (&ev.transaction_id, &mut ev.round),
                    _ => continue,
                };
                if round.is_none() && *id == rec.transaction_id {
                    *round = Some(rec.counts[Counter::Round]);
                }
            }
        }
        self.trail.push((effect, observed));
        if let Some((record, payload_matches)) = again {
            if self.redecisions >= MAX_REDECISIONS {
                self.plan = VecDeque::from([match (&self.input, &record) {
                    // The reconciler holds no message: a record that kept changing
                    // under its run is alive, not stuck; the next run looks again.
                    (Input::Reconcile(_), Some(r)) => {
                        Effect::Drop(DropReason::NotStuck { status: r.status })
                    }
                    _ => Effect::Reject(Rejection::TooManyRedecisions {
                        transaction_id: self.input.transaction_id().clone(),
                    }),
                }]);
            } else {
                self.redecisions += 1;
                let known = match &record {
                    Some(r) => Known::Record(r),
                    None => Known::Missing,
                };
                let question = Question {
                    input: &self.input,
                    known,
                    payload_matches,
                };
                self.plan = self.rules.decide(question, ctx, rng).into();
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
