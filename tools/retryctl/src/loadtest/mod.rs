//! `retryctl loadtest`: an adopter measures a staging stack of their own account,
//! safely. Only a stack whose requests the staging harness answers is loaded
//! ([`plan::staging`]); the run is bounded ([`plan::Plan`]: how many, how fast, how
//! long). Each transaction starts as `retryctl submit` starts one, with the harness's
//! script in its payload (CANCELLED K times, then SUCCESS), under an id `LOAD-<run>-…`;
//! the ones in flight are read in batches until they end or the ceiling comes; then the
//! report ([`report::Report`]): starts/s, time to terminal, statuses, retries, what
//! the client saw (SDK retries, failed starts, unprocessed reads), DLQ depths and
//! schedules left, and the retry rate next to the stack's sustained rate
//! (`docs/capacity.md`). See `docs/operations.md#loadtest-measuring-a-staging-stack`.

pub mod meter;
pub mod plan;
pub mod report;

pub use plan::{
    Plan, DEFAULT_DURATION_SECONDS, DEFAULT_RATE, DEFAULT_TRANSACTIONS, MAX_TRANSACTIONS,
};

use crate::error::{AwsFailure, CliError};
use crate::verify::flow::{expected, Case};
use crate::verify::outputs::StackOutputs;
use crate::verify::resources::{queue_depth, DLQS};
use aws::dynamo::DynamoStore;
use aws::item::{attr, flat_from_dynamodb, record_from_flat};
use aws::sqs::SqsRequestPublisher;
use aws_sdk_dynamodb::types::{AttributeValue, KeysAndAttributes};
use domain::exec::{ExecError, StartPorts};
use domain::ports::{Clock, SystemClock};
use domain::{Attempt, Payload, ScheduleName, Status, TransactionRecord};
use meter::ClientMeter;
use report::{Capacity, DlqDepth, Report, Spread, StartFailure, Unexpected, Unfinished};
use runtime::ops::OpError;
use serde_json::json;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, Semaphore};
use tokio::task::JoinSet;

/// Starts in progress at once, whatever the rate (each is one TransactWriteItems and
/// one SendMessage).
const STARTS_AT_ONCE: usize = 64;
/// Keys per BatchGetItem (DynamoDB's most).
const BATCH: usize = 100;
/// BatchGetItem calls in progress at once.
const READS_AT_ONCE: usize = 8;

/// The run's name when `--run` is not given: the UTC time, `YYYYMMDDhhmmss`.
pub fn default_run_name() -> String {
    let t = time::OffsetDateTime::now_utc();
    format!(
        "{:04}{:02}{:02}{:02}{:02}{:02}",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second()
    )
}

/// One transaction of the run, and what was last seen of it.
struct Slot {
    id: domain::TransactionId,
    /// The status and attempt its script ends at.
    expected: (Status, u32),
    started: bool,
    failure: Option<StartFailure>,
    last: Option<TransactionRecord>,
    /// Read at least once after its start, and not found.
    not_found: bool,
}

impl Slot {
    fn ended(&self) -> bool {
        self.last.as_ref().is_some_and(|r| r.status.is_terminal())
    }

    fn waiting(&self) -> bool {
        self.started && !self.ended()
    }
}

impl StartResult {
    /// Marks the slot started, or failed to start.
    fn note(self, slots: &mut [Slot]) {
        let s = &mut slots[self.index];
        match self.error {
            None => s.started = true,
            Some(f) => s.failure = Some(f),
        }
    }
}

/// What one round of reads could not read.
#[derive(Debug, Default, Clone, Copy)]
struct Reads {
    /// Keys handed back unprocessed.
    unprocessed: u64,
    /// BatchGetItem calls that failed after the SDK's retries.
    failed: u64,
}

impl std::ops::AddAssign for Reads {
    fn add_assign(&mut self, o: Self) {
        self.unprocessed += o.unprocessed;
        self.failed += o.failed;
    }
}

/// A start's result, from the submitting task.
struct StartResult {
    index: usize,
    error: Option<StartFailure>,
}

fn number<T: std::str::FromStr>(o: &StackOutputs, key: &str) -> Result<T, CliError>
where
    T::Err: std::fmt::Display,
{
    let raw = o.require(key)?;
    raw.parse()
        .map_err(|e| CliError::bad("--outputs", format!("{key} = {raw}"), e))
}

/// `OutboundRequestsPerSecondBound` (`"2 x 5"`: RetryHandlerMaxConcurrency ×
/// MaxRequestsPerSecond) as a rate; `None` with the reason when absent or unreadable.
pub fn outbound_bound(o: &StackOutputs) -> (Option<f64>, String) {
    const KEY: &str = "OutboundRequestsPerSecondBound";
    let Some(raw) = o.get(KEY) else {
        return (None, format!("output {KEY} not in the stacks given"));
    };
    let product = raw
        .split('x')
        .map(|f| f.trim().parse::<f64>())
        .try_fold(1.0, |acc, f| f.map(|f| acc * f));
    match product {
        Ok(p) if p.is_finite() => (Some(p), format!("output {KEY} `{raw}`")),
        _ => (None, format!("output {KEY} `{raw}` is not `N x R`")),
    }
}

fn start_failure(id: &domain::TransactionId, e: OpError) -> StartFailure {
    let (kind, message) = match e {
        OpError::Failed(ExecError::Port(p)) => {
            let a = AwsFailure::from(p);
            (a.kind().to_owned(), a.summary())
        }
        other => ("refused".to_owned(), other.to_string()),
    };
    StartFailure {
        id: id.to_string(),
        kind,
        message,
    }
}

/// Runs the load test of `plan` against the stacks of `outputs`.
pub async fn run(
    sdk: &aws_config::SdkConfig,
    outputs: &StackOutputs,
    plan: &Plan,
) -> Result<Report, CliError> {
    let (main, harness_stack) = plan::staging(outputs)?;
    let shards: u16 = number(outputs, "ReconcileShards")?;
    let answer_timeout: u64 = number(outputs, "AnswerTimeoutSeconds")?;
    let table = outputs.require("TransactionsTableName")?.to_owned();
    let group = outputs.require("ScheduleGroupName")?.to_owned();
    let dlq_urls: Vec<(&str, String)> = DLQS
        .iter()
        .map(|(id, key)| outputs.require(key).map(|u| (*id, u.to_owned())))
        .collect::<Result<_, _>>()?;

    let meter = ClientMeter::default();
    let ddb = meter.dynamodb(sdk);
    let sqs = meter.sqs(sdk);
    let scheduler = meter.scheduler(sdk);
    let store = Arc::new(
        DynamoStore::new(ddb.clone(), &table)
            .with_payloads_table(outputs.require("PayloadsTableName")?),
    );
    let requests = Arc::new(SqsRequestPublisher::new(
        sqs.clone(),
        outputs.require("RequestQueueUrl")?,
    ));
    let settings = runtime::Settings {
        shards,
        ..runtime::Settings::default()
    };

    let mut slots = vec![];
    for n in 1..=plan.transactions {
        let cancels = plan.cancels_of(n);
        let e = expected(&Case {
            name: "loadtest",
            answers: Plan::script(cancels).answers,
            max_attempts: plan.max_attempts.get(),
        })
        .map_err(CliError::Missing)?;
        slots.push(Slot {
            id: plan.id(n)?,
            expected: (e.status, e.attempts),
            started: false,
            failure: None,
            last: None,
            not_found: false,
        });
    }
    let mut before = vec![];
    for (id, url) in &dlq_urls {
        before.push(dlq_depth(&sqs, id, url).await?);
    }

    let bar = sandbox::demo::progress_bar(plan.progress, plan.transactions, "ended");

    // Submitting: one start every 1/rate s, at most STARTS_AT_ONCE in progress, until
    // every one is started or the ceiling stops it.
    let t0 = Instant::now();
    let deadline = t0 + plan.duration;
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, mut rx) = mpsc::unbounded_channel::<StartResult>();
    let submitter = {
        let stop = stop.clone();
        let work: Vec<(usize, domain::TransactionId, Payload)> = slots
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let n = u32::try_from(i + 1).unwrap_or(u32::MAX);
                let body = json!({
                    "loadtest": plan.run,
                    "n": n,
                    harness::rules::SCRIPT_MEMBER: Plan::script(plan.cancels_of(n)).to_json(),
                });
                Payload::from_json(&body.to_string())
                    .map(|p| (i, s.id.clone(), p))
                    .map_err(|e| CliError::bad("payload", body.to_string(), e))
            })
            .collect::<Result<_, _>>()?;
        let max = plan.max_attempts;
        let rate = plan.rate;
        let answer_timeout = Duration::from_secs(answer_timeout);
        tokio::spawn(async move {
            let permits = Arc::new(Semaphore::new(STARTS_AT_ONCE));
            let mut starts = JoinSet::new();
            for (k, (index, id, payload)) in work.into_iter().enumerate() {
                let at = t0 + Duration::from_secs_f64(k as f64 / rate);
                if at >= deadline {
                    break;
                }
                tokio::time::sleep_until(at.into()).await;
                let Ok(permit) = permits.clone().acquire_owned().await else {
                    break;
                };
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let (store, requests, tx) = (store.clone(), requests.clone(), tx.clone());
                let ctx = settings.context(SystemClock.now());
                starts.spawn(async move {
                    let ports = StartPorts {
                        store: store.as_ref(),
                        requests: requests.as_ref(),
                    };
                    let r = runtime::ops::start_transaction(
                        &ports,
                        id.clone(),
                        payload,
                        max,
                        answer_timeout,
                        &ctx,
                    )
                    .await;
                    let _ = tx.send(StartResult {
                        index,
                        error: r.err().map(|e| start_failure(&id, e)),
                    });
                    drop(permit);
                });
            }
            while starts.join_next().await.is_some() {}
            Instant::now()
        })
    };

    let mut reads = Reads::default();
    let mut stopped_at_ceiling = false;
    loop {
        let round = Instant::now();
        while let Ok(r) = rx.try_recv() {
            r.note(&mut slots);
        }
        reads += read_waiting(&ddb, &table, &mut slots).await;
        let ended = slots.iter().filter(|s| s.ended()).count();
        let answered = slots
            .iter()
            .filter(|s| s.started || s.failure.is_some())
            .count();
        bar.set_position(ended as u64);
        bar.set_message(format!(
            "{answered} started, {} in flight",
            slots.iter().filter(|s| s.waiting()).count()
        ));
        let all_submitted = submitter.is_finished() && rx.is_empty() && answered == slots.len();
        if all_submitted && slots.iter().all(|s| !s.waiting()) {
            break;
        }
        if Instant::now() >= deadline {
            stopped_at_ceiling = true;
            break;
        }
        let next = (round + plan.poll).min(deadline);
        tokio::time::sleep_until(next.into()).await;
    }
    stop.store(true, Ordering::Relaxed);
    let last_start = submitter.await.unwrap_or_else(|_| Instant::now());
    while let Some(r) = rx.recv().await {
        r.note(&mut slots);
    }
    if stopped_at_ceiling {
        // What the last starts did, and where the others are now.
        reads += read_waiting(&ddb, &table, &mut slots).await;
    }
    let ended_at = Instant::now();
    let started_count = slots.iter().filter(|s| s.started).count() as u64;
    bar.finish_and_clear();

    let mut after = vec![];
    for (id, url) in &dlq_urls {
        after.push(dlq_depth(&sqs, id, url).await?);
    }
    let dlqs = before
        .into_iter()
        .zip(after)
        .map(|((queue, before), (_, after))| DlqDepth {
            queue,
            before,
            after,
        })
        .collect();
    let schedules_left = schedules_of_run(&scheduler, &group, plan).await?;

    let records: Vec<&TransactionRecord> = slots.iter().filter_map(|s| s.last.as_ref()).collect();
    let count = |st: Status| records.iter().filter(|r| r.status == st).count() as u64;
    let retries_sent: u64 = records
        .iter()
        .map(|r| u64::from(r.current_attempt.get().saturating_sub(1)))
        .sum();
    let retries_expected: u64 = slots
        .iter()
        .filter(|s| s.started)
        .map(|s| u64::from(s.expected.1.saturating_sub(1)))
        .sum();
    let terminal_ms: Vec<i64> = records
        .iter()
        .filter(|r| r.status.is_terminal())
        .map(|r| r.updated_at.millis() - r.created_at.millis())
        .collect();
    // The window the retries went out in: from the first start to the last end seen.
    let window = ended_at.duration_since(t0).as_secs_f64();
    let start_window = last_start.duration_since(t0).as_secs_f64();
    let (bound, bound_from) = outbound_bound(outputs);
    let mut report = Report {
        stacks: vec![main, harness_stack],
        run: plan.run.clone(),
        id_prefix: plan.id_prefix(),
        transactions: plan.transactions,
        rate: plan.rate,
        duration_seconds: plan.duration.as_secs(),
        cancel_times: plan.cancel_times.clone(),
        max_attempts: plan.max_attempts.get(),
        started: started_count,
        not_started: slots
            .iter()
            .filter(|s| !s.started && s.failure.is_none())
            .count() as u64,
        start_failures: slots.iter().filter_map(|s| s.failure.clone()).collect(),
        starts_per_second: if start_window > 0.0 {
            started_count as f64 / start_window
        } else {
            0.0
        },
        succeeded: count(Status::Succeeded),
        failed: count(Status::Failed),
        in_flight: slots
            .iter()
            .filter(|s| s.waiting())
            .map(|s| Unfinished {
                id: s.id.to_string(),
                status: match (&s.last, s.not_found) {
                    (Some(r), _) => r.status.as_str().to_owned(),
                    (None, true) => "NOT_FOUND".to_owned(),
                    (None, false) => "NOT_READ".to_owned(),
                },
                attempt: s.last.as_ref().map(|r| r.current_attempt.get()),
            })
            .collect(),
        unexpected: slots
            .iter()
            .filter_map(|s| {
                let r = s.last.as_ref().filter(|r| r.status.is_terminal())?;
                let (status, attempt) = s.expected;
                (r.status != status || r.current_attempt.get() != attempt).then(|| Unexpected {
                    id: s.id.to_string(),
                    expected: format!("{status} at attempt {attempt}"),
                    found: format!("{} at attempt {}", r.status, r.current_attempt),
                })
            })
            .collect(),
        retries_expected,
        retries_sent,
        time_to_terminal: Spread::of(terminal_ms),
        capacity: Capacity {
            retries_per_second: if window > 0.0 {
                retries_sent as f64 / window
            } else {
                0.0
            },
            outbound_bound_per_second: bound,
            bound_from,
        },
        client: meter
            .snapshot()
            .into_iter()
            .map(|(s, c)| (s.to_owned(), c))
            .collect(),
        unprocessed_reads: reads.unprocessed,
        failed_reads: reads.failed,
        dlqs,
        schedules_left,
        stopped_at_ceiling,
        seconds: window,
        ok: false,
    };
    report.ok = report.complete();
    Ok(report)
}

/// Reads every transaction still waiting (started, not ended), BATCH keys a call,
/// READS_AT_ONCE calls at a time, eventually consistent. A key DynamoDB hands back
/// unprocessed, or a failed call's, is read again next round.
async fn read_waiting(ddb: &aws_sdk_dynamodb::Client, table: &str, slots: &mut [Slot]) -> Reads {
    let waiting: Vec<usize> = (0..slots.len()).filter(|i| slots[*i].waiting()).collect();
    let index: HashMap<String, usize> = waiting
        .iter()
        .map(|i| (slots[*i].id.to_string(), *i))
        .collect();
    let mut unprocessed = 0u64;
    let mut failed = 0u64;
    let mut seen: HashSet<usize> = HashSet::new();
    for group in waiting.chunks(BATCH * READS_AT_ONCE) {
        let mut reads = JoinSet::new();
        for chunk in group.chunks(BATCH) {
            let keys: Vec<HashMap<String, AttributeValue>> = chunk
                .iter()
                .map(|i| {
                    HashMap::from([(
                        attr::TRANSACTION_ID.to_owned(),
                        AttributeValue::S(slots[*i].id.to_string()),
                    )])
                })
                .collect();
            let Ok(ka) = KeysAndAttributes::builder().set_keys(Some(keys)).build() else {
                continue;
            };
            let call = ddb.batch_get_item().request_items(table, ka).send();
            let table = table.to_owned();
            reads.spawn(async move {
                let out = call.await.ok()?;
                let items = out.responses().and_then(|r| r.get(&table)).cloned();
                let left = out
                    .unprocessed_keys()
                    .and_then(|u| u.get(&table))
                    .map_or(0, |k| k.keys().len());
                Some((items.unwrap_or_default(), left))
            });
        }
        while let Some(done) = reads.join_next().await {
            let Ok(Some((items, left))) = done else {
                failed += 1;
                continue;
            };
            unprocessed += left as u64;
            for item in items {
                let Ok(rec) = record_from_flat(&flat_from_dynamodb(&item)) else {
                    continue;
                };
                if let Some(i) = index.get(rec.transaction_id.as_str()) {
                    seen.insert(*i);
                    slots[*i].not_found = false;
                    slots[*i].last = Some(rec);
                }
            }
        }
    }
    // A started transaction that no read returned, when every key was answered.
    if unprocessed == 0 && failed == 0 {
        for i in waiting {
            if !seen.contains(&i) && slots[i].last.is_none() {
                slots[i].not_found = true;
            }
        }
    }
    Reads {
        unprocessed,
        failed,
    }
}

async fn dlq_depth(
    sqs: &aws_sdk_sqs::Client,
    id: &str,
    url: &str,
) -> Result<(String, u64), CliError> {
    queue_depth(sqs, url)
        .await
        .map(|d| (id.to_owned(), d))
        .map_err(|e| CliError::Aws(format!("{id} {url}: {e}")))
}

/// The retry schedules of this run still in `group`: their names start with the
/// schedule name the domain gives the run's ids.
async fn schedules_of_run(
    scheduler: &aws_sdk_scheduler::Client,
    group: &str,
    plan: &Plan,
) -> Result<Vec<String>, CliError> {
    let probe_id = plan.id(0)?;
    let probe = ScheduleName::for_retry(&probe_id, Attempt::FIRST);
    let prefix = probe
        .as_str()
        .find(&plan.id_prefix())
        .map(|at| probe.as_str()[..at + plan.id_prefix().len()].to_owned())
        .ok_or_else(|| {
            CliError::bad(
                "--run",
                &plan.run,
                "the run's schedule names would not carry its ids",
            )
        })?;
    let mut names = vec![];
    let mut token = None;
    loop {
        let page = scheduler
            .list_schedules()
            .group_name(group)
            .name_prefix(&prefix)
            .set_next_token(token)
            .send()
            .await
            .map_err(aws::errors::sdk_error(format!("ListSchedules `{group}`")))
            .map_err(CliError::Aws)?;
        names.extend(
            page.schedules()
                .iter()
                .filter_map(|s| s.name())
                .filter(|n| n.starts_with(&prefix))
                .map(str::to_owned),
        );
        token = page.next_token().map(str::to_owned);
        if token.is_none() {
            return Ok(names);
        }
    }
}
