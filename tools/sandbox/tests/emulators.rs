//! The emulators against a real moto server, through the real SDK.

// Test helpers outside #[test] functions: a failure here is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use aws::config::StackNames;
use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent};
use aws_sdk_scheduler::types::{
    ActionAfterCompletion, DeadLetterConfig, FlexibleTimeWindow, FlexibleTimeWindowMode,
    RetryPolicy, Target,
};
use aws_sdk_sqs::types::MessageAttributeValue;
use domain::ports::{Clock, SystemClock};
use sandbox::local::esm::{self, EsmSettings, SqsFunction};
use sandbox::local::external::{self, ExternalSettings};
use sandbox::local::scheduler::{self, SchedulerSettings};
use sandbox::local::stop::StopSource;
use sandbox::local::SqsDirectory;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use testkit::moto;
use testkit::provision::{provision, Provisioned, QueueRef};

async fn stack(tag: &str) -> (aws_config::SdkConfig, Provisioned) {
    let endpoint = moto::shared_endpoint().expect("moto_server on PATH (. scripts/tools.sh)");
    let sdk = moto::sdk_config(&endpoint).await;
    let names = StackNames::new(&moto::unique_prefix(tag));
    let p = provision(&sdk, &names).await.expect("provision");
    (sdk, p)
}

async fn depth(sqs: &aws_sdk_sqs::Client, url: &str) -> (u64, u64) {
    sandbox::demo::queue_counts(sqs, url).await.unwrap()
}

async fn wait_until<F, Fut>(limit: Duration, mut f: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    while start.elapsed() < limit {
        if f().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

/// An emulator's tasks and the switch that stops them.
struct Running {
    source: StopSource,
    handles: Vec<tokio::task::JoinHandle<()>>,
}

impl Running {
    /// Waits up to `limit` for `done`, then stops the tasks and waits for them;
    /// whether `done` was reached.
    async fn stop_when<F, Fut>(self, limit: Duration, done: F) -> bool
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = bool>,
    {
        let reached = wait_until(limit, done).await;
        self.source.stop();
        for h in self.handles {
            h.await.unwrap();
        }
        reached
    }

    /// Lets the tasks run for `span` more, then stops them.
    async fn stop_after(self, span: Duration) {
        self.stop_when(span, || async { false }).await;
    }
}

/// Up to 10 messages visible on `url`, with their attributes.
async fn receive(sqs: &aws_sdk_sqs::Client, url: &str) -> Vec<aws_sdk_sqs::types::Message> {
    sqs.receive_message()
        .queue_url(url)
        .max_number_of_messages(10)
        .message_attribute_names("All")
        .send()
        .await
        .unwrap()
        .messages
        .unwrap_or_default()
}

/// The bodies of `messages`.
fn bodies(messages: &[aws_sdk_sqs::types::Message]) -> Vec<String> {
    messages
        .iter()
        .filter_map(|m| m.body().map(str::to_owned))
        .collect()
}

/// The scheduler emulator on `p`'s group, ticking every 200 ms.
fn spawn_scheduler(
    sdk: &aws_config::SdkConfig,
    p: &Provisioned,
    process: testkit::faults::ProcessRates,
    seed: u64,
) -> (Running, Arc<scheduler::SchedulerStats>) {
    let (source, stop) = StopSource::new();
    let (handle, stats) = scheduler::spawn(
        aws_sdk_scheduler::Client::new(sdk),
        SqsDirectory::new(aws_sdk_sqs::Client::new(sdk)),
        SchedulerSettings {
            group: p.names.schedule_group.clone(),
            tick: Duration::from_millis(200),
            process,
            seed,
        },
        stop,
    );
    (
        Running {
            source,
            handles: vec![handle],
        },
        stats,
    )
}

/// Whether no schedule is left in `p`'s group.
async fn no_schedules_left(sched: &aws_sdk_scheduler::Client, p: &Provisioned) -> bool {
    testkit::moto::schedule_names(sched, &p.names.schedule_group)
        .await
        .unwrap()
        .is_empty()
}

/// GIVEN a queue with a redrive policy (maxReceiveCount 5) WHEN the function reports
/// one record of each batch as failed THEN the others are deleted at once, the failed
/// one comes back after the visibility timeout with a growing ApproximateReceiveCount,
/// and after 5 receives SQS (moto) moves it to the DLQ; concurrency never exceeds
/// MaximumConcurrency and batches never exceed BatchSize.
#[tokio::test(flavor = "multi_thread")]
async fn esm_deletes_only_successes_and_failures_reach_the_dlq() {
    let (sdk, p) = stack("esm").await;
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    for i in 0..12 {
        let body = if i == 5 {
            "poison".to_owned()
        } else {
            format!("ok-{i}")
        };
        send_keyed(&sqs, &p.response.url, body, format!("k-{i}")).await;
    }
    let seen: Arc<Mutex<Vec<(String, String, usize)>>> = Arc::default();
    let log = seen.clone();
    let function: SqsFunction = Arc::new(move |event: SqsEvent| {
        let log = log.clone();
        Box::pin(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            let mut resp = SqsBatchResponse::default();
            let n = event.records.len();
            for r in event.records {
                let body = r.body.clone().unwrap_or_default();
                let count = r
                    .attributes
                    .get("ApproximateReceiveCount")
                    .cloned()
                    .unwrap_or_default();
                assert_eq!(r.event_source_arn.as_deref(), Some(p_arn()));
                assert!(r.message_attributes.contains_key("idempotency_key"));
                log.lock().unwrap().push((body.clone(), count, n));
                if body == "poison" {
                    let mut f = BatchItemFailure::default();
                    f.item_identifier = r.message_id.clone().unwrap_or_default();
                    resp.batch_item_failures.push(f);
                }
            }
            Ok(resp)
        })
    });
    // The ARN is checked inside the function; keep it reachable from a plain fn.
    ARN.set(p.response.arn.clone()).ok();
    let settings = EsmSettings {
        batch_size: 4,
        batching_window: Duration::from_millis(300),
        max_concurrency: 2,
        ..esm_on(&p.response)
    };
    let (running, stats) = spawn_esm(&sqs, settings, function);
    let moved = running
        .stop_when(Duration::from_secs(30), || async {
            depth(&sqs, &p.response_dlq.url).await.0 == 1
        })
        .await;
    assert!(moved, "the failing record never reached the DLQ");
    let log = seen.lock().unwrap().clone();
    let ok: Vec<_> = log.iter().filter(|(b, _, _)| b != "poison").collect();
    assert_eq!(
        ok.len(),
        11,
        "each good record delivered exactly once: {log:?}"
    );
    let poison: Vec<u32> = log
        .iter()
        .filter(|(b, _, _)| b == "poison")
        .map(|(_, c, _)| c.parse().unwrap())
        .collect();
    assert_eq!(
        poison,
        vec![1, 2, 3, 4, 5],
        "receive counts of the failing record"
    );
    assert!(log.iter().all(|(_, _, n)| *n <= 4), "batch size respected");
    assert!(stats.get(&stats.peak_concurrency) <= 2);
    assert_eq!(stats.get(&stats.deleted), 11);
    assert_eq!(stats.get(&stats.reported_failures), 5);
    assert_eq!(depth(&sqs, &p.response.url).await, (0, 0));
    // The DLQ holds the message unchanged.
    assert_eq!(
        bodies(&receive(&sqs, &p.response_dlq.url).await),
        ["poison"]
    );
}

static ARN: std::sync::OnceLock<String> = std::sync::OnceLock::new();
fn p_arn() -> &'static str {
    ARN.get().map(String::as_str).unwrap_or("")
}

/// Three messages on the retry queue, and an ESM on it (one poller, batches of up to
/// 10 within 300–500 ms, visibility 1 s) invoking `function`, killing
/// `kill_probability` of the invocations.
async fn three_on_retry_queue(
    tag: &str,
    batching_window: Duration,
    kill_probability: f64,
    function: SqsFunction,
) -> (
    aws_sdk_sqs::Client,
    Provisioned,
    Running,
    Arc<esm::EsmStats>,
) {
    let (sdk, p) = stack(tag).await;
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    for i in 0..3 {
        sqs.send_message()
            .queue_url(&p.retry.url)
            .message_body(format!("m{i}"))
            .send()
            .await
            .unwrap();
    }
    let settings = EsmSettings {
        batching_window,
        kill_probability,
        seed: 3,
        ..esm_on(&p.retry)
    };
    let (running, stats) = spawn_esm(&sqs, settings, function);
    (sqs, p, running, stats)
}

/// An ESM on `queue` where a test does not say otherwise:
/// batches of up to 10, one poller, 1 s long polls, 1 s visibility, no kills.
fn esm_on(queue: &QueueRef) -> EsmSettings {
    EsmSettings {
        function: "test".into(),
        queue_url: queue.url.clone(),
        queue_arn: queue.arn.clone(),
        region: moto::LOCAL_REGION.into(),
        batch_size: 10,
        batching_window: Duration::from_millis(300),
        max_concurrency: 1,
        poll_wait_seconds: 1,
        visibility_timeout: Some(1),
        kill_probability: 0.0,
        seed: 0,
    }
}

/// The ESM `settings` invoking `function`.
fn spawn_esm(
    sqs: &aws_sdk_sqs::Client,
    settings: EsmSettings,
    function: SqsFunction,
) -> (Running, Arc<esm::EsmStats>) {
    let (source, stop) = StopSource::new();
    let (handles, stats) = esm::spawn(sqs.clone(), settings, move |_| function.clone(), stop);
    (Running { source, handles }, stats)
}

/// A function that waits `delay`, counts the call in `calls` and answers
/// `answer(calls so far, records in the batch)`.
fn counting(
    calls: Arc<Mutex<u32>>,
    delay: Duration,
    answer: fn(u32, usize) -> Result<SqsBatchResponse, String>,
) -> SqsFunction {
    Arc::new(move |event: SqsEvent| {
        let calls = calls.clone();
        Box::pin(async move {
            tokio::time::sleep(delay).await;
            let n = {
                let mut n = calls.lock().unwrap();
                *n += 1;
                *n
            };
            answer(n, event.records.len())
        })
    })
}

/// GIVEN an invocation that fails as a whole (error) THEN nothing of the batch is
/// deleted: the records come back after the visibility timeout.
#[tokio::test(flavor = "multi_thread")]
async fn esm_invocation_error_returns_the_whole_batch() {
    let function = counting(Arc::default(), Duration::ZERO, |n, records| {
        if n == 1 {
            return Err(format!("boom on {records} records"));
        }
        Ok(SqsBatchResponse::default())
    });
    let (_sqs, _p, running, stats) =
        three_on_retry_queue("esmerr", Duration::from_millis(500), 0.0, function).await;
    let drained = running
        .stop_when(Duration::from_secs(20), || async {
            stats.get(&stats.deleted) == 3
        })
        .await;
    assert!(drained);
    assert_eq!(stats.get(&stats.failed_invocations), 1);
    assert_eq!(
        stats.get(&stats.records),
        6,
        "the 3 records were delivered twice"
    );
}

/// Creates the one-time schedule `name` in the stack's group, due at `fire`, sending
/// `input` to `target_arn` (one retry within 60 s, then the scheduler's DLQ), deleted
/// after completion.
async fn one_time(
    sched: &aws_sdk_scheduler::Client,
    p: &Provisioned,
    name: &str,
    fire: domain::Timestamp,
    target_arn: String,
    input: &str,
) {
    sched
        .create_schedule()
        .name(name)
        .group_name(&p.names.schedule_group)
        .schedule_expression(format!("at({})", fire.to_schedule_at()))
        .schedule_expression_timezone("UTC")
        .flexible_time_window(
            FlexibleTimeWindow::builder()
                .mode(FlexibleTimeWindowMode::Off)
                .build()
                .unwrap(),
        )
        .action_after_completion(ActionAfterCompletion::Delete)
        .target(
            Target::builder()
                .arn(target_arn)
                .role_arn(&p.scheduler_role_arn)
                .input(input)
                .retry_policy(
                    RetryPolicy::builder()
                        .maximum_retry_attempts(1)
                        .maximum_event_age_in_seconds(60)
                        .build(),
                )
                .dead_letter_config(
                    DeadLetterConfig::builder()
                        .arn(&p.scheduler_dlq.arn)
                        .build(),
                )
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
}

/// GIVEN one-time schedules in the group WHEN their instant comes THEN the emulator
/// sends each Input unchanged to its target queue, deletes the schedule
/// (ActionAfterCompletion DELETE), records a small non-negative drift; a schedule
/// whose target does not exist ends in its dead-letter queue after its retries.
#[tokio::test(flavor = "multi_thread")]
async fn scheduler_fires_due_schedules_deletes_them_and_dead_letters_failures() {
    let (sdk, p) = stack("sch").await;
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let sched = aws_sdk_scheduler::Client::new(&sdk);
    let fire = SystemClock.now().plus_millis(2_000).ceil_to_second();
    let create = |name: &'static str, target_arn: String, input: &'static str| {
        one_time(&sched, &p, name, fire, target_arn, input)
    };
    let input = r#"{"transaction_id":"TX-1","origin":"RETRY_SCHEDULER","attempt":2}"#;
    create("retry-TX-1-2", p.retry.arn.clone(), input).await;
    let missing = format!(
        "arn:aws:sqs:us-east-1:{}:no-such-queue",
        moto::LOCAL_ACCOUNT
    );
    create("retry-TX-2-2", missing, "{\"x\":2}").await;

    let (running, stats) = spawn_scheduler(&sdk, &p, testkit::faults::ProcessRates::default(), 0);
    let done = wait_until(Duration::from_secs(20), || async {
        stats.get(&stats.fired) == 1 && stats.get(&stats.dead_lettered) == 1
    })
    .await;
    // Nothing fires twice.
    running.stop_after(Duration::from_millis(600)).await;
    assert!(
        done,
        "fired {} dead-lettered {}",
        stats.get(&stats.fired),
        stats.get(&stats.dead_lettered)
    );
    assert_eq!(stats.get(&stats.fired), 1);
    assert_eq!(bodies(&receive(&sqs, &p.retry.url).await), [input]);
    let dl = receive(&sqs, &p.scheduler_dlq.url).await;
    assert_eq!(bodies(&dl), ["{\"x\":2}"]);
    assert!(dl[0]
        .message_attributes()
        .unwrap()
        .contains_key("SCHEDULE_ARN"));
    assert!(
        no_schedules_left(&sched, &p).await,
        "both schedules deleted after completion"
    );
    let drift = stats.drift_ms();
    assert_eq!(drift.len(), 1);
    assert!((0..1_500).contains(&drift[0]), "drift {drift:?} ms");
}

/// A request as the retry handler publishes it, its key also as a message attribute.
async fn send_request(sqs: &aws_sdk_sqs::Client, url: &str, id: &str, attempt: u32) {
    let body = format!(
        r#"{{"transaction_id":"{id}","attempt":{attempt},"idempotency_key":"{id}#{attempt}","payload":{{"n":1}}}}"#
    );
    send_keyed(sqs, url, body, format!("{id}#{attempt}")).await;
}

/// Sends `body` to `url` with `key` as its `idempotency_key` attribute.
async fn send_keyed(sqs: &aws_sdk_sqs::Client, url: &str, body: String, key: String) {
    sqs.send_message()
        .queue_url(url)
        .message_body(body)
        .message_attributes(
            "idempotency_key",
            MessageAttributeValue::builder()
                .data_type("String")
                .string_value(key)
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
}

/// The simulated service on `p`'s queues: seed 1, CANCELLED half the time.
fn service_settings(p: &Provisioned, outage: Option<external::Outage>) -> ExternalSettings {
    ExternalSettings {
        request_queue_url: p.request.url.clone(),
        response_queue_url: p.response.url.clone(),
        cancel_probability: 0.5,
        latency_min: Duration::from_millis(5),
        latency_max: Duration::from_millis(20),
        duplicate_response_probability: 0.0,
        silent_probability: 0.0,
        cancel_reason: "NOT_AVAILABLE".into(),
        consumers: 2,
        seed: 1,
        outage,
    }
}

/// GIVEN the same request twice (same idempotency key) THEN the service counts it raw
/// twice and once after dedupe, and answers both times with the same outcome.
#[tokio::test(flavor = "multi_thread")]
async fn external_service_dedupes_by_idempotency_key() {
    let (sdk, p) = stack("ext").await;
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    for (id, attempt) in [("TX-1", 1), ("TX-1", 1), ("TX-2", 1)] {
        send_request(&sqs, &p.request.url, id, attempt).await;
    }
    let (source, stop) = StopSource::new();
    let (handles, stats) = external::spawn(sqs.clone(), service_settings(&p, None), stop);
    let done = Running { source, handles }
        .stop_when(Duration::from_secs(15), || async {
            stats.get(&stats.responses_sent) == 3
        })
        .await;
    assert!(done);
    assert_eq!(stats.raw_requests(), 3);
    assert_eq!(stats.unique_requests(), 2);
    assert_eq!(stats.get(&stats.missing_key_attribute), 0);
    let mut answers = vec![];
    for _ in 0..3 {
        answers.extend(bodies(&receive(&sqs, &p.response.url).await));
        if answers.len() == 3 {
            break;
        }
    }
    let tx1: Vec<_> = answers.iter().filter(|b| b.contains("TX-1")).collect();
    assert_eq!(tx1.len(), 2);
    assert_eq!(tx1[0], tx1[1], "a duplicate gets the same answer");
    assert_eq!(depth(&sqs, &p.request.url).await, (0, 0));
}

/// GIVEN an outage window covering the run THEN every request read is counted and
/// answered ERROR (HTTP_503), and its scripted answer is kept for after the outage.
#[tokio::test(flavor = "multi_thread")]
async fn external_service_answers_error_during_an_outage() {
    let (sdk, p) = stack("outage").await;
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    for id in ["TX-1", "TX-2"] {
        send_request(&sqs, &p.request.url, id, 1).await;
    }
    let (source, stop) = StopSource::new();
    let outage = external::Outage {
        start: Duration::ZERO,
        duration: Duration::from_secs(600),
        mode: external::OutageMode::Error,
    };
    let (handles, stats) = external::spawn(sqs.clone(), service_settings(&p, Some(outage)), stop);
    stats.start_run(tokio::time::Instant::now());
    let done = Running { source, handles }
        .stop_when(Duration::from_secs(15), || async {
            stats.get(&stats.responses_sent) == 2
        })
        .await;
    assert!(done);
    assert_eq!(stats.get(&stats.outage_errors), 2);
    assert_eq!(stats.unique_requests(), 2);
    for ((id, attempt), seen) in stats.seen() {
        assert_eq!(
            seen.outcome,
            external::scripted_outcome(1, 0.5, &id, attempt)
        );
    }
    let answers = bodies(&receive(&sqs, &p.response.url).await);
    assert!(!answers.is_empty());
    for b in &answers {
        let r = domain::Response::parse(b).unwrap();
        assert_eq!(r.outcome, domain::Outcome::Error, "{b}");
        assert_eq!(r.reason.as_deref(), Some("HTTP_503"), "{b}");
    }
}

/// GIVEN a chaos run that kills every invocation mid-batch (a Lambda timeout or
/// out-of-memory) THEN no batch response: nothing is deleted, every record of the
/// batch comes back after the visibility timeout.
#[tokio::test(flavor = "multi_thread")]
async fn esm_kills_an_invocation_mid_batch_and_the_whole_batch_returns() {
    let finished = Arc::new(Mutex::new(0u32));
    // Longer than any kill point: every invocation dies before its answer.
    let function = counting(finished.clone(), esm::KILL_WITHIN * 3, |_, _| {
        Ok(SqsBatchResponse::default())
    });
    let (sqs, p, running, stats) =
        three_on_retry_queue("esmkill", Duration::from_millis(300), 1.0, function).await;
    let twice = running
        .stop_when(Duration::from_secs(20), || async {
            stats.get(&stats.killed) >= 2 && stats.get(&stats.records) >= 6
        })
        .await;
    assert!(twice, "killed {}", stats.get(&stats.killed));
    assert_eq!(*finished.lock().unwrap(), 0, "no invocation got to answer");
    assert_eq!(stats.get(&stats.deleted), 0);
    assert_eq!(stats.get(&stats.killed), stats.get(&stats.invocations));
    let (visible, in_flight) = depth(&sqs, &p.retry.url).await;
    assert_eq!(visible + in_flight, 3, "every record still in the queue");
}

/// GIVEN a chaos run's scheduler THEN a schedule can be delivered twice (two
/// identical messages), late, or never (gone without a message).
#[tokio::test(flavor = "multi_thread")]
async fn scheduler_misfires_twice_late_or_never() {
    use testkit::faults::ProcessRates;
    let cases = [
        (
            "twice",
            ProcessRates {
                fire_twice: 1.0,
                ..ProcessRates::default()
            },
            2,
        ),
        (
            "late",
            ProcessRates {
                fire_late: 1.0,
                late_ms: 1_500,
                ..ProcessRates::default()
            },
            1,
        ),
        (
            "never",
            ProcessRates {
                never_fire: 1.0,
                ..ProcessRates::default()
            },
            0,
        ),
    ];
    for (name, process, messages) in cases {
        let (sdk, p) = stack(&format!("mis{name}")).await;
        let sqs = aws_sdk_sqs::Client::new(&sdk);
        let sched = aws_sdk_scheduler::Client::new(&sdk);
        let fire = SystemClock.now().plus_millis(1_000).ceil_to_second();
        let input = r#"{"transaction_id":"TX-1","origin":"RETRY_SCHEDULER","attempt":2}"#;
        one_time(&sched, &p, "retry-TX-1-2", fire, p.retry.arn.clone(), input).await;
        let (running, stats) = spawn_scheduler(&sdk, &p, process, 1);
        let settled = wait_until(Duration::from_secs(20), || async {
            stats.get(&stats.fired_twice) + stats.get(&stats.fired) + stats.get(&stats.never_fired)
                >= 1
                && stats.get(&stats.deleted) + stats.get(&stats.never_fired) >= 1
        })
        .await;
        running.stop_after(Duration::from_millis(600)).await;
        assert!(settled, "{name}");
        assert_eq!(
            bodies(&receive(&sqs, &p.retry.url).await),
            vec![input; messages],
            "{name}"
        );
        let counted = match name {
            "twice" => stats.get(&stats.fired_twice),
            "late" => stats.get(&stats.fired_late),
            _ => stats.get(&stats.never_fired),
        };
        assert_eq!(counted, 1, "{name}");
        if name == "late" {
            let drift = stats.drift_ms();
            assert!(drift.iter().all(|d| *d >= 0), "{drift:?}");
        }
        assert!(
            no_schedules_left(&sched, &p).await,
            "{name}: the schedule is gone"
        );
    }
}

/// GIVEN writes to the transactions table (outbox delivery's stack: its request queue
/// and DLQ are FIFO) WHEN the stream mapping runs a function behind the publisher's
/// filter, in batches of 2, retrying a batch twice THEN only unclaimed SENDING images
/// reach it, in write order; a record reported failed once is delivered again (the
/// records of its batch before it are done); a batch that always fails at its first
/// record goes, whole, to the on-failure destination after three deliveries and the
/// stream moves on.
#[tokio::test(flavor = "multi_thread")]
async fn stream_mapping_filters_keeps_order_retries_and_gives_up() {
    use aws_lambda_events::streams::{DynamoDbBatchItemFailure, DynamoDbEventResponse};
    use aws_sdk_dynamodb::types::AttributeValue;
    use sandbox::local::stream_esm::{self, StreamEsmSettings, StreamFunction};
    use std::collections::HashMap;

    let endpoint = moto::shared_endpoint().expect("moto_server on PATH (. scripts/tools.sh)");
    let sdk = moto::sdk_config(&endpoint).await;
    let names = StackNames::new(&moto::unique_prefix("sesm"));
    let p = testkit::provision::provision_for(&sdk, &names, true)
        .await
        .expect("provision (outbox)");
    assert!(p.request.name.ends_with(".fifo") && p.request_dlq.name.ends_with(".fifo"));
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let attrs = sqs
        .get_queue_attributes()
        .queue_url(&p.request.url)
        .attribute_names(aws_sdk_sqs::types::QueueAttributeName::All)
        .send()
        .await
        .unwrap();
    let fifo = attrs
        .attributes()
        .and_then(|a| a.get(&aws_sdk_sqs::types::QueueAttributeName::FifoQueue))
        .cloned();
    assert_eq!(fifo.as_deref(), Some("true"));

    let ddb = aws_sdk_dynamodb::Client::new(&sdk);
    let put = |id: &str, status: &str, claimed: bool| {
        let mut r = ddb
            .put_item()
            .table_name(&names.transactions_table)
            .item("transaction_id", AttributeValue::S(id.into()))
            .item("status", AttributeValue::S(status.into()));
        if claimed {
            r = r.item(
                "publishing_since",
                AttributeValue::S("2026-12-05T10:00:00.000Z".into()),
            );
        }
        r.send()
    };
    let writes = [
        ("TX-A", "SENDING", false),
        ("TX-B", "IN_PROGRESS", false),
        ("TX-C", "SENDING", false),
        ("TX-D", "SENDING", true),
        ("TX-E", "SENDING", false),
        ("TX-F", "SENDING", false),
        ("TX-G", "SENDING", false),
    ];
    for (id, status, claimed) in writes {
        put(id, status, claimed).await.unwrap();
    }

    let delivered: Arc<Mutex<Vec<String>>> = Arc::default();
    // TX-C fails once; TX-E always.
    let failures: Arc<Mutex<HashMap<String, u32>>> = Arc::new(Mutex::new(
        [("TX-C".to_owned(), 1), ("TX-E".to_owned(), u32::MAX)].into(),
    ));
    let (log, fail) = (delivered.clone(), failures.clone());
    let function: StreamFunction = Arc::new(move |event: aws_lambda_events::dynamodb::Event| {
        let (log, fail) = (log.clone(), fail.clone());
        Box::pin(async move {
            let mut response = DynamoDbEventResponse::default();
            for r in &event.records {
                let image = serde_json::to_value(&r.change.new_image).unwrap();
                let id = image["transaction_id"]["S"].as_str().unwrap().to_owned();
                log.lock().unwrap().push(id.clone());
                let mut f = fail.lock().unwrap();
                if let Some(left) = f.get_mut(&id).filter(|n| **n > 0) {
                    *left = left.saturating_sub(1);
                    let mut failure = DynamoDbBatchItemFailure::default();
                    failure.item_identifier = r.change.sequence_number.clone();
                    response.batch_item_failures.push(failure);
                    break;
                }
            }
            Ok(response)
        })
    });
    let (source, stop) = StopSource::new();
    let (h, stats) = stream_esm::spawn(
        aws_sdk_dynamodbstreams::Client::new(&sdk),
        StreamEsmSettings {
            function: "publisher".into(),
            stream_arn: p.transactions_stream_arn.clone(),
            region: moto::LOCAL_REGION.into(),
            batch_size: 2,
            max_retry_attempts: 2,
            bisect_on_error: true,
            filter: Some(
                serde_json::from_str(sandbox::local::stack::template::PUBLISHER_FILTER).unwrap(),
            ),
            poll: Duration::from_millis(50),
            kill_probability: 0.0,
            seed: 1,
        },
        function,
        stop,
    );
    let running = Running {
        source,
        handles: vec![h],
    };
    let log = delivered.clone();
    let done = running
        .stop_when(Duration::from_secs(20), || {
            let log = log.clone();
            async move { log.lock().unwrap().last().map(String::as_str) == Some("TX-G") }
        })
        .await;
    assert!(done, "{:?}", delivered.lock().unwrap());
    assert_eq!(
        *delivered.lock().unwrap(),
        [
            "TX-A", "TX-C", // batch [A, C]: TX-C fails once
            "TX-C", // retried from TX-C
            "TX-E", "TX-E", "TX-E", // batch [E, F] fails at TX-E, retried twice, given up
            "TX-G",
        ]
    );
    assert_eq!(
        stats.get(&stats.filtered_out),
        2,
        "TX-B and the claimed TX-D"
    );
    assert_eq!(stats.get(&stats.discarded), 2, "TX-E and TX-F, never run");
}
