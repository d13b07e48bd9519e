//! Runs the exhaustive model check over a chosen scope and prints what it explored.
//!
//! `cargo run --release -p deferred-retry-verify --bin model-check -- --transactions 2 --max-attempts 3`

use clap::Parser;
use domain::decide::Delivery;
use std::process::ExitCode;
use verify::model::{check, Budgets, OutageMode, Scope, ServiceDedup, OUTBOX_WITNESS, WITNESS};
use verify::Flaws;

/// Exhaustive model check of the deferred retry protocol.
#[derive(Debug, Parser)]
#[command(name = "model-check", version)]
struct Args {
    #[arg(long, default_value_t = 2)]
    transactions: u8,
    #[arg(long, default_value_t = 3)]
    max_attempts: u32,
    /// Duplicate deliveries per execution (any queue).
    #[arg(long, default_value_t = 1)]
    duplicates: u8,
    /// Crashes between two effects per execution.
    #[arg(long, default_value_t = 1)]
    crashes: u8,
    /// Answers of the external service beyond the first, per execution.
    #[arg(long, default_value_t = 1)]
    extra_answers: u8,
    #[arg(long, default_value_t = 1)]
    double_fires: u8,
    #[arg(long, default_value_t = 1)]
    undeliverable_fires: u8,
    #[arg(long, default_value_t = 1)]
    reconciler_runs: u8,
    #[arg(long, default_value_t = 1)]
    ticks: u8,
    /// Requests or answers lost on the way, per execution (a start that crashed before
    /// its publish loses request 1 the same way).
    #[arg(long, default_value_t = 1)]
    lost_messages: u8,
    /// Answers ERROR (technical failures: the attempt is sent again) per execution.
    #[arg(long, default_value_t = 0)]
    technical_answers: u8,
    /// Answers REJECTED (the service refuses an attempt for good) per execution.
    #[arg(long, default_value_t = 0)]
    rejected_answers: u8,
    /// One outage of the service, with the circuit breaker: `error` (it answers ERROR
    /// while down) or `silent` (it takes requests without answering).
    #[arg(long, value_parser = ["error", "silent"])]
    outage: Option<String>,
    /// With an outage: retry cycles per attempt explored (technical re-sends and
    /// pauses), which bounds the outage's length.
    #[arg(long, default_value_t = 3)]
    rounds: u32,
    /// The clock may jump past the transactions' deadline once (ten days in the model;
    /// the reconciler's late run is past it too).
    #[arg(long)]
    deadline: bool,
    /// Operator commands per execution: `resolve` of a transaction waiting for its
    /// retry, `replay` (one more attempt) of one that ended FAILED by cancellations.
    #[arg(long, default_value_t = 0)]
    operator_actions: u8,
    /// The breaker lets probes out without writing them (a broken gate).
    #[arg(long)]
    uncounted_probes: bool,
    /// Switch on a known-bad design: retry-rejects-scheduling, fire-time-at-create,
    /// retry-discards-sending, attempts-from-zero, no-answer-deadline,
    /// technical-as-cancelled, ignores-breaker, held-event-begins-send,
    /// error-round-ignored, probe-spends-resend, no-transaction-deadline, any-answer-closes,
    /// resends-old-claim, retry-publishes-in-outbox (the last two with --delivery outbox).
    #[arg(long)]
    flaw: Vec<String>,
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Use the transaction-ordered reduction instead of every interleaving.
    #[arg(long)]
    ordered: bool,
    /// The external service: `deduplicating` (by idempotency key, the deployment's
    /// precondition) or `non-idempotent` (it runs every request message it receives;
    /// "each (transaction, attempt) runs at most once" is checked too).
    #[arg(long, default_value = "deduplicating", value_parser = ServiceDedup::NAMES)]
    service: String,
    /// How requests leave: `direct` (the handler that decides publishes) or `outbox`
    /// (the record is the intent; the publisher, reading the table's stream, sends it
    /// to a FIFO request queue; "each (transaction, attempt, round) is published at
    /// most once" is checked too).
    #[arg(long, default_value = "direct", value_parser = ["direct", "outbox"])]
    delivery: String,
    /// Outbox delivery: times the clock may jump past the FIFO queue's 5-minute
    /// deduplication window (every claim made before is then older than the publish
    /// window). 0: every repeat of a send comes within the window.
    #[arg(long, default_value_t = 0)]
    window_expiries: u8,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let mut flaws = Flaws::NONE;
    for f in &args.flaw {
        if !flaws.switch_on(f) {
            eprintln!("unknown flaw `{f}`; known: {}", Flaws::NAMES.join(", "));
            return ExitCode::from(2);
        }
    }
    let service = match ServiceDedup::parse("--service", &args.service) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("model-check: {e}");
            return ExitCode::from(2);
        }
    };
    let Some(delivery) = Delivery::parse(&args.delivery) else {
        eprintln!(
            "model-check: --delivery `{}`: expected `direct` or `outbox`",
            args.delivery
        );
        return ExitCode::from(2);
    };
    if args.window_expiries > 0 && delivery != Delivery::Outbox {
        eprintln!(
            "model-check: --window-expiries {} needs --delivery outbox (direct delivery has no deduplication window)",
            args.window_expiries
        );
        return ExitCode::from(2);
    }
    let scope = Scope {
        transactions: args.transactions,
        max_attempts: args.max_attempts,
        faults: Budgets {
            duplicate_deliveries: args.duplicates,
            crashes: args.crashes,
            extra_answers: args.extra_answers,
            double_fires: args.double_fires,
            undeliverable_fires: args.undeliverable_fires,
            reconciler_runs: args.reconciler_runs,
            ticks: args.ticks,
            lost_messages: args.lost_messages,
            technical_answers: args.technical_answers,
            rejected_answers: args.rejected_answers,
            outages: u8::from(args.outage.is_some()),
            deadlines: u8::from(args.deadline),
            operator_actions: args.operator_actions,
            window_expiries: args.window_expiries,
        },
        flaws,
        interleave: !args.ordered,
        outage_mode: match args.outage.as_deref() {
            Some("silent") => OutageMode::Silent,
            _ => OutageMode::Error,
        },
        counts_probes: !args.uncounted_probes,
        rounds: args.rounds,
        service,
        delivery,
    };
    println!("scope: {scope}");
    let report = check(scope, args.threads, false);
    println!(
        "states explored: {} ({} unique), max depth {}, {:.1} s",
        report.states,
        report.unique_states,
        report.max_depth,
        report.elapsed.as_secs_f64()
    );
    let outbox_witnesses = if scope.is_outbox() {
        &OUTBOX_WITNESS[..]
    } else {
        &[]
    };
    for w in WITNESS.iter().chain(outbox_witnesses) {
        let mark = if report.witnessed.contains(w) {
            "reached"
        } else {
            "NOT REACHED"
        };
        println!("  witness {mark}: {w}");
    }
    for p in verify::model::ProtocolModel::new(scope).safety() {
        match report.violations.get(p) {
            None => println!("  holds: {p}"),
            Some(trace) => {
                println!("  VIOLATED: {p}");
                for (i, a) in trace.iter().enumerate() {
                    println!("      {i:>3}. {a}");
                }
            }
        }
    }
    if report.violations.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
