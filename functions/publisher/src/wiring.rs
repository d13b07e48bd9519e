//! The publisher built from its configuration and the AWS adapters, once per process:
//! what its Lambda `main` calls, and what the local stack calls with an SDK
//! configuration pointed at moto, so both run the very same function. The `_on` form
//! takes the clients (the benchmark passes metered ones).

use crate::Publisher;
use aws::audit::{AuditWriter, Retention};
use aws::clients::Clients;
use aws::config::PublisherConfig;
use aws::dynamo::{DynamoStore, PayloadsTable};
use aws::sqs::SqsRequestPublisher;
use aws_config::SdkConfig;
use domain::decide::Delivery;
use domain::policy::PolicySet;
use domain::ports::SystemClock;
use runtime::rate::{Paced, RateError};
use runtime::settings::{Seeds, Settings};
use runtime::wiring::{paced_requests, settings};

/// The publisher on AWS (its requests paced by its own pacer).
pub type AwsPublisher =
    Publisher<DynamoStore<PayloadsTable>, Paced<SqsRequestPublisher>, AuditWriter>;

/// The publisher from its configuration, its requests paced at
/// `MAX_REQUESTS_PER_SECOND` per execution environment.
pub fn publisher(sdk: &SdkConfig, c: &PublisherConfig) -> Result<AwsPublisher, RateError> {
    publisher_on(&Clients::new(sdk), c)
}

/// The publisher from its configuration, on given clients.
pub fn publisher_on(clients: &Clients, c: &PublisherConfig) -> Result<AwsPublisher, RateError> {
    let (requests, pacer) = paced_requests(
        &clients.sqs,
        &c.request_queue_url,
        c.max_requests_per_second,
    )?;
    Ok(Publisher {
        store: DynamoStore::new(clients.dynamodb.clone(), &c.transactions_table)
            .with_payloads_table(&c.payloads_table),
        requests,
        notes: AuditWriter::new(
            clients.dynamodb.clone(),
            &c.audit_table,
            Retention::new(c.audit_retention_days, c.transaction_deadline),
        ),
        clock: SystemClock,
        settings: Settings {
            delivery: Delivery::Outbox,
            answer_timeout: c.answer_timeout,
            reconcile_threshold: c.reconcile_threshold,
            transaction_deadline: c.transaction_deadline,
            ..settings(PolicySet::default(), c.reconcile_shards)
        },
        concurrency: c.batch_concurrency,
        seeds: Seeds::from_entropy(),
        pacer: Some(pacer),
        namespace: c.metrics_namespace.clone(),
    })
}
