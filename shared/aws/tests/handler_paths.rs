//! The cost of the happy paths, measured by driving `domain::exec::execute` over the
//! AWS adapters against moto: response handler = 2 writes + 1 CreateSchedule and no
//! read; retry handler = 2 writes + 1 SendMessage + at most 1 payload read. The
//! request carries the transaction's correlation id and the invocation's trace
//! header at that cost: both come with what the run already reads and writes.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

mod common;

use aws::audit::AuditWriter;
use aws::scheduler::EventBridgeScheduler;
use aws::sqs::{SqsRequestPublisher, SqsRetryPublisher};
use common::*;
use domain::decide::{Input, Known};
use domain::exec::{execute, ResponsePorts, RetryPorts};
use domain::policy::FixedRandom;
use domain::ports::{CreateOutcome, Creates, Records};
use domain::{
    Context, CorrelationId, MaxAttempts, Payload, PolicySet, Request, Response, RetryEvent, Run,
    Status, Timestamp, TransactionRecord,
};
use std::time::Duration;

#[tokio::test(flavor = "multi_thread")]
async fn happy_path_call_counts() {
    let s = stack("hp").await;
    let meter = &s.meter;
    let store = s.store();
    // The calls are made at the decisions' instant, as in a run (T0 is past).
    let scheduler = EventBridgeScheduler::new(meter.scheduler(&s.sdk), s.scheduler_settings())
        .with_clock(std::sync::Arc::new(testkit::memory::ManualClock::at(
            Timestamp::from_millis(T0 + 60_000),
        )));
    let requests = SqsRequestPublisher::new(meter.sqs(&s.sdk), &s.p.request.url);
    let retries = SqsRetryPublisher::new(meter.sqs(&s.sdk), &s.p.retry.url);

    let tx = id("TX-HP1");
    let payload = Payload::from_json(r#"{"order":42}"#).unwrap();
    let correlation = CorrelationId::new("corr-hp1").unwrap();
    let start = TransactionRecord::started(
        tx.clone(),
        MaxAttempts::new(3).unwrap(),
        Timestamp::from_millis(T0),
    )
    .correlated(Some(correlation.clone()));
    // The trace header the Lambda runtime sets for an invocation (the only test of
    // this binary: no other test reads the variable).
    let trace = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1";
    std::env::set_var(aws::sqs::LAMBDA_TRACE_ENV, trace);
    assert_eq!(
        store.create(&start, &payload).await.unwrap(),
        CreateOutcome::Created
    );
    let created = meter.snapshot();
    assert_eq!(created.creates, 1);
    // (moto reports no ConsumedCapacity for TransactWriteItems; AWS does.)
    meter.reset();

    let mut rng = FixedRandom(0.5);
    let now = T0 + 60_000;
    let ctx = Context::new(
        Timestamp::from_millis(now),
        PolicySet::default(),
        8,
        Duration::from_secs(900),
    );

    // Response handler (A): CANCELLED for attempt 1.
    let resp = Response::parse(
        r#"{"transaction_id":"TX-HP1","attempt":1,"outcome":"CANCELLED","reason":"NOT_AVAILABLE"}"#,
    )
    .unwrap();
    let mut run = Run::new(Input::Response(resp), Known::Unread, &ctx, &mut rng);
    let notes = AuditWriter::new(aws::clients::dynamodb(&s.sdk), &s.p.names.audit_table, 365);
    let ports = ResponsePorts {
        store: &store,
        scheduler: &scheduler,
        retries: &retries,
        notes: &notes,
    };
    let disposition = execute(&mut run, &ports, &ctx, &mut rng, &mut |_| true)
        .await
        .unwrap();
    assert!(
        matches!(disposition, domain::Disposition::Ack(_)),
        "{disposition:?}"
    );
    let a = meter.snapshot();
    assert_eq!(
        (
            a.writes,
            a.schedule_creates,
            a.reads,
            a.payload_reads,
            a.sends
        ),
        (2, 1, 0, 0, 0),
        "{a:?}"
    );
    assert_eq!(a.failed_conditions, 0);
    assert!(a.total_write_units() > 0.0, "capacity recorded: {a:?}");
    let rec = store.get(&tx).await.unwrap().unwrap();
    assert_eq!(rec.status, Status::Scheduled);
    // The schedule fires at the persisted instant.
    let sched = s
        .scheduler()
        .get_schedule()
        .name(rec.schedule_name.as_ref().unwrap().as_str())
        .group_name(&s.p.names.schedule_group)
        .send()
        .await
        .unwrap();
    assert_eq!(
        sched.schedule_expression().unwrap(),
        format!("at({})", rec.next_fire_at.unwrap().to_schedule_at())
    );
    meter.reset();

    // Retry handler (B): the retry event for attempt 2.
    let ctx = Context::new(
        rec.next_fire_at.unwrap(),
        PolicySet::default(),
        8,
        Duration::from_secs(900),
    );
    let event =
        RetryEvent::parse(r#"{"transaction_id":"TX-HP1","origin":"RETRY_SCHEDULER","attempt":2}"#)
            .unwrap();
    let mut run = Run::new(Input::Retry(event), Known::Unread, &ctx, &mut rng);
    let ports = RetryPorts {
        store: &store,
        requests: &requests,
        retries: &retries,
    };
    execute(&mut run, &ports, &ctx, &mut rng, &mut |_| true)
        .await
        .unwrap();
    let b = meter.snapshot();
    assert_eq!(
        (b.writes, b.sends, b.reads, b.schedule_creates),
        (2, 1, 0, 0),
        "{b:?}"
    );
    assert!(b.payload_reads <= 1, "{b:?}");
    let rec = store.get(&tx).await.unwrap().unwrap();
    assert_eq!(
        (rec.status, rec.current_attempt.get(), rec.next_attempt),
        (Status::InProgress, 2, None)
    );

    // The request the external service receives: attempt 2, same payload bytes.
    let out = s
        .sqs()
        .receive_message()
        .queue_url(&s.p.request.url)
        .message_attribute_names("All")
        .message_system_attribute_names(
            aws_sdk_sqs::types::MessageSystemAttributeName::AwsTraceHeader,
        )
        .wait_time_seconds(1)
        .send()
        .await
        .unwrap();
    let m = &out.messages()[0];
    assert_eq!(
        m.body().unwrap(),
        Request::new(tx.clone(), at(2), payload)
            .with_round(Some(0))
            .with_correlation_id(Some(correlation.clone()))
            .to_json()
    );
    let attrs = m.message_attributes().unwrap();
    assert_eq!(attrs["idempotency_key"].string_value(), Some("TX-HP1#2"));
    assert_eq!(attrs["correlation_id"].string_value(), Some("corr-hp1"));
    assert_eq!(
        m.attributes().unwrap()[&aws_sdk_sqs::types::MessageSystemAttributeName::AwsTraceHeader],
        trace
    );

    println!("response handler path: {a:?}");
    println!("retry handler path: {b:?}");
}
