//! The staging harness function: requests from the main stack's request queue,
//! answers on its response queue. Everything but the wiring lives in the library.

use harness::{Harness, HarnessConfig};
use lambda_runtime::{service_fn, Error, LambdaEvent};
use runtime::SqsEvent;

#[tokio::main]
async fn main() -> Result<(), Error> {
    runtime::telemetry::init();
    let config = HarnessConfig::from_env().inspect_err(|e| {
        tracing::error!(error = %e, "invalid configuration");
    })?;
    let sdk = aws::config::load_sdk_config().await;
    let harness = Harness::new(&sdk, config);
    let harness = &harness;
    lambda_runtime::run(service_fn(move |event: LambdaEvent<SqsEvent>| async move {
        harness.invoke(event.payload).await.map_err(Error::from)
    }))
    .await
}
