//! The retry handler built from its configuration and the AWS adapters, once per
//! process: what its Lambda `main` calls, and what the local stack calls with an SDK
//! configuration pointed at moto, so both run the very same handler. It gets the
//! adapters of exactly its ports (`docs/functions.md`, "Ports"); the `_on` form takes
//! the clients (the benchmark passes metered ones).

use crate::{RetryHandler, FUNCTION};
use aws::breaker::DynamoBreaker;
use aws::clients::Clients;
use aws::config::RetryHandlerConfig;
use aws::dynamo::{DynamoStore, PayloadsTable};
use aws::sqs::{SqsDeadLetter, SqsRequestPublisher, SqsRetryPublisher};
use aws_config::SdkConfig;
use domain::policy::PolicySet;
use runtime::rate::{Paced, RateError};
use runtime::settings::Settings;
use runtime::wiring::{breaker_gate, paced_requests, settings, sqs_function};

/// The retry handler on AWS (its publisher paced by the handler's own pacer).
pub type AwsRetryHandler = RetryHandler<
    DynamoStore<PayloadsTable>,
    Paced<SqsRequestPublisher>,
    SqsRetryPublisher,
    DynamoBreaker,
    SqsDeadLetter,
>;

/// The retry handler from its configuration, its publisher paced by a pacer of its
/// own at `MAX_REQUESTS_PER_SECOND`: built once per execution environment, the
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
    let (requests, pacer) = paced_requests(
        &clients.sqs,
        &c.request_queue_url,
        c.max_requests_per_second,
    )?;
    Ok(RetryHandler {
        store: DynamoStore::new(clients.dynamodb.clone(), &c.transactions_table)
            .with_payloads_table(&c.payloads_table)
            .retaining(c.retention),
        requests,
        retries: SqsRetryPublisher::new(clients.sqs.clone(), &c.retry_queue_url),
        breaker: breaker_gate(&clients.dynamodb, c.breaker.as_ref(), FUNCTION),
        pacer: Some(pacer),
        function: sqs_function(
            &clients.sqs,
            &c.retry_dlq_url,
            Settings {
                delivery: c.delivery,
                answer_timeout: c.answer_timeout,
                transaction_deadline: c.transaction_deadline,
                ..settings(PolicySet::default(), c.reconcile_shards)
            },
            c.batch_concurrency,
            &c.metrics_namespace,
        ),
    })
}
