//! `retryctl`: see `docs/operations.md`.

use clap::Parser;
use retryctl::cli::Cli;
#[cfg(any(feature = "demo", feature = "verify"))]
use retryctl::cli::Command;
use retryctl::commands::{Output, Target};
use retryctl::error::CliError;
use std::process::ExitCode;

/// Prints to stdout; a closed pipe (`retryctl … | head`) ends the output quietly.
macro_rules! out {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = write!(std::io::stdout(), $($t)*);
    }};
}

/// [`out!`] with a newline.
macro_rules! outln {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($t)*);
    }};
}

/// Prints a command's output: its JSON document (with the schema version) under
/// `--json`, else its text. An array is printed as JSON lines, one per element, each
/// with the schema version.
fn print(json: bool, out: Output) {
    if !json {
        out!("{}", out.text);
        return;
    }
    if let serde_json::Value::Array(lines) = out.json {
        for line in lines {
            print(
                true,
                Output {
                    text: String::new(),
                    json: line,
                },
            );
        }
        return;
    }
    let mut doc = out.json;
    if let Some(o) = doc.as_object_mut() {
        o.insert("schema_version".into(), retryctl::SCHEMA_VERSION.into());
    }
    if !doc.is_null() {
        outln!("{doc}");
    }
}

fn init_logs(demo: bool) {
    // Logs go to stderr (stdout carries the command's output); quiet by default. The
    // demo also silences the functions' own logs (they would tear the progress bar);
    // `RUST_LOG=info` shows them.
    let default = if demo {
        "warn,runtime=off,response_handler=off,retry_handler=off,reconciler=off,\
         aws_smithy_runtime=error,aws_config=error"
    } else {
        "warn,aws_smithy_runtime=error,aws_config=error"
    };
    let filter = std::env::var("RUST_LOG").unwrap_or_else(|_| default.into());
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
        .with_writer(std::io::stderr)
        .with_target(false)
        .try_init();
}

/// `retryctl demo`: the report on stdout; with `--keep`, the stack stays up until Ctrl-C.
#[cfg(feature = "demo")]
async fn demo(cli: &Cli, args: &sandbox::DemoArgs) -> Result<Output, CliError> {
    let (report, kept) = sandbox::demo::run(args).await?;
    let text = sandbox::report::render(&report);
    let json = serde_json::to_value(&report).unwrap_or_default();
    if let Some(path) = &args.report_json {
        std::fs::write(
            path,
            serde_json::to_string_pretty(&json).unwrap_or_default(),
        )
        .map_err(|e| CliError::bad("--report-json", path.display().to_string(), e))?;
    }
    let failed = || {
        CliError::DemoFailed(
            "the demo found lost, duplicated, stuck or inconsistent transactions".into(),
        )
    };
    let Some(stack) = kept else {
        if report.ok() {
            return Ok(Output { text, json });
        }
        print(cli.json, Output { text, json });
        return Err(failed());
    };
    print(cli.json, Output { text, json });
    eprintln!(
        "\nThe local stack keeps running until Ctrl-C. From another shell:\n  \
         export AWS_ENDPOINT_URL={} RETRYCTL_PREFIX={} RECONCILE_SHARDS={} RECONCILE_THRESHOLD_SECONDS={} RECONCILE_REQUEUE_MAX={} ANSWER_TIMEOUT_SECONDS={} TRANSACTION_DEADLINE_SECONDS={} RETENTION_DAYS={} AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing AWS_REGION=us-east-1\n  \
         retryctl stats; retryctl list --status FAILED; retryctl show TX-000001; retryctl stuck",
        stack.endpoint,
        stack.names().prefix,
        stack.reconcile_shards(),
        stack.reconcile_threshold_seconds(),
        stack.reconcile_requeue_max(),
        stack.answer_timeout_seconds(),
        stack.transaction_deadline_seconds(),
        stack.retention_days()
    );
    let _ = tokio::signal::ctrl_c().await;
    stack.shutdown().await;
    if report.ok() {
        Ok(Output {
            text: String::new(),
            json: serde_json::Value::Null,
        })
    } else {
        Err(failed())
    }
}

/// `retryctl verify`: the report on stdout (text or JSON), exit 6 when a check failed.
#[cfg(feature = "verify")]
async fn verify(cli: &Cli, args: &retryctl::cli::VerifyArgs) -> Result<Output, CliError> {
    let outputs = read_outputs(&args.outputs)?;
    let scheduler_role = match &args.scheduler_role {
        None => None,
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| CliError::bad("--scheduler-role", path.display().to_string(), e))?;
            Some(
                serde_json::from_str(&text).map_err(|e| {
                    CliError::bad("--scheduler-role", path.display().to_string(), e)
                })?,
            )
        }
    };
    if args.poll_ms == 0 {
        return Err(CliError::bad("--poll-ms", "0", "must be at least 1"));
    }
    let settings = retryctl::verify::Settings {
        resources_only: args.resources_only,
        timeout: std::time::Duration::from_secs(args.timeout),
        audit_wait: std::time::Duration::from_secs(args.audit_wait),
        poll: std::time::Duration::from_millis(args.poll_ms),
        scheduler_role,
        progress: !args.quiet,
    };
    let target = Target::from_args(&cli.target).await?;
    let report = retryctl::verify::run(&target.sdk, &outputs, &settings).await?;
    let text = retryctl::verify::render(&report);
    let json = serde_json::to_value(&report).unwrap_or_default();
    if report.ok {
        return Ok(Output { text, json });
    }
    print(cli.json, Output { text, json });
    Err(CliError::VerifyFailed(format!(
        "{} check(s) failed",
        report.failed
    )))
}

/// The stacks' outputs of the `--outputs` files.
#[cfg(feature = "verify")]
fn read_outputs(
    paths: &[std::path::PathBuf],
) -> Result<retryctl::verify::outputs::StackOutputs, CliError> {
    let mut outputs = retryctl::verify::outputs::StackOutputs::default();
    for path in paths {
        let text = std::fs::read_to_string(path)
            .map_err(|e| CliError::bad("--outputs", path.display().to_string(), e))?;
        outputs.add(&path.display().to_string(), &text)?;
    }
    Ok(outputs)
}

/// `retryctl loadtest`: the report on stdout (text or JSON); exit 7 when the stack is
/// not a staging one, 8 when the run fell short (the report says how).
#[cfg(feature = "verify")]
async fn loadtest(cli: &Cli, args: &retryctl::cli::LoadtestArgs) -> Result<Output, CliError> {
    let plan = retryctl::loadtest::Plan::from_args(args, &retryctl::loadtest::default_run_name())?;
    let outputs = read_outputs(&args.outputs)?;
    // Refused before any client is built.
    retryctl::loadtest::plan::staging(&outputs)?;
    let target = Target::from_args(&cli.target).await?;
    let report = retryctl::loadtest::run(&target.sdk, &outputs, &plan).await?;
    let text = retryctl::loadtest::report::render(&report);
    let json = serde_json::to_value(&report).unwrap_or_default();
    if report.ok {
        return Ok(Output { text, json });
    }
    print(cli.json, Output { text, json });
    Err(CliError::LoadtestShort(report.shortfall()))
}

async fn run(cli: &Cli) -> Result<Output, CliError> {
    #[cfg(feature = "demo")]
    if let Command::Demo(args) = &cli.command {
        return demo(cli, args).await;
    }
    #[cfg(feature = "verify")]
    if let Command::Verify(args) = &cli.command {
        return verify(cli, args).await;
    }
    #[cfg(feature = "verify")]
    if let Command::Loadtest(args) = &cli.command {
        return loadtest(cli, args).await;
    }
    let target = Target::from_args(&cli.target).await?;
    match retryctl::run::execute(cli, &target).await {
        Ok(out) => Ok(out),
        Err(ended) => {
            // A bulk action prints its lines before the exit code says one failed.
            if let Some(out) = ended.printed {
                print(cli.json, out);
            }
            Err(ended.error.with_hint(&target.whereabouts()))
        }
    }
}

/// Arguments clap refuses: with `--json` anywhere on the line, as a JSON error
/// document on stdout (exit 2); help and version as clap prints them.
fn parse() -> Result<Cli, ExitCode> {
    match Cli::try_parse() {
        Ok(cli) => Ok(cli),
        Err(e) => {
            use clap::error::ErrorKind;
            let wants_json = std::env::args().any(|a| a == "--json");
            if wants_json && !matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion)
            {
                let text = e.to_string();
                let message = text.lines().next().unwrap_or_default();
                let message = message.strip_prefix("error: ").unwrap_or(message);
                outln!(
                    "{}",
                    serde_json::json!({
                        "schema_version": retryctl::SCHEMA_VERSION,
                        "error": "bad-argument",
                        "message": message,
                        "hint": "see --help"
                    })
                );
                return Err(ExitCode::from(2));
            }
            e.exit()
        }
    }
}

/// An error as JSON: every key always present (`null` when it does not apply).
fn error_json(e: &CliError, verbose: bool) -> serde_json::Value {
    let (operation, summary, hint) = match e {
        CliError::AwsCall(a) => (Some(a.operation.clone()), a.summary(), a.hint.clone()),
        other => (None, other.to_string(), None),
    };
    serde_json::json!({
        "schema_version": retryctl::SCHEMA_VERSION,
        "error": e.kind(),
        "message": summary,
        "operation": operation,
        "hint": hint,
        "detail": if verbose { e.detail() } else { None },
    })
}

fn main() -> ExitCode {
    let cli = match parse() {
        Ok(cli) => cli,
        Err(code) => return code,
    };
    #[cfg(feature = "demo")]
    let demo = matches!(cli.command, Command::Demo(_));
    #[cfg(not(feature = "demo"))]
    let demo = false;
    init_logs(demo);
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("retryctl: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let result = rt.block_on(run(&cli));
    match result {
        Ok(out) => {
            print(cli.json, out);
            ExitCode::SUCCESS
        }
        Err(e) => {
            // A failed verification or a short load test has printed its report (one
            // JSON document), a bulk action its lines.
            if cli.json
                && !matches!(
                    e,
                    CliError::VerifyFailed(_)
                        | CliError::LoadtestShort(_)
                        | CliError::SomeFailed { .. }
                )
            {
                outln!("{}", error_json(&e, cli.verbose));
            }
            let msg = e.to_string();
            if !msg.is_empty() {
                eprintln!("retryctl: {msg}");
            }
            if let Some(detail) = e.detail() {
                if cli.verbose {
                    eprintln!("retryctl: SDK detail: {detail}");
                } else {
                    eprintln!("retryctl: (--verbose prints the SDK's detail)");
                }
            }
            ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(1))
        }
    }
}
