//! The operator commands' dispatch: what `retryctl` runs for a parsed command line
//! against a [`Target`] (the binary's `main`, and the tests that record every call a
//! command makes under an operator role).

use crate::cli::{BulkArgs, Cli, Command, DlqAction};
use crate::commands::{self, Output, Target};
use crate::error::CliError;

/// How a command ended when it failed: the error, and what it printed before (a
/// bulk action's lines, each transaction's result, before the exit code says one
/// failed).
pub struct Ended {
    pub printed: Option<Output>,
    pub error: CliError,
}

impl From<CliError> for Ended {
    fn from(error: CliError) -> Self {
        Self {
            printed: None,
            error,
        }
    }
}

/// `replay` and `resolve`: one transaction as before, or many (`bulk`).
async fn operator(
    target: &Target,
    args: &BulkArgs,
    action: crate::bulk::Action,
) -> Result<Output, Ended> {
    let ids = crate::bulk::ids(&args.ids, args.from_list.as_deref())?;
    if let Some(id) = args.single() {
        let note = crate::bulk::note(target, args.reason.as_deref()).await?;
        return Ok(match action {
            crate::bulk::Action::Replay { budget } => {
                commands::replay(target, id, budget, Some(&note)).await?
            }
            crate::bulk::Action::Resolve => commands::resolve(target, id, Some(&note)).await?,
        });
    }
    let (out, failed) =
        crate::bulk::run(target, action, &ids, args.dry_run, args.reason.as_deref()).await?;
    match failed {
        None => Ok(out),
        Some(error) => Err(Ended {
            printed: Some(out),
            error,
        }),
    }
}

/// Runs every command but `demo` and `verify` (which the binary runs itself) on
/// `target`.
pub async fn execute(cli: &Cli, target: &Target) -> Result<Output, Ended> {
    let out = match &cli.command {
        Command::Submit {
            id,
            payload,
            max_attempts,
            correlation_id,
        } => {
            commands::submit(
                target,
                id,
                payload,
                *max_attempts,
                correlation_id.as_deref(),
            )
            .await
        }
        Command::Show { id, payload, wide } => commands::show(target, id, *payload, *wide).await,
        Command::Erase { id, reason, force } => {
            crate::erase::erase(target, id, reason, *force).await
        }
        Command::List {
            status,
            attempt,
            since,
            until,
            limit,
            next_token,
            scan,
        } => {
            let q = crate::list::ListQuery::parse(
                status.as_deref(),
                *attempt,
                since.as_deref(),
                until.as_deref(),
                *limit,
                next_token.as_deref(),
                *scan,
            );
            match q {
                Ok(q) => crate::list::run(target, &q).await,
                Err(e) => Err(e),
            }
        }
        Command::Stats => commands::stats(target).await,
        Command::Breaker { action } => crate::breaker::run(target, action).await,
        Command::Stuck => commands::stuck(target).await,
        Command::Resolve { bulk } => {
            return operator(target, bulk, crate::bulk::Action::Resolve).await
        }
        Command::Redrive {
            queue,
            max,
            dry_run: true,
            ..
        } => commands::peek(target, *queue, max.unwrap_or(u64::MAX), true).await,
        Command::Redrive {
            queue,
            max,
            dry_run: false,
            wait,
        } => commands::redrive(target, *queue, *max, *wait).await,
        Command::Dlq {
            action: DlqAction::Peek { queue, max },
        } => commands::peek(target, *queue, *max, false).await,
        Command::Replay { bulk, budget } => {
            let action = crate::bulk::Action::Replay { budget: *budget };
            return operator(target, bulk, action).await;
        }
        Command::Versions => return versions(target).await,
        #[cfg(feature = "demo")]
        Command::Demo(_) => Err(binary_only()),
        #[cfg(feature = "verify")]
        Command::Verify(_) => Err(binary_only()),
        #[cfg(feature = "verify")]
        Command::Loadtest(_) => Err(binary_only()),
    };
    Ok(out?)
}

/// `versions`: the function names from the stack's outputs, what each runs; exit 6
/// (after the report) when the releases are outside the compatibility window.
async fn versions(target: &Target) -> Result<Output, Ended> {
    let Some(stack) = &target.args.stack else {
        return Err(CliError::Missing(
            "versions reads the function names from the stack's outputs: set --stack (or RETRYCTL_STACK)"
                .to_owned(),
        )
        .into());
    };
    let described = crate::stack::Described::fetch(&target.sdk, stack).await?;
    let functions = crate::versions::functions_of(|k| described.outputs.get(k).map(String::as_str))
        .map_err(CliError::Missing)?;
    if functions.is_empty() {
        return Err(CliError::Missing(format!(
            "stack {stack} has no output naming a function (ResponseHandlerFunctionName, …): deploy the current template.yaml"
        ))
        .into());
    }
    let report = crate::versions::report(&target.sdk, &functions).await?;
    let out = Output {
        text: crate::versions::render(&report),
        json: serde_json::to_value(&report).unwrap_or_default(),
    };
    if report.ok {
        return Ok(out);
    }
    Err(Ended {
        printed: Some(out),
        error: CliError::VerifyFailed(report.verdict),
    })
}

#[cfg(any(feature = "demo", feature = "verify"))]
fn binary_only() -> CliError {
    CliError::Missing("demo, verify and loadtest run from the retryctl binary".to_owned())
}
