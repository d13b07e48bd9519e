//! Reads what `cargo bench --bench handlers` (criterion) wrote under
//! `<target>/criterion/handlers/<id>/new/`: the mean time per iteration with its 95 %
//! confidence interval, divided by the records one iteration processes (its
//! `Throughput::Elements`).

use serde::Deserialize;
use std::path::{Path, PathBuf};

/// The benchmarks of `bench/benches/handlers.rs`, in print order, with what they measure.
pub const HANDLER_BENCHES: [(&str, &str); 4] = [
    ("response-core", "response handler core, 1 record"),
    (
        "response-batch10",
        "response handler `handle_event`, 10-record SQS batch",
    ),
    ("retry-core", "retry handler core, 1 record"),
    (
        "retry-batch10",
        "retry handler `handle_event`, 10-record SQS batch",
    ),
];

/// One benchmark's result, per record.
#[derive(Debug, Clone, PartialEq)]
pub struct PerRecord {
    pub id: String,
    pub what: String,
    pub mean_ns: f64,
    pub low_ns: f64,
    pub high_ns: f64,
    pub records_per_iteration: u64,
}

#[derive(Deserialize)]
struct Interval {
    lower_bound: f64,
    upper_bound: f64,
}

#[derive(Deserialize)]
struct Estimate {
    point_estimate: f64,
    confidence_interval: Interval,
}

#[derive(Deserialize)]
struct Estimates {
    mean: Estimate,
}

#[derive(Deserialize)]
struct Benchmark {
    throughput: Option<serde_json::Value>,
}

fn elements(dir: &Path) -> u64 {
    std::fs::read_to_string(dir.join("benchmark.json"))
        .ok()
        .and_then(|t| serde_json::from_str::<Benchmark>(&t).ok())
        .and_then(|b| b.throughput)
        .and_then(|t| t.get("Elements").and_then(serde_json::Value::as_u64))
        .unwrap_or(1)
        .max(1)
}

/// The results found under `criterion_dir` (`None` for a benchmark not run).
pub fn read(criterion_dir: &Path) -> Vec<(String, String, Option<PerRecord>)> {
    HANDLER_BENCHES
        .iter()
        .map(|(id, what)| {
            let dir: PathBuf = criterion_dir.join("handlers").join(id).join("new");
            let found = std::fs::read_to_string(dir.join("estimates.json"))
                .ok()
                .and_then(|t| serde_json::from_str::<Estimates>(&t).ok())
                .map(|e| {
                    let n = elements(&dir) as f64;
                    PerRecord {
                        id: (*id).to_owned(),
                        what: (*what).to_owned(),
                        mean_ns: e.mean.point_estimate / n,
                        low_ns: e.mean.confidence_interval.lower_bound / n,
                        high_ns: e.mean.confidence_interval.upper_bound / n,
                        records_per_iteration: n as u64,
                    }
                });
            ((*id).to_owned(), (*what).to_owned(), found)
        })
        .collect()
}
