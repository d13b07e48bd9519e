//! How much load one deployment holds, and which limit binds first (`docs/capacity.md`).
//!
//! Three inputs, each read from where it is kept: the deployment's settings (the
//! template's parameter defaults and the retry queue's retention, [`CapacityInputs`]),
//! the AWS quotas ([`QUOTAS`], every figure from the project's reference sheet with its
//! source; a limit the sheet does not give is named in [`NOT_GIVEN`], never guessed)
//! and the API calls of one retry cycle as the bench measured them (`docs/benchmarks.md`,
//! [`PerCycle`]). The backoff's waits come from the domain's own policy. The unit is a
//! *retry*: a CANCELLED answer with attempts left, which costs one retry cycle.

use crate::report::thousands;
use crate::template::{parameter_default, TemplateError};
use domain::ids::Attempt;
use domain::policy::RetryPolicy;
use serde_yaml::Value;
use std::time::Duration;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum CapacityError {
    #[error(transparent)]
    Template(#[from] TemplateError),
    #[error("template: {0}")]
    Invalid(String),
    #[error("docs/benchmarks.md: no row `{0}` with a number in its first column")]
    MissingRow(&'static str),
}

/// One AWS quota: its figure, its unit and where the figure comes from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Quota {
    pub name: &'static str,
    pub limit: f64,
    pub unit: &'static str,
    pub source: &'static str,
}

const SCHEDULER_SOURCE: &str =
    "EventBridge Scheduler default quotas (adjustable, vary by Region: read Service Quotas)";

/// The quotas the retry cycle meets, as the reference sheet gives them.
pub struct Quotas {
    pub schedules: Quota,
    pub create_schedule_largest: Quota,
    pub create_schedule_other: Quota,
    pub invocations: Quota,
    pub partition_key_writes: Quota,
    pub sqs_in_flight: Quota,
    pub event_source_concurrency: Quota,
}

pub const QUOTAS: Quotas = Quotas {
    schedules: Quota {
        name: "schedules per Region (completed ones count until deleted)",
        limit: 10_000_000.0,
        unit: "schedules",
        source: SCHEDULER_SOURCE,
    },
    create_schedule_largest: Quota {
        name: "CreateSchedule, largest Regions",
        limit: 5_000.0,
        unit: "calls/s",
        source: SCHEDULER_SOURCE,
    },
    create_schedule_other: Quota {
        name: "CreateSchedule, other Regions",
        limit: 250.0,
        unit: "calls/s",
        source: SCHEDULER_SOURCE,
    },
    invocations: Quota {
        name: "schedule target invocations (above it delayed, not dropped)",
        limit: 1_000.0,
        unit: "invocations/s",
        source: SCHEDULER_SOURCE,
    },
    partition_key_writes: Quota {
        name: "DynamoDB writes to one partition key",
        limit: 1_000.0,
        unit: "WRU/s",
        source: "DynamoDB docs (about 1,000 WRU/s per partition key)",
    },
    sqs_in_flight: Quota {
        name: "SQS standard messages in flight per queue",
        limit: 120_000.0,
        unit: "messages",
        source: "SQS docs (about 120,000)",
    },
    event_source_concurrency: Quota {
        name: "SQS event source ScalingConfig.MaximumConcurrency",
        limit: 1_000.0,
        unit: "environments",
        source: "Lambda docs (2 to 1,000)",
    },
};

/// Limits the reference sheet gives no figure for: named, not guessed.
pub const NOT_GIVEN: [&str; 3] = [
    "Lambda concurrent executions per account and Region",
    "SQS standard queue API requests per second",
    "DynamoDB on-demand table and account throughput",
];

/// The settings capacity depends on, from the template.
#[derive(Debug, Clone)]
pub struct CapacityInputs {
    /// RetryHandlerMaxConcurrency × MaxRequestsPerSecond: retried requests per second.
    pub retry_rate_bound: f64,
    /// IntakeMaxConcurrency × IntakeStartsPerSecond: first requests per second.
    pub start_rate_bound: f64,
    /// ResponseHandlerMaxConcurrency × ResponseBatchSize: answers in one wave.
    pub response_records_in_flight: f64,
    pub policy: RetryPolicy,
    pub max_attempts: u32,
    pub shards: f64,
    pub retry_queue_age_alarm_seconds: f64,
    pub retry_queue_retention_seconds: f64,
    pub create_schedule_alarm_per_minute: f64,
}

impl CapacityInputs {
    /// Reads the defaults of `template.yaml`'s text.
    pub fn parse(text: &str) -> Result<Self, CapacityError> {
        let doc: Value =
            serde_yaml::from_str(text).map_err(|e| CapacityError::Invalid(e.to_string()))?;
        let num = |name: &'static str| -> Result<f64, CapacityError> {
            parameter_default(&doc, name)?
                .trim()
                .parse::<f64>()
                .map_err(|_| CapacityError::Invalid(format!("parameter {name}: not a number")))
        };
        let secs = |v: f64| Duration::from_secs_f64(v);
        let policy = RetryPolicy::new(
            secs(num("BackoffBaseSeconds")?),
            num("BackoffFactor")?,
            secs(num("BackoffCapSeconds")?),
            num("BackoffJitter")?,
            parameter_default(&doc, "BackoffStrictCap")? == "true",
        )
        .map_err(|e| CapacityError::Invalid(e.to_string()))?;
        let retention = doc
            .get("Resources")
            .and_then(|r| r.get("RetryQueue"))
            .and_then(|q| q.get("Properties"))
            .and_then(|p| p.get("MessageRetentionPeriod"))
            .and_then(Value::as_f64)
            .ok_or_else(|| {
                CapacityError::Invalid("RetryQueue has no MessageRetentionPeriod".into())
            })?;
        Ok(Self {
            retry_rate_bound: num("RetryHandlerMaxConcurrency")? * num("MaxRequestsPerSecond")?,
            start_rate_bound: num("IntakeMaxConcurrency")? * num("IntakeStartsPerSecond")?,
            response_records_in_flight: num("ResponseHandlerMaxConcurrency")?
                * num("ResponseBatchSize")?,
            policy,
            max_attempts: num("DefaultMaxAttempts")? as u32,
            shards: num("ReconcileShards")?,
            retry_queue_age_alarm_seconds: num("RetryQueueAgeAlarmSeconds")?,
            retry_queue_retention_seconds: retention,
            create_schedule_alarm_per_minute: num("CreateScheduleAlarmPerMinute")?,
        })
    }

    /// The longest a retry waits in its schedule: the upper bound of the last retry's
    /// wait (after attempt `max_attempts − 1`), jitter included.
    pub fn longest_wait_seconds(&self) -> f64 {
        (1..self.max_attempts)
            .filter_map(|k| Attempt::new(k).ok())
            .map(|k| self.policy.bounds(k).1.as_secs_f64())
            .fold(0.0, f64::max)
    }

    /// How long the first retries of a burst of answers take to fire: the spread of
    /// the first wait's jitter.
    pub fn first_wait_spread_seconds(&self) -> f64 {
        Attempt::new(1)
            .map(|k| {
                let (lo, hi) = self.policy.bounds(k);
                (hi - lo).as_secs_f64()
            })
            .unwrap_or(0.0)
    }
}

/// The calls of one retry cycle the quotas count, from `docs/benchmarks.md`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PerCycle {
    pub create_schedule: f64,
    pub scheduler_invocations: f64,
    /// Write units on the reconcile index (one shard's key per transaction).
    pub index_write_units: f64,
    /// Write units on the circuit breaker's window (one key for the whole stack).
    pub breaker_write_units: f64,
}

impl PerCycle {
    pub const CREATE_SCHEDULE: &'static str = "response handler: CreateSchedule";
    pub const INVOCATIONS: &'static str = "**Scheduler invocations**";
    pub const INDEX: &'static str = "DynamoDB WRU, reconcile-index (rules)";
    pub const BREAKER: &'static str =
        "DynamoDB WRU, circuit breaker per retry (count writes ÷ batch size)";

    /// The first figure column (smallest payload, one delivery) of each row.
    pub fn from_benchmarks(markdown: &str) -> Result<Self, CapacityError> {
        let cell = |label: &'static str| -> Result<f64, CapacityError> {
            markdown
                .lines()
                .find_map(|l| l.strip_prefix(&format!("| {label} |")))
                .and_then(|rest| rest.split('|').next())
                .map(|c| c.replace('*', ""))
                .and_then(|c| c.split_whitespace().next()?.parse::<f64>().ok())
                .ok_or(CapacityError::MissingRow(label))
        };
        Ok(Self {
            create_schedule: cell(Self::CREATE_SCHEDULE)?,
            scheduler_invocations: cell(Self::INVOCATIONS)?,
            index_write_units: cell(Self::INDEX)?,
            breaker_write_units: cell(Self::BREAKER)?,
        })
    }
}

/// One limit, as retries per second.
#[derive(Debug, Clone, PartialEq)]
pub struct Bound {
    pub limit: String,
    pub arithmetic: String,
    pub retries_per_second: f64,
    /// An AWS quota (true) or a setting of the stack (false).
    pub aws: bool,
    pub source: &'static str,
}

/// The headline figures.
#[derive(Debug, Clone, PartialEq)]
pub struct Capacity {
    /// Every limit, lowest first.
    pub bounds: Vec<Bound>,
    pub sustained_retries_per_second: f64,
    /// The AWS quota met first in the largest Regions, and elsewhere.
    pub first_quota_largest: Bound,
    pub first_quota_other: Bound,
    pub longest_wait_seconds: f64,
    pub pending_at_sustained: f64,
    pub spread_seconds: f64,
    pub burst_without_alarm: f64,
    pub burst_kept: f64,
    pub retry_queue_age_alarm_seconds: f64,
    pub retry_queue_retention_seconds: f64,
    pub start_rate_bound: f64,
    pub response_records_in_flight: f64,
    /// CreateScheduleRateAlarm's threshold, per second.
    pub alarm_per_second: f64,
}

fn n(v: f64) -> String {
    if (v - v.round()).abs() < 1e-9 {
        thousands(v.round() as u64)
    } else {
        format!("{v:.1}")
    }
}

/// The limits of `i`, as retries per second, with `c`'s calls per cycle.
pub fn capacity(i: &CapacityInputs, c: &PerCycle) -> Capacity {
    let q = &QUOTAS;
    let wait = i.longest_wait_seconds();
    let per = |quota: &Quota, per_cycle: f64, what: &str| Bound {
        limit: quota.name.to_owned(),
        arithmetic: format!(
            "{} {} ÷ {} {what} per retry",
            n(quota.limit),
            quota.unit,
            n(per_cycle)
        ),
        retries_per_second: quota.limit / per_cycle,
        aws: true,
        source: quota.source,
    };
    let mut bounds = vec![
        Bound {
            limit: "the retry handler's outbound bound (RetryHandlerMaxConcurrency × MaxRequestsPerSecond)"
                .into(),
            arithmetic: format!("{} retried requests/s", n(i.retry_rate_bound)),
            retries_per_second: i.retry_rate_bound,
            aws: false,
            source: "template.yaml defaults",
        },
        per(&q.create_schedule_other, c.create_schedule, "CreateSchedule"),
        per(&q.create_schedule_largest, c.create_schedule, "CreateSchedule"),
        per(&q.invocations, c.scheduler_invocations, "invocation"),
        Bound {
            limit: q.schedules.name.to_owned(),
            arithmetic: format!(
                "{} schedules ÷ {} s, the longest wait a schedule lives",
                n(q.schedules.limit),
                n(wait)
            ),
            retries_per_second: q.schedules.limit / wait,
            aws: true,
            source: q.schedules.source,
        },
        Bound {
            limit: "DynamoDB writes to one reconcile-index shard key (`CYCLE#<shard>`)".into(),
            arithmetic: format!(
                "{} WRU/s × {} shards ÷ {} index WRU per retry",
                n(q.partition_key_writes.limit),
                n(i.shards),
                n(c.index_write_units)
            ),
            retries_per_second: q.partition_key_writes.limit * i.shards / c.index_write_units,
            aws: true,
            source: q.partition_key_writes.source,
        },
        Bound {
            limit: "DynamoDB writes to the circuit breaker's window key".into(),
            arithmetic: format!(
                "{} WRU/s ÷ {} WRU per retry (one count write per response batch)",
                n(q.partition_key_writes.limit),
                c.breaker_write_units
            ),
            retries_per_second: q.partition_key_writes.limit / c.breaker_write_units,
            aws: true,
            source: q.partition_key_writes.source,
        },
    ];
    bounds.sort_by(|a, b| a.retries_per_second.total_cmp(&b.retries_per_second));
    let sustained = bounds[0].retries_per_second;
    let first = |skip: &str| {
        bounds
            .iter()
            .find(|b| b.aws && b.limit != skip)
            .cloned()
            .unwrap_or_else(|| bounds[0].clone())
    };
    let spread = i.first_wait_spread_seconds();
    Capacity {
        first_quota_largest: first(q.create_schedule_other.name),
        first_quota_other: first(q.create_schedule_largest.name),
        sustained_retries_per_second: sustained,
        longest_wait_seconds: wait,
        pending_at_sustained: sustained * wait,
        spread_seconds: spread,
        // Fires spread evenly over `spread` s, drained at `sustained`/s: the last one
        // waits (N − sustained × spread) ÷ sustained s on the retry queue.
        burst_without_alarm: sustained * (spread + i.retry_queue_age_alarm_seconds),
        burst_kept: (sustained * (spread + i.retry_queue_retention_seconds)).min(q.schedules.limit),
        retry_queue_age_alarm_seconds: i.retry_queue_age_alarm_seconds,
        retry_queue_retention_seconds: i.retry_queue_retention_seconds,
        start_rate_bound: i.start_rate_bound,
        response_records_in_flight: i.response_records_in_flight,
        alarm_per_second: i.create_schedule_alarm_per_minute / 60.0,
        bounds,
    }
}

/// The block of `docs/capacity.md` between its markers.
pub fn render(c: &Capacity) -> String {
    let mut s = String::new();
    s.push_str("| limit | arithmetic | retries/s | kind |\n|---|---|---:|---|\n");
    for b in &c.bounds {
        s.push_str(&format!(
            "| {} | {} | {} | {} |\n",
            b.limit,
            b.arithmetic,
            n(b.retries_per_second),
            if b.aws { "AWS quota" } else { "stack setting" }
        ));
    }
    s.push('\n');
    s.push_str(&format!(
        "- **Sustained: {} retries a second** (CANCELLED answers with attempts left), bound by {}.\n",
        n(c.sustained_retries_per_second),
        c.bounds[0].limit
    ));
    s.push_str(&format!(
        "- **The first AWS quota met** when that bound is raised: {} at {} retries/s outside the largest Regions; {} at {} retries/s in the largest ones.\n",
        c.first_quota_other.limit,
        n(c.first_quota_other.retries_per_second),
        c.first_quota_largest.limit,
        n(c.first_quota_largest.retries_per_second)
    ));
    s.push_str(&format!(
        "- **Pending retries at the sustained rate: {}** schedules at most ({} retries/s × {} s, the longest wait), {:.1} % of the 10,000,000 quota.\n",
        n(c.pending_at_sustained),
        n(c.sustained_retries_per_second),
        n(c.longest_wait_seconds),
        100.0 * c.pending_at_sustained / QUOTAS.schedules.limit
    ));
    s.push_str(&format!(
        "- **Burst of CANCELLED at once: {} without any alarm** (their first retries fire over {} s, drained at {}/s, none older than the retry queue's {} s age alarm); **{} kept** (drained before the retry queue's {} s retention).\n",
        n(c.burst_without_alarm),
        n(c.spread_seconds),
        n(c.sustained_retries_per_second),
        n(c.retry_queue_age_alarm_seconds),
        n(c.burst_kept),
        n(c.retry_queue_retention_seconds)
    ));
    s.push_str(&format!(
        "- Starts through the intake queue: {} first requests/s; the response handler takes {} answers at a time.\n",
        n(c.start_rate_bound),
        n(c.response_records_in_flight)
    ));
    s.push_str(&format!(
        "- `CreateScheduleRateAlarm` warns at {} CreateSchedule calls/s, {:.0} % of the first scheduler quota met outside the largest Regions.\n",
        n(c.alarm_per_second),
        100.0 * c.alarm_per_second / c.first_quota_other.retries_per_second
    ));
    s
}
