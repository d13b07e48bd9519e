//! The staging harness on the local stack, and the stacks' outputs as `retryctl
//! verify` reads them: the harness table in moto, the harness function (the same
//! `harness::Harness` its Lambda `main` runs) behind the SQS event source mapping
//! emulator on the request queue, and both stacks' outputs in the shape `aws
//! cloudformation describe-stacks` prints.
//!
//! Start the local stack with `StackOptions::external_service = false`, so that the
//! harness is the only consumer of the request queue.

use crate::error::Error;
use crate::local::esm::{self, EsmSettings, EsmStats, SqsFunction};
use crate::local::stack::Stack;
use harness::{Harness, HarnessConfig};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use testkit::provision::Provisioned;

/// The harness running on a local stack until the stack stops.
pub struct LocalHarness {
    pub table: String,
    /// The ARN its role would have (`<MainStackName>-harness`; moto checks no IAM).
    pub role_arn: String,
    pub esm: Arc<EsmStats>,
}

/// Creates the harness table and starts the harness on `stack`'s request queue.
/// `env` overrides its configuration (`HARNESS_MIX`, `HARNESS_*_DELAY_SECONDS`, …).
pub async fn start_harness(stack: &Stack, env: &[(&str, String)]) -> Result<LocalHarness, Error> {
    let p = &stack.provisioned;
    let table = format!("{}-harness", p.names.prefix);
    testkit::provision::create_table(
        &aws::clients::dynamodb(&stack.sdk),
        &testkit::provision::harness_table_definition(&table),
    )
    .await
    .map_err(|e| Error::Aws(e.to_string()))?;
    let mut vars: HashMap<String, String> = HashMap::from([
        ("HARNESS_TABLE".to_owned(), table.clone()),
        ("RESPONSE_QUEUE_URL".to_owned(), p.response.url.clone()),
        ("REQUEST_DLQ_URL".to_owned(), p.request_dlq.url.clone()),
    ]);
    vars.extend(env.iter().map(|(k, v)| ((*k).to_owned(), v.clone())));
    let config = HarnessConfig::from_lookup(&|k| vars.get(k).cloned())
        .map_err(|e| Error::Missing(format!("harness configuration: {e}")))?;
    let harness = Arc::new(Harness::new(&stack.sdk, config));
    let function: SqsFunction = Arc::new(move |event| {
        let h = harness.clone();
        Box::pin(async move { h.invoke(event).await.map_err(|e| e.to_string()) })
    });
    // The template's event source: batches of 10, no window, MaximumConcurrency 2.
    let (_detached, stats) = esm::spawn(
        aws::clients::sqs(&stack.sdk),
        EsmSettings {
            function: harness::service::FUNCTION.into(),
            queue_url: p.request.url.clone(),
            queue_arn: p.request.arn.clone(),
            region: testkit::moto::LOCAL_REGION.into(),
            batch_size: 10,
            batching_window: Duration::ZERO,
            max_concurrency: 2,
            poll_wait_seconds: 1,
            visibility_timeout: None,
            kill_probability: 0.0,
            seed: 0,
        },
        |_| function.clone(),
        stack.stop_token(),
    );
    Ok(LocalHarness {
        role_arn: format!(
            "arn:aws:iam::{}:role/{}-harness",
            testkit::moto::LOCAL_ACCOUNT,
            p.names.prefix
        ),
        table,
        esm: stats,
    })
}

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

/// Both stacks' outputs, `{"Stacks": [main, harness]}`.
pub fn outputs_document(stack: &Stack, harness: Option<&LocalHarness>) -> Value {
    let shards = stack.reconcile_shards();
    let prefix = &stack.names().prefix;
    let mut main = local(&stack.provisioned, shards, stack.answer_timeout_seconds());
    // With its parameters, as `aws cloudformation describe-stacks` prints them.
    main["Parameters"] = parameters(stack)
        .into_iter()
        .map(|(k, v)| json!({"ParameterKey": k, "ParameterValue": v}))
        .collect();
    let mut stacks = vec![main];
    if let Some(h) = harness {
        stacks.push(describe_stacks_entry(
            &format!("{prefix}-harness"),
            &[
                ("HarnessTableName", h.table.clone()),
                ("HarnessRoleArn", h.role_arn.clone()),
                ("MainStackName", prefix.clone()),
            ],
        ));
    }
    json!({ "Stacks": stacks })
}

/// The settings of the local stack as DescribeStacks lists a deployed stack's
/// parameters (the values its functions were given).
pub fn parameters(stack: &Stack) -> Vec<(&'static str, String)> {
    vec![
        ("ReconcileShards", stack.reconcile_shards().to_string()),
        (
            "AnswerTimeoutSeconds",
            stack.answer_timeout_seconds().to_string(),
        ),
        (
            "ReconcileThresholdSeconds",
            stack.reconcile_threshold_seconds().to_string(),
        ),
        (
            "ReconcileRequeueMax",
            stack.reconcile_requeue_max().to_string(),
        ),
        (
            "TransactionDeadlineSeconds",
            stack.transaction_deadline_seconds().to_string(),
        ),
    ]
}

/// Registers the local stack in moto's CloudFormation under its prefix, as
/// `template.yaml` would have created it: DescribeStacks answers with its outputs and
/// parameters, so `retryctl --stack PREFIX` reaches it as it reaches a deployed one.
pub async fn register(stack: &Stack) -> Result<(), Error> {
    let entry = local(
        &stack.provisioned,
        stack.reconcile_shards(),
        stack.answer_timeout_seconds(),
    );
    register_stack(&stack.sdk, &stack.endpoint, &entry, &parameters(stack)).await
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
