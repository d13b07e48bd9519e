//! The cost model: billable quantities per retry → dollars, for the pattern (from the
//! counts measured against moto) and for the alternatives (from their published
//! billing units), with every assumption in [`Assumptions`] so the report can print it.

use crate::prices::PriceTable;
use crate::template::Deployment;
use domain::decide::Delivery;

/// Bytes in one billed SQS request chunk (every 64 KB of a message is one request).
pub const SQS_CHUNK_BYTES: usize = 65_536;
/// The most messages one ReceiveMessage or DeleteMessageBatch call carries.
pub const SQS_MAX_PER_CALL: u32 = 10;

/// Billed SQS requests for sending one message of `bytes` (body + attributes).
pub fn sqs_requests_for_message(bytes: usize) -> f64 {
    bytes.div_ceil(SQS_CHUNK_BYTES).max(1) as f64
}

/// Billable quantities for one retry. Fractions come from batching.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Quantities {
    pub dynamodb_write_units: f64,
    pub dynamodb_read_units: f64,
    pub sqs_requests: f64,
    /// Requests to a FIFO queue (the request queue in outbox delivery).
    pub sqs_fifo_requests: f64,
    pub scheduler_invocations: f64,
    pub lambda_requests: f64,
    pub lambda_gb_seconds: f64,
    pub step_functions_transitions: f64,
    pub durable_operations: f64,
    pub durable_gb_written: f64,
}

/// One priced line.
#[derive(Debug, Clone, PartialEq)]
pub struct Line {
    pub item: &'static str,
    pub quantity: f64,
    pub usd: f64,
}

/// Dollars for one retry, by line.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Bill {
    pub lines: Vec<Line>,
}

impl Bill {
    pub fn total(&self) -> f64 {
        self.lines.iter().map(|l| l.usd).sum()
    }

    /// Dollars per million retries.
    pub fn per_million(&self) -> f64 {
        self.total() * 1_000_000.0
    }

    pub fn line(&self, item: &str) -> Option<&Line> {
        self.lines.iter().find(|l| l.item == item)
    }
}

/// Prices quantities; zero quantities make no line.
pub fn bill(q: &Quantities, p: &PriceTable, architecture: &str) -> Bill {
    let candidates = [
        (
            "DynamoDB write units",
            q.dynamodb_write_units,
            p.dynamodb_write_request_unit,
        ),
        (
            "DynamoDB read units",
            q.dynamodb_read_units,
            p.dynamodb_read_request_unit,
        ),
        ("SQS requests", q.sqs_requests, p.sqs_request),
        ("SQS FIFO requests", q.sqs_fifo_requests, p.sqs_fifo_request),
        (
            "Scheduler invocations",
            q.scheduler_invocations,
            p.scheduler_invocation,
        ),
        ("Lambda requests", q.lambda_requests, p.lambda_request),
        (
            "Lambda GB-seconds",
            q.lambda_gb_seconds,
            p.lambda_gb_second(architecture),
        ),
        (
            "Step Functions transitions",
            q.step_functions_transitions,
            p.step_functions_standard_transition,
        ),
        (
            "Durable operations",
            q.durable_operations,
            p.durable_operation,
        ),
        (
            "Durable GB written",
            q.durable_gb_written,
            p.durable_data_written_gb,
        ),
    ];
    Bill {
        lines: candidates
            .into_iter()
            .filter(|(_, quantity, _)| *quantity > 0.0)
            .map(|(item, quantity, price)| Line {
                item,
                quantity,
                usd: price.cost(quantity),
            })
            .collect(),
    }
}

/// Everything the model assumes beyond the measured counts and the template.
#[derive(Debug, Clone, PartialEq)]
pub struct Assumptions {
    /// Latency of one AWS API round trip from Lambda, in-region (ms): Lambda duration
    /// is modelled as the round trips on a record's critical path × this.
    pub aws_call_ms: f64,
    /// Messages per ESM batch: `None` = full batches at the template's BatchSize
    /// (sustained traffic); `Some(1)` = one message per invocation (a trickle).
    pub batch_fill: Option<u32>,
    /// Step Functions Standard: transitions per retry of a Wait + Task + Choice loop
    /// (Wait entered, Task entered — SQS send with a task token, answered by the
    /// response — Choice entered).
    pub sfn_transitions_per_retry: u32,
    /// Lambda durable functions: operations per retry (at least one wait and one step;
    /// receiving the answer through a callback would add one more).
    pub durable_operations_per_retry: u32,
    /// Bytes checkpointed per durable operation (metadata + a small step result; the
    /// payload is in the execution's input, written once per transaction).
    pub durable_bytes_per_operation: f64,
    /// AWS round trips of one durable resume (checkpoint + the request's SendMessage).
    pub durable_resume_calls: u32,
    /// Wait held by a sleeping process per retry (s): the first retry's nominal backoff.
    pub sleeping_wait_seconds: f64,
}

impl Assumptions {
    pub fn new(d: &Deployment) -> Self {
        Self {
            aws_call_ms: 10.0,
            batch_fill: None,
            sfn_transitions_per_retry: 3,
            durable_operations_per_retry: 2,
            durable_bytes_per_operation: 1024.0,
            durable_resume_calls: 2,
            sleeping_wait_seconds: d.backoff_base_seconds,
        }
    }

    /// Messages per ESM batch for a queue whose BatchSize is `batch_size`.
    pub fn fill(&self, batch_size: u32) -> f64 {
        f64::from(
            self.batch_fill
                .unwrap_or(batch_size)
                .clamp(1, batch_size.max(1)),
        )
    }

    /// SQS ReceiveMessage + DeleteMessageBatch requests per consumed message.
    pub fn esm_requests_per_message(&self, batch_size: u32) -> f64 {
        let per_call = self.fill(batch_size).min(f64::from(SQS_MAX_PER_CALL));
        2.0 / per_call
    }
}

/// What one retry cycle of the pattern did, per retry (from the moto run).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CycleBillables {
    /// How the request reached the request queue: published by the retry handler
    /// (direct, a standard queue) or by the publisher on the table's stream (outbox,
    /// a FIFO queue).
    pub delivery: Delivery,
    /// Deliveries of every message (1 = happy path, 2 = every message twice).
    pub deliveries: u32,
    /// DynamoDB write units by the published rules (state item + index + failed
    /// conditions + audit rows).
    pub write_units: f64,
    /// DynamoDB read units by the published rules.
    pub read_units: f64,
    /// SendMessage calls of the request (the retry handler's, or the publisher's in
    /// outbox delivery) and their size.
    pub request_sends: u64,
    pub request_message_bytes: usize,
    /// Schedules created (= scheduler invocations when they fire).
    pub scheduler_invocations: u64,
    /// Size of the retry event the scheduler puts on the retry queue.
    pub retry_event_bytes: usize,
    /// AWS round trips made by the response handler / retry handler / audit writer.
    pub response_round_trips: u64,
    pub retry_round_trips: u64,
    pub audit_round_trips: u64,
    /// Outbox delivery: the stream records that passed the publisher's filter (one
    /// SENDING image per retry × deliveries), and its AWS round trips.
    pub publisher_records: u64,
    pub publisher_round_trips: u64,
    /// Stream records the audit writer received (4 per cycle × deliveries; 5 in
    /// outbox delivery, the publisher's claim being one more write).
    pub stream_records: u64,
    /// The circuit breaker: the response handler's count writes (one per batch; one
    /// per delivery here, each delivery its own batch), the write units of one, and
    /// the read units of one read of its item (per refresh period and environment).
    pub breaker_writes: u64,
    pub breaker_write_units: f64,
    pub breaker_read_units: f64,
}

/// The circuit breaker's reads per retry: each execution environment of both handlers
/// reads the breaker's item once per refresh period; at the fleet's sustained rate
/// (its rate bound) the retry handler runs MaximumConcurrency environments and the
/// response handler, in the worst case, its own MaximumConcurrency.
pub fn breaker_reads_per_retry(d: &Deployment) -> f64 {
    let environments = f64::from(d.retry_max_concurrency + d.response_max_concurrency);
    environments / (d.breaker_refresh_seconds.max(1.0) * d.fleet_rate_bound().max(1.0))
}

/// The pattern's billable quantities per retry.
pub fn pattern_quantities(c: &CycleBillables, d: &Deployment, a: &Assumptions) -> Quantities {
    let deliveries = f64::from(c.deliveries.max(1));
    let resp_fill = a.fill(d.response_batch_size);
    let retry_fill = a.fill(d.retry_batch_size);
    let audit_fill = a.fill(d.audit_batch_size);
    // The template gives the publisher's stream mapping the audit writer's BatchSize.
    let publisher_fill = a.fill(d.audit_batch_size);
    // SQS: the request's SendMessage (per 64 KB chunk; to a FIFO queue in outbox
    // delivery), the scheduler's delivery to the retry queue, and the ESM's receive +
    // delete of every consumed message (response and retry queues, each delivery).
    let request = c.request_sends as f64 * sqs_requests_for_message(c.request_message_bytes);
    let (request_standard, request_fifo) = match c.delivery {
        Delivery::Direct => (request, 0.0),
        Delivery::Outbox => (0.0, request),
    };
    let sqs = request_standard
        + c.scheduler_invocations as f64 * sqs_requests_for_message(c.retry_event_bytes)
        + deliveries * a.esm_requests_per_message(d.response_batch_size)
        + deliveries * a.esm_requests_per_message(d.retry_batch_size);
    // Lambda: the handlers' batches, the audit writer's stream batches and the
    // publisher's (the records its filter lets through; Lambda's reads of the stream
    // are not billed, and a filtered-out record invokes nothing).
    let lambda_requests = deliveries / resp_fill
        + deliveries / retry_fill
        + c.stream_records as f64 / audit_fill
        + c.publisher_records as f64 / publisher_fill;
    // Duration: a batch's records run concurrently (BATCH_CONCURRENCY ≥ BatchSize), so an
    // invocation lasts about one record's chain of round trips, shared by the batch;
    // the audit writer and the publisher are taken as working through their records
    // one after another (stream order).
    let seconds = a.aws_call_ms / 1000.0
        * (c.response_round_trips as f64 / resp_fill
            + c.retry_round_trips as f64 / retry_fill
            + c.audit_round_trips as f64
            + c.publisher_round_trips as f64);
    // The breaker: one count write per response batch, its item read per refresh
    // period per environment.
    let breaker_writes = c.breaker_writes as f64 / resp_fill * c.breaker_write_units;
    let breaker_reads = breaker_reads_per_retry(d) * c.breaker_read_units;
    Quantities {
        dynamodb_write_units: c.write_units + breaker_writes,
        dynamodb_read_units: c.read_units + breaker_reads,
        sqs_requests: sqs,
        sqs_fifo_requests: request_fifo,
        scheduler_invocations: c.scheduler_invocations as f64,
        lambda_requests,
        lambda_gb_seconds: seconds * d.memory_gb(),
        ..Quantities::default()
    }
}

/// Step Functions Standard, Wait + Task + Choice per retry, plus the request's send.
pub fn step_functions_quantities(request_message_bytes: usize, a: &Assumptions) -> Quantities {
    Quantities {
        step_functions_transitions: f64::from(a.sfn_transitions_per_retry),
        sqs_requests: sqs_requests_for_message(request_message_bytes),
        ..Quantities::default()
    }
}

/// Lambda durable functions: a wait and a step per retry, the resume's invocation and
/// duration, the checkpoint data, plus the request's send.
pub fn durable_quantities(
    request_message_bytes: usize,
    d: &Deployment,
    a: &Assumptions,
) -> Quantities {
    let ops = f64::from(a.durable_operations_per_retry);
    Quantities {
        durable_operations: ops,
        durable_gb_written: ops * a.durable_bytes_per_operation / 1_073_741_824.0,
        lambda_requests: 1.0,
        lambda_gb_seconds: d.memory_gb() * f64::from(a.durable_resume_calls) * a.aws_call_ms
            / 1000.0,
        sqs_requests: sqs_requests_for_message(request_message_bytes),
        ..Quantities::default()
    }
}

/// A process sleeping through the wait: one Lambda invocation held for the whole
/// backoff at the functions' memory size (hypothetical: Lambda stops at 15 minutes),
/// plus the request's send.
pub fn sleeping_quantities(
    request_message_bytes: usize,
    d: &Deployment,
    a: &Assumptions,
) -> Quantities {
    Quantities {
        lambda_requests: 1.0,
        lambda_gb_seconds: d.memory_gb() * a.sleeping_wait_seconds,
        sqs_requests: sqs_requests_for_message(request_message_bytes),
        ..Quantities::default()
    }
}
