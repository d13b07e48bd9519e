//! The end-to-end run: a handful of real transactions through the real queues, the
//! harness answering each by the script its payload carries, then what they left
//! behind — final state, audit trail, what the harness received, schedules, DLQs.

use super::resources::{depth, DLQS};
use super::{Checks, Env};
use crate::error::CliError;
use aws::audit::AuditWriter;
use aws::dynamo::DynamoStore;
use aws::sqs::SqsRequestPublisher;
use domain::exec::StartPorts;
use domain::ports::{Clock, Records, SystemClock};
use domain::{
    Attempt, MaxAttempts, Outcome, Payload, ScheduleName, Status, TransactionId, TransactionRecord,
};
use harness::{Reply, Script};
use runtime::Settings;
use serde_json::json;
use std::time::{Duration, Instant};

const PHASE: &str = "transactions";
const AFTER: &str = "after";

/// One transaction of the run: the harness's answers and the attempt budget.
#[derive(Debug, Clone)]
pub struct Case {
    pub name: &'static str,
    pub answers: Vec<Reply>,
    pub max_attempts: u32,
}

/// The three cases: answered at once; CANCELLED then SUCCESS (one retry through the
/// scheduler); CANCELLED every time (the budget of 3 exhausted).
pub fn cases() -> Vec<Case> {
    let cancelled = Reply::Answer(Outcome::Cancelled);
    let success = Reply::Answer(Outcome::Success);
    vec![
        Case {
            name: "success",
            answers: vec![success],
            max_attempts: 3,
        },
        Case {
            name: "cancelled-then-success",
            answers: vec![cancelled, success],
            max_attempts: 3,
        },
        Case {
            name: "exhausted",
            answers: vec![cancelled],
            max_attempts: 3,
        },
    ]
}

/// What a case must leave: the transitions in order (`from → to`), the attempt it
/// ends at, and the status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expected {
    pub trail: Vec<(Option<Status>, Status)>,
    pub attempts: u32,
    pub status: Status,
}

/// The transitions the pattern makes for a script (docs/design.md, the state
/// machine): creation; per CANCELLED with attempts left, IN_PROGRESS → SCHEDULING →
/// SCHEDULED → SENDING → IN_PROGRESS; then SUCCEEDED, or FAILED when the last attempt
/// is CANCELLED. A script that ends without an answer cannot be verified.
pub fn expected(case: &Case) -> Result<Expected, String> {
    use Status::*;
    let script = Script {
        answers: case.answers.clone(),
        delay_seconds: None,
        reason: None,
    };
    let mut trail = vec![(None, InProgress)];
    for n in 1..=case.max_attempts {
        let attempt = Attempt::new(n).map_err(|e| e.to_string())?;
        let reply = script.reply_for(attempt);
        // The last attempt CANCELLED, or any attempt REJECTED: FAILED.
        let ends_failed = match reply {
            Reply::Answer(Outcome::Rejected) => true,
            Reply::Answer(Outcome::Cancelled) => n == case.max_attempts,
            _ => false,
        };
        match reply {
            Reply::Answer(Outcome::Success) => {
                trail.push((Some(InProgress), Succeeded));
                return Ok(Expected {
                    trail,
                    attempts: n,
                    status: Succeeded,
                });
            }
            Reply::Answer(Outcome::Cancelled | Outcome::Rejected) if ends_failed => {
                trail.push((Some(InProgress), Failed));
                return Ok(Expected {
                    trail,
                    attempts: n,
                    status: Failed,
                });
            }
            Reply::Answer(Outcome::Cancelled | Outcome::Rejected) => trail.extend([
                (Some(InProgress), Scheduling),
                (Some(Scheduling), Scheduled),
                (Some(Scheduled), Sending),
                (Some(Sending), InProgress),
            ]),
            Reply::Silent => break,
            // A script answers by attempt: an ERROR would answer every re-send of the
            // attempt again, until the re-sends are spent (hours of backoff).
            Reply::Answer(Outcome::Error) => {
                return Err(format!(
                    "case {}: attempt {n} is answered ERROR, which a script repeats for every technical re-send of the attempt; verify scripts take SUCCESS, CANCELLED and NONE",
                    case.name
                ))
            }
        }
    }
    Err(format!(
        "case {}: the script leaves the transaction waiting for an answer",
        case.name
    ))
}

fn trail_text(t: &[(Option<Status>, Status)]) -> String {
    t.iter()
        .map(|(f, to)| format!("{}→{}", f.map_or("[*]", Status::as_str), to.as_str()))
        .collect::<Vec<_>>()
        .join(", ")
}

struct Started {
    case: Case,
    id: TransactionId,
    expected: Expected,
    started: Instant,
    ended: Option<(TransactionRecord, Duration)>,
}

/// Runs the cases and records every check.
pub async fn run(env: &Env<'_>, out: &mut Checks) -> Result<(), CliError> {
    let o = env.outputs;
    let shards: u16 = o.require("ReconcileShards")?.parse().map_err(|e| {
        CliError::bad(
            "ReconcileShards output",
            o.get("ReconcileShards").unwrap_or(""),
            e,
        )
    })?;
    let answer_timeout: u64 = o.require("AnswerTimeoutSeconds")?.parse().map_err(|e| {
        CliError::bad(
            "AnswerTimeoutSeconds output",
            o.get("AnswerTimeoutSeconds").unwrap_or(""),
            e,
        )
    })?;
    let store = DynamoStore::new(env.ddb.clone(), o.require("TransactionsTableName")?)
        .with_payloads_table(o.require("PayloadsTableName")?);
    let requests = SqsRequestPublisher::new(env.sqs.clone(), o.require("RequestQueueUrl")?);
    let ports = StartPorts {
        store: &store,
        requests: &requests,
    };
    let settings = Settings {
        shards,
        ..Settings::default()
    };
    let run_id = format!("verify-{}", SystemClock.now().millis());
    let mut runs = vec![];
    for case in cases() {
        let expected = expected(&case).map_err(CliError::Missing)?;
        let id = TransactionId::parse(&format!("{run_id}-{}", case.name))
            .map_err(|e| CliError::bad("transaction id", &run_id, e))?;
        let script = Script {
            answers: case.answers.clone(),
            delay_seconds: Some(0),
            reason: None,
        };
        let payload = json!({"verify": run_id, "case": case.name, harness::rules::SCRIPT_MEMBER: script.to_json()});
        let payload = Payload::from_json(&payload.to_string())
            .map_err(|e| CliError::bad("payload", payload.to_string(), e))?;
        let max = MaxAttempts::new(case.max_attempts)
            .map_err(|e| CliError::bad("max attempts", case.max_attempts.to_string(), e))?;
        runtime::ops::start_transaction(
            &ports,
            id.clone(),
            payload,
            max,
            Duration::from_secs(answer_timeout),
            &settings.context(SystemClock.now()),
        )
        .await
        .map_err(|e| CliError::Aws(format!("starting {id}: {e}")))?;
        out.progress(&format!(
            "started {id} ({}: answers {})",
            case.name,
            answers_text(&case.answers)
        ));
        runs.push(Started {
            case,
            id,
            expected,
            started: Instant::now(),
            ended: None,
        });
    }

    // Until every transaction is terminal, or the deadline.
    let deadline = Instant::now() + env.settings.timeout;
    let mut last_report = Instant::now();
    while runs.iter().any(|r| r.ended.is_none()) && Instant::now() < deadline {
        tokio::time::sleep(env.settings.poll).await;
        let mut waiting = vec![];
        for r in runs.iter_mut().filter(|r| r.ended.is_none()) {
            match store.get(&r.id).await {
                Ok(Some(rec)) if rec.status.is_terminal() => {
                    out.progress(&format!(
                        "{} {} at attempt {} after {} s",
                        r.case.name,
                        rec.status,
                        rec.current_attempt,
                        r.started.elapsed().as_secs()
                    ));
                    r.ended = Some((rec, r.started.elapsed()));
                }
                Ok(Some(rec)) => waiting.push(format!(
                    "{} {} (attempt {})",
                    r.case.name, rec.status, rec.current_attempt
                )),
                Ok(None) => waiting.push(format!("{} not found", r.case.name)),
                Err(e) => waiting.push(format!("{} unreadable: {e}", r.case.name)),
            }
        }
        if !waiting.is_empty() && last_report.elapsed() >= Duration::from_secs(15) {
            out.progress(&format!("waiting: {}", waiting.join(", ")));
            last_report = Instant::now();
        }
    }

    let audit = AuditWriter::new(env.ddb.clone(), o.require("AuditTableName")?, 1);
    let harness_table = o.require("HarnessTableName")?;
    let group = o.require("ScheduleGroupName")?;
    for r in &runs {
        let subject = format!("{} {}", r.case.name, r.id);
        let e = &r.expected;
        let Some((rec, took)) = &r.ended else {
            let now = store.get(&r.id).await.ok().flatten();
            out.fail(
                PHASE,
                subject,
                format!(
                    "not terminal after {} s: {} — expected {} at attempt {}. Look at the queues' age, the DLQs, the functions' logs and the harness's table",
                    env.settings.timeout.as_secs(),
                    now.map_or("no record".to_owned(), |n| format!("{} at attempt {}", n.status, n.current_attempt)),
                    e.status,
                    e.attempts
                ),
            );
            continue;
        };
        if rec.status == e.status && rec.current_attempt.get() == e.attempts {
            out.pass(
                PHASE,
                subject.clone(),
                format!(
                    "{} at attempt {} of {} in {} s",
                    rec.status,
                    e.attempts,
                    r.case.max_attempts,
                    took.as_secs()
                ),
            );
        } else {
            out.fail(
                PHASE,
                subject.clone(),
                format!(
                    "ended {} at attempt {}, expected {} at attempt {}",
                    rec.status, rec.current_attempt, e.status, e.attempts
                ),
            );
        }
        audit_trail(env, out, &audit, r).await;
        received(env, out, harness_table, r).await;
        schedules_gone(env, out, group, r).await;
    }

    for (id, key) in DLQS {
        let url = o.require(key)?;
        let subject = format!("{id} {}", url.rsplit('/').next().unwrap_or(url));
        match depth(env, url).await {
            Ok(0) => out.pass(AFTER, subject, "empty".to_owned()),
            Ok(n) => out.fail(
                AFTER,
                subject,
                format!("holds {n} message(s): read them (docs/deploy.md, the alarm of this DLQ), fix the cause, then `retryctl redrive` or purge"),
            ),
            Err(e) => out.fail(AFTER, subject, e),
        }
    }
    Ok(())
}

fn answers_text(a: &[Reply]) -> String {
    a.iter().map(|r| r.as_str()).collect::<Vec<_>>().join(", ")
}

/// The audit trail is exactly the expected transitions (the audit writer is
/// asynchronous: it is given a minute to catch up).
async fn audit_trail(env: &Env<'_>, out: &mut Checks, audit: &AuditWriter, r: &Started) {
    let subject = format!("{} audit trail", r.case.name);
    let want = &r.expected.trail;
    let until = Instant::now() + env.settings.audit_wait;
    loop {
        let got: Result<Vec<(Option<Status>, Status)>, String> = audit
            .history(&r.id)
            .await
            .map(|rows| rows.iter().map(|e| (e.from, e.to)).collect())
            .map_err(|e| e.to_string());
        match got {
            Ok(got) if &got == want => {
                out.pass(
                    PHASE,
                    subject,
                    format!("{} transitions: {}", got.len(), trail_text(&got)),
                );
                return;
            }
            Ok(got) if Instant::now() >= until => {
                out.fail(
                    PHASE,
                    subject,
                    format!("found {} — expected {}", trail_text(&got), trail_text(want)),
                );
                return;
            }
            Err(e) if Instant::now() >= until => {
                out.fail(PHASE, subject, format!("cannot be read: {e}"));
                return;
            }
            _ => tokio::time::sleep(env.settings.poll).await,
        }
    }
}

/// The harness received each attempt of the script and none past the last one.
async fn received(env: &Env<'_>, out: &mut Checks, table: &str, r: &Started) {
    let subject = format!("{} at the harness", r.case.name);
    let mut seen = vec![];
    let mut problems = vec![];
    for n in 1..=r.expected.attempts + 1 {
        let Ok(attempt) = Attempt::new(n) else {
            continue;
        };
        match harness::service::received(&env.ddb, table, &r.id, attempt).await {
            Err(e) => problems.push(e),
            Ok(None) if n <= r.expected.attempts => {
                problems.push(format!("attempt {n} never reached the harness"))
            }
            Ok(None) => seen.push(format!("nothing for #{n}")),
            Ok(Some(_)) if n > r.expected.attempts => problems.push(format!(
                "attempt {n} reached the harness although the transaction ended at attempt {}",
                r.expected.attempts
            )),
            Ok(Some(got)) => {
                let want = Script {
                    answers: r.case.answers.clone(),
                    delay_seconds: None,
                    reason: None,
                }
                .reply_for(attempt);
                if got.reply != want.as_str() {
                    problems.push(format!(
                        "#{n} was answered {}, the script says {}",
                        got.reply,
                        want.as_str()
                    ));
                }
                seen.push(format!(
                    "#{n} {}{}",
                    got.reply,
                    if got.receive_count > 1 {
                        format!(" (delivered {} times, answered once)", got.receive_count)
                    } else {
                        String::new()
                    }
                ));
            }
        }
    }
    if problems.is_empty() {
        out.pass(PHASE, subject, format!("received {}", seen.join(", ")));
    } else {
        out.fail(PHASE, subject, problems.join("; "));
    }
}

/// Every retry schedule of the transaction is gone (`ActionAfterCompletion=DELETE`:
/// deleted once it fired; given the audit wait to disappear).
async fn schedules_gone(env: &Env<'_>, out: &mut Checks, group: &str, r: &Started) {
    if r.expected.attempts < 2 {
        return;
    }
    let subject = format!("{} schedules", r.case.name);
    let names: Vec<ScheduleName> = (2..=r.expected.attempts)
        .filter_map(|n| Attempt::new(n).ok())
        .map(|a| ScheduleName::for_retry(&r.id, a))
        .collect();
    let until = Instant::now() + env.settings.audit_wait;
    loop {
        let mut left = vec![];
        for name in &names {
            match env
                .scheduler
                .get_schedule()
                .group_name(group)
                .name(name.as_str())
                .send()
                .await
            {
                Ok(_) => left.push(name.as_str().to_owned()),
                Err(e) => {
                    let e = e.into_service_error();
                    if !e.is_resource_not_found_exception() {
                        left.push(format!(
                            "{} (unreadable: {})",
                            name.as_str(),
                            aws_sdk_scheduler::error::DisplayErrorContext(e)
                        ));
                    }
                }
            }
        }
        if left.is_empty() {
            out.pass(
                AFTER,
                subject,
                format!("{} retry schedule(s) fired and deleted", names.len()),
            );
            return;
        }
        if Instant::now() >= until {
            out.fail(
                AFTER,
                subject,
                format!("still in group {group}: {} (a fired schedule is deleted after completion; one left over fires again or counts against the quota)", left.join(", ")),
            );
            return;
        }
        tokio::time::sleep(env.settings.poll).await;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn each_case_expects_the_transitions_of_its_script() {
        let e: Vec<Expected> = cases().iter().map(|c| expected(c).unwrap()).collect();
        assert_eq!(
            (e[0].status, e[0].attempts, e[0].trail.len()),
            (Status::Succeeded, 1, 2)
        );
        assert_eq!(
            (e[1].status, e[1].attempts, e[1].trail.len()),
            (Status::Succeeded, 2, 6)
        );
        assert_eq!(
            (e[2].status, e[2].attempts, e[2].trail.len()),
            (Status::Failed, 3, 10)
        );
        assert_eq!(
            trail_text(&e[1].trail),
            "[*]→IN_PROGRESS, IN_PROGRESS→SCHEDULING, SCHEDULING→SCHEDULED, SCHEDULED→SENDING, SENDING→IN_PROGRESS, IN_PROGRESS→SUCCEEDED"
        );
        let silent = Case {
            name: "silent",
            answers: vec![Reply::Silent],
            max_attempts: 3,
        };
        assert!(expected(&silent).is_err());
    }
}
