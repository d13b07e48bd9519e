//! Classification of SDK failures into what the caller must do, from the SDK's typed
//! errors (operation error variants, the HTTP status and
//! the failure class of `SdkError`) — never by matching message text.
//!
//! - timeouts, dispatch failures (connection refused/reset), unreadable responses,
//!   throttling variants, HTTP 429 and 5xx → [`ErrorKind::Retryable`];
//! - everything else (validation, missing resources, access denied, a request that
//!   could not be built) → [`ErrorKind::Permanent`].
//!
//! A failed `ConditionExpression` is not an error at all: the store turns it into
//! `WriteOutcome::ConditionFailed(current record)` before classification.

use aws_sdk_dynamodb::config::http::HttpResponse;
use aws_sdk_dynamodb::error::{DisplayErrorContext, SdkError};
use domain::ports::{ErrorKind, PortError};

/// The kind of an HTTP status when nothing more specific is known.
pub fn kind_of_status(status: u16) -> ErrorKind {
    if status == 429 || status >= 500 {
        ErrorKind::Retryable
    } else {
        ErrorKind::Permanent
    }
}

/// Classifies an SDK error. `typed` maps the operation's modeled error variants
/// (e.g. `ThrottlingException` → Retryable); when it says nothing, the HTTP status
/// decides.
pub fn classify<E>(
    operation: &'static str,
    err: &SdkError<E, HttpResponse>,
    typed: impl FnOnce(&E) -> Option<ErrorKind>,
) -> PortError
where
    E: std::error::Error + Send + Sync + 'static,
{
    let kind = match err {
        SdkError::ConstructionFailure(_) => ErrorKind::Permanent,
        SdkError::TimeoutError(_) | SdkError::DispatchFailure(_) | SdkError::ResponseError(_) => {
            ErrorKind::Retryable
        }
        SdkError::ServiceError(ctx) => {
            typed(ctx.err()).unwrap_or_else(|| kind_of_status(ctx.raw().status().as_u16()))
        }
        // Future failure classes: assume transient, SQS will redeliver.
        _ => ErrorKind::Retryable,
    };
    PortError {
        kind,
        operation,
        message: DisplayErrorContext(err).to_string(),
    }
}
