//! The adaptive backoff study: configured curve, oracle and adaptive policy on the same
//! seeds, per profile, and the go / no-go verdict.
//!
//! `cargo run --release -p deferred-retry-verify --bin backoff-study -- --out docs/benchmarks.md`
//!
//! Prints the report's section (Markdown); with `--out`, also writes it into that file
//! between its markers (appended when the file has none).

use clap::Parser;
use std::path::PathBuf;
use std::process::ExitCode;
use verify::study::profile::Profile;
use verify::study::{render, run_profile, splice, StudyConfig};

/// Compares the configured backoff curve, the best fixed curve in hindsight and an
/// adaptive policy on services whose "not available now" has a recovery time.
#[derive(Debug, Parser)]
#[command(name = "backoff-study", version)]
struct Args {
    /// First seed.
    #[arg(long, default_value_t = 1)]
    seed_start: u64,
    /// Seeds per profile (one independent run each).
    #[arg(long, default_value_t = 100)]
    seeds: u64,
    /// Transactions per seed.
    #[arg(long, default_value_t = 2_000)]
    transactions: usize,
    /// Transactions start uniformly over this many days.
    #[arg(long, default_value_t = 14.0)]
    days: f64,
    /// The adaptive policy's exploration rate (default: `AdaptiveConfig::default()`).
    #[arg(long)]
    epsilon: Option<f64>,
    /// The adaptive policy's window, outcomes per reason and candidate.
    #[arg(long)]
    window: Option<usize>,
    /// The adaptive policy's last attempt goes wherever its curve puts it, instead of
    /// no earlier than the configured curve's latest last attempt.
    #[arg(long)]
    adaptive_without_horizon: bool,
    /// Write the section into this Markdown file (between its markers).
    #[arg(long)]
    out: Option<PathBuf>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let mut cfg = StudyConfig {
        seed_start: args.seed_start,
        seeds: args.seeds,
        transactions: args.transactions,
        days: args.days,
        ..StudyConfig::default()
    };
    cfg.adaptive.keep_horizon = !args.adaptive_without_horizon;
    if let Some(e) = args.epsilon {
        cfg.adaptive.epsilon = e;
    }
    if let Some(w) = args.window {
        cfg.adaptive.window = w;
    }
    let mut command = format!(
        "cargo run --release -p deferred-retry-verify --bin backoff-study -- --seed-start {} --seeds {} --transactions {} --days {}",
        args.seed_start, args.seeds, args.transactions, args.days
    );
    if let Some(e) = args.epsilon {
        command.push_str(&format!(" --epsilon {e}"));
    }
    if let Some(w) = args.window {
        command.push_str(&format!(" --window {w}"));
    }
    if args.adaptive_without_horizon {
        command.push_str(" --adaptive-without-horizon");
    }
    if let Some(out) = &args.out {
        command.push_str(&format!(" --out {}", out.display()));
    }
    let results: Vec<_> = Profile::ALL
        .iter()
        .map(|&p| {
            eprintln!("backoff-study: profile {}", p.name());
            run_profile(p, &cfg)
        })
        .collect();
    let section = render(&cfg, &command, &results);
    print!("{section}");
    if let Some(out) = &args.out {
        let doc = std::fs::read_to_string(out).unwrap_or_default();
        if let Err(e) = std::fs::write(out, splice(&doc, &section)) {
            eprintln!("backoff-study: writing {}: {e}", out.display());
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}
