//! Errors of `retryctl`, each with the exit code scripts can rely on.

use thiserror::Error;

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
    /// The demo found lost, duplicated or stuck transactions. Exit 5.
    #[error("{0}")]
    DemoFailed(String),
    /// `retryctl verify` found a failed check (the report says which). Exit 6.
    #[error("{0}")]
    VerifyFailed(String),
    /// Ctrl-C: everything started was stopped. Exit 130.
    #[error("interrupted: the local stack was stopped")]
    Interrupted,
}

impl CliError {
    pub fn exit_code(&self) -> i32 {
        match self {
            CliError::Aws(_) => 1,
            CliError::BadArgument { .. } | CliError::Missing(_) => 2,
            CliError::UnknownTransaction(_) => 3,
            CliError::Refused(_) => 4,
            CliError::DemoFailed(_) => 5,
            CliError::VerifyFailed(_) => 6,
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
            CliError::DemoFailed(_) => "demo-failed",
            CliError::VerifyFailed(_) => "verify-failed",
            CliError::Interrupted => "interrupted",
        }
    }
}

impl From<domain::ports::PortError> for CliError {
    fn from(e: domain::ports::PortError) -> Self {
        CliError::Aws(e.to_string())
    }
}
