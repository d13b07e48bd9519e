//! The response handler (A): the external service's responses, from the response
//! queue. Everything else lives in the library (`response_handler`).

// The handler's batch future nests the SDK call futures deeper than the default limit.
#![recursion_limit = "256"]

runtime::lambda_main!(
    aws::config::ResponseHandlerConfig::from_env,
    runtime::lambda::infallible(response_handler::wiring::response_handler),
    response_handler::wiring::AwsResponseHandler::invoke,
);
