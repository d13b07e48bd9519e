//! The reconciler (cron): resumes transactions stuck in an intermediate state.
//! Everything else lives in the library (`reconciler`).

// The reconciler's invocation future nests every port call of a run (query, read,
// write, schedule, publish per shard); computing its layout (clippy's future-size
// lints do) goes deeper than the default limit of 128.
#![recursion_limit = "256"]

use lambda_runtime::Error;

#[tokio::main]
async fn main() -> Result<(), Error> {
    let (config, sdk) = runtime::lambda::start(aws::config::ReconcilerConfig::from_env).await?;
    let reconciler = reconciler::wiring::reconciler(&sdk, &config);
    runtime::lambda::serve(|event: serde_json::Value| reconciler.invoke(event)).await
}
