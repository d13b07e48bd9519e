//! `intake-burst`: what a burst of starts through the intake queue does on the local
//! stack (moto, the starter behind the event source mapping emulator with the
//! template's settings, the simulated service answering SUCCESS). Every intake
//! message is sent at once (SendMessageBatch, 10 a call); the run then follows the
//! intake queue's depth, the starters' concurrency and the first requests reaching
//! the service, until every transaction's first request has arrived. It prints one
//! Markdown table: the figures `docs/intake.md` reports, with the command.
//!
//! `cargo run -p deferred-retry-bench --bin intake-burst -- --starts 1000`

use clap::Parser;
use domain::intake::StartMessage;
use domain::{Payload, TransactionId};
use sandbox::demo::{queue_counts, transaction_id};
use sandbox::local::stack::{template, Stack, StackOptions};
use std::time::{Duration, Instant};

/// The starter's name in the local stack's metrics.
const STARTER: &str = "starter";

#[derive(Debug, Parser)]
#[command(
    name = "intake-burst",
    about = "A burst of starts through the intake queue on the local stack"
)]
struct Args {
    /// Intake messages sent at once.
    #[arg(long, default_value_t = 1000)]
    starts: u32,
    /// Give up after this many seconds.
    #[arg(long, default_value_t = 900)]
    deadline: u64,
}

fn fail(what: &str, e: impl std::fmt::Display) -> ! {
    eprintln!("intake-burst: {what}: {e}");
    std::process::exit(1)
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    if args.starts == 0 {
        fail("--starts", "must be at least 1");
    }
    let mut opts = StackOptions::new(testkit::moto::unique_prefix("intake"));
    opts.split_services = true;
    // Every first request answered SUCCESS: the figures are the starts' alone.
    opts.external.cancel_probability = 0.0;
    let stack = Stack::start(opts)
        .await
        .unwrap_or_else(|e| fail("local stack", e));
    let result = burst(&stack, &args).await;
    stack.shutdown().await;
    match result {
        Ok(table) => println!("{table}"),
        Err(e) => fail("burst", e),
    }
}

async fn burst(stack: &Stack, args: &Args) -> Result<String, String> {
    let sqs = aws_sdk_sqs::Client::new(&stack.sdk);
    let intake = stack.provisioned.intake.url.clone();
    let bodies: Vec<String> = (1..=args.starts)
        .map(|n| {
            let id = transaction_id(n);
            let transaction_id = TransactionId::parse(&id).map_err(|e| e.to_string())?;
            let payload =
                Payload::from_json(&format!(r#"{{"order":"{id}"}}"#)).map_err(|e| e.to_string())?;
            Ok(StartMessage {
                transaction_id,
                payload,
                max_attempts: None,
                correlation_id: None,
            }
            .to_json())
        })
        .collect::<Result<_, String>>()?;
    let started = Instant::now();
    let sends = bodies.chunks(10).enumerate().map(|(i, chunk)| {
        let (sqs, intake) = (sqs.clone(), intake.clone());
        async move {
            let mut batch = sqs.send_message_batch().queue_url(&intake);
            for (j, body) in chunk.iter().enumerate() {
                let entry = aws_sdk_sqs::types::SendMessageBatchRequestEntry::builder()
                    .id(format!("m{i}-{j}"))
                    .message_body(body)
                    .build()
                    .map_err(|e| e.to_string())?;
                batch = batch.entries(entry);
            }
            let out = batch
                .send()
                .await
                .map_err(|e| aws_sdk_sqs::error::DisplayErrorContext(e).to_string())?;
            if out.failed().is_empty() {
                Ok(())
            } else {
                Err(format!("{} intake messages refused", out.failed().len()))
            }
        }
    });
    for r in futures::future::join_all(sends).await {
        r?;
    }
    let sent = started.elapsed();

    // Follow the backlog until every first request reached the service.
    let n = u64::from(args.starts);
    let mut peak_depth = 0;
    let mut samples = Vec::new();
    let drained = loop {
        let (visible, in_flight) = queue_counts(&sqs, &intake)
            .await
            .map_err(|e| e.to_string())?;
        peak_depth = peak_depth.max(visible + in_flight);
        let arrived = stack.external.unique_requests();
        samples.push((started.elapsed(), visible + in_flight, arrived));
        if arrived >= n && visible + in_flight == 0 {
            break started.elapsed();
        }
        if started.elapsed() > Duration::from_secs(args.deadline) {
            return Err(format!(
                "{arrived} of {n} first requests after {} s",
                args.deadline
            ));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let all_arrived = samples
        .iter()
        .find(|(_, _, a)| *a >= n)
        .map_or(drained, |(t, _, _)| *t);
    let esm = &stack.intake_esm;
    let metric = |name: &str| {
        stack
            .metrics
            .get(STARTER)
            .and_then(|m| m.snapshot().get(name).copied())
            .unwrap_or(0)
    };
    let half = samples
        .iter()
        .find(|(_, _, a)| *a * 2 >= n)
        .map_or(Duration::ZERO, |(t, _, _)| *t);
    // IntakeMaxConcurrency × IntakeStartsPerSecond (stack output
    // IntakeFirstRequestsPerSecondBound).
    let bound = template::INTAKE_MAX_CONCURRENCY as f64 * template::INTAKE_STARTS_PER_SECOND;
    let rate = n as f64 / all_arrived.saturating_sub(sent).as_secs_f64().max(0.001);
    Ok(format!(
        "| burst of {n} starts (intake queue, template settings) | result |\n\
         |---|---:|\n\
         | intake messages sent (SendMessageBatch of 10, side by side) | {sent:.1?} |\n\
         | highest intake queue depth (visible + in flight) | {peak_depth} |\n\
         | half of the first requests at the service | {half:.1?} |\n\
         | every first request at the service | {all_arrived:.1?} |\n\
         | intake queue empty | {drained:.1?} |\n\
         | first requests per second, sent → last at the service | {rate:.1} |\n\
         | **highest first requests published in any 1 s / bound** | **{} / {bound}** |\n\
         | starter concurrency, highest (IntakeMaxConcurrency) | {} |\n\
         | starter invocations / batch item failures | {} / {} |\n\
         | starts that waited for their slot (PacedPublishes) / refused after 20 s (RateLimited) | {} / {} |\n\
         | transactions started (AckStarted) / dead-lettered | {} / {} |\n\
         | first requests at the service: unique / raw | {} / {} |",
        stack.external.peak_per_second(),
        esm.get(&esm.peak_concurrency),
        esm.get(&esm.invocations),
        esm.get(&esm.reported_failures),
        metric("PacedPublishes"),
        metric("RateLimited"),
        metric("AckStarted"),
        metric("PermanentErrors"),
        stack.external.unique_requests(),
        stack.external.raw_requests(),
    ))
}
