//! `bench`: runs every measurement of one benchmark run and writes the Markdown report
//! (`scripts/bench.sh` builds what it needs, runs criterion, then this).

use clap::Parser;
use domain::decide::Delivery;
use domain::ports::{Clock, SystemClock};
use retry_bench::burst::{self, BurstSpec};
use retry_bench::cycle::{self, CycleSpec};
use retry_bench::delivery;
use retry_bench::init;
use retry_bench::model::Assumptions;
use retry_bench::prices::PRICES;
use retry_bench::report::{self, Report};
use retry_bench::template::Deployment;
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[derive(Debug, Parser)]
#[command(
    name = "bench",
    about = "Benchmarks of the deferred retry pattern → Markdown report"
)]
struct Args {
    /// Where to write the report (also printed on stdout).
    #[arg(long, default_value = "docs/benchmarks.md")]
    out: PathBuf,
    /// The SAM template whose parameter defaults are the deployment.
    #[arg(long, default_value = "template.yaml")]
    template: PathBuf,
    /// criterion's output directory (default: $CARGO_TARGET_DIR/criterion).
    #[arg(long)]
    criterion_dir: Option<PathBuf>,
    /// Directory of the release function binaries (default: $CARGO_TARGET_DIR/release).
    #[arg(long)]
    bin_dir: Option<PathBuf>,
    /// How the binaries were built (printed in the report).
    #[arg(
        long,
        default_value = "`cargo build --release` for this machine's target"
    )]
    built_with: String,
    /// Cold starts per function.
    #[arg(long, default_value_t = 10)]
    init_runs: usize,
    /// Payload sizes of the cycle measurements (bytes).
    #[arg(long, value_delimiter = ',', default_value = "256,4096,65536")]
    payloads: Vec<usize>,
    /// Responses in the burst (0: no burst).
    #[arg(long, default_value_t = 10_000)]
    burst: u32,
    /// MAX_REQUESTS_PER_SECOND of each retry-handler environment during the burst
    /// (default: the template's).
    #[arg(long)]
    burst_rate: Option<f64>,
    /// Retry MaximumConcurrency during the burst (default: the template's).
    #[arg(long)]
    burst_concurrency: Option<usize>,
    /// Backoff of every retry in the burst (s).
    #[arg(long, default_value_t = 2.0)]
    burst_backoff: f64,
    /// Give up on the burst after this many seconds (default: 300 s + 5 × the time the
    /// rate limit alone needs).
    #[arg(long)]
    burst_deadline: Option<u64>,
    /// How often the local scheduler emulator lists its schedules during the burst (ms).
    #[arg(long, default_value_t = 1000)]
    burst_scheduler_tick_ms: u64,
    /// The moto server program the burst's local stack runs on (a 10,000-response burst
    /// needs `scripts/moto_server_patched.py`; see that file).
    #[arg(long, default_value = "moto_server")]
    burst_moto_server: String,
    /// A sentence printed under the burst results.
    #[arg(long)]
    burst_note: Option<String>,
    /// The command line to print in the report's header.
    #[arg(long, default_value = "./scripts/bench.sh")]
    command: String,
    /// Use this moto endpoint instead of starting one (cycles and cold init).
    #[arg(long)]
    moto_endpoint: Option<String>,
    /// Measure only the release binary size and cold init of these functions
    /// (comma-separated, e.g. `starter,http-bridge`), print their rows of the table and
    /// write no report: for a function whose release build is the only one at hand.
    #[arg(long, value_delimiter = ',')]
    init_only: Vec<String>,
    /// Measure direct against outbox delivery only: the retry cycle at 4 KB in each
    /// mode, priced, and the demo with a service that does not deduplicate under no
    /// chaos, `light` and `heavy`, in each mode; splice the section between the
    /// `delivery-table` markers of `--out` (the rest of the file is kept).
    #[arg(long)]
    delivery_table: bool,
    /// Transactions of each demo run of `--delivery-table`.
    #[arg(long, default_value_t = 200)]
    demo_transactions: u32,
}

/// The demo's flags, parsed as `retryctl demo` parses them.
#[derive(Debug, Parser)]
struct DemoFlags {
    #[command(flatten)]
    demo: sandbox::DemoArgs,
}

/// `--delivery-table`: one run of the delivery comparison, spliced into `out`.
async fn delivery_table(
    args: &Args,
    sdk: &aws_config::SdkConfig,
    deployment: &Deployment,
    assumptions: &Assumptions,
) {
    let cycle_of = |delivery| CycleSpec {
        payload_bytes: 4096,
        deliveries: 1,
        delivery,
    };
    let mut cycles = Vec::new();
    for delivery in Delivery::ALL {
        eprintln!(
            "bench: retry cycle, 4 KB payload, {} delivery",
            delivery.as_str()
        );
        cycles.push(
            cycle::measure(sdk, cycle_of(delivery))
                .await
                .unwrap_or_else(|e| fail("retry cycle", e)),
        );
    }
    let mut demos = Vec::new();
    for profile in ["none", "light", "heavy"] {
        for delivery in Delivery::ALL {
            let n = args.demo_transactions.to_string();
            let mut argv = vec![
                "demo",
                "--no-progress",
                "--transactions",
                &n,
                "--seed",
                "7",
                "--service",
                "non-idempotent",
                "--delivery",
                delivery.as_str(),
            ];
            if profile != "none" {
                argv.extend(["--chaos", profile]);
            }
            eprintln!("bench: demo {}", argv[1..].join(" "));
            let flags = DemoFlags::try_parse_from(&argv).unwrap_or_else(|e| fail("demo flags", e));
            let (r, _) = sandbox::demo::run(&flags.demo)
                .await
                .unwrap_or_else(|e| fail("demo", e));
            let runs = r.service_runs.clone().unwrap_or_else(|| {
                fail("demo", "no ledger of a service that does not deduplicate")
            });
            demos.push(delivery::DemoRow {
                profile: profile.into(),
                delivery,
                transactions: r.statuses.values().sum(),
                requests: r.requests_raw,
                attempts_run: runs.attempts_run,
                executed_twice: runs.executed_twice,
                runs_beyond_first: runs.runs_beyond_first,
                ok: r.ok(),
                seconds: r.elapsed_seconds,
            });
        }
    }
    let [direct, outbox]: [cycle::CycleMeasurement; 2] = cycles
        .try_into()
        .unwrap_or_else(|_| fail("retry cycle", "two cycles expected"));
    let run = delivery::DeliveryRun {
        direct,
        outbox,
        demos,
    };
    let command = format!(
        "bench --delivery-table --demo-transactions {}",
        args.demo_transactions
    );
    let section = delivery::section(&run, deployment, assumptions, &PRICES, &command);
    let doc = std::fs::read_to_string(&args.out).unwrap_or_default();
    std::fs::write(&args.out, delivery::splice(&doc, &section))
        .unwrap_or_else(|e| fail("writing the report", e));
    print!("{section}");
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("target"))
}

fn fail(what: &str, e: impl std::fmt::Display) -> ! {
    eprintln!("bench: {what}: {e}");
    std::process::exit(1)
}

/// The release binary size and cold init of each of `functions` (`runs` each),
/// configured for a stack provisioned on the moto at `endpoint`.
async fn sizes_and_inits(
    functions: &[&'static str],
    bin_dir: &std::path::Path,
    sdk: &aws_config::SdkConfig,
    endpoint: &str,
    deployment: &Deployment,
    runs: usize,
) -> (Vec<init::BinarySize>, Vec<init::InitTimes>) {
    let sizes = init::sizes(bin_dir)
        .into_iter()
        .filter(|b| functions.contains(&b.function.as_str()))
        .collect();
    let names = aws::config::StackNames::new(&testkit::moto::unique_prefix("init"));
    let provisioned = testkit::provision::provision(sdk, &names)
        .await
        .unwrap_or_else(|e| fail("provisioning for cold init", e));
    let mut inits = Vec::new();
    for &f in functions {
        eprintln!("bench: cold init of {f}, {runs} runs");
        let mut env = init::lambda_env(f, deployment.memory_mb);
        env.push(("AWS_ENDPOINT_URL".into(), endpoint.to_owned()));
        env.extend(
            provisioned
                .env_for(f)
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v)),
        );
        let binary = bin_dir.join(f);
        inits.push(
            tokio::task::spawn_blocking(move || init::cold_init(&binary, f, &env, runs))
                .await
                .unwrap_or_else(|e| fail("cold init", e)),
        );
    }
    (sizes, inits)
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    let t0 = Instant::now();
    let deployment = Deployment::load(&args.template).unwrap_or_else(|e| fail("template", e));
    let assumptions = Assumptions::new(&deployment);

    let moto = match &args.moto_endpoint {
        Some(_) => None,
        None => Some(
            testkit::moto::MotoServer::launch(testkit::moto::MotoServer::PROGRAM)
                .await
                .unwrap_or_else(|e| fail("moto", e)),
        ),
    };
    let endpoint = args
        .moto_endpoint
        .clone()
        .or_else(|| moto.as_ref().map(|m| m.endpoint_url()))
        .unwrap_or_default();
    let sdk = testkit::moto::sdk_config(&endpoint).await;
    if args.delivery_table {
        delivery_table(&args, &sdk, &deployment, &assumptions).await;
        drop(moto);
        return;
    }

    let bin_dir = args
        .bin_dir
        .clone()
        .unwrap_or_else(|| target_dir().join("release"));
    let unknown: Vec<&String> = args
        .init_only
        .iter()
        .filter(|f| !init::FUNCTIONS.contains(&f.as_str()))
        .collect();
    if !unknown.is_empty() {
        fail(
            "--init-only",
            format!("{unknown:?}: not one of {}", init::FUNCTIONS.join(", ")),
        );
    }
    let measured: Vec<&'static str> = init::FUNCTIONS
        .into_iter()
        .filter(|f| args.init_only.is_empty() || args.init_only.iter().any(|o| o == f))
        .collect();

    // 1. Binary sizes and cold init (configuration of a stack on the same moto).
    let (sizes, inits) = sizes_and_inits(
        &measured,
        &bin_dir,
        &sdk,
        &endpoint,
        &deployment,
        args.init_runs,
    )
    .await;
    if !args.init_only.is_empty() {
        print!("{}", report::init_rows(&sizes, &inits));
        drop(moto);
        return;
    }

    // 2. Retry cycles against moto.
    let mut cycles = Vec::new();
    for deliveries in [1, 2] {
        for &payload_bytes in &args.payloads {
            let spec = CycleSpec {
                payload_bytes,
                deliveries,
                delivery: domain::decide::Delivery::Direct,
            };
            eprintln!("bench: retry cycle, {payload_bytes} B payload, {deliveries} deliveries");
            cycles.push(
                cycle::measure(&sdk, spec)
                    .await
                    .unwrap_or_else(|e| fail("retry cycle", e)),
            );
        }
    }

    // The breaker's writes under a burst of ERROR answers.
    eprintln!("bench: 100 ERROR answers in batches of 10 (circuit breaker writes)");
    let technical = Some(
        cycle::measure_technical_burst(&sdk, 100, 10)
            .await
            .unwrap_or_else(|e| fail("technical burst", e)),
    );

    // What a backlog costs moto, stock and the burst's server (explains why the burst
    // runs on the latter).
    let mut moto_receive = Vec::new();
    if args.burst > 0 {
        let mut probes = vec![("moto_server".to_owned(), vec![100, 1000])];
        if args.burst_moto_server != "moto_server" {
            probes.push((args.burst_moto_server.clone(), vec![1000, 10_000]));
        }
        for (program, sizes) in probes {
            eprintln!("bench: {program}: ReceiveMessage with {sizes:?} messages queued");
            let points = burst::probe_moto_receive(&program, &sizes)
                .await
                .unwrap_or_else(|e| fail("moto probe", e));
            moto_receive.push((program, points));
        }
    }

    drop(moto);

    // 3. criterion's results (written by `cargo bench --bench handlers` before this).
    let criterion_dir = args
        .criterion_dir
        .clone()
        .unwrap_or_else(|| target_dir().join("criterion"));
    let criterion = retry_bench::criterion_results::read(&criterion_dir);

    // 4. The burst, on a local stack of its own.
    let mut bursts = Vec::new();
    if args.burst > 0 {
        let spec = BurstSpec {
            responses: args.burst,
            max_requests_per_second: args
                .burst_rate
                .unwrap_or(deployment.max_requests_per_second),
            retry_concurrency: args
                .burst_concurrency
                .unwrap_or(deployment.retry_max_concurrency as usize),
            backoff_seconds: args.burst_backoff,
            deadline: Duration::ZERO,
            scheduler_tick: Duration::from_millis(args.burst_scheduler_tick_ms),
            moto_program: args.burst_moto_server.clone(),
        };
        let deadline = args.burst_deadline.unwrap_or_else(|| {
            300 + (5.0 * f64::from(args.burst) / spec.rate_bound().max(0.1)).ceil() as u64
        });
        let spec = BurstSpec {
            deadline: Duration::from_secs(deadline),
            ..spec
        };
        eprintln!(
            "bench: burst of {} CANCELLED responses (limit {}/s)",
            spec.responses,
            spec.rate_bound()
        );
        bursts.push(burst::run(spec).await.unwrap_or_else(|e| fail("burst", e)));
    }

    let report = Report {
        generated_at: SystemClock.now().to_rfc3339(),
        machine: format!(
            "{} {} CPUs",
            std::env::consts::ARCH,
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1)
        ),
        deployment,
        assumptions,
        prices: PRICES,
        cycles,
        criterion,
        binaries_built_with: args.built_with.clone(),
        sizes,
        init: inits,
        init_runs: args.init_runs,
        bursts,
        burst_note: args.burst_note.clone(),
        wall_time: t0.elapsed(),
        command: args.command.clone(),
        moto_receive,
        technical,
    };
    let text = report::render(&report);
    if let Some(dir) = args.out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).unwrap_or_else(|e| fail("creating the output directory", e));
    }
    std::fs::write(&args.out, &text).unwrap_or_else(|e| fail("writing the report", e));
    println!("{text}");
    eprintln!("bench: wrote {}", args.out.display());
}
