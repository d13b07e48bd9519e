//! The response handler built from its configuration and the AWS adapters, once per
//! process: what its Lambda `main` calls, and what the local stack calls with an SDK
//! configuration pointed at moto, so both run the very same handler. It gets the
//! adapters of exactly its ports (`docs/functions.md`, "Ports"); the `_on` form takes
//! the clients (the benchmark passes metered ones).

use crate::{ResponseHandler, FUNCTION};
use aws::audit::{AuditWriter, Retention};
use aws::breaker::DynamoBreaker;
use aws::clients::Clients;
use aws::config::ResponseHandlerConfig;
use aws::dynamo::DynamoStore;
use aws::scheduler::EventBridgeScheduler;
use aws::sqs::{SqsDeadLetter, SqsRetryPublisher};
use aws_config::SdkConfig;
use runtime::settings::Settings;
use runtime::wiring::{breaker_gate, settings, sqs_function};

/// The response handler on AWS.
pub type AwsResponseHandler = ResponseHandler<
    DynamoStore,
    EventBridgeScheduler,
    SqsRetryPublisher,
    AuditWriter,
    DynamoBreaker,
    SqsDeadLetter,
>;

/// The response handler from its configuration.
pub fn response_handler(sdk: &SdkConfig, c: &ResponseHandlerConfig) -> AwsResponseHandler {
    response_handler_on(&Clients::new(sdk), c)
}

/// The response handler from its configuration, on given clients.
pub fn response_handler_on(clients: &Clients, c: &ResponseHandlerConfig) -> AwsResponseHandler {
    ResponseHandler {
        store: DynamoStore::new(clients.dynamodb.clone(), &c.transactions_table)
            .retaining(c.retention),
        scheduler: EventBridgeScheduler::new(clients.scheduler.clone(), c.scheduler.clone()),
        retries: SqsRetryPublisher::new(clients.sqs.clone(), &c.retry_queue_url),
        notes: AuditWriter::new(
            clients.dynamodb.clone(),
            &c.audit_table,
            Retention::new(c.audit_retention_days, c.transaction_deadline),
        ),
        breaker: breaker_gate(&clients.dynamodb, c.breaker.as_ref(), FUNCTION),
        function: sqs_function(
            &clients.sqs,
            &c.response_dlq_url,
            Settings {
                delivery: c.delivery,
                answer_timeout: c.answer_timeout,
                technical_resend_max: c.technical_resend_max,
                transaction_deadline: c.transaction_deadline,
                ..settings(c.policies.clone(), c.reconcile_shards)
            },
            c.batch_concurrency,
            &c.metrics_namespace,
        ),
    }
}
