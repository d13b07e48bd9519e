//! `retryctl verify` against the local stack, through the binary, with the staging
//! harness answering on the request queue: it passes on the stack as provisioned
//! (every resource, then the three transactions end to end), and it fails — naming
//! the queue — when a queue's redrive policy is removed.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

mod common;

use aws_sdk_sqs::types::QueueAttributeName;
use common::{retryctl, start_stack_with_harness, Running};
use retryctl::local::stack::StackOptions;
use serde_json::Value;

/// Retries wait 1 s; the harness is the only consumer of the request queue.
fn options(tag: &str) -> StackOptions {
    let mut o = common::options(tag, 1, 0.0);
    o.external_service = false;
    o
}

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

/// GIVEN the local stack as provisioned and the harness WHEN `retryctl verify` runs
/// THEN every resource check passes (the trust policy is reported as not checked, and
/// why), the three transactions end as their scripts say with the expected audit
/// trails, no schedule is left and every DLQ is empty: exit 0.
#[tokio::test(flavor = "multi_thread")]
async fn verify_passes_on_the_local_stack_with_the_harness() {
    let (s, outputs) = start_stack_with_harness(options("vfyok"), Some(vec![]));
    let file = write_outputs(&s, &outputs);
    let args = [
        "verify",
        "--outputs",
        &file,
        "--json",
        "--poll-ms",
        "300",
        "--timeout",
        "150",
        "--audit-wait",
        "30",
    ];
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
    let trust = check(&v, "SchedulerRole");
    assert_eq!(trust["status"], "skip");
    assert!(trust["detail"]
        .as_str()
        .unwrap()
        .contains("moto enforces no IAM"));
    let d = |s: &str| check(&v, s)["detail"].as_str().unwrap().to_owned();
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
        .contains("index reconcile-index (KEYS_ONLY), stream NEW_AND_OLD_IMAGES"));
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
    let sqs = aws_sdk_sqs::Client::new(&aws::local::sdk_config(&s.endpoint).await);
    let retry_url = outputs["Stacks"][0]["Outputs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["OutputKey"] == "RetryQueueUrl")
        .unwrap()["OutputValue"]
        .as_str()
        .unwrap()
        .to_owned();
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
    let run = check(&v, "end-to-end run");
    assert_eq!(run["status"], "skip");
    assert!(run["detail"]
        .as_str()
        .unwrap()
        .contains("a resource check failed"));
}
