//! A small demo, in process, against moto: every transaction terminal, none lost or
//! duplicated, and the report's figures consistent with each other; and two short
//! chaos runs (heavy faults at the AWS API boundary), one with a fixed seed, one with
//! a seed derived from the date, printed.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use clap::Parser;
use retryctl::cli::{Cli, Command};
use sandbox::report::render;
use sandbox::DemoArgs;

/// `retryctl demo` on the shared moto server with a stack of its own, no progress
/// bar, retries after 1 s (at most 4 s), and `extra` flags (separated by spaces).
fn demo_args(tag: &str, extra: &str) -> DemoArgs {
    let moto = testkit::moto::shared_endpoint().expect("moto_server on PATH (. scripts/tools.sh)");
    let prefix = testkit::moto::unique_prefix(tag);
    let common = format!(
        "retryctl demo --no-progress --moto-endpoint {moto} --stack-prefix {prefix} \
         --backoff-base 1 --backoff-cap 4 {extra}"
    );
    let Command::Demo(args) = Cli::parse_from(common.split_whitespace()).command else {
        unreachable!()
    };
    *args
}

/// The demo with `flags` (as [`demo_args`]): it ends, keeps no stack, and every check
/// of its report passes. The report and its text.
async fn demo_ok(tag: &str, flags: &str) -> (sandbox::report::Report, String) {
    let (r, kept) = sandbox::demo::run(&demo_args(tag, flags))
        .await
        .expect("demo runs");
    assert!(kept.is_none());
    let text = render(&r);
    assert!(r.ok(), "{flags}: {text}");
    (r, text)
}

/// 20 transactions answered by the service seeded 23, with `extra` flags: every check
/// of the report passes, every transaction ends, nothing is dead-lettered.
async fn twenty_of_seed_23(tag: &str, extra: &str) -> sandbox::report::Report {
    let (r, text) = demo_ok(tag, &format!("--transactions 20 --seed 23 {extra}")).await;
    assert_eq!(r.statuses.values().sum::<u64>(), 20, "{extra:?}: {text}");
    assert!(r.dlq.values().all(|n| *n == 0), "{extra:?}: {text}");
    r
}

#[tokio::test(flavor = "multi_thread")]
async fn a_small_demo_ends_every_transaction_and_its_figures_agree() {
    let (r, text) = demo_ok(
        "demo",
        "--transactions 20 --duplicate-responses 0 --seed 11",
    )
    .await;
    assert_eq!(r.attempted, 20);
    assert_eq!(r.statuses.values().sum::<u64>(), 20, "{text}");
    assert_eq!(
        r.count(domain::Status::Succeeded) + r.count(domain::Status::Failed),
        20
    );
    assert_eq!(r.retries_histogram.values().sum::<u64>(), 20);
    // Every attempt reached the service exactly once after dedupe.
    let attempts: u64 = r
        .retries_histogram
        .iter()
        .map(|(k, n)| u64::from(k + 1) * n)
        .sum();
    assert_eq!(r.requests_deduped, attempts, "{text}");
    assert!(r.requests_raw >= r.requests_deduped);
    // Every retry went through exactly one schedule delivery; none left behind.
    let retries: u64 = r
        .retries_histogram
        .iter()
        .map(|(k, n)| u64::from(*k) * n)
        .sum();
    assert_eq!(r.scheduler["fired"], retries, "{text}");
    assert_eq!(r.drift_ms.map(|d| d.count as u64).unwrap_or(0), retries);
    assert_eq!(r.schedules_left, 0);
    assert!(r.dlq.values().all(|n| *n == 0), "{text}");
    assert_eq!(
        r.functions["retry-handler"]["RetriesPublished"], retries,
        "{text}"
    );
    // FAILED only with the budget spent (4 attempts = 3 retries).
    assert!(
        r.count(domain::Status::Failed) <= r.retries_histogram.get(&3).copied().unwrap_or(0),
        "{text}"
    );
    // The pacers' bound, measured where requests leave the handlers, in any sliding
    // one-second window: MaximumConcurrency × ⌊MAX_REQUESTS_PER_SECOND⌋, strictly.
    assert!(
        f64::from(r.peak_published_per_second) <= r.rate_bound,
        "{text}"
    );
    assert!(r.peak_published_per_second > 0, "{text}");
    assert!(text.contains("result             OK"));
    // A deduplicating service: no ledger of runs, nothing to warn about.
    assert!(r.service_runs.is_none(), "{text}");
    assert!(!text.contains("service runs"), "{text}");
}

/// The same workload and the same seeded service, started once through the library
/// and once through the intake queue (`--start-via intake`): every transaction ends
/// the same way after the same attempts, the report's checks (records with the fields
/// their status implies, no duplicate or lost request) pass for both, and through the
/// intake the starter started each transaction exactly once, nothing dead-lettered.
#[tokio::test(flavor = "multi_thread")]
async fn a_demo_started_through_the_intake_ends_as_one_started_by_the_library() {
    let library = twenty_of_seed_23("via", "--duplicate-responses 0 --start-via library").await;
    let intake = twenty_of_seed_23("via", "--duplicate-responses 0 --start-via intake").await;
    assert_eq!(intake.statuses, library.statuses, "{}", render(&intake));
    assert_eq!(
        intake.retries_histogram,
        library.retries_histogram,
        "{}",
        render(&intake)
    );
    assert_eq!(intake.requests_deduped, library.requests_deduped);
    let started = |r: &sandbox::report::Report, name: &str| {
        r.functions["starter"].get(name).copied().unwrap_or(0)
    };
    assert_eq!(started(&intake, "AckStarted"), 20, "{}", render(&intake));
    assert_eq!(started(&intake, "PermanentErrors"), 0);
    assert_eq!(started(&library, "AckStarted"), 0, "the library path");
}

#[tokio::test(flavor = "multi_thread")]
async fn demo_flags_are_validated_naming_the_flag_and_value() {
    let dir = std::env::temp_dir().join(testkit::moto::unique_prefix("chaosfile"));
    std::fs::create_dir_all(&dir).unwrap();
    let chaos_file = |name: &str, content: &str| {
        let path = dir.join(name);
        std::fs::write(&path, content).unwrap();
        path.display().to_string()
    };
    let bad = chaos_file(
        "bad.json",
        r#"{"rates":{"dynamodb:UpdateItem":{"lost_response":1.5}}}"#,
    );
    let bad_toml = chaos_file("bad.toml", "[process]\nkill_invocation = -1\n");
    let unknown = chaos_file("unknown.json", r#"{"rates":{"sqs":{"throttel":0.1}}}"#);
    let files = [
        (
            format!("--chaos {bad}"),
            format!(
                r#"invalid value for --chaos: `{bad}: rates."dynamodb:UpdateItem".lost_response = 1.5`"#
            ),
        ),
        (
            format!("--chaos {bad_toml}"),
            format!("invalid value for --chaos: `{bad_toml}: process.kill_invocation = -1`"),
        ),
        (
            format!("--chaos {unknown}"),
            "unknown field `throttel`".to_owned(),
        ),
    ];
    let files = files.iter().map(|(f, n)| (f.as_str(), n.as_str()));
    for (flags, needle) in files.chain([
        (
            "--chaos medium",
            "invalid value for --chaos: `medium`: not a profile (light, heavy) nor a .json or .toml file",
        ),
        ("--transactions 0", "invalid value for --transactions: `0`"),
        ("--cancel-probability 1.5", "invalid value for --cancel-probability: `1.5`"),
        ("--backoff-factor 0.5", "invalid value for --backoff-factor: `0.5`"),
        ("--latency-min-ms 500", "invalid value for --latency-min-ms: `500`"),
        ("--outage 20-60", "invalid value for --outage: `20-60`: expected START+DURATION"),
        ("--outage 20+0", "invalid value for --outage: `20+0`: DURATION must be > 0"),
        ("--outage x+10", "invalid value for --outage: `x+10`: START `x`"),
        (
            "--service queue,http",
            "--service `queue,http`: two transports; expected queue or http, and/or deduplicating or non-idempotent",
        ),
        ("--service http,idempotent", "--service `http,idempotent`: unknown word `idempotent`"),
        ("--delivery fifo", "--delivery `fifo`: expected direct or outbox"),
        (
            "--deadline 60 --outage 30+40",
            "invalid value for --outage: `30+40`: the outage ends at 70 s, after the run's deadline (60 s",
        ),
    ]) {
        let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_retryctl"))
            .arg("demo")
            .args(flags.split_whitespace())
            .output()
            .await
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{flags}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{flags}: {err}");
    }
}

/// GIVEN a running demo WHEN it gets Ctrl-C (SIGINT) THEN it exits 130 and none of the
/// moto servers it started (one per service) answers any more.
#[tokio::test(flavor = "multi_thread")]
async fn ctrl_c_stops_everything_the_demo_started() {
    use tokio::io::{AsyncBufReadExt, BufReader};
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_retryctl"))
        .args(["demo", "--transactions", "50", "--no-progress"])
        .stderr(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let endpoint = tokio::time::timeout(std::time::Duration::from_secs(120), async {
        while let Some(l) = lines.next_line().await.unwrap() {
            if let Some(e) = l.strip_prefix("demo: local stack up at ") {
                return e.to_owned();
            }
        }
        panic!("the demo never reported its stack");
    })
    .await
    .unwrap();
    // `DynamoDB http://…, SQS http://…, Scheduler http://…`
    let addrs: Vec<String> = endpoint
        .split("http://")
        .skip(1)
        .map(|a| a.split(',').next().unwrap_or(a).trim().to_owned())
        .collect();
    assert_eq!(addrs.len(), 3, "one moto server per service: {endpoint}");
    for addr in &addrs {
        assert!(
            std::net::TcpStream::connect(addr).is_ok(),
            "moto at {addr} answers while the demo runs"
        );
    }
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    let pid = child.id().unwrap().to_string();
    let killed = std::process::Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .unwrap();
    assert!(killed.success());
    let status = tokio::time::timeout(std::time::Duration::from_secs(60), child.wait())
        .await
        .expect("the demo stops on Ctrl-C")
        .unwrap();
    assert_eq!(status.code(), Some(130));
    for addr in &addrs {
        let mut gone = false;
        for _ in 0..50 {
            if std::net::TcpStream::connect(addr).is_err() {
                gone = true;
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
        assert!(gone, "moto at {addr} still answers after the demo stopped");
    }
}

/// The seed of today's chaos run: the days since the epoch (a new interleaving every
/// day, the same all day long).
fn todays_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() / 86_400)
        .unwrap_or(0)
}

/// 40 transactions under the heavy fault profile, with a service that does not
/// deduplicate (its answers are the same): every check holds, the faults reached the
/// functions' calls, and the service's runs are reported as its own log shows them.
/// The seed is printed and named on failure: `retryctl demo --chaos heavy
/// --transactions 40 --backoff-base 1 --backoff-cap 4 --service non-idempotent
/// --seed N` replays the same fault decisions.
async fn chaos_run(seed: u64) {
    println!("chaos seed {seed}");
    let (r, text) = demo_ok(
        "chaos",
        &format!("--transactions 40 --chaos heavy --seed {seed} --service non-idempotent"),
    )
    .await;
    assert_eq!(
        r.count(domain::Status::Succeeded) + r.count(domain::Status::Failed),
        40,
        "chaos seed {seed}:\n{text}"
    );
    let chaos = r.chaos.as_ref().expect("a chaos report");
    assert_eq!(chaos.seed, seed);
    let faulted: u64 = chaos.injected.values().flat_map(|k| k.values()).sum();
    assert!(faulted > 20, "chaos seed {seed}: {faulted} faults\n{text}");
    assert!(
        chaos.injected["dynamodb:UpdateItem"]["lost-response"] > 0,
        "chaos seed {seed}:\n{text}"
    );
    assert!(text.contains("faults injected"), "{text}");
    // The service's runs are counted, judged and reported, whatever they are.
    println!("chaos seed {seed}: executed twice {}", ledger_agrees(&r));
}

#[tokio::test(flavor = "multi_thread")]
async fn chaos_heavy_with_a_fixed_seed_ends_ok() {
    chaos_run(7).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn chaos_heavy_with_todays_seed_ends_ok() {
    chaos_run(todays_seed()).await;
}

/// A silent service (`--silent-probability`) on the local stack, answer timeout 2 s:
/// every transaction still ends terminal; the dropped requests were published again
/// with the same key; and a service that never answers at all ends each transaction
/// FAILED/UNANSWERED after ANSWER_REPUBLISH_MAX republishes, its budget untouched.
#[tokio::test(flavor = "multi_thread")]
async fn a_silent_service_is_rescued_by_the_answer_deadline() {
    let (r, text) = demo_ok(
        "silent",
        "--transactions 12 --silent-probability 0.3 --answer-timeout 2 --reconcile-every 1 --seed 5",
    )
    .await;
    assert!(r.dropped_silently > 0, "{text}");
    let republished = r
        .reconciler
        .get("IN_PROGRESS/reconciler-republished")
        .copied()
        .unwrap_or(0);
    assert!(republished > 0, "{text}");
    assert!(text.contains("answer deadlines"), "{text}");

    let (r, text) = demo_ok(
        "mute",
        "--transactions 3 --silent-probability 1 --answer-timeout 2 --reconcile-every 1",
    )
    .await;
    assert_eq!(r.count(domain::Status::Failed), 3, "{text}");
    let max = u64::from(domain::defaults::ANSWER_REPUBLISH_MAX);
    assert_eq!(r.dropped_silently, 3 * (max + 1), "{text}");
    assert_eq!(
        r.reconciler["IN_PROGRESS/reconciler-republished"],
        3 * max,
        "{text}"
    );
    assert_eq!(r.reconciler["IN_PROGRESS/unanswered"], 3, "{text}");
}

/// An outage (every request answered ERROR for 25 s) with the service reached by
/// `service`: the breaker opens, pauses the retries, closes after the outage; no
/// transaction FAILED by it, every transaction used the attempts the service's script
/// gives, and the rate after the close stays within the bound.
///
/// The retries that must meet the breaker are those of the CANCELLED answers given in
/// the 10 s before the outage (about a dozen at this seed and rate). A first retry
/// waits 22.5–25 s (base 25, jitter 0.1), so every one of them falls due between
/// 22.5 s and 35 s of the run: after the breaker opened (5–8 s into the outage, once
/// its ERRORs weigh half of the 10 s window) and before the outage ends. The
/// first to fall due finds it past its cool-down and goes out as one of the round's
/// BREAKER_PROBES probes; the rest are held, in the round or once the probes' ERRORs
/// reopened it. (A 1–4 s backoff fired them before it opened; a 9–10 s one put a few
/// into the 3 s of its first cool-down, and on a loaded machine all of them into a
/// probe round or before the opening.)
async fn outage_run(tag: &str, service: &str) -> (sandbox::report::Report, String) {
    let mut args = demo_args(
        tag,
        &format!(
            "--transactions 60 --duplicate-responses 0 --seed 5 --submit-rate 3 --outage 10+25 \
             --service {service}"
        ),
    );
    args.backoff_base = 25.0;
    args.backoff_cap = 25.0;
    let (r, _) = sandbox::demo::run(&args).await.expect("demo runs");
    let text = render(&r);
    let b = r.breaker.as_ref().expect("breaker section");
    assert!(b.outage_errors > 0, "{text}");
    assert!(b.opened >= 1, "{text}");
    assert_eq!(b.final_state, "CLOSED", "{text}");
    // A retry is held only if it falls due while the breaker is not CLOSED. The first
    // retries fall due no sooner than `backoff_base` less jitter after the start of
    // the run; when the breaker opened before that (it does, unless the machine is so
    // slow that the outage's ERRORs come in only after them), those of the answers
    // given before the outage meet it, more of them than one round's probes.
    let opened_at = b
        .changes
        .iter()
        .find(|c| c.to == "OPEN")
        .map_or(f64::INFINITY, |c| c.at_seconds);
    if opened_at < args.backoff_base * (1.0 - args.jitter) {
        assert!(b.retries_paused > 0, "{text}");
        assert!(b.transactions_resumed > 0, "{text}");
    }
    assert!(b.failed_by_outage.is_empty(), "{text}");
    assert!(b.attempts_changed.is_empty(), "{text}");
    assert!(f64::from(b.peak_after_close) <= b.rate_bound, "{text}");
    assert!(r.ok(), "{text}");
    assert!(
        text.contains("FAILED by the outage          0 ok"),
        "{text}"
    );
    assert!(
        text.contains("breaker CLOSED at the end     CLOSED ok"),
        "{text}"
    );
    assert!(text.contains("result             OK"), "{text}");
    (r, text)
}

#[tokio::test(flavor = "multi_thread")]
async fn an_outage_opens_the_breaker_and_fails_nothing() {
    let (_, text) = outage_run("outage", "queue").await;
    eprintln!("{text}");
}

/// The same seeded workload answered by the queue service and, with `--service
/// http`, by the same service as an HTTP API behind the HTTP bridge that loses a
/// fifth of its answers after processing the request: every transaction ends the same
/// way after the same attempts; each lost answer came back as the bridge's ERROR and
/// one re-send of the same `Idempotency-Key`, which the service answered with its
/// first result; nothing went to a dead-letter queue. The HTTP service is played as
/// one that does not deduplicate (`http,non-idempotent`, the same answers): each of
/// those re-sends is an attempt it ran twice, reported with a warning.
#[tokio::test(flavor = "multi_thread")]
async fn a_demo_through_the_http_bridge_ends_as_one_on_the_queues() {
    let queue = twenty_of_seed_23("http", "--duplicate-responses 0 --service queue").await;
    let http = twenty_of_seed_23(
        "http",
        "--duplicate-responses 0.2 --service http,non-idempotent",
    )
    .await;
    let text = render(&http);
    // Each lost answer's re-send ran its attempt again at a service that does not
    // deduplicate: direct delivery's doubles, reported.
    assert!(ledger_agrees(&http) > 0, "{text}");
    assert_eq!(
        http.service_runs.as_ref().map(|r| r.redelivered_copies),
        Some(0)
    );
    assert_eq!(http.statuses, queue.statuses, "{text}");
    assert_eq!(http.retries_histogram, queue.retries_histogram, "{text}");
    assert_eq!(http.requests_deduped, queue.requests_deduped, "{text}");
    let bridge = |name: &str| {
        http.functions["http-bridge"]
            .get(name)
            .copied()
            .unwrap_or(0)
    };
    // One answered call per key, one ERROR per lost answer, each followed by a re-send.
    assert_eq!(
        bridge("HttpSuccess") + bridge("HttpCancelled"),
        http.requests_deduped,
        "{text}"
    );
    assert!(http.requests_raw > http.requests_deduped, "{text}");
    assert_eq!(
        bridge("HttpError"),
        http.requests_raw - http.requests_deduped,
        "{text}"
    );
    assert_eq!(bridge("HttpOperatorCases"), 0, "{text}");
    assert_eq!(bridge("HttpTimeouts"), 0, "{text}");
    assert!(bridge("Invocations") > 0, "{text}");
    assert!(!queue.functions.contains_key("http-bridge"));
}

/// The ledger of a service that does not deduplicate agrees with the service's own
/// log of requests per key (no ERROR answered, no request taken silently): its runs
/// and the copies of one message delivered again are the requests received, every
/// key received was run, the runs beyond the first are the rest; the attempts run
/// twice are listed; the result is the run's own, and a warning names the count
/// exactly when there is one, which the JSON carries. Returns the count.
fn ledger_agrees(r: &sandbox::report::Report) -> u64 {
    let text = render(r);
    let runs = r.service_runs.as_ref().expect("a ledger of runs");
    assert_eq!(runs.service, "non-idempotent");
    assert_eq!(
        runs.runs + runs.redelivered_copies,
        r.requests_raw,
        "{text}"
    );
    assert_eq!(runs.attempts_run, r.requests_deduped, "{text}");
    assert_eq!(
        runs.runs_beyond_first,
        runs.runs - runs.attempts_run,
        "{text}"
    );
    assert_eq!(runs.doubles.len() as u64, runs.executed_twice, "{text}");
    assert!(runs.doubles.iter().all(|(_, n)| *n >= 2), "{text}");
    let n = runs.executed_twice;
    assert!(text.contains(&format!("; executed twice {n} (")), "{text}");
    assert_eq!(
        text.contains(&format!(
            "\nwarning            executed twice {n}: direct delivery"
        )),
        n > 0,
        "{text}"
    );
    assert!(text.contains("result             OK"), "{text}");
    let json = serde_json::to_value(r).expect("the report as JSON");
    assert_eq!(json["service_runs"]["executed_twice"], n);
    assert_eq!(json["service_runs"]["runs"], runs.runs);
    n
}

/// A service that does not deduplicate on the queues, answers delivered twice and no
/// other fault: the response handler absorbs the copies, nothing is sent again, the
/// service ran every attempt once; the report says so, without a warning.
#[tokio::test(flavor = "multi_thread")]
async fn a_service_that_does_not_deduplicate_runs_each_attempt_once_without_faults() {
    let r = twenty_of_seed_23(
        "nonidem",
        "--duplicate-responses 0.2 --service non-idempotent",
    )
    .await;
    assert_eq!(ledger_agrees(&r), 0, "{}", render(&r));
    assert!(!render(&r).contains("warning "));
}

/// Outbox delivery (`--delivery outbox`) to a service that does not deduplicate,
/// under the heavy fault profile: the publisher on the table's stream publishes each
/// attempt once to the FIFO request queue, so the service ran every attempt once
/// (executed twice 0, which in outbox delivery would fail the run) and every
/// transaction ended.
#[tokio::test(flavor = "multi_thread")]
async fn outbox_delivery_runs_each_attempt_once_under_heavy_chaos() {
    let (r, text) = demo_ok(
        "outbox",
        "--transactions 50 --chaos heavy --seed 7 --service non-idempotent --delivery outbox",
    )
    .await;
    assert_eq!(r.delivery, "outbox");
    assert_eq!(
        r.count(domain::Status::Succeeded) + r.count(domain::Status::Failed),
        50,
        "{text}"
    );
    assert_eq!(ledger_agrees(&r), 0, "{text}");
    let runs = r.service_runs.as_ref().expect("a ledger of runs");
    assert_eq!(runs.delivery, "outbox");
    assert_eq!(
        runs.attempts_by_runs,
        std::collections::BTreeMap::from([(1, runs.attempts_run)]),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "executions per attempt: once {}",
            runs.attempts_run
        )),
        "{text}"
    );
    // Every request went out through the publisher (a send it repeated within the
    // deduplication window counts again), under the faults.
    let publisher = &r.functions["publisher"];
    assert!(
        publisher["RequestsPublished"] >= r.requests_deduped,
        "{text}"
    );
    let chaos = r.chaos.as_ref().expect("a chaos report");
    assert!(
        chaos.injected["sqs:SendMessage"].values().sum::<u64>() > 0,
        "{text}"
    );
}

/// A 5xx storm through the HTTP bridge (`--service http --outage 10+25`: the endpoint
/// answers every call 503 with `Retry-After` for 25 s), on top of the outage checks:
/// every 503 became one ERROR answer of the bridge, which reached the response
/// handler; the breaker's first change is CLOSED → OPEN inside the storm and its last
/// a close after it; no transaction is left open.
#[tokio::test(flavor = "multi_thread")]
async fn a_5xx_storm_through_the_http_bridge_opens_the_breaker_and_fails_nothing() {
    let (r, text) = outage_run("http-storm", "http").await;
    let b = r.breaker.as_ref().expect("breaker section");
    assert_eq!(
        r.functions["http-bridge"]["HttpError"], b.outage_errors,
        "{text}"
    );
    let first = b.changes.first().expect("the breaker changed state");
    assert_eq!(
        (first.from.as_str(), first.to.as_str()),
        ("CLOSED", "OPEN"),
        "{text}"
    );
    assert!(first.at_seconds >= b.outage_start_seconds, "{text}");
    let last = b.changes.last().expect("the breaker changed state");
    assert_eq!(last.to, "CLOSED", "{text}");
    assert!(last.at_seconds >= b.outage_end_seconds, "{text}");
    assert_eq!(b.not_terminal, 0, "{text}");
    eprintln!("{text}");
}
