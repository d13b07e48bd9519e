//! The per-cycle counts against moto, through the real handlers and adapters: a
//! regression in a handler's path (an extra read, an extra write, a second publish)
//! fails here before it shows in the benchmark's dollars.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use retry_bench::cycle::{measure, round_trips, CycleMeasurement, CycleSpec};
use testkit::meter::CallCounts;

async fn sdk() -> aws_config::SdkConfig {
    let endpoint = testkit::moto::shared_endpoint().expect("moto server (. scripts/tools.sh)");
    testkit::moto::sdk_config(&endpoint).await
}

/// One measured cycle with a payload of `payload_bytes`, each message delivered
/// `deliveries` times.
async fn cycle(
    sdk: &aws_config::SdkConfig,
    payload_bytes: usize,
    deliveries: u32,
) -> CycleMeasurement {
    let spec = CycleSpec {
        payload_bytes,
        deliveries,
        delivery: domain::decide::Delivery::Direct,
    };
    measure(sdk, spec).await.unwrap()
}

/// A handler's calls: (state writes, of them failed conditions, schedule creates,
/// state reads, payload reads, sends).
fn calls(c: &CallCounts) -> (u64, u64, u64, u64, u64, u64) {
    (
        c.writes,
        c.failed_conditions,
        c.schedule_creates,
        c.reads,
        c.payload_reads,
        c.sends,
    )
}

/// The state item's arrows over the cycle, (from, to).
fn arrows(c: &CycleMeasurement) -> Vec<(&str, &str)> {
    c.transitions
        .iter()
        .map(|t| (t.from.as_str(), t.to.as_str()))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn happy_path_counts_are_the_expected_calls() {
    let sdk = sdk().await;
    let small = cycle(&sdk, 256, 1).await;
    let big = cycle(&sdk, 65_536, 1).await;
    for c in [&small, &big] {
        let a = &c.response;
        // Response handler: 2 conditional writes + 1 CreateSchedule, no state read;
        // apart, the circuit breaker's count (one UpdateItem per batch) and one read
        // of its item per refresh period (each cycle here is a fresh environment).
        assert_eq!(calls(a), (2, 0, 1, 0, 0, 0), "{a:?}");
        assert_eq!((a.breaker_writes, a.breaker_reads), (1, 1), "{a:?}");
        assert_eq!(round_trips(a), 3);
        // Retry handler: 2 conditional writes + 1 payload read + 1 SendMessage, no
        // state read; the breaker's item read once (per refresh period).
        let b = &c.retry;
        assert_eq!(calls(b), (2, 0, 0, 0, 1, 1), "{b:?}");
        assert_eq!((b.breaker_writes, b.breaker_reads), (0, 1), "{b:?}");
        assert_eq!(round_trips(b), 4);
        // The breaker's count item is small: one write unit; its own item one read.
        assert_eq!(c.breaker_count_billed.write(), 1.0);
        assert!(c.breaker_count_bytes < 1024, "{}", c.breaker_count_bytes);
        assert_eq!(c.breaker_read_billed.read, 1.0);
        // One audit item per handler run (its two transitions as two entries), one
        // write unit each: the item stays under 1 KB.
        assert_eq!(c.audit.audit_writes, 2);
        assert_eq!(c.audit_billed.write(), 2.0);
        assert!(
            c.audit_item_bytes > 300 && c.audit_item_bytes < 1024,
            "{}",
            c.audit_item_bytes
        );
        assert_eq!(c.requests_on_queue, 1);
        assert_eq!(
            arrows(c),
            [
                ("IN_PROGRESS", "SCHEDULING"),
                ("SCHEDULING", "SCHEDULED"),
                ("SCHEDULED", "SENDING"),
                ("SENDING", "IN_PROGRESS")
            ]
        );
        // The sparse, keys-only index entry: moved to the fire time at SCHEDULING (a
        // key change: one delete, one put), not written by SCHEDULED, SENDING, nor by
        // the IN_PROGRESS that follows (it keeps the entry for its answer deadline).
        let index: Vec<f64> = c.transitions.iter().map(|t| t.billed.index_write).collect();
        assert_eq!(index, [2.0, 0.0, 0.0, 0.0]);
    }
    // The state item does not carry the payload: same write cost at 256 B and 64 KB;
    // only the payload read and the request message grow.
    assert_eq!(small.state_billed(), big.state_billed());
    assert!(small.transitions.iter().all(|t| t.item_bytes_after < 1024));
    assert!(big.payload_read_billed.read > small.payload_read_billed.read);
    assert!(big.request_message_bytes > 65_536);
}

#[tokio::test(flavor = "multi_thread")]
async fn every_message_twice_costs_one_failed_condition_per_duplicate_and_no_second_publish() {
    let sdk = sdk().await;
    let c = cycle(&sdk, 256, 2).await;
    // The duplicate response: one conditional write that fails, and no count on the
    // circuit breaker (a duplicate is no signal: only the first delivery's batch
    // writes there).
    assert_eq!(calls(&c.response), (3, 1, 1, 0, 0, 0), "{:?}", c.response);
    assert_eq!(c.response.breaker_writes, 1);
    assert_eq!(round_trips(&c.response_first), 3);
    // The duplicate retry event: one failed conditional write, no second payload read
    // or publish.
    assert_eq!(calls(&c.retry), (3, 1, 0, 0, 1, 1), "{:?}", c.retry);
    assert_eq!(c.requests_on_queue, 1);
    // Every stream record delivered twice: each run's item written twice, the second
    // time with the same entries (billed by the item's size, 1 WRU).
    assert_eq!(c.audit.audit_writes, 4);
    assert_eq!(c.audit_billed.write(), 4.0);
    assert_eq!(c.failed_conditions.write(), 2.0);
}

/// A burst of ERROR answers: one breaker count write per batch, and one state change
/// (CLOSED → OPEN once the window holds 20 calls, half of them failures; no more
/// while its cool-down runs).
#[tokio::test(flavor = "multi_thread")]
async fn a_burst_of_errors_writes_the_breaker_once_per_batch_and_opens_it_once() {
    let sdk = sdk().await;
    let t = retry_bench::cycle::measure_technical_burst(&sdk, 100, 10)
        .await
        .unwrap();
    assert_eq!(
        (t.errors, t.count_writes, t.state_changes),
        (100, 10, 1),
        "{t:?}"
    );
    assert!((t.writes_per_error() - 0.11).abs() < 1e-9, "{t:?}");
    assert!((t.write_units_per_error() - 0.14).abs() < 1e-9, "{t:?}");
}

/// GIVEN outbox delivery WHEN one retry cycle runs at 4 KB THEN the retry handler
/// makes its one accept write and sends nothing; the publisher, given the SENDING
/// record, claims it, reads the payload, sends the request to the FIFO queue and
/// marks it IN_PROGRESS (four round trips); the cycle is five state writes, three
/// audit items (one per handler run), one request queued; priced, the request is a
/// FIFO request and the publisher adds its invocation.
#[tokio::test(flavor = "multi_thread")]
async fn outbox_cycle_counts_are_the_publishers_calls() {
    let sdk = sdk().await;
    let c = measure(
        &sdk,
        CycleSpec {
            payload_bytes: 4096,
            deliveries: 1,
            delivery: domain::decide::Delivery::Outbox,
        },
    )
    .await
    .unwrap();
    let b = &c.retry;
    assert_eq!((b.writes, b.payload_reads, b.sends), (1, 0, 0), "{b:?}");
    let p = &c.publisher;
    assert_eq!(calls(p), (2, 0, 0, 0, 1, 1), "{p:?}");
    assert_eq!(round_trips(p), 4);
    assert_eq!(
        c.publisher_records, 1,
        "only the unclaimed SENDING image passes"
    );
    assert_eq!(
        arrows(&c),
        [
            ("IN_PROGRESS", "SCHEDULING"),
            ("SCHEDULING", "SCHEDULED"),
            ("SCHEDULED", "SENDING"),
            ("SENDING", "SENDING"),
            ("SENDING", "IN_PROGRESS"),
        ]
    );
    assert_eq!(c.audit.audit_writes, 3);
    assert_eq!(c.requests_on_queue, 1);
    let billables = c.billables();
    assert_eq!(billables.delivery, domain::decide::Delivery::Outbox);
    assert_eq!(billables.request_sends, 1);
    assert_eq!(billables.stream_records, 5);
}
