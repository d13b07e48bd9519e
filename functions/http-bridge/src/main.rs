//! The HTTP bridge: requests from the request queue to the configured HTTP endpoint,
//! answers to the response queue. Everything else lives in the library (`http_bridge`).

// The handler's batch future nests the HTTP and SDK call futures deeply.
#![recursion_limit = "256"]

runtime::lambda_main!(
    aws::config::HttpBridgeConfig::from_env,
    http_bridge::wiring::bridge,
    http_bridge::wiring::AwsBridge::invoke,
);
