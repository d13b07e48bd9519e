//! `retryctl loadtest` against the local stack, through the binary, with the staging
//! harness answering on the request queue: a small load runs to completion and its
//! report counts what happened; without the harness's outputs nothing is started.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

mod common;

use common::{retryctl, start_stack_with_harness, Running};
use sandbox::local::stack::StackOptions;
use serde_json::{json, Value};

/// Retries wait 1 s; the harness is the only consumer of the request queue.
fn options(tag: &str) -> StackOptions {
    let mut o = common::options(tag, 1, 0.0);
    o.external_service = false;
    o
}

fn write(s: &Running, name: &str, doc: &Value) -> String {
    let path = std::env::temp_dir().join(format!("{}-{name}.json", s.prefix));
    std::fs::write(&path, doc.to_string()).unwrap();
    path.display().to_string()
}

/// `retryctl loadtest` of the stacks in `file` as run `run`: 25 starts/s, polled every
/// 500 ms, a ceiling of 240 s, no progress bar, and `args`.
async fn load(s: &Running, file: &str, run: &str, args: &[&str]) -> common::Ran {
    let mut line = vec![
        "loadtest",
        "--outputs",
        file,
        "--run",
        run,
        "--rate",
        "25",
        "--duration",
        "240",
        "--poll-ms",
        "500",
        "--no-progress",
    ];
    line.extend(args);
    retryctl(s, &line).await
}

/// GIVEN the local stack with the harness, and the main stack's outbound bound as
/// the template publishes it WHEN 50 transactions are loaded, each cancelled once
/// before SUCCESS THEN every one SUCCEEDED at attempt 2, 50 retries were sent, the
/// time to terminal is reported, no DLQ gained a message, no schedule of the run is
/// left, the retry rate is set beside the stack's bound (2 × 5 = 10/s), and the exit
/// code is 0; the transactions are findable by the run's id prefix.
#[tokio::test(flavor = "multi_thread")]
async fn a_small_load_runs_to_completion_and_the_report_counts_it() {
    let (s, mut outputs) = start_stack_with_harness(options("load"), Some(vec![]));
    outputs["Stacks"][0]["Outputs"]
        .as_array_mut()
        .unwrap()
        .push(json!({"OutputKey": "OutboundRequestsPerSecondBound", "OutputValue": "2 x 5"}));
    let file = write(&s, "stacks", &outputs);
    let r = load(
        &s,
        &file,
        "t1",
        &["--transactions", "50", "--cancel-times", "1", "--json"],
    )
    .await;
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    let v = r.json();
    assert_eq!(v["ok"], true, "{v:#}");
    assert_eq!(
        (
            &v["started"],
            &v["succeeded"],
            &v["failed"],
            &v["not_started"]
        ),
        (&json!(50), &json!(50), &json!(0), &json!(0)),
        "{v:#}"
    );
    assert_eq!(v["in_flight"], json!([]));
    assert_eq!(v["unexpected"], json!([]));
    assert_eq!(v["start_failures"], json!([]));
    assert_eq!(
        (&v["retries_sent"], &v["retries_expected"]),
        (&json!(50), &json!(50))
    );
    for d in v["dlqs"].as_array().unwrap() {
        assert_eq!(d["after"], 0, "{v:#}");
    }
    assert_eq!(v["dlqs"].as_array().unwrap().len(), 5);
    assert_eq!(v["schedules_left"], json!([]));
    assert_eq!(v["id_prefix"], "LOAD-t1-");
    assert_eq!(v["stopped_at_ceiling"], false);
    let t = &v["time_to_terminal"];
    let (p50, max) = (t["p50"].as_f64().unwrap(), t["max"].as_f64().unwrap());
    // A retry waits 1 s for its schedule: no transaction can end sooner.
    assert!(p50 >= 1.0 && max >= p50, "{t}");
    assert_eq!(v["capacity"]["outbound_bound_per_second"], 10.0);
    assert!(v["capacity"]["retries_per_second"].as_f64().unwrap() > 0.0);
    // At least one create per transaction, and a read of each.
    assert!(
        v["client"]["dynamodb"]["calls"].as_u64().unwrap() >= 51,
        "{v:#}"
    );

    // A mix in text: 0, 1 and 4 CANCELLED in turn; with a budget of 4 the third
    // spends it and ends FAILED, as its script says.
    let mix = [
        "--transactions",
        "9",
        "--cancel-times",
        "0,1,4",
        "--max-attempts",
        "4",
    ];
    let r = load(&s, &file, "t1mix", &mix).await;
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    for line in [
        "statuses      6 SUCCEEDED, 3 FAILED, 0 in flight, 0 not as scripted",
        "retries       12 sent (12 scripted)",
        "schedules     0 of this run left",
        "COMPLETE in ",
    ] {
        assert!(r.stdout.contains(line), "{line}: {}", r.stdout);
    }

    let shown = retryctl(&s, &["show", "LOAD-t1-000050", "--json"]).await;
    assert_eq!(shown.code, 0, "{shown:?}");
    let rec = &shown.json()["record"];
    assert_eq!(
        (&rec["status"], &rec["current_attempt"]),
        (&json!("SUCCEEDED"), &json!(2))
    );
}

/// GIVEN only the main stack's outputs, or none WHEN a load test is asked for THEN it
/// is refused with exit 7 naming the missing harness outputs, and no transaction
/// exists afterwards; a bound past its limit is refused with exit 2 naming the flag.
#[tokio::test(flavor = "multi_thread")]
async fn without_the_harness_nothing_is_started_and_the_bounds_hold() {
    let (s, outputs) = start_stack_with_harness(options("loadno"), Some(vec![]));
    let main_only = json!({"Stacks": [outputs["Stacks"][0]]});
    let file = write(&s, "main-only", &main_only);
    let r = retryctl(
        &s,
        &[
            "loadtest",
            "--outputs",
            &file,
            "--run",
            "t2",
            "--no-progress",
        ],
    )
    .await;
    r.fails(
        7,
        &[
            "refused: no staging harness",
            "missing output(s) HarnessTableName, HarnessRoleArn, MainStackName",
        ],
    );
    let r = retryctl(&s, &["loadtest", "--json"]).await;
    assert_eq!(r.code, 7, "{r:?}");
    assert_eq!(r.json()["error"], "not-staging");
    assert!(r.json()["message"]
        .as_str()
        .unwrap()
        .contains("no --outputs given"));
    let shown = retryctl(&s, &["show", "LOAD-t2-000001"]).await;
    shown.fails(3, &["unknown transaction `LOAD-t2-000001`"]);

    let both = write(&s, "both", &outputs);
    let r = retryctl(
        &s,
        &["loadtest", "--outputs", &both, "--transactions", "100001"],
    )
    .await;
    r.fails(
        2,
        &["invalid value for --transactions: `100001`: must be from 1 to 100000"],
    );
}
