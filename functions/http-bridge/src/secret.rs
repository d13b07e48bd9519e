//! The auth header's value: read from AWS Secrets Manager (a secret ARN) or SSM
//! Parameter Store (a parameter ARN or name, decrypted), once per execution
//! environment, and read again only after the endpoint refused it (401, 403: the
//! secret may have been rotated). The value is never logged: [`Secret`]'s `Debug`
//! and `Display` print a placeholder.

use std::fmt;
use std::future::Future;
use tokio::sync::Mutex;

/// A secret value.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The value, for the header only.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

/// Where the value is kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecretRef {
    /// `arn:<partition>:secretsmanager:…`: `GetSecretValue`, its `SecretString`.
    SecretsManager(String),
    /// `arn:<partition>:ssm:…:parameter/…` or a parameter name: `GetParameter`
    /// with decryption.
    Parameter(String),
}

impl SecretRef {
    /// `HTTP_AUTH_SECRET`: empty is no auth header.
    pub fn parse(raw: &str) -> Result<Option<Self>, String> {
        let raw = raw.trim();
        if raw.is_empty() {
            return Ok(None);
        }
        if raw.starts_with("arn:") {
            return match raw.split(':').nth(2) {
                Some("secretsmanager") => Ok(Some(Self::SecretsManager(raw.to_owned()))),
                Some("ssm") if raw.contains(":parameter/") => {
                    Ok(Some(Self::Parameter(raw.to_owned())))
                }
                _ => Err(
                    "must be a Secrets Manager secret ARN, an SSM parameter ARN or a parameter name"
                        .into(),
                ),
            };
        }
        if raw.chars().any(char::is_whitespace) {
            return Err("a parameter name has no white space".into());
        }
        Ok(Some(Self::Parameter(raw.to_owned())))
    }

    /// The name the logs and errors use (an ARN or a name, never the value).
    pub fn id(&self) -> &str {
        match self {
            Self::SecretsManager(id) | Self::Parameter(id) => id,
        }
    }
}

/// Reads the value.
pub trait SecretSource: Send + Sync {
    /// The value, or why it cannot be read.
    fn read(&self) -> impl Future<Output = Result<Secret, String>> + Send;
    /// What is read (for errors).
    fn id(&self) -> &str;
}

/// The AWS reader of a [`SecretRef`].
#[derive(Debug, Clone)]
pub struct AwsSecret {
    pub reference: SecretRef,
    pub secrets: aws_sdk_secretsmanager::Client,
    pub parameters: aws_sdk_ssm::Client,
}

impl SecretSource for AwsSecret {
    async fn read(&self) -> Result<Secret, String> {
        match &self.reference {
            SecretRef::SecretsManager(id) => {
                let out = self
                    .secrets
                    .get_secret_value()
                    .secret_id(id)
                    .send()
                    .await
                    .map_err(aws::errors::sdk_error("GetSecretValue"))?;
                out.secret_string()
                    .map(Secret::new)
                    .ok_or_else(|| "GetSecretValue: the secret has no SecretString".to_owned())
            }
            SecretRef::Parameter(name) => {
                let out = self
                    .parameters
                    .get_parameter()
                    .name(name)
                    .with_decryption(true)
                    .send()
                    .await
                    .map_err(aws::errors::sdk_error("GetParameter"))?;
                out.parameter()
                    .and_then(|p| p.value())
                    .map(Secret::new)
                    .ok_or_else(|| "GetParameter: the parameter has no value".to_owned())
            }
        }
    }

    fn id(&self) -> &str {
        self.reference.id()
    }
}

/// A source read once per execution environment: a failed read is not kept (the
/// next record reads again), a refused value is forgotten.
#[derive(Debug)]
pub struct Cached<S> {
    source: S,
    value: Mutex<Option<Secret>>,
}

impl<S: SecretSource> Cached<S> {
    pub fn new(source: S) -> Self {
        Self {
            source,
            value: Mutex::new(None),
        }
    }

    /// The value, read on first use.
    pub async fn get(&self) -> Result<Secret, String> {
        let mut value = self.value.lock().await;
        if let Some(v) = value.as_ref() {
            return Ok(v.clone());
        }
        let read = self
            .source
            .read()
            .await
            .map_err(|e| format!("the auth secret {} cannot be read: {e}", self.source.id()))?;
        *value = Some(read.clone());
        Ok(read)
    }

    /// What is read.
    pub fn source(&self) -> &S {
        &self.source
    }

    /// Drops the kept value: the next call reads it again.
    pub async fn forget(&self) {
        *self.value.lock().await = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[test]
    fn references_by_arn_or_name() {
        let sm = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:pay-AbCdEf";
        assert_eq!(
            SecretRef::parse(sm),
            Ok(Some(SecretRef::SecretsManager(sm.into())))
        );
        let p = "arn:aws-us-gov:ssm:us-gov-west-1:1:parameter/pay/token";
        assert_eq!(
            SecretRef::parse(p),
            Ok(Some(SecretRef::Parameter(p.into())))
        );
        assert_eq!(
            SecretRef::parse("/pay/token"),
            Ok(Some(SecretRef::Parameter("/pay/token".into())))
        );
        assert_eq!(SecretRef::parse("  "), Ok(None));
        assert!(SecretRef::parse("arn:aws:s3:::bucket/key").is_err());
        assert!(SecretRef::parse("arn:aws:ssm:eu-west-1:1:document/x").is_err());
        assert!(SecretRef::parse("two words").is_err());
    }

    #[test]
    fn a_secret_never_prints_its_value() {
        let s = Secret::new("Bearer hunter2");
        assert_eq!(format!("{s:?} {s}"), "Secret(***) ***");
        assert_eq!(s.expose(), "Bearer hunter2");
    }

    struct Counting(AtomicU32, bool);

    impl SecretSource for Counting {
        async fn read(&self) -> Result<Secret, String> {
            let n = self.0.fetch_add(1, Ordering::SeqCst) + 1;
            if self.1 {
                Err("AccessDeniedException".into())
            } else {
                Ok(Secret::new(format!("v{n}")))
            }
        }
        fn id(&self) -> &str {
            "/pay/token"
        }
    }

    #[tokio::test]
    async fn read_once_until_forgotten_and_failures_not_kept() {
        let c = Cached::new(Counting(AtomicU32::new(0), false));
        assert_eq!(c.get().await.unwrap().expose(), "v1");
        assert_eq!(c.get().await.unwrap().expose(), "v1");
        c.forget().await;
        assert_eq!(c.get().await.unwrap().expose(), "v2");
        let failing = Cached::new(Counting(AtomicU32::new(0), true));
        let e = failing.get().await.unwrap_err();
        assert_eq!(
            e,
            "the auth secret /pay/token cannot be read: AccessDeniedException"
        );
        assert!(failing.get().await.is_err());
        assert_eq!(failing.source.0.load(Ordering::SeqCst), 2);
    }
}
