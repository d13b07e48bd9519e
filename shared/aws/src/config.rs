//! Configuration from the environment: the ONLY place that reads environment variables
//! for the functions. Each variable is declared once, in [`vars`] (name, default from
//! `domain::defaults`, accepted values); one struct per function reads through one
//! reader that parses each value with an error naming the variable and the value, keeps
//! every error (a deployment sees all its bad variables at once), and records the names
//! asked for (`env_vars()`, compared with `template.yaml` by the template test). `from_env()` reads the process environment,
//! `from_lookup(f)` any lookup (tests, the local stack). Other code names a variable by
//! its descriptor (`vars::TRANSACTIONS_TABLE.name`), never by a string of its own.
//! Logging variables are read by the tracing initialisation, `AWS_ENDPOINT_URL` and the
//! region by `aws-config` ([`load_sdk_config`]). The variables per function:
//! `docs/adapters.md#configuration`.

use domain::decide::Delivery;
use domain::policy::PolicyError;
use domain::{PolicySet, RetryPolicy};
use std::cell::RefCell;
use std::fmt;
use std::time::Duration;
use thiserror::Error;
use vars::*;

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
    /// More than one variable is missing or invalid: each, in the order read.
    #[error("{} environment variables are missing or invalid: {}", .0.len(), list(.0))]
    Several(Vec<ConfigError>),
}

impl ConfigError {
    /// The variable at fault (the first one read, for [`ConfigError::Several`]).
    pub fn name(&self) -> &'static str {
        match self {
            Self::Missing { name } | Self::Invalid { name, .. } => name,
            Self::Several(all) => all.first().map_or("", ConfigError::name),
        }
    }
}

fn list(errors: &[ConfigError]) -> String {
    errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// Function timeouts in seconds (template.yaml sets the same values); queue
/// visibility timeouts are [`VISIBILITY_FACTOR`] × the consuming function's timeout.
pub mod timeouts {
    pub const RESPONSE_HANDLER_SECONDS: u32 = 30;
    pub const RETRY_HANDLER_SECONDS: u32 = 60;
    pub const RECONCILER_SECONDS: u32 = 120;
    pub const AUDIT_WRITER_SECONDS: u32 = 60;
    pub const STARTER_SECONDS: u32 = 30;
    pub const HTTP_BRIDGE_SECONDS: u32 = 30;
    pub const PUBLISHER_SECONDS: u32 = 60;
    pub const VISIBILITY_FACTOR: u32 = 6;
}

/// Loads the SDK configuration from the environment (region, credentials and
/// `AWS_ENDPOINT_URL`, so the same code runs against AWS or a loopback server).
pub async fn load_sdk_config() -> aws_config::SdkConfig {
    aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await
}

/// A variable read as text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Text {
    pub name: &'static str,
    /// The value when unset or blank; `None`: the variable is required.
    pub default: Option<&'static str>,
}

impl Text {
    const fn required(name: &'static str) -> Self {
        Self {
            name,
            default: None,
        }
    }

    const fn or(name: &'static str, default: &'static str) -> Self {
        Self {
            name,
            default: Some(default),
        }
    }
}

/// A variable read as a number or a boolean.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Var<T: 'static> {
    pub name: &'static str,
    /// The value when unset or blank; `None`: the variable is required.
    pub default: Option<T>,
    pub accepts: Accepts<T>,
}

/// The values a [`Var`] accepts once parsed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Accepts<T> {
    /// Any value that parses (checked later with the values it goes with).
    Any,
    /// `min..=max`.
    Between(T, T),
    /// Strictly between the two bounds; otherwise the reason is given.
    Within(T, T, &'static str),
}

impl<T> Var<T> {
    const fn any(name: &'static str, default: T) -> Self {
        Self {
            name,
            default: Some(default),
            accepts: Accepts::Any,
        }
    }

    const fn between(name: &'static str, default: T, min: T, max: T) -> Self {
        Self {
            name,
            default: Some(default),
            accepts: Accepts::Between(min, max),
        }
    }
}

/// A value a [`Var`] holds: parsed from the variable's text, compared with bounds,
/// shown in errors.
pub trait Value: Copy + PartialOrd + fmt::Display + Default + 'static {
    fn parse(raw: &str) -> Result<Self, String>;
}

macro_rules! value_from_str {
    ($($t:ty),*) => {$(
        impl Value for $t {
            fn parse(raw: &str) -> Result<Self, String> {
                raw.parse().map_err(|e: <$t as std::str::FromStr>::Err| e.to_string())
            }
        }
    )*};
}
value_from_str!(u16, u32, u64, usize, f64);

impl Value for bool {
    fn parse(raw: &str) -> Result<Self, String> {
        match raw.to_ascii_lowercase().as_str() {
            "true" | "1" | "yes" => Ok(true),
            "false" | "0" | "no" => Ok(false),
            _ => Err("must be true or false".to_owned()),
        }
    }
}

impl<T: Value> Accepts<T> {
    /// Why `v` is refused, if it is.
    fn refusal(&self, v: T) -> Option<String> {
        match *self {
            Self::Any => None,
            Self::Between(min, max) => {
                (v < min || v > max).then(|| format!("must be between {min} and {max}"))
            }
            Self::Within(low, high, reason) => (!(v > low && v < high)).then(|| reason.to_owned()),
        }
    }
}

/// Every variable the functions read, each declared once.
pub mod vars {
    use super::{Accepts, Text, Var};
    use domain::defaults as d;

    const DAY: u64 = 86_400;
    const POSITIVE_SECONDS: &str = "must be a number of seconds greater than 0";

    // Resources of the stack.
    pub const TRANSACTIONS_TABLE: Text = Text::required("TRANSACTIONS_TABLE");
    pub const PAYLOADS_TABLE: Text = Text::required("PAYLOADS_TABLE");
    pub const AUDIT_TABLE: Text = Text::required("AUDIT_TABLE");
    pub const REQUEST_QUEUE_URL: Text = Text::required("REQUEST_QUEUE_URL");
    pub const RETRY_QUEUE_URL: Text = Text::required("RETRY_QUEUE_URL");
    pub const RESPONSE_DLQ_URL: Text = Text::required("RESPONSE_DLQ_URL");
    pub const RETRY_DLQ_URL: Text = Text::required("RETRY_DLQ_URL");
    pub const INTAKE_DLQ_URL: Text = Text::required("INTAKE_DLQ_URL");
    pub const RESPONSE_QUEUE_URL: Text = Text::required("RESPONSE_QUEUE_URL");
    pub const REQUEST_DLQ_URL: Text = Text::required("REQUEST_DLQ_URL");
    /// How requests reach the request queue: `direct` (each deciding function
    /// publishes) or `outbox` (the record is left SENDING and the publisher publishes
    /// it to a FIFO queue); `domain::decide::Delivery`.
    pub const REQUEST_DELIVERY: Text = Text::or(
        "REQUEST_DELIVERY",
        domain::decide::Delivery::Direct.as_str(),
    );
    /// Empty or unset: no circuit breaker, requests always go out.
    pub const BREAKER_TABLE: Text = Text::or("BREAKER_TABLE", "");

    // Schedules: the dedicated group, the target (the retry queue), the role the
    // scheduler assumes and where undeliverable events go.
    pub const SCHEDULE_GROUP: Text = Text::required("SCHEDULE_GROUP");
    pub const RETRY_QUEUE_ARN: Text = Text::required("RETRY_QUEUE_ARN");
    pub const SCHEDULER_ROLE_ARN: Text = Text::required("SCHEDULER_ROLE_ARN");
    pub const SCHEDULER_DLQ_ARN: Text = Text::required("SCHEDULER_DLQ_ARN");
    pub const SCHEDULER_RETRY_ATTEMPTS: Var<u32> = Var::between(
        "SCHEDULER_RETRY_ATTEMPTS",
        d::SCHEDULER_RETRY_ATTEMPTS,
        0,
        185,
    );
    pub const SCHEDULER_MAX_EVENT_AGE_SECONDS: Var<u32> = Var::between(
        "SCHEDULER_MAX_EVENT_AGE_SECONDS",
        d::SCHEDULER_MAX_EVENT_AGE_SECONDS,
        60,
        86_400,
    );

    // Backoff.
    pub const BACKOFF_BASE_SECONDS: Var<f64> = Var {
        name: "BACKOFF_BASE_SECONDS",
        default: Some(d::BACKOFF_BASE.as_secs_f64()),
        accepts: Accepts::Within(0.0, 1e12, POSITIVE_SECONDS),
    };
    pub const BACKOFF_FACTOR: Var<f64> = Var::any("BACKOFF_FACTOR", d::BACKOFF_FACTOR);
    pub const BACKOFF_CAP_SECONDS: Var<f64> = Var {
        name: "BACKOFF_CAP_SECONDS",
        default: Some(d::BACKOFF_CAP.as_secs_f64()),
        accepts: Accepts::Within(0.0, 1e12, POSITIVE_SECONDS),
    };
    pub const BACKOFF_JITTER: Var<f64> = Var::any("BACKOFF_JITTER", d::BACKOFF_JITTER);
    pub const BACKOFF_STRICT_CAP: Var<bool> = Var::any("BACKOFF_STRICT_CAP", d::BACKOFF_STRICT_CAP);
    /// Per-reason policies, as JSON; empty: none.
    pub const BACKOFF_OVERRIDES: Text = Text::or("BACKOFF_OVERRIDES", "");

    // Reconciliation and answer deadlines.
    pub const RECONCILE_SHARDS: Var<u16> =
        Var::between("RECONCILE_SHARDS", d::RECONCILE_SHARDS, 1, 1000);
    pub const RECONCILE_THRESHOLD_SECONDS: Var<u64> = Var::between(
        "RECONCILE_THRESHOLD_SECONDS",
        d::RECONCILE_THRESHOLD.as_secs(),
        1,
        30 * DAY,
    );
    pub const RECONCILE_MAX_ITEMS: Var<u32> =
        Var::between("RECONCILE_MAX_ITEMS", d::RECONCILE_MAX_ITEMS, 1, 1_000_000);
    pub const RECONCILE_REQUEUE_MAX: Var<u32> =
        Var::between("RECONCILE_REQUEUE_MAX", d::RECONCILE_REQUEUE_MAX, 1, 1000);
    pub const ANSWER_TIMEOUT_SECONDS: Var<u64> = Var::between(
        "ANSWER_TIMEOUT_SECONDS",
        d::ANSWER_TIMEOUT.as_secs(),
        1,
        30 * DAY,
    );
    pub const ANSWER_REPUBLISH_MAX: Var<u32> =
        Var::between("ANSWER_REPUBLISH_MAX", d::ANSWER_REPUBLISH_MAX, 0, 100);
    pub const TECHNICAL_RESEND_MAX: Var<u32> = Var::between(
        "TECHNICAL_RESEND_MAX",
        d::TECHNICAL_RESEND_MAX,
        0,
        d::TECHNICAL_RESEND_LIMIT,
    );

    /// How long a transaction may stay open (from its creation or its last replay).
    pub const TRANSACTION_DEADLINE_SECONDS: Var<u64> = Var::between(
        "TRANSACTION_DEADLINE_SECONDS",
        d::TRANSACTION_DEADLINE.as_secs(),
        60,
        365 * DAY,
    );

    /// The attempt budget of a transaction started without one (the starter);
    /// required: the deployment's `DefaultMaxAttempts`, never a built-in value.
    pub const DEFAULT_MAX_ATTEMPTS: Var<u32> = Var {
        name: "DEFAULT_MAX_ATTEMPTS",
        default: None,
        accepts: Accepts::Between(1, domain::ids::MAX_ATTEMPTS_LIMIT),
    };

    // The HTTP bridge (checked further when the bridge is built: URL, JSON).
    /// `https://…` (`http://` only on loopback); the path may hold `{transaction_id}`.
    pub const HTTP_ENDPOINT: Text = Text::required("HTTP_ENDPOINT");
    pub const HTTP_METHOD: Text = Text::or("HTTP_METHOD", "POST");
    /// Static headers, a JSON object of strings; empty: none.
    pub const HTTP_HEADERS: Text = Text::or("HTTP_HEADERS", "");
    pub const HTTP_IDEMPOTENCY_HEADER: Text =
        Text::or("HTTP_IDEMPOTENCY_HEADER", "Idempotency-Key");
    pub const HTTP_AUTH_HEADER: Text = Text::or("HTTP_AUTH_HEADER", "Authorization");
    /// A Secrets Manager secret ARN, or an SSM parameter ARN or name; empty: no auth
    /// header.
    pub const HTTP_AUTH_SECRET: Text = Text::or("HTTP_AUTH_SECRET", "");
    /// The classification overrides, JSON; empty: the defaults.
    pub const HTTP_CLASSIFICATION: Text = Text::or("HTTP_CLASSIFICATION", "");
    /// What an answer saying the request can never succeed becomes: `dead-letter`
    /// (the request to the request DLQ) or `reject` (a REJECTED answer).
    pub const HTTP_OPERATOR_CASES: Text = Text::or("HTTP_OPERATOR_CASES", "dead-letter");
    pub const HTTP_CONNECT_TIMEOUT_SECONDS: Var<u64> =
        Var::between("HTTP_CONNECT_TIMEOUT_SECONDS", 3, 1, 20);
    /// The whole call, answer body included; below the function's timeout.
    pub const HTTP_TIMEOUT_SECONDS: Var<u64> = Var::between("HTTP_TIMEOUT_SECONDS", 10, 1, 25);

    // Throughput, audit and metrics.
    /// Per execution environment; required.
    pub const MAX_REQUESTS_PER_SECOND: Var<f64> = Var {
        name: "MAX_REQUESTS_PER_SECOND",
        default: None,
        accepts: Accepts::Within(0.0, f64::INFINITY, "must be a number greater than 0"),
    };
    pub const BATCH_CONCURRENCY: Var<usize> =
        Var::between("BATCH_CONCURRENCY", d::BATCH_CONCURRENCY, 1, 1000);
    pub const AUDIT_RETENTION_DAYS: Var<u32> =
        Var::between("AUDIT_RETENTION_DAYS", d::AUDIT_RETENTION_DAYS, 1, 36_500);
    pub const METRICS_NAMESPACE: Text = Text::or("METRICS_NAMESPACE", d::METRICS_NAMESPACE);
    /// Days a finished transaction and its payload are kept (`domain::retention`).
    pub const RETENTION_DAYS: Var<u32> = Var::between(
        "RETENTION_DAYS",
        d::RETENTION_DAYS,
        domain::retention::RETENTION_DAYS_MIN,
        domain::retention::RETENTION_DAYS_MAX,
    );

    // The circuit breaker (see `domain::breaker::BreakerSettings`).
    pub const BREAKER_WINDOW_SECONDS: Var<u64> = Var::between(
        "BREAKER_WINDOW_SECONDS",
        d::BREAKER_WINDOW.as_secs(),
        1,
        DAY,
    );
    pub const BREAKER_MIN_CALLS: Var<u32> =
        Var::between("BREAKER_MIN_CALLS", d::BREAKER_MIN_CALLS, 1, 1_000_000);
    pub const BREAKER_FAILURE_RATIO: Var<f64> =
        Var::any("BREAKER_FAILURE_RATIO", d::BREAKER_FAILURE_RATIO);
    pub const BREAKER_DEADLINE_BURST: Var<u32> = Var::between(
        "BREAKER_DEADLINE_BURST",
        d::BREAKER_DEADLINE_BURST,
        1,
        1_000_000,
    );
    pub const BREAKER_COOLDOWN_SECONDS: Var<u64> = Var::between(
        "BREAKER_COOLDOWN_SECONDS",
        d::BREAKER_COOLDOWN.as_secs(),
        1,
        DAY,
    );
    pub const BREAKER_COOLDOWN_MAX_SECONDS: Var<u64> = Var::between(
        "BREAKER_COOLDOWN_MAX_SECONDS",
        d::BREAKER_COOLDOWN_MAX.as_secs(),
        1,
        DAY,
    );
    pub const BREAKER_PROBES: Var<u32> =
        Var::between("BREAKER_PROBES", d::BREAKER_PROBES, 1, 10_000);
    /// At most `BREAKER_COOLDOWN_SECONDS` (checked at start-up).
    pub const BREAKER_REFRESH_SECONDS: Var<u64> = Var::between(
        "BREAKER_REFRESH_SECONDS",
        d::BREAKER_REFRESH.as_secs(),
        1,
        300,
    );
}

/// The one reader of variables: reads through a lookup function, keeps every error
/// (one per variable) and carries on (so every variable is read whatever the values),
/// and records every name it was asked for.
struct Env<'a> {
    lookup: &'a dyn Fn(&str) -> Option<String>,
    asked: RefCell<Vec<&'static str>>,
    errors: RefCell<Vec<ConfigError>>,
}

impl<'a> Env<'a> {
    fn new(lookup: &'a dyn Fn(&str) -> Option<String>) -> Self {
        Self {
            lookup,
            asked: RefCell::new(Vec::new()),
            errors: RefCell::new(Vec::new()),
        }
    }

    /// A configuration read with `read`, or its error: the one met, or
    /// [`ConfigError::Several`] in the order read.
    fn read<C>(
        lookup: &dyn Fn(&str) -> Option<String>,
        read: fn(&Env<'_>) -> C,
    ) -> Result<C, ConfigError> {
        let env = Env::new(lookup);
        let value = read(&env);
        let mut errors = env.errors.into_inner();
        match errors.len() {
            0 => Ok(value),
            1 => Err(errors.remove(0)),
            _ => Err(ConfigError::Several(errors)),
        }
    }

    /// The names `read` asks for, in the order it asks.
    fn names<C>(read: fn(&Env<'_>) -> C) -> Vec<&'static str> {
        let env = Env::new(&|_| None);
        read(&env);
        env.asked.into_inner()
    }

    /// Keeps `e`, unless its variable already failed (a value refused once is not
    /// refused again by a check that uses it).
    fn fail(&self, e: ConfigError) {
        let mut errors = self.errors.borrow_mut();
        if errors.iter().all(|known| known.name() != e.name()) {
            errors.push(e);
        }
    }

    /// The variable's text, absent when unset or blank.
    fn raw(&self, name: &'static str) -> Option<String> {
        let mut asked = self.asked.borrow_mut();
        if !asked.contains(&name) {
            asked.push(name);
        }
        (self.lookup)(name).filter(|v| !v.trim().is_empty())
    }

    fn text(&self, var: &Text) -> String {
        match (self.raw(var.name), var.default) {
            (Some(v), _) => v.trim().to_owned(),
            (None, Some(default)) => default.to_owned(),
            (None, None) => {
                self.fail(ConfigError::Missing { name: var.name });
                String::new()
            }
        }
    }

    /// The variable's value; after an error, its default (or `T::default()`).
    fn get<T: Value>(&self, var: &Var<T>) -> T {
        let fallback = var.default.unwrap_or_default();
        let Some(raw) = self.raw(var.name) else {
            if var.default.is_none() {
                self.fail(ConfigError::Missing { name: var.name });
            }
            return fallback;
        };
        let refused = match T::parse(raw.trim()) {
            Ok(v) => match var.accepts.refusal(v) {
                None => return v,
                Some(reason) => (v.to_string(), reason),
            },
            Err(reason) => (raw, reason),
        };
        self.fail(ConfigError::Invalid {
            name: var.name,
            value: refused.0,
            reason: refused.1,
        });
        fallback
    }

    fn seconds(&self, var: &Var<u64>) -> Duration {
        Duration::from_secs(self.get(var))
    }

    /// Refuses `value` of `var` above `bound` of `bound_var`.
    fn at_most(&self, var: &Var<u64>, value: Duration, bound_var: &Var<u64>, bound: Duration) {
        if value > bound {
            self.fail(ConfigError::Invalid {
                name: var.name,
                value: value.as_secs().to_string(),
                reason: format!(
                    "must be at most {}={:?}",
                    bound_var.name,
                    bound.as_secs().to_string()
                ),
            });
        }
    }
}

fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// Declares a function's configuration: each field with the expression reading it
/// through `$env` (after the statements of `first`, if any), read in the order
/// written; and its `env_vars()`, `from_env()` and `from_lookup()`.
macro_rules! config {
    ($(#[$m:meta])* pub struct $config:ident |$env:ident| $(first { $($first:tt)* })? {
        $($(#[$fm:meta])* pub $field:ident: $ty:ty = $read:expr,)+
    }) => {
        $(#[$m])*
        pub struct $config {
            $($(#[$fm])* pub $field: $ty,)+
        }

        impl $config {
            /// Every environment variable the function reads.
            pub fn env_vars() -> Vec<&'static str> {
                Env::names(Self::read)
            }

            pub fn from_env() -> Result<Self, ConfigError> {
                Self::from_lookup(&process_env)
            }

            pub fn from_lookup(
                lookup: &dyn Fn(&str) -> Option<String>,
            ) -> Result<Self, ConfigError> {
                Env::read(lookup, Self::read)
            }

            fn read($env: &Env<'_>) -> Self {
                $($($first)*)?
                Self { $($field: $read,)+ }
            }
        }
    };
}

/// RETENTION_DAYS, for the functions that end transactions (their terminal writes
/// set the record's TTL) and the audit writer (the payload's).
fn retention(env: &Env<'_>) -> domain::retention::Retention {
    let days = env.get(&RETENTION_DAYS);
    domain::retention::Retention::days(days).unwrap_or_else(|reason| {
        env.fail(ConfigError::Invalid {
            name: RETENTION_DAYS.name,
            value: days.to_string(),
            reason,
        });
        domain::retention::Retention::DEFAULT
    })
}

/// REQUEST_DELIVERY: `direct` or `outbox`; any other value is refused naming both.
fn delivery(env: &Env<'_>) -> Delivery {
    let raw = env.text(&REQUEST_DELIVERY);
    Delivery::parse(&raw).unwrap_or_else(|| {
        env.fail(ConfigError::Invalid {
            name: REQUEST_DELIVERY.name,
            value: raw.clone(),
            reason: format!(
                "must be {} or {}",
                Delivery::Direct.as_str(),
                Delivery::Outbox.as_str()
            ),
        });
        Delivery::default()
    })
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
            timeout: domain::defaults::ANSWER_TIMEOUT,
            republish_max: domain::defaults::ANSWER_REPUBLISH_MAX,
        }
    }
}

/// The circuit breaker of the external service (`BREAKER_TABLE` and the
/// `BREAKER_*` settings). Absent `BREAKER_TABLE`: no breaker, requests always go out.
#[derive(Debug, Clone, PartialEq)]
pub struct BreakerConfig {
    pub table: String,
    pub settings: domain::breaker::BreakerSettings,
    /// How long an execution environment uses its last read of the breaker
    /// (`BREAKER_REFRESH_SECONDS`, 1–300, default 5, at most the cool-down).
    pub refresh: Duration,
}

impl BreakerConfig {
    fn read(env: &Env<'_>) -> Option<Self> {
        use domain::breaker::BreakerSettings;
        // Every setting is read even without a table, so a bad value is never silent.
        let settings = BreakerSettings {
            window: env.seconds(&BREAKER_WINDOW_SECONDS),
            min_calls: env.get(&BREAKER_MIN_CALLS),
            failure_ratio: env.get(&BREAKER_FAILURE_RATIO),
            deadline_burst: env.get(&BREAKER_DEADLINE_BURST),
            cooldown: env.seconds(&BREAKER_COOLDOWN_SECONDS),
            cooldown_max: env.seconds(&BREAKER_COOLDOWN_MAX_SECONDS),
            probes: env.get(&BREAKER_PROBES),
        }
        .validated()
        .unwrap_or_else(|e| {
            env.fail(ConfigError::Invalid {
                name: match e.name {
                    "window" => BREAKER_WINDOW_SECONDS.name,
                    "min_calls" => BREAKER_MIN_CALLS.name,
                    "failure_ratio" => BREAKER_FAILURE_RATIO.name,
                    "deadline_burst" => BREAKER_DEADLINE_BURST.name,
                    "cooldown" => BREAKER_COOLDOWN_SECONDS.name,
                    "cooldown_max" => BREAKER_COOLDOWN_MAX_SECONDS.name,
                    _ => BREAKER_PROBES.name,
                },
                value: e.value.clone(),
                reason: e.reason.to_owned(),
            });
            BreakerSettings::default()
        });
        // A state read less often than it can change would keep a closed breaker's
        // requests held back past its cool-down.
        let refresh = env.seconds(&BREAKER_REFRESH_SECONDS);
        env.at_most(
            &BREAKER_REFRESH_SECONDS,
            refresh,
            &BREAKER_COOLDOWN_SECONDS,
            settings.cooldown,
        );
        let table = env.text(&BREAKER_TABLE);
        (!table.is_empty()).then_some(Self {
            table,
            settings,
            refresh,
        })
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
    fn read(env: &Env<'_>) -> Self {
        Self {
            group: env.text(&SCHEDULE_GROUP),
            retry_queue_arn: env.text(&RETRY_QUEUE_ARN),
            role_arn: env.text(&SCHEDULER_ROLE_ARN),
            dlq_arn: env.text(&SCHEDULER_DLQ_ARN),
            retry_attempts: env.get(&SCHEDULER_RETRY_ATTEMPTS),
            max_event_age_seconds: env.get(&SCHEDULER_MAX_EVENT_AGE_SECONDS),
        }
    }
}

/// Builds the backoff policies from `BACKOFF_*`; errors name the variable.
fn policies(env: &Env<'_>) -> PolicySet {
    let policy = RetryPolicy::new(
        Duration::from_secs_f64(env.get(&BACKOFF_BASE_SECONDS)),
        env.get(&BACKOFF_FACTOR),
        Duration::from_secs_f64(env.get(&BACKOFF_CAP_SECONDS)),
        env.get(&BACKOFF_JITTER),
        env.get(&BACKOFF_STRICT_CAP),
    )
    .unwrap_or_else(|e| {
        env.fail(match e {
            PolicyError::Invalid { field, value, rule } => ConfigError::Invalid {
                name: match field {
                    "base" => BACKOFF_BASE_SECONDS.name,
                    "factor" => BACKOFF_FACTOR.name,
                    "cap" => BACKOFF_CAP_SECONDS.name,
                    _ => BACKOFF_JITTER.name,
                },
                value: value.to_string(),
                reason: rule.to_owned(),
            },
            PolicyError::Overrides { detail } => ConfigError::Invalid {
                name: BACKOFF_OVERRIDES.name,
                value: String::new(),
                reason: detail,
            },
        });
        RetryPolicy::article_default()
    });
    let overrides = env.text(&BACKOFF_OVERRIDES);
    PolicySet::uniform(policy.clone())
        .with_overrides_json(&overrides)
        .unwrap_or_else(|e| {
            env.fail(ConfigError::Invalid {
                name: BACKOFF_OVERRIDES.name,
                value: overrides.clone(),
                reason: e.to_string(),
            });
            PolicySet::uniform(policy)
        })
}

config! {
    /// The response handler (A).
    #[derive(Debug, Clone, PartialEq)]
    pub struct ResponseHandlerConfig |env| {
        pub transactions_table: String = env.text(&TRANSACTIONS_TABLE),
        pub reconcile_shards: u16 = env.get(&RECONCILE_SHARDS),
        pub scheduler: SchedulerSettings = SchedulerSettings::read(env),
        pub policies: PolicySet = policies(env),
        pub response_dlq_url: String = env.text(&RESPONSE_DLQ_URL),
        /// The retry queue: a retry whose instant has already passed goes there at once.
        pub retry_queue_url: String = env.text(&RETRY_QUEUE_URL),
        /// ANSWER_TIMEOUT_SECONDS: the deadline of a request this handler records as sent.
        pub answer_timeout: Duration = env.seconds(&ANSWER_TIMEOUT_SECONDS),
        /// AUDIT_TABLE: where a conflicting SUCCESS is noted (it changes no record, so
        /// the stream never carries it).
        pub audit_table: String = env.text(&AUDIT_TABLE),
        /// AUDIT_RETENTION_DAYS: the notes expire with the rest of the trail.
        pub audit_retention_days: u32 = env.get(&AUDIT_RETENTION_DAYS),
        /// TECHNICAL_RESEND_MAX: technical re-sends of a transaction before an ERROR ends
        /// it FAILED.
        pub technical_resend_max: u32 = env.get(&TECHNICAL_RESEND_MAX),
        /// TRANSACTION_DEADLINE_SECONDS: past it, an answer that would open a wait ends
        /// the transaction FAILED/EXPIRED.
        pub transaction_deadline: Duration = env.seconds(&TRANSACTION_DEADLINE_SECONDS),
        /// The circuit breaker its answers feed.
        pub breaker: Option<BreakerConfig> = BreakerConfig::read(env),
        pub batch_concurrency: usize = env.get(&BATCH_CONCURRENCY),
        pub metrics_namespace: String = env.text(&METRICS_NAMESPACE),
        /// RETENTION_DAYS: a transaction it ends is kept that long.
        pub retention: domain::retention::Retention = retention(env),
        /// REQUEST_DELIVERY: how a technical re-send goes out.
        pub delivery: Delivery = delivery(env),
    }
}

config! {
    /// The retry handler (B).
    #[derive(Debug, Clone, PartialEq)]
    pub struct RetryHandlerConfig |env| first {
        // Read first, as `env_vars()` lists it.
        let max_requests_per_second = env.get(&MAX_REQUESTS_PER_SECOND);
    } {
        pub transactions_table: String = env.text(&TRANSACTIONS_TABLE),
        pub payloads_table: String = env.text(&PAYLOADS_TABLE),
        pub request_queue_url: String = env.text(&REQUEST_QUEUE_URL),
        pub retry_dlq_url: String = env.text(&RETRY_DLQ_URL),
        pub reconcile_shards: u16 = env.get(&RECONCILE_SHARDS),
        /// Per concurrent execution; the fleet bound is ESM MaximumConcurrency × this.
        pub max_requests_per_second: f64 = max_requests_per_second,
        /// ANSWER_TIMEOUT_SECONDS: the deadline of each request this handler publishes.
        pub answer_timeout: Duration = env.seconds(&ANSWER_TIMEOUT_SECONDS),
        /// TRANSACTION_DEADLINE_SECONDS: past it, a retry event ends the transaction
        /// FAILED/EXPIRED instead of sending.
        pub transaction_deadline: Duration = env.seconds(&TRANSACTION_DEADLINE_SECONDS),
        /// The retry queue: an event the breaker holds back goes back on it, delayed.
        pub retry_queue_url: String = env.text(&RETRY_QUEUE_URL),
        /// The circuit breaker that holds requests back.
        pub breaker: Option<BreakerConfig> = BreakerConfig::read(env),
        pub batch_concurrency: usize = env.get(&BATCH_CONCURRENCY),
        pub metrics_namespace: String = env.text(&METRICS_NAMESPACE),
        /// RETENTION_DAYS: a transaction it ends (past its deadline) is kept that long.
        pub retention: domain::retention::Retention = retention(env),
        /// REQUEST_DELIVERY: `outbox`, the accepted retry is left SENDING for the
        /// publisher instead of published here.
        pub delivery: Delivery = delivery(env),
    }
}

impl RetryHandlerConfig {
    /// Minimum interval between two publishes of one process.
    pub fn min_publish_interval(&self) -> Duration {
        Duration::from_secs_f64(1.0 / self.max_requests_per_second)
    }
}

config! {
    /// The reconciler (cron).
    #[derive(Debug, Clone, PartialEq)]
    pub struct ReconcilerConfig |env| {
        pub transactions_table: String = env.text(&TRANSACTIONS_TABLE),
        /// PAYLOADS_TABLE: an unanswered request is published again with its payload.
        pub payloads_table: String = env.text(&PAYLOADS_TABLE),
        pub reconcile_shards: u16 = env.get(&RECONCILE_SHARDS),
        pub retry_queue_url: String = env.text(&RETRY_QUEUE_URL),
        /// REQUEST_QUEUE_URL: where an unanswered request is published again.
        pub request_queue_url: String = env.text(&REQUEST_QUEUE_URL),
        pub answer: AnswerDeadline = AnswerDeadline {
            timeout: env.seconds(&ANSWER_TIMEOUT_SECONDS),
            republish_max: env.get(&ANSWER_REPUBLISH_MAX),
        },
        /// RECONCILE_REQUEUE_MAX: requeues without progress before a record is parked.
        pub requeue_max: u32 = env.get(&RECONCILE_REQUEUE_MAX),
        /// TRANSACTION_DEADLINE_SECONDS: a stuck or unanswered record past it ends
        /// FAILED/EXPIRED.
        pub transaction_deadline: Duration = env.seconds(&TRANSACTION_DEADLINE_SECONDS),
        pub scheduler: SchedulerSettings = SchedulerSettings::read(env),
        pub reconcile_threshold: Duration = env.seconds(&RECONCILE_THRESHOLD_SECONDS),
        pub reconcile_max_items: u32 = env.get(&RECONCILE_MAX_ITEMS),
        /// The circuit breaker: answer deadlines feed it, and while it holds requests
        /// back an unanswered request waits instead of going out again.
        pub breaker: Option<BreakerConfig> = BreakerConfig::read(env),
        pub metrics_namespace: String = env.text(&METRICS_NAMESPACE),
        /// RETENTION_DAYS: a transaction it ends is kept that long.
        pub retention: domain::retention::Retention = retention(env),
        /// REQUEST_DELIVERY: `outbox`, a stuck SENDING is published as the publisher
        /// does, and an unanswered request is never published again.
        pub delivery: Delivery = delivery(env),
        /// AUDIT_TABLE and AUDIT_RETENTION_DAYS: where a send it does not repeat (outbox
        /// mode, claimed too long ago) is noted, kept as long as the rest of the trail.
        pub audit_table: String = env.text(&AUDIT_TABLE),
        pub audit_retention_days: u32 = env.get(&AUDIT_RETENTION_DAYS),
    }
}

config! {
    /// The audit writer (DynamoDB stream consumer).
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct AuditWriterConfig |env| {
        pub audit_table: String = env.text(&AUDIT_TABLE),
        pub retention_days: u32 = env.get(&AUDIT_RETENTION_DAYS),
        /// TRANSACTION_DEADLINE_SECONDS: rows are kept the retention past the last
        /// instant their transaction may be open (`audit::Retention`).
        pub transaction_deadline: Duration = env.seconds(&TRANSACTION_DEADLINE_SECONDS),
        pub metrics_namespace: String = env.text(&METRICS_NAMESPACE),
        /// PAYLOADS_TABLE and RETENTION_DAYS: a finished transaction's payload expires
        /// with its record (`AuditWriter::with_payloads`).
        pub payloads_table: String = env.text(&PAYLOADS_TABLE),
        pub retention: domain::retention::Retention = retention(env),
    }
}

config! {
    /// The starter: start messages from the intake queue.
    #[derive(Debug, Clone, PartialEq)]
    pub struct StarterConfig |env| {
        pub transactions_table: String = env.text(&TRANSACTIONS_TABLE),
        /// PAYLOADS_TABLE: the payload is stored with the record.
        pub payloads_table: String = env.text(&PAYLOADS_TABLE),
        /// REQUEST_QUEUE_URL: where attempt 1 is published.
        pub request_queue_url: String = env.text(&REQUEST_QUEUE_URL),
        /// INTAKE_DLQ_URL: where a message that can never start goes.
        pub intake_dlq_url: String = env.text(&INTAKE_DLQ_URL),
        /// DEFAULT_MAX_ATTEMPTS: the budget of a message without `max_attempts`.
        pub default_max_attempts: u32 = env.get(&DEFAULT_MAX_ATTEMPTS),
        /// RECONCILE_SHARDS and RECONCILE_THRESHOLD_SECONDS: the new record's index entry
        /// (watched from its answer deadline minus the threshold).
        pub reconcile_shards: u16 = env.get(&RECONCILE_SHARDS),
        pub reconcile_threshold: Duration = env.seconds(&RECONCILE_THRESHOLD_SECONDS),
        /// ANSWER_TIMEOUT_SECONDS: the deadline of attempt 1.
        pub answer_timeout: Duration = env.seconds(&ANSWER_TIMEOUT_SECONDS),
        /// MAX_REQUESTS_PER_SECOND: first requests one execution environment publishes
        /// at most (the template's IntakeStartsPerSecond).
        pub max_requests_per_second: f64 = env.get(&MAX_REQUESTS_PER_SECOND),
        pub batch_concurrency: usize = env.get(&BATCH_CONCURRENCY),
        pub metrics_namespace: String = env.text(&METRICS_NAMESPACE),
        /// REQUEST_DELIVERY: `outbox`, the record is created SENDING for the publisher
        /// instead of attempt 1 published here.
        pub delivery: Delivery = delivery(env),
    }
}

config! {
    /// The publisher (outbox mode): SENDING records from the transactions table's
    /// stream, each request published once to the FIFO request queue. It runs only in
    /// outbox mode, so it reads no REQUEST_DELIVERY.
    #[derive(Debug, Clone, PartialEq)]
    pub struct PublisherConfig |env| {
        pub transactions_table: String = env.text(&TRANSACTIONS_TABLE),
        /// PAYLOADS_TABLE: the request carries the payload the transaction started with.
        pub payloads_table: String = env.text(&PAYLOADS_TABLE),
        /// REQUEST_QUEUE_URL: the FIFO request queue.
        pub request_queue_url: String = env.text(&REQUEST_QUEUE_URL),
        /// RECONCILE_SHARDS and RECONCILE_THRESHOLD_SECONDS: the index entry of the
        /// record it marks IN_PROGRESS (watched from its answer deadline).
        pub reconcile_shards: u16 = env.get(&RECONCILE_SHARDS),
        pub reconcile_threshold: Duration = env.seconds(&RECONCILE_THRESHOLD_SECONDS),
        /// ANSWER_TIMEOUT_SECONDS: the deadline of each request it publishes.
        pub answer_timeout: Duration = env.seconds(&ANSWER_TIMEOUT_SECONDS),
        /// MAX_REQUESTS_PER_SECOND: requests one execution environment publishes at most
        /// (in outbox mode the publisher, not the retry handler, sends them).
        pub max_requests_per_second: f64 = env.get(&MAX_REQUESTS_PER_SECOND),
        /// AUDIT_TABLE, AUDIT_RETENTION_DAYS and TRANSACTION_DEADLINE_SECONDS: where a
        /// send it does not repeat (claimed too long ago) is noted, kept as long as the
        /// rest of the trail.
        pub audit_table: String = env.text(&AUDIT_TABLE),
        pub audit_retention_days: u32 = env.get(&AUDIT_RETENTION_DAYS),
        pub transaction_deadline: Duration = env.seconds(&TRANSACTION_DEADLINE_SECONDS),
        pub batch_concurrency: usize = env.get(&BATCH_CONCURRENCY),
        pub metrics_namespace: String = env.text(&METRICS_NAMESPACE),
    }
}

config! {
    /// The HTTP bridge: requests from the request queue to an HTTP endpoint, answers to
    /// the response queue.
    #[derive(Debug, Clone, PartialEq)]
    pub struct HttpBridgeConfig |env| first {
        let connect_timeout = env.seconds(&HTTP_CONNECT_TIMEOUT_SECONDS);
        let timeout = env.seconds(&HTTP_TIMEOUT_SECONDS);
        env.at_most(
            &HTTP_CONNECT_TIMEOUT_SECONDS,
            connect_timeout,
            &HTTP_TIMEOUT_SECONDS,
            timeout,
        );
    } {
        /// RESPONSE_QUEUE_URL: where each classified answer goes.
        pub response_queue_url: String = env.text(&RESPONSE_QUEUE_URL),
        /// REQUEST_DLQ_URL: where a request the endpoint says can never succeed goes.
        pub request_dlq_url: String = env.text(&REQUEST_DLQ_URL),
        pub endpoint: String = env.text(&HTTP_ENDPOINT),
        pub method: String = env.text(&HTTP_METHOD),
        pub headers_json: String = env.text(&HTTP_HEADERS),
        pub idempotency_header: String = env.text(&HTTP_IDEMPOTENCY_HEADER),
        pub auth_header: String = env.text(&HTTP_AUTH_HEADER),
        pub auth_secret: String = env.text(&HTTP_AUTH_SECRET),
        pub classification_json: String = env.text(&HTTP_CLASSIFICATION),
        /// HTTP_OPERATOR_CASES, unchecked (the bridge's wiring checks it).
        pub operator_cases: String = env.text(&HTTP_OPERATOR_CASES),
        pub connect_timeout: Duration = connect_timeout,
        /// At most the function's timeout minus 5 s (checked here).
        pub timeout: Duration = timeout,
        pub batch_concurrency: usize = env.get(&BATCH_CONCURRENCY),
        pub metrics_namespace: String = env.text(&METRICS_NAMESPACE),
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
    /// Start messages from services (the starter's queue) and its DLQ.
    pub intake_queue: String,
    pub intake_dlq: String,
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
            intake_queue: n("intake"),
            intake_dlq: n("intake-dlq"),
            schedule_group: n("retries"),
            scheduler_role: n("scheduler"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use domain::defaults;
    use std::collections::HashMap;

    fn lookup(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |k| map.get(k).cloned()
    }

    const SCHED: &[(&str, &str)] = &[
        (SCHEDULE_GROUP.name, "g"),
        (RETRY_QUEUE_ARN.name, "arn:aws:sqs:us-east-1:1:retry"),
        (SCHEDULER_ROLE_ARN.name, "arn:aws:iam::1:role/s"),
        (SCHEDULER_DLQ_ARN.name, "arn:aws:sqs:us-east-1:1:dlq"),
    ];

    fn response_env(extra: &[(&'static str, &'static str)]) -> Vec<(&'static str, &'static str)> {
        let mut v: Vec<(&str, &str)> = vec![
            (TRANSACTIONS_TABLE.name, "tx"),
            (RESPONSE_DLQ_URL.name, "http://q/dlq"),
            (RETRY_QUEUE_URL.name, "http://q/retry"),
            (AUDIT_TABLE.name, "audit"),
        ];
        v.extend_from_slice(SCHED);
        v.extend_from_slice(extra);
        v
    }

    fn response_error(extra: &[(&'static str, &'static str)]) -> ConfigError {
        ResponseHandlerConfig::from_lookup(&lookup(&response_env(extra))).unwrap_err()
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
            .filter(|(k, _)| *k != AUDIT_TABLE.name)
            .collect();
        let e = ResponseHandlerConfig::from_lookup(&lookup(&without)).unwrap_err();
        assert_eq!(
            e,
            ConfigError::Missing {
                name: AUDIT_TABLE.name
            }
        );
    }

    #[test]
    fn errors_name_variable_and_value() {
        let e = response_error(&[(BACKOFF_FACTOR.name, "0.5")]);
        assert!(
            matches!(&e, ConfigError::Invalid { name, .. } if *name == BACKOFF_FACTOR.name),
            "{e}"
        );
        assert!(e.to_string().contains("0.5"), "{e}");

        let e = response_error(&[(RECONCILE_SHARDS.name, "eight")]);
        let shown = format!("{}=\"eight\"", RECONCILE_SHARDS.name);
        assert!(e.to_string().contains(&shown), "{e}");

        let e = response_error(&[(BACKOFF_OVERRIDES.name, "{nope")]);
        let shown = format!("{}=\"{{nope\"", BACKOFF_OVERRIDES.name);
        assert!(e.to_string().contains(&shown), "{e}");

        let e = response_error(&[(SCHEDULER_MAX_EVENT_AGE_SECONDS.name, "10")]);
        assert!(e.to_string().contains("between 60 and 86400"), "{e}");

        let e = response_error(&[(BACKOFF_STRICT_CAP.name, "maybe")]);
        assert!(e.to_string().contains("must be true or false"), "{e}");

        let e = response_error(&[(BACKOFF_BASE_SECONDS.name, "-1")]);
        assert_eq!(
            e,
            ConfigError::Invalid {
                name: BACKOFF_BASE_SECONDS.name,
                value: "-1".into(),
                reason: "must be a number of seconds greater than 0".into()
            }
        );

        // Every bad variable at once, in the order read: here each required one
        // missing, and a bad value among them.
        let e = ResponseHandlerConfig::from_lookup(&lookup(&[
            (TRANSACTIONS_TABLE.name, "t"),
            (BACKOFF_FACTOR.name, "0.5"),
        ]))
        .unwrap_err();
        let ConfigError::Several(all) = &e else {
            panic!("expected every error, got {e:?}");
        };
        let names: Vec<&str> = all.iter().map(ConfigError::name).collect();
        assert_eq!(
            names,
            [
                SCHEDULE_GROUP.name,
                RETRY_QUEUE_ARN.name,
                SCHEDULER_ROLE_ARN.name,
                SCHEDULER_DLQ_ARN.name,
                BACKOFF_FACTOR.name,
                RESPONSE_DLQ_URL.name,
                RETRY_QUEUE_URL.name,
                AUDIT_TABLE.name,
            ]
        );
        assert_eq!(e.name(), SCHEDULE_GROUP.name);
        let shown = e.to_string();
        let first_two = format!(
            "8 environment variables are missing or invalid: environment variable {} is \
             required but not set; environment variable {} is required but not set; ",
            SCHEDULE_GROUP.name, RETRY_QUEUE_ARN.name
        );
        assert!(shown.starts_with(&first_two), "{shown}");
        let bad = format!(
            "environment variable {}=\"0.5\" is invalid",
            BACKOFF_FACTOR.name
        );
        assert!(shown.contains(&bad), "{shown}");
    }

    #[test]
    fn backoff_variables_build_the_policy_set() {
        let c = ResponseHandlerConfig::from_lookup(&lookup(&response_env(&[
            (BACKOFF_BASE_SECONDS.name, "60"),
            (BACKOFF_FACTOR.name, "3"),
            (BACKOFF_CAP_SECONDS.name, "600"),
            (BACKOFF_JITTER.name, "0"),
            (BACKOFF_STRICT_CAP.name, "true"),
            (
                BACKOFF_OVERRIDES.name,
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

    /// `env_vars()` is what a configuration reads with nothing set; the reader reads
    /// the same variables whatever their values, so the list is complete.
    #[test]
    fn the_variables_read_do_not_depend_on_the_values() {
        type Lookup<'a> = &'a dyn Fn(&str) -> Option<String>;
        fn asked(f: &dyn Fn(Lookup<'_>)) -> Vec<String> {
            let seen = RefCell::new(Vec::<String>::new());
            let l = |k: &str| {
                seen.borrow_mut().push(k.to_owned());
                Some("x".to_owned())
            };
            f(&l);
            let mut v = seen.into_inner();
            v.dedup();
            v
        }
        let owned = |s: Vec<&str>| -> Vec<String> { s.into_iter().map(str::to_owned).collect() };
        macro_rules! reads_its_env_vars {
            ($($config:ident),*) => {$(
                assert_eq!(
                    asked(&|l| drop($config::from_lookup(l))),
                    owned($config::env_vars()),
                    stringify!($config)
                );
            )*};
        }
        reads_its_env_vars!(
            ResponseHandlerConfig,
            RetryHandlerConfig,
            ReconcilerConfig,
            AuditWriterConfig,
            StarterConfig,
            PublisherConfig
        );
        assert_eq!(
            AuditWriterConfig::env_vars(),
            [
                AUDIT_TABLE.name,
                AUDIT_RETENTION_DAYS.name,
                TRANSACTION_DEADLINE_SECONDS.name,
                METRICS_NAMESPACE.name,
                PAYLOADS_TABLE.name,
                RETENTION_DAYS.name
            ]
        );
    }

    fn retry_handler_base() -> Vec<(&'static str, &'static str)> {
        vec![
            (TRANSACTIONS_TABLE.name, "t"),
            (PAYLOADS_TABLE.name, "p"),
            (REQUEST_QUEUE_URL.name, "u"),
            (RETRY_DLQ_URL.name, "d"),
            (RETRY_QUEUE_URL.name, "q"),
            (MAX_REQUESTS_PER_SECOND.name, "4"),
        ]
    }

    fn retry_handler_error(extra: &[(&'static str, &'static str)]) -> ConfigError {
        let mut v = retry_handler_base();
        v.extend_from_slice(extra);
        RetryHandlerConfig::from_lookup(&lookup(&v)).unwrap_err()
    }

    #[test]
    fn the_breaker_is_on_with_its_table_and_its_settings_are_checked() {
        let base = retry_handler_base();
        let off = RetryHandlerConfig::from_lookup(&lookup(&base)).unwrap();
        assert_eq!(off.breaker, None, "no BREAKER_TABLE: no breaker");
        let mut v = base.clone();
        v.push((BREAKER_TABLE.name, "dr-breaker"));
        v.push((BREAKER_PROBES.name, "3"));
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
        for (var, value, shown) in [
            (BREAKER_FAILURE_RATIO.name, "1.5", "=\"1.5\""),
            (BREAKER_PROBES.name, "0", "=\"0\""),
            (BREAKER_COOLDOWN_SECONDS.name, "900", ""),
            (BREAKER_REFRESH_SECONDS.name, "301", "=\"301\""),
        ] {
            let e = retry_handler_error(&[(var, value)]);
            let named = if shown.is_empty() {
                BREAKER_COOLDOWN_MAX_SECONDS.name.to_owned()
            } else {
                format!("{var}{shown}")
            };
            assert!(e.to_string().contains(&named), "{var}: {e}");
        }
    }

    /// The breaker's state is read again at least once per cool-down: a refresh
    /// longer than the cool-down is refused naming both variables and their values.
    #[test]
    fn the_breaker_refresh_is_at_most_its_cooldown() {
        let e = retry_handler_error(&[
            (BREAKER_COOLDOWN_SECONDS.name, "3"),
            (BREAKER_REFRESH_SECONDS.name, "10"),
        ]);
        assert_eq!(
            e.to_string(),
            format!(
                "environment variable {}=\"10\" is invalid: must be at most {}=\"3\"",
                BREAKER_REFRESH_SECONDS.name, BREAKER_COOLDOWN_SECONDS.name
            )
        );
        // The default refresh (5 s) under a shorter cool-down is refused too.
        let e = retry_handler_error(&[(BREAKER_COOLDOWN_SECONDS.name, "2")]);
        assert!(
            matches!(&e, ConfigError::Invalid { name, value, .. }
                if *name == BREAKER_REFRESH_SECONDS.name && value == "5"),
            "{e}"
        );
        // Equal is accepted.
        let mut v = retry_handler_base();
        v.push((BREAKER_TABLE.name, "b"));
        v.push((BREAKER_COOLDOWN_SECONDS.name, "3"));
        v.push((BREAKER_REFRESH_SECONDS.name, "3"));
        let b = RetryHandlerConfig::from_lookup(&lookup(&v))
            .unwrap()
            .breaker
            .unwrap();
        assert_eq!(
            (b.refresh, b.settings.cooldown),
            (Duration::from_secs(3), Duration::from_secs(3))
        );
    }

    #[test]
    fn retry_handler_rate_must_be_positive() {
        let e = retry_handler_error(&[(MAX_REQUESTS_PER_SECOND.name, "0")]);
        let shown = format!("{}=\"0\"", MAX_REQUESTS_PER_SECOND.name);
        assert!(e.to_string().contains(&shown), "{e}");
        let c = RetryHandlerConfig::from_lookup(&lookup(&retry_handler_base())).unwrap();
        assert_eq!(c.min_publish_interval(), Duration::from_millis(250));
        let without: Vec<_> = retry_handler_base()
            .into_iter()
            .filter(|(k, _)| *k != MAX_REQUESTS_PER_SECOND.name)
            .collect();
        let e = RetryHandlerConfig::from_lookup(&lookup(&without)).unwrap_err();
        assert_eq!(
            e,
            ConfigError::Missing {
                name: MAX_REQUESTS_PER_SECOND.name
            }
        );
    }

    /// The starter takes the deployment's default budget and answer timeout: none is
    /// a built-in value, a missing or bad one is refused naming the variable.
    #[test]
    fn the_starter_reads_the_deployments_settings() {
        let base = vec![
            (TRANSACTIONS_TABLE.name, "t"),
            (PAYLOADS_TABLE.name, "p"),
            (REQUEST_QUEUE_URL.name, "u"),
            (INTAKE_DLQ_URL.name, "d"),
            (DEFAULT_MAX_ATTEMPTS.name, "6"),
            (MAX_REQUESTS_PER_SECOND.name, "4"),
            (ANSWER_TIMEOUT_SECONDS.name, "60"),
        ];
        let c = StarterConfig::from_lookup(&lookup(&base)).unwrap();
        assert_eq!(c.default_max_attempts, 6);
        assert_eq!(c.answer_timeout, Duration::from_secs(60));
        assert_eq!(c.intake_dlq_url, "d");
        for gone in [
            DEFAULT_MAX_ATTEMPTS.name,
            MAX_REQUESTS_PER_SECOND.name,
            INTAKE_DLQ_URL.name,
        ] {
            let without: Vec<_> = base.iter().copied().filter(|(k, _)| *k != gone).collect();
            let e = StarterConfig::from_lookup(&lookup(&without)).unwrap_err();
            assert_eq!(e, ConfigError::Missing { name: gone });
        }
        let mut bad = base.clone();
        bad.push((DEFAULT_MAX_ATTEMPTS.name, "0"));
        bad.retain(|(k, v)| *k != DEFAULT_MAX_ATTEMPTS.name || *v == "0");
        let e = StarterConfig::from_lookup(&lookup(&bad)).unwrap_err();
        assert!(e.to_string().contains("DEFAULT_MAX_ATTEMPTS=\"0\""), "{e}");
    }

    /// REQUEST_DELIVERY defaults to `direct`, reads `outbox`, and refuses anything
    /// else naming the variable and the value; every deciding function reads it.
    #[test]
    fn the_delivery_mode_is_read_with_a_default_and_a_clear_error() {
        let c = ResponseHandlerConfig::from_lookup(&lookup(&response_env(&[]))).unwrap();
        assert_eq!(c.delivery, Delivery::Direct);
        let c = ResponseHandlerConfig::from_lookup(&lookup(&response_env(&[(
            REQUEST_DELIVERY.name,
            "outbox",
        )])))
        .unwrap();
        assert_eq!(c.delivery, Delivery::Outbox);
        let e = response_error(&[(REQUEST_DELIVERY.name, "fifo")]);
        assert_eq!(
            e.to_string(),
            "environment variable REQUEST_DELIVERY=\"fifo\" is invalid: must be direct or outbox"
        );
        for names in [
            ResponseHandlerConfig::env_vars(),
            RetryHandlerConfig::env_vars(),
            ReconcilerConfig::env_vars(),
            StarterConfig::env_vars(),
        ] {
            assert!(names.contains(&REQUEST_DELIVERY.name), "{names:?}");
        }
        assert!(!PublisherConfig::env_vars().contains(&REQUEST_DELIVERY.name));
    }

    #[test]
    fn stack_names_follow_the_prefix() {
        let n = StackNames::new("dr");
        assert_eq!(n.transactions_table, "dr-transactions");
        assert_eq!(n.request_dlq, "dr-request-dlq");
        assert_eq!(n.schedule_group, "dr-retries");
        assert_eq!(n.audit_dlq, "dr-audit-dlq");
        assert_eq!(
            (n.intake_queue.as_str(), n.intake_dlq.as_str()),
            ("dr-intake", "dr-intake-dlq")
        );
    }
}
