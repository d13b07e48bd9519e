//! One retry cycle measured against moto through the real adapters and handlers: a
//! transaction is started with the library operation; 1. the response handler (built by
//! `response_handler::wiring`) gets the CANCELLED response for attempt 1 as an SQS event,
//! `deliveries` times (1 = happy path, 2 = delivered twice); 2. the retry handler gets
//! the retry event for attempt 2 the same way; 3. the table's stream is read and every
//! change goes through the audit writer, `deliveries` times. Each function runs on
//! clients of its own [`CallMeter`] (API calls and moto's `ConsumedCapacity`); the
//! stream's images give each write's item before and after, from which
//! [`dynamodb_billed_units`] computes what DynamoDB bills. What the handlers left behind
//! is checked (SCHEDULED after A; IN_PROGRESS attempt 2 and one request queued after B),
//! so a broken path fails the benchmark instead of being priced. Results:
//! `docs/benchmarks.md#billable-operations-per-retry-cycle-measured-against-moto`.

use crate::dynamodb_rules::{dynamodb_billed_units, item_size, Billed, DynamoOp};
use crate::model::CycleBillables;
use aws::audit::{AuditWriter, Audited, StreamChange};
use aws::config::{
    vars, AuditWriterConfig, PublisherConfig, ResponseHandlerConfig, RetryHandlerConfig, StackNames,
};
use aws::item::{flat_from_dynamodb, FlatItem, Scalar};
use aws_config::SdkConfig;
use aws_lambda_events::sqs::{SqsBatchResponse, SqsEvent};
use domain::decide::Delivery;
use domain::exec::StartPorts;
use domain::ports::{Clock, SystemClock};
use domain::{MaxAttempts, Payload, Request, Status, TransactionId};
use runtime::Metrics;
use sandbox::local::stream_esm::{filter_matches, record_json};
use std::collections::HashMap;
use testkit::drain::{drain_stream, StreamPosition};
use testkit::memory::MemoryQueue;
use testkit::meter::{CallCounts, CallMeter};
use testkit::provision::{provision, provision_for, table_definitions, IndexDef, Provisioned};
use thiserror::Error;

#[derive(Debug, Error)]
pub enum CycleError {
    #[error("{0}")]
    Setup(String),
    #[error("{step}: {detail}")]
    Step { step: &'static str, detail: String },
}

fn step(step: &'static str, detail: impl std::fmt::Display) -> CycleError {
    CycleError::Step {
        step,
        detail: detail.to_string(),
    }
}

/// What to measure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CycleSpec {
    /// Bytes of the request payload (JSON text).
    pub payload_bytes: usize,
    /// Deliveries of every message: 1 (happy path) or 2 (every message twice).
    pub deliveries: u32,
    /// Direct (the retry handler publishes the request) or outbox (the retry handler
    /// leaves the record SENDING; the publisher, given the stream record as its event
    /// source delivers it, claims it, publishes the request to the FIFO request queue
    /// and marks it IN_PROGRESS).
    pub delivery: Delivery,
}

/// One state-item write as the stream saw it, with what DynamoDB bills for it.
#[derive(Debug, Clone, PartialEq)]
pub struct Transition {
    pub from: String,
    pub to: String,
    pub item_bytes_before: usize,
    pub item_bytes_after: usize,
    pub billed: Billed,
}

/// Everything one cycle did.
#[derive(Debug, Clone, PartialEq)]
pub struct CycleMeasurement {
    pub spec: CycleSpec,
    /// Calls of the response handler, first delivery only and over all deliveries.
    pub response_first: CallCounts,
    pub response: CallCounts,
    pub retry_first: CallCounts,
    pub retry: CallCounts,
    /// Calls of the publisher (outbox delivery; zero in direct), first delivery only
    /// and over all deliveries, and the stream records its filter let through.
    pub publisher_first: CallCounts,
    pub publisher: CallCounts,
    pub publisher_records: u64,
    pub audit: CallCounts,
    /// Starting the transaction (once per transaction, not per retry).
    pub start: CallCounts,
    /// The state-item writes of the cycle (four; five in outbox delivery).
    pub transitions: Vec<Transition>,
    /// Writes whose condition failed (duplicates), billed.
    pub failed_conditions: Billed,
    pub audit_billed: Billed,
    /// The largest audit item the cycle left (one item per handler run).
    pub audit_item_bytes: usize,
    pub payload_read_billed: Billed,
    pub payload_item_bytes: usize,
    pub start_billed: Billed,
    /// Size of the request message (body + attributes) on the request queue.
    pub request_message_bytes: usize,
    pub requests_on_queue: usize,
    /// Size of the retry event in the schedule's target input.
    pub retry_event_bytes: usize,
    pub stream_records: u64,
    /// The circuit breaker's count item (one UpdateItem per response batch), billed
    /// as one write of that item, and its size.
    pub breaker_count_billed: Billed,
    pub breaker_count_bytes: usize,
    /// One strongly consistent GetItem of the breaker's own item (absent while it was
    /// never changed: the minimum read unit).
    pub breaker_read_billed: Billed,
}

/// AWS round trips in a set of counts.
pub fn round_trips(c: &CallCounts) -> u64 {
    c.dynamodb_requests() + c.schedule_creates + c.schedule_deletes + c.sends
}

impl CycleMeasurement {
    /// DynamoDB write units of the state item (table + index) for the four transitions.
    pub fn state_billed(&self) -> Billed {
        let mut b = Billed::default();
        for t in &self.transitions {
            b += t.billed;
        }
        b
    }

    /// Write units by DynamoDB's rules: state item + index + failed conditions + audit.
    pub fn rules_write_units(&self) -> f64 {
        self.state_billed().write() + self.failed_conditions.write() + self.audit_billed.write()
    }

    pub fn rules_read_units(&self) -> f64 {
        self.payload_read_billed.read
    }

    /// What moto reported (`ConsumedCapacity`) for the same calls.
    pub fn moto_write_units(&self) -> f64 {
        self.response.total_write_units()
            + self.retry.total_write_units()
            + self.publisher.total_write_units()
            + self.audit.total_write_units()
    }

    pub fn moto_read_units(&self) -> f64 {
        self.response.total_read_units()
            + self.retry.total_read_units()
            + self.publisher.total_read_units()
            + self.audit.total_read_units()
    }

    /// The per-retry billables the cost model prices.
    pub fn billables(&self) -> CycleBillables {
        CycleBillables {
            delivery: self.spec.delivery,
            deliveries: self.spec.deliveries,
            write_units: self.rules_write_units(),
            read_units: self.rules_read_units(),
            request_sends: self.retry.sends + self.publisher.sends,
            request_message_bytes: self.request_message_bytes,
            scheduler_invocations: self.response.schedule_creates,
            retry_event_bytes: self.retry_event_bytes,
            response_round_trips: round_trips(&self.response),
            retry_round_trips: round_trips(&self.retry),
            audit_round_trips: round_trips(&self.audit),
            publisher_records: self.publisher_records,
            publisher_round_trips: round_trips(&self.publisher),
            stream_records: self.stream_records,
            breaker_writes: self.response.breaker_writes,
            breaker_write_units: self.breaker_count_billed.write(),
            breaker_read_units: self.breaker_read_billed.read,
        }
    }
}

/// A JSON payload of exactly `bytes` bytes (at least 32).
pub fn payload_of(bytes: usize, tag: &str) -> Result<Payload, CycleError> {
    let head = format!(r#"{{"order":"{tag}","pad":""#);
    let tail = "\"}";
    let pad = bytes
        .checked_sub(head.len() + tail.len())
        .ok_or_else(|| CycleError::Setup(format!("payload of {bytes} bytes is too small")))?;
    let text = format!("{head}{}{tail}", "x".repeat(pad));
    Payload::from_json(&text).map_err(|e| CycleError::Setup(e.to_string()))
}

/// An SQS event of one message, as Lambda's event source mapping delivers it.
pub fn sqs_event(body: &str, queue_arn: &str, receive_count: u32) -> Result<SqsEvent, CycleError> {
    let id = format!("bench-{receive_count}-{}", body.len());
    sqs_batch(&[sqs_record(&id, body, queue_arn, receive_count)])
}

/// One SQS record of an event source mapping's event.
fn sqs_record(
    message_id: &str,
    body: &str,
    queue_arn: &str,
    receive_count: u32,
) -> serde_json::Value {
    serde_json::json!({
        "messageId": message_id,
        "receiptHandle": "bench-receipt",
        "body": body,
        "attributes": {
            "ApproximateReceiveCount": receive_count.to_string(),
            "SentTimestamp": "1791028800000",
            "SenderId": "BENCH",
            "ApproximateFirstReceiveTimestamp": "1791028800010"
        },
        "messageAttributes": {},
        "md5OfBody": "00000000000000000000000000000000",
        "eventSource": "aws:sqs",
        "eventSourceARN": queue_arn,
        "awsRegion": testkit::moto::LOCAL_REGION
    })
}

fn sqs_batch(records: &[serde_json::Value]) -> Result<SqsEvent, CycleError> {
    serde_json::from_value(serde_json::json!({ "Records": records }))
        .map_err(|e| CycleError::Setup(format!("SQS event: {e}")))
}

fn no_failures(
    step_name: &'static str,
    r: Result<SqsBatchResponse, runtime::batch::BatchError>,
) -> Result<(), CycleError> {
    let r = r.map_err(|e| step(step_name, e))?;
    if r.batch_item_failures.is_empty() {
        Ok(())
    } else {
        Err(step(
            step_name,
            format!("batch item failures: {:?}", r.batch_item_failures),
        ))
    }
}

fn lookup(env: Vec<(&'static str, String)>) -> impl Fn(&str) -> Option<String> {
    let map: HashMap<String, String> = env.into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
    move |k| map.get(k).cloned()
}

fn status_of(item: Option<&FlatItem>) -> String {
    match item.and_then(|i| i.get("status")) {
        Some(Scalar::S(s)) => s.clone(),
        _ => "-".to_owned(),
    }
}

/// The transactions table's secondary indexes and key, from the provisioning data.
fn transactions_table_shape(names: &StackNames) -> (Vec<IndexDef>, Vec<&'static str>) {
    table_definitions(names)
        .into_iter()
        .find(|t| t.logical_id == "TransactionsTable")
        .map(|t| (t.indexes, vec![t.hash_key]))
        .unwrap_or_default()
}

/// One write of the failure path, billed by the rules: the table and each index apart.
#[derive(Debug, Clone, PartialEq)]
pub struct FailureWrite {
    pub label: &'static str,
    pub table: f64,
    pub failed_index: f64,
    pub reconcile_index: f64,
}

/// The failure path's writes as the domain decides them, billed by the rules on the
/// items they leave (no AWS call): the last attempt answered CANCELLED
/// (IN_PROGRESS → FAILED, the failed-index entry appears), then an operator replay
/// (FAILED → SCHEDULING, the failed-index entry goes and the cycle's reconcile-index
/// entry appears).
pub fn failure_path(max_attempts: u32) -> Result<Vec<FailureWrite>, CycleError> {
    use domain::decide::{decide, Input, Known};
    use domain::policy::FixedRandom;
    use domain::{Context, Effect, PolicySet, Response, Timestamp, TransactionRecord};
    let setup = |e: &dyn std::fmt::Display| CycleError::Setup(e.to_string());
    let names = StackNames::new("bench");
    let (indexes, table_keys) = transactions_table_shape(&names);
    let only = |name: &str| -> Vec<IndexDef> {
        indexes.iter().filter(|i| i.name == name).cloned().collect()
    };
    let tx = TransactionId::parse("TX-BENCH-FAILURE-000001").map_err(|e| setup(&e))?;
    let max = MaxAttempts::new(max_attempts).map_err(|e| setup(&e))?;
    let mut r = TransactionRecord::started(tx.clone(), max, Timestamp::from_millis(0));
    r.current_attempt = domain::Attempt::new(max_attempts).map_err(|e| setup(&e))?;
    let ctx = Context::new(
        Timestamp::from_millis(3_600_000),
        PolicySet::default(),
        domain::defaults::RECONCILE_SHARDS,
        std::time::Duration::from_secs(900),
    );
    let answer = Response::parse(&format!(
        r#"{{"transaction_id":"{tx}","attempt":{max_attempts},"outcome":"CANCELLED","reason":"NOT_AVAILABLE"}}"#
    ))
    .map_err(|e| setup(&e))?;
    let steps = [
        (
            "IN_PROGRESS → FAILED (last attempt CANCELLED)",
            Input::Response(answer),
        ),
        (
            "FAILED → SCHEDULING (operator replay)",
            Input::Replay {
                transaction_id: tx.clone(),
                budget: max_attempts,
            },
        ),
    ];
    let mut out = Vec::new();
    for (label, input) in steps {
        let plan = decide(&input, Known::Record(&r), None, &ctx, &mut FixedRandom(0.5));
        let w = plan
            .iter()
            .find_map(|e| match e {
                Effect::Write(w) => Some(w),
                _ => None,
            })
            .ok_or_else(|| CycleError::Setup(format!("{label}: no write decided")))?;
        let next = w.apply(&r).map_err(|e| setup(&e))?;
        let before = flat_from_dynamodb(&aws::item::record_to_item(&r));
        let after = flat_from_dynamodb(&aws::item::record_to_item(&next));
        let bill = |ix: &[IndexDef]| {
            dynamodb_billed_units(
                DynamoOp::Write {
                    before: Some(&before),
                    after: Some(&after),
                    transactional: false,
                },
                ix,
                &table_keys,
            )
        };
        out.push(FailureWrite {
            label,
            table: bill(&[]).table_write,
            failed_index: bill(&only(aws::config::FAILED_INDEX)).index_write,
            reconcile_index: bill(&only(aws::config::RECONCILE_INDEX)).index_write,
        });
        r = next;
    }
    Ok(out)
}

/// Measures one cycle on a fresh stack (unique names) on the moto server of `sdk`.
pub async fn measure(sdk: &SdkConfig, spec: CycleSpec) -> Result<CycleMeasurement, CycleError> {
    let deliveries = spec.deliveries.max(1);
    let outbox = spec.delivery.is_outbox();
    let names = StackNames::new(&testkit::moto::unique_prefix("bench"));
    let p: Provisioned = provision_for(sdk, &names, outbox)
        .await
        .map_err(|e| CycleError::Setup(e.to_string()))?;
    // Each function's environment as the template sets it for this delivery.
    let env_for = |f: &str| {
        let mut v = p.env_for(f);
        v.push((
            vars::REQUEST_DELIVERY.name,
            spec.delivery.as_str().to_owned(),
        ));
        v
    };
    let (indexes, table_keys) = transactions_table_shape(&names);
    let ddb = aws_sdk_dynamodb::Client::new(sdk);
    let sqs = aws_sdk_sqs::Client::new(sdk);
    let sched = aws_sdk_scheduler::Client::new(sdk);
    let streams = aws_sdk_dynamodbstreams::Client::new(sdk);
    let mut position = StreamPosition::default();

    let response_cfg = ResponseHandlerConfig::from_lookup(&lookup(env_for("response-handler")))
        .map_err(|e| CycleError::Setup(e.to_string()))?;
    let retry_cfg = RetryHandlerConfig::from_lookup(&lookup(env_for("retry-handler")))
        .map_err(|e| CycleError::Setup(e.to_string()))?;
    let publisher_cfg = PublisherConfig::from_lookup(&lookup(env_for(publisher::FUNCTION)))
        .map_err(|e| CycleError::Setup(e.to_string()))?;
    let audit_cfg = AuditWriterConfig::from_lookup(&lookup(p.env_for("audit-writer")))
        .map_err(|e| CycleError::Setup(e.to_string()))?;

    // Start the transaction through the library operation (request 1 kept in memory:
    // it is not part of the retry cycle).
    let tx_text = format!(
        "TX-BENCH-{}-{}x{}",
        names.prefix, spec.payload_bytes, deliveries
    );
    let tx = TransactionId::parse(&tx_text).map_err(|e| CycleError::Setup(e.to_string()))?;
    let payload = payload_of(spec.payload_bytes, &tx_text)?;
    let start_meter = CallMeter::new().with_payloads_table(&names.payloads_table);
    let start_store =
        aws::dynamo::DynamoStore::new(start_meter.dynamodb(sdk), &names.transactions_table)
            .with_payloads_table(&names.payloads_table);
    let first_requests: MemoryQueue<Request> = MemoryQueue::new();
    let ports = StartPorts {
        store: &start_store,
        requests: &first_requests,
    };
    let ctx = runtime::Settings {
        delivery: spec.delivery,
        ..runtime::Settings::default()
    }
    .context(SystemClock.now());
    let max = MaxAttempts::new(3).map_err(|e| CycleError::Setup(e.to_string()))?;
    runtime::ops::start_transaction(
        &ports,
        tx.clone(),
        payload.clone(),
        max,
        domain::defaults::ANSWER_TIMEOUT,
        &ctx,
    )
    .await
    .map_err(|e| step("start", e))?;
    let mut start_changes = drain(&streams, &p, &mut position).await?;
    if outbox {
        // The start left the record SENDING: the publisher sends request 1 (kept in
        // memory, as above) and marks it IN_PROGRESS, before the cycle.
        let base = publisher::wiring::publisher(sdk, &publisher_cfg)
            .map_err(|e| CycleError::Setup(e.to_string()))?;
        let first = publisher::Publisher {
            store: base.store,
            requests: MemoryQueue::<Request>::new(),
            notes: base.notes,
            clock: base.clock,
            settings: base.settings,
            concurrency: base.concurrency,
            seeds: base.seeds,
            pacer: None,
            namespace: base.namespace,
        };
        let event = stream_event(&start_changes, &p)?;
        let metrics = Metrics::new("Bench", publisher::FUNCTION);
        no_stream_failures(
            "publisher (start)",
            first.handle_event(&event, &metrics).await,
        )?;
        start_changes.extend(drain(&streams, &p, &mut position).await?);
    }
    let payload_item = get_item(&ddb, &names.payloads_table, &tx).await?;
    let record_item = start_changes.iter().rev().find_map(|c| c.new.clone());
    let mut start_billed = Billed::default();
    for item in [record_item.as_ref(), payload_item.as_ref()] {
        start_billed += dynamodb_billed_units(
            DynamoOp::Write {
                before: None,
                after: item,
                transactional: true,
            },
            &indexes,
            &table_keys,
        );
    }

    // 1. The response handler, as its Lambda main builds it, with metered adapters.
    let response_meter = CallMeter::new().with_breaker_table(&names.breaker_table);
    let a =
        response_handler::wiring::response_handler_on(&response_meter.clients(sdk), &response_cfg);
    let metrics = Metrics::new("Bench", response_handler::FUNCTION);
    let body = format!(
        r#"{{"transaction_id":"{tx_text}","attempt":1,"outcome":"CANCELLED","reason":"NOT_AVAILABLE"}}"#
    );
    let (response_first, response) = sqs_deliveries(
        "response handler",
        &response_meter,
        &body,
        &p.response.arn,
        deliveries,
        |event| a.handle_event(event, &metrics),
    )
    .await?;
    let a_changes = drain(&streams, &p, &mut position).await?;
    let after_a = a_changes.last().and_then(|c| c.new.clone());
    if status_of(after_a.as_ref()) != Status::Scheduled.as_str() {
        return Err(step(
            "response handler",
            format!(
                "expected SCHEDULED, the stream says {}",
                status_of(after_a.as_ref())
            ),
        ));
    }

    // 2. The retry handler, same way.
    let retry_meter = CallMeter::new()
        .with_payloads_table(&retry_cfg.payloads_table)
        .with_breaker_table(&names.breaker_table);
    let b = retry_handler::wiring::retry_handler_on(&retry_meter.clients(sdk), &retry_cfg)
        .map_err(|e| CycleError::Setup(e.to_string()))?;
    let metrics = Metrics::new("Bench", retry_handler::FUNCTION);
    let body =
        format!(r#"{{"transaction_id":"{tx_text}","origin":"RETRY_SCHEDULER","attempt":2}}"#);
    let (retry_first, retry) = sqs_deliveries(
        "retry handler",
        &retry_meter,
        &body,
        &p.retry.arn,
        deliveries,
        |event| b.handle_event(event, &metrics),
    )
    .await?;
    let b_changes = drain(&streams, &p, &mut position).await?;
    let after_retry_handler = b_changes.last().and_then(|c| c.new.clone());

    // 2b. Outbox delivery: the publisher, as its Lambda main builds it with metered
    // adapters, given the SENDING record as its event source delivers it (the
    // template's filter applied to the stream), `deliveries` times.
    let publisher_meter = CallMeter::new().with_payloads_table(&names.payloads_table);
    let mut publisher_first = CallCounts::default();
    let mut publisher_records = 0;
    let mut p_changes = Vec::new();
    if outbox {
        let pb = publisher::wiring::publisher_on(&publisher_meter.clients(sdk), &publisher_cfg)
            .map_err(|e| CycleError::Setup(e.to_string()))?;
        let filter: serde_json::Value =
            serde_json::from_str(sandbox::local::stack::template::PUBLISHER_FILTER)
                .map_err(|e| CycleError::Setup(e.to_string()))?;
        let passed: Vec<StreamChange> = b_changes
            .iter()
            .filter(|c| {
                let record =
                    record_json(c, &p.transactions_stream_arn, testkit::moto::LOCAL_REGION);
                filter_matches(&filter, &record)
            })
            .cloned()
            .collect();
        let event = stream_event(&passed, &p)?;
        let metrics = Metrics::new("Bench", publisher::FUNCTION);
        let (pb, event, metrics) = (&pb, &event, &metrics);
        (publisher_first, _) = each_delivery(&publisher_meter, deliveries, |_| async move {
            no_stream_failures("publisher", pb.handle_event(event, metrics).await)
        })
        .await?;
        publisher_records = passed.len() as u64 * u64::from(deliveries);
        p_changes = drain(&streams, &p, &mut position).await?;
    }
    let publisher_calls = publisher_meter.snapshot();
    let after_b = p_changes
        .last()
        .and_then(|c| c.new.clone())
        .or(after_retry_handler.clone());
    let attempt_after_b = match after_b.as_ref().and_then(|i| i.get("current_attempt")) {
        Some(Scalar::N(n)) => n.clone(),
        _ => "-".into(),
    };
    if status_of(after_b.as_ref()) != Status::InProgress.as_str() || attempt_after_b != "2" {
        return Err(step(
            "retry handler",
            format!(
                "expected IN_PROGRESS attempt 2, the stream says {} attempt {attempt_after_b}",
                status_of(after_b.as_ref())
            ),
        ));
    }

    // 3. The audit writer. The changes of one handler run are written milliseconds
    // apart, so the table's stream hands them to the audit writer in one batch: each
    // run's changes go through `apply_batch` together (one UpdateItem per run, holding
    // that run's entries), `deliveries` times. After every write the audit item is read
    // back and sized (Maps included); the write is billed by the larger of the item
    // before and after it, as DynamoDB bills an UpdateItem.
    let audit_meter = CallMeter::new();
    let writer = AuditWriter::new(
        audit_meter.dynamodb(sdk),
        &audit_cfg.audit_table,
        audit_cfg.retention_days,
    );
    let cycle_changes: Vec<&StreamChange> = a_changes
        .iter()
        .chain(b_changes.iter())
        .chain(p_changes.iter())
        .collect();
    let mut audit_billed = Billed::default();
    let mut audit_item_bytes = 0;
    let mut audit_entries = 0;
    let mut audit_sizes: HashMap<String, usize> = HashMap::new();
    for run in [&a_changes, &b_changes, &p_changes] {
        if run.is_empty() {
            continue;
        }
        for _ in 0..deliveries {
            let batch = writer
                .apply_batch(run.iter().map(|c| (c.old.as_ref(), c.new.as_ref())))
                .await;
            let mut groups: Vec<String> = Vec::new();
            for r in &batch.results {
                match r {
                    Ok(Audited::Written { entry, .. }) => {
                        audit_entries += 1;
                        if !groups.contains(&entry.group_key()) {
                            groups.push(entry.group_key());
                        }
                    }
                    Ok(Audited::Skipped) => {}
                    Err(e) => return Err(step("audit writer", e)),
                }
            }
            for group in groups {
                let after = audit_item_size(&ddb, &audit_cfg.audit_table, &tx_text, &group).await?;
                let before = audit_sizes.insert(group, after).unwrap_or(0);
                audit_item_bytes = audit_item_bytes.max(after);
                audit_billed += dynamodb_billed_units(
                    DynamoOp::SizedWrite {
                        before_bytes: before,
                        after_bytes: after,
                    },
                    &[],
                    &["transaction_id", "audit_key"],
                );
            }
        }
    }
    if audit_entries != cycle_changes.len() * deliveries as usize {
        return Err(step(
            "audit writer",
            format!(
                "{audit_entries} entries written for {} changes delivered {deliveries} times",
                cycle_changes.len()
            ),
        ));
    }
    let audit = audit_meter.snapshot();

    // What DynamoDB bills for the state item's writes.
    let transitions: Vec<Transition> = cycle_changes
        .iter()
        .map(|c| Transition {
            from: status_of(c.old.as_ref()),
            to: status_of(c.new.as_ref()),
            item_bytes_before: c.old.as_ref().map(item_size).unwrap_or(0),
            item_bytes_after: c.new.as_ref().map(item_size).unwrap_or(0),
            billed: dynamodb_billed_units(
                DynamoOp::Write {
                    before: c.old.as_ref(),
                    after: c.new.as_ref(),
                    transactional: false,
                },
                &indexes,
                &table_keys,
            ),
        })
        .collect();
    let mut failed_conditions = Billed::default();
    for (n, existing) in [
        (response.failed_conditions, after_a.as_ref()),
        (retry.failed_conditions, after_retry_handler.as_ref()),
        (publisher_calls.failed_conditions, after_b.as_ref()),
    ] {
        for _ in 0..n {
            failed_conditions += dynamodb_billed_units(
                DynamoOp::FailedCondition { existing },
                &indexes,
                &table_keys,
            );
        }
    }
    let mut payload_read_billed = Billed::default();
    for _ in 0..(retry.payload_reads + publisher_calls.payload_reads) {
        payload_read_billed += dynamodb_billed_units(
            DynamoOp::Read {
                item: payload_item.as_ref(),
                consistent: true,
            },
            &[],
            &["transaction_id"],
        );
    }

    // The request on the request queue, and the retry event in the schedule.
    let (requests_on_queue, request_message_bytes) =
        request_messages(&sqs, &p.request.url, &tx_text).await?;
    if requests_on_queue != 1 {
        return Err(step(
            "request queue",
            format!("expected exactly one request for attempt 2, found {requests_on_queue}"),
        ));
    }
    let schedule_name = match after_a.as_ref().and_then(|i| i.get("schedule_name")) {
        Some(Scalar::S(s)) => s.clone(),
        _ => return Err(step("schedule", "the SCHEDULED item has no schedule_name")),
    };
    let schedule = sched
        .get_schedule()
        .group_name(&names.schedule_group)
        .name(&schedule_name)
        .send()
        .await
        .map_err(|e| {
            step(
                "GetSchedule",
                aws_sdk_scheduler::error::DisplayErrorContext(e),
            )
        })?;
    let retry_event_bytes = schedule
        .target()
        .map(|t| t.input().unwrap_or("").len())
        .unwrap_or(0);

    // The breaker's items: its count bucket (written by the response handler) and its
    // own item (read by both handlers; absent while the breaker never changed).
    let (breaker_count_bytes, breaker_item) = breaker_items(&ddb, &names.breaker_table).await?;
    let breaker_count_billed = breaker_count_write(breaker_count_bytes);
    let breaker_read_billed = dynamodb_billed_units(
        DynamoOp::Read {
            item: breaker_item.as_ref(),
            consistent: true,
        },
        &[],
        &["pk", "sk"],
    );

    Ok(CycleMeasurement {
        spec,
        response_first,
        response,
        retry_first,
        retry,
        publisher_first,
        publisher: publisher_calls,
        publisher_records,
        audit,
        start: start_meter.snapshot(),
        transitions,
        failed_conditions,
        audit_billed,
        audit_item_bytes,
        payload_read_billed,
        payload_item_bytes: payload_item.as_ref().map(item_size).unwrap_or(0),
        start_billed,
        request_message_bytes,
        requests_on_queue,
        retry_event_bytes,
        stream_records: (cycle_changes.len() as u64) * u64::from(deliveries),
        breaker_count_billed,
        breaker_count_bytes,
        breaker_read_billed,
    })
}

/// Runs `deliver(n)` for each delivery `n` of `1..=deliveries`; the meter's counts
/// after the first delivery and after all.
async fn each_delivery<F, Fut>(
    meter: &CallMeter,
    deliveries: u32,
    deliver: F,
) -> Result<(CallCounts, CallCounts), CycleError>
where
    F: Fn(u32) -> Fut,
    Fut: std::future::Future<Output = Result<(), CycleError>>,
{
    let mut first = CallCounts::default();
    for n in 1..=deliveries {
        deliver(n).await?;
        if n == 1 {
            first = meter.snapshot();
        }
    }
    Ok((first, meter.snapshot()))
}

/// `body` on the queue `arn`, `deliveries` times, each time an SQS event through
/// `handle` (a handler's `handle_event`) answered without a failed record; the
/// meter's counts after the first delivery and after all.
async fn sqs_deliveries<F, Fut>(
    who: &'static str,
    meter: &CallMeter,
    body: &str,
    arn: &str,
    deliveries: u32,
    handle: F,
) -> Result<(CallCounts, CallCounts), CycleError>
where
    F: Fn(SqsEvent) -> Fut,
    Fut: std::future::Future<Output = Result<SqsBatchResponse, runtime::batch::BatchError>>,
{
    let handle = &handle;
    each_delivery(meter, deliveries, |n| async move {
        no_failures(who, handle(sqs_event(body, arn, n)?).await)
    })
    .await
}

/// One count write (an `ADD` to a bucket item of `bytes`), billed.
fn breaker_count_write(bytes: usize) -> Billed {
    dynamodb_billed_units(
        DynamoOp::SizedWrite {
            before_bytes: 0,
            after_bytes: bytes,
        },
        &[],
        &["pk", "sk"],
    )
}

/// The breaker table's largest count item (its size) and the breaker's own item.
async fn breaker_items(
    ddb: &aws_sdk_dynamodb::Client,
    table: &str,
) -> Result<(usize, Option<FlatItem>), CycleError> {
    let items: Vec<_> = ddb
        .scan()
        .table_name(table)
        .consistent_read(true)
        .into_paginator()
        .items()
        .send()
        .try_collect()
        .await
        .map_err(|e| step("Scan", aws_sdk_dynamodb::error::DisplayErrorContext(e)))?;
    let pk = |i: &HashMap<String, aws_sdk_dynamodb::types::AttributeValue>| {
        i.get(aws::breaker::attr::PK)
            .and_then(|v| v.as_s().ok())
            .cloned()
            .unwrap_or_default()
    };
    let count = items
        .iter()
        .filter(|i| pk(i).ends_with("#window"))
        .map(testkit::size::item_size)
        .max()
        .ok_or_else(|| {
            step(
                "breaker",
                "no count item: the response handler counted nothing",
            )
        })?;
    let own = items
        .iter()
        .find(|i| pk(i) == aws::breaker::SERVICE)
        .map(flat_from_dynamodb);
    Ok((count, own))
}

/// The stream event Lambda delivers for `changes` (one batch).
fn stream_event(
    changes: &[StreamChange],
    p: &Provisioned,
) -> Result<aws_lambda_events::dynamodb::Event, CycleError> {
    let mut event = aws_lambda_events::dynamodb::Event::default();
    for c in changes {
        let json = record_json(c, &p.transactions_stream_arn, testkit::moto::LOCAL_REGION);
        event
            .records
            .push(serde_json::from_value(json).map_err(|e| CycleError::Setup(e.to_string()))?);
    }
    Ok(event)
}

/// A stream batch answered without a failed record.
fn no_stream_failures(
    who: &'static str,
    r: aws_lambda_events::streams::DynamoDbEventResponse,
) -> Result<(), CycleError> {
    if r.batch_item_failures.is_empty() {
        Ok(())
    } else {
        Err(step(
            who,
            format!("{} record(s) failed", r.batch_item_failures.len()),
        ))
    }
}

async fn drain(
    streams: &aws_sdk_dynamodbstreams::Client,
    p: &Provisioned,
    position: &mut StreamPosition,
) -> Result<Vec<StreamChange>, CycleError> {
    drain_stream(streams, &p.transactions_stream_arn, position)
        .await
        .map_err(|e| step("stream", e))
}

async fn get_item(
    ddb: &aws_sdk_dynamodb::Client,
    table: &str,
    tx: &TransactionId,
) -> Result<Option<FlatItem>, CycleError> {
    let item = testkit::provision::read_item(ddb, table, tx.as_str())
        .await
        .map_err(|e| step("GetItem", e))?;
    Ok(item.as_ref().map(flat_from_dynamodb))
}

/// DynamoDB's size of the audit item (`tx`, `group`), read back strongly consistent.
async fn audit_item_size(
    ddb: &aws_sdk_dynamodb::Client,
    table: &str,
    tx: &str,
    group: &str,
) -> Result<usize, CycleError> {
    let key = [("transaction_id", tx), ("audit_key", group)];
    let item = testkit::provision::read_item_at(ddb, table, &key)
        .await
        .map_err(|e| step("GetItem", e))?;
    item.as_ref()
        .map(testkit::size::item_size)
        .ok_or_else(|| step("audit writer", format!("no audit item ({tx}, {group})")))
}

/// Takes every message off the request queue; returns how many are requests for
/// attempt 2 of `tx` and the size of the largest (body + message attributes).
async fn request_messages(
    sqs: &aws_sdk_sqs::Client,
    url: &str,
    tx: &str,
) -> Result<(usize, usize), CycleError> {
    let messages = testkit::moto::take_messages(sqs, url, 1)
        .await
        .map_err(|e| step("ReceiveMessage", aws_sdk_sqs::error::DisplayErrorContext(e)))?;
    let mut count = 0;
    let mut bytes = 0;
    for m in &messages {
        let body = m.body().unwrap_or("");
        let request = Request::parse(body).map_err(|e| step("request queue", e))?;
        if request.transaction_id.as_str() == tx && request.attempt.get() == 2 {
            count += 1;
        }
        let attrs: usize = m
            .message_attributes()
            .map(|a| {
                a.iter()
                    .map(|(k, v)| {
                        k.len() + v.data_type().len() + v.string_value().map(str::len).unwrap_or(0)
                    })
                    .sum()
            })
            .unwrap_or(0);
        bytes = bytes.max(body.len() + attrs);
    }
    Ok((count, bytes))
}

/// The circuit breaker's writes under a burst of ERROR answers.
#[derive(Debug, Clone, PartialEq)]
pub struct TechnicalBurst {
    /// ERROR answers handled, in batches of `batch_size`.
    pub errors: u64,
    pub batch_size: u32,
    /// Count writes (UpdateItem, one per batch) and state changes (one
    /// TransactWriteItems each: the breaker's item and its change-log entry).
    pub count_writes: u64,
    pub state_changes: u64,
    /// Write units: a count write as measured, a state change as two items written
    /// in a transaction (2 × 2 units under 1 KB).
    pub write_units: f64,
}

impl TechnicalBurst {
    /// Breaker write requests per ERROR answer.
    pub fn writes_per_error(&self) -> f64 {
        (self.count_writes + self.state_changes) as f64 / self.errors.max(1) as f64
    }

    pub fn write_units_per_error(&self) -> f64 {
        self.write_units / self.errors.max(1) as f64
    }
}

/// `errors` ERROR answers (HTTP_503), for as many transactions, given to the response
/// handler (built as its Lambda main builds it, the breaker's settings the template's)
/// in batches of `batch_size`, its breaker calls metered.
pub async fn measure_technical_burst(
    sdk: &SdkConfig,
    errors: u32,
    batch_size: u32,
) -> Result<TechnicalBurst, CycleError> {
    let names = StackNames::new(&testkit::moto::unique_prefix("benchtech"));
    let p: Provisioned = provision(sdk, &names)
        .await
        .map_err(|e| CycleError::Setup(e.to_string()))?;
    let response_cfg = ResponseHandlerConfig::from_lookup(&lookup(p.env_for("response-handler")))
        .map_err(|e| CycleError::Setup(e.to_string()))?;
    let store = aws::dynamo::DynamoStore::new(
        aws_sdk_dynamodb::Client::new(sdk),
        &names.transactions_table,
    )
    .with_payloads_table(&names.payloads_table);
    let first_requests: MemoryQueue<Request> = MemoryQueue::new();
    let ports = StartPorts {
        store: &store,
        requests: &first_requests,
    };
    let max = MaxAttempts::new(3).map_err(|e| CycleError::Setup(e.to_string()))?;
    let ids: Vec<String> = (0..errors).map(|n| format!("TX-TECH-{n:06}")).collect();
    for id in &ids {
        let tx = TransactionId::parse(id).map_err(|e| CycleError::Setup(e.to_string()))?;
        let ctx = runtime::Settings::default().context(SystemClock.now());
        runtime::ops::start_transaction(
            &ports,
            tx,
            payload_of(256, id)?,
            max,
            domain::defaults::ANSWER_TIMEOUT,
            &ctx,
        )
        .await
        .map_err(|e| step("start", e))?;
    }
    let meter = CallMeter::new().with_breaker_table(&names.breaker_table);
    let handler = response_handler::wiring::response_handler_on(&meter.clients(sdk), &response_cfg);
    let metrics = Metrics::new("Bench", response_handler::FUNCTION);
    for (b, chunk) in ids.chunks(batch_size.max(1) as usize).enumerate() {
        let records: Vec<serde_json::Value> = chunk
            .iter()
            .enumerate()
            .map(|(i, id)| {
                let body = format!(
                    r#"{{"transaction_id":"{id}","attempt":1,"outcome":"ERROR","reason":"HTTP_503"}}"#
                );
                sqs_record(&format!("tech-{b}-{i}"), &body, &p.response.arn, 1)
            })
            .collect();
        let event = sqs_batch(&records)?;
        no_failures(
            "response handler (ERROR)",
            handler.handle_event(event, &metrics).await,
        )?;
    }
    let ddb = aws_sdk_dynamodb::Client::new(sdk);
    let (count_bytes, _) = breaker_items(&ddb, &names.breaker_table).await?;
    let count_wru = breaker_count_write(count_bytes).write();
    let c = meter.snapshot();
    // Every TransactWriteItems this handler made is a breaker state change: on the
    // ERROR path the state item is written with UpdateItem.
    let state_changes = c.creates;
    Ok(TechnicalBurst {
        errors: u64::from(errors),
        batch_size,
        count_writes: c.breaker_writes,
        state_changes,
        write_units: c.breaker_writes as f64 * count_wru + state_changes as f64 * 4.0,
    })
}
