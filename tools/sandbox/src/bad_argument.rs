//! A flag or setting whose value cannot be used, as the sandbox and `retryctl` report
//! it (`retryctl` exits 2). One file, compiled into both crates: the operator build of
//! `retryctl` links no sandbox, so it takes this file by path.

use thiserror::Error;

/// `invalid value for NAME: `VALUE`: REASON`.
#[derive(Debug, Error)]
#[error("invalid value for {name}: `{value}`: {reason}")]
pub struct BadArgument {
    pub name: &'static str,
    pub value: String,
    pub reason: String,
}

impl BadArgument {
    pub fn new(name: &'static str, value: impl Into<String>, reason: impl ToString) -> Self {
        BadArgument {
            name,
            value: value.into(),
            reason: reason.to_string(),
        }
    }
}
