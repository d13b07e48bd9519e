//! The scheduler and SQS adapters against moto: every schedule setting read back,
//! create/delete twice, message bodies and attributes round-trip.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

mod common;

use aws::sqs::{SqsDeadLetter, SqsRequestPublisher, SqsRetryPublisher};
use aws_sdk_sqs::types::MessageSystemAttributeName;
use common::*;
use domain::decide::ScheduleSpec;
use domain::ports::{
    DeadLetter, MessageAttribute, RequestPublisher, RetryPublisher, ScheduleCreated,
    ScheduleCreator, ScheduleDeleted, ScheduleDeleter, Undeliverable,
};
use domain::{Origin, Payload, Request, RetryEvent, ScheduleName, Timestamp};
use std::collections::BTreeMap;

/// GIVEN a retry to schedule WHEN it is created twice, read back, deleted twice THEN
/// the second create is AlreadyExists, the schedule carries every setting of the
/// article, and the second delete is NotFound.
#[tokio::test(flavor = "multi_thread")]
async fn schedule_settings_and_idempotent_create_delete() {
    let s = stack("sc").await;
    let scheduler = s.retry_scheduler(&s.sdk);
    let tx = id("TX-100200");
    let event = scheduled_retry("TX-100200", 2);
    // The article's example instant, ten years on (an instant in the past is moved:
    // see the next test).
    let fire_at = Timestamp::parse("2036-10-03T16:38:00.000Z").unwrap();
    let spec = ScheduleSpec {
        name: ScheduleName::for_retry(&tx, at(2)),
        fire_at,
        event: event.clone(),
    };
    assert_eq!(spec.name.as_str(), "retry-TX-100200-2");

    assert_eq!(
        scheduler.create(&spec).await.unwrap(),
        ScheduleCreated::Created
    );
    assert_eq!(
        scheduler.create(&spec).await.unwrap(),
        ScheduleCreated::AlreadyExists
    );

    let got = read_schedule(&s, &spec.name).await;
    assert_eq!(got.group_name(), Some(s.p.names.schedule_group.as_str()));
    assert_eq!(got.schedule_expression(), Some("at(2036-10-03T16:38:00)"));
    assert_eq!(got.schedule_expression_timezone(), Some("UTC"));
    assert_eq!(
        got.flexible_time_window().map(|w| w.mode().as_str()),
        Some("OFF")
    );
    assert_eq!(
        got.action_after_completion().map(|a| a.as_str()),
        Some("DELETE")
    );
    let target = got.target().unwrap();
    assert_eq!(target.arn(), s.p.retry.arn);
    assert_eq!(target.role_arn(), s.p.scheduler_role_arn);
    assert_eq!(RetryEvent::parse(target.input().unwrap()).unwrap(), event);
    assert_eq!(
        target.input(),
        Some(r#"{"transaction_id":"TX-100200","origin":"RETRY_SCHEDULER","attempt":2}"#)
    );
    let rp = target.retry_policy().unwrap();
    assert_eq!(rp.maximum_retry_attempts(), Some(5));
    assert_eq!(rp.maximum_event_age_in_seconds(), Some(3600));
    assert_eq!(
        target.dead_letter_config().and_then(|d| d.arn()),
        Some(s.p.scheduler_dlq.arn.as_str())
    );

    assert_eq!(
        scheduler.delete(&spec.name).await.unwrap(),
        ScheduleDeleted::Deleted
    );
    assert_eq!(
        scheduler.delete(&spec.name).await.unwrap(),
        ScheduleDeleted::NotFound
    );
}

/// GIVEN a schedule whose persisted instant has passed by the time it is created (its
/// run stalled between the write and the call) WHEN it is created THEN its instant is
/// the lead after the call, never in the past (EventBridge Scheduler refuses one: the
/// retry event would end in the retry DLQ); the event and the name are the spec's.
#[tokio::test(flavor = "multi_thread")]
async fn a_schedule_is_never_created_for_an_instant_in_the_past() {
    let s = stack("sp").await;
    let scheduler = s.retry_scheduler(&s.sdk);
    let tx = id("TX-100300");
    let wall = || domain::ports::Clock::now(&domain::ports::SystemClock);
    let before = wall();
    let spec = ScheduleSpec {
        name: ScheduleName::for_resend(&tx, at(2), 3),
        fire_at: before.plus_millis(-90_000).ceil_to_second(),
        event: RetryEvent {
            transaction_id: tx.clone(),
            origin: Origin::RetryScheduler,
            attempt: at(2),
            round: Some(3),
        },
    };
    scheduler.create(&spec).await.unwrap();
    let after = wall();
    let got = read_schedule(&s, &spec.name).await;
    let expr = got.schedule_expression().unwrap();
    let lead = i64::try_from(domain::decide::SCHEDULE_LEAD.as_millis()).unwrap();
    let earliest = format!("at({})", before.plus_millis(lead).to_schedule_at());
    let latest = format!("at({})", after.plus_millis(lead + 1_000).to_schedule_at());
    assert!(
        earliest.as_str() <= expr && expr <= latest.as_str(),
        "{expr} not within {earliest}..{latest}"
    );
    assert_eq!(
        RetryEvent::parse(got.target().unwrap().input().unwrap()).unwrap(),
        spec.event
    );
}

/// The schedule as moto stores it.
async fn read_schedule(
    s: &Stack,
    name: &ScheduleName,
) -> aws_sdk_scheduler::operation::get_schedule::GetScheduleOutput {
    s.scheduler()
        .get_schedule()
        .name(name.as_str())
        .group_name(&s.p.names.schedule_group)
        .send()
        .await
        .unwrap()
}

async fn receive_one(s: &Stack, url: &str) -> aws_sdk_sqs::types::Message {
    let out = s
        .sqs()
        .receive_message()
        .queue_url(url)
        .max_number_of_messages(10)
        .message_attribute_names("All")
        .message_system_attribute_names(MessageSystemAttributeName::All)
        .wait_time_seconds(1)
        .send()
        .await
        .unwrap();
    let msgs = out.messages();
    assert_eq!(msgs.len(), 1, "exactly one message on {url}");
    msgs[0].clone()
}

/// Request body and `idempotency_key` attribute, retry body, and a DLQ copy with its
/// attributes all round-trip through SQS unchanged.
#[tokio::test(flavor = "multi_thread")]
async fn request_retry_and_dlq_messages_round_trip() {
    let s = stack("q").await;
    let sqs = aws::clients::sqs(&s.sdk);
    let requests = SqsRequestPublisher::new(sqs.clone(), &s.p.request.url);
    let payload = Payload::from_json(r#"{"amount":10.50,"items":[1,2,{"k":"ñ"}]}"#).unwrap();
    let request = Request::new(id("TX-100200"), at(2), payload);
    requests.publish(&request).await.unwrap();
    let m = receive_one(&s, &s.p.request.url).await;
    assert_eq!(m.body(), Some(request.to_json().as_str()));
    // The body is byte-exact (above); parsed back, every field matches.
    let parsed = Request::parse(m.body().unwrap()).unwrap();
    assert_eq!(parsed.transaction_id, request.transaction_id);
    assert_eq!(parsed.attempt, request.attempt);
    assert_eq!(parsed.idempotency_key, request.idempotency_key);
    let json = |p: &Payload| serde_json::from_str::<serde_json::Value>(p.as_json()).unwrap();
    assert_eq!(json(&parsed.payload), json(&request.payload));
    let attrs = m.message_attributes().unwrap();
    assert_eq!(attrs["idempotency_key"].string_value(), Some("TX-100200#2"));
    assert_eq!(attrs["idempotency_key"].data_type(), "String");

    let retries = SqsRetryPublisher::new(sqs.clone(), &s.p.retry.url);
    let event = RetryEvent {
        transaction_id: id("TX-7"),
        origin: Origin::Reconciler,
        attempt: at(3),
        round: None,
    };
    retries.publish(&event, 0).await.unwrap();
    let m = receive_one(&s, &s.p.retry.url).await;
    assert_eq!(RetryEvent::parse(m.body().unwrap()).unwrap(), event);
    assert_eq!(
        m.body(),
        Some(r#"{"transaction_id":"TX-7","origin":"RECONCILER","attempt":3}"#)
    );
    // Held by the breaker: the same body, invisible until its delay has passed.
    retries.publish(&event, 3).await.unwrap();
    let early = s
        .sqs()
        .receive_message()
        .queue_url(&s.p.retry.url)
        .wait_time_seconds(1)
        .send()
        .await
        .unwrap();
    assert!(early.messages().is_empty(), "delivered before its delay");
    tokio::time::sleep(std::time::Duration::from_millis(2_500)).await;
    let m = receive_one(&s, &s.p.retry.url).await;
    assert_eq!(RetryEvent::parse(m.body().unwrap()).unwrap(), event);

    let body = "{not json at all";
    let string = |v: &str| MessageAttribute {
        data_type: "String".into(),
        string_value: Some(v.into()),
        binary_value: None,
    };
    let kept = Undeliverable {
        body: body.into(),
        attributes: BTreeMap::from([
            ("idempotency_key".to_owned(), string("TX-9#1")),
            ("custom".to_owned(), string("kept")),
        ]),
    };
    SqsDeadLetter::new(sqs.clone(), &s.p.response_dlq.url)
        .send(&kept)
        .await
        .unwrap();
    let m = receive_one(&s, &s.p.response_dlq.url).await;
    assert_eq!(m.body(), Some(body));
    let got = m.message_attributes().unwrap();
    assert_eq!(got["custom"].string_value(), Some("kept"));
    assert_eq!(got["idempotency_key"].string_value(), Some("TX-9#1"));
}

/// GIVEN outbox mode's FIFO request queue WHEN one (transaction, attempt, round) is
/// published twice THEN the service receives it once, with the header's deduplication
/// id and the transaction as its group; the next round of the same attempt (a re-send
/// after an ERROR that says NOT_RUN) and another attempt are new messages. A
/// transaction id SQS would refuse as an id (a space, a non-ASCII letter) is sent
/// under its hash, deduplicated the same way. A dead letter parked twice is kept
/// twice.
#[tokio::test(flavor = "multi_thread")]
async fn a_fifo_request_queue_drops_a_repeat_and_keeps_a_new_round() {
    let s = stack_for("fifo", true).await;
    let sqs = aws::clients::sqs(&s.sdk);
    let url = s.p.request.url.clone();
    let requests = SqsRequestPublisher::new(sqs.clone(), &url);
    let payload = Payload::from_json(r#"{"amount":1}"#).unwrap();
    let send = |tx: &str, attempt: u32, round: u32| {
        Request::new(id(tx), at(attempt), payload.clone()).with_round(Some(round))
    };
    for r in [
        send("TX-1", 2, 0),
        send("TX-1", 2, 0),
        send("TX-1", 2, 1),
        send("TX-1", 3, 0),
        send("TX ñ", 1, 0),
        send("TX ñ", 1, 0),
    ] {
        requests.publish(&r).await.unwrap();
    }
    let got = s
        .sqs()
        .receive_message()
        .queue_url(&url)
        .max_number_of_messages(10)
        .message_system_attribute_names(MessageSystemAttributeName::All)
        .wait_time_seconds(1)
        .send()
        .await
        .unwrap();
    let mut seen: Vec<(String, String)> = got
        .messages()
        .iter()
        .map(|m| {
            let a = m.attributes().unwrap();
            (
                a[&MessageSystemAttributeName::MessageDeduplicationId].clone(),
                a[&MessageSystemAttributeName::MessageGroupId].clone(),
            )
        })
        .collect();
    seen.sort();
    let hashed = aws::sqs::fifo_id("TX ñ");
    let hashed_dedup = aws::sqs::fifo_id("TX ñ#1#0");
    assert!(
        hashed.starts_with(aws::sqs::FIFO_ID_HASH_PREFIX),
        "{hashed}"
    );
    let mut want = vec![
        ("TX-1#2#0".to_owned(), "TX-1".to_owned()),
        ("TX-1#2#1".to_owned(), "TX-1".to_owned()),
        ("TX-1#3#0".to_owned(), "TX-1".to_owned()),
        (hashed_dedup, hashed),
    ];
    want.sort();
    assert_eq!(seen, want);

    let dlq = s.p.request_dlq.url.clone();
    let kept = Undeliverable {
        body: "parked".into(),
        attributes: BTreeMap::new(),
    };
    let dead = SqsDeadLetter::new(sqs.clone(), &dlq);
    dead.send(&kept).await.unwrap();
    dead.send(&kept).await.unwrap();
    let bodies = testkit::moto::take_all(&s.sqs(), &dlq).await.unwrap();
    assert_eq!(bodies, ["parked", "parked"]);
}
