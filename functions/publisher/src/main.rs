//! The publisher (outbox mode): SENDING records from the transactions table's stream,
//! each request published once to the FIFO request queue. Everything else lives in
//! the library (`publisher`).

// The handler's batch future nests the SDK call futures deeper than the default limit.
#![recursion_limit = "256"]

runtime::lambda_main!(
    aws::config::PublisherConfig::from_env,
    publisher::wiring::publisher,
    publisher::wiring::AwsPublisher::invoke,
);
