//! The cost model's arithmetic and the price table: known quantities → known dollars.

use retry_bench::model::{
    bill, breaker_reads_per_retry, durable_quantities, pattern_quantities, sleeping_quantities,
    sqs_requests_for_message, step_functions_quantities, Assumptions, CycleBillables, Quantities,
};
use retry_bench::prices::PRICES;
use retry_bench::template::Deployment;

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9 * b.abs().max(1.0)
}

fn deployment() -> Deployment {
    Deployment {
        architecture: "arm64".into(),
        memory_mb: 256,
        response_batch_size: 10,
        retry_batch_size: 10,
        audit_batch_size: 100,
        retry_max_concurrency: 2,
        response_max_concurrency: 5,
        max_requests_per_second: 5.0,
        backoff_base_seconds: 7200.0,
        breaker_refresh_seconds: 5.0,
    }
}

/// One retry cycle delivered directly, each message once, no breaker calls: the
/// state item's `write_units`, a request message of `request_message_bytes`, the
/// audit writer's `audit_round_trips`.
fn direct_cycle(
    write_units: f64,
    request_message_bytes: usize,
    audit_round_trips: u64,
) -> CycleBillables {
    CycleBillables {
        deliveries: 1,
        write_units,
        read_units: 2.0,
        request_sends: 1,
        request_message_bytes,
        scheduler_invocations: 1,
        retry_event_bytes: 70,
        response_round_trips: 3,
        retry_round_trips: 4,
        audit_round_trips,
        stream_records: 4,
        ..CycleBillables::default()
    }
}

#[test]
fn the_price_table_is_dated_and_sourced() {
    assert_eq!(PRICES.as_of, "2026-12");
    assert_eq!(PRICES.region, "us-east-1");
    for (label, price) in PRICES.rows() {
        assert!(!price.source.is_empty(), "{label} has no source");
        assert!(price.usd > 0.0 && price.per > 0.0, "{label}");
    }
    // The figures of the reference sheet, as dollars per unit.
    assert!(close(
        PRICES.dynamodb_write_request_unit.unit_usd(),
        0.625e-6
    ));
    assert!(close(
        PRICES.dynamodb_read_request_unit.unit_usd(),
        0.125e-6
    ));
    assert!(close(PRICES.sqs_request.unit_usd(), 0.40e-6));
    assert!(close(PRICES.sqs_fifo_request.unit_usd(), 0.50e-6));
    assert!(close(PRICES.scheduler_invocation.unit_usd(), 1.0e-6));
    assert!(close(PRICES.lambda_request.unit_usd(), 0.20e-6));
    assert!(close(
        PRICES.step_functions_standard_transition.unit_usd(),
        25.0e-6
    ));
    assert!(close(PRICES.durable_operation.unit_usd(), 8.0e-6));
}

#[test]
fn a_known_count_vector_gives_known_dollars() {
    let q = Quantities {
        dynamodb_write_units: 14.0,
        dynamodb_read_units: 2.0,
        sqs_requests: 2.4,
        scheduler_invocations: 1.0,
        lambda_requests: 0.24,
        lambda_gb_seconds: 0.01,
        ..Quantities::default()
    };
    let b = bill(&q, &PRICES, "arm64");
    // 14 × 0.625 + 2 × 0.125 + 2.4 × 0.40 + 1 × 1.00 + 0.24 × 0.20 per million,
    // + 0.01 GB-s × $0.0000133334.
    let expected = 8.75 + 0.25 + 0.96 + 1.0 + 0.048 + 0.01 * 0.000_013_333_4 * 1e6;
    assert!(
        close(b.per_million(), expected),
        "{} vs {expected}",
        b.per_million()
    );
    assert_eq!(b.lines.len(), 6, "zero quantities make no line");
    assert!(close(
        b.line("DynamoDB write units").unwrap().usd,
        14.0 * 0.625e-6
    ));
    let x86 = bill(&q, &PRICES, "x86_64");
    assert!(x86.total() > b.total(), "x86_64 GB-seconds cost more");
}

#[test]
fn the_pattern_quantities_follow_the_batch_sizes() {
    let d = deployment();
    let a = Assumptions::new(&d);
    let c = direct_cycle(14.0, 4_200, 4);
    let q = pattern_quantities(&c, &d, &a);
    // SQS: request 1 + scheduler delivery 1 + (receive + delete) / 10 on two queues.
    assert!(close(q.sqs_requests, 2.4), "{}", q.sqs_requests);
    // Lambda: 1/10 + 1/10 + 4/100.
    assert!(close(q.lambda_requests, 0.24), "{}", q.lambda_requests);
    // (3/10 + 4/10 + 4) round trips × 10 ms × 0.25 GB.
    assert!(
        close(q.lambda_gb_seconds, 4.7 * 0.010 * 0.25),
        "{}",
        q.lambda_gb_seconds
    );
    assert_eq!(
        (
            q.dynamodb_write_units,
            q.dynamodb_read_units,
            q.scheduler_invocations
        ),
        (14.0, 2.0, 1.0)
    );

    // Every message twice: the receive/delete and the invocations double.
    let twice = pattern_quantities(
        &CycleBillables {
            deliveries: 2,
            stream_records: 8,
            ..c.clone()
        },
        &d,
        &a,
    );
    assert!(close(twice.sqs_requests, 2.8), "{}", twice.sqs_requests);
    assert!(
        close(twice.lambda_requests, 0.48),
        "{}",
        twice.lambda_requests
    );

    // A trickle: one message per invocation.
    let mut trickle = a.clone();
    trickle.batch_fill = Some(1);
    let t = pattern_quantities(&c, &d, &trickle);
    assert!(close(t.sqs_requests, 6.0), "{}", t.sqs_requests);
    assert!(close(t.lambda_requests, 6.0), "{}", t.lambda_requests);

    // A 64 KB payload makes the request message two SQS requests.
    let big = pattern_quantities(
        &CycleBillables {
            request_message_bytes: 65_700,
            ..c
        },
        &d,
        &a,
    );
    assert!(close(big.sqs_requests, 3.4), "{}", big.sqs_requests);
}

/// GIVEN one retry delivered through the outbox (the publisher on the stream sends the
/// request to the FIFO queue) WHEN billed THEN the request is a FIFO request, the
/// publisher's SENDING record costs a Lambda request per batch of the stream mapping
/// and its round trips run one after another; the rest is priced as in direct
/// delivery.
#[test]
fn outbox_delivery_prices_the_fifo_request_and_the_publisher() {
    let d = deployment();
    let a = Assumptions::new(&d);
    let direct = direct_cycle(8.0, 4_300, 2);
    let outbox = CycleBillables {
        delivery: domain::decide::Delivery::Outbox,
        write_units: 10.0,
        retry_round_trips: 1,
        audit_round_trips: 3,
        publisher_records: 1,
        publisher_round_trips: 4,
        stream_records: 5,
        ..direct.clone()
    };
    let qd = pattern_quantities(&direct, &d, &a);
    let qo = pattern_quantities(&outbox, &d, &a);
    assert!(close(qd.sqs_requests, 2.4) && qd.sqs_fifo_requests == 0.0);
    // The request moves to the FIFO queue; the scheduler and the ESMs stay standard.
    assert!(close(qo.sqs_requests, 1.4), "{}", qo.sqs_requests);
    assert!(close(qo.sqs_fifo_requests, 1.0));
    // 1/10 + 1/10 + 5/100 + 1/100 (the publisher's record in a batch of 100).
    assert!(close(qo.lambda_requests, 0.26), "{}", qo.lambda_requests);
    // (3/10 + 1/10 + 3 + 4) round trips × 10 ms × 0.25 GB.
    assert!(close(qo.lambda_gb_seconds, 7.4 * 0.010 * 0.25));
    let (bd, bo) = (bill(&qd, &PRICES, "arm64"), bill(&qo, &PRICES, "arm64"));
    assert!(close(bo.line("SQS FIFO requests").unwrap().usd, 0.50e-6));
    assert!(bd.line("SQS FIFO requests").is_none());
    // Two more write units ($1.25 per million), a FIFO request instead of a standard
    // one ($0.10), 0.02 more Lambda requests ($0.004), 4.7 more round trips of GB-s.
    let extra = 2.0 * 0.625 + 0.10 + 0.02 * 0.20 + 4.7 * 0.010 * 0.25 * 0.000_013_333_4 * 1e6;
    assert!(
        close(bo.per_million() - bd.per_million(), extra),
        "{} - {} vs {extra}",
        bo.per_million(),
        bd.per_million()
    );
}

#[test]
fn the_alternatives() {
    let d = deployment();
    let a = Assumptions::new(&d);
    // Step Functions: 3 transitions at $25 per million + one SQS send.
    let sfn = bill(&step_functions_quantities(4_200, &a), &PRICES, "arm64");
    assert!(
        close(sfn.per_million(), 75.0 + 0.40),
        "{}",
        sfn.per_million()
    );
    // Durable functions: 2 operations at $8 per million, a resume invocation of two
    // 10 ms round trips at 0.25 GB, 2 KB written at $0.25/GB, one SQS send.
    let durable = bill(&durable_quantities(4_200, &d, &a), &PRICES, "arm64");
    let expected = 16.0
        + 0.20
        + 0.25 * 0.020 * 0.000_013_333_4 * 1e6
        + 2048.0 / 1_073_741_824.0 * 0.25 * 1e6
        + 0.40;
    assert!(
        close(durable.per_million(), expected),
        "{} vs {expected}",
        durable.per_million()
    );
    // A Lambda held for the 2 h wait at 0.25 GB.
    let sleeping = bill(&sleeping_quantities(4_200, &d, &a), &PRICES, "arm64");
    let expected = 7200.0 * 0.25 * 0.000_013_333_4 * 1e6 + 0.20 + 0.40;
    assert!(
        close(sleeping.per_million(), expected),
        "{} vs {expected}",
        sleeping.per_million()
    );
}

/// GIVEN the failure path as the domain writes it WHEN billed by DynamoDB's rules THEN
/// the failed-index costs one write when a transaction fails and one when it is
/// replayed, and nothing else on the path touches it.
#[test]
fn the_failed_index_costs_one_write_at_failure_and_one_at_replay() {
    let w = retry_bench::cycle::failure_path(3).unwrap();
    assert_eq!(w.len(), 2);
    assert_eq!(
        (w[0].table, w[0].failed_index, w[0].reconcile_index),
        (1.0, 1.0, 0.0),
        "{:?}",
        w[0]
    );
    assert_eq!(
        (w[1].table, w[1].failed_index, w[1].reconcile_index),
        (1.0, 1.0, 1.0),
        "{:?}",
        w[1]
    );
}

#[test]
fn chunks_of_64_kb() {
    assert_eq!(sqs_requests_for_message(1), 1.0);
    assert_eq!(sqs_requests_for_message(65_536), 1.0);
    assert_eq!(sqs_requests_for_message(65_537), 2.0);
}

#[test]
fn esm_requests_follow_the_fill() {
    let d = deployment();
    let mut a = Assumptions::new(&d);
    assert_eq!(a.esm_requests_per_message(10), 0.2);
    assert_eq!(a.esm_requests_per_message(100), 0.2, "at most 10 per call");
    a.batch_fill = Some(1);
    assert_eq!(a.esm_requests_per_message(10), 2.0);
}

/// 2 + 5 environments, each reading once per 5 s, for 10 retries per second.
#[test]
fn breaker_reads_are_amortised_over_the_fleet_rate() {
    let mut d = deployment();
    assert!((breaker_reads_per_retry(&d) - 0.14).abs() < 1e-12);
    d.breaker_refresh_seconds = 1.0;
    assert!((breaker_reads_per_retry(&d) - 0.7).abs() < 1e-12);
}
