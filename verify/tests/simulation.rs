//! The simulator: exact replay, a CI-sized run with every fault on, and the
//! guarantees that need scale (a burst of simultaneous cancellations, the outbound
//! rate limit, DLQ alarms, the reconciler rescuing what the scheduler lost).

use clap::Parser;
use verify::sim::{simulate, Report, SimConfig};
use verify::simcli::SimArgs;

fn cfg(transactions: usize) -> SimConfig {
    SimConfig {
        transactions,
        ..SimConfig::default()
    }
}

fn valid(r: &Report) {
    assert!(r.is_valid(), "violations {:?}\n{r}", r.violations());
    assert_eq!(r.attempted, r.succeeded + r.failed + r.stuck);
}

#[test]
fn the_same_seed_replays_the_same_run_exactly() {
    let c = cfg(3_000);
    let a = simulate(&c, 42);
    let b = simulate(&c, 42);
    assert_eq!(a, b, "two runs of one seed must give identical reports");
    assert_eq!(a.to_string(), b.to_string());
    let other = simulate(&c, 43);
    assert_ne!(a.digest, other.digest, "another seed is another run");
    assert!(a.crashes > 0 && a.throttles > 0 && a.duplicate_deliveries > 0 && a.late_fires > 0);
}

#[test]
fn ci_sized_run_with_every_fault_breaks_no_guarantee() {
    let c = cfg(5_000);
    let mut total = Report::default();
    for seed in 1..=4 {
        let r = simulate(&c, seed);
        valid(&r);
        total.merge(&r);
    }
    println!("{total}");
    assert_eq!(total.attempted, 20_000);
    assert_eq!(total.lost, 0);
    assert!(total.late_dropped > 0, "late responses were exercised");
    assert!(
        total.requests_deduplicated > 0,
        "republishes were exercised"
    );
    assert!(
        total.dlq_scheduler > 0 && total.reconciler_actions > 0,
        "the reconciler rescued scheduler losses"
    );
    // Every failure point of the failure table was hit by a crash.
    for point in [
        "crash response-handler before write ResponseCancelledRetry",
        "crash response-handler before create-schedule",
        "crash response-handler before write ScheduleConfirmed",
        "crash retry-handler before write RetryEventAccepted",
        "crash retry-handler before publish-request",
        "crash retry-handler before write RequestPublished",
    ] {
        assert!(
            total.failure_points.get(point).copied().unwrap_or(0) > 0,
            "not hit: {point}"
        );
    }
}

/// The service answers REJECTED to a tenth of the attempts, every fault on: each such
/// transaction ends FAILED/REJECTED, and no request is published after the rejection
/// is recorded (the report's check); a run without the rate draws none.
#[test]
fn rejected_answers_end_transactions_and_nothing_is_sent_after_them() {
    let c = SimConfig {
        rejected_rate: 0.1,
        technical_rate: 0.05,
        ..cfg(5_000)
    };
    let r = simulate(&c, 7);
    valid(&r);
    assert!(r.rejected_answers > 0 && r.ended_rejected > 0, "{r}");
    assert!(r.ended_rejected <= r.failed);
    assert_eq!(r.published_after_rejection, 0);
    let without = simulate(&cfg(5_000), 7);
    assert_eq!((without.rejected_answers, without.ended_rejected), (0, 0));
}

/// N transactions all CANCELLED in the same instant, no jitter: their retries fall due
/// together. None is lost, none duplicated, and the service never sees more than the
/// fleet limit per second.
#[test]
fn a_burst_of_simultaneous_cancellations_loses_and_duplicates_no_retry() {
    let n = 3_000;
    let c = SimConfig {
        transactions: n,
        arrival_window_ms: 0,
        cancel_rate: 1.0,
        jitter: 0.0,
        ..SimConfig::default().answered()
    };
    let r = simulate(&c, 7);
    valid(&r);
    println!("{r}");
    assert_eq!(
        r.failed, n as u64,
        "every transaction exhausted its 3 attempts"
    );
    assert_eq!(
        r.requests_accepted,
        3 * n as u64,
        "exactly one request per attempt"
    );
    assert_eq!(r.duplicated, 0);
    assert_eq!(r.alerts_missing, 0);
    assert!(r.max_requests_per_second <= c.fleet_limit());
    assert_eq!(
        r.max_requests_per_second,
        c.fleet_limit(),
        "the burst saturates the limit"
    );
}

#[test]
fn without_pacing_the_rate_check_fails() {
    let c = SimConfig {
        transactions: 3_000,
        arrival_window_ms: 0,
        cancel_rate: 1.0,
        jitter: 0.0,
        pacing: false,
        ..SimConfig::default()
    };
    let r = simulate(&c, 7);
    assert!(r.max_requests_per_second > c.fleet_limit(), "{r}");
    assert!(r.violates("rate-limit-exceeded"), "{r}");
}

#[test]
fn poison_messages_go_to_the_dlq_and_are_counted_never_silently_lost() {
    let c = SimConfig {
        transactions: 2_000,
        throttle_rate: 0.3,
        max_receive_count: 1,
        reconciler: false,
        ..SimConfig::default().answered()
    };
    let r = simulate(&c, 3);
    assert!(r.dlq_response + r.dlq_retry > 0, "{r}");
    assert!(
        r.stuck_in_dlq > 0,
        "DLQ'd transactions are reported (alarmed)"
    );
    assert_eq!(r.lost, 0, "no transaction is stuck without a DLQ message");
}

#[test]
fn the_reconciler_resumes_what_the_scheduler_could_not_deliver() {
    let lossy = SimConfig {
        transactions: 2_000,
        scheduler_failure_rate: 0.3,
        ..SimConfig::default().answered()
    };
    let r = simulate(&lossy, 5);
    valid(&r);
    assert!(r.dlq_scheduler > 100);
    assert_eq!(r.stuck, 0, "every transaction ends SUCCEEDED or FAILED");
    // Without the reconciler the same losses leave transactions SCHEDULED (alarmed by
    // the scheduler DLQ).
    let r = simulate(
        &SimConfig {
            reconciler: false,
            ..lossy
        },
        5,
    );
    assert!(r.stuck_in_dlq > 0 && r.lost == 0, "{r}");
}

#[test]
fn the_replay_command_reproduces_the_arguments() {
    let args = SimArgs::parse_from([
        "simulate",
        "--seed-start",
        "9",
        "--seeds",
        "3",
        "--transactions",
        "100",
        "--crash-rate",
        "0.1",
        "--no-reconciler",
        "--flaw",
        "attempts-from-zero",
    ]);
    let line = args.command_line(Some(10));
    let tail = line.split(" -- ").nth(1).unwrap_or_default();
    let again = SimArgs::parse_from(std::iter::once("simulate").chain(tail.split_whitespace()));
    assert_eq!(again.seed_start, 10);
    assert_eq!(again.seeds, 1);
    assert_eq!(again.config(), args.config());
    assert!(SimArgs::parse_from(["simulate", "--flaw", "nope"])
        .config()
        .is_err());
    assert!(SimArgs::parse_from(["simulate", "--crash-rate", "2"])
        .config()
        .is_err());
}
