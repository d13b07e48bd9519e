//! An emulator of Lambda's SQS event source mapping (ESM), against any SQS endpoint
//! (moto on loopback) through the real SDK: pollers long-poll the queue; a batch is
//! gathered up to `BatchSize` or `MaximumBatchingWindowInSeconds`, deserialized from the
//! very JSON shape Lambda sends into `aws_lambda_events::sqs::SqsEvent`, and handed to
//! the function's own entry point; with `ReportBatchItemFailures`, every record **not**
//! listed is deleted and the listed ones reappear after the visibility timeout (moto
//! redrives them to the DLQ on receive, as SQS does); an invocation error, a panic, or a
//! response naming a message id not in the batch fails the whole batch; one poller per
//! unit of `MaximumConcurrency`. In a chaos run an invocation can be killed mid-batch
//! (`kill_probability`), as a Lambda timeout or out-of-memory kills it. In detail:
//! `docs/operations.md#how-the-emulators-mirror-aws`.

use super::stop::Stop;
use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use aws_sdk_sqs::types::{DeleteMessageBatchRequestEntry, Message, MessageSystemAttributeName};
use domain::policy::{RandomSource, SplitMix64};
use serde_json::{json, Map, Value};
use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The function an ESM invokes: an `SqsEvent` in, an `SqsBatchResponse` out.
pub type SqsFunction = super::Invoke<SqsEvent, SqsBatchResponse>;

/// One event source mapping, with the settings of the template's `Events: … Type: SQS`.
#[derive(Debug, Clone)]
pub struct EsmSettings {
    /// Function name, for logs and the report.
    pub function: String,
    pub queue_url: String,
    pub queue_arn: String,
    pub region: String,
    /// `BatchSize` (1–10,000; each `ReceiveMessage` returns at most 10).
    pub batch_size: usize,
    /// `MaximumBatchingWindowInSeconds`.
    pub batching_window: Duration,
    /// `ScalingConfig.MaximumConcurrency`.
    pub max_concurrency: usize,
    /// Long-poll wait of each `ReceiveMessage` (Lambda uses 20 s; short here so that
    /// stopping is quick).
    pub poll_wait_seconds: i32,
    /// `None`: the queue's own visibility timeout (what Lambda does). `Some(s)`: a
    /// per-receive override, used by the demo to compress time.
    pub visibility_timeout: Option<i32>,
    /// Probability that an invocation is killed mid-batch (a chaos run), as a Lambda
    /// timeout or out-of-memory would: after a random part of [`KILL_WITHIN`], no
    /// batch response, every record back after the visibility timeout.
    pub kill_probability: f64,
    /// Seed of the kills (each poller draws from its own generator).
    pub seed: u64,
}

/// A killed invocation dies within this long of its start.
pub const KILL_WITHIN: Duration = Duration::from_millis(100);

/// What an ESM did, readable while it runs.
#[derive(Debug, Default)]
pub struct EsmStats {
    pub invocations: AtomicU64,
    pub records: AtomicU64,
    pub deleted: AtomicU64,
    /// Records listed in `batchItemFailures`.
    pub reported_failures: AtomicU64,
    /// Invocations that failed as a whole (error, panic, bad response).
    pub failed_invocations: AtomicU64,
    /// Highest number of invocations running at the same time.
    pub peak_concurrency: AtomicU64,
    /// Invocations killed mid-batch (a chaos run).
    pub killed: AtomicU64,
    in_flight: AtomicU64,
}

impl EsmStats {
    pub fn get(&self, c: &AtomicU64) -> u64 {
        c.load(Ordering::Relaxed)
    }
}

/// Starts the pollers. They run until `stop` is asked.
///
/// `environment(i)` builds the function for poller `i`: each poller stands for one
/// execution environment of the function (one invocation at a time, its own warm
/// state, such as the retry handler's outbound pacer), and there are
/// `MaximumConcurrency` of them.
pub fn spawn(
    sqs: aws_sdk_sqs::Client,
    settings: EsmSettings,
    environment: impl Fn(usize) -> SqsFunction,
    stop: Stop,
) -> (Vec<tokio::task::JoinHandle<()>>, Arc<EsmStats>) {
    let stats = Arc::new(EsmStats::default());
    let settings = Arc::new(settings);
    let pollers = settings.max_concurrency.max(1);
    let handles = (0..pollers)
        .map(|i| {
            let (sqs, settings, function, stop, stats) = (
                sqs.clone(),
                settings.clone(),
                environment(i),
                stop.clone(),
                stats.clone(),
            );
            tokio::spawn(async move { poller(sqs, settings, function, stop, stats, i).await })
        })
        .collect();
    (handles, stats)
}

async fn poller(
    sqs: aws_sdk_sqs::Client,
    settings: Arc<EsmSettings>,
    function: SqsFunction,
    mut stop: Stop,
    stats: Arc<EsmStats>,
    index: usize,
) {
    let mut dice = SplitMix64::new(settings.seed ^ (index as u64).wrapping_mul(0x9E37_79B9));
    while !stop.is_stopped() {
        let batch = match gather(&sqs, &settings, &mut stop).await {
            Ok(b) => b,
            Err(e) => {
                tracing::warn!(function = %settings.function, error = %e, "ReceiveMessage failed");
                if stop.sleep(Duration::from_millis(500)).await {
                    break;
                }
                continue;
            }
        };
        if batch.is_empty() {
            continue;
        }
        let (roll, at) = (dice.next_unit(), dice.next_unit());
        let kill = (roll < settings.kill_probability).then(|| KILL_WITHIN.mul_f64(at));
        invoke_and_settle(&sqs, &settings, &function, &stats, batch, kill).await;
    }
}

/// Receives until the batch is full or the batching window has passed.
async fn gather(
    sqs: &aws_sdk_sqs::Client,
    s: &EsmSettings,
    stop: &mut Stop,
) -> Result<Vec<Message>, String> {
    let mut batch: Vec<Message> = Vec::new();
    let mut window_ends: Option<Instant> = None;
    loop {
        let room = s.batch_size.saturating_sub(batch.len()).min(10);
        if room == 0 {
            break;
        }
        let wait = match window_ends {
            None => s.poll_wait_seconds,
            Some(end) => {
                let left = end.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                // Whole seconds only; a short window polls without waiting.
                i32::try_from(left.as_secs())
                    .unwrap_or(0)
                    .min(s.poll_wait_seconds)
            }
        };
        let mut req = sqs
            .receive_message()
            .queue_url(&s.queue_url)
            .max_number_of_messages(i32::try_from(room).unwrap_or(10))
            .wait_time_seconds(wait)
            .message_system_attribute_names(MessageSystemAttributeName::All)
            .message_attribute_names("All");
        if let Some(v) = s.visibility_timeout {
            req = req.visibility_timeout(v);
        }
        let got = tokio::select! {
            r = req.send() => r.map_err(|e| format!("{}", aws_sdk_sqs::error::DisplayErrorContext(e)))?,
            () = stop.stopped() => return Ok(batch),
        };
        let messages = got.messages.unwrap_or_default();
        if messages.is_empty() {
            if window_ends.is_none() {
                // Nothing arrived during the long poll: hand back (empty) to re-check stop.
                return Ok(batch);
            }
            // Inside the window: a short pause rather than a busy loop.
            if stop.sleep(Duration::from_millis(50)).await {
                return Ok(batch);
            }
            continue;
        }
        batch.extend(messages);
        if s.batching_window.is_zero() {
            break;
        }
        window_ends.get_or_insert_with(|| Instant::now() + s.batching_window);
    }
    Ok(batch)
}

async fn invoke_and_settle(
    sqs: &aws_sdk_sqs::Client,
    s: &EsmSettings,
    function: &SqsFunction,
    stats: &EsmStats,
    batch: Vec<Message>,
    kill: Option<Duration>,
) {
    stats.invocations.fetch_add(1, Ordering::Relaxed);
    stats
        .records
        .fetch_add(batch.len() as u64, Ordering::Relaxed);
    let now_in_flight = stats.in_flight.fetch_add(1, Ordering::Relaxed) + 1;
    stats
        .peak_concurrency
        .fetch_max(now_in_flight, Ordering::Relaxed);

    let outcome = match event_for(&batch, &s.queue_arn, &s.region) {
        Ok(event) => {
            // A separate task: a panic in the function fails this invocation only.
            let call = (function)(event);
            let mut task = tokio::spawn(call);
            let joined = match kill {
                None => Some((&mut task).await),
                Some(after) => tokio::time::timeout(after, &mut task).await.ok(),
            };
            match joined {
                Some(Ok(Ok(resp))) => Ok(resp),
                Some(Ok(Err(e))) => Err(e),
                Some(Err(join)) => Err(format!("the function panicked: {join}")),
                None => {
                    // Killed where it stood, mid-batch: whatever it had done stays done.
                    task.abort();
                    stats.killed.fetch_add(1, Ordering::Relaxed);
                    Err("killed mid-batch".to_owned())
                }
            }
        }
        Err(e) => Err(e),
    };
    stats.in_flight.fetch_sub(1, Ordering::Relaxed);

    let ids: HashSet<&str> = batch.iter().filter_map(|m| m.message_id()).collect();
    let failed: Option<HashSet<String>> = match outcome {
        Ok(resp) => {
            let listed: HashSet<String> = resp
                .batch_item_failures
                .iter()
                .map(|f| f.item_identifier.clone())
                .collect();
            if listed.iter().all(|id| ids.contains(id.as_str())) {
                Some(listed)
            } else {
                tracing::warn!(function = %s.function, "batchItemFailures names a message id that is not in the batch: the whole batch fails");
                None
            }
        }
        Err(e) => {
            tracing::warn!(function = %s.function, error = %e, "invocation failed: the whole batch returns to the queue");
            None
        }
    };
    let Some(failed) = failed else {
        stats.failed_invocations.fetch_add(1, Ordering::Relaxed);
        return;
    };
    stats
        .reported_failures
        .fetch_add(failed.len() as u64, Ordering::Relaxed);
    let to_delete: Vec<&Message> = batch
        .iter()
        .filter(|m| m.message_id().is_some_and(|id| !failed.contains(id)))
        .collect();
    for chunk in to_delete.chunks(10) {
        let entries = delete_entries(chunk);
        match sqs
            .delete_message_batch()
            .queue_url(&s.queue_url)
            .set_entries(Some(entries))
            .send()
            .await
        {
            Ok(out) => {
                stats
                    .deleted
                    .fetch_add(out.successful.len() as u64, Ordering::Relaxed);
                for f in out.failed {
                    tracing::warn!(function = %s.function, id = %f.id, code = %f.code, "DeleteMessageBatch entry failed; the record will be delivered again");
                }
            }
            Err(e) => {
                tracing::warn!(function = %s.function, error = %aws_sdk_sqs::error::DisplayErrorContext(e), "DeleteMessageBatch failed; the records will be delivered again");
            }
        }
    }
}

/// The entries of one `DeleteMessageBatch` of `messages` (ten at most).
pub fn delete_entries(messages: &[&Message]) -> Vec<DeleteMessageBatchRequestEntry> {
    messages
        .iter()
        .enumerate()
        .filter_map(|(i, m)| {
            DeleteMessageBatchRequestEntry::builder()
                .id(format!("m{i}"))
                .receipt_handle(m.receipt_handle().unwrap_or_default())
                .build()
                .ok()
        })
        .collect()
}

/// The `SqsEvent` Lambda would send for these messages, built from Lambda's JSON shape.
pub fn event_for(messages: &[Message], queue_arn: &str, region: &str) -> Result<SqsEvent, String> {
    let records: Vec<Value> = messages
        .iter()
        .map(|m| record_json(m, queue_arn, region))
        .collect();
    serde_json::from_value(json!({ "Records": records }))
        .map_err(|e| format!("cannot build the SqsEvent: {e}"))
}

fn record_json(m: &Message, queue_arn: &str, region: &str) -> Value {
    let mut attributes = Map::new();
    if let Some(attrs) = m.attributes() {
        for (k, v) in attrs {
            attributes.insert(k.as_str().to_owned(), Value::String(v.clone()));
        }
    }
    let mut message_attributes = Map::new();
    if let Some(attrs) = m.message_attributes() {
        for (k, v) in attrs {
            message_attributes.insert(
                k.clone(),
                json!({
                    "stringValue": v.string_value(),
                    "binaryValue": v.binary_value().map(|b| base64(b.as_ref())),
                    "stringListValues": v.string_list_values(),
                    "binaryListValues": v.binary_list_values().iter().map(|b| base64(b.as_ref())).collect::<Vec<_>>(),
                    "dataType": v.data_type(),
                }),
            );
        }
    }
    json!({
        "messageId": m.message_id(),
        "receiptHandle": m.receipt_handle(),
        "body": m.body(),
        "attributes": attributes,
        "messageAttributes": message_attributes,
        "md5OfBody": m.md5_of_body(),
        "md5OfMessageAttributes": m.md5_of_message_attributes(),
        "eventSource": "aws:sqs",
        "eventSourceARN": queue_arn,
        "awsRegion": region,
    })
}

/// Standard base64 with padding (how Lambda renders binary attribute values).
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                let idx = usize::try_from((n >> (18 - 6 * i)) & 63).unwrap_or(0);
                out.push(char::from(ALPHABET[idx]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_rfc4648_vectors() {
        for (raw, enc) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(raw.as_bytes()), enc);
        }
    }

    #[test]
    fn event_has_lambda_shape() {
        let m = Message::builder()
            .message_id("m-1")
            .receipt_handle("rh-1")
            .body("{\"a\":1}")
            .attributes(MessageSystemAttributeName::ApproximateReceiveCount, "3")
            .message_attributes(
                "idempotency_key",
                aws_sdk_sqs::types::MessageAttributeValue::builder()
                    .data_type("String")
                    .string_value("TX-1#2")
                    .build()
                    .unwrap(),
            )
            .build();
        let ev = event_for(&[m], "arn:aws:sqs:us-east-1:123456789012:q", "us-east-1").unwrap();
        let r = &ev.records[0];
        assert_eq!(r.message_id.as_deref(), Some("m-1"));
        assert_eq!(r.receipt_handle.as_deref(), Some("rh-1"));
        assert_eq!(r.body.as_deref(), Some("{\"a\":1}"));
        assert_eq!(r.attributes["ApproximateReceiveCount"], "3");
        assert_eq!(
            r.message_attributes["idempotency_key"]
                .string_value
                .as_deref(),
            Some("TX-1#2")
        );
        assert_eq!(
            r.event_source_arn.as_deref(),
            Some("arn:aws:sqs:us-east-1:123456789012:q")
        );
        assert_eq!(r.event_source.as_deref(), Some("aws:sqs"));
        assert_eq!(r.aws_region.as_deref(), Some("us-east-1"));
    }
}
