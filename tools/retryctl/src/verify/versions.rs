//! Phase `versions`: one check per function of the outputs (what its `live` alias
//! runs, both versions and their weights while a deployment shifts it), then one for
//! the releases side by side, judged by [`crate::versions::window`]: outside the
//! compatibility window fails, a release beside the one right after it passes with a
//! note. Not checked when the outputs name no function (the local stack runs the
//! functions in-process).

use super::Checks;
use crate::verify::outputs::StackOutputs;
use crate::versions::{self, Report};

const PHASE: &str = "versions";

/// Checks what every function runs; the report, when the functions could be read.
pub async fn check(
    sdk: &aws_config::SdkConfig,
    outputs: &StackOutputs,
    checks: &mut Checks,
) -> Option<Report> {
    let functions = match versions::functions_of(|k| outputs.get(k)) {
        Ok(f) if f.is_empty() => {
            checks.skip(
                PHASE,
                "functions",
                "not checked: the outputs name no function (ResponseHandlerFunctionName, …; the local stack runs them in-process)".to_owned(),
            );
            return None;
        }
        Ok(f) => f,
        Err(e) => {
            checks.fail(PHASE, "functions", e);
            return None;
        }
    };
    let lambda = aws_sdk_lambda::Client::new(sdk);
    let mut deployed = Vec::with_capacity(functions.len());
    for (function, name) in &functions {
        let subject = format!("{function} {name}");
        match versions::read(&lambda, function, name).await {
            Ok(d) => {
                checks.pass(PHASE, subject, d.describe());
                deployed.push(d);
            }
            Err(e) => checks.fail(PHASE, subject, e.to_string()),
        }
    }
    if deployed.len() < functions.len() {
        checks.skip(
            PHASE,
            "releases",
            "not judged: a function's versions could not be read".to_owned(),
        );
        return None;
    }
    let report = Report::of(deployed);
    let detail = match report.shifting_note() {
        Some(note) => format!("{}; {note}", report.verdict),
        None => report.verdict.clone(),
    };
    if report.ok {
        checks.pass(PHASE, "releases", detail);
    } else {
        checks.fail(PHASE, "releases", detail);
    }
    Some(report)
}
