//! An emulator of Lambda's DynamoDB-stream event source mapping, for a function that
//! reads the transactions table's stream beside the audit writer (the outbox
//! publisher): its own position in the stream; the mapping's filter applied before
//! batching (a record it rejects is never delivered, and costs no invocation); records
//! in stream order, in batches of up to `BatchSize`, each batch built as the JSON Lambda
//! sends and deserialized into `aws_lambda_events::dynamodb::Event`; a batch is
//! retried until it succeeds, from the `batchItemFailures` sequence number it reports
//! (the records before it are done), whole after an invocation error — halved first
//! with `BisectBatchOnFunctionError` — and after `MaximumRetryAttempts` its records
//! go to the on-failure destination (counted here) and the stream moves on. The next
//! batch waits for the one before it: order holds per shard (moto's tables have one).
//! In a chaos run an invocation can be killed mid-batch, as a timeout would.

use super::esm::KILL_WITHIN;
use super::stop::Stop;
use aws::audit::StreamChange;
use aws::item::{FlatItem, Scalar};
use aws_lambda_events::dynamodb::{Event, EventRecord};
use aws_lambda_events::streams::DynamoDbEventResponse;
use domain::policy::{RandomSource, SplitMix64};
use serde_json::{json, Map, Value};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use testkit::drain::{drain_stream, StreamPosition};

/// The function a stream mapping invokes: an `Event` in, a `DynamoDbEventResponse` out.
pub type StreamFunction = super::Invoke<Event, DynamoDbEventResponse>;

/// One stream event source mapping, with the settings of the template's
/// `Events: … Type: DynamoDB`.
#[derive(Debug, Clone)]
pub struct StreamEsmSettings {
    /// Function name, for logs.
    pub function: String,
    pub stream_arn: String,
    pub region: String,
    /// `BatchSize`.
    pub batch_size: usize,
    /// `MaximumRetryAttempts`: retries of a failing batch before its records go to
    /// the on-failure destination.
    pub max_retry_attempts: u32,
    /// `BisectBatchOnFunctionError`.
    pub bisect_on_error: bool,
    /// `FilterCriteria.Filters[].Pattern` (JSON), `None`: every record.
    pub filter: Option<Value>,
    /// Pause between reads of the stream when it has nothing new, and before a
    /// failed batch is retried.
    pub poll: Duration,
    /// Probability that an invocation is killed mid-batch (a chaos run).
    pub kill_probability: f64,
    pub seed: u64,
}

/// What a stream mapping did, readable while it runs.
#[derive(Debug, Default)]
pub struct StreamEsmStats {
    pub invocations: AtomicU64,
    /// Records delivered (a record delivered again counts again).
    pub records: AtomicU64,
    /// Records the filter rejected.
    pub filtered_out: AtomicU64,
    /// Batches that reported a failed record.
    pub reported_failures: AtomicU64,
    /// Invocations that failed as a whole (error, bad response).
    pub failed_invocations: AtomicU64,
    /// Invocations killed mid-batch (a chaos run).
    pub killed: AtomicU64,
    /// Records sent to the on-failure destination after the retries.
    pub discarded: AtomicU64,
    /// Reads of the stream that failed (made again).
    pub read_errors: AtomicU64,
    /// Passes over the stream (the first is pass 1), and the last that found the
    /// stream read to its end and every batch done (0: none yet).
    pub passes: AtomicU64,
    pub last_idle_pass: AtomicU64,
}

impl StreamEsmStats {
    pub fn get(&self, c: &AtomicU64) -> u64 {
        c.load(Ordering::SeqCst)
    }
}

/// Whether `event` (a record as Lambda's filter sees it: `{"dynamodb": {...}}`)
/// matches the filter `pattern`: every key of the pattern matches; an array lists the
/// accepted values (equal strings or numbers, `{"exists": true|false}`); an object
/// descends. A key absent from the event matches only rules that all say
/// `{"exists": false}`.
pub fn filter_matches(pattern: &Value, event: &Value) -> bool {
    match pattern {
        Value::Object(keys) => keys.iter().all(|(k, p)| match event.get(k) {
            Some(v) => filter_matches(p, v),
            None => only_absent(p),
        }),
        Value::Array(rules) => rules.iter().any(|rule| match rule {
            Value::Object(o) => o.get("exists").and_then(Value::as_bool) == Some(true),
            other => other == event,
        }),
        other => other == event,
    }
}

/// True when every rule under `pattern` accepts an absent key.
fn only_absent(pattern: &Value) -> bool {
    match pattern {
        Value::Object(keys) if keys.contains_key("exists") => {
            keys.get("exists").and_then(Value::as_bool) == Some(false)
        }
        Value::Object(keys) => keys.values().all(only_absent),
        Value::Array(rules) => !rules.is_empty() && rules.iter().all(only_absent),
        _ => false,
    }
}

/// An image in DynamoDB JSON, as Lambda's stream events carry it.
pub fn image_json(item: &FlatItem) -> Value {
    let mut m = Map::new();
    for (k, v) in item {
        let typed = match v {
            Scalar::S(s) => json!({ "S": s }),
            Scalar::N(n) => json!({ "N": n }),
            Scalar::Other(_) => json!({ "NULL": true }),
        };
        m.insert(k.clone(), typed);
    }
    Value::Object(m)
}

/// The record Lambda delivers for `change`, as JSON (the shape its filter reads).
pub fn record_json(change: &StreamChange, stream_arn: &str, region: &str) -> Value {
    let mut dynamodb = Map::new();
    dynamodb.insert(
        "ApproximateCreationDateTime".into(),
        json!(std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0)),
    );
    let key = change
        .new
        .as_ref()
        .or(change.old.as_ref())
        .and_then(|i| i.get(aws::item::attr::TRANSACTION_ID))
        .map(|k| image_json(&[(aws::item::attr::TRANSACTION_ID.to_owned(), k.clone())].into()))
        .unwrap_or_else(|| json!({}));
    dynamodb.insert("Keys".into(), key);
    if let Some(new) = &change.new {
        dynamodb.insert("NewImage".into(), image_json(new));
    }
    if let Some(old) = &change.old {
        dynamodb.insert("OldImage".into(), image_json(old));
    }
    dynamodb.insert("SequenceNumber".into(), json!(change.sequence_number));
    dynamodb.insert("SizeBytes".into(), json!(0));
    dynamodb.insert("StreamViewType".into(), json!("NEW_AND_OLD_IMAGES"));
    json!({
        "eventID": change.sequence_number,
        "eventName": change.event_name,
        "eventVersion": "1.1",
        "eventSource": "aws:dynamodb",
        "awsRegion": region,
        "eventSourceARN": stream_arn,
        "dynamodb": Value::Object(dynamodb),
    })
}

/// Starts the mapping; it runs until `stop`, then reads the stream once more and
/// delivers what it found.
pub fn spawn(
    streams: aws_sdk_dynamodbstreams::Client,
    settings: StreamEsmSettings,
    function: StreamFunction,
    stop: Stop,
) -> (tokio::task::JoinHandle<()>, Arc<StreamEsmStats>) {
    super::spawn_counted(|stats| run(streams, settings, function, stats, stop))
}

async fn run(
    streams: aws_sdk_dynamodbstreams::Client,
    s: StreamEsmSettings,
    function: StreamFunction,
    stats: Arc<StreamEsmStats>,
    mut stop: Stop,
) {
    let mut position = StreamPosition::default();
    let mut pending: VecDeque<Value> = VecDeque::new();
    let mut rng = SplitMix64::new(s.seed);
    let mut last = false;
    loop {
        let pass = stats.passes.fetch_add(1, Ordering::SeqCst) + 1;
        let mut read = 0;
        match drain_stream(&streams, &s.stream_arn, &mut position).await {
            Ok(changes) => {
                read = changes.len();
                for c in &changes {
                    let record = record_json(c, &s.stream_arn, &s.region);
                    if s.filter.as_ref().is_none_or(|f| filter_matches(f, &record)) {
                        pending.push_back(record);
                    } else {
                        stats.filtered_out.fetch_add(1, Ordering::SeqCst);
                    }
                }
            }
            Err(e) => {
                stats.read_errors.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(function = %s.function, error = %e, "stream read failed; reading again");
            }
        }
        while !pending.is_empty() {
            deliver_first_batch(&s, &function, &stats, &mut pending, &mut rng).await;
        }
        if read == 0 {
            stats.last_idle_pass.store(pass, Ordering::SeqCst);
        }
        if last {
            break;
        }
        if read == 0 && stop.sleep(s.poll).await {
            // One last pass so that nothing written before the stop is missed.
            last = true;
        }
    }
}

/// Delivers the batch at the head of `pending` until it is done or discarded.
async fn deliver_first_batch(
    s: &StreamEsmSettings,
    function: &StreamFunction,
    stats: &StreamEsmStats,
    pending: &mut VecDeque<Value>,
    rng: &mut SplitMix64,
) {
    let mut size = s.batch_size.clamp(1, pending.len().max(1));
    let mut retries = 0u32;
    loop {
        let batch: Vec<Value> = pending.iter().take(size).cloned().collect();
        let outcome = invoke(s, function, stats, &batch, rng).await;
        let failed_from = match outcome {
            Invoked::Done(None) => None,
            Invoked::Done(Some(seq)) => {
                stats.reported_failures.fetch_add(1, Ordering::Relaxed);
                match batch
                    .iter()
                    .position(|r| sequence_of(r) == Some(seq.as_str()))
                {
                    Some(i) => Some(i),
                    // A sequence number not in the batch fails the whole batch.
                    None => Some(0),
                }
            }
            Invoked::Failed => {
                if s.bisect_on_error && size > 1 {
                    // Halved: the first half is retried, the rest follows it.
                    size = size.div_ceil(2);
                    continue;
                }
                Some(0)
            }
        };
        match failed_from {
            None => {
                pending.drain(..batch.len());
                return;
            }
            Some(i) => {
                // The records before the failed one are done.
                pending.drain(..i);
                size = (batch.len() - i).max(1);
                retries += 1;
                if retries > s.max_retry_attempts {
                    let n = size.min(pending.len());
                    pending.drain(..n);
                    stats.discarded.fetch_add(n as u64, Ordering::SeqCst);
                    tracing::error!(function = %s.function, records = n, "stream batch retries exhausted: records sent to the on-failure destination");
                    return;
                }
                tokio::time::sleep(s.poll).await;
            }
        }
    }
}

enum Invoked {
    /// The response: the first failed sequence number reported, if any.
    Done(Option<String>),
    /// An invocation error, a bad event, or a kill.
    Failed,
}

fn sequence_of(record: &Value) -> Option<&str> {
    record.get("dynamodb")?.get("SequenceNumber")?.as_str()
}

async fn invoke(
    s: &StreamEsmSettings,
    function: &StreamFunction,
    stats: &StreamEsmStats,
    batch: &[Value],
    rng: &mut SplitMix64,
) -> Invoked {
    let records: Result<Vec<EventRecord>, _> = batch
        .iter()
        .map(|r| serde_json::from_value::<EventRecord>(r.clone()))
        .collect();
    let records = match records {
        Ok(r) => r,
        Err(e) => {
            stats.failed_invocations.fetch_add(1, Ordering::Relaxed);
            tracing::error!(function = %s.function, error = %e, "a stream record does not deserialize");
            return Invoked::Failed;
        }
    };
    let mut event = Event::default();
    event.records = records;
    stats.invocations.fetch_add(1, Ordering::Relaxed);
    stats
        .records
        .fetch_add(batch.len() as u64, Ordering::Relaxed);
    let kill = s.kill_probability > 0.0 && rng.next_unit() < s.kill_probability;
    let call = function(event);
    let result = if kill {
        let after = KILL_WITHIN.mul_f64(rng.next_unit());
        match tokio::time::timeout(after, call).await {
            Ok(r) => r,
            Err(_) => {
                stats.killed.fetch_add(1, Ordering::Relaxed);
                return Invoked::Failed;
            }
        }
    } else {
        call.await
    };
    match result {
        Ok(response) => {
            let first = response
                .batch_item_failures
                .iter()
                .filter_map(|f| f.item_identifier.clone())
                .min_by(|a, b| a.len().cmp(&b.len()).then_with(|| a.cmp(b)));
            match (first, response.batch_item_failures.is_empty()) {
                (Some(seq), _) => Invoked::Done(Some(seq)),
                (None, true) => Invoked::Done(None),
                // A failure without an identifier fails the whole batch.
                (None, false) => {
                    stats.failed_invocations.fetch_add(1, Ordering::Relaxed);
                    Invoked::Failed
                }
            }
        }
        Err(e) => {
            stats.failed_invocations.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(function = %s.function, error = %e, "stream invocation failed; the batch is retried");
            Invoked::Failed
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(seq: &str, status: &str, publishing_since: Option<&str>) -> StreamChange {
        let mut new: FlatItem = [
            ("transaction_id".to_owned(), Scalar::S("TX-000001".into())),
            ("status".to_owned(), Scalar::S(status.into())),
        ]
        .into();
        if let Some(p) = publishing_since {
            new.insert("publishing_since".into(), Scalar::S(p.into()));
        }
        StreamChange {
            sequence_number: seq.into(),
            event_name: "MODIFY".into(),
            old: None,
            new: Some(new),
        }
    }

    /// The publisher's filter: SENDING and not yet claimed.
    #[test]
    fn the_filter_takes_unclaimed_sending_images_only() {
        let pattern = json!({"dynamodb": {"NewImage": {
            "status": {"S": ["SENDING"]},
            "publishing_since": {"S": [{"exists": false}]}
        }}});
        let arn = "arn:aws:dynamodb:us-east-1:1:table/t/stream/x";
        let m = |c: &StreamChange| filter_matches(&pattern, &record_json(c, arn, "us-east-1"));
        assert!(m(&change("1", "SENDING", None)));
        assert!(!m(&change(
            "2",
            "SENDING",
            Some("2026-12-05T10:00:00.000Z")
        )));
        assert!(!m(&change("3", "IN_PROGRESS", None)));
        let removed = StreamChange {
            new: None,
            ..change("4", "SENDING", None)
        };
        assert!(!m(&removed), "a REMOVE has no NewImage");
        let flat = json!({"dynamodb": {"NewImage": {"publishing_since": [{"exists": false}]}}});
        assert!(filter_matches(
            &flat,
            &record_json(&change("5", "SENDING", None), arn, "r")
        ));
    }

    /// The record deserializes as Lambda's event and keeps the images.
    #[test]
    fn a_record_is_the_event_lambda_sends() {
        let c = change("100000000000000000007", "SENDING", None);
        let r: EventRecord = serde_json::from_value(record_json(&c, "arn:s", "us-east-1")).unwrap();
        assert_eq!(
            r.change.sequence_number.as_deref(),
            Some("100000000000000000007")
        );
        let v = serde_json::to_value(&r.change.new_image).unwrap();
        assert_eq!(v["status"], json!({"S": "SENDING"}));
    }
}
