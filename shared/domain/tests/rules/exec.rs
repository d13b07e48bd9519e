//! Each function's bundle performs exactly the effects [`performs`] allows its input.

use domain::decide::{Ack, Alert, AlertKind};
use domain::decide::{Deferred, Effect, Input, RequestHeader, ScheduleSpec};
use domain::exec::*;
use domain::ids::{Attempt, MaxAttempts, Timestamp};
use domain::ids::{ScheduleName, TransactionId};
use domain::machine::{Actor, Event, Status};
use domain::machine::{TransactionRecord, Write};
use domain::message::{Origin, Outcome, Response};
use domain::message::{Payload, Request, RetryEvent};
use testkit::memory::{block_on_ready, MemoryQueue, MemoryScheduler, MemoryStore};

fn id() -> TransactionId {
    TransactionId::parse("TX-E").unwrap()
}

fn effects() -> Vec<Effect> {
    let a2 = Attempt::new(2).unwrap();
    let record = TransactionRecord::started(
        id(),
        MaxAttempts::new(3).unwrap(),
        Timestamp::from_millis(0),
    );
    let event = RetryEvent {
        transaction_id: id(),
        origin: Origin::Reconciler,
        attempt: a2,
        round: None,
    };
    vec![
        Effect::Read(id()),
        Effect::Create {
            record: record.clone(),
            payload: Payload::from_json("{}").unwrap(),
        },
        Effect::Write(Write::new(
            id(),
            domain::arrow!([Status::InProgress], Event::Success),
            Timestamp::from_millis(1),
            Actor::ResponseHandler,
        )),
        Effect::CreateSchedule(ScheduleSpec {
            name: ScheduleName::for_retry(&id(), a2),
            fire_at: Timestamp::from_millis(5),
            event: event.clone(),
        }),
        Effect::DeleteSchedule(ScheduleName::for_retry(&id(), a2)),
        Effect::PublishRequest(RequestHeader {
            transaction_id: id(),
            attempt: Attempt::FIRST,
            round: Some(0),
            correlation_id: None,
        }),
        Effect::PublishRetry(event.clone()),
        Effect::DeferRetry(Deferred {
            event,
            delay_seconds: 30,
        }),
        Effect::Signal(domain::breaker::Signal::Answered),
        Effect::Note(domain::audit::AuditEntry::publish_unconfirmed(
            &record,
            Actor::Publisher,
            Timestamp::from_millis(0),
        )),
        Effect::Alert(Alert {
            kind: AlertKind::AttemptsExhausted,
            transaction_id: id(),
            attempts: a2,
            last_reason: None,
        }),
        Effect::Ack(Ack::Succeeded),
    ]
}

fn inputs() -> Vec<Input> {
    let start = TransactionRecord::started(
        id(),
        MaxAttempts::new(3).unwrap(),
        Timestamp::from_millis(0),
    );
    vec![
        Input::Response(Response {
            transaction_id: id(),
            attempt: Attempt::FIRST,
            outcome: Outcome::Success,
            reason: None,
            retry_after_seconds: None,
            round: None,
            execution: None,
        }),
        Input::Retry(RetryEvent {
            transaction_id: id(),
            origin: Origin::RetryScheduler,
            attempt: Attempt::FIRST,
            round: None,
        }),
        Input::Reconcile(start),
        Input::Start {
            transaction_id: id(),
            payload: Payload::from_json("{}").unwrap(),
            max_attempts: MaxAttempts::new(3).unwrap(),
            correlation_id: None,
        },
        Input::Resolve(id()),
        Input::Replay {
            transaction_id: id(),
            budget: 1,
        },
        Input::Publish(TransactionRecord::started_queued(
            id(),
            MaxAttempts::new(3).unwrap(),
            Timestamp::from_millis(0),
            8,
        )),
    ]
}

#[test]
fn every_bundle_performs_exactly_what_its_input_may_plan() {
    let store = MemoryStore::new();
    store.put(
        TransactionRecord::started(
            id(),
            MaxAttempts::new(3).unwrap(),
            Timestamp::from_millis(0),
        ),
        Some(Payload::from_json("{}").unwrap()),
    );
    let scheduler = MemoryScheduler::new();
    let requests = MemoryQueue::<Request>::new();
    let retries = MemoryQueue::<RetryEvent>::new();
    let mut performed = 0;
    for input in inputs() {
        for effect in effects() {
            let got = match &input {
                Input::Response(_) => block_on_ready(
                    ResponsePorts {
                        store: &store,
                        scheduler: &scheduler,
                        retries: &retries,
                        notes: &store,
                    }
                    .perform(&effect),
                ),
                Input::Retry(_) => block_on_ready(
                    RetryPorts {
                        store: &store,
                        requests: &requests,
                        retries: &retries,
                    }
                    .perform(&effect),
                ),
                Input::Reconcile(_) => block_on_ready(
                    ReconcilePorts {
                        store: &store,
                        scheduler: &scheduler,
                        retries: &retries,
                        requests: &requests,
                        notes: &store,
                    }
                    .perform(&effect),
                ),
                Input::Publish(_) => block_on_ready(
                    PublishPorts {
                        store: &store,
                        requests: &requests,
                        notes: &store,
                    }
                    .perform(&effect),
                ),
                Input::Start { .. } => block_on_ready(
                    StartPorts {
                        store: &store,
                        requests: &requests,
                    }
                    .perform(&effect),
                ),
                Input::Resolve(_) => block_on_ready(
                    ResolvePorts {
                        store: &store,
                        scheduler: &scheduler,
                    }
                    .perform(&effect),
                ),
                Input::Replay { .. } => block_on_ready(
                    ReplayPorts {
                        store: &store,
                        retries: &retries,
                    }
                    .perform(&effect),
                ),
            }
            .expect("in-memory ports never wait");
            let expected = performs(&input, &effect) && !effect.is_terminal();
            assert_eq!(
                got.is_ok(),
                expected,
                "{input:?} / {}: {got:?}",
                effect.label()
            );
            if let Err(e) = got {
                assert_eq!(e.operation, "execute");
                assert!(!e.is_retryable());
            } else {
                performed += 1;
            }
        }
    }
    // Response 6, retry 4, reconcile 6, start 2, resolve 3, replay 3, publish 3.
    assert_eq!(performed, 27);
}
