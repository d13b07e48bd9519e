//! The moto backend: the `shared/aws` adapters (DynamoDB, EventBridge Scheduler, SQS)
//! over the real SDK clients, against the patched moto server every test binary
//! shares (`scripts/moto_server_patched.py`, or `AWS_ENDPOINT_URL`). Each world
//! provisions a stack of its own under a unique prefix.
//!
//! moto stores schedules but never fires them, and its clock is the machine's: the
//! world's manual clock stays the only time the handlers see (it goes into every
//! decision's context), and firing is done by the test — the due schedules are read
//! back through the Scheduler API (`ListSchedules`, `GetSchedule`), their target
//! input delivered and the schedule deleted, as `ActionAfterCompletion = DELETE`
//! does. The audit trail is the audit writer's: the table's stream drained into
//! the audit table (`testkit::drain`), read back with `AuditWriter::history`.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use super::{Backend, World, T0};
use aws::audit::AuditWriter;
use aws::config::{SchedulerSettings, StackNames};
use aws::dynamo::{DynamoStore, PayloadsTable};
use aws::scheduler::EventBridgeScheduler;
use aws::sqs::{SqsRequestPublisher, SqsRetryPublisher};
use domain::audit::AuditEntry;
use domain::decide::ScheduleSpec;
use domain::ports::{Creates, Records};
use domain::{
    Payload, Request, RetryEvent, ScheduleName, Timestamp, TransactionId, TransactionRecord,
};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use testkit::drain::{drain_into, StreamPosition};
use testkit::memory::ManualClock;
use testkit::moto::{schedule_names, take_all};
use testkit::provision::{provision, Provisioned};

/// What a moto world holds beside its ports.
pub struct Moto {
    pub stack: Provisioned,
    pub sqs: aws_sdk_sqs::Client,
    pub scheduler: aws_sdk_scheduler::Client,
    pub dynamodb: aws_sdk_dynamodb::Client,
    pub streams: aws_sdk_dynamodbstreams::Client,
    /// The audit writer: the response handler's notices, and the stream's changes.
    pub audit: AuditWriter,
    /// Every request taken off the request queue so far (the service's inbox).
    received: Mutex<Vec<Request>>,
    /// Where the audit drain is in the table's stream, and the changes it read.
    position: tokio::sync::Mutex<StreamPosition>,
    changes: AtomicUsize,
}

/// The store of a moto world: transactions and payloads tables.
pub type MotoStore = DynamoStore<PayloadsTable>;

/// Parses `at(yyyy-mm-ddThh:mm:ss)` (UTC, the only zone the adapter writes).
fn parse_at(expression: &str) -> Timestamp {
    let inner = expression
        .strip_prefix("at(")
        .and_then(|r| r.strip_suffix(')'))
        .unwrap_or_else(|| panic!("not a one-time expression: {expression}"));
    Timestamp::parse(&format!("{inner}Z")).unwrap()
}

impl Moto {
    /// The schedule group's schedules, read back from the Scheduler API.
    async fn schedules(&self) -> Vec<ScheduleSpec> {
        let group = &self.stack.names.schedule_group;
        let names = schedule_names(&self.scheduler, group)
            .await
            .expect("ListSchedules");
        let mut specs = Vec::new();
        for name in names {
            let out = self
                .scheduler
                .get_schedule()
                .group_name(group)
                .name(&name)
                .send()
                .await
                .expect("GetSchedule");
            assert_eq!(out.schedule_expression_timezone(), Some("UTC"));
            let target = out.target().expect("a target");
            assert_eq!(target.arn(), self.stack.retry.arn, "the retry queue");
            specs.push(ScheduleSpec {
                name: ScheduleName::from_stored(&name).unwrap(),
                fire_at: parse_at(out.schedule_expression().unwrap_or_default()),
                event: RetryEvent::parse(target.input().unwrap_or_default()).unwrap(),
            });
        }
        specs.sort_by(|x, y| x.name.as_str().cmp(y.name.as_str()));
        specs
    }

    /// Drains the stream into the audit table; returns the changes read so far.
    async fn drain(&self) -> usize {
        let mut position = self.position.lock().await;
        let report = drain_into(
            &self.audit,
            &self.streams,
            &self.stack.transactions_stream_arn,
            &mut position,
        )
        .await
        .expect("audit drain");
        self.changes.fetch_add(report.changes, Ordering::SeqCst) + report.changes
    }
}

impl Backend for Moto {
    type Store = MotoStore;
    type Scheduler = EventBridgeScheduler;
    type Requests = SqsRequestPublisher;
    type Retries = SqsRetryPublisher;
    type Notes = AuditWriter;

    async fn world() -> World<Self> {
        let endpoint = testkit::moto::shared_endpoint().expect("moto server (. scripts/tools.sh)");
        let sdk = testkit::moto::sdk_config(&endpoint).await;
        let names = StackNames::new(&testkit::moto::unique_prefix("ft"));
        let stack = provision(&sdk, &names).await.expect("provision");
        let dynamodb = aws::clients::dynamodb(&sdk);
        let sqs = aws::clients::sqs(&sdk);
        let scheduler = aws::clients::scheduler(&sdk);
        let store = DynamoStore::new(dynamodb.clone(), &names.transactions_table)
            .with_payloads_table(&names.payloads_table);
        // Schedules are created at the world's time, as its handlers decide.
        let clock = Arc::new(ManualClock::at(T0));
        let schedules = EventBridgeScheduler::new(
            scheduler.clone(),
            SchedulerSettings {
                group: names.schedule_group.clone(),
                retry_queue_arn: stack.retry.arn.clone(),
                role_arn: stack.scheduler_role_arn.clone(),
                dlq_arn: stack.scheduler_dlq.arn.clone(),
                retry_attempts: 5,
                max_event_age_seconds: 3600,
            },
        )
        .with_clock(clock.clone());
        let requests = SqsRequestPublisher::new(sqs.clone(), &stack.request.url);
        let retries = SqsRetryPublisher::new(sqs.clone(), &stack.retry.url);
        let backend = Moto {
            audit: AuditWriter::new(dynamodb.clone(), &names.audit_table, 365),
            streams: aws::clients::dynamodbstreams(&sdk),
            stack,
            sqs,
            scheduler,
            dynamodb,
            received: Mutex::new(Vec::new()),
            position: tokio::sync::Mutex::new(StreamPosition::default()),
            changes: AtomicUsize::new(0),
        };
        let mut w = World::with_ports(store, schedules, requests, retries, backend);
        w.clock = clock;
        w
    }

    fn notes(w: &World<Self>) -> &AuditWriter {
        &w.backend.audit
    }

    async fn live(w: &World<Self>) -> Vec<ScheduleSpec> {
        w.backend.schedules().await
    }

    async fn take_due(w: &World<Self>, now: Timestamp) -> Vec<ScheduleSpec> {
        let due: Vec<ScheduleSpec> = w
            .backend
            .schedules()
            .await
            .into_iter()
            .filter(|s| s.fire_at <= now)
            .collect();
        for s in &due {
            w.backend
                .scheduler
                .delete_schedule()
                .group_name(&w.backend.stack.names.schedule_group)
                .name(s.name.as_str())
                .send()
                .await
                .expect("DeleteSchedule");
        }
        due
    }

    async fn published(w: &World<Self>) -> Vec<Request> {
        let bodies = take_all(&w.backend.sqs, &w.backend.stack.request.url)
            .await
            .unwrap();
        let mut received = w.backend.received.lock().unwrap();
        received.extend(bodies.iter().map(|b| Request::parse(b).unwrap()));
        received.clone()
    }

    async fn take_retries(w: &World<Self>) -> Vec<RetryEvent> {
        take_all(&w.backend.sqs, &w.backend.stack.retry.url)
            .await
            .unwrap()
            .iter()
            .map(|b| RetryEvent::parse(b).unwrap())
            .collect()
    }

    async fn audit(w: &World<Self>, id: &TransactionId) -> Vec<AuditEntry> {
        w.backend.drain().await;
        w.backend.audit.history(id).await.expect("audit history")
    }

    async fn change_count(w: &World<Self>) -> usize {
        w.backend.drain().await
    }

    async fn put(w: &World<Self>, record: &TransactionRecord, payload: &Payload) {
        if Records::get(&w.store, &record.transaction_id)
            .await
            .unwrap()
            .is_none()
        {
            w.store.create(record, payload).await.expect("create");
        }
        w.backend
            .dynamodb
            .put_item()
            .table_name(&w.backend.stack.names.transactions_table)
            .set_item(Some(aws::item::record_to_item(record)))
            .send()
            .await
            .expect("put record");
    }
}
