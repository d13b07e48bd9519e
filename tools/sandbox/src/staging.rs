//! The staging harness on the local stack: the harness table in moto, the harness
//! function (the same `harness::Harness` its Lambda `main` runs) behind the SQS event
//! source mapping emulator on the request queue, and both stacks' outputs.
//!
//! Start the local stack with `StackOptions::external_service = false`, so that the
//! harness is the only consumer of the request queue.

use crate::error::Error;
use crate::local::esm::{self, EsmSettings, EsmStats, SqsFunction};
use crate::local::stack::Stack;
use crate::outputs::{describe_stacks_entry, local};
use harness::{Harness, HarnessConfig};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

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

/// Both stacks' outputs, `{"Stacks": [main, harness]}`.
pub fn outputs_document(stack: &Stack, harness: Option<&LocalHarness>) -> Value {
    let shards = stack.reconcile_shards();
    let prefix = &stack.names().prefix;
    let mut main = local(&stack.provisioned, shards, stack.answer_timeout_seconds());
    // With its parameters, as `aws cloudformation describe-stacks` prints them.
    main["Parameters"] = stack
        .parameters()
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
