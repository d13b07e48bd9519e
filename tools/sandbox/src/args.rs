//! `retryctl demo`'s flags (clap): the workload, the simulated service, the compressed
//! timescale, faults and outages (`docs/operations.md#flags`).

use crate::local::external::OutageMode;
use clap::{Args, ValueEnum};
use domain::decide::Delivery;
use domain::defaults;
use std::path::PathBuf;
use testkit::oracle::ServiceDedup;

/// How the demo's workload starts its transactions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum StartVia {
    /// The library operation (`runtime::ops::start_transaction`), as a Rust service.
    Library,
    /// One SendMessage of an intake message per transaction to the intake queue, as a
    /// service in any language; the starter on the intake queue starts them.
    Intake,
}

/// What stands for the external service in the demo.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ServiceVia {
    /// The simulated service reads the request queue and writes the response queue
    /// itself, with the queues' JSON contract.
    Queue,
    /// The simulated service is an HTTP server on loopback, and the HTTP bridge
    /// (`functions/http-bridge`, configured through its environment as the template
    /// configures it) runs between the queues and it.
    Http,
}

/// `--service`: how the simulated service is reached, and whether it deduplicates
/// by idempotency key — the words `simulate` and `model-check` take for the latter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServiceSpec {
    pub via: ServiceVia,
    pub dedup: ServiceDedup,
}

impl Default for ServiceSpec {
    fn default() -> Self {
        Self {
            via: ServiceVia::Queue,
            dedup: ServiceDedup::ByKey,
        }
    }
}

impl ServiceSpec {
    /// One or two words separated by a comma, in any order: `queue` or `http`,
    /// `deduplicating` or `non-idempotent` (the one left out is the default: `queue`,
    /// `deduplicating`). The error names the flag and the value.
    pub fn parse(value: &str) -> Result<Self, String> {
        let bad = |why: String| {
            format!(
                "--service `{value}`: {why}; expected queue or http, and/or {} (e.g. http,non-idempotent)",
                ServiceDedup::NAMES.join(" or ")
            )
        };
        let mut spec = Self::default();
        let (mut via, mut dedup) = (None, None);
        for word in value.split(',').map(str::trim) {
            if let Ok(v) = ServiceVia::from_str(word, false) {
                if via.replace(v).is_some() {
                    return Err(bad("two transports".into()));
                }
                spec.via = v;
            } else if let Ok(d) = ServiceDedup::parse("--service", word) {
                if dedup.replace(d).is_some() {
                    return Err(bad("two deduplication modes".into()));
                }
                spec.dedup = d;
            } else {
                return Err(bad(format!("unknown word `{word}`")));
            }
        }
        Ok(spec)
    }
}

/// `--delivery`: `direct` or `outbox`; the error names the flag and the value.
pub fn parse_delivery(value: &str) -> Result<Delivery, String> {
    Delivery::parse(value).ok_or_else(|| {
        format!(
            "--delivery `{value}`: expected {} or {}",
            Delivery::Direct.as_str(),
            Delivery::Outbox.as_str()
        )
    })
}

// The demo's flags, as `retryctl demo` takes them (the subcommand's help is retryctl's).
#[derive(Debug, Clone, Args)]
pub struct DemoArgs {
    /// Transactions in the workload.
    #[arg(long, default_value_t = 200)]
    pub transactions: u32,
    /// Attempt budget of each transaction, counting the original request.
    #[arg(long, default_value_t = defaults::MAX_ATTEMPTS)]
    pub max_attempts: u32,
    /// Probability that the external service answers CANCELLED.
    #[arg(long, default_value_t = 0.5)]
    pub cancel_probability: f64,
    /// Probability that an answer reaches the response queue twice (the response
    /// handler must absorb the copy: its metrics count it).
    #[arg(long, default_value_t = 0.05)]
    pub duplicate_responses: f64,
    /// Probability that the external service takes a request and never answers it:
    /// the answer deadline publishes it again (same idempotency key) and, past
    /// ANSWER_REPUBLISH_MAX silent rounds, ends the transaction FAILED/UNANSWERED.
    #[arg(long, default_value_t = 0.0)]
    pub silent_probability: f64,
    /// ANSWER_TIMEOUT_SECONDS of the local stack: how long a request may go
    /// unanswered [default: 10 with --silent-probability above 0, else the
    /// template's 21600].
    #[arg(long)]
    pub answer_timeout: Option<u64>,
    /// TRANSACTION_DEADLINE_SECONDS of the local stack (at least 60): with an outage
    /// longer than it, the transactions it holds end FAILED/EXPIRED, reported
    /// [default: the template's 604800].
    #[arg(long)]
    pub transaction_deadline: Option<u64>,
    /// External service latency, lower bound (ms).
    #[arg(long, default_value_t = 20)]
    pub latency_min_ms: u64,
    /// External service latency, upper bound (ms).
    #[arg(long, default_value_t = 200)]
    pub latency_max_ms: u64,
    /// Backoff base (s): the compressed stand-in for the article's 2 h.
    #[arg(long, default_value_t = 2.0)]
    pub backoff_base: f64,
    #[arg(long, default_value_t = 2.0)]
    pub backoff_factor: f64,
    /// Backoff cap (s).
    #[arg(long, default_value_t = 10.0)]
    pub backoff_cap: f64,
    #[arg(long, default_value_t = 0.1)]
    pub jitter: f64,
    /// Reconciler cron interval (s).
    #[arg(long, default_value_t = 5)]
    pub reconcile_every: u64,
    /// Reconciler threshold (s). Default: 20, or — when longer — the time the fleet
    /// needs to send one retry per transaction at its rate bound (a retry event
    /// waiting its turn in the retry queue is late, not stuck).
    #[arg(long)]
    pub reconcile_threshold: Option<u64>,
    /// Visibility timeout of received messages (s), compressed like the backoff.
    #[arg(long, default_value_t = 10)]
    pub visibility_timeout: i32,
    /// MAX_REQUESTS_PER_SECOND of each retry-handler execution environment (the
    /// template's default; the fleet bound is this × the retry ESM's MaximumConcurrency).
    #[arg(long, default_value_t = defaults::MAX_REQUESTS_PER_SECOND)]
    pub max_requests_per_second: f64,
    /// Workload: transactions started per second.
    #[arg(long, default_value_t = 100.0)]
    pub submit_rate: f64,
    /// How the workload starts its transactions: `library` (the library operation)
    /// or `intake` (an intake message on the intake queue, started by the starter:
    /// at most IntakeMaxConcurrency × MAX_REQUESTS_PER_SECOND starts per second, the
    /// rest wait on the queue).
    #[arg(long, value_enum, default_value_t = StartVia::Library)]
    pub start_via: StartVia,
    /// The simulated external service: how the requests reach it, `queue` (it reads
    /// the request queue and answers on the response queue) or `http` (it is an HTTP
    /// server on 127.0.0.1 and the HTTP bridge calls it: CANCELLED is a 200 whose
    /// body the bridge's classification reads, an outage answers 503 with
    /// `Retry-After`, `--duplicate-responses` loses the HTTP answer after the service
    /// processed the request, so the bridge sends the same `Idempotency-Key` again,
    /// `--silent-probability` and `--outage-mode silent` hold the call past the
    /// bridge's timeout); and, after a comma or alone, `deduplicating` or
    /// `non-idempotent`: a service that runs every request message it receives (a
    /// copy of one SQS message delivered again excepted). Its answers are the same;
    /// the report adds its runs and the attempts it executed twice.
    #[arg(long, value_name = "queue|http[,deduplicating|non-idempotent]", value_parser = ServiceSpec::parse, default_value = "queue")]
    pub service: ServiceSpec,
    /// How requests reach the request queue (the stack's RequestDelivery): `direct`,
    /// each function publishes right after its decision (the service must
    /// deduplicate by idempotency key); or `outbox`, the decision leaves the record
    /// SENDING and the publisher, on the transactions table's stream, publishes it
    /// once to a FIFO request queue (for a service that cannot deduplicate: with
    /// `--service non-idempotent` the report's "executed twice" must be 0). Every
    /// request then goes through the publisher's pacer (MAX_REQUESTS_PER_SECOND, one
    /// execution environment per stream shard).
    #[arg(long, value_name = "direct|outbox", value_parser = parse_delivery, default_value = "direct")]
    pub delivery: Delivery,
    /// Give up waiting for terminal states after this many seconds (then: stuck): a
    /// hard ceiling. Without it, the default — 240, or when longer the submission
    /// time plus twice the time the fleet needs to send one retry per transaction,
    /// plus 60 (2,160 for 10,000 transactions) — is extended while transactions keep
    /// becoming terminal: the run ends once none has for 120 s.
    #[arg(long)]
    pub deadline: Option<u64>,
    /// Seed of the external service's answers and of the injected faults (`--chaos`):
    /// the same seed, the same decisions.
    #[arg(long, default_value_t = 7)]
    pub seed: u64,
    /// Inject faults where the functions meet AWS (throttling, 500/503, answers lost
    /// after the call applied, latency), and process faults in the local stack
    /// (invocations killed mid-batch, schedules late, twice or never): `light`,
    /// `heavy`, or a JSON or TOML file of probabilities (docs/verification.md). The
    /// report adds what was injected, by kind and operation.
    #[arg(long, value_name = "PROFILE")]
    pub chaos: Option<String>,
    /// Prefix of every resource name (default: `demo<pid>`).
    #[arg(long = "stack-prefix")]
    pub stack_prefix: Option<String>,
    /// Leave moto, the functions and the emulators running after the report (until
    /// Ctrl-C), to try the other commands against the local stack.
    #[arg(long)]
    pub keep: bool,
    /// No progress bar.
    #[arg(long)]
    pub no_progress: bool,
    /// Use this moto endpoint instead of starting one.
    #[arg(long = "moto-endpoint")]
    pub moto_endpoint: Option<String>,
    /// Also write the report as JSON to this file.
    #[arg(long)]
    pub report_json: Option<PathBuf>,
    /// An outage of the external service, START+DURATION in seconds from the start of
    /// the run (e.g. `20+60`): every request it reads in that window is answered
    /// ERROR (HTTP_503), or not at all with `--outage-mode silent`. The functions'
    /// circuit breaker gets settings sized to the demo's timescale (printed), and the
    /// report adds its changes and checks that the outage failed no transaction and
    /// consumed no attempt.
    #[arg(long, value_name = "START+DURATION")]
    pub outage: Option<String>,
    /// What the service does during `--outage`: `error` answers ERROR, `silent` takes
    /// the request and never answers (the answer deadline, 10 s, finds it).
    #[arg(long, value_enum, default_value_t = OutageMode::Error)]
    pub outage_mode: OutageMode,
}
