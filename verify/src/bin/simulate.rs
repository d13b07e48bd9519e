//! The fault-injection simulator at scale.
//!
//! `cargo run --release -p deferred-retry-verify --bin simulate -- --seed-start 1 --seeds 100 --transactions 10000`
//!
//! Prints a report in the manner of Jepsen's queue checker and exits non-zero on any
//! violation, printing the seeds that broke a guarantee and the command that replays
//! each one exactly.

use clap::Parser;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;
use std::process::ExitCode;
use verify::sim::{simulate, Report};
use verify::simcli::SimArgs;

fn main() -> ExitCode {
    let args = SimArgs::parse();
    let config = match args.config() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("simulate: {e}");
            return ExitCode::from(2);
        }
    };
    let seeds: Vec<u64> = (0..args.seeds).map(|i| args.seed_start + i).collect();
    println!("command: {}", args.command_line(None));
    println!(
        "seeds {}..={} ({} seeds x {} transactions = {} transactions), fleet rate limit {}/s",
        args.seed_start,
        args.seed_start + args.seeds.saturating_sub(1),
        args.seeds,
        args.transactions,
        args.seeds * args.transactions as u64,
        config.fleet_limit()
    );
    let bar = ProgressBar::new(args.seeds);
    if std::io::stderr().is_terminal() && !args.quiet {
        bar.set_draw_target(ProgressDrawTarget::stderr());
        bar.set_style(
            ProgressStyle::with_template(
                "{elapsed_precise} [{bar:40}] {pos}/{len} seeds, eta {eta}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
    } else {
        bar.set_draw_target(ProgressDrawTarget::hidden());
    }
    let started = std::time::Instant::now();
    let threads = args.threads.max(1);
    let progress_every = (args.seeds / 10).max(1);
    let done = std::sync::atomic::AtomicU64::new(0);
    let mut per_seed: Vec<(u64, Report)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let seeds = &seeds;
                let config = &config;
                let bar = &bar;
                let done = &done;
                let quiet = args.quiet;
                scope.spawn(move || {
                    let mut out = Vec::new();
                    for seed in seeds.iter().skip(t).step_by(threads) {
                        out.push((*seed, simulate(config, *seed)));
                        bar.inc(1);
                        let n = done.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
                        if bar.is_hidden() && !quiet && n % progress_every == 0 {
                            eprintln!("simulate: {n}/{} seeds done", seeds.len());
                        }
                    }
                    out
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_default())
            .collect()
    });
    bar.finish_and_clear();
    per_seed.sort_by_key(|(seed, _)| *seed);
    let mut total = Report::default();
    for (_, r) in &per_seed {
        total.merge(r);
    }
    println!("{total}");
    println!(
        "wall time                  {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let bad: Vec<&(u64, Report)> = per_seed.iter().filter(|(_, r)| !r.is_valid()).collect();
    if total.seeds != args.seeds {
        println!(
            "INVALID: {} of {} seeds did not finish",
            args.seeds - total.seeds,
            args.seeds
        );
        return ExitCode::FAILURE;
    }
    if bad.is_empty() {
        println!("VALID: no guarantee broken");
        ExitCode::SUCCESS
    } else {
        println!("INVALID: {} seed(s) broke a guarantee", bad.len());
        for (seed, r) in bad.iter().take(20) {
            let what: Vec<String> = r
                .violations()
                .iter()
                .map(|(k, n)| format!("{k}={n}"))
                .collect();
            println!("  seed {seed}: {}", what.join(", "));
            println!("    replay: {}", args.command_line(Some(*seed)));
        }
        ExitCode::FAILURE
    }
}
