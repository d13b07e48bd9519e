//! The starter built from its configuration and the AWS adapters, once per process:
//! what its Lambda `main` calls, and what the local stack calls with an SDK
//! configuration pointed at moto, so both run the very same function. Every setting
//! it decides with is the deployment's (`StarterConfig`): the default budget, the
//! answer timeout, the index's shards and threshold, the rate of first requests.

use crate::Starter;
use aws::clients::Clients;
use aws::config::StarterConfig;
use aws::dynamo::{DynamoStore, PayloadsTable};
use aws::sqs::{SqsDeadLetter, SqsRequestPublisher};
use aws_config::SdkConfig;
use domain::ids::IdError;
use domain::policy::PolicySet;
use domain::MaxAttempts;
use runtime::rate::{Paced, RateError};
use runtime::settings::Settings;
use runtime::wiring::{paced_requests, settings, sqs_function};
use thiserror::Error;

/// The starter on AWS (its publisher paced by its own pacer).
pub type AwsStarter =
    Starter<DynamoStore<PayloadsTable>, Paced<SqsRequestPublisher>, SqsDeadLetter>;

/// A configuration the starter cannot be built with.
#[derive(Debug, Error)]
pub enum WiringError {
    #[error(transparent)]
    Rate(#[from] RateError),
    #[error("DEFAULT_MAX_ATTEMPTS={value}: {source}")]
    DefaultMaxAttempts { value: u32, source: IdError },
}

/// The starter from its configuration, its publisher paced by a pacer of its own
/// at `MAX_REQUESTS_PER_SECOND`, kept across warm invocations.
pub fn starter(sdk: &SdkConfig, c: &StarterConfig) -> Result<AwsStarter, WiringError> {
    starter_on(&Clients::new(sdk), c)
}

/// The starter from its configuration, on given clients.
pub fn starter_on(clients: &Clients, c: &StarterConfig) -> Result<AwsStarter, WiringError> {
    let (requests, pacer) = paced_requests(
        &clients.sqs,
        &c.request_queue_url,
        c.max_requests_per_second,
    )?;
    let default_max_attempts = MaxAttempts::new(c.default_max_attempts).map_err(|source| {
        WiringError::DefaultMaxAttempts {
            value: c.default_max_attempts,
            source,
        }
    })?;
    Ok(Starter {
        store: DynamoStore::new(clients.dynamodb.clone(), &c.transactions_table)
            .with_payloads_table(&c.payloads_table),
        requests,
        default_max_attempts,
        pacer: Some(pacer),
        function: sqs_function(
            &clients.sqs,
            &c.intake_dlq_url,
            Settings {
                delivery: c.delivery,
                reconcile_threshold: c.reconcile_threshold,
                answer_timeout: c.answer_timeout,
                ..settings(PolicySet::default(), c.reconcile_shards)
            },
            c.batch_concurrency,
            &c.metrics_namespace,
        ),
    })
}
