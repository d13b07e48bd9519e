//! `retryctl breaker status|open|close`: the external service's circuit breaker, read
//! and overridden by an operator. Every override is written conditional on the
//! version read, with an entry in the breaker's change log naming the caller (STS
//! GetCallerIdentity) and the reason.

use crate::cli::BreakerAction;
use crate::commands::{Output, Target};
use crate::error::CliError;
use aws::breaker::{BreakerLogEntry, DynamoBreaker, Found};
use domain::breaker::{Breaker, BreakerSettings, BreakerState};
use domain::machine::OperatorNote;
use domain::ports::{BreakerNote, BreakerReads, BreakerWrites, Clock, SystemClock};
use serde_json::{json, Value};
use std::time::Duration;

/// The name the functions keep the external service's breaker under.
pub const SERVICE: &str = aws::breaker::SERVICE;

/// Tries of an override whose write lost the race to another writer.
const TRIES: u32 = 5;

fn adapter(t: &Target, settings: BreakerSettings) -> Result<DynamoBreaker, CliError> {
    Ok(DynamoBreaker::new(
        aws_sdk_dynamodb::Client::new(&t.sdk),
        t.breaker_table()?,
        SERVICE,
        settings,
        1,
    ))
}

fn aws(e: domain::ports::PortError) -> CliError {
    CliError::AwsCall(e.into())
}

/// What the state says, in words.
pub fn state_text(b: &Breaker) -> String {
    match b.state {
        BreakerState::Closed => "CLOSED: requests go out".to_owned(),
        BreakerState::Open { until, cooldown_ms } => format!(
            "OPEN until {} (cool-down {}s): no request goes out, retries are paused",
            until.to_rfc3339(),
            cooldown_ms / 1000
        ),
        BreakerState::HalfOpen {
            since,
            admitted,
            cooldown_ms,
        } => format!(
            "HALF_OPEN since {}: {admitted} probe(s) out this round (cool-down {}s)",
            since.to_rfc3339(),
            cooldown_ms / 1000
        ),
    }
}

fn entry_json(e: &BreakerLogEntry) -> Value {
    json!({
        "at": e.at.to_rfc3339(),
        "change": e.change,
        "from": e.from,
        "to": e.to,
        "version": e.version,
        "by": e.by,
        "reason": e.reason,
        "window": e.window.map(|w| json!({
            "answered": w.answered, "technical": w.technical, "deadlines": w.deadlines
        })),
    })
}

fn entry_text(e: &BreakerLogEntry) -> String {
    let mut line = format!(
        "  {}  {:<11} {} → {}  by {}",
        e.at.to_rfc3339(),
        e.change,
        e.from,
        e.to,
        e.by
    );
    if let Some(w) = e.window {
        line.push_str(&format!(
            "  (window: {} answered, {} technical, {} deadlines)",
            w.answered, w.technical, w.deadlines
        ));
    }
    if let Some(r) = &e.reason {
        line.push_str(&format!(": {r}"));
    }
    line
}

async fn status(t: &Target, changes: i32) -> Result<Output, CliError> {
    if !(1..=100).contains(&changes) {
        return Err(CliError::bad(
            "--changes",
            changes.to_string(),
            "must be 1–100",
        ));
    }
    let b = adapter(t, BreakerSettings::default())?;
    let now = SystemClock.now();
    let breaker = b.load(now, false).await.map_err(aws)?.breaker;
    let log = b.history(changes).await.map_err(aws)?;
    let mut text = format!(
        "breaker    {}, version {}\n",
        state_text(&breaker),
        breaker.version
    );
    text.push_str("changes    (newest first)\n");
    if log.is_empty() {
        text.push_str("  none yet\n");
    }
    for e in &log {
        text.push_str(&entry_text(e));
        text.push('\n');
    }
    let json = json!({
        "service": SERVICE,
        "state": breaker.state.name(),
        "version": breaker.version,
        "detail": serde_json::to_value(breaker.state).unwrap_or(Value::Null),
        "changes": log.iter().map(entry_json).collect::<Vec<_>>(),
    });
    Ok(Output { text, json })
}

async fn force(
    t: &Target,
    open: Option<Duration>,
    reason: Option<&str>,
) -> Result<Output, CliError> {
    let note = crate::bulk::note(t, reason).await?;
    let settings = BreakerSettings {
        cooldown: open.unwrap_or(Duration::from_secs(1)),
        cooldown_max: open.unwrap_or(Duration::from_secs(1)),
        ..BreakerSettings::default()
    };
    let b = adapter(t, settings)?;
    for _ in 0..TRIES {
        let now = SystemClock.now();
        let OperatorNote { caller, reason } = note.clone();
        // An item that does not decode is overwritten (conditional on its version
        // as stored): the override is how on-call repairs it.
        let (from, new, written) = match b.find().await.map_err(aws)? {
            Found::Breaker(read) => {
                let (new, change) = read.force(open.is_some(), now, &settings);
                let note = BreakerNote {
                    at: now,
                    by: caller,
                    change,
                    reason,
                };
                let written = b.save(&read, &new, &note).await.map_err(aws)?;
                (read.state.name().to_owned(), new, written)
            }
            Found::Corrupt { problem, version } => {
                let base = Breaker {
                    state: BreakerState::Closed,
                    version: DynamoBreaker::stored_version(version.as_ref()),
                };
                let (new, change) = base.force(open.is_some(), now, &settings);
                let note = BreakerNote {
                    at: now,
                    by: caller,
                    change,
                    reason: Some(match reason {
                        Some(r) => format!("{r} (repaired: {problem})"),
                        None => format!("repaired: {problem}"),
                    }),
                };
                let written = b
                    .overwrite(version.as_ref(), &new, &note)
                    .await
                    .map_err(aws)?;
                (format!("CORRUPT ({problem})"), new, written)
            }
        };
        if written {
            let text = format!("breaker    {from} → {}\n", state_text(&new));
            let json = json!({
                "service": SERVICE,
                "from": from,
                "state": new.state.name(),
                "version": new.version,
                "detail": serde_json::to_value(new.state).unwrap_or(Value::Null),
            });
            return Ok(Output { text, json });
        }
    }
    Err(CliError::Aws(format!(
        "the breaker kept changing under the override ({TRIES} tries): run it again"
    )))
}

/// Runs one `retryctl breaker` action.
pub async fn run(t: &Target, action: &BreakerAction) -> Result<Output, CliError> {
    match action {
        BreakerAction::Status { changes } => status(t, *changes).await,
        BreakerAction::Open {
            for_seconds,
            reason,
        } => {
            let secs = for_seconds.ok_or_else(|| {
                CliError::Missing(
                    "set --for SECONDS: how long no request goes out (then it probes)".into(),
                )
            })?;
            if !(1..=86_400).contains(&secs) {
                return Err(CliError::bad(
                    "--for",
                    secs.to_string(),
                    "must be 1–86400 seconds",
                ));
            }
            force(t, Some(Duration::from_secs(secs)), reason.as_deref()).await
        }
        BreakerAction::Close { reason } => force(t, None, reason.as_deref()).await,
    }
}
