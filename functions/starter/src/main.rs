//! The starter: start messages from the intake queue; publishes first requests at
//! most MAX_REQUESTS_PER_SECOND per execution environment. Everything else lives in
//! the library (`starter`).

// The handler's batch future nests the SDK call futures deeper than the default limit.
#![recursion_limit = "256"]

runtime::lambda_main!(
    aws::config::StarterConfig::from_env,
    starter::wiring::starter,
    starter::wiring::AwsStarter::invoke,
);
