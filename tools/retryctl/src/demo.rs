//! `retryctl demo`: the whole pipeline on this machine, a workload, a live progress
//! bar and the final report.

use crate::cli::DemoArgs;
use crate::error::CliError;
use crate::local::stack::{ExternalOptions, Stack, StackOptions};
use crate::report::{self, ChaosReport, Observations, Report};
use crate::table::scan_stats;
use aws::dynamo::DynamoStore;
use aws_sdk_sqs::types::QueueAttributeName;
use domain::exec::{ResolvePorts, StartPorts};
use domain::ports::{Clock, Records, SystemClock, Transitions};
use domain::{MaxAttempts, Payload, RetryPolicy, Status, TransactionId};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use runtime::Settings;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use testkit::faults::{FaultKind, Faults, FaultsError, PROFILES};

/// The validated demo settings.
#[derive(Debug, Clone)]
pub struct DemoPlan {
    pub transactions: u32,
    pub max_attempts: MaxAttempts,
    pub submit_rate: f64,
    pub deadline: Duration,
    pub stack: StackOptions,
    pub progress: bool,
    pub chaos: Option<Chaos>,
    /// The decision settings the workload starts its transactions with: the stack's
    /// shard count, reconcile threshold and answer timeout.
    pub settings: Settings,
}

/// The faults a chaos run injects, and what it is called.
#[derive(Debug, Clone)]
pub struct Chaos {
    /// `light`, `heavy` or the file's path.
    pub profile: String,
    pub faults: Faults,
}

impl Chaos {
    /// A named profile or a JSON or TOML file of probabilities, seeded with `seed`;
    /// every error names `--chaos`, the value and, for a file, the field.
    pub fn parse(profile: &str, seed: u64) -> Result<Self, CliError> {
        if let Some(faults) = Faults::profile(profile, seed) {
            return Ok(Self {
                profile: profile.to_owned(),
                faults,
            });
        }
        let path = std::path::Path::new(profile);
        let read: fn(&str, u64) -> Result<Faults, FaultsError> =
            match path.extension().and_then(|e| e.to_str()) {
                Some("json") => Faults::from_json,
                Some("toml") => Faults::from_toml,
                _ => {
                    return Err(CliError::bad(
                        "--chaos",
                        profile,
                        format!(
                            "not a profile ({}) nor a .json or .toml file",
                            PROFILES.join(", ")
                        ),
                    ))
                }
            };
        let text =
            std::fs::read_to_string(path).map_err(|e| CliError::bad("--chaos", profile, e))?;
        let faults = read(&text, seed).map_err(|e| {
            CliError::bad(
                "--chaos",
                format!("{profile}: {} = {}", e.field, e.value),
                e.why,
            )
        })?;
        Ok(Self {
            profile: profile.to_owned(),
            faults,
        })
    }
}

fn probability(name: &'static str, v: f64) -> Result<f64, CliError> {
    if v.is_finite() && (0.0..=1.0).contains(&v) {
        Ok(v)
    } else {
        Err(CliError::bad(
            name,
            v.to_string(),
            "must be between 0 and 1",
        ))
    }
}

impl DemoPlan {
    /// Validates the flags; every error names the flag and the value.
    pub fn from_args(a: &DemoArgs) -> Result<Self, CliError> {
        if a.transactions == 0 {
            return Err(CliError::bad("--transactions", "0", "must be at least 1"));
        }
        let max_attempts = MaxAttempts::new(a.max_attempts)
            .map_err(|e| CliError::bad("--max-attempts", a.max_attempts.to_string(), e))?;
        let cancel = probability("--cancel-probability", a.cancel_probability)?;
        let dup = probability("--duplicate-responses", a.duplicate_responses)?;
        let silent = probability("--silent-probability", a.silent_probability)?;
        let answer_timeout = match a.answer_timeout {
            Some(0) => {
                return Err(CliError::bad(
                    "--answer-timeout",
                    "0",
                    "must be at least 1 second",
                ))
            }
            Some(s) => s,
            None if silent > 0.0 => DEMO_ANSWER_TIMEOUT_SECONDS,
            None => domain::defaults::ANSWER_TIMEOUT.as_secs(),
        };
        if a.latency_min_ms > a.latency_max_ms {
            return Err(CliError::bad(
                "--latency-min-ms",
                a.latency_min_ms.to_string(),
                format!("must not exceed --latency-max-ms ({})", a.latency_max_ms),
            ));
        }
        let secs = |name: &'static str, v: f64| {
            if v.is_finite() && v > 0.0 {
                Ok(Duration::from_secs_f64(v))
            } else {
                Err(CliError::bad(
                    name,
                    v.to_string(),
                    "must be a number of seconds > 0",
                ))
            }
        };
        let base = secs("--backoff-base", a.backoff_base)?;
        let cap = secs("--backoff-cap", a.backoff_cap)?;
        RetryPolicy::new(base, a.backoff_factor, cap, a.jitter, false).map_err(|e| {
            let (name, value) = match &e {
                domain::policy::PolicyError::Invalid { field, value, .. } => (
                    match *field {
                        "factor" => "--backoff-factor",
                        "cap" => "--backoff-cap",
                        "jitter" => "--jitter",
                        _ => "--backoff-base",
                    },
                    value.to_string(),
                ),
                domain::policy::PolicyError::Overrides { .. } => ("--backoff-base", String::new()),
            };
            CliError::bad(name, value, e)
        })?;
        if !(a.max_requests_per_second.is_finite() && a.max_requests_per_second > 0.0) {
            return Err(CliError::bad(
                "--max-requests-per-second",
                a.max_requests_per_second.to_string(),
                "must be > 0",
            ));
        }
        if !(a.submit_rate.is_finite() && a.submit_rate > 0.0) {
            return Err(CliError::bad(
                "--submit-rate",
                a.submit_rate.to_string(),
                "must be > 0",
            ));
        }
        for (name, v) in [
            ("--reconcile-every", a.reconcile_every),
            ("--reconcile-threshold", a.reconcile_threshold.unwrap_or(1)),
            ("--deadline", a.deadline),
        ] {
            if v == 0 {
                return Err(CliError::bad(name, "0", "must be at least 1 second"));
            }
        }
        if a.visibility_timeout < 1 {
            return Err(CliError::bad(
                "--visibility-timeout",
                a.visibility_timeout.to_string(),
                "must be at least 1 second",
            ));
        }
        let prefix = a
            .stack_prefix
            .clone()
            .unwrap_or_else(|| format!("demo{}", std::process::id()));
        let mut stack = StackOptions::new(prefix);
        if let Some(e) = &a.moto_endpoint {
            CliError::require_url("--moto-endpoint", e, " of a running moto server")?;
        }
        stack.moto_endpoint = a.moto_endpoint.clone();
        let reconcile_threshold = a.reconcile_threshold.unwrap_or_else(|| {
            demo_threshold(
                a.transactions,
                stack.retry_esm.max_concurrency,
                a.max_requests_per_second,
            )
        });
        stack.env = vec![
            ("BACKOFF_BASE_SECONDS", a.backoff_base.to_string()),
            ("BACKOFF_FACTOR", a.backoff_factor.to_string()),
            ("BACKOFF_CAP_SECONDS", a.backoff_cap.to_string()),
            ("BACKOFF_JITTER", a.jitter.to_string()),
            (
                "RECONCILE_THRESHOLD_SECONDS",
                reconcile_threshold.to_string(),
            ),
            (
                "MAX_REQUESTS_PER_SECOND",
                a.max_requests_per_second.to_string(),
            ),
            ("ANSWER_TIMEOUT_SECONDS", answer_timeout.to_string()),
        ];
        stack.visibility_timeout = Some(a.visibility_timeout);
        stack.reconcile_every = Duration::from_secs(a.reconcile_every);
        stack.external = ExternalOptions {
            cancel_probability: cancel,
            latency_min: Duration::from_millis(a.latency_min_ms),
            latency_max: Duration::from_millis(a.latency_max_ms),
            duplicate_response_probability: dup,
            silent_probability: silent,
            seed: a.seed,
        };
        let chaos = a
            .chaos
            .as_deref()
            .map(|p| Chaos::parse(p, a.seed))
            .transpose()?;
        stack.faults = chaos.as_ref().map(|c| c.faults.clone());
        Ok(Self {
            transactions: a.transactions,
            max_attempts,
            submit_rate: a.submit_rate,
            deadline: Duration::from_secs(a.deadline),
            stack,
            progress: !a.no_progress,
            chaos,
            settings: Settings {
                reconcile_threshold: Duration::from_secs(reconcile_threshold),
                answer_timeout: Duration::from_secs(answer_timeout),
                ..Settings::default()
            },
        })
    }
}

/// The id of the n-th transaction of the workload.
pub fn transaction_id(n: u32) -> String {
    format!("TX-{n:06}")
}

fn status_line(by_status: &BTreeMap<Status, u64>) -> String {
    Status::ALL
        .iter()
        .map(|s| format!("{} {}", s.as_str(), by_status.get(s).copied().unwrap_or(0)))
        .collect::<Vec<_>>()
        .join(" · ")
}

/// Starts the workload, follows it to the end and gathers what every witness saw.
pub async fn drive(stack: &Stack, plan: &DemoPlan) -> Result<Report, CliError> {
    let started = Instant::now();
    let ddb = aws_sdk_dynamodb::Client::new(&stack.sdk);
    let sqs = aws_sdk_sqs::Client::new(&stack.sdk);
    let names = stack.names().clone();
    let bar = if plan.progress {
        ProgressBar::with_draw_target(
            Some(u64::from(plan.transactions)),
            ProgressDrawTarget::stderr(),
        )
    } else {
        ProgressBar::hidden()
    };
    bar.set_style(
        ProgressStyle::with_template("{elapsed:>4} [{bar:30}] {pos}/{len} terminal  {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    bar.enable_steady_tick(Duration::from_millis(200));

    // The workload: start every transaction through the library operation, as a
    // service would (through the fault proxy in a chaos run).
    let clients = aws::clients::Clients::new(&stack.functions_sdk);
    let store = DynamoStore::new(clients.dynamodb.clone(), &names.transactions_table)
        .with_payloads_table(&names.payloads_table);
    let requests =
        aws::sqs::SqsRequestPublisher::new(clients.sqs.clone(), &stack.provisioned.request.url);
    let ports = StartPorts {
        store: &store,
        requests: &requests,
    };
    // Started as the stack's functions would start them: its shard count, threshold
    // and answer timeout (the start puts the index entry at the answer deadline).
    let settings = Settings {
        shards: stack.reconcile_shards(),
        ..plan.settings.clone()
    };
    let mut submitted = Vec::with_capacity(plan.transactions as usize);
    let interval = Duration::from_secs_f64(1.0 / plan.submit_rate);
    let mut next_at = Instant::now();
    let mut pending = futures::stream::FuturesUnordered::new();
    use futures::StreamExt;
    for n in 1..=plan.transactions {
        let id_text = transaction_id(n);
        let id = TransactionId::parse(&id_text)
            .map_err(|e| CliError::bad("transaction id", id_text.clone(), e))?;
        let payload = Payload::from_json(&format!(
            r#"{{"order":"{id_text}","amount_cents":{},"currency":"EUR"}}"#,
            1_000 + n
        ))
        .map_err(|e| CliError::bad("payload", id_text.clone(), e))?;
        submitted.push(id_text);
        let ctx = settings.context(SystemClock.now());
        let max = plan.max_attempts;
        let ports = &ports;
        pending.push(async move {
            // Starting is idempotent: repeat on a retryable failure.
            let mut tries = 0;
            loop {
                match runtime::ops::start_transaction(ports, id.clone(), payload.clone(), max, &ctx)
                    .await
                {
                    Ok(_) => return Ok(()),
                    Err(e) if e.is_retryable() && tries < 5 => tries += 1,
                    Err(e) => return Err(CliError::Aws(format!("start {id}: {e}"))),
                }
            }
        });
        while pending.len() >= 16 {
            if let Some(r) = pending.next().await {
                r?;
            }
        }
        next_at += interval;
        tokio::time::sleep_until(next_at.into()).await;
    }
    while let Some(r) = pending.next().await {
        r?;
    }

    // A chaos run also resolves every fifth transaction while it waits for a retry
    // (an operator's resolve deletes its schedule: DeleteSchedule through the proxy).
    let mut to_resolve: Vec<String> = if plan.chaos.is_some() {
        submitted.iter().step_by(5).cloned().collect()
    } else {
        vec![]
    };
    let mut resolved = 0u64;
    let reader = DynamoStore::new(ddb.clone(), &names.transactions_table);
    let operator = Operator {
        store: &store,
        scheduler: aws::scheduler::EventBridgeScheduler::new(
            clients.scheduler.clone(),
            aws::config::SchedulerSettings {
                group: names.schedule_group.clone(),
                retry_queue_arn: String::new(),
                role_arn: String::new(),
                dlq_arn: String::new(),
                retry_attempts: 0,
                max_event_age_seconds: 60,
            },
        ),
    };

    // Follow the statuses until every transaction is terminal or the deadline passes.
    let deadline = started + plan.deadline;
    loop {
        if !to_resolve.is_empty() {
            resolved += operator
                .resolve_waiting(&reader, &mut to_resolve, &settings)
                .await;
        }
        let st = scan_stats(&ddb, &names.transactions_table).await?;
        let terminal = st.by_status.get(&Status::Succeeded).copied().unwrap_or(0)
            + st.by_status.get(&Status::Failed).copied().unwrap_or(0);
        bar.set_position(terminal);
        bar.set_message(status_line(&st.by_status));
        if terminal >= u64::from(plan.transactions) || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    bar.finish();

    // Let in-flight duplicates drain (they are dropped by the handlers) and the audit
    // writer catch up, then gather what every witness saw.
    let settle_until = Instant::now() + Duration::from_secs(20);
    loop {
        let mut busy = 0;
        for url in [
            &stack.provisioned.response.url,
            &stack.provisioned.retry.url,
            &stack.provisioned.request.url,
        ] {
            busy += queue_depth(&sqs, url).await?;
        }
        if busy == 0 || Instant::now() > settle_until {
            break;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let records = scan_records(&ddb, &names.transactions_table).await?;
    // The audit trail is eventually consistent (stream → writer): wait while it is
    // still catching up, and give up only when it has stopped moving for 20 s.
    let mut audit = scan_audit(&ddb, &names.audit_table).await?;
    let mut rows = audit.values().map(Vec::len).sum::<usize>();
    let mut last_progress = Instant::now();
    let audit_cap = Instant::now() + Duration::from_secs(180);
    while !audit_caught_up(&records, &audit)
        && last_progress.elapsed() < Duration::from_secs(20)
        && Instant::now() < audit_cap
    {
        tokio::time::sleep(Duration::from_millis(500)).await;
        audit = scan_audit(&ddb, &names.audit_table).await?;
        let now_rows = audit.values().map(Vec::len).sum::<usize>();
        if now_rows > rows {
            rows = now_rows;
            last_progress = Instant::now();
        }
    }
    let mut dlq = BTreeMap::new();
    for (name, q) in [
        ("request", &stack.provisioned.request_dlq),
        ("response", &stack.provisioned.response_dlq),
        ("retry", &stack.provisioned.retry_dlq),
        ("scheduler", &stack.provisioned.scheduler_dlq),
        ("audit", &stack.provisioned.audit_dlq),
    ] {
        dlq.insert(name.to_owned(), queue_depth(&sqs, &q.url).await?);
    }
    let sched = aws_sdk_scheduler::Client::new(&stack.sdk);
    let schedules_left = sched
        .list_schedules()
        .group_name(&names.schedule_group)
        .send()
        .await
        .map(|o| o.schedules().len() as u64)
        .map_err(|e| {
            CliError::Aws(format!(
                "ListSchedules: {}",
                aws_sdk_scheduler::error::DisplayErrorContext(e)
            ))
        })?;

    let mut functions = BTreeMap::new();
    for (name, esm) in [
        (runtime::response::FUNCTION, &stack.response_esm),
        (runtime::retry::FUNCTION, &stack.retry_esm),
    ] {
        let mut m = stack
            .metrics
            .get(name)
            .map(|m| m.snapshot())
            .unwrap_or_default();
        m.insert("Invocations".into(), esm.get(&esm.invocations));
        m.insert("PeakConcurrency".into(), esm.get(&esm.peak_concurrency));
        m.insert("BatchItemFailures".into(), esm.get(&esm.reported_failures));
        m.insert("FailedInvocations".into(), esm.get(&esm.failed_invocations));
        functions.insert(name.to_owned(), m);
    }
    let s = &stack.scheduler;
    let scheduler = BTreeMap::from([
        ("fired".to_owned(), s.get(&s.fired)),
        ("deleted".to_owned(), s.get(&s.deleted)),
        ("delivery_failures".to_owned(), s.get(&s.delivery_failures)),
        ("dead_lettered".to_owned(), s.get(&s.dead_lettered)),
    ]);
    let mut reconciler = BTreeMap::from([
        (
            "runs".to_owned(),
            stack.reconciler.runs.load(Ordering::Relaxed),
        ),
        (
            "examined".to_owned(),
            stack.reconciler.examined.load(Ordering::Relaxed),
        ),
    ]);
    if let Ok(a) = stack.reconciler.actions.lock() {
        reconciler.extend(a.iter().map(|(k, v)| (k.clone(), *v)));
    }

    let obs = Observations {
        submitted,
        records,
        audit,
        service: stack.external.seen(),
        drift_ms: stack.scheduler.drift_ms(),
        dlq,
        schedules_left,
        elapsed: started.elapsed(),
        peak_requests_per_second: stack.external.peak_per_second(),
        peak_retried_per_second: stack.external.peak_retried_per_second(),
        peak_published_per_second: stack
            .publish_times
            .lock()
            .map(|t| crate::local::external::max_in_any_second(&t))
            .unwrap_or(0),
        rate_bound: stack.rate_bound,
        functions,
        scheduler,
        reconciler,
        chaos: plan
            .chaos
            .as_ref()
            .map(|c| chaos_report(c, stack, resolved)),
        dropped_silently: stack.external.dropped_silently.load(Ordering::Relaxed),
    };
    Ok(report::build(&obs))
}

/// The operator of a chaos run: resolves transactions waiting for their retry.
struct Operator<'a, St> {
    store: &'a St,
    scheduler: aws::scheduler::EventBridgeScheduler,
}

impl<St: Records + Transitions> Operator<'_, St> {
    /// Resolves each of `ids` found SCHEDULED, and forgets those resolved or
    /// terminal; the others are tried again next time. Returns how many it resolved.
    async fn resolve_waiting(
        &self,
        reader: &DynamoStore,
        ids: &mut Vec<String>,
        settings: &Settings,
    ) -> u64 {
        let ports = ResolvePorts {
            store: self.store,
            scheduler: &self.scheduler,
        };
        let mut resolved = 0;
        let mut keep = Vec::with_capacity(ids.len());
        for raw in ids.drain(..) {
            let Ok(id) = TransactionId::parse(&raw) else {
                continue;
            };
            match reader.get(&id).await {
                Ok(Some(r)) if r.status.is_terminal() => continue,
                Ok(Some(r)) if r.status == Status::Scheduled => {
                    let ctx = settings.context(SystemClock.now());
                    match runtime::ops::resolve(&ports, id, &ctx).await {
                        Ok(done) if done.ack == domain::decide::Ack::Resolved => {
                            resolved += 1;
                            continue;
                        }
                        Ok(_) => continue,
                        Err(_) => {}
                    }
                }
                _ => {}
            }
            keep.push(raw);
        }
        *ids = keep;
        resolved
    }
}

fn audit_caught_up(
    records: &HashMap<String, domain::TransactionRecord>,
    audit: &HashMap<String, Vec<domain::audit::AuditEntry>>,
) -> bool {
    records.values().all(|r| {
        audit
            .get(r.transaction_id.as_str())
            .map(|rows| report::chain(rows))
            .and_then(|c| c.last().map(|e| e.to == r.status && e.at == r.updated_at))
            .unwrap_or(false)
    })
}

/// What the fault proxy (and the local stack's processes) injected in a chaos run.
fn chaos_report(chaos: &Chaos, stack: &Stack, resolved: u64) -> ChaosReport {
    let mut injected: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
    let tally = stack
        .proxy
        .as_ref()
        .map(|p| p.faults_injected())
        .unwrap_or_default();
    for ((op, kind), n) in &tally {
        injected
            .entry(op.clone())
            .or_default()
            .insert(kind.label().to_owned(), *n);
    }
    let not_injected = testkit::faults::MUTATING
        .iter()
        .flat_map(|op| FaultKind::ALL.map(|k| (*op, k)))
        .filter(|(op, k)| !tally.contains_key(&((*op).to_owned(), *k)))
        .map(|(op, k)| format!("{op} {}", k.label()))
        .collect();
    let (sched, response, retry) = (&stack.scheduler, &stack.response_esm, &stack.retry_esm);
    let process = BTreeMap::from([
        (
            "response-handler killed mid-batch".to_owned(),
            response.get(&response.killed),
        ),
        (
            "retry-handler killed mid-batch".to_owned(),
            retry.get(&retry.killed),
        ),
        (
            "schedules fired late".to_owned(),
            sched.get(&sched.fired_late),
        ),
        (
            "schedules fired twice".to_owned(),
            sched.get(&sched.fired_twice),
        ),
        (
            "schedules never fired".to_owned(),
            sched.get(&sched.never_fired),
        ),
    ]);
    ChaosReport {
        profile: chaos.profile.clone(),
        seed: chaos.faults.seed,
        injected,
        not_injected,
        process,
        resolved,
    }
}

/// The demo's default reconcile threshold: 20 s, or the seconds the fleet needs to
/// send one retry per transaction at its rate bound (MaximumConcurrency ×
/// ⌊MAX_REQUESTS_PER_SECOND⌋), when that is longer. Below it, a retry event still
/// waiting its turn in the retry queue would look stuck and be requeued for nothing.
/// The demo's answer timeout when the service drops requests
/// (`--silent-probability`): short enough that the deadlines fire within the run.
pub const DEMO_ANSWER_TIMEOUT_SECONDS: u64 = 10;

pub fn demo_threshold(transactions: u32, max_concurrency: usize, max_rps: f64) -> u64 {
    let fleet = (max_concurrency.max(1) as f64) * max_rps.floor().max(1.0);
    let drain = (f64::from(transactions) / fleet).ceil() as u64;
    drain.max(20)
}

pub async fn queue_depth(sqs: &aws_sdk_sqs::Client, url: &str) -> Result<u64, CliError> {
    let (visible, in_flight) = queue_counts(sqs, url).await?;
    Ok(visible + in_flight)
}

/// A queue's approximate messages: visible, and in flight (received, not deleted).
pub async fn queue_counts(sqs: &aws_sdk_sqs::Client, url: &str) -> Result<(u64, u64), CliError> {
    let out = sqs
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
        .send()
        .await
        .map_err(|e| {
            CliError::Aws(format!(
                "GetQueueAttributes {url}: {}",
                aws_sdk_sqs::error::DisplayErrorContext(e)
            ))
        })?;
    let attrs = out.attributes();
    let get = |k: QueueAttributeName| -> u64 {
        attrs
            .and_then(|a| a.get(&k))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    Ok((
        get(QueueAttributeName::ApproximateNumberOfMessages),
        get(QueueAttributeName::ApproximateNumberOfMessagesNotVisible),
    ))
}

async fn scan_all(
    ddb: &aws_sdk_dynamodb::Client,
    table: &str,
) -> Result<Vec<crate::table::Item>, CliError> {
    let mut items = Vec::new();
    crate::table::scan_each(ddb, table, &[], true, |item| items.push(item.clone())).await?;
    Ok(items)
}

pub async fn scan_records(
    ddb: &aws_sdk_dynamodb::Client,
    table: &str,
) -> Result<HashMap<String, domain::TransactionRecord>, CliError> {
    let mut out = HashMap::new();
    for item in scan_all(ddb, table).await? {
        let rec = aws::item::record_from_flat(&aws::item::flat_from_dynamodb(&item))
            .map_err(|e| CliError::Aws(format!("undecodable item in `{table}`: {e}")))?;
        out.insert(rec.transaction_id.as_str().to_owned(), rec);
    }
    Ok(out)
}

pub async fn scan_audit(
    ddb: &aws_sdk_dynamodb::Client,
    table: &str,
) -> Result<HashMap<String, Vec<domain::audit::AuditEntry>>, CliError> {
    let mut out: HashMap<String, Vec<domain::audit::AuditEntry>> = HashMap::new();
    for item in scan_all(ddb, table).await? {
        let entries = aws::audit::entries_from_item(&item)
            .map_err(|e| CliError::Aws(format!("undecodable item in `{table}`: {e}")))?;
        for e in entries {
            out.entry(e.transaction_id.as_str().to_owned())
                .or_default()
                .push(e);
        }
    }
    Ok(out)
}

/// The whole demo: stack up, workload, report, stack down (also on Ctrl-C).
pub async fn run(args: &DemoArgs) -> Result<(Report, Option<Stack>), CliError> {
    let plan = DemoPlan::from_args(args)?;
    eprintln!(
        "demo: starting moto and the local stack `{}` ({} transactions, max {} attempts, cancel probability {}, seed {})",
        plan.stack.prefix,
        plan.transactions,
        plan.max_attempts,
        args.cancel_probability,
        args.seed
    );
    let stack = tokio::select! {
        s = Stack::start(plan.stack.clone()) => s?,
        _ = tokio::signal::ctrl_c() => return Err(CliError::Interrupted),
    };
    eprintln!("demo: local stack up at {}", stack.endpoint);
    if let (Some(c), Some(p)) = (&plan.chaos, &stack.proxy) {
        eprintln!(
            "demo: chaos profile {}, seed {}: the functions call AWS through the fault proxy at {}",
            c.profile, c.faults.seed, p.endpoint
        );
    }
    let result = tokio::select! {
        r = drive(&stack, &plan) => r,
        _ = tokio::signal::ctrl_c() => Err(CliError::Interrupted),
    };
    match result {
        Ok(report) if args.keep => Ok((report, Some(stack))),
        Ok(report) => {
            stack.shutdown().await;
            Ok((report, None))
        }
        Err(e) => {
            stack.shutdown().await;
            Err(e)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::demo_threshold;

    /// 20 s unless one retry per transaction takes the fleet longer to send.
    #[test]
    fn the_default_threshold_outlasts_the_retry_backlog() {
        assert_eq!(demo_threshold(200, 1, 10.0), 20);
        assert_eq!(demo_threshold(1000, 1, 10.0), 100);
        assert_eq!(demo_threshold(1001, 1, 10.0), 101);
        assert_eq!(
            demo_threshold(10_000, 2, 5.5),
            1000,
            "the bound floors the rate"
        );
        assert_eq!(
            demo_threshold(1000, 0, 0.5),
            1000,
            "at least one per second"
        );
    }
}
