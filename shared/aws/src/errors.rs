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

use aws_credential_types::provider::error::CredentialsError;
use aws_sdk_dynamodb::config::http::HttpResponse;
use aws_sdk_dynamodb::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use domain::ports::{Cause, ErrorKind, PortError};

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
    E: std::error::Error + ProvideErrorMetadata + Send + Sync + 'static,
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
        cause: cause(err),
        operation,
        message: DisplayErrorContext(err).to_string(),
    }
}

/// The answer of a call where one modeled error means its effect is already there (a
/// retry meeting the call's own result): `done` on success, `already` on an error
/// `is_already` names, else the error classified as [`classify`] does.
pub fn settled<T, O, E>(
    operation: &'static str,
    result: Result<O, SdkError<E, HttpResponse>>,
    (done, already): (T, T),
    is_already: impl FnOnce(&E) -> bool,
    typed: impl FnOnce(&E) -> Option<ErrorKind>,
) -> Result<T, PortError>
where
    E: std::error::Error + ProvideErrorMetadata + Send + Sync + 'static,
{
    match result {
        Ok(_) => Ok(done),
        Err(e) if e.as_service_error().is_some_and(is_already) => Ok(already),
        Err(e) => Err(classify(operation, &e, typed)),
    }
}

/// A `map_err` adapter for a failed SDK call whose caller only reports it:
/// `"<what>: <the error and all its sources>"`.
pub fn sdk_error<E: std::error::Error>(what: impl std::fmt::Display) -> impl FnOnce(E) -> String {
    move |e| format!("{what}: {}", DisplayErrorContext(e))
}

/// Defines `fn name(e: &OpError) -> Option<ErrorKind>` for [`classify`]: the variants
/// listed as retryable or permanent, `None` (the HTTP status decides) for the rest.
/// `dynamodb` counts DynamoDB's throttling and internal-error variants as retryable.
macro_rules! error_kinds {
    (dynamodb $(#[$m:meta])* $vis:vis fn $name:ident($e:ident) {
        retryable: [$($r:ident),* $(,)?], permanent: [$($p:ident),* $(,)?] $(,)?
    }) => {
        $crate::errors::error_kinds!($(#[$m])* $vis fn $name($e) {
            retryable: [
                ProvisionedThroughputExceededException, RequestLimitExceeded,
                ThrottlingException, InternalServerError $(, $r)*
            ],
            permanent: [$($p),*],
        });
    };
    ($(#[$m:meta])* $vis:vis fn $name:ident($e:ident) {
        retryable: [$($r:ident),* $(,)?], permanent: [$($p:ident),* $(,)?] $(,)?
    }) => {
        $(#[$m])*
        $vis fn $name(e: &$e) -> Option<::domain::ports::ErrorKind> {
            match e {
                $($e::$r(_) => Some(::domain::ports::ErrorKind::Retryable),)*
                $($e::$p(_) => Some(::domain::ports::ErrorKind::Permanent),)*
                _ => None,
            }
        }
    };
}
pub(crate) use error_kinds;

/// Error codes that name a missing resource, across DynamoDB, SQS and Scheduler.
const NOT_FOUND: &[&str] = &[
    "ResourceNotFoundException",
    "QueueDoesNotExist",
    "AWS.SimpleQueueService.NonExistentQueue",
];

/// Error codes of a refused identity or signature.
const CREDENTIALS: &[&str] = &[
    "UnrecognizedClientException",
    "InvalidClientTokenId",
    "InvalidSignatureException",
    "SignatureDoesNotMatch",
    "ExpiredTokenException",
    "MissingAuthenticationToken",
];

/// Error codes of throttling.
const THROTTLED: &[&str] = &[
    "ThrottlingException",
    "Throttling",
    "RequestThrottled",
    "ProvisionedThroughputExceededException",
    "RequestLimitExceeded",
];

/// Error codes of a used-up account quota.
const QUOTA: &[&str] = &["ServiceQuotaExceededException", "LimitExceededException"];

/// What an operator can act on: from the failure class, the modeled error code, the
/// HTTP status, and for a request never sent, the typed source (missing credentials).
pub fn cause<E>(err: &SdkError<E, HttpResponse>) -> Cause
where
    E: std::error::Error + ProvideErrorMetadata + 'static,
{
    match err {
        SdkError::TimeoutError(_) => Cause::Timeout,
        SdkError::DispatchFailure(d) if d.is_timeout() => Cause::Timeout,
        SdkError::DispatchFailure(d) if d.is_io() => Cause::Unreachable,
        SdkError::ServiceError(ctx) => {
            let code = ctx.err().code().unwrap_or_default();
            let status = ctx.raw().status().as_u16();
            if NOT_FOUND.contains(&code) {
                Cause::NotFound
            } else if CREDENTIALS.contains(&code) {
                Cause::Credentials
            } else if THROTTLED.contains(&code) || status == 429 {
                Cause::Throttled
            } else if QUOTA.contains(&code) {
                Cause::QuotaExceeded
            } else if code.starts_with("AccessDenied") || status == 403 {
                Cause::AccessDenied
            } else {
                Cause::Other
            }
        }
        _ if credentials_missing(err) => Cause::Credentials,
        _ => Cause::Other,
    }
}

/// True when a credentials error is somewhere in the error's source chain.
fn credentials_missing(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(err);
    while let Some(e) = next {
        if e.downcast_ref::<CredentialsError>().is_some() {
            return true;
        }
        next = e.source();
    }
    false
}
