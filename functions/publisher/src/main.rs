//! The publisher (outbox mode): SENDING records from the transactions table's stream,
//! each request published once to the FIFO request queue. Everything else lives in
//! the library (`publisher`).

// The handler's batch future nests the SDK call futures deeper than the default limit.
#![recursion_limit = "256"]

use lambda_runtime::Error;

#[tokio::main]
async fn main() -> Result<(), Error> {
    let (config, sdk) = runtime::lambda::start(aws::config::PublisherConfig::from_env).await?;
    let publisher = publisher::wiring::publisher(&sdk, &config)
        .inspect_err(runtime::lambda::invalid_configuration)?;
    runtime::lambda::serve(|event| publisher.invoke(event)).await
}
