//! The HTTP bridge: requests from the request queue to the configured HTTP endpoint,
//! answers to the response queue. Everything else lives in the library (`http_bridge`).

// The handler's batch future nests the HTTP and SDK call futures deeply.
#![recursion_limit = "256"]

use lambda_runtime::Error;
use runtime::SqsEvent;

#[tokio::main]
async fn main() -> Result<(), Error> {
    let (config, sdk) = runtime::lambda::start(aws::config::HttpBridgeConfig::from_env).await?;
    let bridge = http_bridge::wiring::bridge(&sdk, &config)
        .inspect_err(runtime::lambda::invalid_configuration)?;
    runtime::lambda::serve(|event: SqsEvent| bridge.invoke(event)).await
}
