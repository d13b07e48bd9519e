//! `retryctl erase`: a finished transaction's personal data removed now — its
//! payload, and the reason texts of its record and audit trail — with an audit entry
//! saying what was removed, by whom and why (`domain::retention`,
//! `docs/operations.md#erasing-a-transactions-data`).
//!
//! The order makes a crash harmless: the audit trail must first hold the record's last
//! transition (the stream is read asynchronously, and an entry written after the
//! erasure would bring the record's reason back); then the payload, the record's
//! reasons and the trail's are removed; then the entry is written. Run again, the
//! command finds nothing left and an entry already there, and says so; after a crash
//! before the entry, it finds the entry missing and writes it.

use crate::commands::{self, read_record, Output, Target};
use crate::error::CliError;
use aws::audit::AuditWriter;
use domain::audit::{AuditEntry, Notice};
use domain::ports::{Clock, SystemClock};
use domain::retention::{erasable, Erased, ErasedSet};
use domain::TransactionRecord;
use serde_json::json;
use std::time::{Duration, Instant};

/// How long `erase` waits for the audit trail to hold the record's last transition.
const AUDIT_CATCH_UP: Duration = Duration::from_secs(60);

/// Erases transaction `id` (ending it first with `force`), recording `reason`.
pub async fn erase(t: &Target, id: &str, reason: &str, force: bool) -> Result<Output, CliError> {
    let id = commands::parse_id(id)?;
    let note = crate::bulk::note(t, Some(reason)).await?;
    let store = t.store()?;
    let mut record = read_record(&store, &id).await?;
    let mut ended = None;
    if let Err(status) = erasable(record.status) {
        if !force {
            return Err(CliError::Refused(format!(
                "transaction `{id}` is {status}: it is still live and its next request needs its payload; end it first (`retryctl resolve {id}`), or erase with --force, which resolves it first"
            )));
        }
        let out = commands::resolve(t, id.as_str(), Some(&note)).await?;
        ended = Some(out.json);
        record = read_record(&store, &id).await?;
        if let Err(status) = erasable(record.status) {
            return Err(CliError::Refused(format!(
                "transaction `{id}` is {status} after resolving it: nothing erased"
            )));
        }
    }

    let ddb = aws_sdk_dynamodb::Client::new(&t.sdk);
    let audit = AuditWriter::new(
        ddb.clone(),
        t.audit_table()?,
        aws::audit::Retention::new(
            domain::defaults::AUDIT_RETENTION_DAYS,
            t.transaction_deadline().unwrap_or_default(),
        ),
    );
    let history = caught_up(&audit, &record).await?;

    let port = |e: domain::ports::PortError| CliError::Aws(e.to_string());
    let mut erased = ErasedSet::default();
    if aws::retention::delete_payload(&ddb, &t.payloads_table()?, &id)
        .await
        .map_err(port)?
    {
        erased.insert(Erased::Payload);
    }
    let from_record = aws::retention::scrub_record(&ddb, &t.transactions_table()?, &id)
        .await
        .map_err(port)?;
    let from_trail = audit.erase_reasons(&id).await.map_err(port)?;
    for e in from_record.iter().chain(from_trail.iter()) {
        erased.insert(e);
    }

    let recorded = history.iter().any(|e| e.notice == Some(Notice::Erased));
    let names = erased.names();
    if erased.is_empty() && recorded {
        return Ok(Output {
            text: format!("{id}: already erased; nothing left to erase, nothing written\n"),
            json: json!({"transaction_id": id.as_str(), "result": "already-erased", "erased": names, "status": record.status.as_str(), "ended": ended}),
        });
    }
    let entry = AuditEntry::erasure(&record, erased, note, SystemClock.now());
    audit.write(&entry).await.map_err(port)?;
    Ok(Output {
        text: format!(
            "{id}: erased ({}); {} kept, audit entry written\n",
            if names.is_empty() {
                "nothing was left".to_owned()
            } else {
                names.join(", ")
            },
            record.status
        ),
        json: json!({"transaction_id": id.as_str(), "result": "erased", "erased": names, "status": record.status.as_str(), "ended": ended}),
    })
}

/// The transaction's audit trail once it holds `record`'s last transition (its
/// status written at its `updated_at`), waiting up to [`AUDIT_CATCH_UP`].
async fn caught_up(
    audit: &AuditWriter,
    record: &TransactionRecord,
) -> Result<Vec<AuditEntry>, CliError> {
    let start = Instant::now();
    loop {
        let history = audit
            .history(&record.transaction_id)
            .await
            .map_err(|e| CliError::Aws(e.to_string()))?;
        if history
            .iter()
            .any(|e| e.is_transition() && e.to == record.status && e.at == record.updated_at)
        {
            return Ok(history);
        }
        if start.elapsed() > AUDIT_CATCH_UP {
            return Err(CliError::Refused(format!(
                "transaction `{}`: its audit trail does not hold its last transition ({} at {}) after {} s (is the audit writer running? `retryctl dlq peek audit`); nothing erased: run `retryctl erase` again once it does",
                record.transaction_id,
                record.status,
                record.updated_at.to_rfc3339(),
                AUDIT_CATCH_UP.as_secs()
            )));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
