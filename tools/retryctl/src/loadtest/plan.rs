//! What a load test may do: its bounds, checked before anything is started, and the
//! stacks it may run against (only one whose requests reach the staging harness).

use crate::cli::LoadtestArgs;
use crate::error::CliError;
use crate::verify::outputs::StackOutputs;
use domain::{MaxAttempts, TransactionId};
use harness::{Reply, Script};
use std::time::Duration;

/// Transactions started when `--transactions` is not given.
pub const DEFAULT_TRANSACTIONS: u32 = 1_000;
/// The most one run may start.
pub const MAX_TRANSACTIONS: u32 = 100_000;
/// Starts per second when `--rate` is not given.
pub const DEFAULT_RATE: f64 = 10.0;
/// The highest `--rate`.
pub const MAX_RATE: f64 = 1_000.0;
/// The whole run's ceiling when `--duration` is not given, in seconds.
pub const DEFAULT_DURATION_SECONDS: u64 = 1_800;
/// The highest `--duration`, in seconds (a day).
pub const MAX_DURATION_SECONDS: u64 = 86_400;
/// The most CANCELLED answers one transaction's script may ask for.
pub const MAX_CANCEL_TIMES: u32 = 100;
/// The longest `--run` name: the ids stay well within the schedule name's 64
/// characters, so every retry schedule of the run carries its id.
pub const MAX_RUN_NAME: usize = 20;
/// Every load-test id starts with this.
pub const ID_PREFIX: &str = "LOAD-";

/// A load test's bounds and workload, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub run: String,
    pub transactions: u32,
    pub rate: f64,
    pub duration: Duration,
    /// CANCELLED answers before SUCCESS, given to the transactions in turn.
    pub cancel_times: Vec<u32>,
    pub max_attempts: MaxAttempts,
    pub poll: Duration,
    pub progress: bool,
}

impl Plan {
    /// The plan of `args`; `now_run` names the run when `--run` is not given. Every
    /// refusal names the flag and the value.
    pub fn from_args(args: &LoadtestArgs, now_run: &str) -> Result<Self, CliError> {
        if args.transactions == 0 || args.transactions > MAX_TRANSACTIONS {
            return Err(CliError::bad(
                "--transactions",
                args.transactions.to_string(),
                format!("must be from 1 to {MAX_TRANSACTIONS}"),
            ));
        }
        if !(args.rate.is_finite() && args.rate > 0.0 && args.rate <= MAX_RATE) {
            return Err(CliError::bad(
                "--rate",
                args.rate.to_string(),
                format!("must be above 0 and at most {MAX_RATE} starts per second"),
            ));
        }
        if args.duration == 0 || args.duration > MAX_DURATION_SECONDS {
            return Err(CliError::bad(
                "--duration",
                args.duration.to_string(),
                format!("must be from 1 to {MAX_DURATION_SECONDS} seconds"),
            ));
        }
        let listed = || {
            args.cancel_times
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(",")
        };
        if args.cancel_times.is_empty() || args.cancel_times.iter().any(|k| *k > MAX_CANCEL_TIMES) {
            return Err(CliError::bad(
                "--cancel-times",
                listed(),
                format!("each must be from 0 to {MAX_CANCEL_TIMES}"),
            ));
        }
        let max_attempts = MaxAttempts::new(args.max_attempts)
            .map_err(|e| CliError::bad("--max-attempts", args.max_attempts.to_string(), e))?;
        if args.poll_ms < 100 {
            return Err(CliError::bad(
                "--poll-ms",
                args.poll_ms.to_string(),
                "must be at least 100",
            ));
        }
        let run = args.run.clone().unwrap_or_else(|| now_run.to_owned());
        if run.is_empty()
            || run.len() > MAX_RUN_NAME
            || !run.chars().all(|c| c.is_ascii_alphanumeric())
        {
            return Err(CliError::bad(
                "--run",
                run,
                format!("must be 1 to {MAX_RUN_NAME} letters and digits"),
            ));
        }
        Ok(Self {
            run,
            transactions: args.transactions,
            rate: args.rate,
            duration: Duration::from_secs(args.duration),
            cancel_times: args.cancel_times.clone(),
            max_attempts,
            poll: Duration::from_millis(args.poll_ms),
            progress: !args.no_progress,
        })
    }

    /// What every id of the run starts with: `LOAD-<run>-`.
    pub fn id_prefix(&self) -> String {
        format!("{ID_PREFIX}{}-", self.run)
    }

    /// The id of the `n`-th transaction (from 1): `LOAD-<run>-000001`.
    pub fn id(&self, n: u32) -> Result<TransactionId, CliError> {
        let raw = format!("{}{n:06}", self.id_prefix());
        TransactionId::parse(&raw).map_err(|e| CliError::bad("--run", &self.run, e))
    }

    /// How many CANCELLED answers the `n`-th transaction gets (the list in turn).
    pub fn cancels_of(&self, n: u32) -> u32 {
        let i = usize::try_from(n.saturating_sub(1)).unwrap_or(0) % self.cancel_times.len();
        self.cancel_times[i]
    }

    /// The harness's script for `cancels` CANCELLED answers, then SUCCESS, answered
    /// at once.
    pub fn script(cancels: u32) -> Script {
        let mut answers = vec![Reply::Answer(domain::Outcome::Cancelled); cancels as usize];
        answers.push(Reply::Answer(domain::Outcome::Success));
        Script {
            answers,
            delay_seconds: Some(0),
            reason: None,
        }
    }
}

/// The stacks a load test may run against: the harness stack's outputs are given and
/// it answers this main stack's request queue, and the main stack connects no real
/// service (no `HttpEndpoint`). Returns (main stack, harness stack).
pub fn staging(outputs: &StackOutputs) -> Result<(String, String), CliError> {
    let given = if outputs.stacks.is_empty() {
        "no --outputs given".to_owned()
    } else {
        format!(
            "the stacks given: {}",
            outputs
                .stacks
                .iter()
                .map(|(n, f)| format!("{n} from {f}"))
                .collect::<Vec<_>>()
                .join(", ")
        )
    };
    let missing: Vec<&str> = crate::verify::outputs::HARNESS_OUTPUTS
        .iter()
        .copied()
        .filter(|k| outputs.get(k).is_none())
        .collect();
    if !missing.is_empty() {
        return Err(CliError::NotStaging(format!(
            "refused: no staging harness ({given}; missing output(s) {}). A load test runs only against a stack whose requests the staging harness answers (infra/template.yaml): pass the main stack's and the harness stack's outputs with --outputs",
            missing.join(", ")
        )));
    }
    let main = outputs.stack_of("RequestQueueUrl").ok_or_else(|| {
        CliError::NotStaging(format!(
            "refused: output RequestQueueUrl is in none of {given}: pass the main stack's outputs with --outputs"
        ))
    })?;
    let answers = outputs.get("MainStackName").unwrap_or_default();
    let harness = outputs.stack_of("HarnessTableName").unwrap_or_default();
    if answers != main {
        return Err(CliError::NotStaging(format!(
            "refused: the harness stack {harness} answers stack `{answers}` (its output MainStackName), not {main}, whose request queue the load would go to"
        )));
    }
    if let Some((_, _, endpoint)) = outputs
        .parameters
        .iter()
        .find(|(s, k, v)| s == main && k == "HttpEndpoint" && !v.is_empty())
    {
        return Err(CliError::NotStaging(format!(
            "refused: stack {main} has HttpEndpoint `{endpoint}`: its HTTP bridge sends requests to a real service"
        )));
    }
    Ok((main.to_owned(), harness.to_owned()))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::cli::{Cli, Command};

    fn args(line: &[&str]) -> LoadtestArgs {
        let mut full = vec!["retryctl", "loadtest"];
        full.extend(line);
        match Cli::from_line(full).unwrap().command {
            Command::Loadtest(a) => a,
            other => panic!("{other:?}"),
        }
    }

    fn refused(line: &[&str]) -> String {
        let e = Plan::from_args(&args(line), "20261204070000").unwrap_err();
        assert_eq!(e.exit_code(), 2, "{e}");
        e.to_string()
    }

    /// GIVEN no flags WHEN the plan is made THEN the documented defaults apply, the
    /// run is named by the time given, and the ids carry the run.
    #[test]
    fn the_defaults_are_bounded_and_the_ids_carry_the_run() {
        let p = Plan::from_args(&args(&[]), "20261204070000").unwrap();
        assert_eq!(
            (
                p.transactions,
                p.rate,
                p.duration.as_secs(),
                &p.cancel_times
            ),
            (1_000, 10.0, 1_800, &vec![1])
        );
        assert_eq!(p.max_attempts.get(), domain::defaults::MAX_ATTEMPTS);
        assert_eq!(p.id(7).unwrap().as_str(), "LOAD-20261204070000-000007");
        let named = Plan::from_args(&args(&["--run", "nightly1"]), "x").unwrap();
        assert_eq!(named.id(1).unwrap().as_str(), "LOAD-nightly1-000001");
    }

    /// GIVEN a value past a bound WHEN the plan is made THEN it is refused with exit 2,
    /// naming the flag, the value and the bound.
    #[test]
    fn a_value_past_a_bound_names_the_flag_and_the_value() {
        assert_eq!(
            refused(&["--transactions", "100001"]),
            "invalid value for --transactions: `100001`: must be from 1 to 100000"
        );
        assert!(refused(&["--transactions", "0"]).contains("--transactions: `0`"));
        assert!(refused(&["--rate", "0"]).contains("--rate: `0`"));
        assert!(refused(&["--rate", "1000.5"]).contains("at most 1000 starts per second"));
        assert!(refused(&["--rate", "NaN"]).contains("--rate: `NaN`"));
        assert!(refused(&["--duration", "86401"]).contains("--duration: `86401`"));
        assert!(refused(&["--cancel-times", "1,101"]).contains("--cancel-times: `1,101`"));
        assert!(refused(&["--max-attempts", "0"]).contains("--max-attempts: `0`"));
        assert!(refused(&["--poll-ms", "99"]).contains("--poll-ms: `99`"));
        assert!(refused(&["--run", "a-b"]).contains("--run: `a-b`"));
        assert!(refused(&["--run", "abcdefghijklmnopqrstu"]).contains("1 to 20 letters"));
    }

    /// GIVEN a mix WHEN transactions are numbered THEN each gets the next entry in
    /// turn, and its script cancels that many times before SUCCESS.
    #[test]
    fn a_mix_is_given_in_turn_and_becomes_the_harness_script() {
        let p = Plan::from_args(&args(&["--cancel-times", "0,2,5"]), "r").unwrap();
        let k: Vec<u32> = (1..=7).map(|n| p.cancels_of(n)).collect();
        assert_eq!(k, vec![0, 2, 5, 0, 2, 5, 0]);
        let s = Plan::script(2);
        let replies: Vec<&str> = s.answers.iter().map(|r| r.as_str()).collect();
        assert_eq!(replies, vec!["CANCELLED", "CANCELLED", "SUCCESS"]);
        assert_eq!(s.delay_seconds, Some(0));
    }

    fn outputs(doc: serde_json::Value) -> StackOutputs {
        let mut o = StackOutputs::default();
        o.add("stacks.json", &doc.to_string()).unwrap();
        o
    }

    fn entry(name: &str, pairs: &[(&str, &str)]) -> serde_json::Value {
        serde_json::json!({"StackName": name, "Outputs": pairs.iter().map(|(k, v)| serde_json::json!({"OutputKey": k, "OutputValue": v})).collect::<Vec<_>>()})
    }

    /// GIVEN the main stack alone, a harness answering another stack, or a main stack
    /// with an HTTP endpoint WHEN a load test is asked for THEN it is refused with
    /// exit 7, saying what is missing or wrong; with its own harness it is allowed.
    #[test]
    fn only_a_stack_answered_by_its_harness_is_loaded() {
        let main = entry("app", &[("RequestQueueUrl", "http://q/app-request")]);
        let harness = |of: &str| {
            entry(
                "app-harness",
                &[
                    ("HarnessTableName", "h"),
                    ("HarnessRoleArn", "arn:h"),
                    ("MainStackName", of),
                ],
            )
        };
        let e = staging(&outputs(serde_json::json!({"Stacks": [main]}))).unwrap_err();
        assert_eq!((e.exit_code(), e.kind()), (7, "not-staging"));
        let text = e.to_string();
        assert!(
            text.contains("missing output(s) HarnessTableName, HarnessRoleArn, MainStackName")
                && text.contains("app from stacks.json"),
            "{text}"
        );
        assert!(staging(&StackOutputs::default())
            .unwrap_err()
            .to_string()
            .contains("no --outputs given"));
        let e = staging(&outputs(
            serde_json::json!({"Stacks": [main, harness("other")]}),
        ))
        .unwrap_err();
        assert_eq!(e.exit_code(), 7);
        assert!(e.to_string().contains("answers stack `other`"), "{e}");
        assert_eq!(
            staging(&outputs(
                serde_json::json!({"Stacks": [main, harness("app")]})
            ))
            .unwrap(),
            ("app".to_owned(), "app-harness".to_owned())
        );
        let mut http = main.clone();
        http["Parameters"] = serde_json::json!([{"ParameterKey": "HttpEndpoint", "ParameterValue": "https://api.example.com"}]);
        let e = staging(&outputs(
            serde_json::json!({"Stacks": [http, harness("app")]}),
        ))
        .unwrap_err();
        assert_eq!(e.exit_code(), 7);
        assert!(
            e.to_string()
                .contains("HttpEndpoint `https://api.example.com`"),
            "{e}"
        );
    }
}
