//! The operator commands. Each works against AWS or the local stack with the same
//! settings the functions get from the template, and performs its change through the
//! library operations of `runtime::ops` (the domain decides; nothing is restated here).

use crate::cli::{QueueName, TargetArgs};
use crate::error::{CliError, Whereabouts};
use crate::table::scan_stats;
use crate::view;
use aws::config::vars;
use aws::config::{SchedulerSettings, StackNames};
use aws::dynamo::{DynamoStore, PayloadsTable};
use aws_sdk_sqs::types::{MessageAttributeValue, MessageSystemAttributeName, QueueAttributeName};
use domain::decide::{decide_reconcile, is_stuck, Delivery, Observed, Rejection};
use domain::exec::{ReplayPorts, ResolvePorts, StartPorts};
use domain::machine::OperatorNote;
use domain::ports::{Clock, Payloads, Records, StuckIndex, StuckQuery, SystemClock};
use domain::{CorrelationId, MaxAttempts, Payload, TransactionId, TransactionRecord};
use runtime::ops::OpError;
use runtime::Settings;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::time::Duration;

/// The region of an endpoint given without one: the local stack's moto answers in
/// us-east-1.
const LOCAL_REGION: &str = "us-east-1";

/// What a command printed: text for people, JSON for scripts.
pub struct Output {
    pub text: String,
    pub json: Value,
}

/// Where the stack is, resolved from flags, environment and `--prefix`.
pub struct Target {
    pub sdk: aws_config::SdkConfig,
    pub args: TargetArgs,
    pub names: Option<StackNames>,
    /// The stack's ReconcileShards, when given: never guessed.
    shards: Option<u16>,
    /// The stack's ReconcileThresholdSeconds, when given: never guessed.
    threshold: Option<Duration>,
    /// The stack's ReconcileRequeueMax, when given: never guessed.
    requeue_max: Option<u32>,
    /// The stack's AnswerTimeoutSeconds, when given: never guessed.
    answer_timeout: Option<Duration>,
    /// The stack's TransactionDeadlineSeconds, when given: never guessed.
    transaction_deadline: Option<Duration>,
    /// The stack's RetentionDays, when given: never guessed.
    retention: Option<domain::retention::Retention>,
    /// The stack's RequestDelivery, when given.
    delivery: Option<Delivery>,
}

impl Target {
    pub async fn from_args(args: &TargetArgs) -> Result<Self, CliError> {
        if let Some(e) = &args.endpoint_url {
            CliError::require_url("--endpoint-url", e, "")?;
        }
        let loader = || {
            let mut loader = aws_config::defaults(aws_config::BehaviorVersion::latest());
            if let Some(e) = &args.endpoint_url {
                loader = loader.endpoint_url(e);
            }
            let region = args
                .region
                .clone()
                .or_else(|| args.endpoint_url.as_ref().map(|_| LOCAL_REGION.to_owned()));
            if let Some(r) = region {
                loader = loader.region(aws_config::Region::new(r));
            }
            loader
        };
        let mut sdk = loader().load().await;
        if let Some(role) = &args.role_arn {
            // The caller's own credentials sign AssumeRole; every call after it is the
            // role's (its session credentials, refreshed before they expire).
            let provider = aws_config::sts::AssumeRoleProvider::builder(role)
                .session_name("retryctl")
                .configure(&sdk)
                .build()
                .await;
            sdk = loader().credentials_provider(provider).load().await;
        }
        Self::with_sdk(sdk, args).await
    }

    /// The target of `args` reached with `sdk` as it is (its credentials, endpoint and
    /// region): `--stack` read, every setting checked.
    pub async fn with_sdk(sdk: aws_config::SdkConfig, args: &TargetArgs) -> Result<Self, CliError> {
        let args = &match &args.stack {
            Some(name) => crate::stack::Described::fetch(&sdk, name)
                .await?
                .fill(args)?,
            None => args.clone(),
        };
        at_least("--reconcile-shards", args.reconcile_shards, 1)?;
        at_least("--answer-timeout-seconds", args.answer_timeout_seconds, 1)?;
        at_least(
            "--transaction-deadline-seconds",
            args.transaction_deadline_seconds,
            60,
        )?;
        at_least("--reconcile-requeue-max", args.reconcile_requeue_max, 1)?;
        let delivery = args
            .request_delivery
            .as_deref()
            .map(|d| {
                Delivery::parse(d).ok_or_else(|| {
                    CliError::bad("--request-delivery", d, "must be direct or outbox")
                })
            })
            .transpose()?;
        let retention = args
            .retention_days
            .map(|d| {
                domain::retention::Retention::days(d)
                    .map_err(|e| CliError::bad("--retention-days", d.to_string(), e))
            })
            .transpose()?;
        Ok(Self {
            sdk,
            args: args.clone(),
            retention,
            delivery,
            names: args.prefix.as_deref().map(StackNames::new),
            shards: args.reconcile_shards,
            threshold: args.reconcile_threshold_seconds.map(Duration::from_secs),
            requeue_max: args.reconcile_requeue_max,
            answer_timeout: args.answer_timeout_seconds.map(Duration::from_secs),
            transaction_deadline: args.transaction_deadline_seconds.map(Duration::from_secs),
        })
    }

    /// The stack's shard count of the reconciler index, as given: a wrong one would
    /// write index keys the reconciler never reads, so it is never guessed.
    pub fn shards(&self) -> Result<u16, CliError> {
        self.shards.ok_or_else(|| {
            CliError::Missing(
                "set --reconcile-shards (or RECONCILE_SHARDS) to the stack's ReconcileShards \
                 (stack output `ReconcileShards`): retryctl never guesses it"
                    .to_owned(),
            )
        })
    }

    /// The stack's reconcile threshold, as given: never guessed.
    pub fn threshold(&self) -> Result<Duration, CliError> {
        self.threshold.ok_or_else(|| {
            CliError::Missing(
                "set --reconcile-threshold-seconds (or RECONCILE_THRESHOLD_SECONDS) to the \
                 stack's ReconcileThresholdSeconds parameter: retryctl never guesses it"
                    .to_owned(),
            )
        })
    }

    /// The stack's ReconcileRequeueMax, as given: never guessed (it decides which
    /// records `stuck` names parked).
    pub fn requeue_max(&self) -> Result<u32, CliError> {
        self.requeue_max.ok_or_else(|| {
            CliError::Missing(
                "set --reconcile-requeue-max (or RECONCILE_REQUEUE_MAX) to the stack's \
                 ReconcileRequeueMax parameter: retryctl never guesses it"
                    .to_owned(),
            )
        })
    }

    /// The stack's answer timeout, as given: the first answer deadline of a
    /// transaction `submit` starts. Never the built-in default: a deadline longer than
    /// the stack's leaves a silent first request unrepublished that much longer.
    pub fn answer_timeout(&self) -> Result<Duration, CliError> {
        self.answer_timeout.ok_or_else(|| {
            CliError::Missing(
                "set --answer-timeout-seconds (or ANSWER_TIMEOUT_SECONDS) to the stack's \
                 AnswerTimeoutSeconds (stack output `AnswerTimeoutSeconds`): retryctl never \
                 guesses it"
                    .to_owned(),
            )
        })
    }

    /// The stack's transaction deadline, as given: the deadline a replay gives
    /// again. Never the built-in default: a longer one than the stack's would keep a
    /// replayed transaction open past what the stack promises.
    pub fn transaction_deadline(&self) -> Result<Duration, CliError> {
        self.transaction_deadline.ok_or_else(|| {
            CliError::Missing(
                "set --transaction-deadline-seconds (or TRANSACTION_DEADLINE_SECONDS) to the \
                 stack's TransactionDeadlineSeconds parameter (or use --stack): retryctl \
                 never guesses it"
                    .to_owned(),
            )
        })
    }

    /// The stack's retention of finished transactions, as given: the TTL the
    /// writes that end a transaction set. Never the built-in default: a shorter one
    /// than the stack's would delete a transaction early.
    pub fn retention(&self) -> Result<domain::retention::Retention, CliError> {
        self.retention.ok_or_else(|| {
            CliError::Missing(
                "set --retention-days (or RETENTION_DAYS) to the stack's RetentionDays \
                 parameter (or use --stack): retryctl never guesses it"
                    .to_owned(),
            )
        })
    }

    fn pick(
        &self,
        given: &Option<String>,
        from_prefix: impl Fn(&StackNames) -> String,
        flag: &str,
        env: &str,
    ) -> Result<String, CliError> {
        given
            .clone()
            .or_else(|| self.names.as_ref().map(from_prefix))
            .ok_or_else(|| {
                CliError::Missing(format!(
                    "set {flag} (or {env}), or --prefix for a local stack"
                ))
            })
    }

    /// What an error hint names: the endpoint, the prefix and the names in use.
    pub fn whereabouts(&self) -> Whereabouts {
        let names = [
            ("--transactions-table", self.transactions_table()),
            ("--payloads-table", self.payloads_table()),
            ("--audit-table", self.audit_table()),
            ("--schedule-group", self.schedule_group()),
        ];
        Whereabouts {
            endpoint: self.args.endpoint_url.clone(),
            prefix: self.args.prefix.clone(),
            names: names
                .into_iter()
                .filter_map(|(flag, name)| name.ok().map(|n| (flag, n)))
                .collect(),
        }
    }

    pub fn transactions_table(&self) -> Result<String, CliError> {
        self.pick(
            &self.args.transactions_table,
            |n| n.transactions_table.clone(),
            "--transactions-table",
            vars::TRANSACTIONS_TABLE.name,
        )
    }
    pub fn payloads_table(&self) -> Result<String, CliError> {
        self.pick(
            &self.args.payloads_table,
            |n| n.payloads_table.clone(),
            "--payloads-table",
            vars::PAYLOADS_TABLE.name,
        )
    }
    pub fn audit_table(&self) -> Result<String, CliError> {
        self.pick(
            &self.args.audit_table,
            |n| n.audit_table.clone(),
            "--audit-table",
            vars::AUDIT_TABLE.name,
        )
    }
    pub fn breaker_table(&self) -> Result<String, CliError> {
        self.pick(
            &self.args.breaker_table,
            |n| n.breaker_table.clone(),
            "--breaker-table",
            vars::BREAKER_TABLE.name,
        )
    }
    pub fn schedule_group(&self) -> Result<String, CliError> {
        self.pick(
            &self.args.schedule_group,
            |n| n.schedule_group.clone(),
            "--schedule-group",
            vars::SCHEDULE_GROUP.name,
        )
    }

    fn sqs(&self) -> aws_sdk_sqs::Client {
        aws_sdk_sqs::Client::new(&self.sdk)
    }

    async fn url_by_name(&self, name: &str) -> Result<String, CliError> {
        self.sqs()
            .get_queue_url()
            .queue_name(name)
            .send()
            .await
            .map_err(|e| crate::error::sdk_error("GetQueueUrl", name, e))?
            .queue_url()
            .map(str::to_owned)
            .ok_or_else(|| CliError::Aws(format!("GetQueueUrl `{name}` returned no URL")))
    }

    /// URL of a queue: the flag/variable, else from the prefix's name.
    pub async fn queue_url(&self, q: QueueName) -> Result<String, CliError> {
        let (given, flag, env) = match q {
            QueueName::Request => (
                &self.args.request_queue_url,
                "--request-queue-url",
                vars::REQUEST_QUEUE_URL.name,
            ),
            QueueName::Response => (
                &self.args.response_queue_url,
                "--response-queue-url",
                "RESPONSE_QUEUE_URL",
            ),
            QueueName::Retry => (
                &self.args.retry_queue_url,
                "--retry-queue-url",
                vars::RETRY_QUEUE_URL.name,
            ),
            QueueName::Scheduler => (
                &self.args.scheduler_dlq_url,
                "--scheduler-dlq-url",
                "SCHEDULER_DLQ_URL",
            ),
            QueueName::Audit => (&self.args.audit_dlq_url, "--audit-dlq-url", "AUDIT_DLQ_URL"),
        };
        if let Some(u) = given {
            return Ok(u.clone());
        }
        let Some(n) = &self.names else {
            return Err(CliError::Missing(format!(
                "set {flag} (or {env}), or --prefix for a local stack"
            )));
        };
        let name = match q {
            QueueName::Request => &n.request_queue,
            QueueName::Response => &n.response_queue,
            QueueName::Retry => &n.retry_queue,
            QueueName::Scheduler => &n.scheduler_dlq,
            QueueName::Audit => &n.audit_dlq,
        };
        self.url_by_name(name).await
    }

    pub(crate) fn store(&self) -> Result<DynamoStore<PayloadsTable>, CliError> {
        Ok(DynamoStore::new(
            aws_sdk_dynamodb::Client::new(&self.sdk),
            self.transactions_table()?,
        )
        .with_payloads_table(self.payloads_table()?))
    }

    /// How the stack delivers requests: `--request-delivery` (or the stack's
    /// parameter); unset, `outbox` when the request queue's URL names a FIFO queue.
    pub fn delivery(&self) -> Delivery {
        self.delivery.unwrap_or_else(|| {
            match self
                .args
                .request_queue_url
                .as_deref()
                .map(aws::sqs::is_fifo_queue)
            {
                Some(true) => Delivery::Outbox,
                _ => Delivery::Direct,
            }
        })
    }

    /// The settings of a command that opens no retry cycle and judges nothing stuck
    /// (submit, resolve): shards and threshold play no part in its decisions.
    pub(crate) fn settings(&self) -> Settings {
        Settings {
            delivery: self.delivery(),
            ..Settings::default()
        }
    }

    /// The settings of a command that writes index keys or judges records stuck:
    /// with the stack's own shard count and threshold, or an error naming the flag.
    pub(crate) fn stack_settings(&self, threshold: bool) -> Result<Settings, CliError> {
        Ok(Settings {
            shards: self.shards()?,
            reconcile_threshold: if threshold {
                self.threshold()?
            } else {
                Settings::default().reconcile_threshold
            },
            ..self.settings()
        })
    }
}

/// Refuses a value of `flag` below `least`.
fn at_least(flag: &'static str, given: Option<impl Into<u64>>, least: u64) -> Result<(), CliError> {
    match given.map(Into::into) {
        Some(v) if v < least => Err(CliError::bad(
            flag,
            v.to_string(),
            format!("must be at least {least}"),
        )),
        _ => Ok(()),
    }
}

/// The context of an operator's decision, carrying who and why when known.
fn noted(ctx: domain::Context, note: Option<&OperatorNote>) -> domain::Context {
    match note {
        Some(n) => ctx.for_operator(n.clone()),
        None => ctx,
    }
}

pub(crate) fn parse_id(raw: &str) -> Result<TransactionId, CliError> {
    TransactionId::parse(raw).map_err(|e| CliError::bad("<id>", raw, e))
}

fn op_error(e: OpError) -> CliError {
    match e {
        OpError::Rejected(Rejection::UnknownTransaction { transaction_id }) => {
            CliError::UnknownTransaction(transaction_id.to_string())
        }
        OpError::Rejected(r) => CliError::Refused(r.to_string()),
        OpError::Dropped(d) => CliError::Refused(format!("nothing done: {}", d.label())),
        OpError::Failed(domain::exec::ExecError::Port(e)) => CliError::from(e),
        OpError::Failed(e) => CliError::Aws(e.to_string()),
    }
}

pub async fn submit(
    t: &Target,
    id: &str,
    payload: &str,
    max_attempts: u32,
    correlation_id: Option<&str>,
) -> Result<Output, CliError> {
    let id = parse_id(id)?;
    let correlation_id = correlation_id
        .map(|c| CorrelationId::new(c).map_err(|e| CliError::bad("--correlation-id", c, e)))
        .transpose()?;
    let text = match payload.strip_prefix('@') {
        Some(path) => std::fs::read_to_string(path).map_err(|e| {
            CliError::bad("--payload", payload, format!("cannot read the file: {e}"))
        })?,
        None => payload.to_owned(),
    };
    // The value named in an error: the file when it came from one, else the text cut
    // to a line (a payload over the limit is not echoed whole).
    let shown = if payload.starts_with('@') {
        payload.to_owned()
    } else {
        abridged(text.trim())
    };
    let payload =
        Payload::from_json(text.trim()).map_err(|e| CliError::bad("--payload", shown, e))?;
    let max = MaxAttempts::new(max_attempts)
        .map_err(|e| CliError::bad("--max-attempts", max_attempts.to_string(), e))?;
    let answer_timeout = t.answer_timeout()?;
    let store = t.store()?;
    let requests =
        aws::sqs::SqsRequestPublisher::new(t.sqs(), t.queue_url(QueueName::Request).await?);
    let ports = StartPorts {
        store: &store,
        requests: &requests,
    };
    let ctx = t.settings().context(SystemClock.now());
    let done = runtime::ops::start_correlated(
        &ports,
        id.clone(),
        payload,
        max,
        correlation_id,
        answer_timeout,
        &ctx,
    )
    .await
    .map_err(op_error)?;
    let result = done.ack.label();
    let published = done.published();
    Ok(Output {
        text: format!(
            "{id}: {result}{}\n",
            if published {
                " (request for attempt 1 published)"
            } else {
                ""
            }
        ),
        json: json!({"transaction_id": id.as_str(), "result": result, "published": published}),
    })
}

/// `text` cut to 80 characters, saying how long it was.
fn abridged(text: &str) -> String {
    const SHOWN: usize = 80;
    if text.chars().count() <= SHOWN {
        return text.to_owned();
    }
    let head: String = text.chars().take(SHOWN).collect();
    format!("{head}… ({} bytes)", text.len())
}

pub(crate) async fn read_record(
    store: &DynamoStore<PayloadsTable>,
    id: &TransactionId,
) -> Result<TransactionRecord, CliError> {
    store
        .get(id)
        .await?
        .ok_or_else(|| CliError::UnknownTransaction(id.to_string()))
}

/// Every audit entry of a transaction, in transition order (a Query on its key).
pub async fn audit_rows(
    t: &Target,
    id: &TransactionId,
) -> Result<Vec<domain::audit::AuditEntry>, CliError> {
    let writer =
        aws::audit::AuditWriter::new(aws_sdk_dynamodb::Client::new(&t.sdk), t.audit_table()?, 1);
    Ok(writer.history(id).await?)
}

pub async fn show(t: &Target, id: &str, payload: bool, wide: bool) -> Result<Output, CliError> {
    let id = parse_id(id)?;
    let store = t.store()?;
    let rec = read_record(&store, &id).await?;
    let rows = audit_rows(t, &id).await?;
    let mut text = view::show_text(&rec, &rows, wide);
    let mut json = view::show_json(&rec, &rows);
    if payload {
        let stored = store.payload(&id).await?;
        let shown = stored.as_ref().map_or("(no payload item)", |p| p.as_json());
        text.push_str(&format!("\npayload\n  {shown}\n"));
        json["payload"] = stored
            .and_then(|p| serde_json::from_str(p.as_json()).ok())
            .unwrap_or(Value::Null);
    }
    Ok(Output { text, json })
}

pub async fn stats(t: &Target) -> Result<Output, CliError> {
    let ddb = aws_sdk_dynamodb::Client::new(&t.sdk);
    let st = scan_stats(&ddb, &t.transactions_table()?).await?;
    let dlqs = dlq_depths(t).await;
    let mut text = view::stats_text(&st);
    text.push_str("dead-letter queues\n");
    for (q, depth) in &dlqs {
        match depth {
            Ok(n) => text.push_str(&format!("  {q:<10} {n:>7}\n")),
            Err(e) => text.push_str(&format!("  {q:<10} {:>7}  ({e})\n", "-")),
        }
    }
    let mut json = serde_json::to_value(&st).unwrap_or(Value::Null);
    json["dlq_depths"] = dlqs
        .iter()
        .map(|(q, d)| {
            (
                (*q).to_owned(),
                d.as_ref().ok().map_or(Value::Null, |n| json!(n)),
            )
        })
        .collect::<serde_json::Map<String, Value>>()
        .into();
    Ok(Output { text, json })
}

/// What the reconciler would act on now: the same index query, the same rule, and
/// the first thing its plan would do.
pub async fn stuck(t: &Target) -> Result<Output, CliError> {
    let store = t.store()?;
    let now = SystemClock.now();
    let settings = t.stack_settings(true)?;
    let requeue_max = t.requeue_max()?;
    let ctx = settings.context(now).with_requeue_max(requeue_max);
    let threshold_ms = i64::try_from(settings.reconcile_threshold.as_millis()).unwrap_or(i64::MAX);
    let before = now.plus_millis(-threshold_ms);
    let mut found: Vec<(TransactionRecord, String)> = Vec::new();
    for shard in 0..settings.shards {
        let mut cursor = None;
        loop {
            let page = store
                .query_stuck(&StuckQuery {
                    shard,
                    before,
                    limit: 100,
                    cursor: cursor.take(),
                })
                .await?;
            for r in page.records {
                if is_stuck(&r, &ctx) {
                    let plan = decide_reconcile(&r, &ctx);
                    let action = match plan.last() {
                        Some(domain::Effect::Drop(domain::decide::DropReason::Parked {
                            requeues,
                            ..
                        })) => format!(
                            "parked: requeued {requeues} times without progress (RECONCILE_REQUEUE_MAX {requeue_max}); see the retry DLQ"
                        ),
                        // What it would do beyond counting: the first effect not a write.
                        _ => plan
                            .iter()
                            .find(|e| !matches!(e, domain::Effect::Write(_)))
                            .map_or("-", |e| e.label())
                            .to_owned(),
                    };
                    found.push((r, action));
                }
            }
            match page.next {
                Some(c) => cursor = Some(c),
                None => break,
            }
        }
    }
    found.sort_by_key(|(r, _)| r.updated_at);
    let mut text = format!(
        "{} stuck (threshold {} s; the reconciler would act on each)\n",
        found.len(),
        settings.reconcile_threshold.as_secs()
    );
    if !found.is_empty() {
        text.push_str(&format!(
            "{:<24} {:<11} {:>7} {:>4}  {:<24}  {:<24}  ACTION\n",
            "TRANSACTION", "STATUS", "ATTEMPT", "NEXT", "UPDATED", "FIRE AT"
        ));
    }
    let mut rows = Vec::new();
    for (r, action) in &found {
        text.push_str(&format!(
            "{:<24} {:<11} {:>7} {:>4}  {:<24}  {:<24}  {}\n",
            r.transaction_id.as_str(),
            r.status.as_str(),
            r.current_attempt.get(),
            r.next_attempt.map_or("-".into(), |a| a.to_string()),
            r.updated_at.to_rfc3339(),
            r.next_fire_at.map_or("-".into(), |x| x.to_rfc3339()),
            action
        ));
        let mut v = view::record_json(r);
        v["action"] = json!(action);
        rows.push(v);
    }
    Ok(Output {
        text,
        json: json!({"threshold_seconds": settings.reconcile_threshold.as_secs(), "stuck": rows}),
    })
}

/// Resolves one transaction, recording `note` (who and why) with the write.
pub async fn resolve(
    t: &Target,
    id: &str,
    note: Option<&OperatorNote>,
) -> Result<Output, CliError> {
    let id = parse_id(id)?;
    let store = t.store()?.retaining(t.retention()?);
    // Only DeleteSchedule is used: the group is the one setting that matters.
    let scheduler = aws::scheduler::EventBridgeScheduler::new(
        aws_sdk_scheduler::Client::new(&t.sdk),
        SchedulerSettings {
            group: t.schedule_group()?,
            retry_queue_arn: String::new(),
            role_arn: String::new(),
            dlq_arn: String::new(),
            retry_attempts: 0,
            max_event_age_seconds: 60,
        },
    );
    let ports = ResolvePorts {
        store: &store,
        scheduler: &scheduler,
    };
    let ctx = noted(t.settings().context(SystemClock.now()), note);
    let done = runtime::ops::resolve(&ports, id.clone(), &ctx)
        .await
        .map_err(op_error)?;
    let deleted = done.trail.iter().find_map(|(e, o)| match (e, o) {
        (domain::Effect::DeleteSchedule(_), Observed::ScheduleDeleted) => Some("schedule deleted"),
        (domain::Effect::DeleteSchedule(_), _) => Some("no schedule left to delete"),
        _ => None,
    });
    let result = done.ack.label();
    // Already SUCCEEDED by the external service's own answer, not by an operator:
    // say so rather than "already resolved".
    if done.ack == domain::decide::Ack::AlreadyResolved {
        let rec = read_record(&store, &id).await?;
        if rec.status == domain::Status::Succeeded
            && rec.last_actor != domain::machine::Actor::Operator
        {
            return Ok(Output {
                text: format!(
                    "{id}: already SUCCEEDED: the external service answered SUCCESS for attempt {}; nothing to resolve\n",
                    rec.current_attempt
                ),
                json: json!({"transaction_id": id.as_str(), "result": "already-succeeded", "schedule": null}),
            });
        }
    }
    Ok(Output {
        text: format!(
            "{id}: {result}{}\n",
            deleted
                .as_ref()
                .map(|d| format!(" ({d})"))
                .unwrap_or_default()
        ),
        json: json!({"transaction_id": id.as_str(), "result": result, "schedule": deleted}),
    })
}

/// Replays one FAILED transaction, recording `note` (who and why) with the write.
pub async fn replay(
    t: &Target,
    id: &str,
    budget: Option<u32>,
    note: Option<&OperatorNote>,
) -> Result<Output, CliError> {
    let id = parse_id(id)?;
    if budget == Some(0) {
        return Err(CliError::bad("--budget", "0", "must be at least 1"));
    }
    let store = t.store()?;
    let rec = read_record(&store, &id).await?;
    // An erased (or expired) transaction has no payload left to send again.
    if rec.status == domain::Status::Failed
        && store
            .payload(&id)
            .await
            .map_err(|e| CliError::Aws(e.to_string()))?
            .is_none()
    {
        return Err(CliError::Refused(format!(
            "transaction `{id}` has no payload any more (erased by `retryctl erase`, or past its retention): nothing to send again, not replayed"
        )));
    }
    let budget = budget.unwrap_or(rec.max_attempts.get());
    let retries = aws::sqs::SqsRetryPublisher::new(t.sqs(), t.queue_url(QueueName::Retry).await?);
    let ports = ReplayPorts {
        store: &store,
        retries: &retries,
    };
    let settings = Settings {
        transaction_deadline: t.transaction_deadline()?,
        ..t.stack_settings(false)?
    };
    let ctx = noted(settings.context(SystemClock.now()), note);
    let done = runtime::ops::replay(&ports, id.clone(), budget, &ctx)
        .await
        .map_err(op_error)?;
    let after = read_record(&store, &id).await?;
    let next = after.next_attempt.map_or("-".into(), |a| a.to_string());
    Ok(Output {
        text: format!(
            "{id}: {} — now {} with attempt {next} next (max_attempts {} → {}); retry event published; {}\n",
            done.ack.label(),
            after.status,
            rec.max_attempts,
            after.max_attempts,
            replay_delivery(ctx.rules.delivery, &next)
        ),
        json: json!({"transaction_id": id.as_str(), "result": done.ack.label(), "record": view::record_json(&after)}),
    })
}

/// What a replay sends, by delivery mode: said before (`--dry-run`) and after.
pub fn replay_delivery(delivery: Delivery, next: &str) -> String {
    match delivery {
        Delivery::Direct => format!(
            "attempt {next} is published by the retry handler with a new idempotency key"
        ),
        Delivery::Outbox => format!(
            "attempt {next} goes out once through the publisher (outbox mode: a new deduplication id, never republished)"
        ),
    }
}

/// The dead-letter queue of `q` and where its messages go back to: the request,
/// response and retry DLQs are named by each queue's redrive policy and go back to
/// their queue; the scheduler's DLQ (retry events the scheduler could not deliver)
/// goes to the retry queue.
async fn dlq_of(t: &Target, q: QueueName) -> Result<(String, String), CliError> {
    if q == QueueName::Audit {
        return Ok((
            t.queue_url(QueueName::Audit).await?,
            format!("the audit table `{}`", t.audit_table()?),
        ));
    }
    if q == QueueName::Scheduler {
        return Ok((
            t.queue_url(QueueName::Scheduler).await?,
            t.queue_url(QueueName::Retry).await?,
        ));
    }
    let sqs = t.sqs();
    let source = t.queue_url(q).await?;
    let attrs = sqs
        .get_queue_attributes()
        .queue_url(&source)
        .attribute_names(QueueAttributeName::RedrivePolicy)
        .send()
        .await
        .map_err(|e| crate::error::sdk_error("GetQueueAttributes", &source, e))?;
    let policy = attrs
        .attributes()
        .and_then(|a| a.get(&QueueAttributeName::RedrivePolicy))
        .ok_or_else(|| {
            CliError::Refused(format!(
                "queue {source} has no redrive policy, hence no DLQ"
            ))
        })?;
    let arn = serde_json::from_str::<Value>(policy)
        .ok()
        .and_then(|v| {
            v.get("deadLetterTargetArn")
                .and_then(|a| a.as_str())
                .map(str::to_owned)
        })
        .ok_or_else(|| CliError::Aws(format!("unreadable redrive policy on {source}: {policy}")))?;
    let dlq = aws::sqs::SqsDirectory::new(sqs)
        .url_for_arn(&arn)
        .await
        .map_err(CliError::Aws)?;
    Ok((dlq, source))
}

/// Messages waiting in each dead-letter queue (ApproximateNumberOfMessages, plus those
/// in flight), by the queue they came from; the reason where the queue could not be
/// read.
async fn dlq_depths(t: &Target) -> BTreeMap<&'static str, Result<u64, String>> {
    let mut out = BTreeMap::new();
    for &q in QueueName::ALL {
        let depth = async {
            let (dlq, _) = dlq_of(t, q).await?;
            let attrs = t
                .sqs()
                .get_queue_attributes()
                .queue_url(&dlq)
                .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
                .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
                .send()
                .await
                .map_err(|e| crate::error::sdk_error("GetQueueAttributes", &dlq, e))?;
            let count = |a: QueueAttributeName| -> u64 {
                attrs
                    .attributes()
                    .and_then(|m| m.get(&a))
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0)
            };
            Ok::<u64, CliError>(
                count(QueueAttributeName::ApproximateNumberOfMessages)
                    + count(QueueAttributeName::ApproximateNumberOfMessagesNotVisible),
            )
        }
        .await;
        out.insert(q.as_str(), depth.map_err(|e| e.to_string()));
    }
    out
}

/// The messages waiting in the DLQ of `q` (at most `max`), left in place: received
/// with a visibility timeout of 0, so each look counts as one more receive.
/// `dry_run`: worded as what `redrive` would move.
pub async fn peek(t: &Target, q: QueueName, max: u64, dry_run: bool) -> Result<Output, CliError> {
    if max == 0 {
        return Err(CliError::bad("--max", "0", "must be at least 1"));
    }
    let (dlq_url, target_url) = dlq_of(t, q).await?;
    let sqs = t.sqs();
    let mut seen: BTreeMap<String, Value> = BTreeMap::new();
    // Visible again at once, a message may come back in the next page: stop when a
    // page brings nothing new.
    while (seen.len() as u64) < max {
        let before = seen.len();
        for m in receive(&sqs, &dlq_url, 10, 0).await? {
            let Some(id) = m.message_id().map(str::to_owned) else {
                continue;
            };
            if (seen.len() as u64) < max {
                seen.entry(id).or_insert_with(|| peeked_json(&m));
            }
        }
        if seen.len() == before {
            break;
        }
    }
    let verb = if dry_run { "would move" } else { "holds" };
    let mut text = format!(
        "{}: {dlq_url} {verb} {} message(s){}\n",
        q.as_str(),
        seen.len(),
        if dry_run {
            format!(" to {target_url} (dry run: nothing moved)")
        } else {
            String::new()
        }
    );
    for (id, m) in &seen {
        text.push_str(&format!(
            "- {id}  received {}  first received {}  sent {}\n",
            m["receive_count"],
            m["first_received"].as_str().unwrap_or("-"),
            m["sent"].as_str().unwrap_or("-"),
        ));
        if let Some(attrs) = m["attributes"].as_object().filter(|a| !a.is_empty()) {
            for (k, v) in attrs {
                text.push_str(&format!("    {k}: {}\n", v.as_str().unwrap_or_default()));
            }
        }
        text.push_str(&format!(
            "    body: {}\n",
            abridged(m["body"].as_str().unwrap_or_default())
        ));
    }
    Ok(Output {
        text,
        json: json!({
            "queue": q.as_str(),
            "dlq": dlq_url,
            "to": target_url,
            "dry_run": dry_run,
            "messages": seen.into_values().collect::<Vec<_>>(),
        }),
    })
}

/// One DLQ message as `peek` shows it.
fn peeked_json(m: &aws_sdk_sqs::types::Message) -> Value {
    let system = |a: MessageSystemAttributeName| m.attributes().and_then(|x| x.get(&a)).cloned();
    let instant = |a: MessageSystemAttributeName| {
        system(a)
            .and_then(|ms| ms.parse::<i64>().ok())
            .map(|ms| domain::Timestamp::from_millis(ms).to_rfc3339())
    };
    let attributes: serde_json::Map<String, Value> = m
        .message_attributes()
        .map(|a| {
            a.iter()
                .map(|(k, v)| (k.clone(), json!(v.string_value().unwrap_or_default())))
                .collect()
        })
        .unwrap_or_default();
    json!({
        "message_id": m.message_id(),
        "receive_count": system(MessageSystemAttributeName::ApproximateReceiveCount)
            .and_then(|n| n.parse::<u64>().ok()),
        "first_received": instant(MessageSystemAttributeName::ApproximateFirstReceiveTimestamp),
        "sent": instant(MessageSystemAttributeName::SentTimestamp),
        "attributes": attributes,
        "body": m.body(),
    })
}

/// Audits what the audit writer gave up on: each message of the audit DLQ names a
/// range of the table's stream; the range is read again (while the stream holds it,
/// 24 h) and every change in it audited (idempotent: an entry already written is
/// written again unchanged). A message whose range was audited is deleted; one whose
/// range can no longer be read stays, and the output says which and why.
async fn redrive_audit(t: &Target, max: Option<u64>) -> Result<Output, CliError> {
    let dlq_url = t.queue_url(QueueName::Audit).await?;
    let sqs = t.sqs();
    let streams = aws_sdk_dynamodbstreams::Client::new(&t.sdk);
    // As the audit writer does: a transaction the range shows ending gets its
    // payload's TTL, one it shows reopened loses it.
    let writer = aws::audit::AuditWriter::new(
        aws_sdk_dynamodb::Client::new(&t.sdk),
        t.audit_table()?,
        domain::defaults::AUDIT_RETENTION_DAYS,
    )
    .with_payloads(t.payloads_table()?, t.retention()?);
    let limit = max.unwrap_or(u64::MAX);
    let (mut done, mut entries) = (0u64, 0usize);
    let mut unread: Vec<Value> = Vec::new();
    let mut looked: std::collections::BTreeSet<String> = std::collections::BTreeSet::new();
    while done + (unread.len() as u64) < limit {
        let messages = receive(&sqs, &dlq_url, 10, 30).await?;
        if messages.is_empty() {
            break;
        }
        for m in messages {
            let id = m.message_id().unwrap_or_default().to_owned();
            if !looked.insert(id.clone()) {
                continue;
            }
            let body = m.body().unwrap_or_default();
            let range = match aws::audit::StreamRange::from_failure_record(body) {
                Ok(r) => r,
                Err(why) => {
                    unread.push(json!({"message_id": id, "why": why}));
                    continue;
                }
            };
            let changes = match aws::audit::read_range(&streams, &range).await {
                Ok(c) => c,
                Err(e) => {
                    let why = format!(
                        "the stream no longer gives shard {} from {} to {}: {}",
                        range.shard_id,
                        range.start,
                        range.end,
                        CliError::from(e)
                    );
                    unread.push(json!({"message_id": id, "why": why}));
                    continue;
                }
            };
            let batch = writer
                .apply_batch(changes.iter().map(|c| (c.old.as_ref(), c.new.as_ref())))
                .await;
            if let Some(Err(e)) = batch.results.iter().find(|r| r.is_err()) {
                unread.push(json!({"message_id": id, "why": format!("audit write failed: {e}")}));
                continue;
            }
            entries += batch.entries_written();
            delete(&sqs, &dlq_url, &m).await?;
            done += 1;
        }
    }
    let mut text = format!(
        "audit: {done} stream range(s) read again from {dlq_url}, {entries} audit entr{} written\n",
        if entries == 1 { "y" } else { "ies" }
    );
    for u in &unread {
        text.push_str(&format!(
            "  not audited: message {}: {}\n",
            u["message_id"].as_str().unwrap_or("-"),
            u["why"].as_str().unwrap_or("-")
        ));
    }
    Ok(Output {
        text,
        json: json!({"queue": "audit", "ranges_audited": done, "entries_written": entries, "not_audited": unread}),
    })
}

/// Receives up to `max` messages (every attribute) of `queue_url`, hidden for
/// `visibility` seconds, waiting at most a second for the first.
async fn receive(
    sqs: &aws_sdk_sqs::Client,
    queue_url: &str,
    max: i32,
    visibility: i32,
) -> Result<Vec<aws_sdk_sqs::types::Message>, CliError> {
    let out = sqs
        .receive_message()
        .queue_url(queue_url)
        .max_number_of_messages(max)
        .wait_time_seconds(1)
        .visibility_timeout(visibility)
        .message_attribute_names("All")
        .message_system_attribute_names(MessageSystemAttributeName::All)
        .send()
        .await
        .map_err(|e| crate::error::sdk_error("ReceiveMessage", queue_url, e))?;
    Ok(out.messages.unwrap_or_default())
}

/// Deletes a received message from `queue_url`.
async fn delete(
    sqs: &aws_sdk_sqs::Client,
    queue_url: &str,
    m: &aws_sdk_sqs::types::Message,
) -> Result<(), CliError> {
    if let Some(rh) = m.receipt_handle() {
        sqs.delete_message()
            .queue_url(queue_url)
            .receipt_handle(rh)
            .send()
            .await
            .map_err(|e| crate::error::sdk_error("DeleteMessage", queue_url, e))?;
    }
    Ok(())
}

/// Moves the messages of a dead-letter queue back to its source: the request,
/// response and retry DLQs (named by each queue's redrive policy) to their queue; the
/// scheduler's DLQ (retry events the scheduler could not deliver) to the retry queue.
/// `wait` > 0: then watches the DLQ that many seconds and reports which of the moved
/// messages came back (same body), with their transaction id.
pub async fn redrive(
    t: &Target,
    q: QueueName,
    max: Option<u64>,
    wait: u64,
) -> Result<Output, CliError> {
    if max == Some(0) {
        return Err(CliError::bad("--max", "0", "must be at least 1"));
    }
    if q == QueueName::Audit {
        if wait > 0 {
            return Err(CliError::bad(
                "--wait",
                wait.to_string(),
                "does not apply to the audit DLQ: its messages are audited, not moved back",
            ));
        }
        return redrive_audit(t, max).await;
    }
    let sqs = t.sqs();
    let (dlq_url, target_url) = dlq_of(t, q).await?;
    let mut moved = 0u64;
    // (the id each moved message was sent under, its body)
    let mut sent: Vec<(String, String)> = Vec::new();
    // Moved messages seen back in the DLQ while still moving.
    let mut early: Vec<aws_sdk_sqs::types::Message> = Vec::new();
    let limit = max.unwrap_or(u64::MAX);
    while moved < limit {
        let page = i32::try_from((limit - moved).min(10)).unwrap_or(10);
        let messages = receive(&sqs, &dlq_url, page, 30).await?;
        if messages.is_empty() {
            break;
        }
        for m in messages {
            // Sent by this run and already dead-lettered again (a DLQ keeps the id a
            // message was sent under): moved once, never again — it came back.
            if sent
                .iter()
                .any(|(id, _)| Some(id.as_str()) == m.message_id())
            {
                early.push(m);
                continue;
            }
            let mut send = sqs
                .send_message()
                .queue_url(&target_url)
                .message_body(m.body().unwrap_or_default());
            // The request's idempotency key travels on; the scheduler's diagnostic
            // attributes stay behind.
            if let Some(attrs) = m.message_attributes() {
                for (k, v) in attrs {
                    if q == QueueName::Scheduler {
                        continue;
                    }
                    let a: MessageAttributeValue = v.clone();
                    send = send.message_attributes(k, a);
                }
            }
            // A FIFO request queue (outbox mode) takes the message back under the
            // group and deduplication id it was sent with: within SQS's 5-minute
            // window a request still queued or just consumed is not delivered twice.
            if aws::sqs::is_fifo_queue(&target_url) {
                let system = m.attributes();
                let id = |k: MessageSystemAttributeName| system.and_then(|a| a.get(&k)).cloned();
                send = send
                    .set_message_group_id(id(MessageSystemAttributeName::MessageGroupId))
                    .set_message_deduplication_id(id(
                        MessageSystemAttributeName::MessageDeduplicationId,
                    ));
            }
            let out = send
                .send()
                .await
                .map_err(|e| crate::error::sdk_error("SendMessage", &target_url, e))?;
            delete(&sqs, &dlq_url, &m).await?;
            sent.push((
                out.message_id().unwrap_or_default().to_owned(),
                m.body().unwrap_or_default().to_owned(),
            ));
            moved += 1;
        }
    }
    let back = came_back(&sqs, &dlq_url, &sent, early, Duration::from_secs(wait)).await?;
    let mut text = format!(
        "{}: moved {moved} message(s) from {dlq_url} to {target_url}\n",
        q.as_str()
    );
    if wait > 0 || !back.is_empty() {
        text.push_str(&format!(
            "  {} came back to the DLQ within {wait} s\n",
            back.len()
        ));
        for b in &back {
            text.push_str(&format!(
                "  - {} (sent as {}), transaction {}, received {}\n",
                b["message_id"].as_str().unwrap_or("-"),
                b["sent_as"].as_str().unwrap_or("-"),
                b["transaction_id"].as_str().unwrap_or("-"),
                b["receive_count"]
            ));
        }
    }
    Ok(Output {
        text,
        json: json!({
            "queue": q.as_str(),
            "moved": moved,
            "from": dlq_url,
            "to": target_url,
            "waited_seconds": wait,
            "came_back": back,
        }),
    })
}

/// The moved messages (`sent`: the id each was sent under, its body; `early`: those
/// already seen back while moving) that reappear in
/// the DLQ within `wait` (by that id, which a DLQ keeps, or else by body), looked at
/// every second without moving them: each as
/// `{message_id, sent_as, transaction_id, receive_count}` (the transaction id read from
/// the body when it is JSON naming one).
async fn came_back(
    sqs: &aws_sdk_sqs::Client,
    dlq_url: &str,
    sent: &[(String, String)],
    early: Vec<aws_sdk_sqs::types::Message>,
    wait: Duration,
) -> Result<Vec<Value>, CliError> {
    let deadline = std::time::Instant::now() + wait;
    let mut pending: Vec<&(String, String)> = sent.iter().collect();
    let mut back: Vec<Value> = Vec::new();
    let mut seen: std::collections::BTreeSet<String> = std::collections::BTreeSet::new();
    let mut batch = early;
    loop {
        for m in std::mem::take(&mut batch) {
            let id = m.message_id().unwrap_or_default().to_owned();
            let body = m.body().unwrap_or_default();
            // The id it was sent under (a DLQ keeps it), else the same body.
            let Some(i) = pending
                .iter()
                .position(|(sent_as, _)| *sent_as == id)
                .or_else(|| pending.iter().position(|(_, b)| b == body))
            else {
                continue;
            };
            if !seen.insert(id.clone()) {
                continue;
            }
            let (sent_as, _) = pending.remove(i);
            let peeked = peeked_json(&m);
            back.push(json!({
                "message_id": id,
                "sent_as": sent_as,
                "transaction_id": serde_json::from_str::<Value>(body)
                    .ok()
                    .and_then(|v| v.get("transaction_id").cloned()),
                "receive_count": peeked["receive_count"],
            }));
        }
        if pending.is_empty() || std::time::Instant::now() >= deadline {
            return Ok(back);
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        batch = receive(sqs, dlq_url, 10, 0).await?;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    async fn target(line: &[&str]) -> Result<Target, CliError> {
        let cli = crate::cli::Cli::from_line(line).unwrap();
        Target::from_args(&cli.target).await
    }

    /// GIVEN `--request-delivery` THEN that mode, and the settings' delivery with it;
    /// a value that is no mode is refused naming the flag and the value; unset, a
    /// FIFO request queue's URL says outbox, any other direct.
    #[tokio::test]
    async fn the_delivery_mode_is_given_or_read_from_the_request_queue() {
        let local = ["--endpoint-url", "http://127.0.0.1:1"];
        let with = |extra: &[&'static str]| {
            let mut l = vec!["retryctl"];
            l.extend(local);
            l.extend(extra);
            l.push("stats");
            l
        };
        let t = target(&with(&["--request-delivery", "outbox"]))
            .await
            .unwrap();
        assert_eq!(t.delivery(), Delivery::Outbox);
        assert_eq!(t.settings().delivery, Delivery::Outbox);
        let e = target(&with(&["--request-delivery", "fifo"]))
            .await
            .err()
            .unwrap();
        assert!(
            e.to_string().contains("--request-delivery") && e.to_string().contains("fifo"),
            "{e}"
        );
        let fifo = "http://127.0.0.1:1/123456789012/dr-request.fifo";
        let t = target(&with(&["--request-queue-url", fifo])).await.unwrap();
        assert_eq!(t.delivery(), Delivery::Outbox);
        let t = target(&with(&[])).await.unwrap();
        assert_eq!(t.delivery(), Delivery::Direct);
        assert!(replay_delivery(Delivery::Outbox, "3").contains("once through the publisher"));
    }
}
