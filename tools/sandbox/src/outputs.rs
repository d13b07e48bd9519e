//! The stacks' outputs as `retryctl verify` reads them, in the shape `aws
//! cloudformation describe-stacks` prints, and their registration in moto's
//! CloudFormation (so `--stack NAME` finds a local stack as it finds a deployed one).

use crate::error::Error;
use serde_json::{json, Value};
use testkit::provision::Provisioned;

/// One stack in the shape `describe-stacks` prints.
pub fn describe_stacks_entry(stack_name: &str, outputs: &[(&str, String)]) -> Value {
    json!({
        "StackName": stack_name,
        "Outputs": outputs
            .iter()
            .map(|(k, v)| json!({"OutputKey": k, "OutputValue": v}))
            .collect::<Vec<_>>(),
    })
}

/// The main stack's outputs on the local stack (its name is the prefix).
pub fn local(p: &Provisioned, reconcile_shards: u16, answer_timeout_seconds: u64) -> Value {
    let n = &p.names;
    let mut o: Vec<(&str, String)> = vec![];
    for (url, arn, q) in [
        ("RequestQueueUrl", "RequestQueueArn", &p.request),
        ("ResponseQueueUrl", "ResponseQueueArn", &p.response),
        ("RetryQueueUrl", "RetryQueueArn", &p.retry),
        ("RequestDLQUrl", "RequestDLQArn", &p.request_dlq),
        ("ResponseDLQUrl", "ResponseDLQArn", &p.response_dlq),
        ("RetryDLQUrl", "RetryDLQArn", &p.retry_dlq),
        ("SchedulerDLQUrl", "SchedulerDLQArn", &p.scheduler_dlq),
        ("AuditDLQUrl", "AuditDLQArn", &p.audit_dlq),
    ] {
        o.push((url, q.url.clone()));
        o.push((arn, q.arn.clone()));
    }
    o.extend([
        ("TransactionsTableName", n.transactions_table.clone()),
        ("PayloadsTableName", n.payloads_table.clone()),
        ("AuditTableName", n.audit_table.clone()),
        ("BreakerTableName", n.breaker_table.clone()),
        ("ScheduleGroupName", n.schedule_group.clone()),
        ("SchedulerRoleArn", p.scheduler_role_arn.clone()),
        ("ReconcileShards", reconcile_shards.to_string()),
        ("AnswerTimeoutSeconds", answer_timeout_seconds.to_string()),
    ]);
    describe_stacks_entry(&n.prefix, &o)
}

/// Creates the stack `entry` describes (`StackName`, `Outputs` in the shape
/// DescribeStacks prints) with these parameters in the CloudFormation at `endpoint`.
pub async fn register_stack(
    sdk: &aws_config::SdkConfig,
    endpoint: &str,
    entry: &Value,
    params: &[(&'static str, String)],
) -> Result<(), Error> {
    let name = entry["StackName"].as_str().unwrap_or_default();
    let mut template = json!({
        "Parameters": {},
        // A stack holds at least one resource; this one creates nothing.
        "Resources": {"Registered": {"Type": "AWS::CloudFormation::WaitConditionHandle"}},
        "Outputs": {},
    });
    for (k, _) in params {
        template["Parameters"][*k] = json!({"Type": "String"});
    }
    for o in entry["Outputs"].as_array().into_iter().flatten() {
        if let (Some(k), Some(v)) = (o["OutputKey"].as_str(), o["OutputValue"].as_str()) {
            template["Outputs"][k] = json!({ "Value": v });
        }
    }
    let cfn = aws_sdk_cloudformation::Client::from_conf(
        aws_sdk_cloudformation::config::Builder::from(sdk)
            .endpoint_url(endpoint)
            .build(),
    );
    cfn.create_stack()
        .stack_name(name)
        .template_body(template.to_string())
        .set_parameters(Some(
            params
                .iter()
                .map(|(k, v)| {
                    aws_sdk_cloudformation::types::Parameter::builder()
                        .parameter_key(*k)
                        .parameter_value(v)
                        .build()
                })
                .collect(),
        ))
        .send()
        .await
        .map_err(|e| Error::call(name, aws::errors::classify("CreateStack", &e, |_| None)))?;
    Ok(())
}
