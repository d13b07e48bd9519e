//! The response handler (A): the external service's responses, from the response
//! queue. Everything but the wiring lives in `runtime::response`.

use lambda_runtime::{service_fn, Error, LambdaEvent};
use runtime::SqsEvent;

#[tokio::main]
async fn main() -> Result<(), Error> {
    runtime::telemetry::init();
    let config = aws::config::ResponseHandlerConfig::from_env().inspect_err(|e| {
        tracing::error!(error = %e, "invalid configuration");
    })?;
    let sdk = aws::config::load_sdk_config().await;
    let handler = runtime::wiring::response_handler(&sdk, &config);
    let handler = &handler;
    lambda_runtime::run(service_fn(move |event: LambdaEvent<SqsEvent>| async move {
        handler.invoke(event.payload).await.map_err(Error::from)
    }))
    .await
}
