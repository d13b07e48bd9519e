//! Every `retryctl` command against a running local stack, through the binary.

mod common;

use aws::config::vars;
use common::{
    options, retryctl, retryctl_without, start_stack, submit, wait_status, words, Running,
};
use domain::ports::{Clock, SystemClock};
use std::sync::OnceLock;
use std::time::Duration;

/// Retries wait 1 s; the service always answers CANCELLED (every transaction goes
/// through all its retries and ends FAILED).
fn fast() -> &'static Running {
    static S: OnceLock<Running> = OnceLock::new();
    S.get_or_init(|| start_stack(options("clif", 1, 1.0)))
}

/// The same, for the timeline test alone (no other test's traffic on its tables).
fn timeline() -> &'static Running {
    static S: OnceLock<Running> = OnceLock::new();
    S.get_or_init(|| start_stack(options("clit", 1, 1.0)))
}

/// Retries wait an hour: a CANCELLED transaction stays SCHEDULED.
fn slow() -> &'static Running {
    static S: OnceLock<Running> = OnceLock::new();
    S.get_or_init(|| start_stack(options("clis", 3600, 1.0)))
}

const LONG: Duration = Duration::from_secs(120);

/// GIVEN a transaction whose every attempt is CANCELLED (max 4) WHEN it has run THEN
/// `show` prints its state and the full timeline: creation, three retries of four
/// transitions each, and FAILED — each transition a line with its actor, attempt,
/// schedule and origin. Then `replay` reopens it, recorded in the trail.
#[tokio::test(flavor = "multi_thread")]
async fn show_prints_the_full_timeline_of_three_retries_and_replay_extends_it() {
    let s = timeline();
    let r = retryctl(
        s,
        &words(r#"submit TX-SHOW-1 --payload {"amount":42} --max-attempts 4 --correlation-id corr-show-1"#),
    )
    .await;
    r.prints(0, &["TX-SHOW-1: started (request for attempt 1 published)"]);
    wait_status(s, "TX-SHOW-1", "FAILED", LONG).await;

    // The compact view: a line per transition, times relative to the start and to the
    // line before, the fire drift of each retry, the key of each request.
    let r = retryctl(s, &["show", "TX-SHOW-1"]).await;
    assert_eq!(r.code, 0, "{r:?}");
    let compact: Vec<&str> = r.stdout.lines().filter(|l| l.contains("s  (+")).collect();
    assert_eq!(compact.len(), 14, "{}", r.stdout);
    assert!(
        compact[0].trim_start().starts_with("+0.000s"),
        "{}",
        compact[0]
    );
    assert!(compact[0].contains("key TX-SHOW-1#1"), "{}", compact[0]);
    let keys = compact
        .iter()
        .filter(|l| l.contains("key TX-SHOW-1#"))
        .count();
    assert_eq!(keys, 4, "one key per request: {}", r.stdout);
    for l in compact.iter().filter(|l| l.contains("SCHEDULED → SENDING")) {
        assert!(l.contains("fired +") && l.contains(" late"), "{l}");
    }
    for l in compact
        .iter()
        .filter(|l| l.contains("SCHEDULING → SCHEDULED"))
    {
        assert!(l.contains("fires +"), "{l}");
    }
    assert!(
        r.stdout.lines().all(|l| l.chars().count() <= 120),
        "{}",
        r.stdout
    );

    // --wide: the full table.
    let r = retryctl(s, &["show", "TX-SHOW-1", "--wide"]).await;
    assert_eq!(r.code, 0, "{r:?}");
    let out = &r.stdout;
    assert!(
        out.contains("status        FAILED   attempt 4 of 4"),
        "{out}"
    );
    assert!(out.contains("correlation   corr-show-1"), "{out}");
    assert!(
        out.contains("last outcome  CANCELLED (NOT_AVAILABLE)"),
        "{out}"
    );
    assert!(out.contains("timeline (14 transitions)"), "{out}");
    let lines: Vec<&str> = out.lines().filter(|l| l.starts_with("  20")).collect();
    assert_eq!(lines.len(), 14, "{out}");
    let expect: Vec<(&str, &str, &str)> = {
        let mut v = vec![("starter", "[*] → IN_PROGRESS", "1")];
        for k in 1..=3u32 {
            let (a, b) = (k.to_string(), (k + 1).to_string());
            let ab: &'static str = Box::leak(format!("{a} → {b}").into_boxed_str());
            let bb: &'static str = Box::leak(b.clone().into_boxed_str());
            v.push(("response-handler", "IN_PROGRESS → SCHEDULING", ab));
            v.push(("response-handler", "SCHEDULING → SCHEDULED", ab));
            v.push(("retry-handler", "SCHEDULED → SENDING", ab));
            v.push(("retry-handler", "SENDING → IN_PROGRESS", bb));
        }
        v.push(("response-handler", "IN_PROGRESS → FAILED", "4"));
        v
    };
    for (line, (actor, transition, attempt)) in lines.iter().zip(&expect) {
        let cols: Vec<&str> = line.split_whitespace().collect();
        // TIME ACTOR FROM → TO ATTEMPT…
        assert_eq!(cols[1], *actor, "{line}");
        assert_eq!(
            format!("{} {} {}", cols[2], cols[3], cols[4]),
            *transition,
            "{line}"
        );
        assert!(
            line.contains(&format!(" {attempt} ")),
            "attempt {attempt} in {line}"
        );
        if transition.ends_with("SCHEDULING") || transition.ends_with("SCHEDULED") {
            let next = attempt.rsplit(' ').next().unwrap();
            assert!(
                line.contains(&format!("retry-TX-SHOW-1-{next}")),
                "schedule name in {line}"
            );
            assert!(
                line.contains("CANCELLED NOT_AVAILABLE") || transition.ends_with("SCHEDULED"),
                "{line}"
            );
        }
        if transition.ends_with("SENDING") {
            assert!(line.contains("RETRY_SCHEDULER"), "origin in {line}");
        }
    }
    assert!(
        lines[13].contains("CANCELLED NOT_AVAILABLE"),
        "{}",
        lines[13]
    );

    // The JSON form carries the same timeline, each row holding what changed.
    let v = retryctl(s, &["show", "TX-SHOW-1", "--json", "--payload"])
        .await
        .json();
    assert_eq!(v["record"]["current_attempt"], 4);
    assert_eq!(v["record"]["correlation_id"], "corr-show-1", "{v}");
    assert_eq!(v["payload"]["amount"], 42, "{v}");
    let rows = v["timeline"].as_array().unwrap();
    assert_eq!(rows.len(), 14);
    // The creation's entry carries the correlation id; later ones do not repeat it.
    let correlated: Vec<&serde_json::Value> = rows
        .iter()
        .filter(|r| !r["correlation_id"].is_null())
        .collect();
    assert_eq!(correlated.len(), 1, "{rows:?}");
    assert!(correlated[0]["from"].is_null(), "{}", correlated[0]);
    assert_eq!(correlated[0]["correlation_id"], "corr-show-1");
    for row in rows.iter().filter(|r| r["to"] == "SENDING") {
        assert!(
            row["outcome"].is_null(),
            "a SENDING row carries no outcome: {row}"
        );
        assert!(row["fire_drift_ms"].is_i64(), "{row}");
    }
    for row in rows.iter().filter(|r| r["to"] == "IN_PROGRESS") {
        let key = format!("TX-SHOW-1#{}", row["current_attempt"]);
        assert_eq!(row["idempotency_key"], key.as_str(), "{row}");
    }

    // Replay with one more attempt: recorded, and it runs (and fails) again.
    let r = retryctl(s, &["replay", "TX-SHOW-1", "--budget", "1"]).await;
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("max_attempts 4 → 5"), "{}", r.stdout);
    let v = wait_status(s, "TX-SHOW-1", "FAILED", LONG).await;
    let v = if v["record"]["current_attempt"] == 5 {
        v
    } else {
        tokio::time::sleep(Duration::from_secs(3)).await;
        wait_status(s, "TX-SHOW-1", "FAILED", LONG).await
    };
    assert_eq!(v["record"]["current_attempt"], 5);
    assert_eq!(v["record"]["max_attempts"], 5);
    let timeline = v["timeline"].as_array().unwrap();
    let replay = timeline
        .iter()
        .find(|e| e["from"] == "FAILED")
        .expect("a FAILED → SCHEDULING row");
    assert_eq!(replay["to"], "SCHEDULING");
    assert_eq!(replay["actor"], "operator");
    assert_eq!(replay["origin"], "OPERATOR");
    let text = retryctl(s, &["show", "TX-SHOW-1", "--wide"]).await.stdout;
    assert!(
        text.contains("operator          FAILED → SCHEDULING"),
        "{text}"
    );

    // Replaying what is not FAILED is refused (exit 4), naming the state.
    let r = retryctl(s, &["submit", "TX-SHOW-2", "--payload", "{}"]).await;
    assert_eq!(r.code, 0);
    let r = retryctl(s, &["replay", "TX-SHOW-2"]).await;
    r.fails(4, &["only FAILED transactions can be replayed"]);
    let r = retryctl(s, &["replay", "TX-SHOW-1", "--budget", "0"]).await;
    r.fails(2, &["--budget"]);

    // Without the stack's shard count, replay refuses rather than guess one (a wrong
    // count writes an index key the reconciler never reads); the record is untouched.
    let before = retryctl(s, &["show", "--json", "TX-SHOW-1"]).await.json();
    let r = retryctl_without(s, &["replay", "TX-SHOW-1"], &[vars::RECONCILE_SHARDS.name]).await;
    assert_eq!(r.code, 2, "a missing setting: {r:?}");
    assert!(
        r.stderr.contains("--reconcile-shards") && r.stderr.contains("never guesses"),
        "{}",
        r.stderr
    );
    let after = retryctl(s, &["show", "--json", "TX-SHOW-1"]).await.json();
    assert_eq!(before["record"], after["record"]);
    // Nor does stuck judge by a threshold it was not given.
    let r = retryctl(s, &["stuck"]).await;
    assert_eq!(r.code, 2, "a missing setting: {r:?}");
    assert!(
        r.stderr.contains("--reconcile-threshold-seconds"),
        "{}",
        r.stderr
    );
    // Nor by a requeue bound it was not given (it names parked records).
    let r = retryctl_without(
        s,
        &["stuck", "--reconcile-threshold-seconds", "60"],
        &[vars::RECONCILE_REQUEUE_MAX.name],
    )
    .await;
    assert_eq!(r.code, 2, "a missing setting: {r:?}");
    assert!(
        r.stderr.contains("--reconcile-requeue-max") && r.stderr.contains("never guesses"),
        "{}",
        r.stderr
    );
}

/// No service answers and the reconciler stays away: a started transaction stays
/// IN_PROGRESS with its first answer deadline. The functions' answer timeout is 2 s.
fn unanswered() -> &'static Running {
    static S: OnceLock<Running> = OnceLock::new();
    S.get_or_init(|| {
        let mut o = options("clia", 3600, 0.0);
        o.external_service = false;
        o.env.push((vars::ANSWER_TIMEOUT_SECONDS.name, "2".into()));
        start_stack(o)
    })
}

fn instant(v: &serde_json::Value) -> time::OffsetDateTime {
    let text = v.as_str().unwrap_or_else(|| panic!("not a time: {v}"));
    time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339)
        .unwrap_or_else(|e| panic!("{text}: {e}"))
}

/// GIVEN a stack whose answer timeout is 2 s WHEN `retryctl submit` starts a
/// transaction with the stack's setting THEN the record's first answer deadline is
/// its start + 2 s (not the built-in 6 h); without the setting, submit refuses,
/// naming the flag, and starts nothing.
#[tokio::test(flavor = "multi_thread")]
async fn submit_writes_the_first_answer_deadline_from_the_stacks_answer_timeout() {
    let s = unanswered();
    assert_eq!(s.answer_timeout_seconds(), "2");
    let r = retryctl(s, &["submit", "TX-DUE-1", "--payload", "{}", "--json"]).await;
    assert_eq!(r.code, 0, "{r:?}");
    let v = retryctl(s, &["show", "TX-DUE-1", "--json"]).await.json();
    assert_eq!(v["record"]["status"], "IN_PROGRESS", "{v:#}");
    let due = instant(&v["record"]["answer_due_at"]) - instant(&v["record"]["created_at"]);
    assert_eq!(due, time::Duration::seconds(2), "{v:#}");

    let r = retryctl_without(
        s,
        &["submit", "TX-DUE-2", "--payload", "{}"],
        &[vars::ANSWER_TIMEOUT_SECONDS.name],
    )
    .await;
    r.fails(2, &["--answer-timeout-seconds", "never guesses"]);
    let r = retryctl(s, &["show", "TX-DUE-2"]).await;
    assert_eq!(r.code, 3, "nothing started: {r:?}");
    // The flag gives it too.
    let r = retryctl_without(
        s,
        &words("submit TX-DUE-3 --payload {} --answer-timeout-seconds 2"),
        &[vars::ANSWER_TIMEOUT_SECONDS.name],
    )
    .await;
    assert_eq!(r.code, 0, "{r:?}");
    let v = retryctl(s, &["show", "TX-DUE-3", "--json"]).await.json();
    let due = instant(&v["record"]["answer_due_at"]) - instant(&v["record"]["created_at"]);
    assert_eq!(due, time::Duration::seconds(2), "{v:#}");
}

/// Every setting the tests' environment would give, so that only `--stack` gives them.
const BY_HAND: [&str; 5] = [
    "RETRYCTL_PREFIX",
    vars::RECONCILE_SHARDS.name,
    vars::RECONCILE_REQUEUE_MAX.name,
    vars::RECONCILE_THRESHOLD_SECONDS.name,
    vars::ANSWER_TIMEOUT_SECONDS.name,
];

/// `args` after `--stack NAME`.
fn by_stack<'a>(name: &'a str, args: &[&'a str]) -> Vec<&'a str> {
    let mut a = vec!["--stack", name];
    a.extend_from_slice(args);
    a
}

async fn cloudformation(s: &Running) -> aws_sdk_cloudformation::Client {
    aws_sdk_cloudformation::Client::new(&testkit::moto::sdk_config(&s.endpoint).await)
}

/// GIVEN the local stack, which DescribeStacks answers for as for a deployed one
/// WHEN `retryctl --stack NAME` runs with no other name or setting THEN every table,
/// queue and setting comes from the stack's outputs and parameters (submit writes
/// its answer deadline, stuck uses its threshold); a setting given otherwise that
/// disagrees is refused naming both; a stack without one output is refused naming it.
#[tokio::test(flavor = "multi_thread")]
async fn one_flag_reaches_the_stack_and_a_missing_output_is_named() {
    let s = unanswered();
    let cfn = cloudformation(s).await;
    let described = cfn
        .describe_stacks()
        .stack_name(&s.prefix)
        .send()
        .await
        .unwrap();
    let stack = &described.stacks()[0];
    let param = |k: &str| {
        stack
            .parameters()
            .iter()
            .find(|p| p.parameter_key() == Some(k))
            .and_then(|p| p.parameter_value())
            .unwrap_or_else(|| panic!("no parameter {k}"))
            .to_owned()
    };
    assert_eq!(param("AnswerTimeoutSeconds"), "2");
    for (flag, source) in retryctl::stack::FILLED {
        let key = match source {
            retryctl::stack::Source::Output(k) => k,
            retryctl::stack::Source::Parameter(k) => {
                assert!(!param(k).is_empty(), "{flag}");
                continue;
            }
        };
        assert!(
            stack.outputs().iter().any(|o| o.output_key() == Some(key)),
            "{flag}: output {key} registered"
        );
    }

    let r = retryctl_without(
        s,
        &by_stack(
            &s.prefix,
            &["submit", "TX-STK-1", "--payload", "{}", "--json"],
        ),
        &BY_HAND,
    )
    .await;
    assert_eq!(r.code, 0, "{r:?}");
    let r = retryctl_without(
        s,
        &by_stack(&s.prefix, &["show", "TX-STK-1", "--json"]),
        &BY_HAND,
    )
    .await;
    assert_eq!(r.code, 0, "{r:?}");
    let v = r.json();
    let due = instant(&v["record"]["answer_due_at"]) - instant(&v["record"]["created_at"]);
    assert_eq!(due, time::Duration::seconds(2), "{v:#}");
    let r = retryctl_without(s, &by_stack(&s.prefix, &["stuck", "--json"]), &BY_HAND).await;
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(
        r.json()["threshold_seconds"].to_string(),
        param("ReconcileThresholdSeconds")
    );
    for args in [
        &["stats"][..],
        &["dlq", "peek", "audit"],
        &["breaker", "status"],
    ] {
        let r = retryctl_without(s, &by_stack(&s.prefix, args), &BY_HAND).await;
        assert_eq!(r.code, 0, "{args:?}: {r:?}");
    }

    // A setting given by hand must agree with the stack.
    let r = retryctl_without(
        s,
        &by_stack(&s.prefix, &["stuck", "--reconcile-shards", "99"]),
        &BY_HAND,
    )
    .await;
    r.fails(2, &["--reconcile-shards", "output ReconcileShards"]);

    // A stack without one output: refused, naming it.
    let partial = format!("{}-partial", s.prefix);
    let mut outputs = serde_json::Map::new();
    for o in stack.outputs() {
        let (Some(k), Some(v)) = (o.output_key(), o.output_value()) else {
            continue;
        };
        if k != "AuditDLQUrl" {
            outputs.insert(k.into(), serde_json::json!({ "Value": v }));
        }
    }
    let template = serde_json::json!({
        "Resources": {"Registered": {"Type": "AWS::CloudFormation::WaitConditionHandle"}},
        "Outputs": outputs,
    });
    cfn.create_stack()
        .stack_name(&partial)
        .template_body(template.to_string())
        .send()
        .await
        .unwrap();
    let r = retryctl_without(s, &["--stack", &partial, "stats"], &BY_HAND).await;
    r.fails(
        2,
        &[&format!("stack {partial} has no output `AuditDLQUrl`")],
    );
    // --role-arn: AssumeRole at the same endpoint, then every call with its session:
    // the breaker's change log names the assumed role as the caller.
    let role = "arn:aws:iam::123456789012:role/stack-OperatorActRole";
    let open = [
        "--role-arn",
        role,
        "breaker",
        "open",
        "--for",
        "1",
        "--reason",
        "role test",
    ];
    let r = retryctl_without(s, &by_stack(&s.prefix, &open), &BY_HAND).await;
    assert_eq!(r.code, 0, "{r:?}");
    let r = retryctl_without(
        s,
        &by_stack(&s.prefix, &["breaker", "status", "--json"]),
        &BY_HAND,
    )
    .await;
    let by = r.json()["changes"][0]["by"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        by.contains("assumed-role/stack-OperatorActRole/retryctl"),
        "{by}: {r:?}"
    );
    let r = retryctl_without(s, &["--stack", "no-such-stack", "stats"], &BY_HAND).await;
    assert_ne!(r.code, 0, "{r:?}");
    assert!(r.stderr.contains("DescribeStacks"), "{}", r.stderr);
}

#[tokio::test(flavor = "multi_thread")]
async fn submit_is_idempotent_and_refuses_bad_arguments_naming_them() {
    let s = fast();
    let r = retryctl(
        s,
        &["submit", "TX-SUB-1", "--payload", r#"{"a":1}"#, "--json"],
    )
    .await;
    assert_eq!(r.code, 0, "{r:?}");
    let v = r.json();
    assert_eq!(v["result"], "started");
    assert_eq!(v["published"], true);
    // The same payload again: harmless.
    let r = retryctl(
        s,
        &["submit", "TX-SUB-1", "--payload", r#"{"a":1}"#, "--json"],
    )
    .await;
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(r.json()["result"], "already-started");
    // Another payload: refused, nothing published.
    let r = retryctl(s, &["submit", "TX-SUB-1", "--payload", r#"{"a":2}"#]).await;
    r.fails(4, &["different payload"]);
    // The same JSON with other white space is another payload: the refusal says so
    // and how to see the stored text.
    let r = retryctl(s, &["submit", "TX-SUB-1", "--payload", r#"{ "a": 1 }"#]).await;
    r.fails(
        4,
        &["white space included", "retryctl show TX-SUB-1 --payload"],
    );

    let r = retryctl(s, &["submit", "TX-BAD", "--payload", "{nope"]).await;
    r.fails(2, &["invalid value for --payload: `{nope`"]);
    let r = retryctl(
        s,
        &["submit", "TX-BAD", "--payload", "{}", "--max-attempts", "0"],
    )
    .await;
    r.fails(2, &["invalid value for --max-attempts: `0`"]);
    let r = retryctl(
        s,
        &[
            "submit",
            "TX-BAD",
            "--payload",
            "{}",
            "--correlation-id",
            "",
        ],
    )
    .await;
    r.fails(
        2,
        &["invalid value for --correlation-id: ``: must not be empty"],
    );
    let r = retryctl(s, &["submit", " padded", "--payload", "{}"]).await;
    r.fails(2, &["invalid value for <id>: ` padded`"]);
    let r = retryctl(s, &words("submit TX-BAD --payload {} --max-attempts many")).await;
    assert_eq!(r.code, 2, "clap's own error");
    assert!(
        r.stderr.contains("--max-attempts") && r.stderr.contains("many"),
        "{}",
        r.stderr
    );
    let r = retryctl(
        s,
        &words("submit TX-BAD --payload {} --json --max-attempts 0"),
    )
    .await;
    assert_eq!(r.json()["error"], "bad-argument");
}

#[tokio::test(flavor = "multi_thread")]
async fn unknown_ids_are_reported_by_every_command_that_takes_one() {
    let s = fast();
    for cmd in ["show", "resolve", "replay"] {
        let r = retryctl(s, &[cmd, "TX-NOPE"]).await;
        assert_eq!(r.code, 3, "{cmd}: {r:?}");
        assert!(
            r.stderr.contains("unknown transaction `TX-NOPE`"),
            "{cmd}: {}",
            r.stderr
        );
    }
    let r = retryctl(s, &["show", "TX-NOPE", "--json"]).await;
    assert_eq!(r.json()["error"], "unknown-transaction");
    // No stack named at all: the missing setting is named.
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_retryctl"))
        .args(["stats"])
        .env_remove("RETRYCTL_PREFIX")
        .env_remove(vars::TRANSACTIONS_TABLE.name)
        .env("AWS_ENDPOINT_URL", &s.endpoint)
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr)
        .contains("--transactions-table (or TRANSACTIONS_TABLE)"));
}

/// GIVEN a transaction SCHEDULED an hour ahead WHEN resolved THEN it is SUCCEEDED by
/// the operator, its schedule deleted; resolving again says so; `stats` counts it.
#[tokio::test(flavor = "multi_thread")]
async fn resolve_succeeds_a_waiting_transaction_and_deletes_its_schedule() {
    let s = slow();
    assert_eq!(
        retryctl(s, &["submit", "TX-RES-1", "--payload", "{}"])
            .await
            .code,
        0
    );
    wait_status(s, "TX-RES-1", "SCHEDULED", LONG).await;
    let sdk = testkit::moto::sdk_config(&s.endpoint).await;
    let sched = aws_sdk_scheduler::Client::new(&sdk);
    let group = format!("{}-retries", s.prefix);
    let exists = |name: &'static str| testkit::moto::schedule_exists(&sched, &group, name);
    assert!(exists("retry-TX-RES-1-2").await);

    let r = retryctl(s, &["resolve", "TX-RES-1", "--json"]).await;
    assert_eq!(r.code, 0, "{r:?}");
    let v = r.json();
    assert_eq!(v["result"], "resolved");
    assert_eq!(v["schedule"], "schedule deleted");
    assert!(!exists("retry-TX-RES-1-2").await, "schedule deleted");
    let v = wait_status(s, "TX-RES-1", "SUCCEEDED", LONG).await;
    let last = v["timeline"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["from"], "SCHEDULED");
    assert_eq!(last["actor"], "operator");
    assert_eq!(last["reason"], "RESOLVED_BY_OTHER_MEANS");

    let r = retryctl(s, &["resolve", "TX-RES-1"]).await;
    assert_eq!(r.code, 0);
    assert!(r.stdout.contains("already-resolved"), "{}", r.stdout);
    // `show` says who ended it, not the service's CANCELLED as if it were the end.
    let shown = retryctl(s, &["show", "TX-RES-1"]).await.stdout;
    assert!(
        shown.contains("resolved      by an operator (RESOLVED_BY_OTHER_MEANS)"),
        "{shown}"
    );
    assert!(!shown.contains("last outcome"), "{shown}");

    // Not waiting for a retry: refused.
    assert_eq!(
        retryctl(s, &["submit", "TX-RES-2", "--payload", "{}"])
            .await
            .code,
        0
    );
    wait_status(s, "TX-RES-2", "SCHEDULED", LONG).await;
    let st = retryctl(s, &["stats", "--json"]).await.json();
    assert!(st["by_status"]["SUCCEEDED"].as_u64().unwrap() >= 1, "{st}");
    assert!(
        st["by_status_and_attempt"]["SCHEDULED"]["1"]
            .as_u64()
            .unwrap()
            >= 1,
        "{st}"
    );
    // JSON as a contract: a schema version, every status a key (zeros included), the
    // depth of every dead-letter queue.
    assert_eq!(st["schema_version"], 1, "{st}");
    let by_status = st["by_status"].as_object().unwrap();
    assert_eq!(by_status.len(), 6, "{st}");
    assert!(by_status.values().all(|v| v.is_u64()), "{st}");
    let dlqs = st["dlq_depths"].as_object().unwrap();
    for q in ["request", "response", "retry", "scheduler"] {
        assert!(dlqs[q].is_u64(), "{q}: {st}");
    }
    let text = retryctl(s, &["stats"]).await.stdout;
    assert!(text.lines().any(|l| l.starts_with("SUCCEEDED")), "{text}");
    assert!(text.contains("att 1"), "{text}");
    assert!(text.contains("dead-letter queues"), "{text}");
}

/// GIVEN a SCHEDULING record older than the threshold (a crash between persisting
/// the fire time and creating the schedule) WHEN `stuck` runs THEN it lists it with the
/// action the reconciler would take; fresh transactions are not listed.
#[tokio::test(flavor = "multi_thread")]
async fn stuck_lists_what_the_reconciler_would_act_on() {
    use domain::machine::{Actor, ReconcileKey};
    use domain::{
        Attempt, MaxAttempts, ScheduleName, Status, Timestamp, TransactionId, TransactionRecord,
    };
    let s = slow();
    let sdk = testkit::moto::sdk_config(&s.endpoint).await;
    let ddb = aws_sdk_dynamodb::Client::new(&sdk);
    let id = TransactionId::parse("TX-STUCK-1").unwrap();
    let long_ago = SystemClock.now().plus_millis(-3_600_000);
    let mut rec = TransactionRecord::started(id.clone(), MaxAttempts::new(4).unwrap(), long_ago);
    rec.status = Status::Scheduling;
    rec.next_attempt = Some(Attempt::new(2).unwrap());
    rec.next_fire_at = Some(long_ago.plus_millis(60_000));
    rec.schedule_name = Some(ScheduleName::for_retry(&id, Attempt::new(2).unwrap()));
    rec.last_actor = Actor::ResponseHandler;
    rec.reconcile = ReconcileKey::derive(Status::Scheduling, &id, 8, long_ago, rec.next_fire_at);
    ddb.put_item()
        .table_name(format!("{}-transactions", s.prefix))
        .set_item(Some(aws::item::record_to_item(&rec)))
        .send()
        .await
        .unwrap();
    assert_eq!(
        retryctl(s, &["submit", "TX-STUCK-FRESH", "--payload", "{}"])
            .await
            .code,
        0
    );
    wait_status(s, "TX-STUCK-FRESH", "SCHEDULED", LONG).await;

    let r = retryctl(s, &["stuck", "--reconcile-threshold-seconds", "60"]).await;
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("TX-STUCK-1"), "{}", r.stdout);
    assert!(!r.stdout.contains("TX-STUCK-FRESH"), "{}", r.stdout);
    let line = r
        .stdout
        .lines()
        .find(|l| l.starts_with("TX-STUCK-1"))
        .unwrap();
    assert!(
        line.contains("SCHEDULING") && line.contains("publish-retry"),
        "{line}"
    );
    let v = retryctl(
        s,
        &["stuck", "--json", "--reconcile-threshold-seconds", "60"],
    )
    .await
    .json();
    let ids: Vec<&str> = v["stuck"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|x| x["transaction_id"].as_str())
        .collect();
    assert!(ids.contains(&"TX-STUCK-1"));
    assert!(!ids.contains(&"TX-STUCK-FRESH"));
    let _ = Timestamp::from_millis(0);
}

/// GIVEN a malformed response (the handler keeps it, unchanged, in the response DLQ)
/// WHEN redriven THEN it goes back to the response queue (and, still malformed, back
/// to the DLQ); a retry event in the scheduler DLQ goes to the retry queue.
#[tokio::test(flavor = "multi_thread")]
async fn redrive_moves_dlq_messages_back_to_their_source() {
    let s = fast();
    let sdk = testkit::moto::sdk_config(&s.endpoint).await;
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let url = |name: &'static str| queue_url(&sqs, s, name);
    let depth = |u: String| {
        let sqs = sqs.clone();
        async move {
            let o = sqs
                .get_queue_attributes()
                .queue_url(u)
                .attribute_names(
                    aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessages,
                )
                .send()
                .await
                .unwrap();
            o.attributes()
                .and_then(|a| {
                    a.get(&aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessages)
                })
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0)
        }
    };
    let wait_depth = |u: String, n: u64| async move {
        for _ in 0..100 {
            if depth(u.clone()).await == n {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        false
    };
    sqs.send_message()
        .queue_url(url("response").await)
        .message_body("not json at all")
        .send()
        .await
        .unwrap();
    assert!(
        wait_depth(url("response-dlq").await, 1).await,
        "handler dead-lettered it"
    );
    let before = depth(url("response-dlq").await).await;
    // A look leaves everything in place: peek and a dry run show the message, body and
    // receive count, and the DLQ keeps it.
    let r = retryctl(s, &["dlq", "peek", "response", "--json"]).await;
    assert_eq!(r.code, 0, "{r:?}");
    let peeked = r.json();
    let messages = peeked["messages"].as_array().unwrap();
    assert!(!messages.is_empty(), "{peeked}");
    assert!(
        messages.iter().any(|m| m["body"] == "not json at all"),
        "{peeked}"
    );
    assert!(
        messages
            .iter()
            .all(|m| m["receive_count"].as_u64() >= Some(1)),
        "{peeked}"
    );
    let r = retryctl(s, &["redrive", "response", "--dry-run"]).await;
    r.prints(0, &["(dry run: nothing moved)"]);
    assert!(r.stdout.contains("body: not json at all"), "{}", r.stdout);
    assert_eq!(
        depth(url("response-dlq").await).await,
        before,
        "dry run moved nothing"
    );
    let r = retryctl(s, &["redrive", "response", "--json"]).await;
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.json()["moved"].as_u64().unwrap() >= before, "{r:?}");
    // It went through the response queue and the handler again: back in the DLQ.
    assert!(wait_depth(url("response-dlq").await, 1).await);

    sqs.send_message()
        .queue_url(url("scheduler-dlq").await)
        .message_body(r#"{"transaction_id":"TX-NOBODY","origin":"RETRY_SCHEDULER","attempt":2}"#)
        .send()
        .await
        .unwrap();
    let r = retryctl(s, &["redrive", "scheduler"]).await;
    r.prints(0, &["scheduler: moved 1 message(s)"]);
    assert_eq!(depth(url("scheduler-dlq").await).await, 0);
    // The retry handler saw it: unknown transaction → kept in the retry DLQ.
    assert!(wait_depth(url("retry-dlq").await, 1).await);

    let r = retryctl(s, &["redrive", "sideways"]).await;
    r.fails(2, &["sideways", "request, response, retry, scheduler"]);
    let r = retryctl(s, &["redrive", "retry", "--max", "0"]).await;
    r.fails(2, &["--max"]);
}

/// Runs the binary with `args` and the given environment, nothing inherited from a
/// stack: (exit code, stdout, stderr).
async fn bare(args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String, String) {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_retryctl"));
    cmd.args(args)
        .env_remove("RETRYCTL_PREFIX")
        .env_remove(vars::TRANSACTIONS_TABLE.name)
        .env_remove("AWS_ENDPOINT_URL")
        .env("AWS_EC2_METADATA_DISABLED", "true");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd
        .output()
        .await
        .unwrap_or_else(|e| panic!("retryctl did not run: {e}"));
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Each operator command's `--help` ends with examples, and lists its own options
/// first: the stack's settings stand apart under their own heading.
#[tokio::test(flavor = "multi_thread")]
async fn help_shows_examples_and_keeps_the_stack_settings_apart() {
    for sub in [
        "submit", "show", "list", "stats", "stuck", "resolve", "redrive", "dlq", "replay",
        "breaker", "demo",
    ] {
        let (code, out, err) = bare(&[sub, "--help"], &[]).await;
        assert_eq!(code, Some(0), "{sub}: {err}");
        assert!(
            out.contains(&format!("Examples:\n  retryctl {sub}")),
            "{sub}: {out}"
        );
        let usage = out.lines().find(|l| l.starts_with("Usage:")).unwrap();
        assert!(!usage.contains("--endpoint-url"), "{sub}: {usage}");
        let own = out.find("Options:").unwrap();
        let stack = out.find("Stack (every command").unwrap();
        assert!(own < stack, "{sub}: its own options first");
        assert!(out[stack..].contains("--endpoint-url"), "{sub}");
        assert!(!out[own..stack].contains("--endpoint-url"), "{sub}");
    }
}

/// GIVEN the common AWS failures (nothing at the endpoint, a prefix naming no table,
/// no credentials) WHEN a command runs THEN it says so in one line with a hint naming
/// the flag to check, the JSON error has a kind per cause and every key, and the SDK's
/// detail appears only with --verbose. Argument errors are JSON too under --json.
#[tokio::test(flavor = "multi_thread")]
async fn aws_failures_are_one_line_with_a_hint_and_a_kind() {
    let s = fast();
    // Nothing listens on port 1.
    let nowhere = words("--endpoint-url http://127.0.0.1:1 --prefix x stats");
    let (code, out, err) = bare(&[&nowhere[..], &["--json"]].concat(), &[]).await;
    assert_eq!(code, Some(1), "{err}");
    let j: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(j["error"], "aws-unreachable", "{j}");
    assert_eq!(j["schema_version"], 1);
    assert_eq!(j["operation"], "Scan");
    assert!(j["detail"].is_null(), "{j}");
    assert!(j["hint"]
        .as_str()
        .unwrap()
        .contains("--endpoint-url `http://127.0.0.1:1`"));
    assert!(err.contains("cannot reach the AWS endpoint"), "{err}");
    assert!(
        !err.contains("DispatchFailure"),
        "SDK detail without --verbose: {err}"
    );
    assert!(err.lines().count() <= 3, "{err}");
    let (_, _, err) = bare(&[&nowhere[..], &["--verbose"]].concat(), &[]).await;
    assert!(err.contains("SDK detail: "), "{err}");

    // A prefix that names no table on a running endpoint.
    let wrong = format!("--endpoint-url {} --prefix wrongprefix stats", s.endpoint);
    let wrong = words(&wrong);
    let (code, out, err) = bare(&[&wrong[..], &["--json"]].concat(), &[]).await;
    assert_eq!(code, Some(1), "{err}");
    let j: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(j["error"], "aws-not-found", "{j}");
    assert!(
        j["message"]
            .as_str()
            .unwrap()
            .contains("`wrongprefix-transactions`"),
        "{j}"
    );
    assert!(
        j["hint"]
            .as_str()
            .unwrap()
            .contains("--prefix `wrongprefix`"),
        "{j}"
    );

    // No credentials anywhere.
    let (code, _, err) = bare(
        &wrong,
        &[
            ("HOME", "/nonexistent"),
            ("AWS_ACCESS_KEY_ID", ""),
            ("AWS_SECRET_ACCESS_KEY", ""),
        ],
    )
    .await;
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("no usable AWS credentials"), "{err}");
    assert!(err.contains("AWS_ACCESS_KEY_ID"), "{err}");

    // Argument errors: JSON under --json, the flag named; --moto-endpoint validated.
    let (code, out, _) = bare(&["stats", "--bogus", "--json"], &[]).await;
    assert_eq!(code, Some(2));
    let j: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(j["error"], "bad-argument");
    assert!(j["message"].as_str().unwrap().contains("--bogus"), "{j}");
    let (code, _, err) = bare(&["demo", "--moto-endpoint", "foo"], &[]).await;
    assert_eq!(code, Some(2));
    assert!(err.contains("--moto-endpoint: `foo`"), "{err}");
}

/// GIVEN a FAILED transaction WHEN resolved THEN the refusal suggests `replay`; a
/// payload over the limit is named by its size, not echoed back whole.
#[tokio::test(flavor = "multi_thread")]
async fn refusals_say_what_to_do_instead_and_do_not_echo_big_payloads() {
    let s = fast();
    submit(s, "TX-HINT-1", "{}", "1").await;
    wait_status(s, "TX-HINT-1", "FAILED", LONG).await;
    let r = retryctl(s, &["resolve", "TX-HINT-1"]).await;
    r.fails(4, &["`retryctl replay TX-HINT-1`"]);

    // Over the size limit, from a file: the file is named.
    let big = format!("{{\"blob\":\"{}\"}}", "x".repeat(300 * 1024));
    let file = std::env::temp_dir().join(format!("retryctl-big-{}.json", std::process::id()));
    std::fs::write(&file, &big).unwrap();
    let arg = format!("@{}", file.display());
    let r = retryctl(s, &["submit", "TX-HINT-2", "--payload", &arg]).await;
    std::fs::remove_file(&file).unwrap();
    assert_eq!(r.code, 2, "{r:?}");
    assert!(
        r.stderr.len() < 1_000,
        "payload echoed: {} bytes",
        r.stderr.len()
    );
    assert!(r.stderr.contains(&format!("`{arg}`")), "{}", r.stderr);
    // Inline and unreadable: cut to a line, its size said.
    let bad = format!("{{oops{}", "x".repeat(5_000));
    let r = retryctl(s, &["submit", "TX-HINT-3", "--payload", &bad]).await;
    assert_eq!(r.code, 2, "{r:?}");
    assert!(
        r.stderr.len() < 1_000,
        "payload echoed: {} bytes",
        r.stderr.len()
    );
}

/// GIVEN a transaction whose audit entries are missing (the audit writer gave up on
/// its stream batch) and the audit DLQ holding the batch's on-failure record WHEN
/// `redrive audit` runs THEN the range is read again from the stream and the entries
/// are back; a record naming a shard the stream does not have is left, with why.
#[tokio::test(flavor = "multi_thread")]
async fn redrive_audit_reads_the_stream_range_again() {
    let s = fast();
    let id = "TX-AUDIT-1";
    let r = retryctl(s, &["submit", id, "--payload", "{}", "--max-attempts", "1"]).await;
    assert_eq!(r.code, 0, "{r:?}");
    wait_status(s, id, "FAILED", LONG).await;

    let sdk = testkit::moto::sdk_config(&s.endpoint).await;
    let ddb = aws_sdk_dynamodb::Client::new(&sdk);
    let audit_table = format!("{}-audit", s.prefix);
    // The audit writer "gave up": its entries are gone.
    let items = ddb
        .query()
        .table_name(&audit_table)
        .key_condition_expression("#id = :id")
        .expression_attribute_names("#id", "transaction_id")
        .expression_attribute_values(":id", aws_sdk_dynamodb::types::AttributeValue::S(id.into()))
        .send()
        .await
        .unwrap();
    assert!(!items.items().is_empty());
    for item in items.items() {
        let key: std::collections::HashMap<_, _> = ["transaction_id", "audit_key"]
            .iter()
            .map(|k| ((*k).to_owned(), item[*k].clone()))
            .collect();
        ddb.delete_item()
            .table_name(&audit_table)
            .set_key(Some(key))
            .send()
            .await
            .unwrap();
    }
    let shown = retryctl(s, &["show", id, "--json"]).await.json();
    assert_eq!(shown["timeline"].as_array().unwrap().len(), 0);

    // The on-failure record of the batch: the whole shard so far.
    let streams = aws_sdk_dynamodbstreams::Client::new(&sdk);
    let (record, _) = testkit::drain::failure_record(&streams, &s.stream_arn, None)
        .await
        .unwrap();
    let (elsewhere, _) =
        testkit::drain::failure_record(&streams, &s.stream_arn, Some("shardId-nope"))
            .await
            .unwrap();
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let dlq = queue_url(&sqs, s, "audit-dlq").await;
    send_all(&sqs, &dlq, [record, elsewhere]).await;

    let r = retryctl(s, &["redrive", "audit", "--json"]).await;
    assert_eq!(r.code, 0, "{r:?}");
    let v = r.json();
    assert_eq!(v["ranges_audited"], 1, "{v}");
    assert!(v["entries_written"].as_u64().unwrap() >= 2, "{v}");
    let left = v["not_audited"].as_array().unwrap();
    assert_eq!(left.len(), 1, "{v}");
    assert!(
        left[0]["why"].as_str().unwrap().contains("shardId-nope"),
        "{v}"
    );
    let shown = retryctl(s, &["show", id, "--json"]).await.json();
    let timeline = shown["timeline"].as_array().unwrap();
    assert_eq!(timeline.len(), 2, "{shown}");
    assert_eq!(timeline[1]["to"], "FAILED");
    // The unreadable record stays in the DLQ for a human.
    let st = retryctl(s, &["stats", "--json"]).await.json();
    assert_eq!(st["dlq_depths"]["audit"], 1, "{st}");
}

/// The URL of the stack's queue `name` (`PREFIX-name`).
async fn queue_url(sqs: &aws_sdk_sqs::Client, s: &Running, name: &str) -> String {
    let name = format!("{}-{name}", s.prefix);
    let out = sqs.get_queue_url().queue_name(&name).send().await;
    match out.map(|o| o.queue_url().map(str::to_owned)) {
        Ok(Some(url)) => url,
        other => panic!("GetQueueUrl {name}: {other:?}"),
    }
}

/// Sends each body to `queue_url`.
async fn send_all(
    sqs: &aws_sdk_sqs::Client,
    queue_url: &str,
    bodies: impl IntoIterator<Item = impl Into<String>>,
) {
    for body in bodies {
        if let Err(e) = sqs
            .send_message()
            .queue_url(queue_url)
            .message_body(body)
            .send()
            .await
        {
            panic!("SendMessage to {queue_url}: {e}");
        }
    }
}

/// Creates a queue (with a redrive policy when given) and returns its URL.
async fn create_queue(sqs: &aws_sdk_sqs::Client, name: &str, redrive: Option<String>) -> String {
    let mut create = sqs.create_queue().queue_name(name);
    if let Some(p) = redrive {
        create = create.attributes(aws_sdk_sqs::types::QueueAttributeName::RedrivePolicy, p);
    }
    let out = create
        .send()
        .await
        .unwrap_or_else(|e| panic!("CreateQueue {name}: {e}"));
    out.queue_url().unwrap_or_default().to_owned()
}

/// GIVEN a queue whose DLQ holds two messages, one naming a transaction, and a
/// consumer that keeps failing that one (max receive count 1) WHEN the DLQ is redriven
/// with --wait THEN both are moved and the output names the one that came back: its
/// DLQ message id, the id it was sent under and its transaction id; the other is not
/// named. Without --wait nothing is watched.
#[tokio::test(flavor = "multi_thread")]
async fn redrive_says_which_messages_came_back_within_its_wait() {
    let endpoint = common::moto();
    let sdk = testkit::moto::sdk_config(&endpoint).await;
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let prefix = testkit::moto::unique_prefix("rdw");
    let dlq = create_queue(&sqs, &format!("{prefix}-dlq"), None).await;
    let arn = sqs
        .get_queue_attributes()
        .queue_url(&dlq)
        .attribute_names(aws_sdk_sqs::types::QueueAttributeName::QueueArn)
        .send()
        .await
        .unwrap()
        .attributes()
        .unwrap()[&aws_sdk_sqs::types::QueueAttributeName::QueueArn]
        .clone();
    let policy = format!(r#"{{"deadLetterTargetArn":"{arn}","maxReceiveCount":"1"}}"#);
    let src = create_queue(&sqs, &format!("{prefix}-src"), Some(policy)).await;
    let failing = r#"{"transaction_id":"TX-BACK","attempt":1,"outcome":"CANCELLED"}"#;
    send_all(&sqs, &dlq, [failing, "handled fine"]).await;
    // The consumer: deletes what it handles, leaves the failing one to be received
    // again (and so dead-lettered).
    let consumer = {
        let (sqs, src) = (sqs.clone(), src.clone());
        tokio::spawn(async move {
            for _ in 0..100 {
                let got = sqs
                    .receive_message()
                    .queue_url(&src)
                    .max_number_of_messages(10)
                    .visibility_timeout(0)
                    .send()
                    .await
                    .unwrap();
                for m in got.messages() {
                    if m.body() != Some(failing) {
                        sqs.delete_message()
                            .queue_url(&src)
                            .receipt_handle(m.receipt_handle().unwrap())
                            .send()
                            .await
                            .unwrap();
                    }
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    let env = [
        ("AWS_ENDPOINT_URL", endpoint.as_str()),
        ("AWS_ACCESS_KEY_ID", "testing"),
        ("AWS_SECRET_ACCESS_KEY", "testing"),
        ("AWS_REGION", "us-east-1"),
    ];
    let argv = format!("redrive response --response-queue-url {src} --wait 15 --json");
    let (code, out, err) = bare(&words(&argv), &env).await;
    consumer.abort();
    assert_eq!(code, Some(0), "{out}\n{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["moved"], 2, "{v}");
    let back = v["came_back"].as_array().unwrap();
    assert_eq!(back.len(), 1, "{v}");
    assert_eq!(back[0]["transaction_id"], "TX-BACK");
    assert!(
        back[0]["message_id"]
            .as_str()
            .is_some_and(|s| !s.is_empty()),
        "{v}"
    );
    assert!(
        back[0]["sent_as"].as_str().is_some_and(|s| !s.is_empty()),
        "{v}"
    );
    // The audit DLQ is audited, not moved: --wait does not apply.
    let (code, _, err) = bare(
        &["--prefix", &prefix, "redrive", "audit", "--wait", "5"],
        &env,
    )
    .await;
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--wait"), "{err}");
}

/// GIVEN the breaker table WHEN an operator reads, opens and closes the breaker THEN
/// status says CLOSED with no change, open needs --for and writes OPEN with the
/// caller's identity and the reason in the change log, close writes CLOSED; each
/// write moves the version on.
#[tokio::test(flavor = "multi_thread")]
async fn breaker_status_open_and_close_are_recorded() {
    use aws_sdk_dynamodb::types::AttributeValue::{N, S};
    let s = fast();
    let r = retryctl(s, &["breaker", "status", "--json"]).await;
    assert_eq!(r.code, 0, "{r:?}");
    let v = r.json();
    assert_eq!(
        (v["state"].as_str(), v["version"].as_u64()),
        (Some("CLOSED"), Some(0))
    );
    assert_eq!(v["changes"].as_array().map(Vec::len), Some(0));

    let r = retryctl(s, &["breaker", "open", "--reason", "INC-1"]).await;
    assert_eq!(r.code, 2, "a missing --for: {r:?}");
    assert!(r.stderr.contains("--for"), "{}", r.stderr);
    let r = retryctl(s, &["breaker", "open", "--for", "0"]).await;
    r.fails(2, &["--for", "0"]);

    let r = retryctl(s, &words("breaker open --for 600 --reason INC-1 --json")).await;
    assert_eq!(r.code, 0, "{r:?}");
    let v = r.json();
    assert_eq!(
        (v["from"].as_str(), v["state"].as_str()),
        (Some("CLOSED"), Some("OPEN"))
    );
    assert_eq!(v["detail"]["cooldown_ms"].as_i64(), Some(600_000));

    let r = retryctl(s, &["breaker", "status"]).await;
    r.prints(0, &["OPEN until", "version 1"]);
    assert!(
        r.stdout.contains("forced") && r.stdout.contains(": INC-1"),
        "{}",
        r.stdout
    );

    let r = retryctl(
        s,
        &["breaker", "close", "--reason", "INC-1 fixed", "--json"],
    )
    .await;
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(r.json()["state"].as_str(), Some("CLOSED"));
    let v = retryctl(s, &["breaker", "status", "--json"]).await.json();
    let changes = v["changes"].as_array().unwrap();
    let seen: Vec<(&str, &str, u64)> = changes
        .iter()
        .map(|c| {
            (
                c["to"].as_str().unwrap(),
                c["reason"].as_str().unwrap(),
                c["version"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        vec![("CLOSED", "INC-1 fixed", 2), ("OPEN", "INC-1", 1)]
    );
    assert!(
        changes
            .iter()
            .all(|c| c["by"].as_str().unwrap().starts_with("arn:aws:")),
        "{changes:?}"
    );

    // A breaker item that does not say what it is (HALF_OPEN without its cool-down):
    // status reports the error, and `close` repairs it, from CORRUPT.
    let sdk = testkit::moto::sdk_config(&s.endpoint).await;
    let table = aws::config::StackNames::new(&s.prefix).breaker_table;
    aws_sdk_dynamodb::Client::new(&sdk)
        .put_item()
        .table_name(&table)
        .item("pk", S("external-service".into()))
        .item("sk", S("BREAKER".into()))
        .item("state", S("HALF_OPEN".into()))
        .item("version", N("7".into()))
        .item("since", N("1".into()))
        .item("admitted", N("0".into()))
        .send()
        .await
        .unwrap();
    let r = retryctl(s, &["breaker", "status"]).await;
    assert_ne!(r.code, 0, "{r:?}");
    assert!(r.stderr.contains("cooldown_ms: missing"), "{}", r.stderr);
    let r = retryctl(s, &["breaker", "close", "--reason", "INC-2", "--json"]).await;
    assert_eq!(r.code, 0, "{r:?}");
    let v = r.json();
    assert!(v["from"].as_str().unwrap().starts_with("CORRUPT"), "{v}");
    assert_eq!(
        (v["state"].as_str(), v["version"].as_u64()),
        (Some("CLOSED"), Some(8))
    );
    let v = retryctl(s, &["breaker", "status", "--json"]).await.json();
    assert_eq!(v["state"].as_str(), Some("CLOSED"));
}
