//! The burst: N CANCELLED responses arriving at once, through the local stack (moto, the
//! handlers behind the event source mapping emulator, the scheduler emulator, the audit
//! stream, the reconciler cron, the simulated external service). N started transactions
//! are written with BatchWriteItem (moto's TransactWriteItems copies every table on each
//! call, which makes a 10,000-transaction set-up quadratic), then N CANCELLED answers go
//! on the response queue; the retries fall due together, so the outbound pacing limits
//! the flow. Measured: drain time, every transaction SUCCEEDED, lost and duplicated
//! retried requests, and the peak published in one second against the fleet bound
//! (MaximumConcurrency × MAX_REQUESTS_PER_SECOND), timed at the AWS endpoint by a
//! recording pass-through ([`crate::tap`]) rather than on the service's receive side
//! (its own count is reported beside). Results: `docs/benchmarks.md#burst`.

use crate::tap::{peak_per_wall_second, peak_sliding, Tap};
use aws::config::vars;
use aws::item::{attr, record_to_item};
use aws_sdk_dynamodb::types::{AttributeValue, PutRequest, WriteRequest};
use aws_sdk_sqs::types::SendMessageBatchRequestEntry;
use domain::ports::{Clock, SystemClock};
use domain::{MaxAttempts, Request, Status, TransactionId, TransactionRecord};
use futures::StreamExt;
use sandbox::local::stack::{Stack, StackOptions};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};
use thiserror::Error;

#[derive(Debug, Error)]
pub enum BurstError {
    #[error("local stack: {0}")]
    Stack(String),
    #[error("{0}")]
    Step(String),
}

/// How to run the burst.
#[derive(Debug, Clone, PartialEq)]
pub struct BurstSpec {
    pub responses: u32,
    /// MAX_REQUESTS_PER_SECOND of each retry-handler execution environment.
    pub max_requests_per_second: f64,
    /// The retry queue's MaximumConcurrency.
    pub retry_concurrency: usize,
    /// The backoff of every retry (s): base = cap, so they all fall due together.
    pub backoff_seconds: f64,
    /// Give up after this long (then the unfinished ones are reported).
    pub deadline: Duration,
    /// How often the scheduler emulator lists the schedule group.
    pub scheduler_tick: Duration,
    /// The moto server program the stack runs on (`moto_server`, or
    /// `scripts/moto_server_patched.py` for large bursts).
    pub moto_program: String,
}

impl BurstSpec {
    /// MaximumConcurrency × ⌊MAX_REQUESTS_PER_SECOND⌋ (at least one per environment).
    pub fn rate_bound(&self) -> f64 {
        self.max_requests_per_second.floor().max(1.0) * self.retry_concurrency as f64
    }

    /// RECONCILE_THRESHOLD_SECONDS of the burst's stack: half the deadline (at least a
    /// minute). Longer than any retry event waits in a run that drains in time, so the
    /// reconciler leaves merely queued work alone; short enough that a transaction
    /// whose retry really was lost is rescued before the deadline and shows in the
    /// report as a reconciler action.
    pub fn reconcile_threshold(&self) -> Duration {
        Duration::from_secs((self.deadline.as_secs() / 2).max(60))
    }
}

/// What the burst did.
#[derive(Debug, Clone, PartialEq)]
pub struct BurstResult {
    pub spec: BurstSpec,
    pub setup: Duration,
    /// Injecting the N answers.
    pub injected_in: Duration,
    /// First answer injected → the service has the retried request of every transaction.
    pub drain: Option<Duration>,
    /// First answer injected → the scheduler had put every retry event on the retry
    /// queue (taken when the follow loop starts if it happened during the injection).
    pub all_fired: Option<Duration>,
    /// Retried requests published per second from `all_fired` to the last one: the
    /// part of the drain only the rate limit paces.
    pub rate_after_all_fired: Option<f64>,
    /// First answer injected → every transaction SUCCEEDED.
    pub all_succeeded: Option<Duration>,
    /// Transactions whose retried request (attempt 2) reached the service.
    pub retried_unique: u64,
    /// Retried requests received, duplicates included.
    pub retried_raw: u64,
    /// Transactions whose retried request never reached the service once the queues
    /// were empty; `None` when work was still queued at the deadline.
    pub lost: Option<u64>,
    /// Retried requests not yet at the service when the deadline passed (still queued).
    pub pending: u64,
    /// Messages in any dead-letter queue of the stack at the end.
    pub dead_lettered: u64,
    /// Retried requests received more than once (extra copies).
    pub duplicated: u64,
    /// Requests for an attempt beyond 2 (must be none: max_attempts = 2).
    pub beyond_budget: u64,
    /// Retried requests published (SendMessage to the request queue), and how many
    /// keys were published more than once.
    pub published: u64,
    pub published_twice: u64,
    /// Highest number of retried requests published within one wall-clock second, and
    /// within any sliding one-second window (at the AWS endpoint).
    pub peak_per_second: u32,
    pub peak_sliding_second: u32,
    /// Highest number the simulated service received within one of its wall-clock
    /// seconds (after the request queue).
    pub peak_received_per_second: u32,
    pub rate_bound: f64,
    pub succeeded: u64,
    pub not_succeeded: u64,
    pub schedules_fired: u64,
    /// GetSchedule calls of the scheduler emulator that failed and were made again.
    pub schedule_read_failures: u64,
    /// Deliveries of the scheduler emulator that failed and were retried.
    pub schedule_delivery_failures: u64,
    /// The reconciler's actions, `"<STATUS>/<action>"` → count (none in a run where
    /// nothing was lost on the way).
    pub reconciler_actions: BTreeMap<String, u64>,
    /// How often the stack's reconciler cron ran.
    pub reconcile_every: Duration,
    pub retry_invocations: u64,
    pub retry_batch_item_failures: u64,
    pub response_invocations: u64,
}

impl BurstResult {
    pub fn within_bound(&self) -> bool {
        f64::from(self.peak_sliding_second.max(self.peak_per_second)) <= self.rate_bound
    }

    pub fn ok(&self) -> bool {
        self.lost == Some(0)
            && self.dead_lettered == 0
            && self.duplicated == 0
            && self.published_twice == 0
            && self.beyond_budget == 0
            && self.within_bound()
            && self.not_succeeded == 0
    }
}

fn tx(n: u32) -> String {
    format!("TX-BURST-{n:06}")
}

fn err(e: impl std::fmt::Display) -> BurstError {
    BurstError::Step(e.to_string())
}

/// Runs the burst on a local stack of its own (its own moto server).
///
/// The N transactions start IN_PROGRESS, attempt 1 of 2 (the items the library's start
/// writes); the N CANCELLED answers are sent as fast as SendMessageBatch allows, with a
/// short backoff so the retries fall due together; the external service answers SUCCESS
/// to every retried request. Drain time runs from the first answer injected until the
/// service has received the retried request of every transaction; lost = transactions
/// whose retried request never reached the service; duplicated = retried requests the
/// service received more than once (same idempotency key).
pub async fn run(spec: BurstSpec) -> Result<BurstResult, BurstError> {
    let mut opts = StackOptions::new(testkit::moto::unique_prefix("burst"));
    let backoff = format!("{}", spec.backoff_seconds);
    opts.env = vec![
        (vars::BACKOFF_BASE_SECONDS.name, backoff.clone()),
        (vars::BACKOFF_CAP_SECONDS.name, backoff),
        (vars::BACKOFF_JITTER.name, "0".into()),
        (
            vars::MAX_REQUESTS_PER_SECOND.name,
            spec.max_requests_per_second.to_string(),
        ),
        (
            vars::RECONCILE_THRESHOLD_SECONDS.name,
            spec.reconcile_threshold().as_secs().to_string(),
        ),
    ];
    opts.retry_esm.max_concurrency = spec.retry_concurrency;
    opts.external.cancel_probability = 0.0;
    opts.external.duplicate_response_probability = 0.0;
    opts.external.latency_min = Duration::ZERO;
    opts.external.latency_max = Duration::ZERO;
    // The emulators' own polling (not deployment settings): the scheduler emulator lists
    // every schedule of the group on each tick, which costs moto O(schedules).
    opts.scheduler_tick = spec.scheduler_tick;
    opts.audit_poll = Duration::from_secs(1);
    let reconcile_every = opts.reconcile_every;
    let started = Instant::now();
    let moto = testkit::moto::MotoServer::launch(&spec.moto_program)
        .await
        .map_err(|e| BurstError::Stack(format!("{}: {e}", spec.moto_program)))?;
    let tap = Tap::start(&moto.endpoint_url()).await.map_err(err)?;
    opts.moto_endpoint = Some(tap.endpoint.clone());
    let stack = match Stack::start(opts).await {
        Ok(s) => s,
        Err(e) => {
            tap.stop();
            moto.stop().await;
            return Err(BurstError::Stack(e.to_string()));
        }
    };
    let result = drive(&stack, &tap, &spec, started, reconcile_every).await;
    stack.shutdown().await;
    tap.stop();
    moto.stop().await;
    result
}

fn sha256_hex(text: &str) -> String {
    Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Writes `n` started transactions (state item + payload item, as the library's
/// start writes them) with BatchWriteItem.
async fn seed(
    ddb: &aws_sdk_dynamodb::Client,
    names: &aws::config::StackNames,
    n: u32,
) -> Result<(), BurstError> {
    let max = MaxAttempts::new(2).map_err(err)?;
    let now = SystemClock.now();
    let ids: Vec<u32> = (1..=n).collect();
    let calls = futures::stream::iter(ids.chunks(12).map(<[u32]>::to_vec))
        .map(|chunk| async move {
            let mut items: HashMap<String, Vec<WriteRequest>> = HashMap::new();
            for i in chunk {
                let id = TransactionId::parse(&tx(i)).map_err(err)?;
                let record = TransactionRecord::started(id.clone(), max, now);
                let payload = format!(r#"{{"order":"{}","amount_cents":{i}}}"#, tx(i));
                let payload_item = HashMap::from([
                    (
                        attr::TRANSACTION_ID.to_owned(),
                        AttributeValue::S(id.as_str().to_owned()),
                    ),
                    (
                        attr::PAYLOAD_SHA256.to_owned(),
                        AttributeValue::S(sha256_hex(&payload)),
                    ),
                    (attr::PAYLOAD.to_owned(), AttributeValue::S(payload)),
                    (
                        attr::CREATED_AT.to_owned(),
                        AttributeValue::S(now.to_rfc3339()),
                    ),
                ]);
                for (table, item) in [
                    (&names.transactions_table, record_to_item(&record)),
                    (&names.payloads_table, payload_item),
                ] {
                    let put = PutRequest::builder()
                        .set_item(Some(item))
                        .build()
                        .map_err(err)?;
                    items
                        .entry(table.clone())
                        .or_default()
                        .push(WriteRequest::builder().put_request(put).build());
                }
            }
            let mut pending = Some(items);
            for _ in 0..10 {
                let Some(request) = pending.take().filter(|m| !m.is_empty()) else {
                    return Ok(());
                };
                let out = ddb
                    .batch_write_item()
                    .set_request_items(Some(request))
                    .send()
                    .await
                    .map_err(|e| err(aws_sdk_dynamodb::error::DisplayErrorContext(e)))?;
                pending = out.unprocessed_items().cloned();
            }
            Err(err("BatchWriteItem kept returning unprocessed items"))
        })
        .buffer_unordered(8)
        .collect::<Vec<Result<(), BurstError>>>()
        .await;
    calls.into_iter().collect()
}

async fn drive(
    stack: &Stack,
    tap: &Tap,
    spec: &BurstSpec,
    started: Instant,
    reconcile_every: Duration,
) -> Result<BurstResult, BurstError> {
    let names = stack.names().clone();
    let p = &stack.provisioned;
    let sqs = aws_sdk_sqs::Client::new(&stack.sdk);
    let ddb = aws_sdk_dynamodb::Client::new(&stack.sdk);
    let n = spec.responses;

    // N started transactions (max 2 attempts: one retry each).
    seed(&ddb, &names, n).await?;
    let setup = started.elapsed();
    eprintln!(
        "bench: burst: {n} transactions started, {:.1} s after the stack started",
        setup.as_secs_f64()
    );

    // Inject the N CANCELLED answers, with a progress line every 10 s from now on.
    let injected_at = Instant::now();
    let progress = {
        let (resp, retry, sched, external) = (
            stack.response_esm.clone(),
            stack.retry_esm.clone(),
            stack.scheduler.clone(),
            stack.external.clone(),
        );
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(10)).await;
                let done = external.seen().keys().filter(|(_, a)| *a == 2).count();
                eprintln!(
                    "bench: burst {:>5.0} s: responses handled {}, schedules fired {} (reads failed and made again {}), retry events handled {}, retried requests at the service {done}/{n}",
                    injected_at.elapsed().as_secs_f64(),
                    resp.get(&resp.records),
                    sched.get(&sched.fired),
                    sched.get(&sched.read_failures),
                    retry.get(&retry.records),
                );
            }
        })
    };
    let chunks: Vec<Vec<u32>> = (1..=n)
        .collect::<Vec<_>>()
        .chunks(10)
        .map(<[u32]>::to_vec)
        .collect();
    let sends = futures::stream::iter(chunks)
        .map(|chunk| {
            let (sqs, url) = (&sqs, &p.response.url);
            async move {
                let entries = chunk
                    .iter()
                    .map(|i| {
                        SendMessageBatchRequestEntry::builder()
                            .id(format!("m{i}"))
                            .message_body(format!(
                                r#"{{"transaction_id":"{}","attempt":1,"outcome":"CANCELLED","reason":"NOT_AVAILABLE"}}"#,
                                tx(*i)
                            ))
                            .build()
                            .map_err(err)
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                let out = sqs
                    .send_message_batch()
                    .queue_url(url)
                    .set_entries(Some(entries))
                    .send()
                    .await
                    .map_err(|e| err(aws_sdk_sqs::error::DisplayErrorContext(e)))?;
                if out.failed().is_empty() {
                    Ok(())
                } else {
                    Err(err(format!("SendMessageBatch failed entries: {:?}", out.failed())))
                }
            }
        })
        .buffer_unordered(8)
        .collect::<Vec<_>>()
        .await;
    if let Err(e) = sends.into_iter().collect::<Result<Vec<()>, _>>() {
        progress.abort();
        return Err(e);
    }
    let injected_in = injected_at.elapsed();
    eprintln!(
        "bench: burst: {n} CANCELLED responses injected in {:.1} s",
        injected_in.as_secs_f64()
    );

    // Follow: every retried request at the service, then every transaction SUCCEEDED.
    let deadline = injected_at + spec.deadline;
    let retried = |seen: &std::collections::BTreeMap<
        (String, u32),
        sandbox::local::external::Seen,
    >| { seen.keys().filter(|(_, attempt)| *attempt == 2).count() as u64 };
    let mut drain = None;
    let mut all_fired: Option<(Duration, i64)> = None;
    while Instant::now() < deadline {
        if all_fired.is_none() && stack.scheduler.get(&stack.scheduler.fired) >= u64::from(n) {
            all_fired = Some((injected_at.elapsed(), SystemClock.now().millis()));
        }
        if retried(&stack.external.seen()) >= u64::from(n) {
            drain = Some(injected_at.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    progress.abort();
    let mut all_succeeded = None;
    let mut succeeded = 0;
    while Instant::now() < deadline {
        let records = sandbox::demo::scan_records(&ddb, &names.transactions_table)
            .await
            .map_err(err)?;
        succeeded = records
            .values()
            .filter(|r| r.status == Status::Succeeded)
            .count() as u64;
        if succeeded >= u64::from(n) {
            all_succeeded = Some(injected_at.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    // Late copies would arrive now: let the queues settle before counting. A request
    // still queued or in flight at the deadline is pending, not lost.
    let settle_until = Instant::now() + Duration::from_secs(10);
    let mut in_queues = 0;
    while Instant::now() < settle_until {
        in_queues = 0;
        for url in [&p.response.url, &p.retry.url, &p.request.url] {
            in_queues += sandbox::demo::queue_depth(&sqs, url).await.map_err(err)?;
        }
        if in_queues == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut dead_lettered = 0;
    for q in [
        &p.response_dlq,
        &p.retry_dlq,
        &p.scheduler_dlq,
        &p.request_dlq,
    ] {
        dead_lettered += sandbox::demo::queue_depth(&sqs, &q.url)
            .await
            .map_err(err)?;
    }

    let seen = stack.external.seen();
    let retried_unique = retried(&seen);
    let retried_raw: u64 = seen
        .iter()
        .filter(|((_, a), _)| *a == 2)
        .map(|(_, s)| u64::from(s.raw))
        .sum();
    let beyond_budget = seen.keys().filter(|(_, a)| *a > 2).count() as u64;
    // What left for the service, at the endpoint.
    let mut per_key: HashMap<(String, u32), u32> = HashMap::new();
    let mut epoch_ms = Vec::new();
    let mut instants = Vec::new();
    for sent in tap.sent_to(&names.request_queue) {
        let Ok(request) = Request::parse(&sent.body) else {
            continue;
        };
        if request.attempt.get() < 2 {
            continue;
        }
        *per_key
            .entry((
                request.transaction_id.as_str().to_owned(),
                request.attempt.get(),
            ))
            .or_insert(0) += 1;
        epoch_ms.push(sent.epoch_ms);
        instants.push(sent.since_start);
    }
    // Once every retry event is on the retry queue, only the limit paces the drain:
    // requests published per second from then to the last one.
    let rate_after_all_fired = all_fired.and_then(|(_, at)| {
        let after: Vec<i64> = epoch_ms.iter().copied().filter(|t| *t >= at).collect();
        let last = after.iter().copied().max()?;
        (last > at).then(|| after.len() as f64 * 1000.0 / (last - at) as f64)
    });
    let sched = &stack.scheduler;
    let (resp, retry) = (&stack.response_esm, &stack.retry_esm);
    Ok(BurstResult {
        spec: spec.clone(),
        setup,
        injected_in,
        drain,
        all_fired: all_fired.map(|(d, _)| d),
        rate_after_all_fired,
        all_succeeded,
        retried_unique,
        retried_raw,
        lost: (in_queues == 0).then(|| u64::from(n).saturating_sub(retried_unique)),
        pending: if in_queues == 0 {
            0
        } else {
            u64::from(n).saturating_sub(retried_unique)
        },
        dead_lettered,
        duplicated: retried_raw.saturating_sub(retried_unique),
        beyond_budget,
        published: epoch_ms.len() as u64,
        published_twice: per_key.values().filter(|n| **n > 1).count() as u64,
        peak_per_second: peak_per_wall_second(&epoch_ms),
        peak_sliding_second: peak_sliding(&instants, Duration::from_secs(1)),
        peak_received_per_second: stack.external.peak_retried_per_second(),
        rate_bound: stack.rate_bound,
        succeeded,
        not_succeeded: u64::from(n).saturating_sub(succeeded),
        schedules_fired: sched.get(&sched.fired),
        schedule_read_failures: sched.get(&sched.read_failures),
        schedule_delivery_failures: sched.get(&sched.delivery_failures),
        reconciler_actions: stack
            .reconciler
            .actions
            .lock()
            .map(|a| a.clone())
            .unwrap_or_default(),
        reconcile_every,
        retry_invocations: retry.get(&retry.invocations),
        retry_batch_item_failures: retry.get(&retry.reported_failures),
        response_invocations: resp.get(&resp.invocations),
    })
}

/// What a backlog costs a moto server program: on a server of its own, a queue is
/// filled to each of `sizes` messages and the median of three ReceiveMessage calls of
/// 10 is taken at each size.
pub async fn probe_moto_receive(
    program: &str,
    sizes: &[u32],
) -> Result<Vec<(u32, Duration)>, BurstError> {
    let moto = testkit::moto::MotoServer::launch(program)
        .await
        .map_err(|e| BurstError::Stack(format!("{program}: {e}")))?;
    let sdk = testkit::moto::sdk_config(&moto.endpoint_url()).await;
    let out = probe_receive(&sdk, sizes).await;
    moto.stop().await;
    out
}

async fn probe_receive(
    sdk: &aws_config::SdkConfig,
    sizes: &[u32],
) -> Result<Vec<(u32, Duration)>, BurstError> {
    let sqs = aws_sdk_sqs::Client::new(sdk);
    let url = sqs
        .create_queue()
        .queue_name(testkit::moto::unique_prefix("probe"))
        .send()
        .await
        .map_err(|e| err(aws_sdk_sqs::error::DisplayErrorContext(e)))?
        .queue_url()
        .unwrap_or_default()
        .to_owned();
    let mut queued = 0;
    let mut out = Vec::new();
    for &n in sizes {
        while queued < n {
            let entries = (0..10)
                .map(|i| {
                    SendMessageBatchRequestEntry::builder()
                        .id(format!("m{i}"))
                        .message_body(
                            r#"{"transaction_id":"TX-PROBE","attempt":1,"outcome":"CANCELLED"}"#,
                        )
                        .build()
                        .map_err(err)
                })
                .collect::<Result<Vec<_>, _>>()?;
            sqs.send_message_batch()
                .queue_url(&url)
                .set_entries(Some(entries))
                .send()
                .await
                .map_err(|e| err(aws_sdk_sqs::error::DisplayErrorContext(e)))?;
            queued += 10;
        }
        let mut times = Vec::new();
        for _ in 0..3 {
            let t = Instant::now();
            sqs.receive_message()
                .queue_url(&url)
                .max_number_of_messages(10)
                .visibility_timeout(3600)
                .send()
                .await
                .map_err(|e| err(aws_sdk_sqs::error::DisplayErrorContext(e)))?;
            times.push(t.elapsed());
        }
        times.sort();
        out.push((n, times[1]));
    }
    let _ = sqs.delete_queue().queue_url(&url).send().await;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(responses: u32, deadline: u64) -> BurstSpec {
        BurstSpec {
            responses,
            max_requests_per_second: 5.0,
            retry_concurrency: 2,
            backoff_seconds: 2.0,
            deadline: Duration::from_secs(deadline),
            scheduler_tick: Duration::from_millis(500),
            moto_program: "moto_server".into(),
        }
    }

    #[test]
    fn the_reconciler_threshold_is_half_the_deadline_and_at_least_a_minute() {
        // The default deadline of 10,000 at 10/s: 300 + 5 × 1,000 s.
        let big = spec(10_000, 5_300);
        assert_eq!(big.rate_bound(), 10.0);
        assert_eq!(big.reconcile_threshold(), Duration::from_secs(2_650));
        // Longer than the whole rate-bound drain (N / limit)…
        assert!(big.reconcile_threshold().as_secs_f64() > 10_000.0 / big.rate_bound());
        // …and a lost retry that fell due in the first half is rescued before the end.
        assert!(big.reconcile_threshold() * 2 <= big.deadline);
        assert_eq!(spec(40, 100).reconcile_threshold(), Duration::from_secs(60));
    }
}
