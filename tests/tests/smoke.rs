//! Smoke test of the Lambda binaries: a moto server on loopback, the stack's tables,
//! queues and schedule group provisioned on it, `cargo lambda watch` running the
//! functions with their environment pointed at moto, and every function invoked with
//! the files in `tests/events/` through `cargo lambda invoke --data-file`. Asserts the
//! batch responses, the state items, the schedules, the queues and DLQs, and the
//! audit entries derived from the table's stream.
//!
//! Needs `cargo-lambda` and `moto_server` on PATH: `. scripts/tools.sh`. Without them
//! the test fails and says so; it never passes silently.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use aws::audit::AuditWriter;
use aws::config::vars;
use aws::config::StackNames;
use aws::dynamo::{DynamoStore, PayloadsTable};
use aws::sqs::SqsRequestPublisher;
use aws_sdk_sqs::types::Message;
use domain::exec::StartPorts;
use domain::ports::{Clock, Records, SystemClock};
use domain::{MaxAttempts, Payload, Status, TransactionId, TransactionRecord};
use runtime::settings::Settings;
use serde_json::Value;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};
use testkit::drain::{drain_stream, StreamPosition};
use testkit::moto::{self, MotoServer};
use testkit::provision::{provision, Provisioned};

const FUNCTIONS: [&str; 3] = ["response-handler", "retry-handler", "reconciler"];

/// Longest wait for one invocation (the first one of a function may build it).
const INVOKE_TIMEOUT: Duration = Duration::from_secs(300);

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join(program).is_file()))
}

fn require_tools() {
    for tool in ["cargo-lambda", "moto_server"] {
        assert!(
            on_path(tool),
            "`{tool}` is not on PATH: source scripts/tools.sh first \
             (`. scripts/tools.sh` installs cargo-lambda and moto into .venv)"
        );
    }
}

fn free_port() -> u16 {
    TcpListener::bind(("127.0.0.1", 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn cargo() -> String {
    std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned())
}

/// `cargo lambda watch` in its own process group, under a watchdog shell holding a
/// pipe from this process: dropping the guard (a failed assertion included) or this
/// process dying closes the pipe and the shell stops the whole group.
struct Watch {
    child: Child,
    lifeline: Option<ChildStdin>,
    log: PathBuf,
    port: u16,
}

impl Watch {
    fn start(port: u16, env: &[(String, String)], dir: &Path) -> Watch {
        let log = dir.join("watch.log");
        let out = std::fs::File::create(&log).unwrap();
        let script = format!(
            "cargo lambda watch --invoke-address 127.0.0.1 --invoke-port {port} --ignore-changes \
             --env-file '{}' & cat >/dev/null; kill -TERM 0",
            dir.join("functions.env").display()
        );
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(script)
            .current_dir(workspace_root())
            .stdin(Stdio::piped())
            .stdout(out.try_clone().unwrap())
            .stderr(out);
        for (k, v) in env {
            cmd.env(k, v);
        }
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        let mut child = cmd.spawn().expect("spawn sh for cargo lambda watch");
        let lifeline = child.stdin.take();
        let watch = Watch {
            child,
            lifeline,
            log,
            port,
        };
        let deadline = Instant::now() + Duration::from_secs(120);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "cargo lambda watch did not listen on 127.0.0.1:{port}:\n{}",
                watch.log_tail()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        watch
    }

    fn log_tail(&self) -> String {
        let mut s = String::new();
        if let Ok(mut f) = std::fs::File::open(&self.log) {
            let _ = f.read_to_string(&mut s);
        }
        let lines: Vec<&str> = s.lines().collect();
        lines[lines.len().saturating_sub(60)..].join("\n")
    }

    /// Every JSON line the functions wrote (logs and metrics).
    fn json_lines(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l.trim()).ok())
            .filter(Value::is_object)
            .collect()
    }

    /// `cargo lambda invoke <function> --data-file tests/events/<file>`: the JSON
    /// the function returned.
    fn invoke(&self, function: &str, file: &str) -> Value {
        let path = workspace_root().join("tests/events").join(file);
        assert!(path.is_file(), "{}", path.display());
        let mut child = Command::new("cargo")
            .args(["lambda", "invoke", function])
            .args(["--invoke-address", "127.0.0.1"])
            .args(["--invoke-port", &self.port.to_string()])
            .arg("--data-file")
            .arg(&path)
            .args(["--output-format", "json"])
            .current_dir(workspace_root())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run cargo lambda invoke");
        // Bounded: a function that cannot start must fail the test, not hang it.
        let deadline = Instant::now() + INVOKE_TIMEOUT;
        while child.try_wait().unwrap().is_none() {
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "invoke {function} {file}: no answer within {INVOKE_TIMEOUT:?}\nwatch log:\n{}",
                    self.log_tail()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let out = child.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "invoke {function} {file} failed: {}\nstdout: {stdout}\nstderr: {}\nwatch log:\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr),
            self.log_tail()
        );
        serde_json::from_str(stdout.trim())
            .unwrap_or_else(|e| panic!("invoke {function} {file}: not JSON ({e}): {stdout}"))
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        drop(self.lifeline.take());
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        // The group did not stop: kill it (the process group this test started).
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.child.id())])
            .status();
        let _ = self.child.wait();
    }
}

fn no_failures(v: &Value) {
    assert_eq!(v, &serde_json::json!({"batchItemFailures": []}), "{v}");
}

fn id(s: &str) -> TransactionId {
    TransactionId::parse(s).unwrap()
}

struct Stack {
    p: Provisioned,
    store: DynamoStore<PayloadsTable>,
    sqs: aws_sdk_sqs::Client,
    scheduler: aws_sdk_scheduler::Client,
}

impl Stack {
    async fn record(&self, tx: &str) -> TransactionRecord {
        self.store.get(&id(tx)).await.unwrap().unwrap()
    }

    /// Every message now on a queue (received, then deleted).
    async fn drain(&self, url: &str) -> Vec<Message> {
        moto::take_messages(&self.sqs, url, 0).await.unwrap()
    }
}

fn event_record(file: &str, index: usize) -> Value {
    let text = std::fs::read_to_string(workspace_root().join("tests/events").join(file)).unwrap();
    let v: Value = serde_json::from_str(&text).unwrap();
    v["Records"][index].clone()
}

/// A DLQ message is the original: same body, same message attributes.
fn assert_same_message(got: &Message, original: &Value) {
    assert_eq!(got.body(), original["body"].as_str(), "body unchanged");
    let want = original["messageAttributes"].as_object().unwrap();
    let have = got.message_attributes().cloned().unwrap_or_default();
    assert_eq!(have.len(), want.len(), "attributes unchanged: {have:?}");
    for (k, v) in want {
        let a = &have[k];
        assert_eq!(a.string_value(), v["stringValue"].as_str(), "attribute {k}");
        assert_eq!(Some(a.data_type()), v["dataType"].as_str(), "attribute {k}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_lambda_binaries_under_cargo_lambda_watch_against_moto() {
    require_tools();
    let started = Instant::now();
    let moto = MotoServer::start().expect("moto_server (. scripts/tools.sh)");
    let endpoint = moto.endpoint_url();
    let sdk = moto::sdk_config(&endpoint).await;
    let names = StackNames::new(&moto::unique_prefix("smoke"));
    let p = provision(&sdk, &names).await.unwrap();

    // The functions' environment: their config pointed at moto, a 1 s backoff with
    // no jitter and a 1 s reconcile threshold so the test runs in seconds.
    let mut env: Vec<(String, String)> = vec![];
    for f in FUNCTIONS {
        for (k, v) in p.env_for(f) {
            if !env.iter().any(|(e, _)| e == k) {
                env.push((k.to_owned(), v));
            }
        }
    }
    for (k, v) in [
        ("AWS_ENDPOINT_URL", endpoint.as_str()),
        ("AWS_REGION", moto::LOCAL_REGION),
        ("AWS_DEFAULT_REGION", moto::LOCAL_REGION),
        ("AWS_ACCESS_KEY_ID", "testing"),
        ("AWS_SECRET_ACCESS_KEY", "testing"),
        (vars::BACKOFF_BASE_SECONDS.name, "1"),
        (vars::BACKOFF_CAP_SECONDS.name, "1"),
        (vars::BACKOFF_JITTER.name, "0"),
        (vars::RECONCILE_THRESHOLD_SECONDS.name, "1"),
        (vars::MAX_REQUESTS_PER_SECOND.name, "20"),
        ("AWS_LAMBDA_LOG_FORMAT", "JSON"),
        ("RUST_LOG", "info"),
    ] {
        env.retain(|(e, _)| e != k);
        env.push((k.to_owned(), v.to_owned()));
    }
    let dir = std::env::temp_dir().join(format!("deferred-retry-{}", names.prefix));
    std::fs::create_dir_all(&dir).unwrap();
    let mut file = std::fs::File::create(dir.join("functions.env")).unwrap();
    for (k, v) in &env {
        writeln!(file, "{k}={v}").unwrap();
    }
    drop(file);

    // Build the binaries first (the shared target dir makes this mostly a link
    // step), so the first invocation does not wait for a compilation.
    let build = Command::new(cargo())
        .args(["build", "--quiet"])
        .args(FUNCTIONS.iter().flat_map(|f| ["-p", *f]))
        .current_dir(workspace_root())
        .status()
        .unwrap();
    assert!(build.success(), "cargo build of the functions failed");
    let built = started.elapsed();

    let port = free_port();
    let watch = Watch::start(port, &env, &dir);

    let stack = Stack {
        store: DynamoStore::new(aws::clients::dynamodb(&sdk), &names.transactions_table)
            .with_payloads_table(&names.payloads_table),
        sqs: aws::clients::sqs(&sdk),
        scheduler: aws::clients::scheduler(&sdk),
        p,
    };

    // Transactions start through the library operation, against moto.
    let requests = SqsRequestPublisher::new(stack.sqs.clone(), &stack.p.request.url);
    let ports = StartPorts {
        store: &stack.store,
        requests: &requests,
    };
    let settings = Settings::default();
    for tx in ["TX-100200", "TX-100300", "TX-100400", "TX-100500"] {
        let ctx = settings.context(SystemClock.now());
        runtime::ops::start_transaction(
            &ports,
            id(tx),
            Payload::from_json(&format!(r#"{{"order":"{tx}","amount":12.5}}"#)).unwrap(),
            MaxAttempts::new(3).unwrap(),
            ctx.rules.answer_timeout,
            &ctx,
        )
        .await
        .unwrap();
    }
    let first = stack.drain(&stack.p.request.url).await;
    assert_eq!(first.len(), 4);

    // 1. CANCELLED for attempt 1: SCHEDULED, the schedule created from the instant —
    //    moved to the lead after the call when the backoff (1 s here) is shorter.
    no_failures(&watch.invoke("response-handler", "response-cancelled.json"));
    let rec = stack.record("TX-100200").await;
    assert_eq!(rec.status, Status::Scheduled);
    assert_eq!(rec.next_attempt.map(|a| a.get()), Some(2));
    let fire = rec.next_fire_at.unwrap();
    let schedule = stack
        .scheduler
        .get_schedule()
        .group_name(&names.schedule_group)
        .name("retry-TX-100200-2")
        .send()
        .await
        .unwrap();
    let lead = i64::try_from(domain::decide::SCHEDULE_LEAD.as_millis()).unwrap();
    let called_by = SystemClock.now();
    let (earliest, latest) = (
        format!("at({})", fire.to_schedule_at()),
        format!(
            "at({})",
            fire.max(called_by.plus_millis(lead).ceil_to_second())
                .to_schedule_at()
        ),
    );
    let expr = schedule.schedule_expression().unwrap();
    assert!(
        earliest.as_str() <= expr && expr <= latest.as_str(),
        "{expr} not within {earliest}..{latest}"
    );

    // 2. moto never fires schedules: once the instant is past the threshold the
    //    reconciler requeues the retry event.
    let wait_until = fire.plus_millis(1_500);
    while SystemClock.now() <= wait_until {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let report = watch.invoke("reconciler", "cron.json");
    assert_eq!(report["actions"]["SCHEDULED"]["requeued"], 1, "{report}");
    assert_eq!(report["errors"], 0, "{report}");
    let requeued = stack.drain(&stack.p.retry.url).await;
    assert_eq!(requeued.len(), 1);
    assert_eq!(
        requeued[0].body(),
        Some(r#"{"transaction_id":"TX-100200","origin":"RECONCILER","attempt":2,"round":0}"#)
    );

    // 3. The retry event: attempt 2 published with its key; IN_PROGRESS(2).
    no_failures(&watch.invoke("retry-handler", "retry.json"));
    let rec = stack.record("TX-100200").await;
    assert_eq!(
        (rec.status, rec.current_attempt.get()),
        (Status::InProgress, 2)
    );
    assert_eq!(rec.next_attempt, None);
    let sent = stack.drain(&stack.p.request.url).await;
    assert_eq!(sent.len(), 1);
    let key = sent[0].message_attributes().unwrap()["idempotency_key"]
        .string_value()
        .unwrap()
        .to_owned();
    assert_eq!(key, "TX-100200#2");
    let body: Value = serde_json::from_str(sent[0].body().unwrap()).unwrap();
    assert_eq!(
        body["payload"],
        serde_json::json!({"order":"TX-100200","amount":12.5})
    );

    // 4-5. Duplicates and a stale event: acknowledged, nothing published.
    no_failures(&watch.invoke("retry-handler", "retry-duplicate.json"));
    no_failures(&watch.invoke("retry-handler", "retry-stale.json"));
    assert!(stack.drain(&stack.p.request.url).await.is_empty());

    // 6. A late response changes nothing.
    no_failures(&watch.invoke("response-handler", "response-late.json"));
    assert_eq!(stack.record("TX-100200").await, rec);
    // A SUCCESS for that earlier attempt: changed nothing either (an alert is raised).
    no_failures(&watch.invoke("response-handler", "response-conflicting-success.json"));
    assert_eq!(stack.record("TX-100200").await, rec);

    // 7. SUCCESS.
    no_failures(&watch.invoke("response-handler", "response-success.json"));
    assert_eq!(stack.record("TX-100300").await.status, Status::Succeeded);

    // 8-9. Unknown transaction and malformed body: in the response DLQ, unchanged.
    no_failures(&watch.invoke("response-handler", "response-unknown.json"));
    no_failures(&watch.invoke("response-handler", "response-malformed.json"));
    let dlq = stack.drain(&stack.p.response_dlq.url).await;
    assert_eq!(dlq.len(), 2, "{dlq:?}");
    for file in ["response-unknown.json", "response-malformed.json"] {
        let original = event_record(file, 0);
        let got = dlq
            .iter()
            .find(|m| m.body() == original["body"].as_str())
            .unwrap_or_else(|| panic!("{file} not in the DLQ: {dlq:?}"));
        assert_same_message(got, &original);
    }

    // 10. The mixed batch: only the malformed record is affected; it ends in the DLQ
    //     unchanged.
    no_failures(&watch.invoke("response-handler", "response-mixed.json"));
    assert_eq!(stack.record("TX-100400").await.status, Status::Succeeded);
    assert_eq!(stack.record("TX-100500").await.status, Status::Scheduled);
    assert_eq!(
        stack.record("TX-100200").await,
        rec,
        "late duplicate ignored"
    );
    let dlq = stack.drain(&stack.p.response_dlq.url).await;
    assert_eq!(dlq.len(), 1);
    assert_same_message(&dlq[0], &event_record("response-mixed.json", 1));

    // 11. A malformed retry event: in the retry DLQ, unchanged.
    no_failures(&watch.invoke("retry-handler", "retry-malformed.json"));
    let dlq = stack.drain(&stack.p.retry_dlq.url).await;
    assert_eq!(dlq.len(), 1);
    assert_same_message(&dlq[0], &event_record("retry-malformed.json", 0));

    // Logs and metrics as the binaries wrote them on stdout: one EMF line per
    // invocation, and the permanent errors' structured lines naming field and value.
    let lines = watch.json_lines();
    let emf: Vec<&Value> = lines.iter().filter(|l| l.get("_aws").is_some()).collect();
    assert!(
        emf.iter().any(|l| l["Function"] == "response-handler"
            && l["SchedulesCreated"] == 1
            && l["_aws"]["CloudWatchMetrics"][0]["Namespace"] == "DeferredRetry"),
        "no EMF line of the response handler: {emf:?}"
    );
    assert!(emf
        .iter()
        .any(|l| l["Function"] == "retry-handler" && l["RetriesPublished"] == 1));
    assert!(emf
        .iter()
        .any(|l| l["Function"] == "reconciler" && l["ReconcileScheduledRequeued"] == 1));
    let permanent: Vec<&Value> = lines
        .iter()
        .filter(|l| l["level"] == "ERROR" && l["reason"] == "malformed-body")
        .collect();
    assert!(
        permanent
            .iter()
            .any(|l| l["field"] == "attempt" && l["value"] == "\"two\""),
        "{permanent:?}"
    );

    // 12. Audit: the table's stream turned into entries, one per transition (the
    // reconciler's counted requeue included), and the notice the response handler
    // wrote itself for the conflicting SUCCESS of attempt 1 (step 6).
    let audit = audit_rows(&sdk, &stack.p, &names, "TX-100200").await;
    let mut want = testkit::trail::TO_ATTEMPT_2.to_vec();
    want.insert(3, "SCHEDULED>SCHEDULED@1");
    want.push("IN_PROGRESS>IN_PROGRESS@1");
    assert_eq!(audit, want);

    drop(watch);
    drop(moto);
    eprintln!(
        "smoke: build {:.1}s, total {:.1}s",
        built.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
}

/// The audit entries of one transaction, as `FROM>TO@attempt`: the table's stream
/// read with the DynamoDB Streams API and written as one batch, grouped one item per
/// handler run, as the audit writer does (where AWS would invoke the `audit-writer`
/// Lambda).
async fn audit_rows(
    sdk: &aws_config::SdkConfig,
    p: &Provisioned,
    names: &StackNames,
    tx: &str,
) -> Vec<String> {
    let streams = aws::clients::dynamodbstreams(sdk);
    let mut position = StreamPosition::default();
    let changes = drain_stream(&streams, &p.transactions_stream_arn, &mut position)
        .await
        .unwrap();
    let writer = AuditWriter::new(aws::clients::dynamodb(sdk), &names.audit_table, 365);
    let batch = writer
        .apply_batch(changes.iter().map(|c| (c.old.as_ref(), c.new.as_ref())))
        .await;
    assert_eq!(batch.results.len(), changes.len());
    for r in &batch.results {
        assert!(r.is_ok(), "{r:?}");
    }
    assert!(
        batch.items_written < batch.entries_written(),
        "a run's transitions share an item: {} items for {} entries",
        batch.items_written,
        batch.entries_written()
    );
    testkit::trail::arrows(&writer.history(&id(tx)).await.unwrap())
}

/// The batch processor catches a panicking record only if panics unwind: the release
/// profile must keep `panic = "unwind"` (cargo-lambda's default would be abort).
#[test]
fn release_profile_keeps_panics_unwinding() {
    let manifest = std::fs::read_to_string(workspace_root().join("Cargo.toml")).unwrap();
    let release = manifest
        .split("[profile.release]")
        .nth(1)
        .expect("a [profile.release] section");
    let section = release.split("\n[").next().unwrap();
    assert!(
        section
            .lines()
            .any(|l| l.split('#').next().unwrap().replace(' ', "") == "panic=\"unwind\""),
        "[profile.release] must set panic = \"unwind\":\n{section}"
    );
}
