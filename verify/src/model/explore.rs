//! What can happen next in a state, and the properties checked on every state.

use super::breaker::{BreakerViolation, OutageMode};
use super::step::ProtocolModel;
use super::world::{Action, Firing, Held, State};
use crate::fixture::Command;
use domain::ids::Attempt;
use domain::machine::Actor;
use domain::machine::Counter;
use domain::machine::{Mark, Status};
use domain::message::Outcome;
use stateright::{Model, Property};
use testkit::oracle::{self, Violation};

impl ProtocolModel {
    /// The properties checked on every reachable state.
    pub const SAFETY: [&'static str; 24] = [
        Violation::DuplicateAccepted.guarantee(),
        Violation::RetryWithoutCancellation.guarantee(),
        Violation::ExceededMaxAttempts.guarantee(),
        Violation::LateResponseApplied.guarantee(),
        Violation::IllegalTransition.guarantee(),
        Violation::ScheduleNotFromPersistedInstant.guarantee(),
        Violation::TwoInstantsForOneAttempt.guarantee(),
        Violation::MessageRejected.guarantee(),
        "a transaction with nothing in flight, no schedule, no scheduler-DLQ event and no lost message is terminal (no reconciler needed)",
        "a transaction with nothing in flight is terminal after the reconciler (none stuck, no retry lost)",
        Violation::AlertMissing.guarantee(),
        Violation::ImpossibleObservation.guarantee(),
        Violation::PendingRetryDropped.guarantee(),
        "a technical failure never consumes an attempt: every attempt after the first follows one the service answered CANCELLED",
        BreakerViolation::HeldRunWrote.guarantee(),
        BreakerViolation::HeldRequestSent.guarantee(),
        BreakerViolation::ProbesExceeded.guarantee(),
        "an outage ends no transaction FAILED (TECHNICAL_EXHAUSTED or UNANSWERED) when it is the scope's only technical failure",
        "each ERROR answer spends at most one technical re-send (an ERROR delivered twice, late, or decided again spends none)",
        "past its deadline a transaction ends, whatever holds it: with nothing in flight, the reconciler leaves it terminal, the outage going on",
        Violation::RecordInconsistent.guarantee(),
        BreakerViolation::ProbeSignalForAnother.guarantee(),
        "after a REJECTED answer is recorded no request is published again: no later attempt, and the rejected one only by a send that began before it",
        "a transaction whose attempt the service answered REJECTED ends FAILED/REJECTED once nothing of it is in flight (unless a message of it was lost, or its deadline ended it first)",
    ];

    /// Checked only in scopes whose service does not deduplicate
    /// ([`Scope::non_idempotent`](super::Scope::non_idempotent)): each (transaction,
    /// attempt) runs at most once.
    pub const EXECUTED_ONCE: &'static str = Violation::ExecutedTwice.guarantee();

    /// Checked only in outbox delivery ([`Scope::outbox`](super::Scope::outbox)):
    /// the FIFO request queue accepts each (transaction, attempt, round) once.
    pub const PUBLISHED_ONCE: &'static str = Violation::PublishedTwice.guarantee();

    /// The safety properties this model checks: [`Self::SAFETY`],
    /// [`Self::EXECUTED_ONCE`] when the service does not deduplicate, and
    /// [`Self::PUBLISHED_ONCE`] in outbox delivery.
    pub fn safety(&self) -> Vec<&'static str> {
        let mut p = Self::SAFETY.to_vec();
        if self.scope.service.runs_every_message() {
            p.push(Self::EXECUTED_ONCE);
        }
        if self.scope.is_outbox() {
            p.push(Self::PUBLISHED_ONCE);
        }
        p
    }
}

/// Delivering message `i` of a queue, and (with the budget) delivering it again while
/// it stays queued: once per distinct message (equal neighbours behave alike).
fn deliveries<T: PartialEq>(
    queue: &[T],
    duplicates: bool,
    deliver: fn(usize, bool) -> Action,
    actions: &mut Vec<Action>,
) {
    for i in 0..queue.len() {
        if i > 0 && queue[i - 1] == queue[i] {
            continue;
        }
        actions.push(deliver(i, false));
        if duplicates {
            actions.push(deliver(i, true));
        }
    }
}

impl ProtocolModel {
    /// The deduplication window may pass when something could be sent again (the
    /// queue remembers a send, or a record holds a claim) and no run is between its
    /// decision to publish and its send: a run lasts less than the 60 s the publish
    /// window keeps from SQS's five minutes (the publisher's timeout), so the window
    /// never passes inside one. What passes it is a stream record retried late, or
    /// the reconciler.
    fn window_may_pass(&self, s: &State) -> bool {
        let remembered =
            !s.fifo.is_empty() || s.records.iter().any(|r| r.publishing_since.is_some());
        let sending = s.runs.iter().any(|r| {
            r.run
                .remaining()
                .any(|e| matches!(e, domain::decide::Effect::PublishRequest(_)))
        });
        remembered && !sending
    }
}

fn has(s: &State, v: Violation) -> bool {
    s.violations.contains(&v)
}

/// Some transaction ended FAILED with `mark`.
fn failed_with(s: &State, mark: Mark) -> bool {
    s.records
        .iter()
        .any(|r| r.status == Status::Failed && r.mark == Some(mark))
}

impl Model for ProtocolModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![self.initial()]
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        if !s.violations.is_empty()
            || !s.breaker_violations.is_empty()
            || s.published_after_rejection
        {
            return; // a counterexample ends here
        }
        let b = s.budgets;
        let dup = b.duplicate_deliveries > 0;
        deliveries(
            &s.requests,
            dup,
            |i, duplicate| Action::ServiceReceive { i, duplicate },
            actions,
        );
        if b.lost_messages > 0 {
            for i in 0..s.requests.len() {
                if i > 0 && s.requests[i - 1] == s.requests[i] {
                    continue;
                }
                actions.push(Action::LoseRequest { i });
            }
        }
        for (&(tx, attempt), answer) in s.service.accepted() {
            let answers = |outcome, may_have_run| Action::ServiceAnswer {
                tx,
                attempt,
                outcome,
                may_have_run,
            };
            match answer {
                // Down: ERROR to every attempt (it did not run them), or silence.
                None if s.down => {
                    if self.scope.outage_mode == OutageMode::Error {
                        actions.push(answers(Outcome::Error, false));
                    }
                }
                None => {
                    if b.technical_answers > 0 {
                        actions.push(answers(Outcome::Error, false));
                        // Outbox delivery: an ERROR may also say the call may have
                        // run (a timeout).
                        if self.scope.is_outbox() {
                            actions.push(answers(Outcome::Error, true));
                        }
                    }
                    if b.rejected_answers > 0 {
                        actions.push(answers(Outcome::Rejected, false));
                    }
                    for outcome in [Outcome::Success, Outcome::Cancelled] {
                        actions.push(answers(outcome, false));
                        if b.lost_messages > 0 {
                            actions.push(Action::LoseAnswer {
                                tx,
                                attempt,
                                outcome,
                            });
                        }
                    }
                }
                Some(outcome) if b.extra_answers > 0 => actions.push(answers(
                    outcome,
                    outcome == Outcome::Error && s.service.may_have_run(&tx, attempt),
                )),
                Some(_) => {}
            }
        }
        deliveries(
            &s.responses,
            dup,
            |i, duplicate| Action::DeliverResponse { i, duplicate },
            actions,
        );
        deliveries(
            &s.retries,
            dup,
            |i, duplicate| Action::DeliverRetry { i, duplicate },
            actions,
        );
        deliveries(
            &s.stream,
            dup,
            |i, duplicate| Action::DeliverStream { i, duplicate },
            actions,
        );
        if b.window_expiries > 0 && self.window_may_pass(s) {
            actions.push(Action::WindowPasses);
        }
        for (i, r) in s.runs.iter().enumerate() {
            if i > 0 && s.runs[i - 1] == *r {
                continue;
            }
            actions.push(Action::Step { run: i });
            // A crash before the first effect equals a delivery that has not happened.
            if b.crashes > 0 && r.performed > 0 {
                actions.push(Action::Crash { run: i });
            }
        }
        for i in 0..s.schedules.len() {
            actions.push(Action::Fire {
                i,
                how: Firing::Once,
            });
            if b.double_fires > 0 {
                actions.push(Action::Fire {
                    i,
                    how: Firing::Twice,
                });
            }
            if b.undeliverable_fires > 0 {
                actions.push(Action::Fire {
                    i,
                    how: Firing::Undeliverable,
                });
            }
        }
        if b.reconciler_runs > 0 {
            for (tx, r) in s.records.iter().enumerate() {
                let Ok(tx) = u8::try_from(tx) else { continue };
                match r.status {
                    // Before the fire instant: create the schedule; after it: requeue.
                    Status::Scheduling => {
                        actions.push(Action::Reconcile { tx, late: false });
                        actions.push(Action::Reconcile { tx, late: true });
                    }
                    // SCHEDULED or SENDING past the threshold; IN_PROGRESS past its
                    // answer deadline.
                    Status::Scheduled | Status::Sending | Status::InProgress => {
                        actions.push(Action::Reconcile { tx, late: true });
                    }
                    _ => {}
                }
            }
        }
        if b.ticks > 0 {
            actions.push(Action::Tick);
        }
        if s.down {
            actions.push(Action::OutageEnds);
        } else if b.outages > 0 {
            actions.push(Action::OutageStarts);
        }
        if b.deadlines > 0 && !s.past_deadline {
            actions.push(Action::DeadlinePasses);
        }
        if b.operator_actions > 0 {
            for (tx, r) in s.records.iter().enumerate() {
                let Ok(tx) = u8::try_from(tx) else { continue };
                if let Some(act) = Command::for_record(r) {
                    actions.push(Action::Operate { tx, act });
                }
            }
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        if !self.scope.interleave {
            if let Some(tx) = Self::action_tx(last, &action) {
                if (0..tx).any(|j| !Self::tx_final(last, j)) {
                    return None;
                }
            }
        }
        let next = self.apply(last, &action);
        // The outage's length bound: executions past it are not explored. A hold
        // writes nothing, so its count is the model's own (each a cycle of waiting,
        // as a re-send's round is).
        let beyond =
            self.scope.breaker()
                && next.records.iter().zip(&next.held).any(|(r, held)| {
                    r.counts[Counter::Round] + u32::from(*held) > self.scope.rounds
                });
        (!beyond).then_some(next)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        let p = Self::SAFETY;
        let mut properties = vec![
            Property::always(p[0], |_, s: &State| !has(s, Violation::DuplicateAccepted)),
            Property::always(p[1], |_, s: &State| {
                !has(s, Violation::RetryWithoutCancellation)
            }),
            Property::always(p[2], |_, s: &State| {
                !has(s, Violation::ExceededMaxAttempts)
                    && !s
                        .records
                        .iter()
                        .any(|r| oracle::over_budget(r.current_attempt.get(), r.max_attempts.get()))
            }),
            Property::always(p[3], |_, s: &State| !has(s, Violation::LateResponseApplied)),
            Property::always(p[4], |_, s: &State| !has(s, Violation::IllegalTransition)),
            Property::always(p[5], |_, s: &State| {
                !has(s, Violation::ScheduleNotFromPersistedInstant)
            }),
            Property::always(p[6], |_, s: &State| {
                !has(s, Violation::TwoInstantsForOneAttempt)
            }),
            Property::always(p[7], |_, s: &State| !has(s, Violation::MessageRejected)),
            Property::always(p[8], |m: &ProtocolModel, s: &State| {
                m.txs().all(|tx| {
                    let t = usize::from(tx);
                    !(ProtocolModel::tx_final(s, tx)
                        && oracle::lost(
                            Some(&s.records[t]),
                            u32::from(s.scheduler_dlq[t]) + u32::from(s.lost[t]),
                        ))
                })
            }),
            Property::always(p[9], |m: &ProtocolModel, s: &State| {
                m.txs().all(|tx| {
                    !ProtocolModel::tx_quiescent(s, tx) || {
                        let settled = m.reconcile_to_fixpoint(s, tx);
                        // An attempt run twice is its own property's (checked only
                        // when the service does not deduplicate).
                        settled
                            .violations
                            .iter()
                            .all(|v| *v == Violation::ExecutedTwice)
                            && ProtocolModel::settled(&settled, tx)
                    }
                })
            }),
            // The model never dead-letters a response (a rejection is itself a
            // violation), so no DLQ excuses a missing alert.
            Property::always(p[10], |m: &ProtocolModel, s: &State| {
                m.txs().all(|tx| {
                    let t = usize::from(tx);
                    !(ProtocolModel::tx_quiescent(s, tx)
                        && oracle::alert_missing(Some(&s.records[t]), u32::from(s.alerted[t]), 0))
                })
            }),
            Property::always(p[11], |_, s: &State| {
                !has(s, Violation::ImpossibleObservation)
            }),
            Property::always(p[12], |_, s: &State| {
                !has(s, Violation::PendingRetryDropped)
            }),
            Property::always(p[13], |m: &ProtocolModel, s: &State| {
                m.txs().all(|tx| {
                    let consumed = s.records[usize::from(tx)].current_attempt.get() - 1;
                    consumed as usize <= s.service.cancelled_attempts(&tx)
                })
            }),
            Property::always(p[14], |_, s: &State| {
                !s.breaker_violations
                    .contains(&BreakerViolation::HeldRunWrote)
            }),
            Property::always(p[15], |_, s: &State| {
                !s.breaker_violations
                    .contains(&BreakerViolation::HeldRequestSent)
            }),
            Property::always(p[16], |_, s: &State| {
                !s.breaker_violations
                    .contains(&BreakerViolation::ProbesExceeded)
            }),
            Property::always(p[17], |m: &ProtocolModel, s: &State| {
                let f = m.scope.faults;
                let outages_only =
                    m.scope.breaker() && f.technical_answers == 0 && f.lost_messages == 0;
                let m_outbox = m.scope.is_outbox();
                // Outbox delivery never sends a request again: one unanswered past
                // its deadline (a silent outage, or an answer later than the
                // reconciler's late run) ends UNANSWERED by design.
                let unanswered = |m| m == Mark::Unanswered && !m_outbox;
                !outages_only
                    || !s.records.iter().any(|r| {
                        r.status == Status::Failed
                            && r.mark
                                .is_some_and(|m| m == Mark::TechnicalExhausted || unanswered(m))
                    })
            }),
            Property::always(p[18], |_, s: &State| {
                s.records.iter().zip(&s.errors).all(|(r, errors)| {
                    let exhausted =
                        r.status == Status::Failed && r.mark == Some(Mark::TechnicalExhausted);
                    let spent = r
                        .counts
                        .technical_resends()
                        .saturating_add(u32::from(exhausted));
                    spent <= u32::from(*errors)
                })
            }),
            Property::always(p[19], |m: &ProtocolModel, s: &State| {
                !s.past_deadline
                    || m.txs().all(|tx| {
                        !ProtocolModel::tx_quiescent(s, tx)
                            || m.reconcile_past_deadline(s, tx).records[usize::from(tx)]
                                .status
                                .is_terminal()
                    })
            }),
            Property::always(p[20], |_, s: &State| !has(s, Violation::RecordInconsistent)),
            Property::always(p[21], |_, s: &State| {
                !s.breaker_violations
                    .contains(&BreakerViolation::ProbeSignalForAnother)
            }),
            Property::always(p[22], |_, s: &State| !s.published_after_rejection),
            Property::always(p[23], |m: &ProtocolModel, s: &State| {
                m.txs().all(|tx| {
                    let t = usize::from(tx);
                    let r = &s.records[t];
                    let rejected = s.service.answer_of(&tx, r.current_attempt.get())
                        == Some(Outcome::Rejected);
                    !(rejected && s.lost[t] == 0 && ProtocolModel::tx_quiescent(s, tx))
                        || (r.status == Status::Failed
                            && matches!(r.mark, Some(Mark::Rejected | Mark::Expired)))
                })
            }),
            // Witnesses: the exploration reaches the situations the guarantees are about.
            Property::sometimes(WITNESS[0], |_, s: &State| {
                s.records.iter().any(|r| {
                    r.status == Status::Failed && r.current_attempt.get() == r.max_attempts.get()
                })
            }),
            Property::sometimes(WITNESS[1], |_, s: &State| {
                s.records
                    .iter()
                    .any(|r| r.status == Status::Succeeded && r.current_attempt.get() > 1)
            }),
            Property::sometimes(WITNESS[2], |_, s: &State| {
                // A's run is still going while its retry already left SCHEDULING.
                s.runs.iter().any(|r| {
                    r.kind == Actor::ResponseHandler
                        && r.performed > 0
                        && matches!(r.held, Held::Response(resp)
                            if s.records[usize::from(resp.tx)].next_attempt
                                == Some(ProtocolModel::attempt(resp.attempt + 1))
                            && s.records[usize::from(resp.tx)].status == Status::Sending)
                })
            }),
            Property::sometimes(WITNESS[3], |_, s: &State| {
                // B died in SENDING: its event waits for redelivery, no B run is active.
                s.records.iter().enumerate().any(|(tx, r)| {
                    r.status == Status::Sending
                        && !s.runs.iter().any(|x| usize::from(x.tx) == tx)
                        && s.retries.iter().any(|e| {
                            usize::from(e.tx) == tx
                                && Some(e.attempt) == r.next_attempt.map(Attempt::get)
                        })
                })
            }),
            Property::sometimes(WITNESS[4], |_, s: &State| {
                s.responses.iter().any(|resp| {
                    resp.attempt < s.records[usize::from(resp.tx)].current_attempt.get()
                })
            }),
            Property::sometimes(WITNESS[5], |_, s: &State| {
                s.requests.iter().any(|r| s.service.seen_key(&r.key))
            }),
            Property::sometimes(WITNESS[6], |_, s: &State| {
                s.scheduler_dlq.iter().any(|n| *n > 0)
                    && s.records.iter().all(|r| r.status.is_terminal())
            }),
            Property::sometimes(WITNESS[7], |_, s: &State| {
                s.runs.iter().any(|r| r.kind == Actor::Reconciler)
                    && s.records.iter().any(|r| r.status == Status::Scheduling)
            }),
            Property::sometimes(WITNESS[8], |_, s: &State| {
                s.records
                    .iter()
                    .any(|r| r.status == Status::Succeeded && r.counts[Counter::Round] > 0)
            }),
            Property::sometimes(WITNESS[9], |_, s: &State| {
                failed_with(s, Mark::TechnicalExhausted)
            }),
            Property::sometimes(WITNESS[10], |_, s: &State| {
                s.records
                    .iter()
                    .zip(&s.held)
                    .any(|(r, held)| r.status == Status::Succeeded && *held > 0)
            }),
            Property::sometimes(WITNESS[11], |_, s: &State| {
                s.breaker.as_ref().is_some_and(|b| !b.probes.is_empty())
            }),
            Property::sometimes(WITNESS[12], |_, s: &State| {
                // Its re-send's event deferred, the record still waits for attempt 1.
                s.records.iter().zip(&s.held).any(|(r, held)| {
                    *held > 0
                        && r.status == Status::Scheduled
                        && r.next_attempt.map(Attempt::get) == Some(1)
                        && r.current_attempt.get() == 1
                })
            }),
            Property::sometimes(WITNESS[13], |_, s: &State| failed_with(s, Mark::Expired)),
            Property::sometimes(WITNESS[15], |_, s: &State| {
                // Resolved while a run or a message of the same transaction is out.
                s.records.iter().enumerate().any(|(tx, r)| {
                    r.status == Status::Succeeded
                        && r.mark == Some(Mark::Resolved)
                        && !ProtocolModel::tx_final(s, u8::try_from(tx).unwrap_or(u8::MAX))
                })
            }),
            Property::sometimes(WITNESS[16], |m: &ProtocolModel, s: &State| {
                s.records.iter().any(|r| {
                    r.status == Status::Succeeded && r.current_attempt.get() > m.scope.max_attempts
                })
            }),
            Property::sometimes(WITNESS[17], |_, s: &State| {
                (0..s.records.len()).any(|tx| s.ended_rejected(u8::try_from(tx).unwrap_or(u8::MAX)))
            }),
            Property::sometimes(WITNESS[14], |_, s: &State| {
                // A handler (not the reconciler) found the deadline passed.
                s.records.iter().any(|r| {
                    r.status == Status::Failed
                        && r.mark == Some(Mark::Expired)
                        && r.last_actor != Actor::Reconciler
                })
            }),
        ];
        if self.scope.service.runs_every_message() {
            properties.push(Property::always(Self::EXECUTED_ONCE, |_, s: &State| {
                !has(s, Violation::ExecutedTwice)
            }));
        }
        if self.scope.is_outbox() {
            properties.push(Property::always(Self::PUBLISHED_ONCE, |_, s: &State| {
                !has(s, Violation::PublishedTwice)
            }));
            properties.push(Property::sometimes(OUTBOX_WITNESS[0], |_, s: &State| {
                s.runs
                    .iter()
                    .any(|r| r.kind == Actor::Publisher && r.performed > 0)
                    && s.records.iter().any(|r| r.publishing_since.is_some())
            }));
            properties.push(Property::sometimes(OUTBOX_WITNESS[1], |_, s: &State| {
                s.fifo_dropped
            }));
            properties.push(Property::sometimes(OUTBOX_WITNESS[2], |_, s: &State| {
                failed_with(s, Mark::Ambiguous)
            }));
            properties.push(Property::sometimes(OUTBOX_WITNESS[3], |_, s: &State| {
                s.records
                    .iter()
                    .any(|r| r.status == Status::Succeeded && r.counts[Counter::Round] > 0)
            }));
            properties.push(Property::sometimes(OUTBOX_WITNESS[5], |_, s: &State| {
                s.claim_expired
            }));
            properties.push(Property::sometimes(OUTBOX_WITNESS[4], |_, s: &State| {
                failed_with(s, Mark::Unanswered) && s.lost.iter().any(|n| *n > 0)
            }));
        }
        properties
    }
}

/// Situations an outbox scope must reach.
pub const OUTBOX_WITNESS: [&str; 6] = [
    "the publisher has claimed an intent and is under way",
    "a send is repeated while the queue remembers its deduplication id, which drops it",
    "a transaction ends FAILED/AMBIGUOUS after an ERROR that may have run (not sent again)",
    "a transaction succeeds after a re-send that followed an ERROR NOT_RUN (a new round)",
    "an intent whose send may not have gone out ends FAILED/UNANSWERED, not sent again",
    "the publisher finds its claim older than the window and does not send it again",
];

/// Situations the exploration must reach (otherwise the check would prove little).
pub const WITNESS: [&str; 18] = [
    "a transaction fails after exhausting its attempts",
    "a transaction succeeds on a retry",
    "the retry event overtakes the response handler (arrives while SCHEDULING)",
    "the retry handler died in SENDING and its event awaits redelivery",
    "a late response is in flight",
    "the service receives a duplicate publish of an accepted key",
    "a transaction completes after its scheduler event went to the DLQ",
    "the reconciler acts on a SCHEDULING transaction",
    "a transaction succeeds after a technical re-send",
    "a transaction ends FAILED with its technical re-sends spent",
    "a transaction succeeds after the breaker held its retry",
    "a request goes out as the breaker's HALF_OPEN probe",
    "the breaker held the re-send of attempt 1 (the attempt kept)",
    "a transaction ends FAILED/EXPIRED at its deadline",
    "a handler's decision (not the reconciler's) ends a transaction at its deadline",
    "an operator resolves a transaction while its retry cycle is under way",
    "a transaction an operator replayed ends SUCCEEDED on the attempt the replay added",
    "a transaction ends FAILED/REJECTED on the service's REJECTED answer",
];
