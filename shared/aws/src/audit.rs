//! The audit trail in AWS: DynamoDB Streams (`NEW_AND_OLD_IMAGES`) on the
//! transactions table → the `audit-writer` Lambda → one `PutItem` per transition in
//! the audit table.
//!
//! A change (old and new image) becomes a [`domain::audit::AuditEntry`] exactly as in
//! memory (`AuditEntry::from_change`). The row key is deterministic
//! (`transaction_id`, `audit_key = AuditEntry::sort_key()`), so a redelivered stream
//! record overwrites the same row instead of adding one. `expires_at` (epoch
//! seconds) = the transition time + the retention, for DynamoDB TTL. A failed
//! condition writes nothing, so it produces no stream record and no row.
//!
//! [`drain_stream`] reads the stream with the DynamoDB Streams API (DescribeStream,
//! GetShardIterator, GetRecords): the local stack and the tests use it where AWS
//! would invoke the Lambda.

use crate::errors::classify;
use crate::item::{
    flat_from_dynamodb, flat_from_streams, record_from_flat, s, CodecError, FlatItem,
};
use crate::meter::{Call, CallMeter};
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::operation::query::QueryError;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnConsumedCapacity};
use aws_sdk_dynamodbstreams::types::ShardIteratorType;
use domain::audit::AuditEntry;
use domain::machine::Actor;
use domain::ports::{ErrorKind, PortError};
use domain::{Attempt, Origin, Outcome, ScheduleName, Status, Timestamp, TransactionId};
use std::collections::{BTreeMap, HashMap};
use thiserror::Error;

/// Attribute names of an audit row.
pub mod attr {
    pub const TRANSACTION_ID: &str = "transaction_id";
    /// Sort key: `AuditEntry::sort_key()` = `<at>#<attempt>#<rank>-<to>`.
    pub const AUDIT_KEY: &str = "audit_key";
    pub const AT: &str = "at";
    pub const ACTOR: &str = "actor";
    /// Absent for the creation of the transaction.
    pub const FROM_STATUS: &str = "from_status";
    pub const TO_STATUS: &str = "to_status";
    pub const CURRENT_ATTEMPT: &str = "current_attempt";
    pub const NEXT_ATTEMPT: &str = "next_attempt";
    pub const MAX_ATTEMPTS: &str = "max_attempts";
    pub const SCHEDULE_NAME: &str = "schedule_name";
    pub const NEXT_FIRE_AT: &str = "next_fire_at";
    pub const OUTCOME: &str = "outcome";
    pub const REASON: &str = "reason";
    pub const ORIGIN: &str = "origin";
    /// TTL attribute (epoch seconds).
    pub const EXPIRES_AT: &str = "expires_at";
}

/// Why a change could not be audited.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum AuditError {
    /// The image does not decode: retrying will not help (the stream's failure
    /// destination keeps it).
    #[error("undecodable stream image: {0}")]
    Image(#[from] CodecError),
    #[error(transparent)]
    Port(#[from] PortError),
}

impl AuditError {
    pub fn is_retryable(&self) -> bool {
        matches!(self, AuditError::Port(p) if p.is_retryable())
    }
}

/// The audit row of a change, if the change is a transition. `new = None` (an item
/// removed) makes no row.
pub fn entry_from_images(
    old: Option<&FlatItem>,
    new: Option<&FlatItem>,
) -> Result<Option<AuditEntry>, CodecError> {
    let Some(new) = new.filter(|n| !n.is_empty()) else {
        return Ok(None);
    };
    let new = record_from_flat(new)?;
    let old = old
        .filter(|o| !o.is_empty())
        .map(record_from_flat)
        .transpose()?;
    Ok(AuditEntry::from_change(old.as_ref(), &new))
}

const DAY_SECONDS: i64 = 86_400;

/// `expires_at` of a row: the transition time plus the retention.
pub fn expires_at(entry: &AuditEntry, retention_days: u32) -> i64 {
    entry.at.epoch_seconds() + i64::from(retention_days) * DAY_SECONDS
}

fn n(v: impl ToString) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

/// The audit table item of an entry.
pub fn audit_item(entry: &AuditEntry, retention_days: u32) -> HashMap<String, AttributeValue> {
    use attr::*;
    let mut m = HashMap::new();
    m.insert(TRANSACTION_ID.into(), s(entry.transaction_id.as_str()));
    m.insert(AUDIT_KEY.into(), s(entry.sort_key()));
    m.insert(AT.into(), s(entry.at.to_rfc3339()));
    m.insert(ACTOR.into(), s(entry.actor.as_str()));
    if let Some(f) = entry.from {
        m.insert(FROM_STATUS.into(), s(f.as_str()));
    }
    m.insert(TO_STATUS.into(), s(entry.to.as_str()));
    m.insert(CURRENT_ATTEMPT.into(), n(entry.current_attempt.get()));
    if let Some(a) = entry.next_attempt {
        m.insert(NEXT_ATTEMPT.into(), n(a.get()));
    }
    m.insert(MAX_ATTEMPTS.into(), n(entry.max_attempts));
    if let Some(x) = &entry.schedule_name {
        m.insert(SCHEDULE_NAME.into(), s(x.as_str()));
    }
    if let Some(t) = entry.next_fire_at {
        m.insert(NEXT_FIRE_AT.into(), s(t.to_rfc3339()));
    }
    if let Some(o) = entry.outcome {
        m.insert(OUTCOME.into(), s(o.as_str()));
    }
    if let Some(r) = &entry.reason {
        m.insert(REASON.into(), s(r.clone()));
    }
    if let Some(o) = entry.origin {
        m.insert(ORIGIN.into(), s(o.as_str()));
    }
    m.insert(EXPIRES_AT.into(), n(expires_at(entry, retention_days)));
    m
}

/// Decodes an audit row (for `retryctl` and tests).
pub fn entry_from_item(item: &HashMap<String, AttributeValue>) -> Result<AuditEntry, CodecError> {
    use attr::*;
    let f = flat_from_dynamodb(item);
    let get = |k: &'static str| -> Option<&str> {
        match f.get(k) {
            Some(crate::item::Scalar::S(v)) | Some(crate::item::Scalar::N(v)) => Some(v.as_str()),
            _ => None,
        }
    };
    let bad = |k: &'static str, v: Option<&str>, why: &str| CodecError {
        attribute: k,
        value: v.map(str::to_owned),
        problem: why.to_owned(),
    };
    let need = |k: &'static str| get(k).ok_or_else(|| bad(k, None, "missing"));
    let num = |k: &'static str, v: &str| {
        v.parse::<u32>()
            .map_err(|_| bad(k, Some(v), "not a whole number"))
    };
    let attempt = |k: &'static str, v: &str| {
        num(k, v).and_then(|x| Attempt::new(x).map_err(|e| bad(k, Some(v), &e.to_string())))
    };
    let ts =
        |k: &'static str, v: &str| Timestamp::parse(v).map_err(|e| bad(k, Some(v), &e.to_string()));
    let status = |k: &'static str, v: &str| {
        Status::parse(v).ok_or_else(|| bad(k, Some(v), "unknown status"))
    };
    let id = need(TRANSACTION_ID)?;
    Ok(AuditEntry {
        transaction_id: TransactionId::parse(id)
            .map_err(|e| bad(TRANSACTION_ID, Some(id), &e.to_string()))?,
        at: ts(AT, need(AT)?)?,
        actor: {
            let v = need(ACTOR)?;
            Actor::parse(v).ok_or_else(|| bad(ACTOR, Some(v), "unknown actor"))?
        },
        from: get(FROM_STATUS)
            .map(|v| status(FROM_STATUS, v))
            .transpose()?,
        to: status(TO_STATUS, need(TO_STATUS)?)?,
        current_attempt: attempt(CURRENT_ATTEMPT, need(CURRENT_ATTEMPT)?)?,
        next_attempt: get(NEXT_ATTEMPT)
            .map(|v| attempt(NEXT_ATTEMPT, v))
            .transpose()?,
        max_attempts: num(MAX_ATTEMPTS, need(MAX_ATTEMPTS)?)?,
        schedule_name: get(SCHEDULE_NAME)
            .map(|v| {
                ScheduleName::from_stored(v)
                    .map_err(|e| bad(SCHEDULE_NAME, Some(v), &e.to_string()))
            })
            .transpose()?,
        next_fire_at: get(NEXT_FIRE_AT).map(|v| ts(NEXT_FIRE_AT, v)).transpose()?,
        outcome: get(OUTCOME)
            .map(|v| Outcome::parse(v).ok_or_else(|| bad(OUTCOME, Some(v), "unknown outcome")))
            .transpose()?,
        reason: get(REASON).map(str::to_owned),
        origin: get(ORIGIN)
            .map(|v| Origin::parse(v).ok_or_else(|| bad(ORIGIN, Some(v), "unknown origin")))
            .transpose()?,
    })
}

fn put_kind(e: &PutItemError) -> Option<ErrorKind> {
    match e {
        PutItemError::ProvisionedThroughputExceededException(_)
        | PutItemError::RequestLimitExceeded(_)
        | PutItemError::ThrottlingException(_)
        | PutItemError::InternalServerError(_)
        | PutItemError::TransactionConflictException(_)
        | PutItemError::ReplicatedWriteConflictException(_) => Some(ErrorKind::Retryable),
        PutItemError::ResourceNotFoundException(_) => Some(ErrorKind::Permanent),
        _ => None,
    }
}

fn query_kind(e: &QueryError) -> Option<ErrorKind> {
    match e {
        QueryError::ProvisionedThroughputExceededException(_)
        | QueryError::RequestLimitExceeded(_)
        | QueryError::ThrottlingException(_)
        | QueryError::InternalServerError(_) => Some(ErrorKind::Retryable),
        _ => None,
    }
}

/// What auditing one change did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Audited {
    /// A row was written; `exhausted` = this transition spent the budget
    /// (IN_PROGRESS → FAILED), the business alert.
    Written { entry: AuditEntry, exhausted: bool },
    /// Not a transition (a removal or a no-op rewrite).
    Skipped,
}

/// Writes audit rows to the audit table.
#[derive(Debug, Clone)]
pub struct AuditWriter {
    client: aws_sdk_dynamodb::Client,
    table: String,
    retention_days: u32,
    meter: CallMeter,
}

impl AuditWriter {
    pub fn new(
        client: aws_sdk_dynamodb::Client,
        table: impl Into<String>,
        retention_days: u32,
    ) -> Self {
        Self {
            client,
            table: table.into(),
            retention_days,
            meter: CallMeter::new(),
        }
    }

    pub fn with_meter(mut self, meter: CallMeter) -> Self {
        self.meter = meter;
        self
    }

    pub fn meter(&self) -> &CallMeter {
        &self.meter
    }

    /// One unconditional `PutItem` (same key for a redelivered change).
    pub async fn write(&self, entry: &AuditEntry) -> Result<(), PortError> {
        self.meter.count(Call::AuditWrite);
        let out = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(audit_item(entry, self.retention_days)))
            .return_consumed_capacity(ReturnConsumedCapacity::Indexes)
            .send()
            .await
            .map_err(|e| classify("PutItem", &e, put_kind))?;
        self.meter.capacity(out.consumed_capacity(), true);
        Ok(())
    }

    /// Audits one change given as flattened images.
    pub async fn apply(
        &self,
        old: Option<&FlatItem>,
        new: Option<&FlatItem>,
    ) -> Result<Audited, AuditError> {
        match entry_from_images(old, new)? {
            None => Ok(Audited::Skipped),
            Some(entry) => {
                self.write(&entry).await?;
                let exhausted = entry.is_exhaustion();
                Ok(Audited::Written { entry, exhausted })
            }
        }
    }

    /// The rows of one transaction, oldest first (a Query on the table's key).
    pub async fn history(&self, id: &TransactionId) -> Result<Vec<AuditEntry>, PortError> {
        let mut rows = Vec::new();
        let mut start = None;
        loop {
            let out = self
                .client
                .query()
                .table_name(&self.table)
                .key_condition_expression("#id = :id")
                .expression_attribute_names("#id", attr::TRANSACTION_ID)
                .expression_attribute_values(":id", s(id.as_str()))
                .consistent_read(true)
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(|e| classify("Query", &e, query_kind))?;
            for item in out.items() {
                rows.push(
                    entry_from_item(item)
                        .map_err(|e| PortError::permanent("Query", e.to_string()))?,
                );
            }
            match out.last_evaluated_key().filter(|k| !k.is_empty()) {
                Some(k) => start = Some(k.clone()),
                None => break,
            }
        }
        Ok(in_transition_order(rows))
    }
}

/// Orders rows as the transitions happened: by `audit_key`
/// (`AuditEntry::sort_key()`), which breaks ties between transitions written at one
/// instant by attempt and then by the status's place in the lifecycle.
pub fn in_transition_order(mut rows: Vec<AuditEntry>) -> Vec<AuditEntry> {
    rows.sort_by_key(AuditEntry::sort_key);
    rows
}

/// Records per `GetRecords` page (the API's maximum and default).
const GET_RECORDS_PAGE: usize = 1000;

/// One stream record, images flattened.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamChange {
    pub sequence_number: String,
    /// `INSERT`, `MODIFY` or `REMOVE`.
    pub event_name: String,
    pub old: Option<FlatItem>,
    pub new: Option<FlatItem>,
}

/// Where a reader is in each shard of a stream (start: nothing read).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StreamPosition {
    /// Next iterator per shard; `None` once a closed shard is fully read.
    iterators: BTreeMap<String, Option<String>>,
}

/// Reads every record not yet read from the stream (all shards, from the oldest
/// record on the first call), in order within each shard.
pub async fn drain_stream(
    client: &aws_sdk_dynamodbstreams::Client,
    stream_arn: &str,
    position: &mut StreamPosition,
) -> Result<Vec<StreamChange>, PortError> {
    // Discover shards (new ones appear as the table grows or splits).
    let mut shards = Vec::new();
    let mut last = None;
    loop {
        let out = client
            .describe_stream()
            .stream_arn(stream_arn)
            .set_exclusive_start_shard_id(last.clone())
            .send()
            .await
            .map_err(|e| classify("DescribeStream", &e, |_| None))?;
        let Some(desc) = out.stream_description() else {
            break;
        };
        for sh in desc.shards() {
            if let Some(id) = sh.shard_id() {
                shards.push(id.to_owned());
            }
        }
        match desc.last_evaluated_shard_id() {
            Some(l) => last = Some(l.to_owned()),
            None => break,
        }
    }
    let mut changes = Vec::new();
    for shard in shards {
        let iterator = match position.iterators.get(&shard) {
            Some(Some(it)) => it.clone(),
            Some(None) => continue,
            None => client
                .get_shard_iterator()
                .stream_arn(stream_arn)
                .shard_id(&shard)
                .shard_iterator_type(ShardIteratorType::TrimHorizon)
                .send()
                .await
                .map_err(|e| classify("GetShardIterator", &e, |_| None))?
                .shard_iterator()
                .map(str::to_owned)
                .ok_or_else(|| PortError::permanent("GetShardIterator", "no iterator returned"))?,
        };
        let mut it = Some(iterator);
        while let Some(current) = it.take() {
            let out = client
                .get_records()
                .shard_iterator(&current)
                .send()
                .await
                .map_err(|e| classify("GetRecords", &e, |_| None))?;
            let records = out.records();
            for r in records {
                let Some(d) = r.dynamodb() else { continue };
                changes.push(StreamChange {
                    sequence_number: d.sequence_number().unwrap_or_default().to_owned(),
                    event_name: r
                        .event_name()
                        .map(|e| e.as_str().to_owned())
                        .unwrap_or_default(),
                    old: d.old_image().map(flat_from_streams),
                    new: d.new_image().map(flat_from_streams),
                });
            }
            let next = out.next_shard_iterator().map(str::to_owned);
            if records.is_empty() {
                // Caught up (open shard) or finished (closed shard: no next).
                position.iterators.insert(shard.clone(), next);
                break;
            }
            // Keep the position after every page, and stop at a short page: on a
            // busy table a new record arrives before every call, so "until an empty
            // page" would never return (the next call resumes from here).
            position.iterators.insert(shard.clone(), next.clone());
            match next {
                Some(n) if records.len() >= GET_RECORDS_PAGE => it = Some(n),
                _ => {}
            }
        }
    }
    Ok(changes)
}

/// What [`drain_into`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DrainReport {
    pub changes: usize,
    pub rows: usize,
    pub exhausted: Vec<TransactionId>,
}

/// Drains the stream and audits every change (the local stand-in for the Lambda).
pub async fn drain_into(
    writer: &AuditWriter,
    client: &aws_sdk_dynamodbstreams::Client,
    stream_arn: &str,
    position: &mut StreamPosition,
) -> Result<DrainReport, AuditError> {
    let changes = drain_stream(client, stream_arn, position).await?;
    let mut report = DrainReport {
        changes: changes.len(),
        ..DrainReport::default()
    };
    for c in &changes {
        if let Audited::Written { entry, exhausted } =
            writer.apply(c.old.as_ref(), c.new.as_ref()).await?
        {
            report.rows += 1;
            if exhausted {
                report.exhausted.push(entry.transaction_id);
            }
        }
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::item::record_to_item;
    use domain::{MaxAttempts, TransactionRecord};

    #[test]
    fn rows_round_trip_and_expire_after_retention() {
        let mut old = TransactionRecord::started(
            TransactionId::parse("TX-A").unwrap(),
            MaxAttempts::new(1).unwrap(),
            Timestamp::from_millis(86_400_000),
        );
        old.last_reason = Some("x".into());
        let mut new = old.clone();
        new.status = Status::Failed;
        new.updated_at = Timestamp::from_millis(86_400_000 + 1500);
        new.last_actor = Actor::ResponseHandler;
        new.last_outcome = Some(Outcome::Cancelled);
        let o = flat_from_dynamodb(&record_to_item(&old));
        let nw = flat_from_dynamodb(&record_to_item(&new));
        let entry = entry_from_images(Some(&o), Some(&nw)).unwrap().unwrap();
        assert!(entry.is_exhaustion());
        let item = audit_item(&entry, 30);
        assert_eq!(
            item["expires_at"],
            AttributeValue::N((86_401 + 30 * 86_400).to_string())
        );
        assert_eq!(
            item["audit_key"],
            s("1970-01-02T00:00:01.500Z#0001#5-FAILED")
        );
        assert_eq!(entry_from_item(&item).unwrap(), entry);
        assert_eq!(
            entry_from_images(Some(&nw), None).unwrap(),
            None,
            "a removal is no row"
        );
        assert_eq!(
            entry_from_images(Some(&nw), Some(&nw)).unwrap(),
            None,
            "a no-op is no row"
        );
    }
}
