//! Handler CPU cost per record, in process, with the in-memory adapters (no I/O): what
//! the response handler (A) and the retry handler (B) spend around their AWS calls.
//! `response-core` / `retry-core`: one record through `response_handler::handle` / `retry_handler::handle`;
//! `response-batch10` / `retry-batch10`: an SQS event of 10 records through
//! `handle_event` (the batch processor), reported per record. Each iteration starts
//! from fresh state built outside the measurement, so every run takes the happy path.
//! The retry handler's pacer is left out (one mutex and a clock read; its waits are the
//! configured rate, not CPU). Payloads are 4 KB; short measurement times keep
//! `scripts/bench.sh` fast. The batch benchmarks run with the circuit breaker on (in
//! memory, CLOSED): its cached read per record and its one count per response batch are
//! in the figures. Results:
//! `docs/benchmarks.md#handler-cpu-per-record-criterion-in-process-in-memory-adapters`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // bench code: a panic is the failure report

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use domain::breaker::BreakerSettings;
use domain::exec::{ResponsePorts, RetryPorts, StartPorts};
use domain::policy::SplitMix64;
use domain::ports::{Clock, SystemClock};
use domain::{Context, MaxAttempts, Payload, Request, Response, RetryEvent, TransactionId};
use response_handler::ResponseHandler;
use retry_bench::cycle::payload_of;
use retry_handler::RetryHandler;
use runtime::breaker::BreakerGate;
use runtime::drive::run_all;
use runtime::function::SqsFunction;
use runtime::settings::Seeds;
use runtime::{BatchOptions, Metrics, Settings, SqsEvent, Verdict};
use std::time::Duration;
use testkit::memory::{block_on_ready, MemoryQueue, MemoryScheduler, MemoryStore};
use testkit::memory::{MemoryBreaker, MemoryDeadLetter};

const PAYLOAD_BYTES: usize = 4096;
const BATCH: usize = 10;

fn tx(n: usize) -> String {
    format!("TX-CPU-{n:05}")
}

fn payload() -> Payload {
    payload_of(PAYLOAD_BYTES, "TX-CPU").unwrap()
}

fn ready<F: std::future::Future>(f: F) -> F::Output {
    block_on_ready(f).expect("in-memory ports never wait")
}

/// A store holding `n` started transactions (IN_PROGRESS, attempt 1 of 3).
fn started(n: usize) -> MemoryStore {
    let store = MemoryStore::new();
    let requests: MemoryQueue<Request> = MemoryQueue::new();
    let ports = StartPorts {
        store: &store,
        requests: &requests,
    };
    let ctx = Settings::default().context(SystemClock.now());
    for i in 0..n {
        ready(runtime::ops::start_transaction(
            &ports,
            TransactionId::parse(&tx(i)).unwrap(),
            payload(),
            MaxAttempts::new(3).unwrap(),
            domain::defaults::ANSWER_TIMEOUT,
            &ctx,
        ))
        .unwrap();
    }
    store
}

fn cancelled(i: usize) -> Response {
    Response::parse(&format!(
        r#"{{"transaction_id":"{}","attempt":1,"outcome":"CANCELLED","reason":"NOT_AVAILABLE"}}"#,
        tx(i)
    ))
    .unwrap()
}

fn retry_event(i: usize) -> RetryEvent {
    RetryEvent::parse(&format!(
        r#"{{"transaction_id":"{}","origin":"RETRY_SCHEDULER","attempt":2}}"#,
        tx(i)
    ))
    .unwrap()
}

/// A store holding `n` transactions SCHEDULED for attempt 2 (through the response
/// handler's own path).
fn scheduled(n: usize) -> MemoryStore {
    let store = started(n);
    let scheduler = MemoryScheduler::new();
    let metrics = Metrics::new("Bench", "setup");
    let ctx = Settings::default().context(SystemClock.now());
    let mut rng = domain::policy::SplitMix64::new(1);
    for i in 0..n {
        let v = respond(&store, &scheduler, &cancelled(i), &ctx, &mut rng, &metrics);
        assert!(matches!(v, Verdict::Done { .. }), "{v:?}");
    }
    store
}

/// `response` through `response_handler::handle` on `store` and `scheduler`.
fn respond(
    store: &MemoryStore,
    scheduler: &MemoryScheduler,
    response: &Response,
    ctx: &Context,
    rng: &mut SplitMix64,
    metrics: &Metrics,
) -> Verdict {
    let retries = MemoryQueue::<RetryEvent>::new();
    let ports = ResponsePorts {
        store,
        scheduler,
        retries: &retries,
        notes: store,
    };
    ready(response_handler::handle(
        &ports,
        response,
        ctx,
        rng,
        &mut run_all,
        metrics,
    ))
    .0
}

fn event(bodies: impl Iterator<Item = String>) -> SqsEvent {
    testkit::events::sqs(&bodies.collect::<Vec<_>>())
}

/// `$handler { $field: $value, … }` with the parts both handlers share: the breaker
/// as `$by` uses it, an in-memory dead letter, the system clock, default settings,
/// batches of `BATCH`.
macro_rules! in_memory {
    ($handler:ident, $by:literal { $($field:ident: $value:expr),* $(,)? }) => {
        $handler {
            $($field: $value,)*
            breaker: Some(gate($by)),
            function: SqsFunction {
                dead_letter: MemoryDeadLetter::new(),
                clock: SystemClock,
                settings: Settings::default(),
                batch: BatchOptions { concurrency: BATCH },
                seeds: Seeds::fixed(1),
                namespace: "Bench".into(),
            },
        }
    };
}

/// The breaker as the functions use it, CLOSED, cached for 5 s.
fn gate(by: &str) -> BreakerGate<MemoryBreaker> {
    let settings = BreakerSettings::default();
    BreakerGate::new(
        MemoryBreaker::new(settings),
        settings,
        Duration::from_secs(5),
        by,
    )
}

fn response_handler(
    store: MemoryStore,
) -> ResponseHandler<
    MemoryStore,
    MemoryScheduler,
    MemoryQueue<RetryEvent>,
    MemoryStore,
    MemoryBreaker,
    MemoryDeadLetter,
> {
    in_memory!(ResponseHandler, "response-handler" {
        store: store,
        scheduler: MemoryScheduler::new(),
        retries: MemoryQueue::new(),
        notes: MemoryStore::new(),
    })
}

fn retry_handler(
    store: MemoryStore,
) -> RetryHandler<
    MemoryStore,
    MemoryQueue<Request>,
    MemoryQueue<RetryEvent>,
    MemoryBreaker,
    MemoryDeadLetter,
> {
    in_memory!(RetryHandler, "retry-handler" {
        store: store,
        requests: MemoryQueue::new(),
        retries: MemoryQueue::new(),
        pacer: None,
    })
}

/// Benchmarks `$name`: an event of `BATCH` records (`$record(i)`) through a fresh
/// `$handler()`'s `handle_event`, every record a success.
macro_rules! batch_bench {
    ($g:expr, $name:literal, $handler:expr, $record:expr, $metrics:expr) => {
        $g.bench_function($name, |b| {
            b.iter_batched(
                || ($handler(), event((0..BATCH).map($record))),
                |(h, ev)| {
                    let out = ready(h.handle_event(ev, $metrics)).unwrap();
                    debug_assert!(out.batch_item_failures.is_empty());
                    (out, h)
                },
                BatchSize::SmallInput,
            )
        })
    };
}

fn handlers(c: &mut Criterion) {
    let mut g = c.benchmark_group("handlers");
    let metrics = Metrics::new("Bench", "bench");
    let response = cancelled(0);
    let retry = retry_event(0);

    g.throughput(Throughput::Elements(1));
    g.bench_function("response-core", |b| {
        b.iter_batched(
            || {
                (
                    started(1),
                    MemoryScheduler::new(),
                    Settings::default().context(SystemClock.now()),
                )
            },
            |(store, scheduler, ctx)| {
                let mut rng = SplitMix64::new(7);
                let v = respond(&store, &scheduler, &response, &ctx, &mut rng, &metrics);
                debug_assert!(matches!(v, Verdict::Done { .. }));
                (v, store, scheduler)
            },
            BatchSize::SmallInput,
        )
    });
    g.bench_function("retry-core", |b| {
        b.iter_batched(
            || {
                (
                    scheduled(1),
                    MemoryQueue::<Request>::new(),
                    Settings::default().context(SystemClock.now()),
                )
            },
            |(store, requests, ctx)| {
                let mut rng = SplitMix64::new(7);
                let retries = MemoryQueue::<RetryEvent>::new();
                let ports = RetryPorts {
                    store: &store,
                    requests: &requests,
                    retries: &retries,
                };
                let v = ready(retry_handler::handle(
                    &ports,
                    &retry,
                    domain::Known::Unread,
                    &ctx,
                    &mut rng,
                    &mut run_all,
                    &metrics,
                ));
                debug_assert!(matches!(v, Verdict::Done { .. }));
                (v, store, requests)
            },
            BatchSize::SmallInput,
        )
    });

    g.throughput(Throughput::Elements(BATCH as u64));
    let h = || response_handler(started(BATCH));
    batch_bench!(
        g,
        "response-batch10",
        h,
        |i| cancelled(i).to_json(),
        &metrics
    );
    let h = || retry_handler(scheduled(BATCH));
    batch_bench!(
        g,
        "retry-batch10",
        h,
        |i| retry_event(i).to_json(),
        &metrics
    );
    g.finish();
}

/// Checks, once and outside the measurements, that every benchmarked path is the
/// happy path (so the figures are not those of an error path).
fn sanity() {
    let metrics = Metrics::new("Bench", "sanity");
    let h = response_handler(started(BATCH));
    let ev = event((0..BATCH).map(|i| cancelled(i).to_json()));
    let out = ready(h.handle_event(ev, &metrics)).unwrap();
    assert!(out.batch_item_failures.is_empty());
    assert_eq!(h.scheduler.live().len(), BATCH, "one schedule per response");
    let h = retry_handler(scheduled(BATCH));
    let ev = event((0..BATCH).map(|i| retry_event(i).to_json()));
    let out = ready(h.handle_event(ev, &metrics)).unwrap();
    assert!(out.batch_item_failures.is_empty());
    assert_eq!(h.requests.len(), BATCH, "one request per retry event");
    assert!(h.requests.messages().iter().all(|r| r.attempt.get() == 2));
}

fn benches(c: &mut Criterion) {
    sanity();
    handlers(c);
}

criterion_group! {
    name = group;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(20)
        .without_plots();
    targets = benches
}
criterion_main!(group);
