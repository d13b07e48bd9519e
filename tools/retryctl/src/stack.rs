//! `--stack NAME`: every table, queue, group and setting `retryctl` needs, read from
//! the deployed stack's outputs and parameters (CloudFormation DescribeStacks) instead
//! of about fifteen variables exported by hand.

use crate::cli::TargetArgs;
use crate::error::CliError;
use std::collections::BTreeMap;

/// One stack as DescribeStacks answers: its outputs and parameters, by key.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Described {
    pub name: String,
    pub outputs: BTreeMap<String, String>,
    pub parameters: BTreeMap<String, String>,
}

/// Where a setting of [`TargetArgs`] comes from in the stack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Output(&'static str),
    Parameter(&'static str),
}

/// Every setting `--stack` fills: the flag that would give it, and where the stack
/// holds it. `template.yaml` declares each output and parameter (tested).
pub const FILLED: &[(&str, Source)] = &[
    (
        "--transactions-table",
        Source::Output("TransactionsTableName"),
    ),
    ("--payloads-table", Source::Output("PayloadsTableName")),
    ("--audit-table", Source::Output("AuditTableName")),
    ("--breaker-table", Source::Output("BreakerTableName")),
    ("--request-queue-url", Source::Output("RequestQueueUrl")),
    ("--response-queue-url", Source::Output("ResponseQueueUrl")),
    ("--retry-queue-url", Source::Output("RetryQueueUrl")),
    ("--scheduler-dlq-url", Source::Output("SchedulerDLQUrl")),
    ("--audit-dlq-url", Source::Output("AuditDLQUrl")),
    ("--schedule-group", Source::Output("ScheduleGroupName")),
    ("--reconcile-shards", Source::Output("ReconcileShards")),
    (
        "--answer-timeout-seconds",
        Source::Output("AnswerTimeoutSeconds"),
    ),
    (
        "--reconcile-threshold-seconds",
        Source::Parameter("ReconcileThresholdSeconds"),
    ),
    (
        "--reconcile-requeue-max",
        Source::Parameter("ReconcileRequeueMax"),
    ),
    (
        "--transaction-deadline-seconds",
        Source::Parameter("TransactionDeadlineSeconds"),
    ),
    ("--retention-days", Source::Parameter("RetentionDays")),
    ("--request-delivery", Source::Parameter("RequestDelivery")),
];

impl Described {
    /// Reads the stack `name` (DescribeStacks; the operator roles allow it on the stack).
    pub async fn fetch(sdk: &aws_config::SdkConfig, name: &str) -> Result<Self, CliError> {
        let answer = aws_sdk_cloudformation::Client::new(sdk)
            .describe_stacks()
            .stack_name(name)
            .send()
            .await
            .map_err(|e| crate::error::sdk_error("DescribeStacks", name, e))?;
        let stack = answer
            .stacks()
            .first()
            .ok_or_else(|| CliError::Missing(format!("DescribeStacks found no stack `{name}`")))?;
        let pairs = |it: Vec<(Option<&str>, Option<&str>)>| {
            it.into_iter()
                .filter_map(|(k, v)| Some((k?.to_owned(), v.unwrap_or_default().to_owned())))
                .collect::<BTreeMap<_, _>>()
        };
        Ok(Self {
            name: stack.stack_name().unwrap_or(name).to_owned(),
            outputs: pairs(
                stack
                    .outputs()
                    .iter()
                    .map(|o| (o.output_key(), o.output_value()))
                    .collect(),
            ),
            parameters: pairs(
                stack
                    .parameters()
                    .iter()
                    .map(|p| (p.parameter_key(), p.parameter_value()))
                    .collect(),
            ),
        })
    }

    /// The value `source` names, or an error naming it and the stack.
    pub fn value(&self, source: Source) -> Result<&str, CliError> {
        let (map, kind, key) = match source {
            Source::Output(k) => (&self.outputs, "output", k),
            Source::Parameter(k) => (&self.parameters, "parameter", k),
        };
        map.get(key).map(String::as_str).ok_or_else(|| {
            CliError::Missing(format!(
                "stack {} has no {kind} `{key}` (retryctl --stack reads it): deploy the \
                 current template.yaml, or give the setting explicitly",
                self.name
            ))
        })
    }

    /// `args` with every setting of [`FILLED`] taken from the stack. A setting also
    /// given by flag or environment must agree with the stack: two different values
    /// are an error naming both, never a silent choice.
    pub fn fill(&self, args: &TargetArgs) -> Result<TargetArgs, CliError> {
        let mut out = args.clone();
        for &(flag, source) in FILLED {
            let value = match (flag, self.value(source)) {
                // A stack deployed before the parameter existed delivers directly.
                ("--request-delivery", Err(_)) => domain::decide::Delivery::Direct.as_str(),
                (_, v) => v?,
            };
            let conflict = |given: String| {
                CliError::bad(
                    flag,
                    given,
                    format!(
                        "stack {} says `{value}` ({}); unset one of them",
                        self.name,
                        match source {
                            Source::Output(k) => format!("output {k}"),
                            Source::Parameter(k) => format!("parameter {k}"),
                        }
                    ),
                )
            };
            // A number, in the type of the setting it fills.
            macro_rules! number {
                ($slot:expr) => {
                    self.fill_number(&mut $slot, flag, value, conflict)?
                };
            }
            match flag {
                "--reconcile-shards" => number!(out.reconcile_shards),
                "--reconcile-requeue-max" => number!(out.reconcile_requeue_max),
                "--answer-timeout-seconds" => number!(out.answer_timeout_seconds),
                "--retention-days" => number!(out.retention_days),
                "--transaction-deadline-seconds" => number!(out.transaction_deadline_seconds),
                "--reconcile-threshold-seconds" => number!(out.reconcile_threshold_seconds),
                _ => {
                    let slot = match flag {
                        "--transactions-table" => &mut out.transactions_table,
                        "--payloads-table" => &mut out.payloads_table,
                        "--audit-table" => &mut out.audit_table,
                        "--breaker-table" => &mut out.breaker_table,
                        "--request-queue-url" => &mut out.request_queue_url,
                        "--response-queue-url" => &mut out.response_queue_url,
                        "--retry-queue-url" => &mut out.retry_queue_url,
                        "--scheduler-dlq-url" => &mut out.scheduler_dlq_url,
                        "--audit-dlq-url" => &mut out.audit_dlq_url,
                        "--request-delivery" => &mut out.request_delivery,
                        _ => &mut out.schedule_group,
                    };
                    *slot = agree(slot.take(), value.to_owned(), conflict)?;
                }
            }
        }
        Ok(out)
    }

    /// `slot` set to the stack's `value` for `flag`, a number of the slot's type, unless
    /// the slot already holds another (then the error `conflict` makes).
    fn fill_number<T>(
        &self,
        slot: &mut Option<T>,
        flag: &'static str,
        value: &str,
        conflict: impl Fn(String) -> CliError,
    ) -> Result<(), CliError>
    where
        T: TryFrom<u64> + PartialEq + ToString,
        T::Error: std::fmt::Display,
    {
        let n: u64 = value.parse().map_err(|e| {
            CliError::bad(
                flag,
                value,
                format!("stack {}'s value is not a number: {e}", self.name),
            )
        })?;
        let n = T::try_from(n).map_err(|e| CliError::bad(flag, value, e))?;
        *slot = agree(slot.take(), n, conflict)?;
        Ok(())
    }
}

/// `stack`, unless `given` says something else: then the error `conflict` makes.
fn agree<T: PartialEq + ToString>(
    given: Option<T>,
    stack: T,
    conflict: impl Fn(String) -> CliError,
) -> Result<Option<T>, CliError> {
    match given {
        Some(g) if g != stack => Err(conflict(g.to_string())),
        _ => Ok(Some(stack)),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn described() -> Described {
        let mut d = Described {
            name: "dr-prod".into(),
            ..Described::default()
        };
        for (flag, source) in FILLED {
            let v = match flag {
                f if f.contains("url") => format!("https://sqs/{f}"),
                f if f.contains("table") || f.contains("group") => format!("name{f}"),
                _ => "7".into(),
            };
            match source {
                Source::Output(k) => d.outputs.insert((*k).into(), v),
                Source::Parameter(k) => d.parameters.insert((*k).into(), v),
            };
        }
        d
    }

    #[test]
    fn every_setting_comes_from_the_stack_and_a_missing_output_is_named() {
        let d = described();
        let a = d.fill(&TargetArgs::default()).unwrap();
        assert_eq!(
            a.retry_queue_url.as_deref(),
            Some("https://sqs/--retry-queue-url")
        );
        assert_eq!(a.schedule_group.as_deref(), Some("name--schedule-group"));
        assert_eq!(
            (
                a.reconcile_shards,
                a.reconcile_requeue_max,
                a.answer_timeout_seconds,
                a.reconcile_threshold_seconds,
                a.transaction_deadline_seconds
            ),
            (Some(7), Some(7), Some(7), Some(7), Some(7))
        );
        let mut gone = d.clone();
        gone.outputs.remove("AuditDLQUrl");
        let e = gone.fill(&TargetArgs::default()).unwrap_err().to_string();
        assert!(
            e.contains("stack dr-prod has no output `AuditDLQUrl`"),
            "{e}"
        );
        let mut gone = d.clone();
        gone.parameters.remove("ReconcileRequeueMax");
        let e = gone.fill(&TargetArgs::default()).unwrap_err().to_string();
        assert!(e.contains("no parameter `ReconcileRequeueMax`"), "{e}");
    }

    #[test]
    fn a_given_setting_must_agree_with_the_stack() {
        let d = described();
        let same = TargetArgs {
            reconcile_shards: Some(7),
            ..TargetArgs::default()
        };
        assert_eq!(d.fill(&same).unwrap().reconcile_shards, Some(7));
        let other = TargetArgs {
            reconcile_shards: Some(8),
            ..TargetArgs::default()
        };
        let e = d.fill(&other).unwrap_err().to_string();
        assert!(
            e.contains("--reconcile-shards")
                && e.contains("`8`")
                && e.contains("output ReconcileShards"),
            "{e}"
        );
    }
}
