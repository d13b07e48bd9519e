//! The actors around the handlers: the external service, the scheduler and the
//! reconciler's cron.

use super::breaker::OutageMode;
use super::world::{ts, Ev, Kind, Proc, QueueId, World};
use crate::fixture;
use domain::decide::{Input, Known, Run};
use domain::defaults;
use domain::ids::{Attempt, ScheduleName};
use domain::machine::{ReconcileKey, TransactionRecord};
use domain::message::{Origin, Outcome, Response, RetryEvent};
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
                if let Some(v) = again {
                    self.report.count(v);
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
        self.ledger.answer(tx, attempt, outcome);
        // ERROR: it did not run the attempt.
        if first_receipt && outcome != Outcome::Error {
            self.ran(tx, attempt, by);
        }
        // The service echoes the newest round of the key it received.
        let round = self.ledger.round_of(&tx, attempt);
        if self.faults.chance(self.cfg.lost_answer_rate) {
            // Executed, but the answer never reaches the response queue.
            self.report.answers_lost += 1;
            return;
        }
        let answer = self.now + self.service.range(50, 2_000);
        self.at(
            answer,
            Ev::Answer {
                tx,
                attempt,
                outcome,
                round,
            },
        );
        if self.service.chance(self.cfg.late_response_rate) {
            self.report.late_responses += 1;
            let late = self.now + self.service.range(3_600_000, 6 * 3_600_000);
            self.at(
                late,
                Ev::Answer {
                    tx,
                    attempt,
                    outcome,
                    round,
                },
            );
        }
    }

    /// The service that does not deduplicate ran `attempt` of `tx`, from a message
    /// `by` published.
    fn ran(&mut self, tx: usize, attempt: u32, by: &'static str) {
        let n = self.runs.entry((tx, attempt)).or_default();
        *n += 1;
        if *n > 1 {
            *self.report.ran_again_by.entry(by.to_owned()).or_default() += 1;
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

    pub(super) fn answer(&mut self, tx: usize, attempt: u32, outcome: Outcome, round: Option<u32>) {
        let Ok(a) = Attempt::new(attempt) else { return };
        let body = Response {
            transaction_id: self.ids[tx].clone(),
            attempt: a,
            outcome,
            reason: match outcome {
                Outcome::Cancelled => Some(fixture::CANCEL_REASON.to_owned()),
                Outcome::Success | Outcome::Error | Outcome::Rejected => None,
            },
            retry_after_seconds: None,
            round,
            execution: None,
        };
        self.seq += 1;
        let id = self.seq;
        self.responses.send(id, body, self.now);
        self.poll_soon(QueueId::Response);
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
        let run = Run::with_rules(self.cfg.flaws, input, Known::Unread, &ctx, &mut self.jitter);
        self.spawn_after(
            delay,
            Proc {
                kind: Kind::Operator,
                worker: 0,
                msg: None,
                tx,
                attempt: 0,
                run,
                now,
                hold: None,
                probe: false,
                backlog: VecDeque::new(),
                after_rejection: false,
            },
        );
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
        let local = self.now + self.skew.of(Kind::Reconciler, 0);
        let now = ts(local);
        let (hold, probe) = self.reconcile_verdict(&first, local);
        let ctx = self.ctx(now).with_hold(hold).with_probe(probe);
        let tx = self.tx_of(&first.transaction_id).unwrap_or(0);
        let attempt = first.next_attempt.map(Attempt::get).unwrap_or(0);
        let run = Run::with_rules(
            self.cfg.flaws,
            Input::Reconcile(first),
            Known::Unread,
            &ctx,
            &mut self.jitter,
        );
        self.spawn(Proc {
            kind: Kind::Reconciler,
            worker: 0,
            msg: None,
            tx,
            attempt,
            run,
            now,
            hold,
            probe,
            backlog,
            after_rejection: false,
        });
    }
}
