//! The reconciler built from its configuration and the AWS adapters, once per
//! process: what its Lambda `main` calls, and what the local stack calls with an SDK
//! configuration pointed at moto, so both run the very same reconciler. It gets the
//! adapters of exactly its ports (`docs/functions.md`, "Ports").

use crate::{Limits, Reconciler, FUNCTION};
use aws::audit::{AuditWriter, Retention};
use aws::breaker::DynamoBreaker;
use aws::config::ReconcilerConfig;
use aws::dynamo::{DynamoStore, PayloadsTable};
use aws::scheduler::EventBridgeScheduler;
use aws::sqs::{SqsRequestPublisher, SqsRetryPublisher};
use aws_config::SdkConfig;
use domain::policy::PolicySet;
use domain::ports::SystemClock;
use runtime::settings::{Seeds, Settings};
use runtime::wiring::{breaker_gate, settings};

/// The reconciler on AWS.
pub type AwsReconciler = Reconciler<
    DynamoStore<PayloadsTable>,
    EventBridgeScheduler,
    SqsRetryPublisher,
    SqsRequestPublisher,
    AuditWriter,
    DynamoBreaker,
>;

/// The reconciler from its configuration.
pub fn reconciler(sdk: &SdkConfig, c: &ReconcilerConfig) -> AwsReconciler {
    let dynamodb = aws::clients::dynamodb(sdk);
    Reconciler {
        breaker: breaker_gate(&dynamodb, c.breaker.as_ref(), FUNCTION),
        notes: AuditWriter::new(
            dynamodb.clone(),
            &c.audit_table,
            Retention::new(c.audit_retention_days, c.transaction_deadline),
        ),
        store: DynamoStore::new(dynamodb, &c.transactions_table)
            .with_payloads_table(&c.payloads_table)
            .retaining(c.retention),
        scheduler: EventBridgeScheduler::new(aws::clients::scheduler(sdk), c.scheduler.clone()),
        retries: SqsRetryPublisher::new(aws::clients::sqs(sdk), &c.retry_queue_url),
        requests: SqsRequestPublisher::new(aws::clients::sqs(sdk), &c.request_queue_url),
        clock: SystemClock,
        settings: Settings {
            delivery: c.delivery,
            reconcile_threshold: c.reconcile_threshold,
            answer_timeout: c.answer.timeout,
            answer_republish_max: c.answer.republish_max,
            requeue_max: c.requeue_max,
            transaction_deadline: c.transaction_deadline,
            ..settings(PolicySet::default(), c.reconcile_shards)
        },
        limits: Limits {
            max_items: c.reconcile_max_items,
            ..Limits::default()
        },
        seeds: Seeds::from_entropy(),
        namespace: c.metrics_namespace.clone(),
    }
}
