//! `docs/benchmarks.md`: every figure of one run, its prices, its assumptions, and the
//! targets each one is checked against. The summary block between the
//! `bench-summary` markers is the README's table.

use crate::burst::BurstResult;
use crate::criterion_results::PerRecord;
use crate::cycle::{round_trips, CycleMeasurement, TechnicalBurst};
use crate::init::{BinarySize, InitTimes};
use crate::model::{self, Assumptions, Bill};
use crate::prices::PriceTable;
use crate::template::Deployment;
use std::fmt::Write as _;
use strum::VariantArray;
use testkit::meter::CallCounts;

/// The cost target at 4 KB payloads (dollars per million retries).
pub const TARGET_USD_PER_MILLION_4KB: f64 = 8.0;
/// Round-trip targets per record.
pub const TARGET_RESPONSE_ROUND_TRIPS: u64 = 3;
pub const TARGET_RETRY_ROUND_TRIPS: u64 = 4;

/// Everything one run measured.
#[derive(Debug, Clone)]
pub struct Report {
    pub generated_at: String,
    pub machine: String,
    pub deployment: Deployment,
    pub assumptions: Assumptions,
    pub prices: PriceTable,
    pub cycles: Vec<CycleMeasurement>,
    pub criterion: Vec<(String, String, Option<PerRecord>)>,
    pub binaries_built_with: String,
    pub sizes: Vec<BinarySize>,
    pub init: Vec<InitTimes>,
    pub init_runs: usize,
    pub bursts: Vec<BurstResult>,
    pub burst_note: Option<String>,
    pub wall_time: std::time::Duration,
    /// The command that produced the report.
    pub command: String,
    /// ReceiveMessage time with n messages queued, per moto server program (stock
    /// `moto_server` first).
    pub moto_receive: Vec<(String, Vec<(u32, std::time::Duration)>)>,
    /// The circuit breaker's writes under a burst of ERROR answers.
    pub technical: Option<TechnicalBurst>,
}

/// The four ways of waiting the model prices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, VariantArray)]
pub enum Alternative {
    Pattern,
    StepFunctions,
    Durable,
    Sleeping,
}

impl Alternative {
    /// Every variant, in declaration order.
    pub const ALL: &'static [Alternative] = <Self as VariantArray>::VARIANTS;

    pub fn label(self) -> &'static str {
        match self {
            Alternative::Pattern => "deferred retry (this project)",
            Alternative::StepFunctions => "Step Functions Standard (Wait + Task + Choice)",
            Alternative::Durable => "Lambda durable functions (wait + step)",
            Alternative::Sleeping => "sleeping Lambda (held for the wait)",
        }
    }
}

impl Report {
    pub fn cycle(&self, payload_bytes: usize, deliveries: u32) -> Option<&CycleMeasurement> {
        self.cycles
            .iter()
            .find(|c| c.spec.payload_bytes == payload_bytes && c.spec.deliveries == deliveries)
    }

    pub fn payload_sizes(&self) -> Vec<usize> {
        let mut v: Vec<usize> = self.cycles.iter().map(|c| c.spec.payload_bytes).collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    /// The bill of one alternative for one measured cycle.
    pub fn bill(&self, alt: Alternative, c: &CycleMeasurement, a: &Assumptions) -> Bill {
        let d = &self.deployment;
        let q = match alt {
            Alternative::Pattern => model::pattern_quantities(&c.billables(), d, a),
            Alternative::StepFunctions => {
                model::step_functions_quantities(c.request_message_bytes, a)
            }
            Alternative::Durable => model::durable_quantities(c.request_message_bytes, d, a),
            Alternative::Sleeping => model::sleeping_quantities(c.request_message_bytes, d, a),
        };
        model::bill(&q, &self.prices, &d.architecture)
    }

    /// Dollars per million retries of the pattern at 4 KB on the happy path.
    pub fn pattern_4kb(&self) -> Option<f64> {
        self.cycle(4096, 1).map(|c| {
            self.bill(Alternative::Pattern, c, &self.assumptions)
                .per_million()
        })
    }
}

/// `1234567` → `1,234,567`.
pub fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, ch) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

/// Dollars with sensible precision.
pub fn usd(v: f64) -> String {
    if v >= 1000.0 {
        format!("${}", thousands(v.round() as u64))
    } else if v >= 10.0 {
        format!("${v:.1}")
    } else if v >= 0.1 {
        format!("${v:.2}")
    } else {
        format!("${v:.4}")
    }
}

/// A quantity with sensible precision.
pub(crate) fn num(v: f64) -> String {
    if (v - v.round()).abs() < 1e-9 {
        format!("{}", v.round() as i64)
    } else if v >= 0.1 {
        format!("{v:.2}")
    } else {
        format!("{v:.4}")
    }
}

fn size_label(bytes: usize) -> String {
    if bytes >= 1024 && bytes % 1024 == 0 {
        format!("{} KB", bytes / 1024)
    } else {
        format!("{bytes} B")
    }
}

fn yes(ok: bool) -> &'static str {
    if ok {
        "yes"
    } else {
        "**NO**"
    }
}

fn ms(d: std::time::Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

/// The seconds of a moment the run reached, or that it did not.
fn reached(d: Option<std::time::Duration>) -> String {
    d.map(secs).unwrap_or_else(|| "**not reached**".into())
}

fn secs(d: std::time::Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}

/// The summary: cost beside the alternatives and every target.
pub fn summary(r: &Report) -> String {
    let mut s = String::new();
    let sizes = r.payload_sizes();
    let _ = writeln!(s, "<!-- bench-summary:start -->");
    let _ = write!(
        s,
        "| dollars per million retries (us-east-1, prices of {}) |",
        r.prices.as_of
    );
    for b in &sizes {
        let _ = write!(s, " {} payload |", size_label(*b));
    }
    let _ = writeln!(s);
    let _ = writeln!(s, "|---|{}", "---:|".repeat(sizes.len()));
    for &alt in Alternative::ALL {
        let _ = write!(s, "| {} |", alt.label());
        for b in &sizes {
            match r.cycle(*b, 1) {
                Some(c) => {
                    let _ = write!(
                        s,
                        " {} |",
                        usd(r.bill(alt, c, &r.assumptions).per_million())
                    );
                }
                None => s.push_str(" – |"),
            }
        }
        let _ = writeln!(s);
    }
    let _ = write!(s, "| deferred retry, every message delivered twice |");
    for b in &sizes {
        match r.cycle(*b, 2) {
            Some(c) => {
                let _ = write!(
                    s,
                    " {} |",
                    usd(r
                        .bill(Alternative::Pattern, c, &r.assumptions)
                        .per_million())
                );
            }
            None => s.push_str(" – |"),
        }
    }
    let _ = writeln!(s);
    let mut trickle = r.assumptions.clone();
    trickle.batch_fill = Some(1);
    let _ = write!(
        s,
        "| deferred retry, one message per Lambda invocation (a trickle) |"
    );
    for b in &sizes {
        match r.cycle(*b, 1) {
            Some(c) => {
                let _ = write!(
                    s,
                    " {} |",
                    usd(r.bill(Alternative::Pattern, c, &trickle).per_million())
                );
            }
            None => s.push_str(" – |"),
        }
    }
    let _ = writeln!(s);
    let _ = writeln!(s);
    let _ = writeln!(s, "| target | measured | met |");
    let _ = writeln!(s, "|---|---|---|");
    for (target, measured, met) in targets(r) {
        let _ = writeln!(s, "| {target} | {measured} | {} |", yes(met));
    }
    let _ = writeln!(s, "<!-- bench-summary:end -->");
    s
}

/// (target, measured, met) rows.
pub fn targets(r: &Report) -> Vec<(String, String, bool)> {
    let mut rows = Vec::new();
    if let (Some(v), Some(c)) = (r.pattern_4kb(), r.cycle(4096, 1)) {
        let sfn = r
            .bill(Alternative::StepFunctions, c, &r.assumptions)
            .per_million();
        let durable = r
            .bill(Alternative::Durable, c, &r.assumptions)
            .per_million();
        rows.push((
            format!(
                "≤ {} per million retries at 4 KB, circuit breaker on",
                usd(TARGET_USD_PER_MILLION_4KB)
            ),
            format!(
                "{} ({:.2} × durable functions, 1/{:.1} of Step Functions)",
                usd(v),
                v / durable,
                sfn / v
            ),
            v <= TARGET_USD_PER_MILLION_4KB,
        ));
    }
    if let Some(t) = &r.technical {
        let batches = t.errors.div_ceil(u64::from(t.batch_size.max(1)));
        rows.push((
            format!(
                "circuit breaker: one count write per batch of ERROR answers (burst of {} in batches of {})",
                thousands(t.errors),
                t.batch_size
            ),
            format!(
                "{} write requests per technical failure ({} count UpdateItem + {} state change), {} WRU",
                num(t.writes_per_error()),
                t.count_writes,
                t.state_changes,
                num(t.write_units_per_error())
            ),
            t.count_writes == batches,
        ));
    }
    let per_transition: Vec<(usize, f64)> = r
        .payload_sizes()
        .into_iter()
        .filter_map(|b| r.cycle(b, 1).map(|c| (b, c.state_billed().write())))
        .collect();
    if !per_transition.is_empty() {
        let first = per_transition[0].1;
        rows.push((
            "state-transition cost does not grow with the payload".into(),
            per_transition
                .iter()
                .map(|(b, w)| format!("{}: {} WRU", size_label(*b), num(*w)))
                .collect::<Vec<_>>()
                .join(", ")
                + " for the 4 state writes (table + index)",
            per_transition.iter().all(|(_, w)| (w - first).abs() < 1e-9),
        ));
    }
    let happy: Vec<&CycleMeasurement> =
        r.cycles.iter().filter(|c| c.spec.deliveries == 1).collect();
    if !happy.is_empty() {
        let a_reads: u64 = happy
            .iter()
            .map(|c| c.response_first.reads)
            .max()
            .unwrap_or(0);
        let b_reads: u64 = happy.iter().map(|c| c.retry_first.reads).max().unwrap_or(0);
        rows.push((
            "no read of the state item on either handler's happy path".into(),
            format!("state GetItem: response handler {a_reads}, retry handler {b_reads}"),
            a_reads == 0 && b_reads == 0,
        ));
        let a = happy
            .iter()
            .map(|c| round_trips(&c.response_first))
            .max()
            .unwrap_or(0);
        let b = happy
            .iter()
            .map(|c| round_trips(&c.retry_first))
            .max()
            .unwrap_or(0);
        rows.push((
            format!("≤ {TARGET_RESPONSE_ROUND_TRIPS} AWS round trips per record, response handler"),
            format!("{a} (2 UpdateItem + 1 CreateSchedule)"),
            a <= TARGET_RESPONSE_ROUND_TRIPS,
        ));
        rows.push((
            format!("≤ {TARGET_RETRY_ROUND_TRIPS} AWS round trips per record, retry handler (payload read included)"),
            format!("{b} (2 UpdateItem + 1 GetItem payload + 1 SendMessage)"),
            b <= TARGET_RETRY_ROUND_TRIPS,
        ));
    }
    for burst in &r.bursts {
        let n = thousands(u64::from(burst.spec.responses));
        rows.push((
            format!("burst of {n} CANCELLED: nothing lost"),
            match burst.lost {
                Some(lost) => format!("lost {lost}, dead-lettered {}", burst.dead_lettered),
                None => format!(
                    "not determined: {} still queued when the deadline passed",
                    burst.pending
                ),
            },
            burst.lost == Some(0) && burst.dead_lettered == 0,
        ));
        rows.push((
            format!("burst of {n} CANCELLED: nothing duplicated"),
            format!(
                "received twice by the service {}, published twice {}",
                burst.duplicated, burst.published_twice
            ),
            burst.duplicated == 0 && burst.published_twice == 0,
        ));
        rows.push((
            format!("burst of {n} CANCELLED: never above the rate limit"),
            format!(
                "peak {} requests published in any sliding one-second window ({} in one wall-clock second), limit {}/s",
                burst.peak_sliding_second,
                burst.peak_per_second,
                num(burst.rate_bound)
            ),
            burst.within_bound(),
        ));
    }
    rows
}

/// A handler's state-item UpdateItems, "writes (of which condition failed)".
fn updates(c: &CallCounts) -> String {
    format!("{} ({})", c.writes, c.failed_conditions)
}

/// A handler's AWS round trips, "first delivery / all".
fn trips(first: &CallCounts, all: &CallCounts) -> String {
    format!("{} / {}", round_trips(first), round_trips(all))
}

fn cycle_table(r: &Report) -> String {
    let mut s = String::new();
    let cols: Vec<&CycleMeasurement> = {
        let mut v: Vec<&CycleMeasurement> = r.cycles.iter().collect();
        v.sort_by_key(|c| (c.spec.deliveries, c.spec.payload_bytes));
        v
    };
    let _ = write!(s, "| per retry cycle |");
    for c in &cols {
        let _ = write!(
            s,
            " {}{} |",
            size_label(c.spec.payload_bytes),
            if c.spec.deliveries > 1 {
                ", ×2 deliveries"
            } else {
                ""
            }
        );
    }
    let _ = writeln!(s);
    let _ = writeln!(s, "|---|{}", "---:|".repeat(cols.len()));
    let a = &r.assumptions;
    let q = |c: &CycleMeasurement| model::pattern_quantities(&c.billables(), &r.deployment, a);
    let mut row = |label: &str, f: &dyn Fn(&CycleMeasurement) -> String| {
        let _ = write!(s, "| {label} |");
        for c in &cols {
            let _ = write!(s, " {} |", f(c));
        }
        let _ = writeln!(s);
    };
    row(
        "response handler: UpdateItem (of which condition failed)",
        &|c| updates(&c.response),
    );
    row("response handler: CreateSchedule", &|c| {
        c.response.schedule_creates.to_string()
    });
    row("response handler: GetItem of the state item", &|c| {
        c.response.reads.to_string()
    });
    row(
        "response handler: AWS round trips, first delivery / all",
        &|c| trips(&c.response_first, &c.response),
    );
    row(
        "retry handler: UpdateItem (of which condition failed)",
        &|c| updates(&c.retry),
    );
    row("retry handler: GetItem payload / GetItem state", &|c| {
        format!("{} / {}", c.retry.payload_reads, c.retry.reads)
    });
    row("retry handler: SendMessage (request)", &|c| {
        c.retry.sends.to_string()
    });
    row(
        "retry handler: AWS round trips, first delivery / all",
        &|c| trips(&c.retry_first, &c.retry),
    );
    row(
        "audit writer: UpdateItem (one per handler run × deliveries)",
        &|c| c.audit.audit_writes.to_string(),
    );
    row("DynamoDB WRU, state item table (rules)", &|c| {
        num(c.state_billed().table_write)
    });
    row("DynamoDB WRU, reconcile-index (rules)", &|c| {
        num(c.state_billed().index_write)
    });
    row("DynamoDB WRU, failed conditions (rules)", &|c| {
        num(c.failed_conditions.write())
    });
    row("DynamoDB WRU, audit items (rules)", &|c| {
        num(c.audit_billed.write())
    });
    row(
        "circuit breaker: count UpdateItem (response, one per batch) / GetItem of its item (both handlers, per refresh period)",
        &|c| {
            format!(
                "{} / {}",
                c.response.breaker_writes,
                c.response.breaker_reads + c.retry.breaker_reads
            )
        },
    );
    row(
        "DynamoDB WRU, circuit breaker per retry (count writes ÷ batch size)",
        &|c| num(q(c).dynamodb_write_units - c.rules_write_units()),
    );
    row(
        "DynamoDB RRU, circuit breaker per retry (reads per refresh period ÷ fleet rate)",
        &|c| num(q(c).dynamodb_read_units - c.rules_read_units()),
    );
    row("**DynamoDB WRU total (rules)** / moto reported", &|c| {
        format!(
            "**{}** / {}",
            num(q(c).dynamodb_write_units),
            num(c.moto_write_units())
        )
    });
    row("**DynamoDB RRU (rules)** / moto reported", &|c| {
        format!(
            "**{}** / {}",
            num(q(c).dynamodb_read_units),
            num(c.moto_read_units())
        )
    });
    row(
        "request message bytes (body + attributes) → SQS requests",
        &|c| {
            format!(
                "{} → {}",
                thousands(c.request_message_bytes as u64),
                num(model::sqs_requests_for_message(c.request_message_bytes))
            )
        },
    );
    row("**SQS requests** (sends + ESM receive/delete)", &|c| {
        format!("**{}**", num(q(c).sqs_requests))
    });
    row("**Scheduler invocations**", &|c| {
        format!("**{}**", c.response.schedule_creates)
    });
    row("**Lambda invocations** (at the batch sizes)", &|c| {
        format!("**{}**", num(q(c).lambda_requests))
    });
    row("Lambda GB-seconds (model)", &|c| {
        format!("{:.5}", q(c).lambda_gb_seconds)
    });
    row("**$ per million retries**", &|c| {
        format!(
            "**{}**",
            usd(r.bill(Alternative::Pattern, c, a).per_million())
        )
    });
    s
}

fn transitions_table(r: &Report) -> String {
    let mut s = String::new();
    let sizes = r.payload_sizes();
    let _ = write!(s, "| state write |");
    for b in &sizes {
        let _ = write!(
            s,
            " item bytes before → after, {} | WRU table + index |",
            size_label(*b)
        );
    }
    let _ = writeln!(s);
    let _ = writeln!(s, "|---|{}", "---:|---:|".repeat(sizes.len()));
    let base = sizes.first().and_then(|b| r.cycle(*b, 1));
    let Some(base) = base else {
        return s;
    };
    for (i, t) in base.transitions.iter().enumerate() {
        let _ = write!(s, "| {} → {} |", t.from, t.to);
        for b in &sizes {
            match r.cycle(*b, 1).and_then(|c| c.transitions.get(i)) {
                Some(t) => {
                    let _ = write!(
                        s,
                        " {} → {} | {} + {} |",
                        t.item_bytes_before,
                        t.item_bytes_after,
                        num(t.billed.table_write),
                        num(t.billed.index_write)
                    );
                }
                None => s.push_str(" – | – |"),
            }
        }
        let _ = writeln!(s);
    }
    s
}

fn bills_table(r: &Report) -> String {
    let mut s = String::new();
    let Some(c) = r.cycle(4096, 1) else {
        return s;
    };
    let _ = writeln!(
        s,
        "| line (4 KB payload, happy path) | quantity per retry | $ per million retries |"
    );
    let _ = writeln!(s, "|---|---:|---:|");
    for &alt in Alternative::ALL {
        let bill = r.bill(alt, c, &r.assumptions);
        for l in &bill.lines {
            let _ = writeln!(
                s,
                "| {} — {} | {} | {} |",
                alt.label(),
                l.item,
                if l.quantity < 0.001 {
                    format!("{:.3e}", l.quantity)
                } else {
                    num(l.quantity)
                },
                usd(l.usd * 1_000_000.0)
            );
        }
        let _ = writeln!(
            s,
            "| **{} — total** | | **{}** |",
            alt.label(),
            usd(bill.per_million())
        );
    }
    s
}

/// The whole document.
pub fn render(r: &Report) -> String {
    let mut s = String::new();
    let d = &r.deployment;
    let a = &r.assumptions;
    let p = &r.prices;
    let _ = writeln!(s, "# Benchmarks\n");
    let _ = writeln!(
        s,
        "Generated by `{}` on {} ({}), in {} — do not edit by hand: run the command again. \
         Every figure below comes from that run; the prices are the table further down.\n",
        r.command,
        r.generated_at,
        r.machine,
        secs(r.wall_time)
    );
    let _ = writeln!(s, "## Summary\n");
    s.push_str(&summary(r));
    let _ = writeln!(s);
    let _ = writeln!(
        s,
        "A *retry* is one cycle: the CANCELLED answer for attempt n is taken off the response queue, \
         the response handler persists SCHEDULING and the fire time, creates the one-time schedule and \
         confirms SCHEDULED; at the fire time EventBridge Scheduler puts the retry event on the retry queue; \
         the retry handler moves to SENDING, reads the payload, publishes request n+1 and moves to \
         IN_PROGRESS; the DynamoDB stream hands every transition to the audit writer, which stores each handler run's \
         transitions as the entries of one audit item. Starting a \
         transaction (paid once, by every alternative in some form) and the external service's own side \
         (receiving the request, answering on the response queue) are not part of it. The circuit \
         breaker of the external service is on, as the template deploys it: the response handler adds \
         each batch's answers to its window (one UpdateItem per batch), and every execution environment \
         of both handlers reads its item once per refresh period (BreakerRefreshSeconds); at the fleet's \
         rate bound, with ResponseHandlerMaxConcurrency + RetryHandlerMaxConcurrency environments, that \
         is (environments ÷ (refresh × rate bound)) reads per retry.\n"
    );

    if !r.targets_missed().is_empty() {
        let _ = writeln!(s, "### Targets missed, and why\n");
        for line in r.targets_missed() {
            let _ = writeln!(s, "- {line}");
        }
        let _ = writeln!(s);
    }

    let _ = writeln!(
        s,
        "## Billable operations per retry cycle (measured against moto)\n"
    );
    let _ = writeln!(
        s,
        "Measured through the real adapters and the handlers as their Lambda `main`s build them \
         (`response_handler::wiring`, `retry_handler::wiring`), each SQS message given to the handler as the event source mapping \
         delivers it, every API call counted by `testkit::meter` (an SDK interceptor); the audit writer fed from the table's \
         stream. \"×2 deliveries\" = the response, the retry event and every stream record each \
         delivered twice. DynamoDB units are computed from the item images in the stream with \
         DynamoDB's published rules (`dynamodb_rules::dynamodb_billed_units`): moto reports a \
         constant 1.0 per PutItem and 0.5 per UpdateItem or GetItem whatever the size, nothing for \
         indexes, failed conditions or transactions — its figures are shown beside ours, not priced. \
         SQS requests made by Lambda's event source mapping (ReceiveMessage, DeleteMessageBatch: \
         one each per batch of up to 10) and by the scheduler (one SendMessage per invocation) are \
         not made by our code: they are counted by that model, at the template's batch sizes \
         (response {}, retry {}, audit stream {}).\n",
        d.response_batch_size, d.retry_batch_size, d.audit_batch_size
    );
    s.push_str(&cycle_table(r));
    let _ = writeln!(s);
    let _ = writeln!(s, "### The state item's writes\n");
    let _ = writeln!(
        s,
        "The request payload lives in its own table, written once when the transaction starts, so \
         the state item — and what each transition costs — is the same whatever the payload size. \
         Index writes follow the sparse, keys-only reconcile-index entry every non-terminal \
         record carries (`CYCLE#<shard>`): SCHEDULING moves it to the fire time (a key change: \
         1 delete + 1 put); SCHEDULED, SENDING and the IN_PROGRESS that follows leave it as it \
         is (no indexed or projected attribute changes, so DynamoDB writes nothing to the \
         index) — IN_PROGRESS keeps it for its answer deadline, the request having left at \
         about that fire time. Per transaction, not per retry: the start puts the entry (1) \
         and the end removes it (1); a request still unanswered when the reconcile threshold \
         passes has its entry moved to its deadline once (1 write + 2 index writes).\n"
    );
    s.push_str(&transitions_table(r));
    let _ = writeln!(s);
    if let Ok(writes) = crate::cycle::failure_path(3) {
        let _ = writeln!(
            s,
            "The failure path, per failed transaction (not in the figures above; the domain's \
             writes billed by the same rules): the sparse, keys-only failed-index (`FAILED#<shard>`, \
             sorted by `updated_at`) holds only FAILED transactions, so `retryctl list --status \
             FAILED` queries it instead of scanning the table.\n"
        );
        let _ = writeln!(
            s,
            "| write | WRU table | WRU failed-index | WRU reconcile-index |\n|---|---:|---:|---:|"
        );
        for w in &writes {
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} |",
                w.label,
                num(w.table),
                num(w.failed_index),
                num(w.reconcile_index)
            );
        }
        let _ = writeln!(s);
    }
    if let Some(c) = r.cycle(4096, 1) {
        let _ = writeln!(
            s,
            "Per transaction, once (not in the figures above): the start is one TransactWriteItems of \
             the state item and the payload item — {} WRU by the rules at 4 KB (transactional = 2×; \
             moto reports {}), payload item {} bytes, largest audit item (a handler run's two entries) {} bytes.\n",
            num(c.start_billed.write()),
            num(c.start.total_write_units()),
            thousands(c.payload_item_bytes as u64),
            c.audit_item_bytes
        );
    }

    let _ = writeln!(s, "## Dollars per million retries, line by line\n");
    s.push_str(&bills_table(r));
    let _ = writeln!(s);

    let _ = writeln!(s, "## Prices (us-east-1, on-demand, as of {})\n", p.as_of);
    let _ = writeln!(s, "| item | price | source |");
    let _ = writeln!(s, "|---|---|---|");
    for (label, price) in p.rows() {
        let amount = if price.per >= 1000.0 {
            format!(
                "${} per {} {}",
                price.usd,
                thousands(price.per as u64),
                price.unit
            )
        } else {
            format!("${} per {}", price.usd, price.unit)
        };
        let _ = writeln!(s, "| {label} | {amount} | {} |", price.source);
    }
    let _ = writeln!(s);

    let _ = writeln!(s, "## Assumptions\n");
    let assumptions = [
        format!(
            "Deployment from `template.yaml` defaults: {} functions with {} MB; SQS BatchSize response {}, retry {}; \
             audit stream BatchSize {}; retry MaximumConcurrency {} × MAX_REQUESTS_PER_SECOND {}.",
            d.architecture, d.memory_mb, d.response_batch_size, d.retry_batch_size, d.audit_batch_size,
            d.retry_max_concurrency, num(d.max_requests_per_second)
        ),
        "Batches are full (sustained traffic). The summary also prices one message per invocation (a trickle): \
         one ReceiveMessage, one DeleteMessage and one invocation per message."
            .into(),
        format!(
            "Lambda duration = AWS round trips on a record's critical path × {} ms (in-region round trip), \
             a batch's records running concurrently (BATCH_CONCURRENCY ≥ BatchSize); the audit writer is taken \
             as writing its items one after another. The handlers' own CPU (below) is microseconds and is not added. \
             Cold starts, CloudWatch Logs and metrics ingestion, data transfer and free tiers are not priced.",
            num(a.aws_call_ms)
        ),
        "DynamoDB on-demand. Strongly consistent payload read (what the adapter does). GetRecords by the \
         Lambda stream trigger is free. The empty long polls of the event source mappings are a fixed \
         cost per queue, not per retry, and are not included."
            .into(),
        "EventBridge Scheduler bills the invocation; CreateSchedule and DeleteSchedule calls are not billed. \
         The scheduler's SendMessage to the retry queue is an SQS request."
            .into(),
        "The audit: a handler run's transitions are written milliseconds apart, so they reach the audit \
         writer in one stream batch and are stored as one item (one UpdateItem per run, 2 per retry). A \
         run whose changes are split across two stream batches costs one more UpdateItem (at worst 4 audit \
         writes per retry, as one item per transition would)."
            .into(),
        format!(
            "Step Functions Standard: {} state transitions per retry (Wait, then a Task that sends the request \
             with a task token and is answered by the response, then a Choice). Transition price does not depend \
             on the state size (≤ 256 KB). The request's SQS SendMessage is added; the response's path back \
             (SendTaskSuccess from a consumer) is not priced — in its favour.",
            a.sfn_transitions_per_retry
        ),
        format!(
            "Lambda durable functions: {} durable operations per retry (one wait, one step publishing the request; \
             receiving the answer through a callback would add one more — not counted, in its favour), \
             {} bytes checkpointed per operation, one Lambda invocation per resume lasting {} round trips at the \
             same memory, plus the request's SendMessage.",
            a.durable_operations_per_retry,
            num(a.durable_bytes_per_operation),
            a.durable_resume_calls
        ),
        format!(
            "Sleeping process: one Lambda invocation held for the first retry's nominal wait ({} s, the template's \
             BACKOFF_BASE_SECONDS) at the same memory — hypothetical, Lambda stops at 15 minutes; it prices one \
             process held per waiting retry. A container holding many waits costs less per retry (no container \
             price in the reference sheet, so not priced) and loses every wait it holds when it stops.",
            num(a.sleeping_wait_seconds)
        ),
        "SQS: every 64 KB (65,536 bytes) of a message's body and attributes is one request; the 64 KB payload \
         makes a request message above that, hence 2 requests per send."
            .into(),
    ];
    for line in assumptions {
        let _ = writeln!(s, "- {line}");
    }
    let _ = writeln!(s);

    let _ = writeln!(
        s,
        "## Handler CPU per record (criterion, in process, in-memory adapters)\n"
    );
    let _ = writeln!(s, "| benchmark | what | mean per record | 95 % interval |");
    let _ = writeln!(s, "|---|---|---:|---:|");
    for (id, what, found) in &r.criterion {
        match found {
            Some(pr) => {
                let _ = writeln!(
                    s,
                    "| `{id}` | {what} | {:.2} µs | {:.2} – {:.2} µs |",
                    pr.mean_ns / 1000.0,
                    pr.low_ns / 1000.0,
                    pr.high_ns / 1000.0
                );
            }
            None => {
                let _ = writeln!(s, "| `{id}` | {what} | not run | |");
            }
        }
    }
    let _ = writeln!(
        s,
        "\n`bench/benches/handlers.rs`: 4 KB payloads, no tracing subscriber, the retry handler without its \
         pacer; each iteration starts from fresh state built outside the measurement. A record's AWS round \
         trips (milliseconds each) dwarf these figures.\n"
    );

    let _ = writeln!(s, "## Release binary size and cold init\n");
    let _ = writeln!(
        s,
        "Binaries: {}. Cold init = process start until its first `GET /2018-06-01/runtime/invocation/next` \
         to a local stand-in for the Lambda runtime API, with the function's configuration from the environment \
         (endpoint: the local moto server); median of {} runs on this machine (a Lambda execution environment \
         adds its own sandbox start).\n",
        r.binaries_built_with, r.init_runs
    );
    let _ = writeln!(s, "| function | size | cold init, median | min – max |");
    let _ = writeln!(s, "|---|---:|---:|---:|");
    s.push_str(&init_rows(&r.sizes, &r.init));
    let _ = writeln!(s);

    let _ = writeln!(s, "## Burst\n");
    if r.bursts.is_empty() {
        let _ = writeln!(s, "Not run in this invocation.\n");
    }
    for b in &r.bursts {
        let n = thousands(u64::from(b.spec.responses));
        let _ = writeln!(
            s,
            "{n} CANCELLED responses put on the response queue at once (in {}), through the local stack \
             (`sandbox::local::stack`: moto, the handlers behind the event source mapping emulator, the \
             scheduler emulator, the audit stream, the reconciler cron, the simulated external service). \
             Backoff {} s for every retry (no jitter), so all retries fall due together; retry \
             MaximumConcurrency {} × MAX_REQUESTS_PER_SECOND {} = a limit of {}/s; the other settings are \
             the template's. The external service answers SUCCESS to the retried request. The scheduler \
             emulator lists its group every {} ms; the reconciler runs every {} s with \
             RECONCILE_THRESHOLD_SECONDS {} (half the deadline: longer than any retry event waits in a \
             run that drains in time, short enough to rescue a lost one before the deadline). Times are those of moto and the emulators on this \
             machine, not of AWS: they show the pipeline drains and holds its limit, not how fast AWS \
             would drain it. Until the scheduler has delivered every retry event, the drain is paced by \
             how fast moto and the emulators handle the responses and the schedules on this machine; \
             from then on only the rate limit paces it (the per-second figure below).\n",
            secs(b.injected_in),
            num(b.spec.backoff_seconds),
            b.spec.retry_concurrency,
            num(b.spec.max_requests_per_second),
            num(b.rate_bound),
            b.spec.scheduler_tick.as_millis(),
            b.reconcile_every.as_secs(),
            b.spec.reconcile_threshold().as_secs()
        );
        let _ = writeln!(s, "| burst of {n} | result |");
        let _ = writeln!(s, "|---|---:|");
        let rows = [
            (
                "set-up (moto, stack, starting the transactions)",
                secs(b.setup),
            ),
            (
                "drain: first answer injected → every retried request at the service",
                reached(b.drain),
            ),
            (
                "first answer injected → every retry event delivered by the scheduler",
                reached(b.all_fired),
            ),
            (
                "retried requests published per second from then to the last",
                b.rate_after_all_fired
                    .map(|r| format!("{r:.1}"))
                    .unwrap_or_else(|| "–".into()),
            ),
            (
                "first answer injected → every transaction SUCCEEDED",
                reached(b.all_succeeded),
            ),
            (
                "retried requests at the service (unique / raw)",
                format!("{} / {}", b.retried_unique, b.retried_raw),
            ),
            (
                "lost",
                b.lost.map(|l| l.to_string()).unwrap_or_else(|| {
                    format!(
                        "not determined ({} still queued at the deadline)",
                        b.pending
                    )
                }),
            ),
            (
                "in a dead-letter queue at the end",
                b.dead_lettered.to_string(),
            ),
            (
                "duplicated: received twice by the service / published twice",
                format!("{} / {}", b.duplicated, b.published_twice),
            ),
            (
                "requests beyond the attempt budget",
                b.beyond_budget.to_string(),
            ),
            (
                "retried requests published (SendMessage reaching the endpoint)",
                b.published.to_string(),
            ),
            (
                "**highest published in one wall-clock second / limit**",
                format!("**{} / {}**", b.peak_per_second, num(b.rate_bound)),
            ),
            (
                "highest published in any sliding one-second window",
                b.peak_sliding_second.to_string(),
            ),
            (
                "highest received by the service in one of its seconds",
                b.peak_received_per_second.to_string(),
            ),
            (
                "transactions SUCCEEDED / not",
                format!("{} / {}", b.succeeded, b.not_succeeded),
            ),
            ("schedules fired", b.schedules_fired.to_string()),
            (
                "scheduler emulator: reads failed and made again / deliveries failed and retried",
                format!(
                    "{} / {}",
                    b.schedule_read_failures, b.schedule_delivery_failures
                ),
            ),
            (
                "reconciler actions (threshold half the deadline)",
                if b.reconciler_actions.is_empty() {
                    "none".into()
                } else {
                    b.reconciler_actions
                        .iter()
                        .map(|(k, v)| format!("{k} {v}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                },
            ),
            (
                "invocations: response handler / retry handler",
                format!("{} / {}", b.response_invocations, b.retry_invocations),
            ),
            (
                "retry handler batch item failures (redelivered)",
                b.retry_batch_item_failures.to_string(),
            ),
        ];
        for (k, v) in rows {
            let _ = writeln!(s, "| {k} | {v} |");
        }
        let _ = writeln!(s);
    }
    if !r.moto_receive.is_empty() {
        let probes = r
            .moto_receive
            .iter()
            .map(|(program, points)| {
                let at = points
                    .iter()
                    .map(|(n, d)| {
                        format!(
                            "{} ms with {} messages queued",
                            ms(*d).trim_end_matches(" ms"),
                            thousands(u64::from(*n))
                        )
                    })
                    .collect::<Vec<_>>()
                    .join(", ");
                format!("`{program}`: {at}")
            })
            .collect::<Vec<_>>()
            .join("; ");
        let server = r
            .bursts
            .first()
            .map(|b| b.spec.moto_program.as_str())
            .unwrap_or("moto_server");
        let _ = writeln!(
            s,
            "The burst's moto server: `{server}`. Stock moto's SQS computes every queue attribute \
             (three of them scans of the whole queue) on each message sent and received, and reads the \
             clock through datetime arithmetic for every message it scans, so its cost per call grows \
             with the backlog and a 10,000-message backlog never drains. `scripts/moto_server_patched.py` \
             is moto's own server with three speed fixes that change no API answer (the clock read with \
             `time.time()`; the three message counters computed only inside GetQueueAttributes, once per \
             call; the per-message retention check reading the one attribute it needs); \
             `bench/tests/moto_fast.rs` checks that it answers a sequence of SQS calls — counters, \
             visibility, delay, redrive to the dead-letter queue — exactly as stock moto does. One \
             ReceiveMessage of 10, median of three, in this run: {probes}.\n"
        );
    }
    if let Some(note) = &r.burst_note {
        let _ = writeln!(s, "{note}\n");
    }
    let _ = writeln!(
        s,
        "Publish instants are taken where requests reach the AWS endpoint: every client of the local \
         stack talks to moto through a recording pass-through (`bench/src/tap.rs` over `tools/testkit`'s proxy). The limit is a pacing \
         limiter per execution environment (`runtime::rate::Pacer`): one publish at a time, starts at \
         least 1/rate apart, and none until one second after the end of the publish ⌊rate⌋ places \
         before it; a request reaches the endpoint between its start and its end, so the bound is judged \
         on the sliding window at the endpoint. The service's own count is taken when it takes requests off its queue, which \
         bunches them; it is shown for comparison, not judged.\n"
    );
    s
}

impl Report {
    /// One explanation per missed target.
    pub fn targets_missed(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (target, measured, met) in targets(self) {
            if met {
                continue;
            }
            let why = if target.contains("per million retries") {
                self.cost_explanation()
            } else if target.contains("rate limit") {
                "More requests reached the endpoint in one second than MaximumConcurrency × \
                 ⌊MAX_REQUESTS_PER_SECOND⌋ allows: the pacer's bound was broken (see runtime::rate)."
                    .to_owned()
            } else {
                "see the tables below.".to_owned()
            };
            out.push(format!("{target}: measured {measured}. {why}"));
        }
        out
    }

    fn cost_explanation(&self) -> String {
        let Some(c) = self.cycle(4096, 1) else {
            return String::new();
        };
        let wru = self.prices.dynamodb_write_request_unit.unit_usd() * 1_000_000.0;
        let state = c.state_billed();
        let audit = c.audit_billed.write();
        format!(
            "DynamoDB writes: {} WRU per retry = {} state-item WRU ({}) + {} reconcile-index WRU ({}) + \
             {} audit WRU ({}); the other lines are in the table below.",
            num(c.rules_write_units()),
            num(state.table_write),
            usd(state.table_write * wru),
            num(state.index_write),
            usd(state.index_write * wru),
            num(audit),
            usd(audit * wru),
        )
    }
}

/// The rows of the size and cold init table: one per binary of `sizes`, with its
/// cold init times from `init`.
pub fn init_rows(sizes: &[BinarySize], init: &[InitTimes]) -> String {
    let mut s = String::new();
    for b in sizes {
        let init = init.iter().find(|i| i.function == b.function);
        let size = b
            .bytes
            .map(|n| format!("{} bytes ({:.1} MiB)", thousands(n), n as f64 / 1_048_576.0))
            .unwrap_or_else(|| "not built".into());
        let (median, range) = match init {
            Some(i) => match (i.median(), i.min(), i.max()) {
                (Some(m), Some(lo), Some(hi)) => (ms(m), format!("{} – {}", ms(lo), ms(hi))),
                _ => (
                    "failed".into(),
                    i.error.clone().unwrap_or_default().replace('|', "/"),
                ),
            },
            None => ("–".into(), String::new()),
        };
        let _ = writeln!(s, "| `{}` | {size} | {median} | {range} |", b.function);
    }
    s
}
