//! The actors around the handlers: the external service, the scheduler and the
//! reconciler's cron.

use super::breaker::OutageMode;
use super::world::{ts, Answer, Ev, Proc, QueueId, World};
use crate::fixture;
use domain::decide::Input;
use domain::defaults;
use domain::ids::{Attempt, ScheduleName};
use domain::machine::Actor;
use domain::machine::Status;
use domain::machine::{ReconcileKey, TransactionRecord};
use domain::message::{Execution, Origin, Outcome, Response, RetryEvent};
use std::collections::VecDeque;
use testkit::oracle::Fate;

impl World<'_> {
    // -- the external service ----------------------------------------------

    pub(super) fn service_receive(
        &mut self,
        tx: usize,
        attempt: u32,
        key: String,
        round: Option<u32>,
        (msg, by): (u64, &'static str),
    ) {
        let down = self.cfg.in_outage(self.now - fixture::EPOCH_MS);
        if down && self.cfg.outage_mode == OutageMode::Silent {
            // The service is down and says nothing.
            self.report.outage_unanswered += 1;
            return;
        }
        if self.faults.chance(self.cfg.silent_rate) {
            // The request never reaches the service: no answer will ever come.
            self.report.requests_lost += 1;
            return;
        }
        // A service that does not deduplicate runs each message it receives once: a
        // message new to it runs the attempt again unless it answered it ERROR.
        let first_receipt = self.cfg.service.runs_every_message() && {
            let new = self.messages_received.insert(msg);
            if !new {
                self.report.request_copies += 1;
            }
            new
        };
        let again = if first_receipt {
            self.ledger.runs_again(&tx, attempt)
        } else {
            None
        };
        let max = fixture::budget(self.records[tx].as_ref(), self.cfg.max_attempts);
        let receipt = self
            .ledger
            .receive(tx, &self.ids[tx], attempt, &key, round, max);
        for v in receipt.violations {
            self.report.count(v);
        }
        match receipt.fate {
            Fate::Deduplicated => {
                self.report.requests_deduplicated += 1;
                if again.is_some() {
                    self.ran(tx, attempt, by);
                }
                return;
            }
            Fate::AlreadyAccepted => return,
            Fate::Accepted => {}
        }
        self.report.requests_accepted += 1;
        let outcome = if down {
            self.report.outage_errors += 1;
            Outcome::Error
        } else if self.service.chance(self.cfg.technical_rate) {
            self.report.technical_failures += 1;
            Outcome::Error
        } else if self.service.chance(self.cfg.rejected_rate) {
            self.report.rejected_answers += 1;
            Outcome::Rejected
        } else if self.service.chance(self.cfg.cancel_rate) {
            Outcome::Cancelled
        } else {
            Outcome::Success
        };
        // Outbox delivery: an ERROR says whether the call may have run (an outage's
        // did not: the service was down).
        let execution = (self.cfg.outbox() && outcome == Outcome::Error).then(|| {
            if !down && self.stream_rng.chance(self.cfg.unknown_error_share) {
                self.report.errors_unknown += 1;
                Execution::Unknown
            } else {
                self.report.errors_not_run += 1;
                Execution::NotRun
            }
        });
        if execution == Some(Execution::Unknown) {
            self.ledger.answer_error_unknown(tx, attempt);
        } else {
            self.ledger.answer(tx, attempt, outcome);
        }
        // ERROR: it did not run the attempt, unless it says it may have.
        if first_receipt && (outcome != Outcome::Error || execution == Some(Execution::Unknown)) {
            self.ran(tx, attempt, by);
        }
        // The service echoes the newest round of the key it received.
        let round = self.ledger.round_of(&tx, attempt);
        if self.faults.chance(self.cfg.lost_answer_rate) {
            // Executed, but the answer never reaches the response queue.
            self.report.answers_lost += 1;
            return;
        }
        let at = self.now + self.service.range(50, 2_000);
        let answer = Answer {
            tx,
            attempt,
            outcome,
            round,
            execution,
        };
        self.at(at, Ev::Answer(answer.clone()));
        if self.service.chance(self.cfg.late_response_rate) {
            self.report.late_responses += 1;
            let late = self.now + self.service.range(3_600_000, 6 * 3_600_000);
            self.at(late, Ev::Answer(answer));
        }
    }

    /// The service that does not deduplicate ran `attempt` of `tx`, from a message
    /// `by` published: a run beyond the attempt's first is an
    /// [`ExecutedTwice`](testkit::oracle::Violation::ExecutedTwice). (Whether a
    /// message runs the attempt is `Service::runs_again`'s answer; the ledger's may
    /// come from a copy of an earlier message the deduplicating service took anew
    /// after an ERROR, which runs nothing: only runs are counted.)
    fn ran(&mut self, tx: usize, attempt: u32, by: &'static str) {
        let n = self.runs.entry((tx, attempt)).or_default();
        *n += 1;
        if *n > 1 {
            *self.report.ran_again_by.entry(by.to_owned()).or_default() += 1;
            self.report.count(testkit::oracle::Violation::ExecutedTwice);
        }
    }

    /// Its runs per (transaction, attempt), once the run is over.
    pub(super) fn classify_runs(&mut self) {
        for n in self.runs.values() {
            self.report.attempts_run += 1;
            self.report.runs += u64::from(*n);
            if *n > 1 {
                self.report.executed_twice += 1;
            }
            self.report.most_runs = self.report.most_runs.max(u64::from(*n));
        }
    }

    pub(super) fn answer(&mut self, answer: Answer) {
        let Ok(attempt) = Attempt::new(answer.attempt) else {
            return;
        };
        let body = Response {
            transaction_id: self.ids[answer.tx].clone(),
            attempt,
            outcome: answer.outcome,
            reason: match answer.outcome {
                Outcome::Cancelled => Some(fixture::CANCEL_REASON.to_owned()),
                Outcome::Success | Outcome::Error | Outcome::Rejected => None,
            },
            retry_after_seconds: None,
            round: answer.round,
            execution: answer.execution,
        };
        self.seq += 1;
        let id = self.seq;
        self.responses.send(id, body, self.now);
        self.poll_soon(QueueId::Response);
    }

    // -- outbox delivery: the stream and the publisher ----------------------

    /// A write left `image` SENDING with no claim: its stream record reaches the
    /// publisher after the stream's lag, and sometimes twice (a batch delivered
    /// again).
    pub(super) fn stream_record(&mut self, tx: usize, image: &TransactionRecord) {
        if !self.cfg.outbox() || image.status != Status::Sending || image.publishing_since.is_some()
        {
            return;
        }
        let (lo, hi) = super::config::STREAM_LAG_MS;
        let lag = self.stream_rng.range(lo, hi);
        self.seq += 1;
        let id = self.seq;
        self.stream.insert(id, (image.clone(), 0));
        self.report.stream_records += 1;
        self.at(self.now + lag, Ev::Stream(id));
        if self.stream_rng.chance(self.cfg.duplicate_rate) {
            self.seq += 1;
            let copy = self.seq;
            self.stream.insert(copy, (image.clone(), 0));
            self.report.stream_redeliveries += 1;
            let (lo, hi) = super::config::STREAM_RETRY_MS;
            let again = self.now + lag + self.stream_rng.range(lo, hi);
            self.at(again, Ev::Stream(copy));
        }
        let _ = tx;
    }

    /// The publisher handles stream record `id`: the domain's `decide_publish` on its
    /// image.
    pub(super) fn publish(&mut self, id: u64) {
        let Some((image, _)) = self.stream.get(&id).cloned() else {
            return;
        };
        let Some(tx) = self.tx_of(&image.transaction_id) else {
            return;
        };
        let attempt = image.next_attempt.map(Attempt::get).unwrap_or(0);
        let local = self.now + self.skew.of(Actor::Publisher, 0);
        let now = ts(local);
        let ctx = self.ctx(now);
        let run = self.decide(Input::Publish(image), &ctx);
        self.spawn(Proc {
            msg: Some(id),
            ..Proc::new(Actor::Publisher, tx, attempt, run, now)
        });
    }

    // -- the scheduler -----------------------------------------------------

    pub(super) fn fire(&mut self, name: ScheduleName, generation: u64) {
        let Some(live) = self.schedules.get(&name).cloned() else {
            return;
        };
        if live.generation != generation {
            return;
        }
        let event = RetryEvent {
            transaction_id: self.ids[live.tx].clone(),
            origin: Origin::RetryScheduler,
            attempt: live.attempt,
            round: None,
        };
        if self.faults.chance(self.cfg.scheduler_failure_rate) {
            // Retries exhausted: the scheduler's DLQ keeps the event.
            self.schedules.remove(&name);
            self.report.dlq_scheduler += 1;
            self.dlq_by_tx[live.tx] += 1;
            return;
        }
        self.seq += 1;
        let id = self.seq;
        self.retries.send(id, event, self.now);
        self.poll_soon(QueueId::Retry);
        if self.faults.chance(self.cfg.double_fire_rate) {
            self.report.double_fires += 1;
            let again = self.now + self.faults.range(1_000, 600_000);
            self.at(again, Ev::Fire { name, generation });
        } else {
            self.schedules.remove(&name);
        }
    }

    // -- operators ---------------------------------------------------------

    /// An operator looks at transaction `tx` (as `retryctl list` shows it) and, a
    /// human while later (1 s to 10 min), runs the command that fits what it saw:
    /// `resolve` while it waits for its retry, `replay` with one more attempt once it
    /// ended FAILED by its cancellations. The command reads the record again and
    /// writes guarded by what it read, racing the handlers; a record that moved on
    /// meanwhile refuses it.
    pub(super) fn operate(&mut self, tx: usize) {
        let Some(r) = self.records[tx].as_ref() else {
            return;
        };
        let Some(command) = fixture::Command::for_record(r) else {
            return;
        };
        let input = command.input(self.ids[tx].clone());
        let delay = self.operator.range(1_000, 600_000);
        let now = ts(self.now + delay);
        let ctx = self.ctx(now);
        let run = self.decide(input, &ctx);
        self.spawn_after(delay, Proc::new(Actor::Operator, tx, 0, run, now));
    }

    // -- the reconciler ----------------------------------------------------

    pub(super) fn reconciler_tick(&mut self) {
        if self.reconciler_busy {
            return;
        }
        let before = ts(self.now - self.cfg.reconcile_threshold_ms);
        let mut found: Vec<TransactionRecord> = Vec::new();
        'outer: for shard in 0..defaults::RECONCILE_SHARDS {
            let partition = ReconcileKey::partition_for(shard);
            let lo = (partition.clone(), ts(i64::MIN), 0usize);
            let hi = (partition, before, 0usize);
            for (_, _, tx) in self.index.range(lo..hi) {
                if found.len() >= self.cfg.reconcile_max_items {
                    break 'outer;
                }
                if let Some(r) = &self.records[*tx] {
                    found.push(r.clone());
                }
            }
        }
        self.last_tick_found = found.len();
        if found.is_empty() {
            return;
        }
        self.report.reconciler_invocations += 1;
        self.reconciler_busy = true;
        let mut backlog: VecDeque<TransactionRecord> = found.into();
        let Some(first) = backlog.pop_front() else {
            self.reconciler_busy = false;
            return;
        };
        self.report.reconciler_actions += 1;
        let local = self.now + self.skew.of(Actor::Reconciler, 0);
        let now = ts(local);
        let (hold, probe) = self.reconcile_verdict(&first, local);
        let ctx = self.ctx(now).with_hold(hold).with_probe(probe);
        let tx = self.tx_of(&first.transaction_id).unwrap_or(0);
        let attempt = first.next_attempt.map(Attempt::get).unwrap_or(0);
        let run = self.decide(Input::Reconcile(first), &ctx);
        self.spawn(Proc {
            hold,
            probe,
            backlog,
            ..Proc::new(Actor::Reconciler, tx, attempt, run, now)
        });
    }
}
