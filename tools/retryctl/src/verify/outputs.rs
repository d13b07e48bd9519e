//! The stacks' outputs, read from JSON in the shape `aws cloudformation
//! describe-stacks` prints (`{"Stacks":[{"StackName":…,"Outputs":[{"OutputKey":…,
//! "OutputValue":…}]}]}`): `infra/verify-deploy.sh` writes it in AWS, the local stack
//! (`sandbox::outputs`) writes the same shape, so `retryctl verify` needs no
//! CloudFormation client of its own.

use crate::error::CliError;
use serde_json::Value;
use std::collections::BTreeMap;

/// Outputs of the main stack that `retryctl verify` reads (`template.yaml` declares
/// each; `tests/template.rs` checks it).
pub const MAIN_OUTPUTS: &[&str] = &[
    "RequestQueueUrl",
    "RequestQueueArn",
    "ResponseQueueUrl",
    "ResponseQueueArn",
    "RetryQueueUrl",
    "RetryQueueArn",
    "RequestDLQUrl",
    "RequestDLQArn",
    "ResponseDLQUrl",
    "ResponseDLQArn",
    "RetryDLQUrl",
    "RetryDLQArn",
    "SchedulerDLQUrl",
    "SchedulerDLQArn",
    "AuditDLQUrl",
    "AuditDLQArn",
    "TransactionsTableName",
    "PayloadsTableName",
    "AuditTableName",
    "BreakerTableName",
    "ScheduleGroupName",
    "SchedulerRoleArn",
    "ReconcileShards",
    "AnswerTimeoutSeconds",
];

/// Outputs of the harness stack it reads (`infra/template.yaml`).
pub const HARNESS_OUTPUTS: &[&str] = &["HarnessTableName", "HarnessRoleArn", "MainStackName"];

/// Every output of every stack given, by key.
#[derive(Debug, Clone, Default)]
pub struct StackOutputs {
    /// `StackName` of each stack read, with the file it came from.
    pub stacks: Vec<(String, String)>,
    values: BTreeMap<String, (String, String)>,
    /// Every stack's parameters (`Parameters`, when the file carries them), as
    /// (stack, key, value).
    pub parameters: Vec<(String, String, String)>,
}

impl StackOutputs {
    /// Reads one file's stacks into these outputs. Two stacks giving one key two
    /// different values is an error.
    pub fn add(&mut self, source: &str, text: &str) -> Result<(), CliError> {
        let bad = |reason: String| CliError::bad("--outputs", source, reason);
        let v: Value = serde_json::from_str(text).map_err(|e| bad(format!("not JSON: {e}")))?;
        let stacks = v.get("Stacks").and_then(Value::as_array).ok_or_else(|| {
            bad(
                "no `Stacks` array (expected the output of `aws cloudformation describe-stacks`)"
                    .into(),
            )
        })?;
        for s in stacks {
            let name = s
                .get("StackName")
                .and_then(Value::as_str)
                .ok_or_else(|| bad("a stack without `StackName`".into()))?;
            for o in s
                .get("Outputs")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let (Some(k), Some(val)) = (
                    o.get("OutputKey").and_then(Value::as_str),
                    o.get("OutputValue").and_then(Value::as_str),
                ) else {
                    return Err(bad(format!(
                        "stack {name}: an output without OutputKey/OutputValue"
                    )));
                };
                if let Some((other, old)) = self.values.get(k) {
                    if old != val {
                        return Err(bad(format!(
                            "output {k} is `{old}` in stack {other} and `{val}` in stack {name}"
                        )));
                    }
                }
                self.values
                    .insert(k.to_owned(), (name.to_owned(), val.to_owned()));
            }
            for p in s
                .get("Parameters")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if let Some(k) = p.get("ParameterKey").and_then(Value::as_str) {
                    let v = p.get("ParameterValue").and_then(Value::as_str);
                    self.parameters.push((
                        name.to_owned(),
                        k.to_owned(),
                        v.unwrap_or_default().to_owned(),
                    ));
                }
            }
            self.stacks.push((name.to_owned(), source.to_owned()));
        }
        Ok(())
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.values.get(key).map(|(_, v)| v.as_str())
    }

    /// The stack that published `key`.
    pub fn stack_of(&self, key: &str) -> Option<&str> {
        self.values.get(key).map(|(s, _)| s.as_str())
    }

    pub fn require(&self, key: &str) -> Result<&str, CliError> {
        self.get(key).ok_or_else(|| {
            CliError::Missing(format!(
                "output {key} is in none of the stacks given ({}): pass the main stack's outputs with --outputs",
                self.stacks
                    .iter()
                    .map(|(n, f)| format!("{n} from {f}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })
    }

    /// Whether the harness stack's outputs were given.
    pub fn has_harness(&self) -> bool {
        self.get("HarnessTableName").is_some()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use serde_json::json;

    #[test]
    fn stacks_merge_and_a_conflict_names_both() {
        let mut o = StackOutputs::default();
        o.add(
            "main.json",
            r#"{"Stacks":[{"StackName":"m","Outputs":[{"OutputKey":"A","OutputValue":"1"}]}]}"#,
        )
        .unwrap();
        o.add(
            "h.json",
            r#"{"Stacks":[{"StackName":"h","Outputs":[{"OutputKey":"B","OutputValue":"2"},{"OutputKey":"A","OutputValue":"1"}]}]}"#,
        )
        .unwrap();
        assert_eq!(
            (o.get("A"), o.get("B"), o.stack_of("B")),
            (Some("1"), Some("2"), Some("h"))
        );
        let e = o
            .add(
                "x.json",
                r#"{"Stacks":[{"StackName":"x","Outputs":[{"OutputKey":"A","OutputValue":"9"}]}]}"#,
            )
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("output A is `1` in stack h and `9` in stack x"),
            "{e}"
        );
        let e = o.add("y.json", r#"{"Stack":[]}"#).unwrap_err().to_string();
        assert!(e.contains("y.json") && e.contains("describe-stacks"), "{e}");
        assert!(o
            .require("Nope")
            .unwrap_err()
            .to_string()
            .contains("m from main.json"));
    }

    #[test]
    fn the_local_stack_writes_every_output_verify_reads() {
        let names = aws::config::StackNames::new("p");
        let q = |n: &str| testkit::provision::QueueRef {
            name: n.into(),
            url: format!("http://x/{n}"),
            arn: format!("arn:aws:sqs:us-east-1:1:{n}"),
        };
        let p = testkit::provision::Provisioned {
            endpoint: String::new(),
            transactions_table_arn: String::new(),
            transactions_stream_arn: String::new(),
            request: q("request"),
            request_dlq: q("request-dlq"),
            response: q("response"),
            response_dlq: q("response-dlq"),
            retry: q("retry"),
            retry_dlq: q("retry-dlq"),
            scheduler_dlq: q("scheduler-dlq"),
            audit_dlq: q("audit-dlq"),
            intake: q("intake"),
            intake_dlq: q("intake-dlq"),
            schedule_group_arn: String::new(),
            scheduler_role_arn: "arn:role".into(),
            names,
        };
        let mut o = StackOutputs::default();
        o.add(
            "local",
            &json!({"Stacks": [sandbox::outputs::local(&p, 8, 2)]}).to_string(),
        )
        .unwrap();
        for k in MAIN_OUTPUTS {
            assert!(o.get(k).is_some_and(|v| !v.is_empty()), "{k}");
        }
        assert_eq!(
            o.get("AuditDLQArn"),
            Some("arn:aws:sqs:us-east-1:1:audit-dlq")
        );
    }
}
