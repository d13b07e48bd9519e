//! `retryctl verify`: is a deployed stack the one the code relies on, and does it work
//! end to end? In order: no parameter still a documentation placeholder
//! ([`placeholders`]); every resource as the code's own definitions expect it
//! ([`resources`]); what each function's `live` alias runs and whether its releases
//! are within the compatibility window ([`versions`]); the request delivery mode the
//! stack runs, parameter, queue and functions agreeing ([`delivery`]); then, only when the resources
//! pass, three scripted transactions through the real queues and the staging harness,
//! their states, audit trails and leftovers ([`flow`]). Outputs come from
//! `describe-stacks` files ([`outputs`]); a failed check exits 6. The checks:
//! `docs/deploy.md#deploy-to-staging-and-verify`.

pub mod delivery;
pub mod flow;
pub mod outputs;
pub mod placeholders;
pub mod resources;
pub mod versions;

use crate::error::CliError;
use outputs::StackOutputs;
use serde::Serialize;
use serde_json::Value;
use std::time::{Duration, Instant};

/// How a check ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CheckStatus {
    Pass,
    Fail,
    /// Not checked, with the reason.
    Skip,
}

/// One check: what was looked at, and what was found.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    /// `parameters`, `resources`, `versions`, `delivery`, `transactions` or `after`.
    pub phase: &'static str,
    /// The resource (logical id and physical name) or the transaction.
    pub subject: String,
    pub status: CheckStatus,
    pub detail: String,
}

/// The checks so far; progress lines go to stderr as they are made.
#[derive(Debug, Default)]
pub struct Checks {
    pub list: Vec<Check>,
    pub progress: bool,
}

impl Checks {
    fn push(&mut self, phase: &'static str, subject: String, status: CheckStatus, detail: String) {
        if self.progress {
            eprintln!(
                "{}",
                line(&Check {
                    phase,
                    subject: subject.clone(),
                    status,
                    detail: detail.clone()
                })
            );
        }
        self.list.push(Check {
            phase,
            subject,
            status,
            detail,
        });
    }

    pub fn pass(&mut self, phase: &'static str, subject: impl Into<String>, detail: String) {
        self.push(phase, subject.into(), CheckStatus::Pass, detail);
    }

    pub fn fail(
        &mut self,
        phase: &'static str,
        subject: impl Into<String>,
        detail: impl Into<String>,
    ) {
        self.push(phase, subject.into(), CheckStatus::Fail, detail.into());
    }

    pub fn skip(&mut self, phase: &'static str, subject: impl Into<String>, detail: String) {
        self.push(phase, subject.into(), CheckStatus::Skip, detail);
    }

    pub fn progress(&self, text: &str) {
        if self.progress {
            eprintln!("verify: {text}");
        }
    }

    fn failed(&self) -> bool {
        self.list.iter().any(|c| c.status == CheckStatus::Fail)
    }
}

/// How to run.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Check the resources only.
    pub resources_only: bool,
    /// Longest wait for the transactions to end.
    pub timeout: Duration,
    /// Longest wait for the audit trail and the schedules' deletion to catch up.
    pub audit_wait: Duration,
    pub poll: Duration,
    /// `aws iam get-role` output for the scheduler role, if given.
    pub scheduler_role: Option<Value>,
    /// Progress lines on stderr.
    pub progress: bool,
}

/// The clients and inputs every check uses.
pub struct Env<'a> {
    pub sqs: aws_sdk_sqs::Client,
    pub ddb: aws_sdk_dynamodb::Client,
    pub scheduler: aws_sdk_scheduler::Client,
    pub sns: aws_sdk_sns::Client,
    pub outputs: &'a StackOutputs,
    pub settings: &'a Settings,
}

/// What `retryctl verify` found.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The stacks whose outputs were read.
    pub stacks: Vec<String>,
    pub checks: Vec<Check>,
    pub passed: usize,
    pub failed: usize,
    pub skipped: usize,
    pub ok: bool,
    pub seconds: u64,
    /// What each function runs, when the outputs name the functions.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub versions: Option<crate::versions::Report>,
}

/// Runs every check against the stacks of `outputs`.
pub async fn run(
    sdk: &aws_config::SdkConfig,
    outputs: &StackOutputs,
    settings: &Settings,
) -> Result<Report, CliError> {
    let started = Instant::now();
    for key in outputs::MAIN_OUTPUTS {
        outputs.require(key)?;
    }
    let env = Env {
        sqs: aws::clients::sqs(sdk),
        ddb: aws::clients::dynamodb(sdk),
        scheduler: aws::clients::scheduler(sdk),
        sns: aws_sdk_sns::Client::new(sdk),
        outputs,
        settings,
    };
    let mut checks = Checks {
        list: vec![],
        progress: settings.progress,
    };
    placeholders::check(outputs, &mut checks);
    resources::check(&env, &mut checks).await;
    let why_not = if settings.resources_only {
        Some("not run (--resources-only)".to_owned())
    } else if checks.failed() {
        Some("not run: a resource check failed, fix it first".to_owned())
    } else if !outputs.has_harness() {
        Some("not run: no harness outputs (pass the harness stack's outputs with --outputs; infra/template.yaml)".to_owned())
    } else {
        None
    };
    let versions = versions::check(sdk, outputs, &mut checks).await;
    delivery::check(sdk, &env.sqs, outputs, &mut checks).await;
    match why_not {
        Some(reason) => checks.skip("transactions", "end-to-end run", reason),
        None => flow::run(&env, &mut checks).await?,
    }
    let count = |s: CheckStatus| checks.list.iter().filter(|c| c.status == s).count();
    let failed = count(CheckStatus::Fail);
    Ok(Report {
        stacks: outputs.stacks.iter().map(|(n, _)| n.clone()).collect(),
        passed: count(CheckStatus::Pass),
        failed,
        skipped: count(CheckStatus::Skip),
        ok: failed == 0,
        checks: checks.list,
        seconds: started.elapsed().as_secs(),
        versions,
    })
}

fn line(c: &Check) -> String {
    let mark = match c.status {
        CheckStatus::Pass => "ok  ",
        CheckStatus::Fail => "FAIL",
        CheckStatus::Skip => "skip",
    };
    format!("{mark}  {:<12} {}: {}", c.phase, c.subject, c.detail)
}

/// The report for people: one line per check, failures repeated at the end.
pub fn render(r: &Report) -> String {
    let mut out = format!("verify {}\n", r.stacks.join(" + "));
    for c in &r.checks {
        out.push_str(&line(c));
        out.push('\n');
    }
    let failures: Vec<&Check> = r
        .checks
        .iter()
        .filter(|c| c.status == CheckStatus::Fail)
        .collect();
    if !failures.is_empty() {
        out.push_str("\nfailed:\n");
        for c in failures {
            out.push_str(&format!("  {}: {}\n", c.subject, c.detail));
        }
    }
    out.push_str(&format!(
        "\n{}: {} passed, {} failed, {} not checked, in {} s\n",
        if r.ok { "VERIFIED" } else { "NOT VERIFIED" },
        r.passed,
        r.failed,
        r.skipped,
        r.seconds
    ));
    out
}
