//! Shared set-up of the moto tests: one server per test binary (or
//! `AWS_ENDPOINT_URL`), one freshly provisioned stack per test (unique prefix).
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use aws::config::{SchedulerSettings, StackNames};
use aws::item::record_to_item;
use aws_config::SdkConfig;
use domain::machine::{Actor, FailedKey, ReconcileKey};
use domain::{
    Attempt, MaxAttempts, Origin, Outcome, ScheduleName, Status, Timestamp, TransactionId,
    TransactionRecord,
};
use testkit::meter::CallMeter;
use testkit::moto;
use testkit::provision::{provision_for, Provisioned};

pub struct Stack {
    pub sdk: SdkConfig,
    pub p: Provisioned,
    /// Counts the calls of the adapters [`Stack::store`] builds.
    pub meter: CallMeter,
}

impl Stack {
    pub fn ddb(&self) -> aws_sdk_dynamodb::Client {
        aws_sdk_dynamodb::Client::new(&self.sdk)
    }
    pub fn sqs(&self) -> aws_sdk_sqs::Client {
        aws_sdk_sqs::Client::new(&self.sdk)
    }
    pub fn scheduler(&self) -> aws_sdk_scheduler::Client {
        aws_sdk_scheduler::Client::new(&self.sdk)
    }
    pub fn store(&self) -> aws::dynamo::DynamoStore<aws::dynamo::PayloadsTable> {
        aws::dynamo::DynamoStore::new(
            self.meter.dynamodb(&self.sdk),
            &self.p.names.transactions_table,
        )
        .with_payloads_table(&self.p.names.payloads_table)
    }
    /// The scheduler adapter on the stack's group, its calls through `sdk`.
    pub fn retry_scheduler(&self, sdk: &SdkConfig) -> aws::scheduler::EventBridgeScheduler {
        aws::scheduler::EventBridgeScheduler::new(
            aws::clients::scheduler(sdk),
            self.scheduler_settings(),
        )
    }
    /// The stack's schedule group and targets, with the article's retry settings.
    pub fn scheduler_settings(&self) -> SchedulerSettings {
        SchedulerSettings {
            group: self.p.names.schedule_group.clone(),
            retry_queue_arn: self.p.retry.arn.clone(),
            role_arn: self.p.scheduler_role_arn.clone(),
            dlq_arn: self.p.scheduler_dlq.arn.clone(),
            retry_attempts: 5,
            max_event_age_seconds: 3600,
        }
    }
}

/// A new stack with its own names on the shared server.
pub async fn stack(tag: &str) -> Stack {
    stack_for(tag, false).await
}

/// A new stack; `fifo_requests`: outbox delivery's, its request queue and request DLQ
/// FIFO queues as the template makes them.
pub async fn stack_for(tag: &str, fifo_requests: bool) -> Stack {
    let endpoint = moto::shared_endpoint().expect("moto server (. scripts/tools.sh)");
    let sdk = moto::sdk_config(&endpoint).await;
    let names = StackNames::new(&moto::unique_prefix(tag));
    let p = provision_for(&sdk, &names, fifo_requests)
        .await
        .expect("provision");
    let meter = CallMeter::new().with_payloads_table(&p.names.payloads_table);
    Stack { sdk, p, meter }
}

/// A new stack holding `r`.
pub async fn stack_holding(tag: &str, r: &TransactionRecord) -> Stack {
    let s = stack(tag).await;
    put_record(&s, r).await;
    s
}

/// Puts a record as is (test set-up, bypassing the conditional create).
pub async fn put_record(stack: &Stack, r: &TransactionRecord) {
    put_item(stack, record_to_item(r)).await;
}

/// Stores a raw transaction item (one this release would not write).
pub async fn put_item(
    stack: &Stack,
    item: std::collections::HashMap<String, aws_sdk_dynamodb::types::AttributeValue>,
) {
    stack
        .ddb()
        .put_item()
        .table_name(&stack.p.names.transactions_table)
        .set_item(Some(item))
        .send()
        .await
        .expect("put item");
}

pub fn id(s: &str) -> TransactionId {
    TransactionId::parse(s).unwrap()
}

pub fn at(n: u32) -> Attempt {
    Attempt::new(n).unwrap()
}

/// The retry event the scheduler fires for attempt `n` of `tx` (no re-send round).
pub fn scheduled_retry(tx: &str, n: u32) -> domain::RetryEvent {
    domain::RetryEvent {
        transaction_id: id(tx),
        origin: Origin::RetryScheduler,
        attempt: at(n),
        round: None,
    }
}

pub const T0: i64 = 1_790_000_000_000;

/// The context at `now`, with a deadline (a year) no run here reaches: 3,000 holds
/// of five minutes span ten days.
pub fn ctx(now: i64) -> domain::Context {
    domain::Context::new(
        Timestamp::from_millis(now),
        domain::PolicySet::default(),
        8,
        std::time::Duration::from_secs(900),
    )
    .with_transaction_deadline(std::time::Duration::from_secs(365 * 24 * 3600))
}

/// A record in `status` with the attributes that state carries.
pub fn record(tx: &str, status: Status, current: u32, max: u32, updated: i64) -> TransactionRecord {
    let tid = id(tx);
    let mut r = TransactionRecord::started(
        tid.clone(),
        MaxAttempts::new(max).unwrap(),
        Timestamp::from_millis(T0),
    );
    r.status = status;
    r.current_attempt = at(current);
    r.updated_at = Timestamp::from_millis(updated);
    if status.is_intermediate() {
        let next = at(current + 1);
        r.next_attempt = Some(next);
        r.next_fire_at = Some(Timestamp::from_millis(updated + 3_600_000));
        r.schedule_name = Some(ScheduleName::for_retry(&tid, next));
        r.last_outcome = Some(Outcome::Cancelled);
        r.last_reason = Some("NOT_AVAILABLE".to_owned());
        r.last_actor = Actor::ResponseHandler;
    }
    if status == Status::Sending {
        r.last_origin = Some(Origin::RetryScheduler);
        r.last_actor = Actor::RetryHandler;
    }
    r.reconcile = ReconcileKey::derive(status, &tid, 8, r.updated_at, r.next_fire_at);
    r.failed = FailedKey::derive(status, &tid, 8);
    r
}

/// A tiny HTTP server on 127.0.0.1 answering every request with one canned error,
/// counting the requests: drives the real SDK into throttling, 5xx or validation
/// failures so their classification is exercised end to end.
pub struct CannedServer {
    pub endpoint: String,
    hits: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl CannedServer {
    pub async fn start(status: u16, error_type: &'static str) -> Self {
        use std::sync::atomic::Ordering;
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        let hits = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = hits.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut sock, _)) = listener.accept().await else {
                    return;
                };
                let counter = counter.clone();
                tokio::spawn(async move {
                    // Read one request: headers, then Content-Length bytes of body.
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 4096];
                    loop {
                        let Ok(n) = sock.read(&mut chunk).await else {
                            return;
                        };
                        if n == 0 {
                            return;
                        }
                        buf.extend_from_slice(&chunk[..n]);
                        let text = String::from_utf8_lossy(&buf).to_string();
                        if let Some(end) = text.find("\r\n\r\n") {
                            let len = text[..end]
                                .lines()
                                .find_map(|l| {
                                    let (k, v) = l.split_once(':')?;
                                    k.eq_ignore_ascii_case("content-length")
                                        .then(|| v.trim().parse::<usize>().ok())
                                        .flatten()
                                })
                                .unwrap_or(0);
                            if buf.len() >= end + 4 + len {
                                break;
                            }
                        }
                    }
                    counter.fetch_add(1, Ordering::SeqCst);
                    let body = format!(
                        "{{\"__type\":\"{error_type}\",\"message\":\"canned {error_type}\"}}"
                    );
                    let resp = format!(
                        "HTTP/1.1 {status} Canned\r\nx-amzn-errortype: {error_type}\r\nx-amzn-requestid: canned\r\ncontent-type: application/x-amz-json-1.0\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = sock.write_all(resp.as_bytes()).await;
                    let _ = sock.shutdown().await;
                });
            }
        });
        Self {
            endpoint,
            hits,
            task,
        }
    }

    pub fn hits(&self) -> usize {
        self.hits.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl Drop for CannedServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}
