//! Ports: one trait per capability, each as narrow as one kind of call.
//!
//! A function's core is generic over exactly the ports it uses (the bundles of
//! [`crate::exec`]), so a function wired without a port it needs does not compile,
//! and the IAM policy of each Lambda lists exactly the actions behind its ports
//! (`docs/functions.md` maps them). Adapters live elsewhere (`deferred-retry-aws` for
//! AWS, `testkit::memory` in memory); they implement these traits and classify
//! failures into [`PortError`].
//!
//! The traits use `async fn` returning `Send` futures, with no runtime dependency. A
//! reference or an `Arc` to a port is the same port, so one adapter can serve several
//! functions in one process (the local stack, tests).

use crate::audit::AuditEntry;
use crate::decide::ScheduleSpec;
use crate::ids::{ScheduleName, Timestamp, TransactionId};
use crate::machine::{TransactionRecord, Write};
use crate::message::{Payload, Request, RetryEvent};
use std::collections::BTreeMap;
use std::future::Future;
use thiserror::Error;

/// Declares a port: the trait, and the same trait for a reference and an `Arc` to it.
macro_rules! port {
    ($(#[$doc:meta])* pub trait $name:ident {
        $(#[$fdoc:meta])* fn $f:ident(&self $(, $arg:ident: $ty:ty)*) -> $out:ty;
    }) => {
        $(#[$doc])*
        pub trait $name: Send + Sync {
            $(#[$fdoc])*
            fn $f(&self $(, $arg: $ty)*) -> impl Future<Output = $out> + Send;
        }

        impl<T: $name + ?Sized> $name for &T {
            fn $f(&self $(, $arg: $ty)*) -> impl Future<Output = $out> + Send {
                (**self).$f($($arg),*)
            }
        }

        impl<T: $name + ?Sized> $name for std::sync::Arc<T> {
            fn $f(&self $(, $arg: $ty)*) -> impl Future<Output = $out> + Send {
                (**self).$f($($arg),*)
            }
        }
    };
}

/// What the caller must do about a failed port call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// Throttling, 5xx, timeouts: report the record as failed so SQS redelivers.
    Retryable,
    /// Bad input or configuration: retrying cannot help; keep the message for a human.
    Permanent,
}

/// What an operator can act on in a failed call, when the adapter can tell (from
/// the SDK's typed errors); [`Cause::Other`] when nothing more specific is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Cause {
    #[default]
    Other,
    /// The endpoint could not be reached (connection refused, reset, DNS).
    Unreachable,
    /// The call timed out.
    Timeout,
    /// The table, queue or schedule group named does not exist.
    NotFound,
    /// The caller's identity is not allowed the action.
    AccessDenied,
    /// No credentials could be found, or they were refused as invalid.
    Credentials,
    /// The service throttled the call.
    Throttled,
    /// An account quota is used up (e.g. the scheduler's active schedules).
    QuotaExceeded,
}

/// A failed port call, classified by what the caller must do.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{operation}: {message}")]
pub struct PortError {
    pub kind: ErrorKind,
    /// Why, as far as an operator can act on it.
    pub cause: Cause,
    /// The API or port operation that failed (`UpdateItem`, `CreateSchedule`, …).
    pub operation: &'static str,
    pub message: String,
}

impl PortError {
    pub fn retryable(operation: &'static str, message: impl Into<String>) -> Self {
        Self {
            kind: ErrorKind::Retryable,
            cause: Cause::Other,
            operation,
            message: message.into(),
        }
    }

    pub fn permanent(operation: &'static str, message: impl Into<String>) -> Self {
        Self {
            kind: ErrorKind::Permanent,
            cause: Cause::Other,
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
    /// The stored record (boxed: the common outcome, `Created`, carries nothing).
    AlreadyExists {
        record: Box<TransactionRecord>,
        same_payload: bool,
    },
    /// Found existing by a retry of the call (the SDK sent it again after an attempt
    /// that may have applied, its answer lost): possibly the create's own record.
    FoundOnRetry {
        record: Box<TransactionRecord>,
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
    /// The condition failed on a retry of the call (the SDK sent it again after an
    /// attempt that may have applied, its answer lost): the current record may be
    /// the write's own result ([`crate::machine::Write::produced`]).
    ConditionFailedOnRetry(Option<TransactionRecord>),
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
    /// Index entries whose item would not decode: skipped, so one bad item never
    /// fails its page nor blocks its shard (the reconciler reports each).
    pub undecodable: Vec<Undecodable>,
    /// Opaque cursor for the next page of the same query; `None` when done.
    pub next: Option<String>,
}

/// An index entry whose item would not decode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Undecodable {
    /// The item's key as stored (its transaction id, or what stood in its place).
    pub key: String,
    /// What would not decode: names the attribute and the value.
    pub detail: String,
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

port! {
    /// The conditional writes of the state table: one item per transaction, changed
    /// only by an arrow of the machine (`dynamodb:UpdateItem`).
    pub trait Transitions {
        /// One conditional write. A failed condition returns the current record
        /// without a second read.
        fn transition(&self, write: &Write) -> Result<WriteOutcome, PortError>;
    }
}

port! {
    /// Strongly consistent reads of the state table (`dynamodb:GetItem`).
    pub trait Records {
        fn get(&self, id: &TransactionId) -> Result<Option<TransactionRecord>, PortError>;
    }
}

port! {
    /// The conditional create of a transaction and its payload, stored apart and
    /// written once (`dynamodb:PutItem` on both tables in one transaction, and
    /// `dynamodb:GetItem` to compare a repeated start).
    pub trait Creates {
        fn create(
            &self,
            record: &TransactionRecord,
            payload: &Payload
        ) -> Result<CreateOutcome, PortError>;
    }
}

port! {
    /// The stored payloads (`dynamodb:GetItem` on the payloads table).
    pub trait Payloads {
        fn payload(&self, id: &TransactionId) -> Result<Option<Payload>, PortError>;
    }
}

port! {
    /// The reconciler index (`dynamodb:Query` on the index, `dynamodb:GetItem`).
    pub trait StuckIndex {
        /// The current records (strongly consistent reads) of the index entries on
        /// `query.shard` whose sort key (the cycle's fire time) is before
        /// `query.before` (a Query on the sparse, sharded index, never a Scan). A
        /// record that left the index between the query and the read is not returned.
        fn query_stuck(&self, query: &StuckQuery) -> Result<StuckPage, PortError>;
    }
}

port! {
    /// Creates one-time schedules (`scheduler:CreateSchedule`, `iam:PassRole`).
    pub trait ScheduleCreator {
        /// Creates a one-time schedule; an existing one with the same name is success.
        fn create(&self, spec: &ScheduleSpec) -> Result<ScheduleCreated, PortError>;
    }
}

port! {
    /// Deletes schedules (`scheduler:DeleteSchedule`).
    pub trait ScheduleDeleter {
        /// Deletes a schedule; a missing one is success.
        fn delete(&self, name: &ScheduleName) -> Result<ScheduleDeleted, PortError>;
    }
}

port! {
    /// Publishes requests to the external service (`sqs:SendMessage` to the request
    /// queue).
    pub trait RequestPublisher {
        fn publish(&self, request: &Request) -> Result<(), PortError>;
    }
}

port! {
    /// Puts retry events on the retry queue (`sqs:SendMessage`), delivered
    /// `delay_seconds` later (0 to 900): the reconciler's requeue and the operator's
    /// replay at once, the retry handler's event held by the breaker later.
    pub trait RetryPublisher {
        fn publish(&self, event: &RetryEvent, delay_seconds: u32) -> Result<(), PortError>;
    }
}

port! {
    /// Appends an audit entry that is not a transition (a [`crate::audit::Notice`];
    /// `dynamodb:UpdateItem` on the audit table). Transitions reach the audit trail
    /// from the state table's stream, not through this port.
    pub trait AuditNotes {
        fn note(&self, entry: &AuditEntry) -> Result<(), PortError>;
    }
}

/// The breaker as read: the item and the sliding window's counts at the instant read.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct BreakerView {
    pub breaker: crate::breaker::Breaker,
    pub window: crate::breaker::Tally,
}

port! {
    /// Reads the breaker item (`dynamodb:GetItem` on the breaker table) and, when
    /// `window` is asked for, the window's counts at `now` (`dynamodb:Query`);
    /// otherwise the view's window is empty.
    pub trait BreakerReads {
        fn load(&self, now: Timestamp, window: bool) -> Result<BreakerView, PortError>;
    }
}

/// Who changed the breaker, when and why: one entry of the breaker's change log.
#[derive(Debug, Clone, PartialEq)]
pub struct BreakerNote {
    pub at: Timestamp,
    /// The function, or the operator's ARN.
    pub by: String,
    pub change: crate::breaker::Change,
    /// An operator's `--reason`.
    pub reason: Option<String>,
}

port! {
    /// Writes the breaker item, conditional on the version read, with its change-log
    /// entry in the same transaction (`dynamodb:PutItem` twice, in
    /// `dynamodb:TransactWriteItems`).
    pub trait BreakerWrites {
        /// `Ok(false)`: the item moved on since `read` (another writer won); nothing
        /// was written.
        fn save(
            &self,
            read: &crate::breaker::Breaker,
            new: &crate::breaker::Breaker,
            note: &BreakerNote
        ) -> Result<bool, PortError>;
    }
}

port! {
    /// Adds counts to a bucket of the window (`dynamodb:UpdateItem` with ADD: no
    /// condition, so concurrent writers never conflict).
    pub trait BreakerCounts {
        fn count(&self, at: Timestamp, tally: &crate::breaker::Tally) -> Result<(), PortError>;
    }
}

/// One attribute of a received message, as it came.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageAttribute {
    /// `String`, `Number`, `Binary`, with any custom suffix (`Number.int`).
    pub data_type: String,
    pub string_value: Option<String>,
    pub binary_value: Option<Vec<u8>>,
}

/// A received message that can never succeed, kept for a human exactly as it came.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Undeliverable {
    pub body: String,
    pub attributes: BTreeMap<String, MessageAttribute>,
}

port! {
    /// Keeps a permanently failing message, body and attributes unchanged, in the
    /// consumed queue's dead-letter queue (`sqs:SendMessage`).
    pub trait DeadLetter {
        fn send(&self, message: &Undeliverable) -> Result<(), PortError>;
    }
}

/// The time, injected so that tests and the simulator control it.
pub trait Clock: Send + Sync {
    fn now(&self) -> Timestamp;
}

impl<T: Clock + ?Sized> Clock for &T {
    fn now(&self) -> Timestamp {
        (**self).now()
    }
}

impl<T: Clock + ?Sized> Clock for std::sync::Arc<T> {
    fn now(&self) -> Timestamp {
        (**self).now()
    }
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
