//! `docs/capacity.md` is recomputed, not written by hand: its figures come from the
//! template's defaults, the quota table (`retry_bench::capacity::QUOTAS`) and the
//! per-cycle calls `docs/benchmarks.md` reports. A changed default, quota or measured
//! call changes the block between the markers, and this test fails until the page
//! says the same (`CAPACITY_DOC=write cargo test -p deferred-retry-bench --test
//! capacity` rewrites the block).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use retry_bench::capacity::{capacity, render, CapacityInputs, PerCycle};
use std::path::PathBuf;

const START: &str = "<!-- capacity:start -->\n";
const END: &str = "<!-- capacity:end -->";

fn root() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

fn computed(template: &str) -> String {
    let inputs = CapacityInputs::parse(template).unwrap();
    let per_cycle = PerCycle::from_benchmarks(&read("docs/benchmarks.md")).unwrap();
    render(&capacity(&inputs, &per_cycle))
}

#[test]
fn the_page_states_what_the_inputs_give() {
    let expected = computed(&read("template.yaml"));
    let page = read("docs/capacity.md");
    let from = page.find(START).expect("docs/capacity.md: no start marker") + START.len();
    let to = page.find(END).expect("docs/capacity.md: no end marker");
    if page[from..to] != expected {
        if std::env::var("CAPACITY_DOC").as_deref() == Ok("write") {
            let updated = format!("{}{expected}{}", &page[..from], &page[to..]);
            std::fs::write(root().join("docs/capacity.md"), updated).unwrap();
        } else {
            panic!(
                "docs/capacity.md differs from its inputs; the block should read:\n{expected}\n(CAPACITY_DOC=write rewrites it)"
            );
        }
    }
}

#[test]
fn the_figures_follow_the_inputs() {
    let template = read("template.yaml");
    let inputs = CapacityInputs::parse(&template).unwrap();
    let per_cycle = PerCycle::from_benchmarks(&read("docs/benchmarks.md")).unwrap();
    let c = capacity(&inputs, &per_cycle);
    // The measured cycle: one schedule created and fired, two index write units.
    assert_eq!(per_cycle.create_schedule, 1.0);
    assert_eq!(per_cycle.scheduler_invocations, 1.0);
    assert!(per_cycle.index_write_units > 0.0 && per_cycle.breaker_write_units > 0.0);
    // The defaults: 2 environments × 5 requests/s; waits 2 h, 4 h, 8 h, ±10 %.
    assert_eq!(c.sustained_retries_per_second, 10.0);
    assert!(
        !c.bounds[0].aws,
        "the stack's own bound comes first: {:?}",
        c.bounds[0]
    );
    assert!((c.longest_wait_seconds - 8.0 * 3600.0 * 1.1).abs() < 1e-6);
    assert!((c.spread_seconds - 2.0 * 3600.0 * 0.2).abs() < 1e-6);
    assert_eq!(c.first_quota_other.retries_per_second, 250.0);
    assert!((c.first_quota_largest.retries_per_second - 10_000_000.0 / 31_680.0).abs() < 1e-6);
    // The alarm warns before the first scheduler quota of either Region class.
    let first = c
        .first_quota_other
        .retries_per_second
        .min(c.first_quota_largest.retries_per_second);
    assert!(
        c.alarm_per_second <= 0.8 * first,
        "CreateScheduleAlarmPerMinute ({}/s) is past 80 % of {first}/s",
        c.alarm_per_second
    );

    // Twice the retry handlers: twice the sustained rate, the page no longer matches;
    // a budget of 6 attempts reaches the 24 h cap: the schedules quota binds sooner.
    let doubled = template.replace(
        "  RetryHandlerMaxConcurrency:\n    Type: Number\n    Default: 2\n",
        "  RetryHandlerMaxConcurrency:\n    Type: Number\n    Default: 4\n",
    );
    assert_ne!(doubled, template);
    let d = capacity(&CapacityInputs::parse(&doubled).unwrap(), &per_cycle);
    assert_eq!(d.sustained_retries_per_second, 20.0);
    assert_ne!(computed(&doubled), computed(&template));
    let six = template.replace(
        "  DefaultMaxAttempts:\n    Type: Number\n    Default: 4\n",
        "  DefaultMaxAttempts:\n    Type: Number\n    Default: 6\n",
    );
    let s = capacity(&CapacityInputs::parse(&six).unwrap(), &per_cycle);
    assert!((s.longest_wait_seconds - 24.0 * 3600.0 * 1.1).abs() < 1e-6);
    assert!(s.first_quota_largest.retries_per_second < c.first_quota_largest.retries_per_second);
}

#[test]
fn a_missing_row_of_the_benchmarks_is_named() {
    let e = PerCycle::from_benchmarks("| something else | 1 |").unwrap_err();
    assert!(
        e.to_string().contains("response handler: CreateSchedule"),
        "{e}"
    );
}
