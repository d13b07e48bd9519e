//! The retry handler (B): retry events, from the retry queue; publishes requests at
//! most MAX_REQUESTS_PER_SECOND per execution environment. Everything else
//! lives in the library (`retry_handler`).

// The handler's batch future nests the SDK call futures deeper than the default limit.
#![recursion_limit = "256"]

use lambda_runtime::Error;
use runtime::SqsEvent;

#[tokio::main]
async fn main() -> Result<(), Error> {
    let (config, sdk) = runtime::lambda::start(aws::config::RetryHandlerConfig::from_env).await?;
    let handler = retry_handler::wiring::retry_handler(&sdk, &config)
        .inspect_err(runtime::lambda::invalid_configuration)?;
    runtime::lambda::serve(|event: SqsEvent| handler.invoke(event)).await
}
