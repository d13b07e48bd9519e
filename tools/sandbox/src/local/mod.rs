//! The local stack: emulators of what AWS runs around the functions, against moto.
//!
//! - [`esm`]: Lambda's SQS event source mapping (batches, partial batch failures,
//!   visibility timeouts, maximum concurrency).
//! - [`scheduler`]: EventBridge Scheduler delivering one-time schedules.
//! - [`external`]: the external service on the request and response queues;
//!   [`http_service`]: the same service as an HTTP API on loopback, for the bridge.
//! - [`stream_esm`]: Lambda's DynamoDB-stream event source mapping (filter, ordered
//!   batches, retries, on-failure destination), for the outbox publisher.
//! - [`stack`]: all of them wired together with the handlers, the audit stream and
//!   the reconciler's cron.

pub mod esm;
pub mod external;
pub mod http_service;
pub mod scheduler;
pub mod stack;
pub mod stop;
pub mod stream_esm;

pub use aws::sqs::SqsDirectory;

use futures::future::BoxFuture;
use std::future::Future;
use std::sync::Arc;

/// The function an emulated event source mapping invokes: its event in, its response
/// (or an invocation error) out.
pub type Invoke<E, R> = Arc<dyn Fn(E) -> BoxFuture<'static, Result<R, String>> + Send + Sync>;

/// Spawns the task `run` makes from fresh counters, and hands back both.
fn spawn_counted<S, F>(run: impl FnOnce(Arc<S>) -> F) -> (tokio::task::JoinHandle<()>, Arc<S>)
where
    S: Default,
    F: Future<Output = ()> + Send + 'static,
{
    let stats = Arc::new(S::default());
    (tokio::spawn(run(stats.clone())), stats)
}
