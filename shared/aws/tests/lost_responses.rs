//! A response lost after the service applied the request, one call at a time: the
//! adapters with their production SDK settings behind the fault proxy (probability
//! 1, limit 1), against moto. The SDK retries; the retry meets the call's own
//! result; each run must end as it would have without the loss.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

mod common;

use aws::audit::AuditWriter;
use aws::dynamo::DynamoStore;
use aws::scheduler::EventBridgeScheduler;
use aws::sqs::{SqsRequestPublisher, SqsRetryPublisher};
use common::*;
use domain::decide::{Ack, Disposition, Input, Known};
use domain::exec::{execute, Perform, ResponsePorts, RetryPorts, StartPorts};
use domain::policy::FixedRandom;
use domain::ports::Records;
use domain::{
    Context, MaxAttempts, Outcome, Payload, PolicySet, Response, Run, Status, Timestamp,
    TransactionId,
};
use std::time::Duration;
use testkit::faults::{FaultKind, Faults, Rates};
use testkit::proxy::Proxy;

/// A proxy losing the first answer of `operation` (`service:Operation`), and the SDK
/// configuration through it.
async fn losing_once(operation: &str) -> (Proxy, aws_config::SdkConfig) {
    proxy_with(Faults::none(1).with(operation, once())).await
}

/// The first answer lost, no other.
fn once() -> Rates {
    Rates {
        lost_response: 1.0,
        limit: Some(1),
        ..Rates::default()
    }
}

async fn proxy_with(faults: Faults) -> (Proxy, aws_config::SdkConfig) {
    let endpoint = testkit::moto::shared_endpoint().unwrap();
    let proxy = Proxy::with_faults(&endpoint, faults).await.unwrap();
    let sdk = testkit::moto::sdk_config(&proxy.endpoint).await;
    (proxy, sdk)
}

/// The response handler's run for `(tx, attempt 1, outcome)` over adapters on `sdk`.
async fn respond(
    s: &Stack,
    sdk: &aws_config::SdkConfig,
    tx: &str,
    outcome: Outcome,
) -> Disposition {
    let store = store_on(s, sdk);
    let scheduler = s.retry_scheduler(sdk);
    let retries = SqsRetryPublisher::new(aws::clients::sqs(sdk), &s.p.retry.url);
    let notes = AuditWriter::new(aws::clients::dynamodb(sdk), &s.p.names.audit_table, 365);
    let ports = ResponsePorts {
        store: &store,
        scheduler: &scheduler,
        retries: &retries,
        notes: &notes,
    };
    run(Input::Response(response(tx, 1, outcome)), &ports).await
}

/// The run of `input` over `ports`, from nothing known: how it ended.
async fn run(input: Input, ports: &impl Perform) -> Disposition {
    let (ctx, mut rng) = (ctx(), FixedRandom(0.5));
    let mut run = Run::new(input, Known::Unread, &ctx, &mut rng);
    execute(&mut run, ports, &ctx, &mut rng, &mut |_| true)
        .await
        .unwrap()
}

/// A stack of its own holding `tx` IN_PROGRESS at attempt 1 of 4, then `outcome` for
/// it through a proxy losing the first answer of `operation`, which it lost once; the
/// run acknowledges `acked` after `sent.1` calls of `sent.0`. The stack.
async fn respond_losing_once(
    tx: &str,
    operation: &str,
    outcome: Outcome,
    acked: Ack,
    sent: (&str, usize),
) -> Stack {
    let tag = tx.to_lowercase();
    let s = stack_holding(&tag, &record(tx, Status::InProgress, 1, 4, T0)).await;
    let (proxy, sdk) = losing_once(operation).await;
    let d = respond(&s, &sdk, tx, outcome).await;
    assert_eq!(lost(&proxy, operation), 1);
    assert_eq!(d, Disposition::Ack(acked));
    assert_eq!(calls(&proxy, sent.0), sent.1, "calls of {}", sent.0);
    s
}

fn lost(proxy: &Proxy, operation: &str) -> u64 {
    proxy
        .faults_injected()
        .get(&(operation.to_owned(), FaultKind::LostResponse))
        .copied()
        .unwrap_or(0)
}

fn calls(proxy: &Proxy, operation: &str) -> usize {
    proxy
        .calls()
        .iter()
        .filter(|c| c.operation == operation)
        .count()
}

/// Schedules in the stack's group.
async fn schedules(s: &Stack) -> usize {
    testkit::moto::schedule_names(&s.scheduler(), &s.p.names.schedule_group)
        .await
        .unwrap()
        .len()
}

fn ctx() -> Context {
    Context::new(
        Timestamp::from_millis(T0 + 60_000),
        PolicySet::default(),
        8,
        Duration::from_secs(900),
    )
}

fn store_on(s: &Stack, sdk: &aws_config::SdkConfig) -> DynamoStore<aws::dynamo::PayloadsTable> {
    DynamoStore::new(aws::clients::dynamodb(sdk), &s.p.names.transactions_table)
        .with_payloads_table(&s.p.names.payloads_table)
}

fn response(tx: &str, attempt: u32, outcome: Outcome) -> Response {
    Response {
        transaction_id: id(tx),
        attempt: at(attempt),
        outcome,
        reason: Some("NOT_AVAILABLE".into()),
        retry_after_seconds: None,
        round: None,
        execution: None,
    }
}

/// What a run losing an answer left behind.
enum Left {
    /// The record in this status.
    Record(Status),
    /// This many schedules in the group.
    Schedules(usize),
}

/// GIVEN a response run losing one answer of the operation WHEN the SDK sends it
/// again THEN the run ends as without the loss:
/// - the key case: SUCCESS → SUCCEEDED applied, answer lost, the SDK's retry fails
///   its condition with ALL_OLD showing that very write: succeeded, not a duplicate;
/// - CANCELLED with attempts left, the SCHEDULING write's answer lost: the run goes on
///   (schedule, confirm) and acknowledges `scheduled`, one schedule created;
/// - a lost CreateSchedule answer: the SDK's retry meets the schedule it created
///   (ConflictException), which the adapter reads as "already exists".
#[tokio::test(flavor = "multi_thread")]
async fn a_lost_answer_of_a_response_run_ends_as_without_the_loss() {
    use Left::{Record, Schedules};
    let (update, create) = ("dynamodb:UpdateItem", "scheduler:CreateSchedule");
    let (success, cancelled) = (Outcome::Success, Outcome::Cancelled);
    let (succeeded, scheduled) = (Ack::Succeeded, Ack::Scheduled);
    #[rustfmt::skip]
    let cases = [
        ("TX-LU1", update, success, succeeded, ("UpdateItem", 2), Record(Status::Succeeded)),
        ("TX-LS1", update, cancelled, scheduled, ("CreateSchedule", 1), Record(Status::Scheduled)),
        ("TX-LC1", create, cancelled, scheduled, ("CreateSchedule", 2), Schedules(1)),
    ];
    for (tx, op, outcome, acked, sent, left) in cases {
        let s = respond_losing_once(tx, op, outcome, acked, sent).await;
        match left {
            Record(status) => {
                let rec = s.store().get(&id(tx)).await.unwrap().unwrap();
                assert_eq!(rec.status, status, "{tx}");
            }
            Schedules(n) => assert_eq!(schedules(&s).await, n, "{tx}"),
        }
    }
}

/// A lost SendMessage answer: the request goes out twice with one idempotency key
/// (what the external service absorbs), and the run acknowledges `published`.
#[tokio::test(flavor = "multi_thread")]
async fn a_lost_send_answer_publishes_twice_under_one_key() {
    let s = stack_holding("lostsend", &record("TX-LM1", Status::Scheduled, 1, 4, T0)).await;
    let payload = Payload::from_json(r#"{"order":1}"#).unwrap();
    s.ddb()
        .put_item()
        .table_name(&s.p.names.payloads_table)
        .item(
            "transaction_id",
            aws_sdk_dynamodb::types::AttributeValue::S("TX-LM1".into()),
        )
        .item(
            "payload",
            aws_sdk_dynamodb::types::AttributeValue::S(payload.as_json().to_owned()),
        )
        .send()
        .await
        .unwrap();
    let (proxy, sdk) = losing_once("sqs:SendMessage").await;
    let store = store_on(&s, &sdk);
    let requests = SqsRequestPublisher::new(aws::clients::sqs(&sdk), &s.p.request.url);
    let retries = SqsRetryPublisher::new(aws::clients::sqs(&sdk), &s.p.retry.url);
    let ports = RetryPorts {
        store: &store,
        requests: &requests,
        retries: &retries,
    };
    let d = run(Input::Retry(scheduled_retry("TX-LM1", 2)), &ports).await;
    assert_eq!(d, Disposition::Ack(Ack::Published));
    assert_eq!(lost(&proxy, "sqs:SendMessage"), 1);
    let got = s
        .sqs()
        .receive_message()
        .queue_url(&s.p.request.url)
        .max_number_of_messages(10)
        .message_attribute_names("All")
        .send()
        .await
        .unwrap();
    let keys: Vec<String> = got
        .messages()
        .iter()
        .filter_map(|m| {
            m.message_attributes()?
                .get("idempotency_key")?
                .string_value()
        })
        .map(str::to_owned)
        .collect();
    assert_eq!(keys, ["TX-LM1#2", "TX-LM1#2"]);
}

/// A lost TransactWriteItems answer on start: the retry finds the record exactly as
/// the create wrote it. Started (not already-started), attempt 1 published once.
#[tokio::test(flavor = "multi_thread")]
async fn a_lost_create_answer_is_started() {
    let s = stack("lostcreate").await;
    let (proxy, sdk) = losing_once("dynamodb:TransactWriteItems").await;
    let store = store_on(&s, &sdk);
    let requests = SqsRequestPublisher::new(aws::clients::sqs(&sdk), &s.p.request.url);
    let ports = StartPorts {
        store: &store,
        requests: &requests,
    };
    let input = Input::Start {
        transaction_id: TransactionId::parse("TX-LT1").unwrap(),
        payload: Payload::from_json(r#"{"order":7}"#).unwrap(),
        max_attempts: MaxAttempts::new(3).unwrap(),
        correlation_id: None,
    };
    let d = run(input, &ports).await;
    assert_eq!(d, Disposition::Ack(Ack::Started));
    assert_eq!(lost(&proxy, "dynamodb:TransactWriteItems"), 1);
    assert_eq!(calls(&proxy, "SendMessage"), 1);
}

/// An answer that never comes (the connection held past the attempt timeout): the
/// SDK gives up on the attempt at `aws::clients::DYNAMODB_TIMEOUTS.attempt`, sends
/// it again, and the run ends as without the loss — instead of waiting for the
/// function's own timeout.
#[tokio::test(flavor = "multi_thread")]
async fn a_stalled_answer_times_out_the_attempt_and_is_done() {
    let s = stack_holding("stall", &record("TX-ST1", Status::InProgress, 1, 4, T0)).await;
    let mut faults = Faults::none(1).with("dynamodb:UpdateItem", once());
    faults.stall = Duration::from_secs(30);
    faults.stall_share = 1.0;
    let (proxy, sdk) = proxy_with(faults).await;
    let started = std::time::Instant::now();
    let d = respond(&s, &sdk, "TX-ST1", Outcome::Success).await;
    let took = started.elapsed();
    assert_eq!(d, Disposition::Ack(Ack::Succeeded));
    let attempt = aws::clients::DYNAMODB_TIMEOUTS.attempt;
    assert!(took >= attempt && took < attempt * 3, "{took:?}");
    assert_eq!(calls(&proxy, "UpdateItem"), 2);
}

/// A lost DeleteSchedule answer (an operator's resolve): the SDK's retry finds no
/// schedule (ResourceNotFoundException), which the adapter reads as "not found";
/// the resolve is acknowledged `resolved` and the schedule is gone.
#[tokio::test(flavor = "multi_thread")]
async fn a_lost_delete_schedule_answer_is_resolved() {
    use domain::ports::ScheduleCreator;
    let rec = record("TX-LD1", Status::Scheduled, 1, 4, T0);
    let s = stack_holding("lostdel", &rec).await;
    let direct = EventBridgeScheduler::new(s.scheduler(), s.scheduler_settings());
    let spec = domain::decide::ScheduleSpec {
        name: rec.schedule_name.clone().unwrap(),
        fire_at: Timestamp::from_millis(T0 + 86_400_000 * 365),
        event: scheduled_retry("TX-LD1", 2),
    };
    direct.create(&spec).await.unwrap();
    let (proxy, sdk) = losing_once("scheduler:DeleteSchedule").await;
    let store = store_on(&s, &sdk);
    let scheduler = s.retry_scheduler(&sdk);
    let ports = domain::exec::ResolvePorts {
        store: &store,
        scheduler: &scheduler,
    };
    let d = run(Input::Resolve(id("TX-LD1")), &ports).await;
    assert_eq!(d, Disposition::Ack(Ack::Resolved));
    assert_eq!(lost(&proxy, "scheduler:DeleteSchedule"), 1);
    assert_eq!(calls(&proxy, "DeleteSchedule"), 2);
    assert_eq!(schedules(&s).await, 0);
}
