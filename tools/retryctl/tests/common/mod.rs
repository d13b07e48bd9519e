//! A local stack for the tests of this binary, and a way to run the `retryctl` binary
//! against it.

#![allow(dead_code)]
// Test support: a failure here is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use aws::config::vars;
use sandbox::local::stack::{Stack, StackOptions};
use std::collections::HashMap;
use std::time::Duration;

/// Where a stack runs: its endpoint and name prefix.
#[derive(Debug, Clone)]
pub struct Running {
    pub endpoint: String,
    pub prefix: String,
    /// The transactions table's stream.
    pub stream_arn: String,
    pub env: HashMap<&'static str, HashMap<String, String>>,
}

impl Running {
    /// The answer timeout the stack's functions were given, in seconds (the one
    /// `retryctl submit` must use).
    pub fn answer_timeout_seconds(&self) -> String {
        self.env
            .get("reconciler")
            .and_then(|m| m.get(aws::config::vars::ANSWER_TIMEOUT_SECONDS.name))
            .cloned()
            .unwrap_or_else(|| domain::defaults::ANSWER_TIMEOUT.as_secs().to_string())
    }
}

/// The arguments of a command line written as one string, split at white space.
pub fn words(line: &str) -> Vec<&str> {
    line.split_whitespace().collect()
}

/// Starts a stack on a background runtime that lives as long as the test binary.
pub fn start_stack(opts: StackOptions) -> Running {
    start_stack_with_harness(opts, None).0
}

/// The same, and with `Some(env)` the staging harness on its request queue (start the
/// stack without its own simulated service); returns the stacks' outputs document
/// `retryctl verify` reads.
pub fn start_stack_with_harness(
    opts: StackOptions,
    harness: Option<Vec<(&'static str, String)>>,
) -> (Running, serde_json::Value) {
    if std::env::var("RUST_LOG").is_ok() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .try_init();
    }
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            match Stack::start(opts).await {
                Ok(stack) => {
                    let outputs = match harness {
                        None => serde_json::Value::Null,
                        Some(env) => {
                            let h = sandbox::staging::start_harness(&stack, &env).await.unwrap();
                            sandbox::staging::outputs_document(&stack, Some(&h))
                        }
                    };
                    tx.send(Ok((
                        Running {
                            endpoint: stack.endpoint.clone(),
                            prefix: stack.names().prefix.clone(),
                            stream_arn: stack.provisioned.transactions_stream_arn.clone(),
                            env: stack.env.clone(),
                        },
                        outputs,
                    )))
                    .unwrap();
                    // Keep every task alive until the process ends.
                    std::future::pending::<()>().await;
                    drop(stack);
                }
                Err(e) => tx.send(Err(e.to_string())).unwrap(),
            }
        });
    });
    rx.recv_timeout(Duration::from_secs(120))
        .expect("stack start timed out")
        .expect("stack start failed")
}

pub fn moto() -> String {
    testkit::moto::shared_endpoint().expect("moto_server on PATH (. scripts/tools.sh)")
}

/// Compressed-time options on the shared moto server.
pub fn options(tag: &str, backoff_seconds: u64, cancel_probability: f64) -> StackOptions {
    let mut o = StackOptions::new(testkit::moto::unique_prefix(tag));
    o.moto_endpoint = Some(moto());
    o.env = vec![
        (vars::BACKOFF_BASE_SECONDS.name, backoff_seconds.to_string()),
        (vars::BACKOFF_FACTOR.name, "1".into()),
        (vars::BACKOFF_CAP_SECONDS.name, backoff_seconds.to_string()),
        (vars::BACKOFF_JITTER.name, "0".into()),
        (vars::MAX_REQUESTS_PER_SECOND.name, "50".into()),
    ];
    // Long enough that a slow invocation on a loaded machine is not redelivered.
    o.visibility_timeout = Some(30);
    // The reconciler stays out of the way: these tests check the other paths.
    o.reconcile_every = Duration::from_secs(3600);
    o.external.cancel_probability = cancel_probability;
    o.external.latency_min = Duration::from_millis(5);
    o.external.latency_max = Duration::from_millis(30);
    o
}

/// The output of one `retryctl` run.
#[derive(Debug)]
pub struct Ran {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Ran {
    /// Asserts the run ended with `code` and its stderr says each of `says`.
    pub fn fails(&self, code: i32, says: &[&str]) {
        self.ended(code, &self.stderr, says);
    }

    /// Asserts the run ended with `code` and its stdout says each of `says`.
    pub fn prints(&self, code: i32, says: &[&str]) {
        self.ended(code, &self.stdout, says);
    }

    fn ended(&self, code: i32, out: &str, says: &[&str]) {
        assert_eq!(self.code, code, "{self:?}");
        for text in says {
            assert!(out.contains(text), "no {text:?} in: {out}");
        }
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(self.stdout.trim()).unwrap_or_else(|e| {
            panic!(
                "stdout is not JSON ({e}): {}\nstderr: {}",
                self.stdout, self.stderr
            )
        })
    }
}

/// Runs the `retryctl` binary against a stack.
pub async fn retryctl(stack: &Running, args: &[&str]) -> Ran {
    retryctl_without(stack, args, &[]).await
}

/// Submits `id` with `payload` and at most `max_attempts` attempts; asserts it started.
pub async fn submit(stack: &Running, id: &str, payload: &str, max_attempts: &str) {
    let args = [
        "submit",
        id,
        "--payload",
        payload,
        "--max-attempts",
        max_attempts,
    ];
    let r = retryctl(stack, &args).await;
    assert_eq!(r.code, 0, "{r:?}");
}

/// `retryctl` with the variables `unset` removed from its environment.
pub async fn retryctl_without(stack: &Running, args: &[&str], unset: &[&str]) -> Ran {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_retryctl"));
    command
        .args(args)
        .env("AWS_ENDPOINT_URL", &stack.endpoint)
        .env("RETRYCTL_PREFIX", &stack.prefix)
        .env("AWS_ACCESS_KEY_ID", "testing")
        .env("AWS_SECRET_ACCESS_KEY", "testing")
        .env("AWS_REGION", "us-east-1")
        .env(
            vars::RECONCILE_SHARDS.name,
            domain::defaults::RECONCILE_SHARDS.to_string(),
        )
        .env(
            vars::RECONCILE_REQUEUE_MAX.name,
            domain::defaults::RECONCILE_REQUEUE_MAX.to_string(),
        )
        .env(
            vars::ANSWER_TIMEOUT_SECONDS.name,
            stack.answer_timeout_seconds(),
        )
        .env(
            vars::TRANSACTION_DEADLINE_SECONDS.name,
            domain::defaults::TRANSACTION_DEADLINE.as_secs().to_string(),
        )
        .env(
            vars::RETENTION_DAYS.name,
            domain::defaults::RETENTION_DAYS.to_string(),
        )
        .env_remove(vars::RECONCILE_THRESHOLD_SECONDS.name)
        .env_remove(vars::TRANSACTIONS_TABLE.name)
        .env_remove(vars::PAYLOADS_TABLE.name)
        .env_remove(vars::AUDIT_TABLE.name)
        .env_remove(vars::REQUEST_QUEUE_URL.name)
        .env_remove(vars::RETRY_QUEUE_URL.name);
    for name in unset {
        command.env_remove(name);
    }
    let out = command.output().await.expect("run retryctl");
    Ran {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Polls `retryctl show --json <id>` until the status is `want` (and the audit trail
/// has caught up with it), or fails after `limit`.
pub async fn wait_status(
    stack: &Running,
    id: &str,
    want: &str,
    limit: Duration,
) -> serde_json::Value {
    let start = std::time::Instant::now();
    loop {
        let r = retryctl(stack, &["show", id, "--json"]).await;
        if r.code == 0 {
            let v = r.json();
            let last_to = v["timeline"]
                .as_array()
                .and_then(|t| t.last())
                .and_then(|e| e["to"].as_str())
                .map(str::to_owned);
            if v["record"]["status"] == want && last_to.as_deref() == Some(want) {
                return v;
            }
        }
        assert!(
            start.elapsed() < limit,
            "{id} never reached {want}: {} {}",
            r.stdout,
            r.stderr
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}
