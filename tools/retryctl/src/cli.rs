//! Command-line interface (clap).

use aws::config::vars;
use clap::{Args, Parser, Subcommand, ValueEnum};
use domain::defaults;
use std::path::PathBuf;
use strum::{IntoStaticStr, VariantArray};

#[derive(Debug, Parser)]
#[command(name = "retryctl", version, propagate_version = true)]
#[cfg_attr(
    feature = "demo",
    command(
        about = "Operate deferred-retry transactions (in AWS or on the local stack), or run the whole pipeline on this machine with `retryctl demo`."
    )
)]
#[cfg_attr(
    not(feature = "demo"),
    command(about = "Operate deferred-retry transactions (in AWS or on the local stack).")
)]
pub struct Cli {
    #[command(
        flatten,
        next_help_heading = "Stack (every command; env or the stack's outputs)"
    )]
    pub target: TargetArgs,
    /// Print machine-readable JSON instead of text.
    #[arg(long, global = true, help_heading = "Output")]
    pub json: bool,
    /// On an AWS failure, also print the SDK's whole account of it.
    #[arg(long, global = true, help_heading = "Output")]
    pub verbose: bool,
    #[command(subcommand)]
    pub command: Command,
}

impl Cli {
    /// The command line `args` (the program name first), parsed as the binary does.
    pub fn from_line<I, T>(args: I) -> Result<Self, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        Self::try_parse_from(args)
    }
}

/// Where the stack is: the same settings the functions get from the template.
#[derive(Debug, Clone, Args, Default)]
pub struct TargetArgs {
    /// The deployed stack (CloudFormation stack name): every name and setting below
    /// is read from its outputs and parameters (DescribeStacks). A setting also given
    /// by flag or environment must agree with it. On the local stack: its prefix.
    #[arg(long, env = "RETRYCTL_STACK", global = true)]
    pub stack: Option<String>,
    /// Assume this role for every call (the stack's OperatorReadRoleArn or
    /// OperatorActRoleArn output), with the caller's own credentials.
    #[arg(long, env = "RETRYCTL_ROLE_ARN", global = true)]
    pub role_arn: Option<String>,
    /// AWS API endpoint (the local stack's moto server); unset = real AWS.
    #[arg(long, env = "AWS_ENDPOINT_URL", global = true)]
    pub endpoint_url: Option<String>,
    /// AWS region.
    #[arg(long, env = "AWS_REGION", global = true)]
    pub region: Option<String>,
    /// Name prefix of a local stack (`retryctl demo --keep` prints it); derives every
    /// name below unless given explicitly.
    #[arg(long, env = "RETRYCTL_PREFIX", global = true)]
    pub prefix: Option<String>,
    /// State table (template output TransactionsTableName).
    #[arg(long, env = vars::TRANSACTIONS_TABLE.name, global = true)]
    pub transactions_table: Option<String>,
    /// Payloads table.
    #[arg(long, env = vars::PAYLOADS_TABLE.name, global = true)]
    pub payloads_table: Option<String>,
    /// Audit table.
    #[arg(long, env = vars::AUDIT_TABLE.name, global = true)]
    pub audit_table: Option<String>,
    /// The circuit breaker's table (template output BreakerTableName).
    #[arg(long, env = vars::BREAKER_TABLE.name, global = true)]
    pub breaker_table: Option<String>,
    /// Request queue URL.
    #[arg(long, env = vars::REQUEST_QUEUE_URL.name, global = true)]
    pub request_queue_url: Option<String>,
    /// Response queue URL.
    #[arg(long, env = "RESPONSE_QUEUE_URL", global = true)]
    pub response_queue_url: Option<String>,
    /// Retry queue URL.
    #[arg(long, env = vars::RETRY_QUEUE_URL.name, global = true)]
    pub retry_queue_url: Option<String>,
    /// Scheduler dead-letter queue URL.
    #[arg(long, env = "SCHEDULER_DLQ_URL", global = true)]
    pub scheduler_dlq_url: Option<String>,
    /// Audit-stream dead-letter queue URL (template output AuditDLQUrl).
    #[arg(long, env = "AUDIT_DLQ_URL", global = true)]
    pub audit_dlq_url: Option<String>,
    /// Schedule group.
    #[arg(long, env = vars::SCHEDULE_GROUP.name, global = true)]
    pub schedule_group: Option<String>,
    /// Write shards of the reconciler index.
    #[arg(long, env = vars::RECONCILE_SHARDS.name, global = true)]
    pub reconcile_shards: Option<u16>,
    /// How long an intermediate state may last before the reconciler acts, in seconds.
    #[arg(long, env = vars::RECONCILE_THRESHOLD_SECONDS.name, global = true)]
    pub reconcile_threshold_seconds: Option<u64>,
    /// Requeues without progress after which the reconciler parks a cycle (the
    /// stack's ReconcileRequeueMax).
    #[arg(long, env = vars::RECONCILE_REQUEUE_MAX.name, global = true)]
    pub reconcile_requeue_max: Option<u32>,
    /// How long a request may go unanswered, in seconds (the stack's
    /// AnswerTimeoutSeconds): `submit` writes the first answer deadline from it.
    #[arg(long, env = vars::ANSWER_TIMEOUT_SECONDS.name, global = true)]
    pub answer_timeout_seconds: Option<u64>,
    /// How long a transaction may stay open, in seconds (the stack's
    /// TransactionDeadlineSeconds): `replay` gives the transaction this long again.
    #[arg(long, env = vars::TRANSACTION_DEADLINE_SECONDS.name, global = true)]
    pub transaction_deadline_seconds: Option<u64>,
    /// Days a finished transaction is kept (the stack's RetentionDays): `resolve`
    /// and `erase --force` end transactions, and their writes set the TTL from it.
    #[arg(long, env = vars::RETENTION_DAYS.name, global = true)]
    pub retention_days: Option<u32>,
    /// How the stack delivers requests, `direct` or `outbox` (its RequestDelivery
    /// parameter). Unset: `outbox` when the request queue's URL names a FIFO queue
    /// (`.fifo`), else `direct`.
    #[arg(long, env = vars::REQUEST_DELIVERY.name, global = true)]
    pub request_delivery: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Start a transaction: conditional create of IN_PROGRESS attempt 1, then the
    /// request with idempotency key `<id>#1`. Repeating it is harmless.
    #[command(
        after_help = "Examples:\n  retryctl submit TX-42 --payload '{\"order\":42}'\n  retryctl submit TX-43 --payload @order.json --max-attempts 6\n  retryctl submit TX-44 --payload '{\"order\":44}' --correlation-id req-7f3a"
    )]
    Submit {
        /// Transaction id (1–128 characters, no control characters).
        id: String,
        /// The request payload, as JSON text (or `@file.json`).
        #[arg(long)]
        payload: String,
        /// Attempt budget, counting the original request.
        #[arg(long, default_value_t = defaults::MAX_ATTEMPTS)]
        max_attempts: u32,
        /// Your own reference for the transaction (1–128 characters, no control
        /// characters): stored on the record and carried in every request.
        #[arg(long)]
        correlation_id: Option<String>,
    },
    /// The transaction's state and its whole audit history as a timeline: one line
    /// per transition, times relative to the start and to the line before.
    #[command(
        after_help = "Examples:\n  retryctl show TX-42\n  retryctl show TX-42 --payload --wide\n  retryctl show TX-42 --json | jq '.timeline[] | [.from, .to]'"
    )]
    Show {
        id: String,
        /// Print the stored payload too.
        #[arg(long)]
        payload: bool,
        /// The full table: absolute times, schedule names and fire times in columns.
        #[arg(long)]
        wide: bool,
    },
    /// Transactions one per line, filtered by status, attempt and time of the last
    /// write. `--status FAILED` alone (or with --since/--until) queries the sparse
    /// failed-index: its cost follows what is listed (needs --reconcile-shards). Any
    /// other filter Scans the whole state table with a filter expression: every item is
    /// read and billed (0.5 read unit per 4 KB), whatever the filter keeps.
    #[command(
        after_help = "Examples:\n  retryctl list --status FAILED --reconcile-shards 8\n  retryctl list --status FAILED --since 2026-12-04T07:00:00Z --json > failed.jsonl\n  retryctl list --status SCHEDULED --attempt 3 --limit 20\n  retryctl list --status FAILED --next-token 'failed/1796369112000/TX-000123'"
    )]
    List {
        /// IN_PROGRESS | SCHEDULING | SCHEDULED | SENDING | SUCCEEDED | FAILED.
        #[arg(long)]
        status: Option<String>,
        /// Current attempt (the last whose request left).
        #[arg(long)]
        attempt: Option<u32>,
        /// Last written at or after this instant (RFC 3339 UTC, `2026-12-04T07:00:00Z`).
        #[arg(long)]
        since: Option<String>,
        /// Last written at or before this instant (RFC 3339 UTC).
        #[arg(long)]
        until: Option<String>,
        /// At most this many transactions (1–1000).
        #[arg(long, default_value_t = 100)]
        limit: u32,
        /// Go on from the page that printed this token.
        #[arg(long)]
        next_token: Option<String>,
        /// Scan even for --status FAILED (finds FAILED transactions written before the
        /// failed-index existed, which carry no index key).
        #[arg(long)]
        scan: bool,
    },
    /// Transactions by status and by current attempt (a Scan of the state table).
    #[command(after_help = "Examples:\n  retryctl stats\n  retryctl stats --json | jq .by_status")]
    Stats,
    /// What the reconciler would act on now (the same index query and the same rule).
    #[command(
        after_help = "Examples:\n  retryctl stuck --reconcile-shards 8 --reconcile-threshold-seconds 900"
    )]
    Stuck,
    /// Resolved by other means: SCHEDULING or SCHEDULED → SUCCEEDED, schedule deleted.
    /// Many ids, or --from-list: one line per transaction, then a summary; the exit
    /// code is the first failure's (3 unknown, 4 refused, 1 AWS), 0 when all were done.
    #[command(
        after_help = "Examples:\n  retryctl resolve TX-42 --reason 'paid by bank transfer'\n  retryctl resolve TX-42 TX-43 --dry-run\n  retryctl list --status SCHEDULED --json | retryctl resolve --from-list - --reason 'settled by hand'"
    )]
    Resolve {
        #[command(flatten)]
        bulk: BulkArgs,
    },
    /// Erase a finished transaction's personal data now: its payload, and the
    /// service's and operators' reason texts in its record and audit trail. Records
    /// what was erased, by whom (the caller's identity) and --reason in the audit
    /// trail, never the data. A live transaction is refused, naming its status,
    /// unless --force, which first resolves it as `retryctl resolve` does. Erasing
    /// again is harmless and says so.
    #[command(
        after_help = "Examples:\n  retryctl erase TX-42 --reason 'GDPR request 2026-118'\n  retryctl erase TX-43 --reason 'customer request' --force --retention-days 30"
    )]
    Erase {
        id: String,
        /// Why (1–256 characters): kept in the audit entry of the erasure.
        #[arg(long)]
        reason: String,
        /// End a live transaction first (`resolve`: SCHEDULING or SCHEDULED →
        /// SUCCEEDED, its schedule deleted), then erase.
        #[arg(long)]
        force: bool,
    },
    /// Move every message of a dead-letter queue back to its source queue.
    #[command(
        after_help = "Examples:\n  retryctl redrive response --dry-run\n  retryctl redrive retry --max 10\n  retryctl redrive response --wait 60\n  retryctl redrive audit"
    )]
    Redrive {
        /// request | response | retry | scheduler (the scheduler DLQ goes back to the
        /// retry queue) | audit (the stream range each message names is read again
        /// and audited).
        queue: QueueName,
        /// Move at most this many messages.
        #[arg(long)]
        max: Option<u64>,
        /// Show what would be moved (as `dlq peek` does) and move nothing.
        #[arg(long)]
        dry_run: bool,
        /// After moving, watch the DLQ this many seconds and say which moved messages
        /// came back (DLQ message id, the id it was sent under, transaction id,
        /// receive count): still failing, they are dead-lettered again.
        #[arg(long, value_name = "SECONDS", default_value_t = 0)]
        wait: u64,
    },
    /// Look at a dead-letter queue without moving anything.
    #[command(after_help = "Examples:\n  retryctl dlq peek response --max 5")]
    Dlq {
        #[command(subcommand)]
        action: DlqAction,
    },
    /// Reopen FAILED transactions with more attempts (recorded in the audit trail with
    /// the caller's identity and --reason). Many ids, or --from-list: one line per
    /// transaction, then a summary; the exit code is the first failure's (3 unknown, 4
    /// refused, 1 AWS), 0 when all were done.
    #[command(
        after_help = "Examples:\n  retryctl replay TX-42 --reconcile-shards 8\n  retryctl replay TX-42 TX-43 --budget 2 --reason 'service back' --reconcile-shards 8\n  retryctl list --status FAILED --json > failed.jsonl\n  retryctl replay --from-list failed.jsonl --dry-run\n  retryctl replay --from-list failed.jsonl --reason 'INC-123 fixed'"
    )]
    Replay {
        #[command(flatten)]
        bulk: BulkArgs,
        /// Attempts to add; default: the transaction's own max_attempts (a fresh budget).
        #[arg(long)]
        budget: Option<u32>,
    },
    /// The circuit breaker of the external service: its state and its latest changes,
    /// or an operator's override (recorded in its change log with the caller's
    /// identity and --reason).
    #[command(
        after_help = "Examples:\n  retryctl breaker status\n  retryctl breaker open --for 1800 --reason 'INC-123: the service is down'\n  retryctl breaker close --reason 'INC-123 fixed'"
    )]
    Breaker {
        #[command(subcommand)]
        action: BreakerAction,
    },
    /// What each function of the stack runs: the version its `live` alias points at
    /// (two, with their weights, while a deployment shifts it), each version's release,
    /// code hash and last change; and whether the releases running side by side are
    /// within the compatibility window (docs/compatibility.md). Needs --stack. Exit 6
    /// when they are not.
    #[command(
        after_help = "Examples:\n  retryctl --stack deferred-retry versions\n  retryctl --stack deferred-retry versions --json | jq '.functions[] | [.function, .versions[].release]'"
    )]
    Versions,
    /// Run the whole pipeline on this machine and print a report.
    #[cfg(feature = "demo")]
    #[command(
        after_help = "Examples:\n  retryctl demo\n  retryctl demo --transactions 1000 --duplicate-responses 0.05\n  retryctl demo --transactions 30 --keep\n  retryctl demo --service http --outage 20+60"
    )]
    // Boxed: the demo's flags outweigh every other command's.
    Demo(Box<sandbox::DemoArgs>),
    /// Check a deployed stack: every resource the code relies on, then real
    /// transactions through the staging harness (docs/deploy.md). Exit 6 when a check
    /// fails.
    #[cfg(feature = "verify")]
    Verify(VerifyArgs),
    /// Measure a staging stack: start a bounded number of transactions at a bounded
    /// rate through the real queues, each answered by the staging harness as its
    /// payload's script says (CANCELLED K times, then SUCCESS), and report starts/s,
    /// time to terminal, statuses, retries, what the client saw throttled, DLQ depths
    /// and schedules left. Refused (exit 7) without the harness stack's outputs; exit 8
    /// when a transaction did not end as its script says (or was still in flight at
    /// --duration), or a DLQ holds messages.
    #[cfg(feature = "verify")]
    #[command(
        after_help = "Examples:\n  retryctl loadtest --outputs stacks.json\n  retryctl loadtest --outputs main.json --outputs harness.json --transactions 5000 --rate 50 --cancel-times 0,1,2\n  retryctl loadtest --outputs stacks.json --transactions 200 --duration 600 --json > load.json"
    )]
    Loadtest(LoadtestArgs),
}

/// The transactions an operator action applies to, and how.
#[derive(Debug, Clone, Args)]
pub struct BulkArgs {
    /// Transaction ids.
    pub ids: Vec<String>,
    /// Also the transactions of this file: the JSON lines `retryctl list --json` prints
    /// (`-`: stdin).
    #[arg(long, value_name = "FILE")]
    pub from_list: Option<PathBuf>,
    /// Print exactly what would change for each transaction (the same decision, on
    /// the record as it is now) and write nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Why: recorded with the caller's identity in the record and its audit entry
    /// (1–256 characters).
    #[arg(long)]
    pub reason: Option<String>,
}

impl BulkArgs {
    /// One id given as an argument, no list, no dry run: the single-transaction form.
    pub fn single(&self) -> Option<&str> {
        match (self.ids.as_slice(), &self.from_list, self.dry_run) {
            ([id], None, false) => Some(id),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Subcommand)]
pub enum BreakerAction {
    /// The breaker's state and its last changes, newest first.
    Status {
        /// Show at most this many changes (1–100).
        #[arg(long, default_value_t = 10)]
        changes: i32,
    },
    /// Open it: no request goes out until the given time has passed; then it probes.
    Open {
        /// For how long, in seconds (1–86400).
        #[arg(long = "for", value_name = "SECONDS")]
        for_seconds: Option<u64>,
        /// Why (1–256 characters), recorded with the caller's identity.
        #[arg(long)]
        reason: Option<String>,
    },
    /// Close it: requests go out again at once.
    Close {
        /// Why (1–256 characters), recorded with the caller's identity.
        #[arg(long)]
        reason: Option<String>,
    },
}

#[derive(Debug, Clone, Subcommand)]
pub enum DlqAction {
    /// The messages waiting in a DLQ: body, receive count, first receive, and the
    /// attributes that say why (the scheduler's error code and message). The messages
    /// stay where they are; each look counts as one more receive.
    Peek {
        /// request | response | retry | scheduler | audit.
        queue: QueueName,
        /// Show at most this many messages.
        #[arg(long, default_value_t = 10)]
        max: u64,
    },
}

#[cfg(feature = "verify")]
#[derive(Debug, Clone, Args)]
pub struct VerifyArgs {
    /// The stacks' outputs as `aws cloudformation describe-stacks --output json`
    /// prints them: the main stack's and the harness stack's (repeat the flag, or one
    /// file listing both stacks).
    #[arg(long = "outputs", required = true, value_name = "FILE")]
    pub outputs: Vec<PathBuf>,
    /// The scheduler role as `aws iam get-role --output json` prints it: its trust
    /// policy is checked (not checked without it).
    #[arg(long, value_name = "FILE")]
    pub scheduler_role: Option<PathBuf>,
    /// Check the resources only; start no transaction.
    #[arg(long)]
    pub resources_only: bool,
    /// Longest wait for the transactions to end, in seconds (staging's backoff:
    /// about 4 minutes; the template's default backoff takes hours).
    #[arg(long, default_value_t = 900)]
    pub timeout: u64,
    /// Longest wait for the audit trail and the schedules' deletion to catch up, in
    /// seconds.
    #[arg(long, default_value_t = 120)]
    pub audit_wait: u64,
    /// Polling interval, in milliseconds.
    #[arg(long, default_value_t = 2000)]
    pub poll_ms: u64,
    /// No progress lines on stderr.
    #[arg(long)]
    pub quiet: bool,
}

#[cfg(feature = "verify")]
#[derive(Debug, Clone, Args)]
pub struct LoadtestArgs {
    /// The stacks' outputs as `aws cloudformation describe-stacks --output json`
    /// prints them: the main stack's and the staging harness stack's (repeat the flag,
    /// or one file listing both). Without the harness's outputs nothing is started.
    #[arg(long = "outputs", value_name = "FILE")]
    pub outputs: Vec<PathBuf>,
    /// How many transactions to start (1–100,000).
    #[arg(long, default_value_t = crate::loadtest::DEFAULT_TRANSACTIONS)]
    pub transactions: u32,
    /// Starts per second (above 0, at most 1,000).
    #[arg(long, default_value_t = crate::loadtest::DEFAULT_RATE)]
    pub rate: f64,
    /// Hard ceiling of the whole run, in seconds (1–86,400): then no more starts, and
    /// the report lists what is still in flight.
    #[arg(long, value_name = "SECONDS", default_value_t = crate::loadtest::DEFAULT_DURATION_SECONDS)]
    pub duration: u64,
    /// How many times the harness answers CANCELLED before SUCCESS (0–100); a list
    /// (`0,1,3`) is a mix, given to the transactions in turn. At or above
    /// --max-attempts the transaction ends FAILED with its budget spent.
    #[arg(
        long,
        value_name = "K[,K…]",
        value_delimiter = ',',
        default_value = "1"
    )]
    pub cancel_times: Vec<u32>,
    /// Attempt budget of each transaction, counting the original request.
    #[arg(long, default_value_t = domain::defaults::MAX_ATTEMPTS)]
    pub max_attempts: u32,
    /// Name of the run (1–20 letters and digits): the ids are `LOAD-<run>-000001`…
    /// Default: the start time, `YYYYMMDDhhmmss` UTC.
    #[arg(long)]
    pub run: Option<String>,
    /// How often the transactions still in flight are read, in milliseconds (at least
    /// 100).
    #[arg(long, default_value_t = 2000)]
    pub poll_ms: u64,
    /// No progress bar on stderr.
    #[arg(long)]
    pub no_progress: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, IntoStaticStr, VariantArray)]
#[strum(serialize_all = "kebab-case")]
pub enum QueueName {
    Request,
    Response,
    Retry,
    Scheduler,
    /// The audit stream's DLQ: records of stream batches the audit writer gave up on.
    Audit,
}

impl QueueName {
    /// Every variant, in declaration order.
    pub const ALL: &'static [QueueName] = <Self as VariantArray>::VARIANTS;

    pub fn as_str(self) -> &'static str {
        self.into()
    }
}
