//! The retry handler (B): retry events, from the retry queue; publishes requests at
//! most MAX_REQUESTS_PER_SECOND per execution environment. Everything but the wiring
//! lives in `runtime::retry`.

use lambda_runtime::{service_fn, Error, LambdaEvent};
use runtime::SqsEvent;

#[tokio::main]
async fn main() -> Result<(), Error> {
    runtime::telemetry::init();
    let config = aws::config::RetryHandlerConfig::from_env().inspect_err(|e| {
        tracing::error!(error = %e, "invalid configuration");
    })?;
    let sdk = aws::config::load_sdk_config().await;
    let handler = runtime::wiring::retry_handler(&sdk, &config).inspect_err(|e| {
        tracing::error!(error = %e, "invalid configuration");
    })?;
    let handler = &handler;
    lambda_runtime::run(service_fn(move |event: LambdaEvent<SqsEvent>| async move {
        handler.invoke(event.payload).await.map_err(Error::from)
    }))
    .await
}
