//! The reconciler (cron): resumes transactions stuck in an intermediate state.
//! Everything but the wiring lives in `runtime::reconcile`.

// The reconciler's invocation future nests every port call of a run (query, read,
// write, schedule, publish per shard); computing its layout (clippy's future-size
// lints do) goes deeper than the default limit of 128.
#![recursion_limit = "256"]

use lambda_runtime::{service_fn, Error, LambdaEvent};

#[tokio::main]
async fn main() -> Result<(), Error> {
    runtime::telemetry::init();
    let config = aws::config::ReconcilerConfig::from_env().inspect_err(|e| {
        tracing::error!(error = %e, "invalid configuration");
    })?;
    let sdk = aws::config::load_sdk_config().await;
    let reconciler = runtime::wiring::reconciler(&sdk, &config);
    let reconciler = &reconciler;
    lambda_runtime::run(service_fn(
        move |event: LambdaEvent<serde_json::Value>| async move {
            reconciler.invoke(event.payload).await.map_err(Error::from)
        },
    ))
    .await
}
