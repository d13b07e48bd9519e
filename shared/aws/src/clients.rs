//! SDK clients, built once per process from one `SdkConfig` and reused.
//!
//! Every client uses the SDK's *standard* retry strategy with explicit bounds
//! ([`MAX_ATTEMPTS`] attempts, exponential backoff with full jitter between
//! [`INITIAL_BACKOFF`] and [`MAX_BACKOFF`]) for throttling, transient 5xx, connection
//! failures, cut-off answers and timed-out attempts; after that the adapters surface
//! the error as `Retryable` and SQS redelivers the message. Each service has its own
//! [`Timeouts`] (connect, per attempt, whole call): [`DYNAMODB_TIMEOUTS`],
//! [`SQS_TIMEOUTS`], the slower [`SCHEDULER_TIMEOUTS`]; a call's whole budget stays under
//! the shortest function timeout (30 s) with room for the message's other calls. The
//! figures and why: `docs/adapters.md#errors`.

use aws_config::SdkConfig;
use aws_sdk_dynamodb::config::retry::RetryConfig;
use aws_sdk_dynamodb::config::timeout::TimeoutConfig;
use std::time::Duration;

/// Attempts per API call, the first one included.
pub const MAX_ATTEMPTS: u32 = 4;
pub const INITIAL_BACKOFF: Duration = Duration::from_millis(100);
pub const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// The time limits of one service's calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    pub connect: Duration,
    /// One attempt, from sending the request to the last byte of the answer.
    pub attempt: Duration,
    /// The whole call, every attempt and backoff included.
    pub operation: Duration,
}

impl Timeouts {
    pub fn config(&self) -> TimeoutConfig {
        TimeoutConfig::builder()
            .connect_timeout(self.connect)
            .operation_attempt_timeout(self.attempt)
            .operation_timeout(self.operation)
            .build()
    }
}

/// DynamoDB: `UpdateItem`, `TransactWriteItems`, `GetItem`, `Query` of one page.
pub const DYNAMODB_TIMEOUTS: Timeouts = Timeouts {
    connect: Duration::from_secs(1),
    attempt: Duration::from_secs(3),
    operation: Duration::from_secs(8),
};

/// SQS: `SendMessage` (the functions never long-poll; the event source mapping
/// receives for them).
pub const SQS_TIMEOUTS: Timeouts = Timeouts {
    connect: Duration::from_secs(1),
    attempt: Duration::from_secs(3),
    operation: Duration::from_secs(8),
};

/// EventBridge Scheduler: `CreateSchedule`, `DeleteSchedule`.
pub const SCHEDULER_TIMEOUTS: Timeouts = Timeouts {
    connect: Duration::from_secs(1),
    attempt: Duration::from_secs(5),
    operation: Duration::from_secs(12),
};

/// The bounded retry policy every client uses.
pub fn retry_config() -> RetryConfig {
    RetryConfig::standard()
        .with_max_attempts(MAX_ATTEMPTS)
        .with_initial_backoff(INITIAL_BACKOFF)
        .with_max_backoff(MAX_BACKOFF)
}

/// `$name(sdk)`: the service's client with the bounded retry policy and its
/// timeouts; `$with(sdk, retry)`: the same with another retry policy.
macro_rules! bounded_client {
    ($name:ident, $with:ident, $sdk:ident, $timeouts:ident) => {
        pub fn $name(sdk: &SdkConfig) -> $sdk::Client {
            $with(sdk, retry_config())
        }

        pub fn $with(sdk: &SdkConfig, retry: RetryConfig) -> $sdk::Client {
            $sdk::Client::from_conf(
                $sdk::config::Builder::from(sdk)
                    .retry_config(retry)
                    .timeout_config($timeouts.config())
                    .build(),
            )
        }
    };
}

bounded_client!(dynamodb, dynamodb_with, aws_sdk_dynamodb, DYNAMODB_TIMEOUTS);
bounded_client!(
    scheduler,
    scheduler_with,
    aws_sdk_scheduler,
    SCHEDULER_TIMEOUTS
);
bounded_client!(sqs, sqs_with, aws_sdk_sqs, SQS_TIMEOUTS);

pub fn dynamodbstreams(sdk: &SdkConfig) -> aws_sdk_dynamodbstreams::Client {
    aws_sdk_dynamodbstreams::Client::from_conf(
        aws_sdk_dynamodbstreams::config::Builder::from(sdk)
            .retry_config(retry_config())
            .build(),
    )
}

/// The DynamoDB client type, for callers that hold one without depending on the SDK.
pub type DynamoClient = aws_sdk_dynamodb::Client;

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
