//! `replay` and `resolve` over many transactions: ids on the command line or
//! `--from-list` (the JSON lines of `retryctl list --json`), each with the caller's
//! identity (STS GetCallerIdentity) and `--reason` recorded in the record and so in
//! its audit entry; `--dry-run` decides each one exactly as the real run would (the
//! domain's own decision on the record read now) and writes nothing.

use crate::commands::{self, read_record, Output, Target};
use crate::error::CliError;
use crate::view;
use domain::decide::{decide, Input, Known};
use domain::machine::OperatorNote;
use domain::policy::FixedRandom;
use domain::ports::{Clock, SystemClock};
use domain::{Effect, TransactionId, TransactionRecord};
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::io::Read as _;
use std::path::Path;

/// The operator action applied to each transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// `replay`, with `--budget` when given.
    Replay {
        budget: Option<u32>,
    },
    Resolve,
}

impl Action {
    fn name(self) -> &'static str {
        match self {
            Action::Replay { .. } => "replay",
            Action::Resolve => "resolve",
        }
    }
}

/// The transactions to act on: the ids given, then those of `--from-list` (a file, or
/// `-` for stdin), in order, each once. Lines of the list without `transaction_id`
/// (the page line of `list --json`) and blank lines are skipped.
pub fn ids(given: &[String], from_list: Option<&Path>) -> Result<Vec<TransactionId>, CliError> {
    let mut out: Vec<TransactionId> = Vec::new();
    for raw in given {
        out.push(commands::parse_id(raw)?);
    }
    if let Some(path) = from_list {
        let shown = path.display().to_string();
        let text = if shown == "-" {
            let mut t = String::new();
            std::io::stdin().read_to_string(&mut t).map_err(|e| {
                CliError::bad("--from-list", "-", format!("cannot read stdin: {e}"))
            })?;
            t
        } else {
            std::fs::read_to_string(path).map_err(|e| {
                CliError::bad(
                    "--from-list",
                    shown.clone(),
                    format!("cannot read the file: {e}"),
                )
            })?
        };
        for (n, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let at = format!("{shown}:{}", n + 1);
            let v: Value = serde_json::from_str(line).map_err(|e| {
                CliError::bad(
                    "--from-list",
                    at.clone(),
                    format!("not a JSON line of `retryctl list --json`: {e}"),
                )
            })?;
            match v.get("transaction_id") {
                None => continue,
                Some(Value::String(id)) => out.push(
                    TransactionId::parse(id)
                        .map_err(|e| CliError::bad("--from-list", at, format!("`{id}`: {e}")))?,
                ),
                Some(other) => {
                    return Err(CliError::bad(
                        "--from-list",
                        at,
                        format!("transaction_id is not a string: {other}"),
                    ))
                }
            }
        }
    }
    let mut seen = BTreeSet::new();
    out.retain(|id| seen.insert(id.clone()));
    if out.is_empty() {
        return Err(CliError::Missing(
            "no transaction to act on: give ids, or --from-list FILE (the output of `retryctl list --json`, `-` for stdin)".into(),
        ));
    }
    Ok(out)
}

/// The caller's identity, as STS GetCallerIdentity gives it (its ARN).
pub async fn caller(t: &Target) -> Result<String, CliError> {
    let out = aws_sdk_sts::Client::new(&t.sdk)
        .get_caller_identity()
        .send()
        .await
        .map_err(|e| {
            CliError::AwsCall(aws::errors::classify("GetCallerIdentity", &e, |_| None).into())
        })?;
    out.arn()
        .map(str::to_owned)
        .ok_or_else(|| CliError::Aws("GetCallerIdentity returned no ARN".into()))
}

/// The note an operator write records: the caller's identity and `reason` (checked
/// before anything is asked of AWS).
pub async fn note(t: &Target, reason: Option<&str>) -> Result<OperatorNote, CliError> {
    let bad = |e: String| CliError::bad("--reason", reason.unwrap_or_default(), e);
    OperatorNote::new("", reason).map_err(bad)?;
    OperatorNote::new(caller(t).await?, reason).map_err(bad)
}

/// What changed between two states of a record: `[{attribute, from, to}]`, in the
/// attribute order of `list --json`.
pub fn changes(before: &Value, after: &Value) -> Vec<Value> {
    let (Some(b), Some(a)) = (before.as_object(), after.as_object()) else {
        return Vec::new();
    };
    a.iter()
        .filter(|(k, v)| b.get(*k) != Some(v))
        .map(|(k, v)| json!({"attribute": k, "from": b.get(k).cloned().unwrap_or(Value::Null), "to": v}))
        .collect()
}

fn changes_text(ch: &[Value]) -> String {
    ch.iter()
        .filter(|c| c["attribute"] != "updated_at")
        .map(|c| {
            let v = |x: &Value| match x {
                Value::Null => "-".to_owned(),
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            format!(
                "{} {} → {}",
                c["attribute"].as_str().unwrap_or_default(),
                v(&c["from"]),
                v(&c["to"])
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// One transaction's result: a text line and its JSON row (every key present).
struct Row {
    line: String,
    json: Value,
    /// The exit code of a failure.
    failed: Option<i32>,
}

fn failure(id: &TransactionId, e: &CliError) -> Row {
    let message = e.to_string().lines().next().unwrap_or_default().to_owned();
    Row {
        line: format!("{id}: {} — {message}", e.kind()),
        json: json!({
            "transaction_id": id.as_str(),
            "ok": false,
            "result": null,
            "error": e.kind(),
            "message": message,
            "changes": [],
            "effects": [],
        }),
        failed: Some(e.exit_code()),
    }
}

/// The dry run of one transaction: the domain's decision on the record as it is now
/// (`before`), applied in memory.
fn planned(
    t: &Target,
    action: Action,
    id: &TransactionId,
    note: &OperatorNote,
    before: &TransactionRecord,
) -> Result<Row, CliError> {
    let (input, settings) = match action {
        Action::Replay { budget } => (
            Input::Replay {
                transaction_id: id.clone(),
                budget: budget.unwrap_or(before.max_attempts.get()),
            },
            t.stack_settings(false)?,
        ),
        Action::Resolve => (Input::Resolve(id.clone()), t.settings()),
    };
    let ctx = settings
        .context(SystemClock.now())
        .for_operator(note.clone());
    let plan = decide(
        &input,
        Known::Record(before),
        None,
        &ctx,
        &mut FixedRandom(0.5),
    );
    if let Some(r) = plan.iter().find_map(|e| match e {
        Effect::Reject(r) => Some(r),
        _ => None,
    }) {
        return Err(CliError::Refused(r.to_string()));
    }
    let after = match plan.iter().find_map(|e| match e {
        Effect::Write(w) => Some(w),
        _ => None,
    }) {
        Some(w) => w
            .apply(before)
            .map_err(|_| CliError::Refused(format!("{id}: the write's condition would fail")))?,
        None => before.clone(),
    };
    let ch = changes(&view::record_json(before), &view::record_json(&after));
    let effects: Vec<String> = plan
        .iter()
        .filter_map(|e| match e {
            Effect::PublishRetry(r) => Some(format!("publish-retry attempt {}", r.attempt)),
            Effect::DeleteSchedule(n) => Some(format!("delete-schedule {n}")),
            _ => None,
        })
        .collect();
    let ack = plan.iter().find_map(|e| match e {
        Effect::Ack(a) => Some(a.label()),
        _ => None,
    });
    let result = if ch.is_empty() {
        ack.unwrap_or("nothing").to_owned()
    } else {
        format!("would-{}", action.name())
    };
    let mut line = format!("{id}: {result}");
    if !ch.is_empty() {
        let _ = write!(line, ": {}", changes_text(&ch));
    }
    if !effects.is_empty() {
        let _ = write!(line, "; then {}", effects.join(", "));
    }
    // What the replay sends, as the deployment delivers it.
    let next = plan.iter().find_map(|e| match e {
        Effect::PublishRetry(r) => Some(r.attempt.to_string()),
        _ => None,
    });
    if let (Action::Replay { .. }, Some(next)) = (action, &next) {
        let _ = write!(
            line,
            " ({})",
            commands::replay_delivery(ctx.rules.delivery, next)
        );
    }
    Ok(Row {
        line,
        json: json!({
            "transaction_id": id.as_str(),
            "ok": true,
            "result": result,
            "error": null,
            "message": null,
            "changes": ch,
            "effects": effects,
        }),
        failed: None,
    })
}

/// One transaction: read, then planned (`dry_run`) or done for real — the operator
/// command, then what it changed.
async fn one(
    t: &Target,
    action: Action,
    id: &TransactionId,
    note: &OperatorNote,
    dry_run: bool,
) -> Result<Row, CliError> {
    let store = t.store()?;
    let before = read_record(&store, id).await?;
    if dry_run {
        return planned(t, action, id, note, &before);
    }
    let done = match action {
        Action::Replay { budget } => commands::replay(t, id.as_str(), budget, Some(note)).await?,
        Action::Resolve => commands::resolve(t, id.as_str(), Some(note)).await?,
    };
    let after = read_record(&store, id).await?;
    let ch = changes(&view::record_json(&before), &view::record_json(&after));
    Ok(Row {
        line: done.text.trim_end().to_owned(),
        json: json!({
            "transaction_id": id.as_str(),
            "ok": true,
            "result": done.json["result"],
            "error": null,
            "message": done.text.trim_end(),
            "changes": ch,
            "effects": [],
        }),
        failed: None,
    })
}

/// Runs `action` on every transaction of `ids`: one line (JSON row) each, then a
/// summary. The error, when some failed, carries the exit code of the first failure
/// (after the output is printed).
pub async fn run(
    t: &Target,
    action: Action,
    ids: &[TransactionId],
    dry_run: bool,
    reason: Option<&str>,
) -> Result<(Output, Option<CliError>), CliError> {
    if let Action::Replay { budget: Some(0) } = action {
        return Err(CliError::bad("--budget", "0", "must be at least 1"));
    }
    let note = note(t, reason).await?;
    let who = note.caller.clone();
    let mut text = String::new();
    let mut rows: Vec<Value> = Vec::new();
    let mut first_failure: Option<i32> = None;
    let mut failed = 0usize;
    for id in ids {
        let row = one(t, action, id, &note, dry_run)
            .await
            .unwrap_or_else(|e| failure(id, &e.with_hint(&t.whereabouts())));
        if let Some(code) = row.failed {
            failed += 1;
            first_failure.get_or_insert(code);
        }
        let _ = writeln!(text, "{}", row.line);
        rows.push(row.json);
    }
    let done = ids.len() - failed;
    let _ = writeln!(
        text,
        "{}: {done} of {} done, {failed} failed{} (as {who}{})",
        action.name(),
        ids.len(),
        if dry_run {
            "; dry run: nothing written"
        } else {
            ""
        },
        reason
            .map(|r| format!(", reason \"{r}\""))
            .unwrap_or_default()
    );
    rows.push(json!({
        "action": action.name(),
        "dry_run": dry_run,
        "done": done,
        "failed": failed,
        "caller": who,
        "reason": reason,
    }));
    let err = first_failure.map(|code| CliError::SomeFailed {
        code,
        message: format!(
            "{failed} of {} transaction(s) failed (the lines above say which and why)",
            ids.len()
        ),
    });
    Ok((
        Output {
            text,
            json: Value::Array(rows),
        },
        err,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_list_is_read_skipping_its_page_line_and_naming_bad_lines() {
        let dir = std::env::temp_dir().join(format!("retryctl-bulk-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let list = dir.join("failed.jsonl");
        std::fs::write(
            &list,
            "{\"transaction_id\":\"TX-2\",\"status\":\"FAILED\"}\n\n{\"transaction_id\":\"TX-1\"}\n{\"listed\":2,\"next_token\":null}\n",
        )
        .unwrap();
        let got = ids(&["TX-1".into()], Some(&list)).unwrap();
        let got: Vec<&str> = got.iter().map(|i| i.as_str()).collect();
        assert_eq!(got, ["TX-1", "TX-2"], "in order, each once");
        std::fs::write(&list, "{\"transaction_id\":\"TX-1\"}\nnot json\n").unwrap();
        let e = ids(&[], Some(&list)).unwrap_err().to_string();
        assert!(
            e.contains("--from-list") && e.contains("failed.jsonl:2"),
            "{e}"
        );
        assert!(ids(&[], None).is_err());
    }

    #[test]
    fn changes_name_each_attribute_that_differs() {
        let b = json!({"status": "FAILED", "max_attempts": 2, "next_attempt": null});
        let a = json!({"status": "SCHEDULING", "max_attempts": 2, "next_attempt": 3});
        let ch = changes(&b, &a);
        assert_eq!(ch.len(), 2);
        assert_eq!(
            changes_text(&ch),
            "next_attempt - → 3, status FAILED → SCHEDULING"
        );
    }
}
