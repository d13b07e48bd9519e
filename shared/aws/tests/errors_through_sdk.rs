//! Failure classification through the real SDK: a failed condition (moto), a
//! conflict (moto), throttling, 5xx, validation and an unreachable endpoint (a tiny
//! canned HTTP server or a closed port on 127.0.0.1).
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

mod common;

use aws::config::SchedulerSettings;
use aws::dynamo::DynamoStore;
use aws::scheduler::EventBridgeScheduler;
use aws::sqs::SqsRetryPublisher;
use common::*;
use domain::decide::ScheduleSpec;
use domain::machine::{Actor, Event, Write};
use domain::ports::{
    ErrorKind, PortError, Records, RetryPublisher, ScheduleCreated, ScheduleCreator, Transitions,
    WriteOutcome,
};
use domain::{ScheduleName, Status, Timestamp};

fn settings() -> SchedulerSettings {
    SchedulerSettings {
        group: "g".into(),
        retry_queue_arn: "arn:aws:sqs:us-east-1:123456789012:r".into(),
        role_arn: "arn:aws:iam::123456789012:role/s".into(),
        dlq_arn: "arn:aws:sqs:us-east-1:123456789012:d".into(),
        retry_attempts: 5,
        max_event_age_seconds: 3600,
    }
}

fn spec() -> ScheduleSpec {
    let tx = id("TX-T1");
    ScheduleSpec {
        name: ScheduleName::for_retry(&tx, at(2)),
        fire_at: Timestamp::from_millis(T0),
        event: scheduled_retry("TX-T1", 2),
    }
}

fn confirm_write(tx: &str) -> Write {
    let mut w = Write::new(
        id(tx),
        domain::arrow!([Status::Scheduling], Event::ScheduleConfirmed),
        Timestamp::from_millis(T0 + 5),
        Actor::ResponseHandler,
    );
    w.guard.next_attempt = Some(at(2));
    w
}

/// CreateSchedule against a server that answers every call `status` with `code`:
/// the server (for its hit count) and the adapter's error.
async fn create_schedule_against(status: u16, code: &'static str) -> (CannedServer, PortError) {
    let server = CannedServer::start(status, code).await;
    let sdk = testkit::moto::sdk_config(&server.endpoint).await;
    let scheduler = EventBridgeScheduler::new(aws::clients::scheduler(&sdk), settings());
    let err = scheduler.create(&spec()).await.unwrap_err();
    (server, err)
}

/// Throttling is retried a bounded number of times, then surfaced as Retryable.
#[tokio::test(flavor = "multi_thread")]
async fn scheduler_throttling_is_retried_then_retryable() {
    let (server, err) = create_schedule_against(429, "ThrottlingException").await;
    assert_eq!(err.kind, ErrorKind::Retryable, "{err}");
    assert_eq!(err.operation, "CreateSchedule");
    assert_eq!(
        server.hits(),
        aws::clients::MAX_ATTEMPTS as usize,
        "bounded retries"
    );
}

/// The active-schedules quota used up: retryable (the message comes back after its
/// visibility timeout, by when schedules have fired and freed the quota), never sent
/// to a DLQ at once; its cause says which limit, for the metric and the operator.
#[tokio::test(flavor = "multi_thread")]
async fn scheduler_quota_exceeded_is_retryable_and_named() {
    let (_, err) = create_schedule_against(402, "ServiceQuotaExceededException").await;
    assert_eq!(err.kind, ErrorKind::Retryable, "{err}");
    assert_eq!(err.cause, domain::ports::Cause::QuotaExceeded, "{err}");
    assert_eq!(err.operation, "CreateSchedule");

    let (_, err) = create_schedule_against(429, "ThrottlingException").await;
    assert_eq!(err.cause, domain::ports::Cause::Throttled, "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn dynamodb_throttling_is_retried_then_retryable() {
    let server = CannedServer::start(400, "ThrottlingException").await;
    let sdk = testkit::moto::sdk_config(&server.endpoint).await;
    let store = DynamoStore::new(aws::clients::dynamodb(&sdk), "t");
    let err = store.transition(&confirm_write("TX-T2")).await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::Retryable, "{err}");
    assert_eq!(err.operation, "UpdateItem");
    assert_eq!(server.hits(), aws::clients::MAX_ATTEMPTS as usize);
}

#[tokio::test(flavor = "multi_thread")]
async fn server_errors_are_retryable_and_validation_is_permanent() {
    let (_, err) = create_schedule_against(500, "InternalServerException").await;
    assert_eq!(err.kind, ErrorKind::Retryable);

    let (server, err) = create_schedule_against(400, "ValidationException").await;
    assert_eq!(err.kind, ErrorKind::Permanent, "{err}");
    assert_eq!(server.hits(), 1, "a permanent error is not retried");

    let server = CannedServer::start(400, "com.amazonaws.sqs#QueueDoesNotExist").await;
    let sdk = testkit::moto::sdk_config(&server.endpoint).await;
    let publisher = SqsRetryPublisher::new(
        aws::clients::sqs(&sdk),
        format!("{}/123456789012/q", server.endpoint),
    );
    let ev = spec().event;
    let err = publisher.publish(&ev, 0).await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::Permanent, "{err}");
}

/// Nothing listening: a dispatch failure, retryable.
#[tokio::test(flavor = "multi_thread")]
async fn unreachable_endpoint_is_retryable() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let sdk = testkit::moto::sdk_config(&format!("http://127.0.0.1:{port}")).await;
    let store = DynamoStore::new(aws::clients::dynamodb(&sdk), "t");
    let err = store.get(&id("TX-1")).await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::Retryable, "{err}");
}

/// A failed condition and a conflict through moto: both are outcomes, not errors.
#[tokio::test(flavor = "multi_thread")]
async fn failed_condition_and_conflict_through_moto() {
    let r = record("TX-E1", Status::Scheduled, 1, 3, T0);
    let s = stack_holding("er", &r).await;
    let store = s.store();
    assert_eq!(
        store.transition(&confirm_write("TX-E1")).await.unwrap(),
        WriteOutcome::ConditionFailed(Some(r))
    );
    let mut settings = settings();
    settings.group = s.p.names.schedule_group.clone();
    let scheduler = EventBridgeScheduler::new(aws::clients::scheduler(&s.sdk), settings);
    assert_eq!(
        scheduler.create(&spec()).await.unwrap(),
        ScheduleCreated::Created
    );
    assert_eq!(
        scheduler.create(&spec()).await.unwrap(),
        ScheduleCreated::AlreadyExists
    );
}
