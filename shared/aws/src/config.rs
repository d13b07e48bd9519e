//! Configuration from the environment: the ONLY place that reads environment
//! variables for the functions.
//!
//! One struct per function. Each lists every variable it reads in `env_vars()` (the
//! template test compares these lists with `template.yaml`). Every value is parsed
//! with an error naming the variable and the value. `from_env()` reads the process
//! environment; `from_lookup(f)` reads through any lookup function (tests, the local
//! stack).
//!
//! Logging variables (`AWS_LAMBDA_LOG_FORMAT`, `AWS_LAMBDA_LOG_LEVEL`) are read by the
//! tracing initialisation, not here. `AWS_ENDPOINT_URL` and the region are read by
//! `aws-config` ([`load_sdk_config`]).

use domain::defaults;
use domain::policy::PolicyError;
use domain::{PolicySet, RetryPolicy};
use std::str::FromStr;
use std::time::Duration;
use thiserror::Error;

/// A configuration value that is missing or cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ConfigError {
    #[error("environment variable {name} is required but not set")]
    Missing { name: &'static str },
    #[error("environment variable {name}={value:?} is invalid: {reason}")]
    Invalid {
        name: &'static str,
        value: String,
        reason: String,
    },
}

/// Function timeouts in seconds (template.yaml sets the same values); queue
/// visibility timeouts are [`VISIBILITY_FACTOR`] × the consuming function's timeout.
pub mod timeouts {
    pub const RESPONSE_HANDLER_SECONDS: u32 = 30;
    pub const RETRY_HANDLER_SECONDS: u32 = 60;
    pub const RECONCILER_SECONDS: u32 = 120;
    pub const AUDIT_WRITER_SECONDS: u32 = 60;
    pub const VISIBILITY_FACTOR: u32 = 6;
}

/// Loads the SDK configuration from the environment (region, credentials and
/// `AWS_ENDPOINT_URL`, so the same code runs against AWS or a loopback server).
pub async fn load_sdk_config() -> aws_config::SdkConfig {
    aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await
}

/// Reads variables through a lookup function.
struct Env<'a> {
    lookup: &'a dyn Fn(&str) -> Option<String>,
}

impl Env<'_> {
    fn raw(&self, name: &'static str) -> Option<String> {
        (self.lookup)(name).filter(|v| !v.trim().is_empty())
    }

    fn required(&self, name: &'static str) -> Result<String, ConfigError> {
        self.raw(name)
            .map(|v| v.trim().to_owned())
            .ok_or(ConfigError::Missing { name })
    }

    fn string_or(&self, name: &'static str, default: &str) -> String {
        self.raw(name)
            .map(|v| v.trim().to_owned())
            .unwrap_or_else(|| default.to_owned())
    }

    fn parsed<T>(&self, name: &'static str, default: T) -> Result<T, ConfigError>
    where
        T: FromStr,
        T::Err: std::fmt::Display,
    {
        match self.raw(name) {
            None => Ok(default),
            Some(v) => v.trim().parse().map_err(|e: T::Err| ConfigError::Invalid {
                name,
                value: v.clone(),
                reason: e.to_string(),
            }),
        }
    }

    /// An integer in `min..=max`.
    fn ranged<T>(&self, name: &'static str, default: T, min: T, max: T) -> Result<T, ConfigError>
    where
        T: FromStr + PartialOrd + Copy + std::fmt::Display,
        T::Err: std::fmt::Display,
    {
        let v = self.parsed(name, default)?;
        if v < min || v > max {
            return Err(ConfigError::Invalid {
                name,
                value: v.to_string(),
                reason: format!("must be between {min} and {max}"),
            });
        }
        Ok(v)
    }

    fn boolean(&self, name: &'static str, default: bool) -> Result<bool, ConfigError> {
        match self.raw(name) {
            None => Ok(default),
            Some(v) => match v.trim().to_ascii_lowercase().as_str() {
                "true" | "1" | "yes" => Ok(true),
                "false" | "0" | "no" => Ok(false),
                _ => Err(ConfigError::Invalid {
                    name,
                    value: v,
                    reason: "must be true or false".to_owned(),
                }),
            },
        }
    }
}

fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

const MAX_SHARDS: u16 = 1000;

fn shards(env: &Env<'_>) -> Result<u16, ConfigError> {
    env.ranged(
        "RECONCILE_SHARDS",
        defaults::RECONCILE_SHARDS,
        1,
        MAX_SHARDS,
    )
}

/// The answer deadline: how long a request may go unanswered
/// (`ANSWER_TIMEOUT_SECONDS`, 1 s to 30 days) and how many times the reconciler
/// publishes it again before the transaction ends FAILED/UNANSWERED
/// (`ANSWER_REPUBLISH_MAX`, 0 to 100).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AnswerDeadline {
    pub timeout: Duration,
    pub republish_max: u32,
}

impl Default for AnswerDeadline {
    fn default() -> Self {
        Self {
            timeout: defaults::ANSWER_TIMEOUT,
            republish_max: defaults::ANSWER_REPUBLISH_MAX,
        }
    }
}

fn answer_timeout(env: &Env<'_>) -> Result<Duration, ConfigError> {
    Ok(Duration::from_secs(env.ranged(
        "ANSWER_TIMEOUT_SECONDS",
        defaults::ANSWER_TIMEOUT.as_secs(),
        1,
        30 * 86_400,
    )?))
}

fn answer_deadline(env: &Env<'_>) -> Result<AnswerDeadline, ConfigError> {
    Ok(AnswerDeadline {
        timeout: answer_timeout(env)?,
        republish_max: env.ranged(
            "ANSWER_REPUBLISH_MAX",
            defaults::ANSWER_REPUBLISH_MAX,
            0,
            100,
        )?,
    })
}

fn batch_concurrency(env: &Env<'_>) -> Result<usize, ConfigError> {
    env.ranged("BATCH_CONCURRENCY", defaults::BATCH_CONCURRENCY, 1, 1000)
}

fn namespace(env: &Env<'_>) -> String {
    env.string_or("METRICS_NAMESPACE", defaults::METRICS_NAMESPACE)
}

/// The circuit breaker of the external service (`BREAKER_TABLE` and the
/// `BREAKER_*` settings). Absent `BREAKER_TABLE`: no breaker, requests always go out.
#[derive(Debug, Clone, PartialEq)]
pub struct BreakerConfig {
    pub table: String,
    pub settings: domain::breaker::BreakerSettings,
    /// How long an execution environment uses its last read of the breaker
    /// (`BREAKER_REFRESH_SECONDS`, 1–300, default 5).
    pub refresh: Duration,
}

impl BreakerConfig {
    pub const ENV_VARS: &'static [&'static str] = &[
        "BREAKER_TABLE",
        "BREAKER_WINDOW_SECONDS",
        "BREAKER_MIN_CALLS",
        "BREAKER_FAILURE_RATIO",
        "BREAKER_DEADLINE_BURST",
        "BREAKER_COOLDOWN_SECONDS",
        "BREAKER_COOLDOWN_MAX_SECONDS",
        "BREAKER_PROBES",
        "BREAKER_REFRESH_SECONDS",
    ];

    fn read(env: &Env<'_>) -> Result<Option<Self>, ConfigError> {
        let d = domain::breaker::BreakerSettings::default();
        // Read every setting even without a table, so a bad value is never silent.
        let secs = |name, default: Duration| -> Result<Duration, ConfigError> {
            Ok(Duration::from_secs(env.ranged(
                name,
                default.as_secs(),
                1,
                86_400,
            )?))
        };
        let settings = domain::breaker::BreakerSettings {
            window: secs("BREAKER_WINDOW_SECONDS", d.window)?,
            min_calls: env.ranged("BREAKER_MIN_CALLS", d.min_calls, 1, 1_000_000)?,
            failure_ratio: env.parsed("BREAKER_FAILURE_RATIO", d.failure_ratio)?,
            deadline_burst: env.ranged("BREAKER_DEADLINE_BURST", d.deadline_burst, 1, 1_000_000)?,
            cooldown: secs("BREAKER_COOLDOWN_SECONDS", d.cooldown)?,
            cooldown_max: secs("BREAKER_COOLDOWN_MAX_SECONDS", d.cooldown_max)?,
            probes: env.ranged("BREAKER_PROBES", d.probes, 1, 10_000)?,
        }
        .validated()
        .map_err(|e| ConfigError::Invalid {
            name: match e.name {
                "window" => "BREAKER_WINDOW_SECONDS",
                "min_calls" => "BREAKER_MIN_CALLS",
                "failure_ratio" => "BREAKER_FAILURE_RATIO",
                "deadline_burst" => "BREAKER_DEADLINE_BURST",
                "cooldown" => "BREAKER_COOLDOWN_SECONDS",
                "cooldown_max" => "BREAKER_COOLDOWN_MAX_SECONDS",
                _ => "BREAKER_PROBES",
            },
            value: e.value.clone(),
            reason: e.reason.to_owned(),
        })?;
        let refresh = Duration::from_secs(env.ranged("BREAKER_REFRESH_SECONDS", 5, 1, 300)?);
        Ok(env.raw("BREAKER_TABLE").map(|t| Self {
            table: t.trim().to_owned(),
            settings,
            refresh,
        }))
    }
}

/// How schedules are created: the article's target settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchedulerSettings {
    /// Dedicated schedule group (`SCHEDULE_GROUP`).
    pub group: String,
    /// Target: the retry queue (`RETRY_QUEUE_ARN`).
    pub retry_queue_arn: String,
    /// Role the scheduler assumes to send to the retry queue (`SCHEDULER_ROLE_ARN`).
    pub role_arn: String,
    /// Where undeliverable events go (`SCHEDULER_DLQ_ARN`).
    pub dlq_arn: String,
    /// `RetryPolicy.MaximumRetryAttempts`, 0–185 (`SCHEDULER_RETRY_ATTEMPTS`).
    pub retry_attempts: u32,
    /// `RetryPolicy.MaximumEventAgeInSeconds`, 60–86400 (`SCHEDULER_MAX_EVENT_AGE_SECONDS`).
    pub max_event_age_seconds: u32,
}

impl SchedulerSettings {
    pub const ENV_VARS: &'static [&'static str] = &[
        "SCHEDULE_GROUP",
        "RETRY_QUEUE_ARN",
        "SCHEDULER_ROLE_ARN",
        "SCHEDULER_DLQ_ARN",
        "SCHEDULER_RETRY_ATTEMPTS",
        "SCHEDULER_MAX_EVENT_AGE_SECONDS",
    ];

    fn read(env: &Env<'_>) -> Result<Self, ConfigError> {
        Ok(Self {
            group: env.required("SCHEDULE_GROUP")?,
            retry_queue_arn: env.required("RETRY_QUEUE_ARN")?,
            role_arn: env.required("SCHEDULER_ROLE_ARN")?,
            dlq_arn: env.required("SCHEDULER_DLQ_ARN")?,
            retry_attempts: env.ranged(
                "SCHEDULER_RETRY_ATTEMPTS",
                defaults::SCHEDULER_RETRY_ATTEMPTS,
                0,
                185,
            )?,
            max_event_age_seconds: env.ranged(
                "SCHEDULER_MAX_EVENT_AGE_SECONDS",
                defaults::SCHEDULER_MAX_EVENT_AGE_SECONDS,
                60,
                86_400,
            )?,
        })
    }
}

/// Builds the backoff policies from `BACKOFF_*`; errors name the variable.
fn policies(env: &Env<'_>) -> Result<PolicySet, ConfigError> {
    let base: f64 = env.parsed("BACKOFF_BASE_SECONDS", defaults::BACKOFF_BASE.as_secs_f64())?;
    let factor: f64 = env.parsed("BACKOFF_FACTOR", defaults::BACKOFF_FACTOR)?;
    let cap: f64 = env.parsed("BACKOFF_CAP_SECONDS", defaults::BACKOFF_CAP.as_secs_f64())?;
    let jitter: f64 = env.parsed("BACKOFF_JITTER", defaults::BACKOFF_JITTER)?;
    let strict = env.boolean("BACKOFF_STRICT_CAP", defaults::BACKOFF_STRICT_CAP)?;
    let secs = |name: &'static str, v: f64| {
        if v.is_finite() && v > 0.0 && v < 1e12 {
            Ok(Duration::from_secs_f64(v))
        } else {
            Err(ConfigError::Invalid {
                name,
                value: v.to_string(),
                reason: "must be a number of seconds greater than 0".to_owned(),
            })
        }
    };
    let policy = RetryPolicy::new(
        secs("BACKOFF_BASE_SECONDS", base)?,
        factor,
        secs("BACKOFF_CAP_SECONDS", cap)?,
        jitter,
        strict,
    )
    .map_err(|e| match e {
        PolicyError::Invalid { field, value, rule } => {
            let name = match field {
                "base" => "BACKOFF_BASE_SECONDS",
                "factor" => "BACKOFF_FACTOR",
                "cap" => "BACKOFF_CAP_SECONDS",
                _ => "BACKOFF_JITTER",
            };
            ConfigError::Invalid {
                name,
                value: value.to_string(),
                reason: rule.to_owned(),
            }
        }
        PolicyError::Overrides { detail } => ConfigError::Invalid {
            name: "BACKOFF_OVERRIDES",
            value: String::new(),
            reason: detail,
        },
    })?;
    let overrides = env.string_or("BACKOFF_OVERRIDES", "");
    PolicySet::uniform(policy)
        .with_overrides_json(&overrides)
        .map_err(|e| ConfigError::Invalid {
            name: "BACKOFF_OVERRIDES",
            value: overrides.clone(),
            reason: e.to_string(),
        })
}

/// AUDIT_RETENTION_DAYS: how long audit entries are kept.
fn audit_retention_days(env: &Env<'_>) -> Result<u32, ConfigError> {
    env.ranged(
        "AUDIT_RETENTION_DAYS",
        defaults::AUDIT_RETENTION_DAYS,
        1,
        36_500,
    )
}

/// The response handler (A).
#[derive(Debug, Clone, PartialEq)]
pub struct ResponseHandlerConfig {
    pub transactions_table: String,
    pub reconcile_shards: u16,
    pub scheduler: SchedulerSettings,
    pub policies: PolicySet,
    pub response_dlq_url: String,
    /// The retry queue: a retry whose instant has already passed goes there at once.
    pub retry_queue_url: String,
    /// ANSWER_TIMEOUT_SECONDS: the deadline of a request this handler records as sent.
    pub answer_timeout: Duration,
    /// AUDIT_TABLE: where a conflicting SUCCESS is noted (it changes no record, so
    /// the stream never carries it).
    pub audit_table: String,
    /// AUDIT_RETENTION_DAYS: the notes expire with the rest of the trail.
    pub audit_retention_days: u32,
    /// TECHNICAL_RESEND_MAX: technical re-sends of a transaction before an ERROR ends
    /// it FAILED.
    pub technical_resend_max: u32,
    /// The circuit breaker its answers feed.
    pub breaker: Option<BreakerConfig>,
    pub batch_concurrency: usize,
    pub metrics_namespace: String,
}

impl ResponseHandlerConfig {
    /// The variables it reads besides those of its parts ([`Self::env_vars`]).
    const OWN_VARS: &'static [&'static str] = &[
        "TRANSACTIONS_TABLE",
        "RECONCILE_SHARDS",
        "BACKOFF_BASE_SECONDS",
        "BACKOFF_FACTOR",
        "BACKOFF_CAP_SECONDS",
        "BACKOFF_JITTER",
        "BACKOFF_STRICT_CAP",
        "BACKOFF_OVERRIDES",
        "RESPONSE_DLQ_URL",
        "RETRY_QUEUE_URL",
        "ANSWER_TIMEOUT_SECONDS",
        "AUDIT_TABLE",
        "AUDIT_RETENTION_DAYS",
        "TECHNICAL_RESEND_MAX",
        "BATCH_CONCURRENCY",
        "METRICS_NAMESPACE",
    ];

    /// Every environment variable the function reads.
    pub fn env_vars() -> Vec<&'static str> {
        [
            Self::OWN_VARS,
            SchedulerSettings::ENV_VARS,
            BreakerConfig::ENV_VARS,
        ]
        .concat()
    }

    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_lookup(&process_env)
    }

    pub fn from_lookup(lookup: &dyn Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let env = Env { lookup };
        Ok(Self {
            transactions_table: env.required("TRANSACTIONS_TABLE")?,
            reconcile_shards: shards(&env)?,
            scheduler: SchedulerSettings::read(&env)?,
            policies: policies(&env)?,
            response_dlq_url: env.required("RESPONSE_DLQ_URL")?,
            retry_queue_url: env.required("RETRY_QUEUE_URL")?,
            answer_timeout: answer_timeout(&env)?,
            audit_table: env.required("AUDIT_TABLE")?,
            audit_retention_days: audit_retention_days(&env)?,
            technical_resend_max: env.ranged(
                "TECHNICAL_RESEND_MAX",
                defaults::TECHNICAL_RESEND_MAX,
                0,
                defaults::TECHNICAL_RESEND_LIMIT,
            )?,
            breaker: BreakerConfig::read(&env)?,
            batch_concurrency: batch_concurrency(&env)?,
            metrics_namespace: namespace(&env),
        })
    }
}

/// The retry handler (B).
#[derive(Debug, Clone, PartialEq)]
pub struct RetryHandlerConfig {
    pub transactions_table: String,
    pub payloads_table: String,
    pub request_queue_url: String,
    pub retry_dlq_url: String,
    pub reconcile_shards: u16,
    /// Per concurrent execution; the fleet bound is ESM MaximumConcurrency × this.
    pub max_requests_per_second: f64,
    /// ANSWER_TIMEOUT_SECONDS: the deadline of each request this handler publishes.
    pub answer_timeout: Duration,
    /// Schedules of the retries the breaker pauses.
    pub scheduler: SchedulerSettings,
    /// The circuit breaker that holds requests back.
    pub breaker: Option<BreakerConfig>,
    pub batch_concurrency: usize,
    pub metrics_namespace: String,
}

impl RetryHandlerConfig {
    /// The variables it reads besides those of its parts ([`Self::env_vars`]).
    const OWN_VARS: &'static [&'static str] = &[
        "TRANSACTIONS_TABLE",
        "PAYLOADS_TABLE",
        "REQUEST_QUEUE_URL",
        "RETRY_DLQ_URL",
        "RECONCILE_SHARDS",
        "MAX_REQUESTS_PER_SECOND",
        "ANSWER_TIMEOUT_SECONDS",
        "BATCH_CONCURRENCY",
        "METRICS_NAMESPACE",
    ];

    /// Every environment variable the function reads.
    pub fn env_vars() -> Vec<&'static str> {
        [
            Self::OWN_VARS,
            SchedulerSettings::ENV_VARS,
            BreakerConfig::ENV_VARS,
        ]
        .concat()
    }

    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_lookup(&process_env)
    }

    pub fn from_lookup(lookup: &dyn Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let env = Env { lookup };
        let raw = env.required("MAX_REQUESTS_PER_SECOND")?;
        let rate: f64 =
            raw.parse()
                .map_err(|e: std::num::ParseFloatError| ConfigError::Invalid {
                    name: "MAX_REQUESTS_PER_SECOND",
                    value: raw.clone(),
                    reason: e.to_string(),
                })?;
        if !rate.is_finite() || rate <= 0.0 {
            return Err(ConfigError::Invalid {
                name: "MAX_REQUESTS_PER_SECOND",
                value: raw,
                reason: "must be a number greater than 0".to_owned(),
            });
        }
        Ok(Self {
            transactions_table: env.required("TRANSACTIONS_TABLE")?,
            payloads_table: env.required("PAYLOADS_TABLE")?,
            request_queue_url: env.required("REQUEST_QUEUE_URL")?,
            retry_dlq_url: env.required("RETRY_DLQ_URL")?,
            reconcile_shards: shards(&env)?,
            max_requests_per_second: rate,
            answer_timeout: answer_timeout(&env)?,
            scheduler: SchedulerSettings::read(&env)?,
            breaker: BreakerConfig::read(&env)?,
            batch_concurrency: batch_concurrency(&env)?,
            metrics_namespace: namespace(&env),
        })
    }

    /// Minimum interval between two publishes of one process.
    pub fn min_publish_interval(&self) -> Duration {
        Duration::from_secs_f64(1.0 / self.max_requests_per_second)
    }
}

/// The reconciler (cron).
#[derive(Debug, Clone, PartialEq)]
pub struct ReconcilerConfig {
    pub transactions_table: String,
    /// PAYLOADS_TABLE: an unanswered request is published again with its payload.
    pub payloads_table: String,
    pub reconcile_shards: u16,
    pub retry_queue_url: String,
    /// REQUEST_QUEUE_URL: where an unanswered request is published again.
    pub request_queue_url: String,
    pub answer: AnswerDeadline,
    /// RECONCILE_REQUEUE_MAX: requeues without progress before a record is parked.
    pub requeue_max: u32,
    pub scheduler: SchedulerSettings,
    pub reconcile_threshold: Duration,
    pub reconcile_max_items: u32,
    /// The circuit breaker: answer deadlines feed it, and while it holds requests
    /// back an unanswered request waits instead of going out again.
    pub breaker: Option<BreakerConfig>,
    pub metrics_namespace: String,
}

impl ReconcilerConfig {
    /// The variables it reads besides those of its parts ([`Self::env_vars`]).
    const OWN_VARS: &'static [&'static str] = &[
        "TRANSACTIONS_TABLE",
        "PAYLOADS_TABLE",
        "RECONCILE_SHARDS",
        "RETRY_QUEUE_URL",
        "REQUEST_QUEUE_URL",
        "ANSWER_TIMEOUT_SECONDS",
        "ANSWER_REPUBLISH_MAX",
        "RECONCILE_REQUEUE_MAX",
        "RECONCILE_THRESHOLD_SECONDS",
        "RECONCILE_MAX_ITEMS",
        "METRICS_NAMESPACE",
    ];

    /// Every environment variable the function reads.
    pub fn env_vars() -> Vec<&'static str> {
        [
            Self::OWN_VARS,
            SchedulerSettings::ENV_VARS,
            BreakerConfig::ENV_VARS,
        ]
        .concat()
    }

    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_lookup(&process_env)
    }

    pub fn from_lookup(lookup: &dyn Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let env = Env { lookup };
        Ok(Self {
            transactions_table: env.required("TRANSACTIONS_TABLE")?,
            payloads_table: env.required("PAYLOADS_TABLE")?,
            reconcile_shards: shards(&env)?,
            retry_queue_url: env.required("RETRY_QUEUE_URL")?,
            request_queue_url: env.required("REQUEST_QUEUE_URL")?,
            answer: answer_deadline(&env)?,
            requeue_max: env.ranged(
                "RECONCILE_REQUEUE_MAX",
                defaults::RECONCILE_REQUEUE_MAX,
                1,
                1000,
            )?,
            scheduler: SchedulerSettings::read(&env)?,
            reconcile_threshold: Duration::from_secs(env.ranged(
                "RECONCILE_THRESHOLD_SECONDS",
                defaults::RECONCILE_THRESHOLD.as_secs(),
                1,
                30 * 86_400,
            )?),
            reconcile_max_items: env.ranged(
                "RECONCILE_MAX_ITEMS",
                defaults::RECONCILE_MAX_ITEMS,
                1,
                1_000_000,
            )?,
            breaker: BreakerConfig::read(&env)?,
            metrics_namespace: namespace(&env),
        })
    }
}

/// The audit writer (DynamoDB stream consumer).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditWriterConfig {
    pub audit_table: String,
    pub retention_days: u32,
    pub metrics_namespace: String,
}

impl AuditWriterConfig {
    /// Every environment variable the function reads.
    pub fn env_vars() -> Vec<&'static str> {
        vec!["AUDIT_TABLE", "AUDIT_RETENTION_DAYS", "METRICS_NAMESPACE"]
    }

    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_lookup(&process_env)
    }

    pub fn from_lookup(lookup: &dyn Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let env = Env { lookup };
        Ok(Self {
            audit_table: env.required("AUDIT_TABLE")?,
            retention_days: audit_retention_days(&env)?,
            metrics_namespace: namespace(&env),
        })
    }
}

/// Name of the reconciler index on the transactions table.
pub const RECONCILE_INDEX: &str = "reconcile-index";

/// Name of the sparse index of FAILED transactions on the transactions table
/// (partition `failed_pk`, sort key `updated_at`, keys only).
pub const FAILED_INDEX: &str = "failed-index";

/// Physical resource names of one stack, all derived from a prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StackNames {
    pub prefix: String,
    pub transactions_table: String,
    pub payloads_table: String,
    pub audit_table: String,
    /// The circuit breaker's table.
    pub breaker_table: String,
    pub request_queue: String,
    pub request_dlq: String,
    pub response_queue: String,
    pub response_dlq: String,
    pub retry_queue: String,
    pub retry_dlq: String,
    pub scheduler_dlq: String,
    pub audit_dlq: String,
    pub schedule_group: String,
    /// The role the scheduler assumes (only its ARN is used locally).
    pub scheduler_role: String,
}

impl StackNames {
    pub fn new(prefix: &str) -> Self {
        let n = |suffix: &str| format!("{prefix}-{suffix}");
        Self {
            prefix: prefix.to_owned(),
            transactions_table: n("transactions"),
            payloads_table: n("payloads"),
            audit_table: n("audit"),
            breaker_table: n("breaker"),
            request_queue: n("request"),
            request_dlq: n("request-dlq"),
            response_queue: n("response"),
            response_dlq: n("response-dlq"),
            retry_queue: n("retry"),
            retry_dlq: n("retry-dlq"),
            scheduler_dlq: n("scheduler-dlq"),
            audit_dlq: n("audit-dlq"),
            schedule_group: n("retries"),
            scheduler_role: n("scheduler"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn lookup(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |k| map.get(k).cloned()
    }

    const SCHED: &[(&str, &str)] = &[
        ("SCHEDULE_GROUP", "g"),
        ("RETRY_QUEUE_ARN", "arn:aws:sqs:us-east-1:1:retry"),
        ("SCHEDULER_ROLE_ARN", "arn:aws:iam::1:role/s"),
        ("SCHEDULER_DLQ_ARN", "arn:aws:sqs:us-east-1:1:dlq"),
    ];

    fn response_env(extra: &[(&'static str, &'static str)]) -> Vec<(&'static str, &'static str)> {
        let mut v: Vec<(&str, &str)> = vec![
            ("TRANSACTIONS_TABLE", "tx"),
            ("RESPONSE_DLQ_URL", "http://q/dlq"),
            ("RETRY_QUEUE_URL", "http://q/retry"),
            ("AUDIT_TABLE", "audit"),
        ];
        v.extend_from_slice(SCHED);
        v.extend_from_slice(extra);
        v
    }

    #[test]
    fn response_handler_defaults() {
        let c = ResponseHandlerConfig::from_lookup(&lookup(&response_env(&[]))).unwrap();
        assert_eq!(c.reconcile_shards, 8);
        assert_eq!(c.scheduler.retry_attempts, 5);
        assert_eq!(c.scheduler.max_event_age_seconds, 3600);
        assert_eq!(c.batch_concurrency, 10);
        assert_eq!(c.metrics_namespace, "DeferredRetry");
        assert_eq!(
            (c.audit_table.as_str(), c.audit_retention_days),
            ("audit", defaults::AUDIT_RETENTION_DAYS)
        );
        assert_eq!(
            c.policies,
            PolicySet::uniform(RetryPolicy::article_default())
        );
        let without: Vec<_> = response_env(&[])
            .into_iter()
            .filter(|(k, _)| *k != "AUDIT_TABLE")
            .collect();
        let e = ResponseHandlerConfig::from_lookup(&lookup(&without)).unwrap_err();
        assert!(e.to_string().contains("AUDIT_TABLE"), "{e}");
    }

    #[test]
    fn errors_name_variable_and_value() {
        let e = ResponseHandlerConfig::from_lookup(&lookup(&response_env(&[(
            "BACKOFF_FACTOR",
            "0.5",
        )])))
        .unwrap_err();
        assert!(
            matches!(
                e,
                ConfigError::Invalid {
                    name: "BACKOFF_FACTOR",
                    ..
                }
            ),
            "{e}"
        );
        assert!(e.to_string().contains("0.5"), "{e}");

        let e = ResponseHandlerConfig::from_lookup(&lookup(&response_env(&[(
            "RECONCILE_SHARDS",
            "eight",
        )])))
        .unwrap_err();
        assert!(e.to_string().contains("RECONCILE_SHARDS=\"eight\""), "{e}");

        let e = ResponseHandlerConfig::from_lookup(&lookup(&response_env(&[(
            "BACKOFF_OVERRIDES",
            "{nope",
        )])))
        .unwrap_err();
        assert!(e.to_string().contains("BACKOFF_OVERRIDES=\"{nope\""), "{e}");

        let e = ResponseHandlerConfig::from_lookup(&lookup(&response_env(&[(
            "SCHEDULER_MAX_EVENT_AGE_SECONDS",
            "10",
        )])))
        .unwrap_err();
        assert!(e.to_string().contains("between 60 and 86400"), "{e}");

        let e = ResponseHandlerConfig::from_lookup(&lookup(&[("TRANSACTIONS_TABLE", "t")]))
            .unwrap_err();
        assert_eq!(
            e,
            ConfigError::Missing {
                name: "SCHEDULE_GROUP"
            }
        );
    }

    #[test]
    fn backoff_variables_build_the_policy_set() {
        let c = ResponseHandlerConfig::from_lookup(&lookup(&response_env(&[
            ("BACKOFF_BASE_SECONDS", "60"),
            ("BACKOFF_FACTOR", "3"),
            ("BACKOFF_CAP_SECONDS", "600"),
            ("BACKOFF_JITTER", "0"),
            ("BACKOFF_STRICT_CAP", "true"),
            (
                "BACKOFF_OVERRIDES",
                r#"{"NOT_AVAILABLE":{"base_seconds":10,"factor":1,"cap_seconds":10,"jitter":0}}"#,
            ),
        ])))
        .unwrap();
        let p = &c.policies.default;
        assert_eq!(p.base(), Duration::from_secs(60));
        assert_eq!(p.factor(), 3.0);
        assert_eq!(p.cap(), Duration::from_secs(600));
        assert_eq!(p.jitter(), 0.0);
        assert!(p.strict_cap());
        assert_eq!(
            c.policies.for_reason(Some("NOT_AVAILABLE")).base(),
            Duration::from_secs(10)
        );
    }

    #[test]
    fn every_variable_read_is_listed() {
        // Record every name each config asks for and compare with ENV_VARS.
        type Lookup<'a> = &'a dyn Fn(&str) -> Option<String>;
        fn asked(f: &dyn Fn(Lookup<'_>)) -> Vec<String> {
            let seen = std::cell::RefCell::new(Vec::<String>::new());
            let l = |k: &str| {
                seen.borrow_mut().push(k.to_owned());
                Some(match k {
                    "MAX_REQUESTS_PER_SECOND" => "5".to_owned(),
                    "RECONCILE_SHARDS" | "BATCH_CONCURRENCY" | "SCHEDULER_RETRY_ATTEMPTS" => {
                        "3".to_owned()
                    }
                    "SCHEDULER_MAX_EVENT_AGE_SECONDS" | "RECONCILE_THRESHOLD_SECONDS" => {
                        "600".to_owned()
                    }
                    "RECONCILE_MAX_ITEMS" | "AUDIT_RETENTION_DAYS" => "30".to_owned(),
                    "BACKOFF_BASE_SECONDS" | "BACKOFF_CAP_SECONDS" => "100".to_owned(),
                    "BACKOFF_FACTOR" => "2".to_owned(),
                    "BACKOFF_JITTER" => "0.1".to_owned(),
                    "BACKOFF_STRICT_CAP" => "false".to_owned(),
                    "BACKOFF_OVERRIDES" => "{}".to_owned(),
                    "ANSWER_TIMEOUT_SECONDS"
                    | "ANSWER_REPUBLISH_MAX"
                    | "RECONCILE_REQUEUE_MAX"
                    | "TECHNICAL_RESEND_MAX" => "3".to_owned(),
                    "BREAKER_WINDOW_SECONDS"
                    | "BREAKER_COOLDOWN_SECONDS"
                    | "BREAKER_COOLDOWN_MAX_SECONDS" => "60".to_owned(),
                    "BREAKER_MIN_CALLS"
                    | "BREAKER_DEADLINE_BURST"
                    | "BREAKER_PROBES"
                    | "BREAKER_REFRESH_SECONDS" => "5".to_owned(),
                    "BREAKER_FAILURE_RATIO" => "0.5".to_owned(),
                    _ => "x".to_owned(),
                })
            };
            f(&l);
            let mut v = seen.into_inner();
            v.sort();
            v.dedup();
            v
        }
        let sorted = |s: &[&str]| {
            let mut v: Vec<String> = s.iter().map(|x| (*x).to_owned()).collect();
            v.sort();
            v
        };
        assert_eq!(
            asked(&|l| {
                ResponseHandlerConfig::from_lookup(l).unwrap();
            }),
            sorted(&ResponseHandlerConfig::env_vars())
        );
        assert_eq!(
            asked(&|l| {
                RetryHandlerConfig::from_lookup(l).unwrap();
            }),
            sorted(&RetryHandlerConfig::env_vars())
        );
        assert_eq!(
            asked(&|l| {
                ReconcilerConfig::from_lookup(l).unwrap();
            }),
            sorted(&ReconcilerConfig::env_vars())
        );
        assert_eq!(
            asked(&|l| {
                AuditWriterConfig::from_lookup(l).unwrap();
            }),
            sorted(&AuditWriterConfig::env_vars())
        );
    }

    fn retry_handler_base() -> Vec<(&'static str, &'static str)> {
        vec![
            ("TRANSACTIONS_TABLE", "t"),
            ("PAYLOADS_TABLE", "p"),
            ("REQUEST_QUEUE_URL", "u"),
            ("RETRY_DLQ_URL", "d"),
            ("SCHEDULE_GROUP", "g"),
            ("RETRY_QUEUE_ARN", "arn:q"),
            ("SCHEDULER_ROLE_ARN", "arn:r"),
            ("SCHEDULER_DLQ_ARN", "arn:d"),
            ("MAX_REQUESTS_PER_SECOND", "4"),
        ]
    }

    #[test]
    fn the_breaker_is_on_with_its_table_and_its_settings_are_checked() {
        let base = retry_handler_base();
        let off = RetryHandlerConfig::from_lookup(&lookup(&base)).unwrap();
        assert_eq!(off.breaker, None, "no BREAKER_TABLE: no breaker");
        let mut v = base.clone();
        v.push(("BREAKER_TABLE", "dr-breaker"));
        v.push(("BREAKER_PROBES", "3"));
        let on = RetryHandlerConfig::from_lookup(&lookup(&v)).unwrap();
        let b = on.breaker.unwrap();
        assert_eq!(b.table, "dr-breaker");
        assert_eq!(b.settings.probes, 3);
        assert_eq!(
            b.settings.cooldown,
            domain::breaker::BreakerSettings::default().cooldown
        );
        assert_eq!(b.refresh, Duration::from_secs(5));
        // A bad value is refused naming the variable, with or without a table.
        for (name, value, shown) in [
            (
                "BREAKER_FAILURE_RATIO",
                "1.5",
                "BREAKER_FAILURE_RATIO=\"1.5\"",
            ),
            ("BREAKER_PROBES", "0", "BREAKER_PROBES=\"0\""),
            (
                "BREAKER_COOLDOWN_SECONDS",
                "900",
                "BREAKER_COOLDOWN_MAX_SECONDS",
            ),
            (
                "BREAKER_REFRESH_SECONDS",
                "301",
                "BREAKER_REFRESH_SECONDS=\"301\"",
            ),
        ] {
            let mut bad = base.clone();
            bad.push((name, value));
            let e = RetryHandlerConfig::from_lookup(&lookup(&bad)).unwrap_err();
            assert!(e.to_string().contains(shown), "{name}: {e}");
        }
    }

    #[test]
    fn retry_handler_rate_must_be_positive() {
        let base = retry_handler_base();
        let mut v = base.to_vec();
        v.push(("MAX_REQUESTS_PER_SECOND", "0"));
        let e = RetryHandlerConfig::from_lookup(&lookup(&v)).unwrap_err();
        assert!(
            e.to_string().contains("MAX_REQUESTS_PER_SECOND=\"0\""),
            "{e}"
        );
        let mut v = base.to_vec();
        v.push(("MAX_REQUESTS_PER_SECOND", "4"));
        let c = RetryHandlerConfig::from_lookup(&lookup(&v)).unwrap();
        assert_eq!(c.min_publish_interval(), Duration::from_millis(250));
    }

    #[test]
    fn stack_names_follow_the_prefix() {
        let n = StackNames::new("dr");
        assert_eq!(n.transactions_table, "dr-transactions");
        assert_eq!(n.request_dlq, "dr-request-dlq");
        assert_eq!(n.schedule_group, "dr-retries");
        assert_eq!(n.audit_dlq, "dr-audit-dlq");
    }
}
