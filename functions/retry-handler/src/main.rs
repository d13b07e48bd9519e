//! The retry handler (B): retry events, from the retry queue; publishes requests at
//! most MAX_REQUESTS_PER_SECOND per execution environment. Everything else
//! lives in the library (`retry_handler`).

// The handler's batch future nests the SDK call futures deeper than the default limit.
#![recursion_limit = "256"]

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    runtime::lambda::run(
        aws::config::RetryHandlerConfig::from_env,
        retry_handler::wiring::retry_handler,
        retry_handler::wiring::AwsRetryHandler::invoke,
    )
    .await
}
