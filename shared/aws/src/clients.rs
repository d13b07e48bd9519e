//! SDK clients, built once per process from one `SdkConfig` and reused.
//!
//! Every client uses the SDK's *standard* retry strategy with explicit bounds:
//! throttling (`ThrottlingException`, `RequestThrottled`, HTTP 429), transient 5xx
//! and connection failures are retried up to [`MAX_ATTEMPTS`] times with exponential
//! backoff and full jitter between [`INITIAL_BACKOFF`] and [`MAX_BACKOFF`]; after that
//! the adapters surface the error as `Retryable` and SQS redelivers the message.

use aws_config::SdkConfig;
use aws_sdk_dynamodb::config::retry::RetryConfig;
use std::time::Duration;

/// Attempts per API call, the first one included.
pub const MAX_ATTEMPTS: u32 = 4;
pub const INITIAL_BACKOFF: Duration = Duration::from_millis(100);
pub const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// The bounded retry policy every client uses.
pub fn retry_config() -> RetryConfig {
    RetryConfig::standard()
        .with_max_attempts(MAX_ATTEMPTS)
        .with_initial_backoff(INITIAL_BACKOFF)
        .with_max_backoff(MAX_BACKOFF)
}

pub fn dynamodb(sdk: &SdkConfig) -> aws_sdk_dynamodb::Client {
    dynamodb_with(sdk, retry_config())
}

pub fn dynamodb_with(sdk: &SdkConfig, retry: RetryConfig) -> aws_sdk_dynamodb::Client {
    aws_sdk_dynamodb::Client::from_conf(
        aws_sdk_dynamodb::config::Builder::from(sdk)
            .retry_config(retry)
            .build(),
    )
}

pub fn scheduler(sdk: &SdkConfig) -> aws_sdk_scheduler::Client {
    scheduler_with(sdk, retry_config())
}

pub fn scheduler_with(sdk: &SdkConfig, retry: RetryConfig) -> aws_sdk_scheduler::Client {
    aws_sdk_scheduler::Client::from_conf(
        aws_sdk_scheduler::config::Builder::from(sdk)
            .retry_config(retry)
            .build(),
    )
}

pub fn sqs(sdk: &SdkConfig) -> aws_sdk_sqs::Client {
    sqs_with(sdk, retry_config())
}

pub fn sqs_with(sdk: &SdkConfig, retry: RetryConfig) -> aws_sdk_sqs::Client {
    aws_sdk_sqs::Client::from_conf(
        aws_sdk_sqs::config::Builder::from(sdk)
            .retry_config(retry)
            .build(),
    )
}

pub fn dynamodbstreams(sdk: &SdkConfig) -> aws_sdk_dynamodbstreams::Client {
    aws_sdk_dynamodbstreams::Client::from_conf(
        aws_sdk_dynamodbstreams::config::Builder::from(sdk)
            .retry_config(retry_config())
            .build(),
    )
}

/// The three clients a function's adapters use.
#[derive(Debug, Clone)]
pub struct Clients {
    pub dynamodb: aws_sdk_dynamodb::Client,
    pub sqs: aws_sdk_sqs::Client,
    pub scheduler: aws_sdk_scheduler::Client,
}

impl Clients {
    /// The clients of `sdk`, with the bounded retry policy.
    pub fn new(sdk: &SdkConfig) -> Self {
        Self {
            dynamodb: dynamodb(sdk),
            sqs: sqs(sdk),
            scheduler: scheduler(sdk),
        }
    }
}
