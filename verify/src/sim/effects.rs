//! A run's effects on the world, each checked by the oracle where it happens.

use super::world::{Ev, LiveSchedule, Proc, QueueId, World};
use domain::decide::{Effect, Observed};
use domain::machine::Actor;
use domain::machine::Event;
use domain::message::Request;
use testkit::oracle::{self, Writer};

impl World<'_> {
    pub(super) fn perform(&mut self, p: &Proc, effect: &Effect) -> Observed {
        match effect {
            Effect::Read(id) => {
                Observed::Record(self.tx_of(id).and_then(|tx| self.records[tx].clone()))
            }
            Effect::Create { record, payload } => {
                let Some(tx) = self.tx_of(&record.transaction_id) else {
                    return Observed::Created;
                };
                if let Some(existing) = self.records[tx].clone() {
                    let same = self.payloads[tx].as_ref() == Some(payload);
                    return Observed::AlreadyExists {
                        record: existing,
                        same_payload: same,
                    };
                }
                for v in oracle::creation(record) {
                    self.report.count(v);
                }
                self.payloads[tx] = Some(payload.clone());
                self.set_record(tx, record.clone());
                self.report.transitions += 1;
                self.stream_record(tx, record);
                Observed::Created
            }
            Effect::Write(w) => {
                let Some(tx) = self.tx_of(&w.transaction_id) else {
                    return Observed::ConditionFailed(None);
                };
                let Some(current) = self.records[tx].clone() else {
                    return Observed::ConditionFailed(None);
                };
                match w.apply(&current) {
                    Ok(next) => {
                        let writer = match p.kind {
                            Actor::ResponseHandler => Writer::Answering(p.attempt),
                            _ => Writer::Other,
                        };
                        for v in oracle::change(Some(&current), w.event(), &next, writer) {
                            self.report.count(v);
                        }
                        self.set_record(tx, next.clone());
                        self.report.transitions += 1;
                        self.stream_record(tx, &next);
                        // Outbox delivery: the retry handler's accepting write is its
                        // send (the publisher sends what it wrote), counted in a
                        // HALF_OPEN round as a probe.
                        if self.cfg.outbox()
                            && p.kind == Actor::RetryHandler
                            && w.event() == Event::RetryEventAccepted
                        {
                            if let (Some(b), Some(n)) = (self.breaker.as_mut(), next.next_attempt) {
                                b.published((
                                    tx,
                                    n.get(),
                                    next.counts[domain::machine::Counter::Round],
                                ));
                            }
                        }
                        Observed::Written(next)
                    }
                    Err(_) => Observed::ConditionFailed(Some(current)),
                }
            }
            Effect::CreateSchedule(spec) => {
                let Some(tx) = self.tx_of(&spec.event.transaction_id) else {
                    return Observed::ScheduleCreated;
                };
                let m = spec.event.attempt;
                for v in self.instants.created(tx, self.records[tx].as_ref(), spec) {
                    self.report.count(v);
                }
                if self.schedules.contains_key(&spec.name) {
                    self.report.schedule_conflicts += 1;
                    return Observed::ScheduleAlreadyExists;
                }
                self.seq += 1;
                let generation = self.seq;
                self.schedules.insert(
                    spec.name.clone(),
                    LiveSchedule {
                        tx,
                        attempt: m,
                        generation,
                    },
                );
                self.report.schedules_created += 1;
                // One-minute precision: fires within the minute after its instant.
                let mut fire = spec.fire_at.millis().max(self.now) + self.latency.range(0, 59_000);
                if self.faults.chance(self.cfg.late_fire_rate) {
                    self.report.late_fires += 1;
                    fire += self.faults.range(60_000, 3_600_000);
                }
                self.at(
                    fire,
                    Ev::Fire {
                        name: spec.name.clone(),
                        generation,
                    },
                );
                Observed::ScheduleCreated
            }
            Effect::DeleteSchedule(name) => match self.schedules.remove(name) {
                Some(_) => Observed::ScheduleDeleted,
                None => Observed::ScheduleNotFound,
            },
            Effect::PublishRequest(h) => {
                let Some(tx) = self.tx_of(&h.transaction_id) else {
                    return Observed::Published;
                };
                let Some(payload) = self.payloads[tx].clone() else {
                    return Observed::Published;
                };
                if let Some(v) = oracle::publish(h.attempt, self.records[tx].as_ref()) {
                    self.report.count(v);
                }
                // Once the record says REJECTED, only a send that began before it may
                // still publish, and only the rejected attempt's key.
                let later = self.records[tx]
                    .as_ref()
                    .is_some_and(|r| h.attempt > r.current_attempt);
                if self.ended_rejected(tx) && (p.after_rejection || later) {
                    self.report.published_after_rejection += 1;
                }
                // Outbox delivery: the FIFO queue drops a repeat of a deduplication id
                // it accepted within its window (answering as for the first).
                if self.cfg.outbox() {
                    let id = h.deduplication_id();
                    let remembered = self
                        .fifo
                        .get(&id)
                        .is_some_and(|at| self.now - *at < super::config::FIFO_DEDUP_WINDOW_MS);
                    if remembered {
                        self.report.fifo_deduplicated += 1;
                        return Observed::Published;
                    }
                    self.fifo.insert(id.clone(), self.now);
                    self.report.fifo_accepted += 1;
                    if let Some(v) = self.sends.accept(&id) {
                        self.report.count(v);
                    }
                }
                let request = Request::new(h.transaction_id.clone(), h.attempt, payload);
                self.report.requests_published += 1;
                if p.kind == Actor::RetryHandler {
                    self.report.retry_requests_published += 1;
                    self.retry_publish_times.push(self.now);
                    if let Some(b) = self.breaker.as_mut() {
                        let round = h.round.unwrap_or(0);
                        b.published((tx, h.attempt.get(), round));
                    }
                    if self.records[tx]
                        .as_ref()
                        .is_some_and(|r| r.current_attempt == h.attempt)
                    {
                        self.report.technical_resends += 1;
                    }
                }
                if p.kind == Actor::Reconciler {
                    self.report.republished += 1;
                }
                let key = request.idempotency_key.as_str().to_owned();
                let arrive = self.now + self.latency.range(5, 100);
                self.last_msg += 1;
                let msg = self.last_msg;
                let by = match p.kind {
                    Actor::ResponseHandler if p.msg.is_none() => "start",
                    kind => kind.as_str(),
                };
                self.at(
                    arrive,
                    Ev::ServiceReceive {
                        tx,
                        attempt: h.attempt.get(),
                        key: key.clone(),
                        round: h.round,
                        msg,
                        by,
                    },
                );
                if self.faults.chance(self.cfg.request_duplicate_rate) {
                    self.report.duplicate_deliveries += 1;
                    let again = self.now + self.latency.range(100, 5_000);
                    self.at(
                        again,
                        Ev::ServiceReceive {
                            tx,
                            attempt: h.attempt.get(),
                            key,
                            round: h.round,
                            msg,
                            by,
                        },
                    );
                }
                Observed::Published
            }
            Effect::PublishRetry(ev) => {
                self.seq += 1;
                let id = self.seq;
                self.retries.send(id, ev.clone(), self.now);
                self.poll_soon(QueueId::Retry);
                Observed::Published
            }
            // An answer the record took: counted by the breaker.
            Effect::Signal(sig) => {
                if let Some(b) = self.breaker.as_mut() {
                    let mut batch = domain::breaker::Tally::default();
                    batch.add(*sig);
                    b.observe(&batch, p.now.millis());
                }
                Observed::Signalled
            }
            // Held by the breaker: visible on the retry queue once its delay passes.
            Effect::DeferRetry(d) => {
                self.seq += 1;
                let id = self.seq;
                let visible = self.now + i64::from(d.delay_seconds) * 1_000;
                self.retries.send(id, d.event.clone(), visible);
                if let Some(tx) = self.tx_of(&d.event.transaction_id) {
                    self.held_by_tx[tx] += 1;
                }
                self.schedule_wake(QueueId::Retry);
                Observed::Published
            }
            Effect::Alert(a) => {
                if let Some(tx) = self.tx_of(&a.transaction_id) {
                    self.alerts[tx] += 1;
                    self.report.alerts += 1;
                    match a.kind {
                        domain::decide::AlertKind::Unanswered => self.report.unanswered += 1,
                        domain::decide::AlertKind::TechnicalExhausted => {
                            self.report.technical_exhausted += 1
                        }
                        domain::decide::AlertKind::Expired
                        | domain::decide::AlertKind::AttemptsExhausted
                        | domain::decide::AlertKind::Rejected
                        | domain::decide::AlertKind::Ambiguous => {}
                    }
                }
                Observed::Alerted
            }
            Effect::Note(_) => Observed::Noted,
            Effect::Ack(_) | Effect::Drop(_) | Effect::Reject(_) => Observed::Published,
        }
    }
}
