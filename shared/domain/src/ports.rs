//! Ports: one trait per capability.
//!
//! A function gets exactly the ports it uses, so the IAM policy of each Lambda can list
//! exactly the actions behind them. Adapters live elsewhere (`deferred-retry-aws` for
//! AWS, `deferred-retry-runtime::memory` in memory); they implement these traits and
//! classify failures into [`PortError`].
//!
//! The traits use `async fn` returning `Send` futures, with no runtime dependency.

use crate::decide::ScheduleSpec;
use crate::ids::{ScheduleName, Timestamp, TransactionId};
use crate::machine::{TransactionRecord, Write};
use crate::message::{Payload, Request, RetryEvent};
use std::future::Future;
use thiserror::Error;

/// What the caller must do about a failed port call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// Throttling, 5xx, timeouts: report the record as failed so SQS redelivers.
    Retryable,
    /// Bad input or configuration: retrying cannot help; keep the message for a human.
    Permanent,
}

/// A failed port call, classified by what the caller must do.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{operation}: {message}")]
pub struct PortError {
    pub kind: ErrorKind,
    /// The API or port operation that failed (`UpdateItem`, `CreateSchedule`, …).
    pub operation: &'static str,
    pub message: String,
}

impl PortError {
    pub fn retryable(operation: &'static str, message: impl Into<String>) -> Self {
        Self {
            kind: ErrorKind::Retryable,
            operation,
            message: message.into(),
        }
    }

    pub fn permanent(operation: &'static str, message: impl Into<String>) -> Self {
        Self {
            kind: ErrorKind::Permanent,
            operation,
            message: message.into(),
        }
    }

    pub fn is_retryable(&self) -> bool {
        self.kind == ErrorKind::Retryable
    }
}

/// Result of a conditional create.
#[derive(Debug, Clone, PartialEq)]
pub enum CreateOutcome {
    Created,
    AlreadyExists {
        record: TransactionRecord,
        same_payload: bool,
    },
}

/// Result of a conditional write.
#[derive(Debug, Clone, PartialEq)]
pub enum WriteOutcome {
    /// Applied; the record as written.
    Written(TransactionRecord),
    /// The condition failed; the current record (`None`: no such transaction).
    ConditionFailed(Option<TransactionRecord>),
}

/// Result of creating a one-time schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScheduleCreated {
    Created,
    AlreadyExists,
}

/// Result of deleting a schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScheduleDeleted {
    Deleted,
    NotFound,
}

/// A page of records from the reconciler index.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct StuckPage {
    pub records: Vec<TransactionRecord>,
    /// Opaque cursor for the next page of the same query; `None` when done.
    pub next: Option<String>,
}

/// The query the reconciler runs, one shard at a time: cycles whose fire time is
/// before `before`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StuckQuery {
    pub shard: u16,
    /// Index sort key strictly before this instant.
    pub before: Timestamp,
    pub limit: u32,
    pub cursor: Option<String>,
}

/// The state store: one small item per transaction, changed only by conditional
/// writes; the payload stored apart, written once.
pub trait StateStore: Send + Sync {
    /// Conditional create of the record and its payload.
    fn create(
        &self,
        record: &TransactionRecord,
        payload: &Payload,
    ) -> impl Future<Output = Result<CreateOutcome, PortError>> + Send;

    /// One conditional write. A failed condition returns the current record without a
    /// second read.
    fn transition(
        &self,
        write: &Write,
    ) -> impl Future<Output = Result<WriteOutcome, PortError>> + Send;

    /// Strongly consistent read of a record.
    fn get(
        &self,
        id: &TransactionId,
    ) -> impl Future<Output = Result<Option<TransactionRecord>, PortError>> + Send;

    /// The stored payload.
    fn payload(
        &self,
        id: &TransactionId,
    ) -> impl Future<Output = Result<Option<Payload>, PortError>> + Send;

    /// The current records (strongly consistent reads) of the index entries on
    /// `query.shard` whose sort key (the cycle's fire time) is before `query.before`
    /// (a Query on the sparse, sharded index, never a Scan). A record that left the
    /// index between the query and the read is not returned.
    fn query_stuck(
        &self,
        query: &StuckQuery,
    ) -> impl Future<Output = Result<StuckPage, PortError>> + Send;
}

/// The deferred scheduler.
pub trait Scheduler: Send + Sync {
    /// Creates a one-time schedule; an existing one with the same name is success.
    fn create(
        &self,
        spec: &ScheduleSpec,
    ) -> impl Future<Output = Result<ScheduleCreated, PortError>> + Send;
    /// Deletes a schedule; a missing one is success.
    fn delete(
        &self,
        name: &ScheduleName,
    ) -> impl Future<Output = Result<ScheduleDeleted, PortError>> + Send;
}

/// Publishes requests to the external service.
pub trait RequestPublisher: Send + Sync {
    fn publish(&self, request: &Request) -> impl Future<Output = Result<(), PortError>> + Send;
}

/// Puts retry events on the retry queue (reconciler and operator).
pub trait RetryPublisher: Send + Sync {
    fn publish(&self, event: &RetryEvent) -> impl Future<Output = Result<(), PortError>> + Send;
}

/// The time, injected so that tests and the simulator control it.
pub trait Clock: Send + Sync {
    fn now(&self) -> Timestamp;
}

/// The machine's clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        let ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
            .unwrap_or(0);
        Timestamp::from_millis(ms)
    }
}

/// A port that a function does not have. Calling it is a wiring bug, reported as a
/// permanent error rather than a panic.
#[derive(Debug, Clone, Copy, Default)]
pub struct Unwired;

impl Scheduler for Unwired {
    async fn create(&self, _: &ScheduleSpec) -> Result<ScheduleCreated, PortError> {
        Err(PortError::permanent(
            "CreateSchedule",
            "no scheduler is wired into this function",
        ))
    }
    async fn delete(&self, _: &ScheduleName) -> Result<ScheduleDeleted, PortError> {
        Err(PortError::permanent(
            "DeleteSchedule",
            "no scheduler is wired into this function",
        ))
    }
}

impl RequestPublisher for Unwired {
    async fn publish(&self, _: &Request) -> Result<(), PortError> {
        Err(PortError::permanent(
            "SendMessage",
            "no request publisher is wired into this function",
        ))
    }
}

impl RetryPublisher for Unwired {
    async fn publish(&self, _: &RetryEvent) -> Result<(), PortError> {
        Err(PortError::permanent(
            "SendMessage",
            "no retry publisher is wired into this function",
        ))
    }
}

// Shared ports: a reference or an `Arc` to a port is the same port, so one adapter
// can serve several functions in one process (the local stack, tests).
macro_rules! delegate_ports {
    ($($wrapper:ty),*) => {$(
        impl<T: StateStore + ?Sized> StateStore for $wrapper {
            fn create(
                &self,
                record: &TransactionRecord,
                payload: &Payload,
            ) -> impl Future<Output = Result<CreateOutcome, PortError>> + Send {
                (**self).create(record, payload)
            }
            fn transition(
                &self,
                write: &Write,
            ) -> impl Future<Output = Result<WriteOutcome, PortError>> + Send {
                (**self).transition(write)
            }
            fn get(
                &self,
                id: &TransactionId,
            ) -> impl Future<Output = Result<Option<TransactionRecord>, PortError>> + Send {
                (**self).get(id)
            }
            fn payload(
                &self,
                id: &TransactionId,
            ) -> impl Future<Output = Result<Option<Payload>, PortError>> + Send {
                (**self).payload(id)
            }
            fn query_stuck(
                &self,
                query: &StuckQuery,
            ) -> impl Future<Output = Result<StuckPage, PortError>> + Send {
                (**self).query_stuck(query)
            }
        }

        impl<T: Scheduler + ?Sized> Scheduler for $wrapper {
            fn create(
                &self,
                spec: &ScheduleSpec,
            ) -> impl Future<Output = Result<ScheduleCreated, PortError>> + Send {
                (**self).create(spec)
            }
            fn delete(
                &self,
                name: &ScheduleName,
            ) -> impl Future<Output = Result<ScheduleDeleted, PortError>> + Send {
                (**self).delete(name)
            }
        }

        impl<T: RequestPublisher + ?Sized> RequestPublisher for $wrapper {
            fn publish(&self, request: &Request) -> impl Future<Output = Result<(), PortError>> + Send {
                (**self).publish(request)
            }
        }

        impl<T: RetryPublisher + ?Sized> RetryPublisher for $wrapper {
            fn publish(&self, event: &RetryEvent) -> impl Future<Output = Result<(), PortError>> + Send {
                (**self).publish(event)
            }
        }

        impl<T: Clock + ?Sized> Clock for $wrapper {
            fn now(&self) -> Timestamp {
                (**self).now()
            }
        }
    )*};
}

delegate_ports!(&T, std::sync::Arc<T>);
