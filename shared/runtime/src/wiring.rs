//! Each function built from its configuration and the AWS adapters, once per process:
//! what the Lambda `main`s call, and what the local stack calls with an SDK
//! configuration pointed at moto, so both run the very same handlers. Each gets the
//! adapters of exactly its ports (`docs/functions.md`, "Ports"). The handlers' wiring
//! is in their crates (`response_handler::wiring`, `retry_handler::wiring`); the
//! breaker and the base settings here are shared.

use crate::breaker::BreakerGate;
use crate::reconcile::{Limits, Reconciler};
use crate::settings::{Seeds, Settings};
use aws::breaker::DynamoBreaker;
use aws::config::{BreakerConfig, ReconcilerConfig};
use aws::dynamo::{DynamoStore, PayloadsTable};
use aws::scheduler::EventBridgeScheduler;
use aws::sqs::{SqsRequestPublisher, SqsRetryPublisher};
use aws_config::SdkConfig;
use domain::policy::PolicySet;
use domain::ports::SystemClock;

/// The reconciler on AWS.
pub type AwsReconciler = Reconciler<
    DynamoStore<PayloadsTable>,
    EventBridgeScheduler,
    SqsRetryPublisher,
    SqsRequestPublisher,
    DynamoBreaker,
>;

/// Write shards of the breaker's window counts per bucket: a burst of technical
/// failures spreads over this many items.
const BREAKER_SHARDS: u8 = 4;

/// The circuit breaker of the external service for the function `by`, when
/// configured.
pub fn breaker_gate(
    client: &aws::clients::DynamoClient,
    c: Option<&BreakerConfig>,
    by: &str,
) -> Option<BreakerGate<DynamoBreaker>> {
    c.map(|c| {
        BreakerGate::new(
            DynamoBreaker::new(
                client.clone(),
                &c.table,
                aws::breaker::SERVICE,
                c.settings,
                BREAKER_SHARDS,
            ),
            c.settings,
            c.refresh,
            by,
        )
    })
}

/// The settings a function starts from: its backoff policies and the stuck index's
/// write shards, every other setting at its default.
pub fn settings(policies: PolicySet, shards: u16) -> Settings {
    Settings {
        policies,
        shards,
        ..Settings::default()
    }
}

/// The reconciler from its configuration.
pub fn reconciler(sdk: &SdkConfig, c: &ReconcilerConfig) -> AwsReconciler {
    let dynamodb = aws::clients::dynamodb(sdk);
    Reconciler {
        breaker: breaker_gate(&dynamodb, c.breaker.as_ref(), crate::reconcile::FUNCTION),
        store: DynamoStore::new(dynamodb, &c.transactions_table)
            .with_payloads_table(&c.payloads_table),
        scheduler: EventBridgeScheduler::new(aws::clients::scheduler(sdk), c.scheduler.clone()),
        retries: SqsRetryPublisher::new(aws::clients::sqs(sdk), &c.retry_queue_url),
        requests: SqsRequestPublisher::new(aws::clients::sqs(sdk), &c.request_queue_url),
        clock: SystemClock,
        settings: Settings {
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
