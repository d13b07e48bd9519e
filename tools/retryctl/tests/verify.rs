//! `retryctl verify` against the local stack, through the binary, with the staging
//! harness answering on the request queue: it passes on the stack as provisioned
//! (every resource, then the three transactions end to end), and it fails — naming
//! the queue — when a queue's redrive policy is removed.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

mod common;

use aws_sdk_sqs::types::QueueAttributeName;
use common::{retryctl, start_stack_with_harness, words, Running};
use sandbox::local::stack::StackOptions;
use serde_json::Value;

/// Retries wait 1 s; the harness is the only consumer of the request queue.
fn options(tag: &str) -> StackOptions {
    let mut o = common::options(tag, 1, 0.0);
    o.external_service = false;
    o
}

/// Polling and waits for the local stack, where retries wait 1 s.
const QUICK: [&str; 6] = ["--poll-ms", "300", "--timeout", "150", "--audit-wait", "30"];

fn write_outputs(s: &Running, outputs: &Value) -> String {
    let path = std::env::temp_dir().join(format!("{}-stack-outputs.json", s.prefix));
    std::fs::write(&path, outputs.to_string()).unwrap();
    path.display().to_string()
}

fn check<'a>(report: &'a Value, subject_start: &str) -> &'a Value {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["subject"].as_str().unwrap().starts_with(subject_start))
        .unwrap_or_else(|| panic!("no check of {subject_start}: {report:#}"))
}

/// The detail of the check of `subject_start`.
fn detail<'a>(report: &'a Value, subject_start: &str) -> &'a str {
    check(report, subject_start)["detail"].as_str().unwrap()
}

/// The value of output `key` of the first stack in `outputs` (DescribeStacks' shape).
fn output(outputs: &Value, key: &str) -> String {
    outputs["Stacks"][0]["Outputs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["OutputKey"] == key)
        .unwrap()["OutputValue"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// GIVEN the local stack as provisioned and the harness WHEN `retryctl verify` runs
/// THEN every resource check passes (the trust policy is reported as not checked, and
/// why), the three transactions end as their scripts say with the expected audit
/// trails, no schedule is left and every DLQ is empty: exit 0.
#[tokio::test(flavor = "multi_thread")]
async fn verify_passes_on_the_local_stack_with_the_harness() {
    let (s, outputs) = start_stack_with_harness(options("vfyok"), Some(vec![]));
    let file = write_outputs(&s, &outputs);
    let mut args = vec!["verify", "--outputs", &file, "--json"];
    args.extend(QUICK);
    let r = retryctl(&s, &args).await;
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    let v = r.json();
    assert_eq!(v["ok"], true, "{v:#}");
    assert_eq!(v["failed"], 0);
    for subject in [
        "RequestQueue",
        "ResponseQueue",
        "RetryQueue",
        "RequestDLQ",
        "SchedulerDLQ",
        "AuditDLQ",
        "TransactionsTable",
        "PayloadsTable",
        "AuditTable",
        "HarnessTable",
        "ScheduleGroup",
        "success ",
        "success audit trail",
        "cancelled-then-success ",
        "cancelled-then-success at the harness",
        "cancelled-then-success schedules",
        "exhausted ",
        "exhausted audit trail",
        "exhausted schedules",
    ] {
        assert_eq!(check(&v, subject)["status"], "pass", "{subject}: {v:#}");
    }
    assert_eq!(check(&v, "Parameters")["status"], "pass", "{v:#}");
    assert_eq!(check(&v, "SchedulerRole")["status"], "skip");
    assert!(detail(&v, "SchedulerRole").contains("moto enforces no IAM"));
    let d = |s: &str| detail(&v, s);
    assert!(
        d("cancelled-then-success ").starts_with("SUCCEEDED at attempt 2 of 3"),
        "{v:#}"
    );
    assert!(
        d("exhausted ").starts_with("FAILED at attempt 3 of 3"),
        "{v:#}"
    );
    assert!(
        d("exhausted audit trail").starts_with("10 transitions"),
        "{v:#}"
    );
    assert!(
        d("exhausted at the harness")
            .contains("#1 CANCELLED, #2 CANCELLED, #3 CANCELLED, nothing for #4"),
        "{v:#}"
    );
    assert!(d("TransactionsTable")
        .contains("index reconcile-index (KEYS_ONLY), index failed-index (KEYS_ONLY), stream NEW_AND_OLD_IMAGES"));
    assert!(d("RetryQueue").contains("redrive to RetryDLQ after 5 receives, visibility 360 s"));
    // The text report says the same.
    let text = retryctl(
        &s,
        &["verify", "--outputs", &file, "--resources-only", "--quiet"],
    )
    .await;
    assert_eq!(text.code, 0, "{text:?}");
    assert!(text.stdout.contains("VERIFIED: "), "{}", text.stdout);
}

/// GIVEN the retry queue's redrive policy removed on the local stack WHEN `retryctl
/// verify` runs THEN it fails (exit 6), the failed check names the queue (logical id
/// and physical name) and says what is missing, and no transaction is started.
#[tokio::test(flavor = "multi_thread")]
async fn verify_fails_naming_the_queue_whose_redrive_policy_was_removed() {
    let (s, outputs) = start_stack_with_harness(options("vfyrd"), Some(vec![]));
    let file = write_outputs(&s, &outputs);
    let sqs = aws_sdk_sqs::Client::new(&testkit::moto::sdk_config(&s.endpoint).await);
    let retry_url = output(&outputs, "RetryQueueUrl");
    sqs.set_queue_attributes()
        .queue_url(&retry_url)
        .attributes(QueueAttributeName::RedrivePolicy, "")
        .send()
        .await
        .unwrap();

    let r = retryctl(&s, &["verify", "--outputs", &file, "--quiet"]).await;
    assert_eq!(r.code, 6, "{}\n{}", r.stdout, r.stderr);
    let queue = format!("RetryQueue {}-retry", s.prefix);
    assert!(
        r.stdout.contains(&format!(
            "FAIL  resources    {queue}: no redrive policy: a message that keeps failing is never moved to RetryDLQ"
        )),
        "{}",
        r.stdout
    );
    assert!(r.stdout.contains("NOT VERIFIED: "), "{}", r.stdout);
    assert!(
        r.stderr.contains("retryctl: 1 check(s) failed"),
        "{}",
        r.stderr
    );

    let r = retryctl(&s, &["verify", "--outputs", &file, "--quiet", "--json"]).await;
    assert_eq!(r.code, 6);
    let v = r.json();
    assert_eq!(
        (v["ok"].as_bool(), v["failed"].as_u64()),
        (Some(false), Some(1))
    );
    assert_eq!(check(&v, &queue)["status"], "fail");
    assert_eq!(check(&v, "ResponseQueue")["status"], "pass");
    assert_eq!(check(&v, "end-to-end run")["status"], "skip");
    assert!(detail(&v, "end-to-end run").contains("a resource check failed"));
}

/// GIVEN the stack's alarm topic (output AlarmTopicArn) WHEN it has no subscription
/// THEN verify fails naming it (no alarm pages anybody); once a destination is
/// subscribed it passes, naming the destination.
#[tokio::test(flavor = "multi_thread")]
async fn verify_fails_while_the_alarm_topic_pages_nobody() {
    let (s, mut outputs) = start_stack_with_harness(options("vfyal"), Some(vec![]));
    let sdk = testkit::moto::sdk_config(&s.endpoint).await;
    let stack_outputs = outputs["Stacks"][0]["Outputs"].as_array_mut().unwrap();
    let topic = testkit::moto::alarm_topic(&sdk, &format!("{}-alarms", s.prefix), stack_outputs)
        .await
        .unwrap()
        .expect("CreateTopic returns the topic's ARN");
    let file = write_outputs(&s, &outputs);
    let verify = format!("verify --outputs {file} --resources-only --quiet --json");
    let verify = words(&verify);
    let r = retryctl(&s, &verify).await;
    assert_eq!(r.code, 6, "{}\n{}", r.stdout, r.stderr);
    let v = r.json();
    assert_eq!(check(&v, "AlarmTopic")["status"], "fail", "{v:#}");
    assert!(
        detail(&v, "AlarmTopic").starts_with("no confirmed subscription"),
        "{v:#}"
    );
    let queue = aws_sdk_sqs::Client::new(&sdk)
        .create_queue()
        .queue_name(format!("{}-pager", s.prefix))
        .send()
        .await
        .unwrap();
    let pager = format!(
        "arn:aws:sqs:us-east-1:123456789012:{}",
        queue.queue_url().unwrap().rsplit('/').next().unwrap()
    );
    testkit::moto::page_queue(&sdk, &topic, &pager)
        .await
        .unwrap();
    let r = retryctl(&s, &verify).await;
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    let v = r.json();
    assert_eq!(check(&v, "AlarmTopic")["status"], "pass", "{v:#}");
    assert!(detail(&v, "AlarmTopic").contains(&format!("sqs {pager}")));
}

/// GIVEN an `aws` command on PATH that answers `cloudformation describe-stacks` and
/// `iam get-role` with the local stack's outputs and a scheduler role trusting the
/// scheduler for this account and group (the template's trust policy) WHEN
/// `infra/verify-deploy.sh STACK` runs THEN it reads both stacks and the role through
/// the CLI, runs `retryctl verify` with them, the trust policy is checked, and the run
/// verifies.
#[tokio::test(flavor = "multi_thread")]
async fn the_deploy_script_reads_the_stacks_and_the_role_with_the_aws_cli() {
    let (s, outputs) = start_stack_with_harness(options("vfysh"), Some(vec![]));
    let dir = std::env::temp_dir().join(format!("{}-fake-aws", s.prefix));
    std::fs::create_dir_all(&dir).unwrap();
    let stacks = outputs["Stacks"].as_array().unwrap();
    for st in stacks {
        let name = st["StackName"].as_str().unwrap();
        std::fs::write(
            dir.join(format!("{name}.json")),
            serde_json::json!({ "Stacks": [st] }).to_string(),
        )
        .unwrap();
    }
    let role_arn = output(&outputs, "SchedulerRoleArn");
    std::fs::write(dir.join("role-arn"), &role_arn).unwrap();
    let group = output(&outputs, "ScheduleGroupName");
    let trust = serde_json::json!({"Role": {"RoleName": role_arn.rsplit('/').next(), "AssumeRolePolicyDocument": {
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Principal": {"Service": "scheduler.amazonaws.com"},
            "Action": "sts:AssumeRole",
            "Condition": {"StringEquals": {"aws:SourceAccount": testkit::moto::LOCAL_ACCOUNT},
                "ArnLike": {"aws:SourceArn": [
                    format!("arn:aws:scheduler:us-east-1:{}:schedule-group/{group}", testkit::moto::LOCAL_ACCOUNT),
                    format!("arn:aws:scheduler:us-east-1:{}:schedule/{group}/*", testkit::moto::LOCAL_ACCOUNT)]}}}]}}});
    std::fs::write(
        dir.join(format!(
            "role-{}.json",
            role_arn.rsplit('/').next().unwrap()
        )),
        trust.to_string(),
    )
    .unwrap();
    // The AWS CLI's answers to exactly the calls the script makes.
    let fake = r#"#!/usr/bin/env bash
set -euo pipefail
d="$(dirname "$0")"
case "$1 $2" in
  "cloudformation describe-stacks")
    name="$4"
    [ -f "$d/$name.json" ] || { echo "Stack with id $name does not exist" >&2; exit 254; }
    if [ "${5:-}" = "--query" ]; then cat "$d/role-arn"; else cat "$d/$name.json"; fi ;;
  "iam get-role") cat "$d/role-$4.json" ;;
  *) echo "unexpected aws call: $*" >&2; exit 2 ;;
esac
"#;
    let aws_path = dir.join("aws");
    std::fs::write(&aws_path, fake).unwrap();
    std::fs::set_permissions(
        &aws_path,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let bin_dir = std::path::Path::new(env!("CARGO_BIN_EXE_retryctl"))
        .parent()
        .unwrap()
        .to_owned();
    let path = format!(
        "{}:{}:{}",
        dir.display(),
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../infra/verify-deploy.sh");
    let r = tokio::process::Command::new("bash")
        .args([script, &s.prefix, "--json", "--quiet"])
        .args(QUICK)
        .env("PATH", path)
        .env("AWS_ENDPOINT_URL", &s.endpoint)
        .env("AWS_ACCESS_KEY_ID", "testing")
        .env("AWS_SECRET_ACCESS_KEY", "testing")
        .env("AWS_REGION", "us-east-1")
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&r.stdout);
    let stderr = String::from_utf8_lossy(&r.stderr);
    assert_eq!(r.status.code(), Some(0), "{stdout}\n{stderr}");
    let v: Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(
        v["stacks"],
        serde_json::json!([s.prefix, format!("{}-harness", s.prefix)])
    );
    assert_eq!(check(&v, "SchedulerRole")["status"], "pass", "{v:#}");
    assert_eq!(check(&v, "exhausted ")["status"], "pass", "{v:#}");
    assert!(
        stderr.contains(&format!("reading the outputs of {}-harness", s.prefix)),
        "{stderr}"
    );
}
