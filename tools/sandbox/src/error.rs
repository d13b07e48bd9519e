//! Errors of the local stack and the demo. `retryctl` turns each into its own error
//! of the same kind (same message, same exit code).

use domain::ports::PortError;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum Error {
    /// A flag or setting has a value that cannot be used.
    #[error("invalid value for {name}: `{value}`: {reason}")]
    BadArgument {
        name: &'static str,
        value: String,
        reason: String,
    },
    /// A setting the local stack needs is missing or unusable.
    #[error("{0}")]
    Missing(String),
    /// An AWS call to the local stack failed.
    #[error("{0}")]
    Aws(String),
    /// An AWS call failed, classified, naming the table or stack it was about.
    #[error("{error} (`{resource}`)")]
    AwsCall { resource: String, error: PortError },
    /// Ctrl-C: everything started was stopped.
    #[error("interrupted: the local stack was stopped")]
    Interrupted,
}

impl Error {
    pub fn bad(name: &'static str, value: impl Into<String>, reason: impl ToString) -> Self {
        Error::BadArgument {
            name,
            value: value.into(),
            reason: reason.to_string(),
        }
    }

    /// A failed call, classified by [`aws::errors::classify`], about `resource`.
    pub fn call(resource: &str, error: PortError) -> Self {
        Error::AwsCall {
            resource: resource.to_owned(),
            error,
        }
    }
}
