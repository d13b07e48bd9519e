//! Each function built from its configuration and the AWS adapters, once per process:
//! what the Lambda `main`s call, and what the local stack calls with an SDK
//! configuration pointed at moto, so both run the very same handlers. Each gets the
//! adapters of exactly its ports (`docs/functions.md`, "Ports"). The `_on` forms take
//! the clients (the benchmark passes metered ones). The response handler's wiring is
//! in its crate (`response_handler::wiring`); the breaker and the base settings here
//! are shared.

use crate::batch::BatchOptions;
use crate::breaker::BreakerGate;
use crate::rate::{Paced, Pacer, RateError};
use crate::reconcile::{Limits, Reconciler};
use crate::retry::RetryHandler;
use crate::settings::{Seeds, Settings};
use aws::breaker::DynamoBreaker;
use aws::clients::Clients;
use aws::config::{BreakerConfig, ReconcilerConfig, RetryHandlerConfig};
use aws::dynamo::{DynamoStore, PayloadsTable};
use aws::scheduler::EventBridgeScheduler;
use aws::sqs::{SqsDeadLetter, SqsRequestPublisher, SqsRetryPublisher};
use aws_config::SdkConfig;
use domain::policy::PolicySet;
use domain::ports::SystemClock;
use std::sync::Arc;

/// The retry handler on AWS (its publisher paced by the handler's own pacer).
pub type AwsRetryHandler = RetryHandler<
    DynamoStore<PayloadsTable>,
    Paced<SqsRequestPublisher>,
    EventBridgeScheduler,
    DynamoBreaker,
    SqsDeadLetter,
>;
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

/// The retry handler from its configuration, its publisher paced by a [`Pacer`] of
/// its own at `MAX_REQUESTS_PER_SECOND`: built once per execution environment, the
/// handler keeps it across warm invocations and shares it among the records a batch
/// processes concurrently.
pub fn retry_handler(
    sdk: &SdkConfig,
    c: &RetryHandlerConfig,
) -> Result<AwsRetryHandler, RateError> {
    retry_handler_on(&Clients::new(sdk), c)
}

/// The retry handler from its configuration, on given clients.
pub fn retry_handler_on(
    clients: &Clients,
    c: &RetryHandlerConfig,
) -> Result<AwsRetryHandler, RateError> {
    let pacer = Arc::new(Pacer::per_second(c.max_requests_per_second)?);
    Ok(RetryHandler {
        store: DynamoStore::new(clients.dynamodb.clone(), &c.transactions_table)
            .with_payloads_table(&c.payloads_table),
        requests: Paced::new(
            SqsRequestPublisher::new(clients.sqs.clone(), &c.request_queue_url),
            Arc::clone(&pacer),
        ),
        scheduler: EventBridgeScheduler::new(clients.scheduler.clone(), c.scheduler.clone()),
        breaker: breaker_gate(
            &clients.dynamodb,
            c.breaker.as_ref(),
            crate::retry::FUNCTION,
        ),
        dead_letter: SqsDeadLetter::new(clients.sqs.clone(), &c.retry_dlq_url),
        clock: SystemClock,
        settings: Settings {
            answer_timeout: c.answer_timeout,
            transaction_deadline: c.transaction_deadline,
            ..settings(PolicySet::default(), c.reconcile_shards)
        },
        batch: BatchOptions {
            concurrency: c.batch_concurrency,
        },
        seeds: Seeds::from_entropy(),
        pacer: Some(pacer),
        namespace: c.metrics_namespace.clone(),
    })
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
