//! Errors of `retryctl`, each with the exit code scripts can rely on.

use domain::ports::{Cause, PortError};
use std::fmt;
use thiserror::Error;

/// A failed AWS call, classified by what the operator can do about it: one line, a
/// hint, and the SDK's detail for `--verbose`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AwsFailure {
    /// The API operation (`GetItem`, `GetQueueUrl`, …).
    pub operation: String,
    /// The table or queue the call was about, when the caller knows it.
    pub resource: Option<String>,
    pub cause: Cause,
    /// The SDK's whole account of the failure.
    pub detail: String,
    /// What to check, naming the flag or variable that sets it.
    pub hint: Option<String>,
}

impl AwsFailure {
    /// The failure in one line, without the SDK's detail.
    pub fn summary(&self) -> String {
        let op = match &self.resource {
            Some(r) => format!("{} `{r}`", self.operation),
            None => self.operation.clone(),
        };
        match self.cause {
            Cause::Unreachable => format!("{op}: cannot reach the AWS endpoint"),
            Cause::Timeout => format!("{op}: the call timed out"),
            Cause::NotFound => format!("{op}: the table or queue named does not exist"),
            Cause::AccessDenied => {
                format!("{op}: access denied: the caller's identity is not allowed this action")
            }
            Cause::Credentials => {
                format!("{op}: no usable AWS credentials (none found, or refused)")
            }
            Cause::Throttled => format!("{op}: throttled by AWS"),
            Cause::QuotaExceeded => format!("{op}: an AWS account quota is used up"),
            Cause::Other => {
                let first = self.detail.lines().next().unwrap_or_default();
                let short: String = first.chars().take(240).collect();
                if short.len() < first.len() {
                    format!("{op}: {short}…")
                } else {
                    format!("{op}: {short}")
                }
            }
        }
    }

    /// The JSON error kind for this cause.
    pub fn kind(&self) -> &'static str {
        match self.cause {
            Cause::Unreachable => "aws-unreachable",
            Cause::Timeout => "aws-timeout",
            Cause::NotFound => "aws-not-found",
            Cause::AccessDenied => "aws-access-denied",
            Cause::Credentials => "aws-credentials",
            Cause::Throttled => "aws-throttled",
            Cause::QuotaExceeded => "aws-quota-exceeded",
            Cause::Other => "aws",
        }
    }
}

impl fmt::Display for AwsFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.summary())?;
        if let Some(h) = &self.hint {
            write!(f, "\n  hint: {h}")?;
        }
        Ok(())
    }
}

#[derive(Debug, Error)]
pub enum CliError {
    /// An argument or setting has a value that cannot be used. Exit 2.
    #[error("invalid value for {name}: `{value}`: {reason}")]
    BadArgument {
        name: &'static str,
        value: String,
        reason: String,
    },
    /// A setting the command needs is missing. Exit 2.
    #[error("{0}")]
    Missing(String),
    /// No such transaction. Exit 3.
    #[error("unknown transaction `{0}`: no such item in the state table")]
    UnknownTransaction(String),
    /// The domain refused the operation in the transaction's current state. Exit 4.
    #[error("{0}")]
    Refused(String),
    /// An AWS call failed (retrying may help). Exit 1.
    #[error("{0}")]
    Aws(String),
    /// An AWS call failed, classified (endpoint, missing resource, access, credentials).
    /// Exit 1.
    #[error("{0}")]
    AwsCall(AwsFailure),
    /// The demo found lost, duplicated or stuck transactions. Exit 5.
    #[error("{0}")]
    DemoFailed(String),
    /// `retryctl verify` found a failed check (the report says which). Exit 6.
    #[error("{0}")]
    VerifyFailed(String),
    /// `retryctl loadtest` refused a stack that is not known to answer through the
    /// staging harness (its outputs not given, another stack's harness, or a real
    /// service connected): nothing was started. Exit 7.
    #[error("{0}")]
    NotStaging(String),
    /// `retryctl loadtest` ran, but a transaction did not end as its script says, was
    /// still in flight at the ceiling, or a DLQ holds messages (the report says
    /// which). Exit 8.
    #[error("{0}")]
    LoadtestShort(String),
    /// Some of the transactions of a bulk `replay`/`resolve` failed (their lines say
    /// which and why): the exit code of the first that failed (1, 3 or 4).
    #[error("{message}")]
    SomeFailed { code: i32, message: String },
    /// Ctrl-C: everything started was stopped. Exit 130.
    #[error("interrupted: the local stack was stopped")]
    Interrupted,
}

impl CliError {
    pub fn exit_code(&self) -> i32 {
        match self {
            CliError::Aws(_) | CliError::AwsCall(_) => 1,
            CliError::BadArgument { .. } | CliError::Missing(_) => 2,
            CliError::UnknownTransaction(_) => 3,
            CliError::Refused(_) => 4,
            CliError::DemoFailed(_) => 5,
            CliError::VerifyFailed(_) => 6,
            CliError::NotStaging(_) => 7,
            CliError::LoadtestShort(_) => 8,
            CliError::SomeFailed { code, .. } => *code,
            CliError::Interrupted => 130,
        }
    }

    pub fn bad(name: &'static str, value: impl Into<String>, reason: impl ToString) -> Self {
        CliError::BadArgument {
            name,
            value: value.into(),
            reason: reason.to_string(),
        }
    }

    /// A short machine-readable kind for `--json` error output.
    pub fn kind(&self) -> &'static str {
        match self {
            CliError::BadArgument { .. } => "bad-argument",
            CliError::Missing(_) => "missing-setting",
            CliError::UnknownTransaction(_) => "unknown-transaction",
            CliError::Refused(_) => "refused",
            CliError::Aws(_) => "aws",
            CliError::AwsCall(a) => a.kind(),
            CliError::DemoFailed(_) => "demo-failed",
            CliError::VerifyFailed(_) => "verify-failed",
            CliError::NotStaging(_) => "not-staging",
            CliError::LoadtestShort(_) => "loadtest-short",
            CliError::SomeFailed { .. } => "some-failed",
            CliError::Interrupted => "interrupted",
        }
    }
}

impl From<PortError> for AwsFailure {
    fn from(e: PortError) -> Self {
        AwsFailure {
            operation: e.operation.to_owned(),
            resource: None,
            cause: e.cause,
            detail: e.message,
            hint: None,
        }
    }
}

impl From<PortError> for CliError {
    fn from(e: PortError) -> Self {
        CliError::AwsCall(e.into())
    }
}

/// The local stack's and the demo's errors, as the same kinds of `retryctl` error.
#[cfg(feature = "demo")]
impl From<sandbox::Error> for CliError {
    fn from(e: sandbox::Error) -> Self {
        match e {
            sandbox::Error::BadArgument {
                name,
                value,
                reason,
            } => CliError::BadArgument {
                name,
                value,
                reason,
            },
            sandbox::Error::Missing(m) => CliError::Missing(m),
            sandbox::Error::Aws(m) => CliError::Aws(m),
            sandbox::Error::AwsCall { resource, error } => CliError::AwsCall(AwsFailure {
                resource: Some(resource),
                ..error.into()
            }),
            sandbox::Error::Interrupted => CliError::Interrupted,
        }
    }
}

/// A failed SDK call, classified ([`aws::errors::classify`]), naming the resource it
/// was about.
pub fn sdk_error<E>(
    operation: &'static str,
    resource: &str,
    e: aws_sdk_dynamodb::error::SdkError<E, aws_sdk_dynamodb::config::http::HttpResponse>,
) -> CliError
where
    E: std::error::Error + aws_sdk_dynamodb::error::ProvideErrorMetadata + Send + Sync + 'static,
{
    CliError::AwsCall(AwsFailure {
        resource: Some(resource.to_owned()),
        ..aws::errors::classify(operation, &e, |_| None).into()
    })
}

/// Where the command looked: what a hint names.
#[derive(Debug, Clone, Default)]
pub struct Whereabouts {
    /// `--endpoint-url` / `AWS_ENDPOINT_URL`, when set.
    pub endpoint: Option<String>,
    /// `--prefix` / `RETRYCTL_PREFIX`, when set.
    pub prefix: Option<String>,
    /// The names in use, each with the flag that sets it (`("--transactions-table", "t")`).
    pub names: Vec<(&'static str, String)>,
}

impl CliError {
    /// Adds the hint for a classified AWS failure: which flag or variable to check.
    pub fn with_hint(self, w: &Whereabouts) -> Self {
        let CliError::AwsCall(mut a) = self else {
            return self;
        };
        a.hint = hint(&a, w);
        CliError::AwsCall(a)
    }

    /// Refuses a value of `name` that is not an http:// or https:// URL.
    pub fn require_url(name: &'static str, value: &str, what: &str) -> Result<(), Self> {
        if value.starts_with("http://") || value.starts_with("https://") {
            Ok(())
        } else {
            Err(Self::bad(
                name,
                value,
                format!("must be an http:// or https:// URL{what}"),
            ))
        }
    }

    /// The SDK's detail, for `--verbose`.
    pub fn detail(&self) -> Option<&str> {
        match self {
            CliError::AwsCall(a) => Some(&a.detail),
            _ => None,
        }
    }
}

fn hint(a: &AwsFailure, w: &Whereabouts) -> Option<String> {
    let names = || {
        let listed: Vec<String> = w
            .names
            .iter()
            .map(|(flag, name)| format!("{flag} `{name}`"))
            .collect();
        if listed.is_empty() {
            String::new()
        } else {
            format!(" (in use: {})", listed.join(", "))
        }
    };
    Some(match a.cause {
        Cause::Unreachable | Cause::Timeout => match &w.endpoint {
            Some(e) => format!(
                "nothing answers at --endpoint-url `{e}` (or AWS_ENDPOINT_URL): is the local stack (`retryctl demo --keep`) still running, and is the port right?"
            ),
            None => "the AWS endpoint of --region (or AWS_REGION) did not answer: check the network, or set --endpoint-url for a local stack".to_owned(),
        },
        Cause::NotFound => match &w.prefix {
            Some(p) => format!(
                "the names come from --prefix `{p}` (or RETRYCTL_PREFIX){}: check the prefix the local stack printed",
                names()
            ),
            None => format!(
                "check the names against the stack's outputs (--transactions-table, --payloads-table, --audit-table, --*-queue-url, --schedule-group){}, and --region",
                names()
            ),
        },
        Cause::AccessDenied => format!(
            "the identity running retryctl needs the permission for `{}` on that resource",
            a.operation
        ),
        Cause::Credentials => "set AWS_PROFILE, or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (a local stack accepts any values, e.g. `testing`)".to_owned(),
        Cause::Throttled => "AWS is throttling this account: retry in a moment".to_owned(),
        Cause::QuotaExceeded => "an account quota is used up (Service Quotas console): wait for it to free up or raise it".to_owned(),
        Cause::Other => return None,
    })
}
