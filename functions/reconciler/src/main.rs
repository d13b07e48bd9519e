//! The reconciler (cron): resumes transactions stuck in an intermediate state.
//! Everything else lives in the library (`reconciler`).

// The reconciler's invocation future nests every port call of a run (query, read,
// write, schedule, publish per shard); computing its layout (clippy's future-size
// lints do) goes deeper than the default limit of 128.
#![recursion_limit = "256"]

runtime::lambda_main!(
    aws::config::ReconcilerConfig::from_env,
    runtime::lambda::infallible(reconciler::wiring::reconciler),
    reconciler::wiring::AwsReconciler::invoke,
);
