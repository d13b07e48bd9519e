//! The retry handler (B): retry events, from the retry queue; publishes requests at
//! most MAX_REQUESTS_PER_SECOND per execution environment. Everything else
//! lives in the library (`retry_handler`).

// The handler's batch future nests the SDK call futures deeper than the default limit.
#![recursion_limit = "256"]

runtime::lambda_main!(
    aws::config::RetryHandlerConfig::from_env,
    retry_handler::wiring::retry_handler,
    retry_handler::wiring::AwsRetryHandler::invoke,
);
