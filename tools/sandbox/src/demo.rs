//! `retryctl demo`: the whole pipeline on this machine, a workload, a live progress
//! bar and the final report.

use crate::args::{DemoArgs, ServiceVia, StartVia};
use crate::error::Error;
use crate::local::external::{Outage, OutageMode};
use crate::local::stack::{AuditSnapshot, ExternalOptions, Stack, StackOptions};
use crate::report::{self, AuditWait, ChaosReport, Observations, Report};
use aws::config::vars;
use aws::dynamo::DynamoStore;
use aws_sdk_sqs::types::QueueAttributeName;
use domain::decide::Delivery;
use domain::exec::{ResolvePorts, StartPorts};
use domain::ports::{Clock, Records, SystemClock, Transitions};
use domain::{MaxAttempts, Payload, RetryPolicy, Status, TransactionId};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use runtime::Settings;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use testkit::faults::{FaultKind, Faults, FaultsError, PROFILES};
use testkit::oracle::ServiceDedup;

/// The validated demo settings.
#[derive(Debug, Clone)]
pub struct DemoPlan {
    pub transactions: u32,
    pub max_attempts: MaxAttempts,
    pub submit_rate: f64,
    /// The library operation, or the intake queue.
    pub start_via: StartVia,
    /// The run's deadline (see [`DeadlineWatch`]).
    pub deadline: Duration,
    /// `--deadline` was given: the deadline is a hard ceiling. Else it is the
    /// default, extended while transactions keep becoming terminal.
    pub deadline_is_hard: bool,
    pub stack: StackOptions,
    pub progress: bool,
    pub chaos: Option<Chaos>,
    /// The decision settings the workload starts its transactions with: the stack's
    /// shard count, reconcile threshold and answer timeout.
    pub settings: Settings,
    /// The external service's outage, and the breaker settings the run uses.
    pub outage: Option<Outage>,
    /// Whether the simulated service deduplicates: without, the report judges its
    /// runs.
    pub service_dedup: ServiceDedup,
}

/// The circuit breaker's settings in a run with `--outage`: sized to the demo's
/// timescale (a window of 10 s, a cool-down of 3 s doubling up to 15 s, the state
/// re-read every second), as function environment.
pub const OUTAGE_BREAKER_ENV: [(&str, &str); 8] = [
    (vars::BREAKER_WINDOW_SECONDS.name, "10"),
    (vars::BREAKER_MIN_CALLS.name, "10"),
    (vars::BREAKER_FAILURE_RATIO.name, "0.5"),
    (vars::BREAKER_DEADLINE_BURST.name, "10"),
    (vars::BREAKER_COOLDOWN_SECONDS.name, "3"),
    (vars::BREAKER_COOLDOWN_MAX_SECONDS.name, "15"),
    (vars::BREAKER_PROBES.name, "5"),
    (vars::BREAKER_REFRESH_SECONDS.name, "1"),
];

/// Parses `--outage START+DURATION` (seconds from the start of the run); the window
/// must end within `deadline`, the run's.
pub fn parse_outage(raw: &str, mode: OutageMode, deadline: Duration) -> Result<Outage, Error> {
    let bad = |why: String| Error::bad("--outage", raw, why);
    let (start, duration) = raw
        .split_once('+')
        .ok_or_else(|| bad("expected START+DURATION in seconds, e.g. 20+60".into()))?;
    let secs = |what: &str, v: &str| -> Result<f64, Error> {
        match v.trim().parse::<f64>() {
            Ok(x) if x.is_finite() && x >= 0.0 => Ok(x),
            _ => Err(bad(format!("{what} `{v}` is not a number of seconds >= 0"))),
        }
    };
    let (start, duration) = (secs("START", start)?, secs("DURATION", duration)?);
    if duration <= 0.0 {
        return Err(bad("DURATION must be > 0".into()));
    }
    if start + duration > deadline.as_secs_f64() {
        return Err(bad(format!(
            "the outage ends at {} s, after the run's deadline ({} s, --deadline)",
            start + duration,
            deadline.as_secs()
        )));
    }
    Ok(Outage {
        start: Duration::from_secs_f64(start),
        duration: Duration::from_secs_f64(duration),
        mode,
    })
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
    pub fn parse(profile: &str, seed: u64) -> Result<Self, Error> {
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
                    return Err(Error::bad(
                        "--chaos",
                        profile,
                        format!(
                            "not a profile ({}) nor a .json or .toml file",
                            PROFILES.join(", ")
                        ),
                    ))
                }
            };
        let text = std::fs::read_to_string(path).map_err(|e| Error::bad("--chaos", profile, e))?;
        let faults = read(&text, seed).map_err(|e| {
            Error::bad(
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

fn probability(name: &'static str, v: f64) -> Result<f64, Error> {
    if v.is_finite() && (0.0..=1.0).contains(&v) {
        Ok(v)
    } else {
        Err(Error::bad(name, v.to_string(), "must be between 0 and 1"))
    }
}

impl DemoPlan {
    /// Validates the flags; every error names the flag and the value.
    pub fn from_args(a: &DemoArgs) -> Result<Self, Error> {
        if a.transactions == 0 {
            return Err(Error::bad("--transactions", "0", "must be at least 1"));
        }
        let max_attempts = MaxAttempts::new(a.max_attempts)
            .map_err(|e| Error::bad("--max-attempts", a.max_attempts.to_string(), e))?;
        let cancel = probability("--cancel-probability", a.cancel_probability)?;
        let dup = probability("--duplicate-responses", a.duplicate_responses)?;
        let silent = probability("--silent-probability", a.silent_probability)?;
        if let Some(d @ 0..60) = a.transaction_deadline {
            return Err(Error::bad(
                "--transaction-deadline",
                d.to_string(),
                "must be at least 60 seconds (TRANSACTION_DEADLINE_SECONDS)",
            ));
        }
        let answer_timeout = match a.answer_timeout {
            Some(0) => {
                return Err(Error::bad(
                    "--answer-timeout",
                    "0",
                    "must be at least 1 second",
                ))
            }
            Some(s) => s,
            None if silent > 0.0 => DEMO_ANSWER_TIMEOUT_SECONDS,
            None if a.outage.is_some() && a.outage_mode == OutageMode::Silent => {
                DEMO_ANSWER_TIMEOUT_SECONDS
            }
            None => domain::defaults::ANSWER_TIMEOUT.as_secs(),
        };
        if a.latency_min_ms > a.latency_max_ms {
            return Err(Error::bad(
                "--latency-min-ms",
                a.latency_min_ms.to_string(),
                format!("must not exceed --latency-max-ms ({})", a.latency_max_ms),
            ));
        }
        let secs = |name: &'static str, v: f64| {
            if v.is_finite() && v > 0.0 {
                Ok(Duration::from_secs_f64(v))
            } else {
                Err(Error::bad(
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
            Error::bad(name, value, e)
        })?;
        if !(a.max_requests_per_second.is_finite() && a.max_requests_per_second > 0.0) {
            return Err(Error::bad(
                "--max-requests-per-second",
                a.max_requests_per_second.to_string(),
                "must be > 0",
            ));
        }
        if !(a.submit_rate.is_finite() && a.submit_rate > 0.0) {
            return Err(Error::bad(
                "--submit-rate",
                a.submit_rate.to_string(),
                "must be > 0",
            ));
        }
        for (name, v) in [
            ("--reconcile-every", a.reconcile_every),
            ("--reconcile-threshold", a.reconcile_threshold.unwrap_or(1)),
            ("--deadline", a.deadline.unwrap_or(1)),
        ] {
            if v == 0 {
                return Err(Error::bad(name, "0", "must be at least 1 second"));
            }
        }
        if a.visibility_timeout < 1 {
            return Err(Error::bad(
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
        if let Some(e) = a.moto_endpoint.as_deref() {
            if !(e.starts_with("http://") || e.starts_with("https://")) {
                let why = "must be an http:// or https:// URL of a running moto server";
                return Err(Error::bad("--moto-endpoint", e, why));
            }
        }
        stack.moto_endpoint = a.moto_endpoint.clone();
        // One moto server per service, unless the stack is kept for the CLI, which
        // `--keep` points at one endpoint.
        stack.split_services = !a.keep;
        // The environments that publish requests: the retry handler's, or in outbox
        // delivery the publisher's (every request, first attempts included).
        let publishers = match a.delivery {
            Delivery::Direct => stack.retry_esm.max_concurrency,
            Delivery::Outbox => crate::local::stack::template::PUBLISHER_ENVIRONMENTS,
        };
        stack.delivery = a.delivery;
        let reconcile_threshold = a.reconcile_threshold.unwrap_or_else(|| {
            demo_threshold(a.transactions, publishers, a.max_requests_per_second)
        });
        stack.env = vec![
            (vars::BACKOFF_BASE_SECONDS.name, a.backoff_base.to_string()),
            (vars::BACKOFF_FACTOR.name, a.backoff_factor.to_string()),
            (vars::BACKOFF_CAP_SECONDS.name, a.backoff_cap.to_string()),
            (vars::BACKOFF_JITTER.name, a.jitter.to_string()),
            (
                vars::RECONCILE_THRESHOLD_SECONDS.name,
                reconcile_threshold.to_string(),
            ),
            (
                vars::MAX_REQUESTS_PER_SECOND.name,
                a.max_requests_per_second.to_string(),
            ),
            (
                vars::ANSWER_TIMEOUT_SECONDS.name,
                answer_timeout.to_string(),
            ),
        ];
        if let Some(d) = a.transaction_deadline {
            stack
                .env
                .push((vars::TRANSACTION_DEADLINE_SECONDS.name, d.to_string()));
        }
        let deadline = Duration::from_secs(a.deadline.unwrap_or_else(|| {
            demo_deadline(
                a.transactions,
                a.submit_rate,
                match a.delivery {
                    Delivery::Direct => template_retry_concurrency(),
                    Delivery::Outbox => publishers,
                },
                a.max_requests_per_second,
            )
        }));
        let outage = match &a.outage {
            None => None,
            Some(raw) => {
                // The default deadline also covers the outage and the technical
                // back-offs after it (the ERROR answers' re-sends wait 60 s, then 120 s).
                let deadline = match a.deadline {
                    Some(_) => deadline,
                    None => deadline + Duration::from_secs(OUTAGE_EXTRA_SECONDS),
                };
                Some(parse_outage(raw, a.outage_mode, deadline)?)
            }
        };
        if outage.is_some() {
            stack.env.extend(
                OUTAGE_BREAKER_ENV
                    .iter()
                    .map(|(k, v)| (*k, (*v).to_owned())),
            );
        }
        let deadline = match (&outage, a.deadline) {
            (Some(o), None) => deadline.max(o.end()) + Duration::from_secs(OUTAGE_EXTRA_SECONDS),
            _ => deadline,
        };
        // Through the HTTP bridge, a lost answer and a call held past the bridge's
        // timeout come back as ERROR: the same key is sent again after the technical
        // backoff, which grows with the transaction's re-sends; the default deadline
        // also covers those of one unlucky transaction.
        let technical_resends = a.service.via == ServiceVia::Http && (dup > 0.0 || silent > 0.0);
        let deadline = match a.deadline {
            None if technical_resends => deadline + technical_resends_extra(),
            _ => deadline,
        };
        stack.service = a.service.via;
        stack.visibility_timeout = Some(a.visibility_timeout);
        stack.reconcile_every = Duration::from_secs(a.reconcile_every);
        stack.external = ExternalOptions {
            cancel_probability: cancel,
            latency_min: Duration::from_millis(a.latency_min_ms),
            latency_max: Duration::from_millis(a.latency_max_ms),
            duplicate_response_probability: dup,
            silent_probability: silent,
            seed: a.seed,
            outage,
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
            start_via: a.start_via,
            deadline,
            deadline_is_hard: a.deadline.is_some(),
            stack,
            progress: !a.no_progress,
            chaos,
            settings: Settings {
                reconcile_threshold: Duration::from_secs(reconcile_threshold),
                answer_timeout: Duration::from_secs(answer_timeout),
                // The workload's starts decide as the stack's functions do.
                delivery: a.delivery,
                ..Settings::default()
            },
            outage,
            service_dedup: a.service.dedup,
        })
    }
}

/// Sends the intake message that starts `id` (schema version 1), as a service in any
/// language would: one SendMessage, repeated on failure (a repeat is harmless).
async fn send_start(
    (sqs, url): &(aws_sdk_sqs::Client, String),
    id: TransactionId,
    payload: Payload,
    max_attempts: MaxAttempts,
) -> Result<(), Error> {
    let body = domain::intake::StartMessage {
        transaction_id: id.clone(),
        payload,
        max_attempts: Some(max_attempts),
        correlation_id: None,
    }
    .to_json();
    let mut tries = 0;
    loop {
        match sqs
            .send_message()
            .queue_url(url)
            .message_body(&body)
            .send()
            .await
        {
            Ok(_) => return Ok(()),
            Err(_) if tries < 5 => tries += 1,
            Err(e) => {
                let what = format!("SendMessage of the start of {id}");
                return Err(Error::Aws(aws::errors::sdk_error(what)(e)));
            }
        }
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

/// A bar on stderr counting `total` transactions as they become `counted` (hidden
/// unless `shown`), ticking by itself; the demo's and `retryctl loadtest`'s.
pub fn progress_bar(shown: bool, total: u32, counted: &str) -> ProgressBar {
    let bar = if shown {
        ProgressBar::with_draw_target(Some(u64::from(total)), ProgressDrawTarget::stderr())
    } else {
        ProgressBar::hidden()
    };
    let template = format!("{{elapsed:>4}} [{{bar:30}}] {{pos}}/{{len}} {counted}  {{msg}}");
    bar.set_style(
        ProgressStyle::with_template(&template)
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    bar.enable_steady_tick(Duration::from_millis(200));
    bar
}

/// Starts the workload, follows it to the end and gathers what every witness saw.
pub async fn drive(stack: &Stack, plan: &DemoPlan) -> Result<Report, Error> {
    let started = Instant::now();
    // The outage window counts from here.
    stack
        .external
        .start_run(tokio::time::Instant::from_std(started));
    let ddb = aws_sdk_dynamodb::Client::new(&stack.sdk);
    let sqs = aws_sdk_sqs::Client::new(&stack.sdk);
    let names = stack.names().clone();
    let bar = progress_bar(plan.progress, plan.transactions, "terminal");

    // The workload: start every transaction through the library operation, or with
    // one intake message each on the intake queue, as a service would (through the
    // fault proxy in a chaos run).
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
    let intake = (clients.sqs.clone(), stack.provisioned.intake.url.clone());
    let mut submitted = Vec::with_capacity(plan.transactions as usize);
    let interval = Duration::from_secs_f64(1.0 / plan.submit_rate);
    let mut next_at = Instant::now();
    let mut pending = futures::stream::FuturesUnordered::new();
    use futures::StreamExt;
    for n in 1..=plan.transactions {
        let id_text = transaction_id(n);
        let id = TransactionId::parse(&id_text)
            .map_err(|e| Error::bad("transaction id", id_text.clone(), e))?;
        let payload = Payload::from_json(&format!(
            r#"{{"order":"{id_text}","amount_cents":{},"currency":"EUR"}}"#,
            1_000 + n
        ))
        .map_err(|e| Error::bad("payload", id_text.clone(), e))?;
        submitted.push(id_text);
        let ctx = settings.context(SystemClock.now());
        let max = plan.max_attempts;
        let answer_timeout = settings.answer_timeout;
        let ports = &ports;
        let (via, intake) = (plan.start_via, &intake);
        pending.push(async move {
            if via == StartVia::Intake {
                return send_start(intake, id, payload, max).await;
            }
            // Starting is idempotent: repeat on a retryable failure.
            let mut tries = 0;
            loop {
                match runtime::ops::start_transaction(
                    ports,
                    id.clone(),
                    payload.clone(),
                    max,
                    answer_timeout,
                    &ctx,
                )
                .await
                {
                    Ok(_) => return Ok(()),
                    Err(e) if e.is_retryable() && tries < 5 => tries += 1,
                    Err(e) => return Err(Error::Aws(format!("start {id}: {e}"))),
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

    // Follow the statuses until every transaction is terminal or the run is declared
    // stuck (its deadline passed; a default one only once nothing progressed).
    let mut watch = DeadlineWatch::new(started, plan.deadline, plan.deadline_is_hard, DEMO_STALL);
    loop {
        if !to_resolve.is_empty() {
            resolved += operator
                .resolve_waiting(&reader, &mut to_resolve, &settings)
                .await;
        }
        let scan_started = Instant::now();
        let by_status = status_counts(&ddb, &names.transactions_table).await?;
        let poll = status_poll(scan_started.elapsed());
        let terminal = by_status.get(&Status::Succeeded).copied().unwrap_or(0)
            + by_status.get(&Status::Failed).copied().unwrap_or(0);
        bar.set_position(terminal);
        bar.set_message(status_line(&by_status));
        if terminal >= u64::from(plan.transactions) || watch.expired(terminal, Instant::now()) {
            break;
        }
        tokio::time::sleep(poll).await;
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
    // The audit trail is eventually consistent (stream → writer): wait while the
    // writer makes progress, until a pass over the stream that began after the state
    // was read finds nothing new (every change of that state is audited), or until it
    // has written nothing for AUDIT_STALL.
    let mut watch = AuditWatch::new(stack.audit.snapshot(), Instant::now(), AUDIT_STALL);
    let records = scan_records(&ddb, &names.transactions_table).await?;
    let audit_wait_started = Instant::now();
    let audit_wait = loop {
        if let Some(end) = watch.observe(stack.audit.snapshot(), Instant::now()) {
            break end;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let audit_waited = audit_wait_started.elapsed();
    let audit = scan_audit(&ddb, &names.audit_table).await?;
    let mut dlq = BTreeMap::new();
    for (name, q) in [
        ("request", &stack.provisioned.request_dlq),
        ("response", &stack.provisioned.response_dlq),
        ("retry", &stack.provisioned.retry_dlq),
        ("scheduler", &stack.provisioned.scheduler_dlq),
        ("audit", &stack.provisioned.audit_dlq),
        ("intake", &stack.provisioned.intake_dlq),
    ] {
        dlq.insert(name.to_owned(), queue_depth(&sqs, &q.url).await?);
    }
    let mut queued = BTreeMap::new();
    for (name, url) in [
        ("request", &stack.provisioned.request.url),
        ("response", &stack.provisioned.response.url),
        ("retry", &stack.provisioned.retry.url),
    ] {
        queued.insert(name.to_owned(), queue_depth(&sqs, url).await?);
    }
    let sched = aws_sdk_scheduler::Client::new(&stack.sdk);
    let schedules_left = sched
        .list_schedules()
        .group_name(&names.schedule_group)
        .send()
        .await
        .map(|o| o.schedules().len() as u64)
        .map_err(aws::errors::sdk_error("ListSchedules"))
        .map_err(Error::Aws)?;

    let mut esms = vec![
        (response_handler::FUNCTION, &stack.response_esm),
        (retry_handler::FUNCTION, &stack.retry_esm),
        (starter::FUNCTION, &stack.intake_esm),
    ];
    if let Some(esm) = &stack.http_esm {
        esms.push((http_bridge::FUNCTION, esm));
    }
    // Each function's own metrics, and what its event source mapping counted.
    let counted = |name: &str, counts: &[(&str, u64)]| {
        let mut m = stack
            .metrics
            .get(name)
            .map(|m| m.snapshot())
            .unwrap_or_default();
        m.extend(counts.iter().map(|(k, n)| ((*k).to_owned(), *n)));
        (name.to_owned(), m)
    };
    let mut functions: BTreeMap<_, _> = esms
        .into_iter()
        .map(|(name, esm)| {
            let counts = [
                ("Invocations", esm.get(&esm.invocations)),
                ("PeakConcurrency", esm.get(&esm.peak_concurrency)),
                ("BatchItemFailures", esm.get(&esm.reported_failures)),
                ("FailedInvocations", esm.get(&esm.failed_invocations)),
            ];
            counted(name, &counts)
        })
        .collect();
    functions.extend(stack.publisher_esm.as_ref().map(|esm| {
        let counts = [
            ("Invocations", esm.get(&esm.invocations)),
            ("Records", esm.get(&esm.records)),
            ("FilteredOut", esm.get(&esm.filtered_out)),
            ("BatchItemFailures", esm.get(&esm.reported_failures)),
            ("FailedInvocations", esm.get(&esm.failed_invocations)),
            ("Killed", esm.get(&esm.killed)),
            ("SentToOnFailure", esm.get(&esm.discarded)),
        ];
        counted(publisher::FUNCTION, &counts)
    }));
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
        service_dedup: plan.service_dedup,
        delivery: stack.delivery,
        runs: stack.external.runs(),
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
        audit_wait: Some(audit_wait),
        audit_waited,
        deliveries: stack.scheduler.deliveries(),
        queued,
        seed: plan.stack.external.seed,
        breaker: match &plan.outage {
            Some(o) => Some(breaker_observed(stack, plan, o, started).await?),
            None => None,
        },
    };
    Ok(report::build(&obs))
}

/// The breaker at the end of an outage run: its change log, its state, and the
/// requests published after it closed.
async fn breaker_observed(
    stack: &Stack,
    plan: &DemoPlan,
    outage: &Outage,
    started: Instant,
) -> Result<report::BreakerObserved, Error> {
    let b = aws::breaker::DynamoBreaker::new(
        aws_sdk_dynamodb::Client::new(&stack.sdk),
        &stack.names().breaker_table,
        aws::breaker::SERVICE,
        domain::breaker::BreakerSettings::default(),
        1,
    );
    let aws = |e: domain::ports::PortError| Error::Aws(format!("breaker: {e}"));
    use domain::ports::BreakerReads;
    let state = b
        .load(SystemClock.now(), false)
        .await
        .map_err(aws)?
        .breaker
        .state
        .name()
        .to_owned();
    let mut changes = b.history(1000).await.map_err(aws)?;
    changes.reverse();
    let started_ms = SystemClock.now().millis() - started.elapsed().as_millis() as i64;
    let publish_ms = stack
        .publish_times
        .lock()
        .map(|t| t.clone())
        .unwrap_or_default();
    let held = stack.held.lock().map(|h| h.clone()).unwrap_or_default();
    let e = &stack.external;
    Ok(report::BreakerObserved {
        outage: *outage,
        run_started_ms: started_ms,
        changes,
        state,
        publish_ms,
        held,
        cancel_probability: plan.stack.external.cancel_probability,
        outage_errors: e.get(&e.outage_errors),
        outage_silenced: e.get(&e.outage_silenced),
        settings: OUTAGE_BREAKER_ENV
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect(),
    })
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

/// How long the audit writer may write nothing, its stream not drained, before the
/// demo stops waiting for it.
pub const AUDIT_STALL: Duration = Duration::from_secs(30);

/// The demo's final wait for the audit trail: over as soon as a pass over the
/// stream that began after the state was read found nothing new, or once the writer
/// has written nothing for the stall period while the stream is not drained. No
/// fixed limit: a writer that keeps writing is waited for.
#[derive(Debug, Clone)]
pub struct AuditWatch {
    /// The pass under way when the state was read: a later pass began after it.
    pass_at_read: u64,
    rows: u64,
    last_progress: Instant,
    stall: Duration,
}

impl AuditWatch {
    /// Takes `at_read`, the audit stream's counters just before the state is read.
    pub fn new(at_read: AuditSnapshot, now: Instant, stall: Duration) -> Self {
        Self {
            pass_at_read: at_read.passes,
            rows: at_read.rows_written,
            last_progress: now,
            stall,
        }
    }

    /// `None` while waiting is worth it; else how the wait ended.
    pub fn observe(&mut self, s: AuditSnapshot, now: Instant) -> Option<AuditWait> {
        if s.last_empty_pass > self.pass_at_read {
            return Some(AuditWait::Drained {
                rows_written: s.rows_written,
                failed_passes: s.errors,
            });
        }
        if s.rows_written > self.rows {
            self.rows = s.rows_written;
            self.last_progress = now;
        }
        let idle = now.saturating_duration_since(self.last_progress);
        (idle >= self.stall).then_some(AuditWait::Stalled {
            idle_seconds: idle.as_secs(),
            rows_written: s.rows_written,
            failed_passes: s.errors,
        })
    }
}

/// The pause after a status scan that took `scan`. The scan reads the whole state
/// table from the server the functions write to, and a scan in progress slows every
/// other call to it (on moto, a key read's p50 went from 0.4–0.7 s to 1.4 s while
/// scans of 3,500 items ran back to back): about a tenth of the time at most, at
/// least 0.5 s and at most 30 s between two looks.
pub fn status_poll(scan: Duration) -> Duration {
    (scan * 9).clamp(Duration::from_millis(500), Duration::from_secs(30))
}

/// How long a run past its default deadline may see no transaction become terminal
/// before the demo declares the rest stuck.
pub const DEMO_STALL: Duration = Duration::from_secs(120);

/// When the demo stops waiting for terminal states. An explicit `--deadline` is a
/// hard ceiling. The default deadline is a floor instead: past it, the run goes on
/// while transactions keep becoming terminal, and ends (the rest stuck) once none
/// has for the stall period.
#[derive(Debug, Clone)]
pub struct DeadlineWatch {
    deadline: Instant,
    hard: bool,
    stall: Duration,
    terminal: u64,
    last_progress: Instant,
}

impl DeadlineWatch {
    pub fn new(started: Instant, deadline: Duration, hard: bool, stall: Duration) -> Self {
        Self {
            deadline: started + deadline,
            hard,
            stall,
            terminal: 0,
            last_progress: started,
        }
    }

    /// Takes the number of terminal transactions read at `now`: `true` once the run
    /// is to be declared stuck.
    pub fn expired(&mut self, terminal: u64, now: Instant) -> bool {
        if terminal > self.terminal {
            self.terminal = terminal;
            self.last_progress = now;
        }
        if now <= self.deadline {
            return false;
        }
        self.hard || now.saturating_duration_since(self.last_progress) >= self.stall
    }
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
        .flat_map(|op| FaultKind::ALL.iter().map(|&k| (*op, k)))
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

/// What the default deadline of a run with `--outage` adds past the outage's end: the
/// technical back-offs of the ERROR answers (60 s, then 120 s) and a margin.
pub const OUTAGE_EXTRA_SECONDS: u64 = 300;

/// The re-sends of one transaction the default deadline of a run through the HTTP
/// bridge with lost answers or silence covers: with 5 % of the answers lost, a
/// transaction of four attempts loses five with a probability near 1 in 100,000.
pub const TECHNICAL_RESENDS_COVERED: u32 = 4;

/// What that default deadline adds: the longest technical waits of that many re-sends
/// (the technical backoff's bounds: 60 s doubling, +10 %), and a minute.
pub fn technical_resends_extra() -> Duration {
    let policy = RetryPolicy::technical_default();
    (1..=TECHNICAL_RESENDS_COVERED)
        .filter_map(|k| domain::Attempt::new(k).ok())
        .map(|k| policy.bounds(k).1)
        .sum::<Duration>()
        + Duration::from_secs(60)
}

pub fn demo_threshold(transactions: u32, max_concurrency: usize, max_rps: f64) -> u64 {
    fleet_drain_seconds(transactions, max_concurrency, max_rps).max(20)
}

/// Seconds the fleet needs to send one retry per transaction at its rate bound.
fn fleet_drain_seconds(transactions: u32, max_concurrency: usize, max_rps: f64) -> u64 {
    let fleet = (max_concurrency.max(1) as f64) * max_rps.floor().max(1.0);
    (f64::from(transactions) / fleet).ceil() as u64
}

fn template_retry_concurrency() -> usize {
    crate::local::stack::template::RETRY_MAX_CONCURRENCY
}

/// The demo's default deadline: 240 s, or — when longer — the time the workload
/// takes to submit, plus twice the time the fleet needs to send one retry per
/// transaction at its rate bound, plus a minute. A ceiling for a run that stopped
/// moving, not a guess of its length: 10,000 transactions at the template's 10/s
/// get 2,160 s.
pub fn demo_deadline(
    transactions: u32,
    submit_rate: f64,
    max_concurrency: usize,
    max_rps: f64,
) -> u64 {
    let submit = (f64::from(transactions) / submit_rate.max(f64::MIN_POSITIVE)).ceil() as u64;
    let drain = fleet_drain_seconds(transactions, max_concurrency, max_rps);
    submit
        .saturating_add(drain.saturating_mul(2))
        .saturating_add(60)
        .max(240)
}

pub async fn queue_depth(sqs: &aws_sdk_sqs::Client, url: &str) -> Result<u64, Error> {
    let (visible, in_flight) = queue_counts(sqs, url).await?;
    Ok(visible + in_flight)
}

/// A queue's approximate messages: visible, and in flight (received, not deleted).
pub async fn queue_counts(sqs: &aws_sdk_sqs::Client, url: &str) -> Result<(u64, u64), Error> {
    let out = sqs
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
        .send()
        .await
        .map_err(aws::errors::sdk_error(format!("GetQueueAttributes {url}")))
        .map_err(Error::Aws)?;
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

/// Transactions by status, for the progress bar: a Scan projecting `status` only.
async fn status_counts(
    ddb: &aws_sdk_dynamodb::Client,
    table: &str,
) -> Result<BTreeMap<Status, u64>, Error> {
    let mut by_status = BTreeMap::new();
    aws::scan::scan_each(ddb, table, &["status"], false, |item| {
        let status = item.get("status").and_then(|v| v.as_s().ok());
        if let Some(s) = status.and_then(|s| Status::parse(s)) {
            *by_status.entry(s).or_insert(0) += 1;
        }
    })
    .await
    .map_err(|e| Error::call(table, e))?;
    Ok(by_status)
}

async fn scan_all(
    ddb: &aws_sdk_dynamodb::Client,
    table: &str,
) -> Result<Vec<aws::scan::Item>, Error> {
    let mut items = Vec::new();
    aws::scan::scan_each(ddb, table, &[], true, |item| items.push(item.clone()))
        .await
        .map_err(|e| Error::call(table, e))?;
    Ok(items)
}

pub async fn scan_records(
    ddb: &aws_sdk_dynamodb::Client,
    table: &str,
) -> Result<HashMap<String, domain::TransactionRecord>, Error> {
    let mut out = HashMap::new();
    for item in scan_all(ddb, table).await? {
        let rec = aws::item::record_from_flat(&aws::item::flat_from_dynamodb(&item))
            .map_err(|e| Error::Aws(format!("undecodable item in `{table}`: {e}")))?;
        out.insert(rec.transaction_id.as_str().to_owned(), rec);
    }
    Ok(out)
}

pub async fn scan_audit(
    ddb: &aws_sdk_dynamodb::Client,
    table: &str,
) -> Result<HashMap<String, Vec<domain::audit::AuditEntry>>, Error> {
    let mut out: HashMap<String, Vec<domain::audit::AuditEntry>> = HashMap::new();
    for item in scan_all(ddb, table).await? {
        let entries = aws::audit::entries_from_item(&item)
            .map_err(|e| Error::Aws(format!("undecodable item in `{table}`: {e}")))?;
        for e in entries {
            out.entry(e.transaction_id.as_str().to_owned())
                .or_default()
                .push(e);
        }
    }
    Ok(out)
}

/// The whole demo: stack up, workload, report, stack down (also on Ctrl-C).
pub async fn run(args: &DemoArgs) -> Result<(Report, Option<Stack>), Error> {
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
        _ = tokio::signal::ctrl_c() => return Err(Error::Interrupted),
    };
    eprintln!("demo: local stack up at {}", stack.endpoints);
    if let Some(e) = &stack.http_endpoint {
        eprintln!("demo: the external service is an HTTP API at {e}, called by the HTTP bridge on the request queue");
    }
    if let Some(o) = &plan.outage {
        eprintln!(
            "demo: outage of the external service from {:.0} s to {:.0} s of the run ({}); the breaker runs with {}",
            o.start.as_secs_f64(),
            o.end().as_secs_f64(),
            match o.mode {
                OutageMode::Error => "every request answered ERROR HTTP_503",
                OutageMode::Silent => "every request taken and never answered",
            },
            OUTAGE_BREAKER_ENV
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(" ")
        );
    }
    if let (Some(c), Some(p)) = (&plan.chaos, &stack.proxy) {
        eprintln!(
            "demo: chaos profile {}, seed {}: the functions call AWS through the fault proxy at {}",
            c.profile, c.faults.seed, p.endpoint
        );
    }
    let result = tokio::select! {
        r = drive(&stack, &plan) => r,
        _ = tokio::signal::ctrl_c() => Err(Error::Interrupted),
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
    use super::*;

    fn snap(passes: u64, last_empty_pass: u64, rows_written: u64) -> AuditSnapshot {
        AuditSnapshot {
            passes,
            last_empty_pass,
            rows_written,
            errors: 0,
        }
    }

    /// Drained only by an empty pass begun after the state was read.
    #[test]
    fn the_audit_wait_ends_at_an_empty_pass_begun_after_the_read() {
        let t0 = Instant::now();
        let stall = Duration::from_secs(30);
        let mut w = AuditWatch::new(snap(5, 4, 100), t0, stall);
        assert_eq!(w.observe(snap(5, 5, 100), t0), None, "pass 5 began before");
        assert_eq!(
            w.observe(snap(6, 6, 100), t0 + Duration::from_secs(1)),
            Some(AuditWait::Drained {
                rows_written: 100,
                failed_passes: 0
            })
        );
    }

    /// While rows keep arriving the wait goes on, past any fixed limit; it ends
    /// once nothing was written for the stall period.
    #[test]
    fn the_audit_wait_lasts_while_the_writer_makes_progress() {
        let t0 = Instant::now();
        let stall = Duration::from_secs(30);
        let mut w = AuditWatch::new(snap(1, 0, 0), t0, stall);
        for minute in 1..=10u64 {
            let now = t0 + Duration::from_secs(20 * minute);
            assert_eq!(w.observe(snap(1 + minute, 0, minute * 100), now), None);
        }
        let last = t0 + Duration::from_secs(200);
        assert_eq!(
            w.observe(snap(20, 0, 1000), last + Duration::from_secs(29)),
            None
        );
        assert_eq!(
            w.observe(snap(21, 0, 1000), last + Duration::from_secs(30)),
            Some(AuditWait::Stalled {
                idle_seconds: 30,
                rows_written: 1000,
                failed_passes: 0
            })
        );
    }

    /// A watch of `deadline` s (`hard` or not, a stall of 120 s) asked in turn, with the
    /// terminal count and the second it is asked at, expects each answer.
    fn watch(deadline: u64, hard: bool, asked: &[(u64, u64, bool)]) {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let mut w = DeadlineWatch::new(t0, s(deadline), hard, s(120));
        for &(terminal, at, expired) in asked {
            assert_eq!(
                w.expired(terminal, t0 + s(at)),
                expired,
                "{terminal} at {at} s"
            );
        }
    }

    /// 240 s unless submitting and twice the fleet's drain time take longer.
    #[test]
    fn a_default_deadline_extends_while_transactions_become_terminal() {
        watch(
            100,
            false,
            &[
                (10, 50, false),
                // Past the deadline, progress 60 s ago: still waiting.
                (10, 110, false),
                // New terminal transactions keep it going well past the deadline.
                (20, 160, false),
                (30, 270, false),
                (30, 389, false),
                // Nothing for the stall period: stuck.
                (30, 390, true),
            ],
        );
        // Before the deadline a stall does not end the run.
        watch(1000, false, &[(0, 500, false), (0, 1001, true)]);
    }

    #[test]
    fn the_status_scan_takes_a_tenth_of_the_time_at_most() {
        let ms = Duration::from_millis;
        assert_eq!(status_poll(ms(20)), ms(500));
        assert_eq!(status_poll(ms(1000)), ms(9000));
        assert_eq!(status_poll(ms(5000)), ms(30_000));
    }

    #[test]
    fn an_explicit_deadline_is_a_hard_ceiling() {
        watch(100, true, &[(10, 100, false), (20, 101, true)]);
    }

    fn plan(flags: &[&str]) -> DemoPlan {
        #[derive(clap::Parser)]
        struct Flags {
            #[command(flatten)]
            demo: DemoArgs,
        }
        let argv = std::iter::once("demo").chain(flags.iter().copied());
        let flags = <Flags as clap::Parser>::try_parse_from(argv).unwrap();
        DemoPlan::from_args(&flags.demo).unwrap()
    }

    /// Through the HTTP bridge a lost answer is an ERROR whose re-send waits the
    /// technical backoff: the default deadline covers it; an explicit one is kept.
    #[test]
    fn lost_http_answers_extend_the_default_deadline() {
        let base = plan(&["--duplicate-responses", "0.05"]).deadline;
        let extra = technical_resends_extra();
        // 60 + 120 + 240 + 480 s, each +10 %, and a minute.
        assert_eq!(extra, Duration::from_secs(1050));
        let http = |f: &[&str]| plan(&[&["--service", "http"], f].concat()).deadline;
        assert_eq!(http(&["--duplicate-responses", "0.05"]), base + extra);
        assert_eq!(
            http(&["--duplicate-responses", "0", "--silent-probability", "0.1"]),
            base + extra
        );
        assert_eq!(http(&["--duplicate-responses", "0"]), base);
        assert_eq!(
            http(&["--duplicate-responses", "0.05", "--deadline", "90"]),
            Duration::from_secs(90)
        );
    }

    #[test]
    fn the_default_deadline_grows_with_the_workload() {
        assert_eq!(demo_deadline(200, 100.0, 2, 5.0), 240);
        assert_eq!(demo_deadline(1000, 100.0, 2, 5.0), 270);
        assert_eq!(demo_deadline(10_000, 100.0, 2, 5.0), 2160);
        assert_eq!(demo_deadline(10_000, 100.0, 4, 5.0), 1160);
    }

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
