//! What a load test saw, and its text form.

use super::meter::ServiceCalls;
use serde::Serialize;
use std::collections::BTreeMap;

/// Seconds at the 50th, 90th and 99th percentile (nearest rank) and the longest.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Spread {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
}

impl Spread {
    /// The spread of `millis` (any order); `None` when empty.
    pub fn of(mut millis: Vec<i64>) -> Option<Self> {
        millis.sort_unstable();
        let last = *millis.last()?;
        let rank = |q: f64| {
            let idx = (millis.len() as f64 * q).ceil() as usize;
            millis[idx.clamp(1, millis.len()) - 1] as f64 / 1000.0
        };
        Some(Self {
            p50: rank(0.50),
            p90: rank(0.90),
            p99: rank(0.99),
            max: last as f64 / 1000.0,
        })
    }
}

/// A transaction that had not ended when the report was made.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Unfinished {
    pub id: String,
    /// Its status when last read, or `NOT_FOUND` / `NOT_READ`.
    pub status: String,
    pub attempt: Option<u32>,
}

/// A transaction that ended otherwise than its script says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Unexpected {
    pub id: String,
    pub expected: String,
    pub found: String,
}

/// A start that failed (after the SDK's retries).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StartFailure {
    pub id: String,
    /// The error kind, as `--json` errors name it (`aws-throttled`, …).
    pub kind: String,
    pub message: String,
}

/// A dead-letter queue's depth before and after the run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DlqDepth {
    pub queue: String,
    pub before: u64,
    pub after: u64,
}

/// The rate the retries went out at, next to the stack's outbound bound.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Capacity {
    /// Retries sent ÷ the seconds from the first start to the last transaction's end.
    pub retries_per_second: f64,
    /// The stack's sustained rate (`docs/capacity.md`): RetryHandlerMaxConcurrency ×
    /// MaxRequestsPerSecond, from its output `OutboundRequestsPerSecondBound`.
    pub outbound_bound_per_second: Option<f64>,
    /// Where the bound came from, or why there is none.
    pub bound_from: String,
}

/// The report of one run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    pub stacks: Vec<String>,
    pub run: String,
    /// Every id of the run starts with it (`retryctl list`, `retryctl erase`).
    pub id_prefix: String,
    pub transactions: u32,
    pub rate: f64,
    pub duration_seconds: u64,
    pub cancel_times: Vec<u32>,
    pub max_attempts: u32,
    /// Starts that succeeded.
    pub started: u64,
    /// Not started: the ceiling came first.
    pub not_started: u64,
    pub start_failures: Vec<StartFailure>,
    /// Starts ÷ the seconds from the first start to the last one's answer.
    pub starts_per_second: f64,
    pub succeeded: u64,
    pub failed: u64,
    /// Started and not ended at the ceiling, each listed.
    pub in_flight: Vec<Unfinished>,
    pub unexpected: Vec<Unexpected>,
    /// Retries the scripts call for (CANCELLED answers with attempts left).
    pub retries_expected: u64,
    /// Retries sent: attempts past the first, of every transaction read.
    pub retries_sent: u64,
    /// From the start to the terminal write (the record's own times).
    pub time_to_terminal: Option<Spread>,
    pub capacity: Capacity,
    /// The calls this command made, by service, and the SDK's retries of them.
    pub client: BTreeMap<String, ServiceCalls>,
    /// State items BatchGetItem handed back unprocessed (read again the next round):
    /// DynamoDB's sign of throttled reads.
    pub unprocessed_reads: u64,
    /// BatchGetItem calls that failed after the SDK's retries (read again).
    pub failed_reads: u64,
    pub dlqs: Vec<DlqDepth>,
    /// Retry schedules of this run still in the schedule group.
    pub schedules_left: Vec<String>,
    /// The ceiling stopped the run.
    pub stopped_at_ceiling: bool,
    pub seconds: f64,
    pub ok: bool,
}

impl Report {
    /// Every started transaction ended as its script says, none failed to start or
    /// was left out, and no DLQ grew.
    pub fn complete(&self) -> bool {
        self.not_started == 0
            && self.start_failures.is_empty()
            && self.in_flight.is_empty()
            && self.unexpected.is_empty()
            && self.dlqs.iter().all(|d| d.after <= d.before)
    }

    /// Why it is not complete, in one line.
    pub fn shortfall(&self) -> String {
        let mut why = vec![];
        if self.not_started > 0 {
            why.push(format!("{} not started", self.not_started));
        }
        if !self.start_failures.is_empty() {
            why.push(format!("{} failed to start", self.start_failures.len()));
        }
        if !self.in_flight.is_empty() {
            why.push(format!("{} still in flight", self.in_flight.len()));
        }
        if !self.unexpected.is_empty() {
            why.push(format!(
                "{} ended otherwise than scripted",
                self.unexpected.len()
            ));
        }
        let grew: Vec<String> = self
            .dlqs
            .iter()
            .filter(|d| d.after > d.before)
            .map(|d| format!("{} +{}", d.queue, d.after - d.before))
            .collect();
        if !grew.is_empty() {
            why.push(format!("DLQ messages: {}", grew.join(", ")));
        }
        format!("loadtest incomplete: {}", why.join("; "))
    }
}

/// How many of a long list the text prints.
const LISTED: usize = 20;

fn listed<T>(items: &[T], line: impl Fn(&T) -> String) -> String {
    let mut out: String = items
        .iter()
        .take(LISTED)
        .map(|i| format!("    {}\n", line(i)))
        .collect();
    if items.len() > LISTED {
        out.push_str(&format!(
            "    … {} more (all of them under --json)\n",
            items.len() - LISTED
        ));
    }
    out
}

/// The report for people.
pub fn render(r: &Report) -> String {
    let mix: Vec<String> = r.cancel_times.iter().map(u32::to_string).collect();
    let mut out = format!(
        "loadtest {} — run {} (ids {}…)\n  asked: {} transactions at {}/s, ceiling {} s, CANCELLED {} time(s) before SUCCESS, budget {}\n\n",
        r.stacks.join(" + "),
        r.run,
        r.id_prefix,
        r.transactions,
        r.rate,
        r.duration_seconds,
        mix.join(","),
        r.max_attempts
    );
    out.push_str(&format!(
        "starts        {} started at {:.1}/s, {} failed to start, {} not started\n",
        r.started,
        r.starts_per_second,
        r.start_failures.len(),
        r.not_started
    ));
    out.push_str(&format!(
        "statuses      {} SUCCEEDED, {} FAILED, {} in flight, {} not as scripted\n",
        r.succeeded,
        r.failed,
        r.in_flight.len(),
        r.unexpected.len()
    ));
    out.push_str(&format!(
        "retries       {} sent ({} scripted)\n",
        r.retries_sent, r.retries_expected
    ));
    match &r.time_to_terminal {
        Some(s) => out.push_str(&format!(
            "to terminal   p50 {:.1} s, p90 {:.1} s, p99 {:.1} s, max {:.1} s\n",
            s.p50, s.p90, s.p99, s.max
        )),
        None => out.push_str("to terminal   none ended\n"),
    }
    let c = &r.capacity;
    match c.outbound_bound_per_second {
        Some(b) if b > 0.0 => out.push_str(&format!(
            "capacity      retries went out at {:.2}/s; the stack's sustained rate is {b}/s ({}, docs/capacity.md): {:.0} % of it\n",
            c.retries_per_second,
            c.bound_from,
            100.0 * c.retries_per_second / b
        )),
        _ => out.push_str(&format!(
            "capacity      retries went out at {:.2}/s; no bound to compare ({})\n",
            c.retries_per_second, c.bound_from
        )),
    }
    let client: Vec<String> = r
        .client
        .iter()
        .map(|(s, c)| format!("{s} {} calls, {} SDK retries", c.calls, c.sdk_retries))
        .collect();
    out.push_str(&format!(
        "client        {}; {} reads unprocessed, {} failed; {} throttled start(s)\n",
        client.join("; "),
        r.unprocessed_reads,
        r.failed_reads,
        r.start_failures
            .iter()
            .filter(|f| f.kind == "aws-throttled")
            .count()
    ));
    let dlqs: Vec<String> = r
        .dlqs
        .iter()
        .map(|d| format!("{} {} (before {})", d.queue, d.after, d.before))
        .collect();
    out.push_str(&format!("DLQs          {}\n", dlqs.join(", ")));
    out.push_str(&format!(
        "schedules     {} of this run left\n",
        r.schedules_left.len()
    ));
    if !r.in_flight.is_empty() {
        out.push_str("\nstill in flight (started, not ended):\n");
        out.push_str(&listed(&r.in_flight, |u| match u.attempt {
            Some(a) => format!("{} {} at attempt {a}", u.id, u.status),
            None => format!("{} {}", u.id, u.status),
        }));
    }
    if !r.unexpected.is_empty() {
        out.push_str("\nnot as scripted:\n");
        out.push_str(&listed(&r.unexpected, |u| {
            format!("{}: expected {}, found {}", u.id, u.expected, u.found)
        }));
    }
    if !r.start_failures.is_empty() {
        out.push_str("\nfailed to start:\n");
        out.push_str(&listed(&r.start_failures, |f| {
            format!("{} ({}): {}", f.id, f.kind, f.message)
        }));
    }
    if !r.schedules_left.is_empty() {
        out.push_str("\nschedules left:\n");
        out.push_str(&listed(&r.schedules_left, String::clone));
    }
    out.push_str(&format!(
        "\n{} in {:.1} s{}\n",
        if r.ok { "COMPLETE" } else { "INCOMPLETE" },
        r.seconds,
        if r.stopped_at_ceiling {
            " (stopped at the --duration ceiling)"
        } else {
            ""
        }
    ));
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn the_spread_uses_the_nearest_rank() {
        let s = Spread::of((1..=100).rev().map(|i| i * 1000).collect()).unwrap();
        assert_eq!((s.p50, s.p90, s.p99, s.max), (50.0, 90.0, 99.0, 100.0));
        let one = Spread::of(vec![1500]).unwrap();
        assert_eq!((one.p50, one.max), (1.5, 1.5));
        assert_eq!(Spread::of(vec![]), None);
    }
}
