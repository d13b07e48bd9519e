//! The harness function's configuration, read once from the environment
//! (`infra/template.yaml` sets every variable; `tests/template.rs` compares the two).

use crate::rules::{Behaviour, Latency, Mix};
use aws::config::vars;
use aws::config::ConfigError;
use std::str::FromStr;

/// Defaults of the optional variables (the template's parameter defaults may differ).
pub mod defaults {
    pub const MIX: &str = "SUCCESS:0.5,CANCELLED:0.5";
    pub const MIN_DELAY_SECONDS: u32 = 0;
    pub const MAX_DELAY_SECONDS: u32 = 0;
    pub const CANCEL_REASON: &str = "NOT_AVAILABLE";
    pub const SEED: u64 = 1;
    pub const RETENTION_DAYS: u32 = 7;
    pub const BATCH_CONCURRENCY: usize = 10;
}

#[derive(Debug, Clone, PartialEq)]
pub struct HarnessConfig {
    /// Its own table: one item per idempotency key received.
    pub table: String,
    /// Where it answers.
    pub response_queue_url: String,
    /// Where a request it cannot read goes, unchanged (the request queue's DLQ).
    pub request_dlq_url: String,
    pub behaviour: Behaviour,
    /// Days an item of its table is kept (TTL on `expires_at`).
    pub retention_days: u32,
    pub batch_concurrency: usize,
}

impl HarnessConfig {
    pub const ENV_VARS: &'static [&'static str] = &[
        "HARNESS_TABLE",
        "RESPONSE_QUEUE_URL",
        "REQUEST_DLQ_URL",
        "HARNESS_MIX",
        "HARNESS_MIN_DELAY_SECONDS",
        "HARNESS_MAX_DELAY_SECONDS",
        "HARNESS_CANCEL_REASON",
        "HARNESS_SEED",
        "HARNESS_RETENTION_DAYS",
        vars::BATCH_CONCURRENCY.name,
    ];

    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_lookup(&|k| std::env::var(k).ok())
    }

    pub fn from_lookup(lookup: &dyn Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let get = |name: &'static str| {
            lookup(name)
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
        };
        let required = |name: &'static str| get(name).ok_or(ConfigError::Missing { name });
        let invalid = |name: &'static str, value: &str, reason: String| ConfigError::Invalid {
            name,
            value: value.to_owned(),
            reason,
        };
        fn number<T: FromStr>(
            get: &dyn Fn(&'static str) -> Option<String>,
            name: &'static str,
            default: T,
        ) -> Result<T, ConfigError>
        where
            T::Err: std::fmt::Display,
        {
            match get(name) {
                None => Ok(default),
                Some(v) => v.parse().map_err(|e: T::Err| ConfigError::Invalid {
                    name,
                    value: v.clone(),
                    reason: e.to_string(),
                }),
            }
        }
        let mix_text = get("HARNESS_MIX").unwrap_or_else(|| defaults::MIX.to_owned());
        let mix = Mix::parse("HARNESS_MIX", &mix_text)
            .map_err(|e| invalid("HARNESS_MIX", &mix_text, e.to_string()))?;
        let min = number(
            &get,
            "HARNESS_MIN_DELAY_SECONDS",
            defaults::MIN_DELAY_SECONDS,
        )?;
        let max = number(
            &get,
            "HARNESS_MAX_DELAY_SECONDS",
            defaults::MAX_DELAY_SECONDS,
        )?;
        let latency = Latency::new(min, max).map_err(|e| {
            invalid(
                "HARNESS_MAX_DELAY_SECONDS",
                &max.to_string(),
                format!("with HARNESS_MIN_DELAY_SECONDS={min}: {e}"),
            )
        })?;
        let batch_concurrency: usize = number(
            &get,
            vars::BATCH_CONCURRENCY.name,
            defaults::BATCH_CONCURRENCY,
        )?;
        if batch_concurrency == 0 {
            return Err(invalid(
                vars::BATCH_CONCURRENCY.name,
                "0",
                "must be at least 1".into(),
            ));
        }
        let retention_days: u32 = number(&get, "HARNESS_RETENTION_DAYS", defaults::RETENTION_DAYS)?;
        if retention_days == 0 {
            return Err(invalid(
                "HARNESS_RETENTION_DAYS",
                "0",
                "must be at least 1".into(),
            ));
        }
        Ok(Self {
            table: required("HARNESS_TABLE")?,
            response_queue_url: required("RESPONSE_QUEUE_URL")?,
            request_dlq_url: required("REQUEST_DLQ_URL")?,
            behaviour: Behaviour {
                mix,
                latency,
                cancel_reason: get("HARNESS_CANCEL_REASON")
                    .unwrap_or_else(|| defaults::CANCEL_REASON.to_owned()),
                seed: number(&get, "HARNESS_SEED", defaults::SEED)?,
            },
            retention_days,
            batch_concurrency,
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::rules::Reply;
    use std::collections::HashMap;

    fn read(pairs: &[(&str, &str)]) -> Result<HarnessConfig, ConfigError> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        HarnessConfig::from_lookup(&|k| m.get(k).cloned())
    }

    const BASE: [(&str, &str); 3] = [
        ("HARNESS_TABLE", "t"),
        ("RESPONSE_QUEUE_URL", "http://q/response"),
        ("REQUEST_DLQ_URL", "http://q/request-dlq"),
    ];

    #[test]
    fn defaults_and_overrides() {
        let c = read(&BASE).unwrap();
        assert_eq!(c.behaviour.mix.probability(Reply::Silent), 0.0);
        assert_eq!(c.retention_days, 7);
        let mut pairs = BASE.to_vec();
        pairs.extend([
            ("HARNESS_MIX", "SUCCESS:0.2, NONE:0.8"),
            ("HARNESS_MIN_DELAY_SECONDS", "3"),
            ("HARNESS_MAX_DELAY_SECONDS", "4"),
            ("HARNESS_SEED", "99"),
        ]);
        let c = read(&pairs).unwrap();
        assert_eq!(c.behaviour.mix.probability(Reply::Silent), 0.8);
        assert_eq!(c.behaviour.latency, Latency::new(3, 4).unwrap());
        assert_eq!(c.behaviour.seed, 99);
    }

    #[test]
    fn errors_name_the_variable_and_the_value() {
        assert_eq!(
            read(&BASE[..2]).unwrap_err(),
            ConfigError::Missing {
                name: "REQUEST_DLQ_URL"
            }
        );
        let mut pairs = BASE.to_vec();
        pairs.push(("HARNESS_MAX_DELAY_SECONDS", "1000"));
        let e = read(&pairs).unwrap_err().to_string();
        assert!(
            e.starts_with("environment variable HARNESS_MAX_DELAY_SECONDS=\"1000\""),
            "{e}"
        );
        let mut pairs = BASE.to_vec();
        pairs.push(("HARNESS_MIX", "SUCCESS:2"));
        let e = read(&pairs).unwrap_err().to_string();
        assert!(e.contains("HARNESS_MIX=\"SUCCESS:2\""), "{e}");
        let mut pairs = BASE.to_vec();
        pairs.push(("HARNESS_SEED", "x"));
        assert!(read(&pairs)
            .unwrap_err()
            .to_string()
            .contains("HARNESS_SEED=\"x\""));
    }
}
