//! The starter: start messages from the intake queue; publishes first requests at
//! most MAX_REQUESTS_PER_SECOND per execution environment. Everything else lives in
//! the library (`starter`).

// The handler's batch future nests the SDK call futures deeper than the default limit.
#![recursion_limit = "256"]

use lambda_runtime::Error;
use runtime::SqsEvent;

#[tokio::main]
async fn main() -> Result<(), Error> {
    let (config, sdk) = runtime::lambda::start(aws::config::StarterConfig::from_env).await?;
    let starter = starter::wiring::starter(&sdk, &config)
        .inspect_err(runtime::lambda::invalid_configuration)?;
    runtime::lambda::serve(|event: SqsEvent| starter.invoke(event)).await
}
