//! The deployment settings the cost model depends on, read from `template.yaml`'s
//! parameter defaults (so the figures follow the configuration, never a copy of it).

use serde_yaml::Value;
use std::path::Path;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum TemplateError {
    #[error("reading {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("parsing {path}: {source}")]
    Parse {
        path: String,
        source: serde_yaml::Error,
    },
    #[error("template parameter `{0}` has no usable Default")]
    Missing(&'static str),
}

/// The template's defaults the benchmark uses.
#[derive(Debug, Clone, PartialEq)]
pub struct Deployment {
    /// `arm64` or `x86_64`.
    pub architecture: String,
    pub memory_mb: u32,
    pub response_batch_size: u32,
    pub retry_batch_size: u32,
    pub audit_batch_size: u32,
    pub retry_max_concurrency: u32,
    pub response_max_concurrency: u32,
    /// Per execution environment.
    pub max_requests_per_second: f64,
    pub backoff_base_seconds: f64,
    /// How often an execution environment re-reads the circuit breaker (s).
    pub breaker_refresh_seconds: f64,
}

impl Deployment {
    /// MaximumConcurrency × MAX_REQUESTS_PER_SECOND.
    pub fn fleet_rate_bound(&self) -> f64 {
        f64::from(self.retry_max_concurrency) * self.max_requests_per_second
    }

    pub fn memory_gb(&self) -> f64 {
        f64::from(self.memory_mb) / 1024.0
    }

    pub fn load(path: &Path) -> Result<Self, TemplateError> {
        let text = std::fs::read_to_string(path).map_err(|source| TemplateError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::parse(&text).map_err(|e| match e {
            TemplateError::Parse { source, .. } => TemplateError::Parse {
                path: path.display().to_string(),
                source,
            },
            other => other,
        })
    }

    pub fn parse(text: &str) -> Result<Self, TemplateError> {
        let doc: Value = serde_yaml::from_str(text).map_err(|source| TemplateError::Parse {
            path: "template".into(),
            source,
        })?;
        let default = |name: &'static str| parameter_default(&doc, name);
        let num = |name: &'static str| -> Result<f64, TemplateError> {
            default(name)?
                .trim()
                .parse::<f64>()
                .map_err(|_| TemplateError::Missing(name))
        };
        let int = |name: &'static str| -> Result<u32, TemplateError> {
            default(name)?
                .trim()
                .parse::<u32>()
                .map_err(|_| TemplateError::Missing(name))
        };
        Ok(Self {
            architecture: default("Architecture")?,
            memory_mb: int("FunctionMemorySize")?,
            response_batch_size: int("ResponseBatchSize")?,
            retry_batch_size: int("RetryBatchSize")?,
            audit_batch_size: int("AuditBatchSize")?,
            retry_max_concurrency: int("RetryHandlerMaxConcurrency")?,
            response_max_concurrency: int("ResponseHandlerMaxConcurrency")?,
            max_requests_per_second: num("MaxRequestsPerSecond")?,
            backoff_base_seconds: num("BackoffBaseSeconds")?,
            breaker_refresh_seconds: num("BreakerRefreshSeconds")?,
        })
    }
}

/// A parameter's `Default` as text (a number as written).
pub fn parameter_default(doc: &Value, name: &'static str) -> Result<String, TemplateError> {
    let v = doc
        .get("Parameters")
        .and_then(|p| p.get(name))
        .and_then(|p| p.get("Default"))
        .ok_or(TemplateError::Missing(name))?;
    match v {
        Value::String(s) => Ok(s.clone()),
        Value::Number(n) => Ok(n.to_string()),
        _ => Err(TemplateError::Missing(name)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_defaults() {
        let t = r#"
Parameters:
  Architecture: {Type: String, Default: arm64}
  FunctionMemorySize: {Type: Number, Default: 256}
  ResponseBatchSize: {Type: Number, Default: 10}
  RetryBatchSize: {Type: Number, Default: 10}
  AuditBatchSize: {Type: Number, Default: 100}
  RetryHandlerMaxConcurrency: {Type: Number, Default: 2}
  ResponseHandlerMaxConcurrency: {Type: Number, Default: 5}
  MaxRequestsPerSecond: {Type: Number, Default: 5}
  BackoffBaseSeconds: {Type: Number, Default: 7200}
  BreakerRefreshSeconds: {Type: Number, Default: 5}
Resources:
  X: {Type: AWS::SQS::Queue, Properties: {QueueName: !Ref Architecture}}
"#;
        let d = Deployment::parse(t).unwrap();
        assert_eq!(d.architecture, "arm64");
        assert_eq!(d.memory_mb, 256);
        assert_eq!(d.fleet_rate_bound(), 10.0);
        assert_eq!(d.response_max_concurrency, 5);
        assert_eq!(d.breaker_refresh_seconds, 5.0);
        assert!(Deployment::parse("Parameters: {}").is_err());
    }
}
