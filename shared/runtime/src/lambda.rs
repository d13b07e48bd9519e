//! What every Lambda `main` does around its handler: tracing, the function's
//! configuration (logged when invalid), the SDK configuration, then the event loop
//! handing each invocation's payload to the handler.

pub use aws_config::SdkConfig;
use lambda_runtime::streaming::Body;
pub use lambda_runtime::Error;
use lambda_runtime::{service_fn, LambdaEvent};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::convert::Infallible;
use std::fmt::Display;
use std::future::Future;

/// Logs a configuration the function cannot start with.
pub fn invalid_configuration(e: &impl Display) {
    tracing::error!(error = %e, "invalid configuration");
}

/// Installs tracing, reads the function's configuration with `read` (an invalid one
/// is logged, then returned), then loads the SDK configuration.
pub async fn start<C, E: Display>(
    read: impl FnOnce() -> Result<C, E>,
) -> Result<(C, SdkConfig), E> {
    crate::telemetry::init();
    let config = read().inspect_err(invalid_configuration)?;
    Ok((config, aws::config::load_sdk_config().await))
}

/// A function binary's `main`, written once: `runtime::lambda_main!(read, wire, invoke)`
/// expands to a `#[tokio::main]` main returning [`run`]`(read, wire, invoke)` (the
/// function's crate depends on `tokio`).
#[macro_export]
macro_rules! lambda_main {
    ($read:expr, $wire:expr, $invoke:expr $(,)?) => {
        #[::tokio::main]
        async fn main() -> ::core::result::Result<(), $crate::lambda::Error> {
            $crate::lambda::run($read, $wire, $invoke).await
        }
    };
}

/// A wiring that cannot fail, as the fallible one [`run`] takes.
pub fn infallible<C, H>(
    wire: impl FnOnce(&SdkConfig, &C) -> H,
) -> impl FnOnce(&SdkConfig, &C) -> Result<H, Infallible> {
    move |sdk: &SdkConfig, config: &C| Ok(wire(sdk, config))
}

/// A function's whole `main`: [`start`] with `read`, the handler built by `wire`
/// (a configuration it cannot be built with is logged, then returned), then
/// [`serve`] with every invocation's payload going to `invoke`.
pub async fn run<C, CE, H, WE, A, R, E>(
    read: impl FnOnce() -> Result<C, CE>,
    wire: impl FnOnce(&SdkConfig, &C) -> Result<H, WE>,
    invoke: impl AsyncFn(&H, A) -> Result<R, E>,
) -> Result<(), Error>
where
    CE: Display,
    WE: Display,
    Error: From<CE> + From<WE>,
    A: DeserializeOwned,
    R: Serialize,
    E: Into<Error>,
{
    let (config, sdk) = start(read).await?;
    let handler = wire(&sdk, &config).inspect_err(invalid_configuration)?;
    let (handler, invoke) = (&handler, &invoke);
    serve(move |event: A| invoke(handler, event)).await
}

/// Runs the Lambda event loop: every invocation's payload goes to `handle`.
pub async fn serve<A, R, E, F, Fut>(handle: F) -> Result<(), Error>
where
    A: DeserializeOwned,
    R: Serialize,
    E: Into<Error>,
    F: Fn(A) -> Fut,
    Fut: Future<Output = Result<R, E>>,
{
    let handle = &handle;
    lambda_runtime::run::<A, _, R, R, Body, _, _>(service_fn(
        move |event: LambdaEvent<A>| async move { handle(event.payload).await.map_err(Into::into) },
    ))
    .await
}
