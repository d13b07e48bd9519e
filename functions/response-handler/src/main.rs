//! The response handler (A): the external service's responses, from the response
//! queue. Everything else lives in the library (`response_handler`).

// The handler's batch future nests the SDK call futures deeper than the default limit.
#![recursion_limit = "256"]

use lambda_runtime::Error;
use runtime::SqsEvent;

#[tokio::main]
async fn main() -> Result<(), Error> {
    let (config, sdk) =
        runtime::lambda::start(aws::config::ResponseHandlerConfig::from_env).await?;
    let handler = response_handler::wiring::response_handler(&sdk, &config);
    runtime::lambda::serve(|event: SqsEvent| handler.invoke(event)).await
}
