//! Each fault of the proxy as the real Rust SDK sees it, against moto: the throttling
//! error each service returns (typed), 500 and 503 (nothing applied), a lost response
//! (applied, the caller gets a transient failure) and added latency.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_scheduler::operation::create_schedule::CreateScheduleError;
use aws_sdk_sqs::operation::send_message::SendMessageError;
use domain::ports::Cause;
use std::time::{Duration, Instant};
use testkit::faults::{FaultKind, Faults, Rates};
use testkit::provision::{create_table, TableDef};
use testkit::proxy::Proxy;

/// One attempt per call: the fault reaches the test as the SDK reports it.
fn once() -> aws_sdk_dynamodb::config::retry::RetryConfig {
    aws_sdk_dynamodb::config::retry::RetryConfig::standard().with_max_attempts(1)
}

fn every_call(kind: FaultKind) -> Rates {
    let mut r = Rates::default();
    match kind {
        FaultKind::Throttle => r.throttle = 1.0,
        FaultKind::ServerError => r.server_error = 1.0,
        FaultKind::LostResponse => r.lost_response = 1.0,
        FaultKind::Latency => r.latency = 1.0,
    }
    r
}

struct World {
    moto: aws_config::SdkConfig,
    proxy: Proxy,
    through: aws_config::SdkConfig,
    prefix: String,
}

async fn world(faults: Faults) -> World {
    let endpoint = testkit::moto::shared_endpoint().expect("moto_server on PATH");
    let moto = testkit::moto::sdk_config(&endpoint).await;
    let proxy = Proxy::with_faults(&endpoint, faults).await.unwrap();
    let through = testkit::moto::sdk_config(&proxy.endpoint).await;
    World {
        moto,
        proxy,
        through,
        prefix: testkit::moto::unique_prefix("faults"),
    }
}

impl World {
    fn ddb(&self) -> aws_sdk_dynamodb::Client {
        aws::clients::dynamodb_with(&self.through, once())
    }

    async fn table(&self) -> String {
        let name = format!("{}-t", self.prefix);
        let client = aws_sdk_dynamodb::Client::new(&self.moto);
        create_table(&client, &TableDef::keyed(&name, "id"))
            .await
            .unwrap();
        name
    }

    /// `n = n + 1` on item `a`.
    async fn bump(
        &self,
        table: &str,
    ) -> Result<(), SdkError<UpdateItemError, aws_sdk_dynamodb::config::http::HttpResponse>> {
        self.ddb()
            .update_item()
            .table_name(table)
            .key("id", AttributeValue::S("a".into()))
            .update_expression("ADD n :one")
            .expression_attribute_values(":one", AttributeValue::N("1".into()))
            .send()
            .await
            .map(|_| ())
    }

    async fn counter(&self, table: &str) -> u32 {
        aws_sdk_dynamodb::Client::new(&self.moto)
            .get_item()
            .table_name(table)
            .key("id", AttributeValue::S("a".into()))
            .consistent_read(true)
            .send()
            .await
            .unwrap()
            .item
            .and_then(|i| i.get("n").and_then(|v| v.as_n().ok()).cloned())
            .map(|n| n.parse().unwrap())
            .unwrap_or(0)
    }

    async fn queue(&self) -> String {
        aws_sdk_sqs::Client::new(&self.moto)
            .create_queue()
            .queue_name(format!("{}-q", self.prefix))
            .send()
            .await
            .unwrap()
            .queue_url
            .unwrap()
    }

    async fn depth(&self, url: &str) -> usize {
        let sqs = aws_sdk_sqs::Client::new(&self.moto);
        testkit::moto::receive_at_once(&sqs, url).await.unwrap()
    }

    async fn group(&self) -> String {
        let group = format!("{}-g", self.prefix);
        aws_sdk_scheduler::Client::new(&self.moto)
            .create_schedule_group()
            .name(&group)
            .send()
            .await
            .unwrap();
        group
    }

    async fn create_schedule(
        &self,
        group: &str,
        name: &str,
    ) -> Result<(), SdkError<CreateScheduleError, aws_sdk_scheduler::config::http::HttpResponse>>
    {
        let scheduler = aws::clients::scheduler_with(&self.through, once());
        testkit::moto::far_schedule(&scheduler, group, name)
            .send()
            .await
            .map(|_| ())
    }

    async fn schedule_exists(&self, group: &str, name: &str) -> bool {
        let scheduler = aws_sdk_scheduler::Client::new(&self.moto);
        testkit::moto::schedule_exists(&scheduler, group, name).await
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn dynamodb_throttling_is_the_typed_error_and_nothing_is_applied() {
    let w =
        world(Faults::none(1).with("dynamodb:UpdateItem", every_call(FaultKind::Throttle))).await;
    let table = w.table().await;
    let mut codes = Vec::new();
    for _ in 0..8 {
        let e = w.bump(&table).await.unwrap_err();
        assert_eq!(aws::errors::cause(&e), Cause::Throttled, "{e:?}");
        match e.as_service_error() {
            Some(UpdateItemError::ProvisionedThroughputExceededException(_)) => {
                codes.push("ProvisionedThroughputExceededException")
            }
            Some(UpdateItemError::ThrottlingException(_)) => codes.push("ThrottlingException"),
            other => panic!("not a typed throttling error: {other:?}"),
        }
        assert_eq!(e.raw_response().unwrap().status().as_u16(), 400);
    }
    codes.sort_unstable();
    codes.dedup();
    assert_eq!(
        codes.len(),
        2,
        "both codes DynamoDB throttles with: {codes:?}"
    );
    assert_eq!(
        w.counter(&table).await,
        0,
        "a throttled call applies nothing"
    );
    assert_eq!(
        w.proxy.faults_injected()[&("dynamodb:UpdateItem".into(), FaultKind::Throttle)],
        8
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn server_errors_are_500_or_503_retryable_and_nothing_is_applied() {
    let w = world(Faults::none(2).with("dynamodb", every_call(FaultKind::ServerError))).await;
    let table = w.table().await;
    let mut statuses = Vec::new();
    for _ in 0..8 {
        let e = w.bump(&table).await.unwrap_err();
        statuses.push(e.raw_response().unwrap().status().as_u16());
        let classified = aws::errors::classify("UpdateItem", &e, |_| None);
        assert!(classified.is_retryable(), "{classified:?}");
    }
    statuses.sort_unstable();
    statuses.dedup();
    assert_eq!(statuses, vec![500, 503]);
    assert_eq!(w.counter(&table).await, 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lost_update_response_is_applied_and_the_caller_sees_a_transient_failure() {
    let w = world(Faults::none(3).with("dynamodb:UpdateItem", every_call(FaultKind::LostResponse)))
        .await;
    let table = w.table().await;
    let e = w.bump(&table).await.unwrap_err();
    assert!(
        matches!(e, SdkError::DispatchFailure(_) | SdkError::ResponseError(_)),
        "{e:?}"
    );
    let classified = aws::errors::classify("UpdateItem", &e, |_| None);
    assert!(classified.is_retryable(), "{classified:?}");
    assert_eq!(w.counter(&table).await, 1, "the service applied it");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lost_response_retried_by_the_sdk_applies_twice() {
    // With the SDK's own retries, one lost response means the request is applied,
    // then applied again: what every conditional write must be ready for.
    let once = Rates {
        lost_response: 1.0,
        limit: Some(1),
        ..Rates::default()
    };
    let w = world(Faults::none(4).with("dynamodb:UpdateItem", once)).await;
    let table = w.table().await;
    aws::clients::dynamodb(&w.through)
        .update_item()
        .table_name(&table)
        .key("id", AttributeValue::S("a".into()))
        .update_expression("ADD n :one")
        .expression_attribute_values(":one", AttributeValue::N("1".into()))
        .send()
        .await
        .unwrap();
    assert_eq!(w.counter(&table).await, 2);
    let calls = w.proxy.calls();
    assert_eq!(
        calls.iter().filter(|c| c.operation == "UpdateItem").count(),
        2
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn sqs_throttling_is_request_throttled_and_a_lost_send_still_enqueues() {
    let w = world(
        Faults::none(5)
            .with("sqs:SendMessage", every_call(FaultKind::Throttle))
            .with("sqs:SendMessageBatch", every_call(FaultKind::LostResponse)),
    )
    .await;
    let url = w.queue().await;
    let sqs = aws::clients::sqs_with(&w.through, once());
    let e = sqs
        .send_message()
        .queue_url(&url)
        .message_body("x")
        .send()
        .await
        .unwrap_err();
    assert!(
        matches!(
            e.as_service_error(),
            Some(SendMessageError::RequestThrottled(_))
        ),
        "{e:?}"
    );
    assert_eq!(aws::errors::cause(&e), Cause::Throttled);
    assert_eq!(w.depth(&url).await, 0, "throttled: not enqueued");
    let e = sqs
        .send_message_batch()
        .queue_url(&url)
        .entries(
            aws_sdk_sqs::types::SendMessageBatchRequestEntry::builder()
                .id("1")
                .message_body("y")
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap_err();
    assert!(
        matches!(e, SdkError::DispatchFailure(_) | SdkError::ResponseError(_)),
        "{e:?}"
    );
    assert_eq!(
        w.depth(&url).await,
        1,
        "lost response: enqueued all the same"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn scheduler_throttling_is_429_and_a_lost_create_still_creates() {
    let w =
        world(Faults::none(6).with("scheduler:CreateSchedule", every_call(FaultKind::Throttle)))
            .await;
    let group = w.group().await;
    let e = w.create_schedule(&group, "s1").await.unwrap_err();
    assert!(
        matches!(
            e.as_service_error(),
            Some(CreateScheduleError::ThrottlingException(_))
        ),
        "{e:?}"
    );
    assert_eq!(e.raw_response().unwrap().status().as_u16(), 429);
    assert!(!w.schedule_exists(&group, "s1").await);

    // On a proxy of its own that loses every CreateSchedule answer.
    let lost = world(Faults::none(6).with(
        "scheduler:CreateSchedule",
        every_call(FaultKind::LostResponse),
    ))
    .await;
    let e = lost.create_schedule(&group, "s2").await.unwrap_err();
    assert!(
        matches!(e, SdkError::DispatchFailure(_) | SdkError::ResponseError(_)),
        "{e:?}"
    );
    assert!(
        lost.schedule_exists(&group, "s2").await,
        "created all the same"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn latency_delays_the_call_up_to_its_bound() {
    let mut faults = Faults::none(7).with("dynamodb:UpdateItem", every_call(FaultKind::Latency));
    faults.latency = Duration::from_millis(400);
    let w = world(faults).await;
    let table = w.table().await;
    let started = Instant::now();
    for _ in 0..4 {
        w.bump(&table).await.unwrap();
    }
    let took = started.elapsed();
    assert!(took > Duration::from_millis(200), "{took:?}");
    assert_eq!(w.counter(&table).await, 4);
    assert_eq!(
        w.proxy.faults_injected()[&("dynamodb:UpdateItem".into(), FaultKind::Latency)],
        4
    );
}

/// DeleteSchedule has no body: faulted all the same, throttled (nothing deleted) or
/// its answer lost (deleted).
#[tokio::test(flavor = "multi_thread")]
async fn a_bodiless_delete_is_faulted_too() {
    let w = world(Faults::none(8)).await;
    let group = w.group().await;
    w.create_schedule(&group, "d1").await.unwrap();
    let delete = |faults: Faults| {
        let group = group.clone();
        async move {
            let w = world(faults).await;
            let r = aws::clients::scheduler_with(&w.through, once())
                .delete_schedule()
                .group_name(&group)
                .name("d1")
                .send()
                .await;
            (r, w)
        }
    };
    let (r, throttled) =
        delete(Faults::none(8).with("scheduler:DeleteSchedule", every_call(FaultKind::Throttle)))
            .await;
    let e = r.unwrap_err();
    assert_eq!(e.raw_response().unwrap().status().as_u16(), 429, "{e:?}");
    assert!(throttled.schedule_exists(&group, "d1").await);
    let (r, lost) = delete(Faults::none(8).with(
        "scheduler:DeleteSchedule",
        every_call(FaultKind::LostResponse),
    ))
    .await;
    let e = r.unwrap_err();
    assert!(
        matches!(e, SdkError::DispatchFailure(_) | SdkError::ResponseError(_)),
        "{e:?}"
    );
    assert!(
        !lost.schedule_exists(&group, "d1").await,
        "deleted all the same"
    );
}
