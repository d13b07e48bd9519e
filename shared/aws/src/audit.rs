//! The audit trail in AWS: DynamoDB Streams (`NEW_AND_OLD_IMAGES`) on the transactions
//! table → the `audit-writer` Lambda → one `UpdateItem` per handler run in the audit
//! table. A change becomes a [`domain::audit::AuditEntry`] exactly as in memory
//! (`AuditEntry::from_change`); entries are stored one item per run (key
//! `transaction_id`, `audit_key = group_key()`), one attribute `e#<sort_key()>` per
//! entry plus `expires_at` for TTL, written by [`AuditWriter::apply_batch`] with `SET`
//! only: a redelivered change sets the same attribute to the same value. The layout and
//! its cost: `docs/adapters.md#audit-dynamodb-streams--audit-writer--audit-table`.
//!
//! `testkit::drain` reads the stream with the DynamoDB Streams API (DescribeStream,
//! GetShardIterator, [`records_page`]): the local stack and the tests use it where AWS
//! would invoke the Lambda.

use crate::errors::classify;
use crate::item::{
    flat_from_dynamodb, flat_from_streams, n, record_from_flat, s, CodecError, FlatItem,
};
use aws_sdk_dynamodb::operation::query::QueryError;
use aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder;
use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodbstreams::types::ShardIteratorType;
use domain::audit::{AuditEntry, Notice};
use domain::machine::Actor;
use domain::ports::{AuditNotes, PortError};
use domain::retention::{Erased, ErasedSet};
use domain::{Attempt, Origin, Outcome, ScheduleName, Status, Timestamp, TransactionId};
use futures::StreamExt;
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;
use thiserror::Error;

/// Attribute names of an audit item and of the Map of each entry in it.
pub mod attr {
    /// Partition key.
    pub const TRANSACTION_ID: &str = "transaction_id";
    /// Sort key: `AuditEntry::group_key()` = `<attempt:04>#1-send` or
    /// `<attempt:04>#2-answer` (`<attempt:04>.<round:04>#…` after a technical
    /// re-send), one item per handler run (`<attempt:04>#3-notice` for the response
    /// handler's notices); a breaker's hold and a notice have an item each, the key
    /// followed by `#<at>` (`AuditEntry::stands_alone`).
    pub const AUDIT_KEY: &str = "audit_key";
    /// Prefix of an entry's attribute: `e#<AuditEntry::sort_key()>`.
    pub const ENTRY_PREFIX: &str = "e#";
    /// TTL attribute (epoch seconds) of the item.
    pub const EXPIRES_AT: &str = "expires_at";
    // The fields of an entry (inside its Map).
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
    /// The record's mark after the transition (absent: none, or an entry older
    /// than the mark).
    pub const MARK: &str = "mark";
    pub const ORIGIN: &str = "origin";
    /// Who made an operator's transition, and the reason given.
    pub const OPERATOR_CALLER: &str = "operator_caller";
    pub const OPERATOR_REASON: &str = "operator_reason";
    /// Set on an entry that is not a transition (`AuditEntry::notice`), e.g.
    /// `CONFLICTING_SUCCESS`.
    pub const NOTICE: &str = "notice";
    /// The record's technical re-send count (absent = 0).
    pub const RESENDS: &str = "resends";
    /// What an erasure removed (`Notice::Erased`): the names, comma-separated.
    pub const ERASED: &str = "erased";
    /// The transaction's correlation id, on the entry of its creation only.
    pub const CORRELATION_ID: &str = "correlation_id";
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

/// The audit entry of a change, if the change is a transition. `new = None` (an item
/// removed) makes no entry.
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

/// How long audit rows are kept: `days` (AUDIT_RETENTION_DAYS) after the last instant
/// their transaction may still be open. A row written at `at` belongs to a
/// transaction whose deadline is at most `at` + `transaction_deadline`
/// (TRANSACTION_DEADLINE_SECONDS: counted from the creation or the last replay, both
/// before `at`), so no row of an open transaction expires; a replay moves the
/// deadline, and the writer then keeps the transaction's earlier rows as long
/// ([`AuditWriter::apply_batch`]). `docs/adapters.md#audit-dynamodb-streams--audit-writer--audit-table`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    pub days: u32,
    pub transaction_deadline: Duration,
}

impl Retention {
    pub fn new(days: u32, transaction_deadline: Duration) -> Self {
        Self {
            days,
            transaction_deadline,
        }
    }

    /// `expires_at` (epoch seconds) of a row written at `at`.
    pub fn expires_at(&self, at: Timestamp) -> i64 {
        let deadline = i64::try_from(self.transaction_deadline.as_secs()).unwrap_or(i64::MAX);
        at.epoch_seconds()
            .saturating_add(deadline)
            .saturating_add(i64::from(self.days) * DAY_SECONDS)
    }
}

/// Days alone: rows kept `days` after they were written, for readers and tests that
/// keep no open transaction.
impl From<u32> for Retention {
    fn from(days: u32) -> Self {
        Self::new(days, Duration::ZERO)
    }
}

/// `expires_at` of an entry under `retention`.
pub fn expires_at(entry: &AuditEntry, retention: impl Into<Retention>) -> i64 {
    retention.into().expires_at(entry.at)
}

/// The attribute an entry is stored under in its group's item: `e#<sort_key>`.
pub fn entry_attribute(entry: &AuditEntry) -> String {
    format!("{}{}", attr::ENTRY_PREFIX, entry.sort_key())
}

/// The fields of an entry, the value of its attribute. The transaction id is the
/// item's key and is not repeated.
fn entry_fields(entry: &AuditEntry) -> HashMap<String, AttributeValue> {
    use attr::*;
    let operator = entry.operator.as_ref();
    let erased = Some(&entry.erased).filter(|e| !e.is_empty());
    [
        (AT, Some(s(entry.at.to_rfc3339()))),
        (ACTOR, Some(s(entry.actor.as_str()))),
        (FROM_STATUS, entry.from.map(|f| s(f.as_str()))),
        (TO_STATUS, Some(s(entry.to.as_str()))),
        (CURRENT_ATTEMPT, Some(n(entry.current_attempt.get()))),
        (NEXT_ATTEMPT, entry.next_attempt.map(|a| n(a.get()))),
        (MAX_ATTEMPTS, Some(n(entry.max_attempts))),
        (
            SCHEDULE_NAME,
            entry.schedule_name.as_ref().map(|x| s(x.as_str())),
        ),
        (NEXT_FIRE_AT, entry.next_fire_at.map(|t| s(t.to_rfc3339()))),
        (OUTCOME, entry.outcome.map(|o| s(o.as_str()))),
        (REASON, entry.reason.clone().map(s)),
        (MARK, entry.mark.map(|x| s(x.as_str()))),
        (ORIGIN, entry.origin.map(|o| s(o.as_str()))),
        (RESENDS, (entry.resends > 0).then(|| n(entry.resends))),
        (OPERATOR_CALLER, operator.map(|o| s(o.caller.clone()))),
        (
            OPERATOR_REASON,
            operator.and_then(|o| o.reason.clone()).map(s),
        ),
        (NOTICE, entry.notice.map(|x| s(x.as_str()))),
        (ERASED, erased.map(|e| s(e.names().join(",")))),
        (
            CORRELATION_ID,
            entry.correlation_id.as_ref().map(|c| s(c.as_str())),
        ),
    ]
    .into_iter()
    .filter_map(|(k, v)| Some((k.to_owned(), v?)))
    .collect()
}

/// The audit table item of one group of entries (one transaction, one
/// `group_key`; the key is the first entry's): the key, one `e#<sort_key>` Map per
/// entry (a repeated entry is one attribute, the last one given) and `expires_at`,
/// the latest entry's. No entries: an empty map.
pub fn group_item(
    entries: &[AuditEntry],
    retention: impl Into<Retention>,
) -> HashMap<String, AttributeValue> {
    let retention = retention.into();
    let mut m = HashMap::new();
    let Some(first) = entries.first() else {
        return m;
    };
    m.insert(
        attr::TRANSACTION_ID.into(),
        s(first.transaction_id.as_str()),
    );
    m.insert(attr::AUDIT_KEY.into(), s(first.group_key()));
    for e in entries {
        m.insert(entry_attribute(e), AttributeValue::M(entry_fields(e)));
    }
    let expires = entries
        .iter()
        .map(|e| retention.expires_at(e.at))
        .max()
        .unwrap_or_default();
    m.insert(attr::EXPIRES_AT.into(), n(expires));
    m
}

/// The item of a group of one entry.
pub fn audit_item(
    entry: &AuditEntry,
    retention: impl Into<Retention>,
) -> HashMap<String, AttributeValue> {
    group_item(std::slice::from_ref(entry), retention)
}

/// Every entry of an audit item, in transition order (for `retryctl` and tests). An
/// item of the earlier layout, one row per transition with the fields at the top
/// level, decodes as its one entry.
pub fn entries_from_item(
    item: &HashMap<String, AttributeValue>,
) -> Result<Vec<AuditEntry>, CodecError> {
    let id = match item.get(attr::TRANSACTION_ID) {
        Some(AttributeValue::S(v)) => TransactionId::parse(v).map_err(|e| CodecError {
            attribute: attr::TRANSACTION_ID,
            value: Some(v.clone()),
            problem: e.to_string(),
        })?,
        _ => {
            return Err(CodecError {
                attribute: attr::TRANSACTION_ID,
                value: None,
                problem: "missing".into(),
            })
        }
    };
    if item.contains_key(attr::TO_STATUS) {
        return Ok(vec![decode_entry(&id, &flat_from_dynamodb(item))?]);
    }
    let mut entries = Vec::new();
    for (name, value) in item {
        if !name.starts_with(attr::ENTRY_PREFIX) {
            continue;
        }
        let AttributeValue::M(fields) = value else {
            return Err(CodecError {
                attribute: attr::ENTRY_PREFIX,
                value: Some(name.clone()),
                problem: "not a Map".into(),
            });
        };
        entries.push(decode_entry(&id, &flat_from_dynamodb(fields))?);
    }
    Ok(in_transition_order(entries))
}

/// Decodes the fields of one entry.
fn decode_entry(id: &TransactionId, f: &FlatItem) -> Result<AuditEntry, CodecError> {
    use attr::*;
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
    Ok(AuditEntry {
        transaction_id: id.clone(),
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
        mark: get(MARK)
            .map(|v| {
                domain::machine::Mark::parse(v).ok_or_else(|| bad(MARK, Some(v), "unknown mark"))
            })
            .transpose()?,
        origin: get(ORIGIN)
            .map(|v| Origin::parse(v).ok_or_else(|| bad(ORIGIN, Some(v), "unknown origin")))
            .transpose()?,
        operator: get(OPERATOR_CALLER).map(|caller| domain::machine::OperatorNote {
            caller: caller.to_owned(),
            reason: get(OPERATOR_REASON).map(str::to_owned),
        }),
        notice: get(NOTICE)
            .map(|v| Notice::parse(v).ok_or_else(|| bad(NOTICE, Some(v), "unknown notice")))
            .transpose()?,
        resends: get(RESENDS)
            .map(|v| num(RESENDS, v))
            .transpose()?
            .unwrap_or(0),
        erased: get(ERASED)
            .map(|v| {
                v.split(',')
                    .map(|name| {
                        Erased::parse(name).ok_or_else(|| bad(ERASED, Some(v), "unknown field"))
                    })
                    .collect::<Result<ErasedSet, _>>()
            })
            .transpose()?
            .unwrap_or_default(),
        correlation_id: get(CORRELATION_ID)
            .map(|v| {
                domain::CorrelationId::new(v)
                    .map(Box::new)
                    .map_err(|e| bad(CORRELATION_ID, Some(v), &e))
            })
            .transpose()?,
    })
}

crate::errors::error_kinds!(dynamodb
    fn query_kind(QueryError) {
        retryable: [],
        permanent: [],
    }
);

/// What auditing one change did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Audited {
    /// The entry was written; `exhausted` = this transition spent the budget
    /// (IN_PROGRESS → FAILED), the business alert.
    Written { entry: AuditEntry, exhausted: bool },
    /// Not a transition (a removal or a no-op rewrite).
    Skipped,
}

/// Group writes of one batch in flight at once ([`AuditWriter::apply_batch`]).
pub const GROUP_WRITES_IN_FLIGHT: usize = 16;

/// What auditing a batch of changes did ([`AuditWriter::apply_batch`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BatchAudit {
    /// One result per change, in the batch's order. It stops at the first change
    /// that does not decode (that change's error is the last result): the changes
    /// after it were not audited. A change whose group could not be written has that
    /// write's error.
    pub results: Vec<Result<Audited, AuditError>>,
    /// Items written: one `UpdateItem` per group that succeeded.
    pub items_written: usize,
}

impl BatchAudit {
    /// Entries written (redelivered ones count again).
    pub fn entries_written(&self) -> usize {
        self.results
            .iter()
            .filter(|r| matches!(r, Ok(Audited::Written { .. })))
            .count()
    }
}

/// Writes audit entries to the audit table, one item per group.
///
/// Attributes are only ever added and their names are deterministic, so entries of one
/// run that arrive in different batches land in the same item. A failed condition
/// writes nothing, so it produces no stream record and no entry.
#[derive(Debug, Clone)]
pub struct AuditWriter {
    client: aws_sdk_dynamodb::Client,
    table: String,
    retention: Retention,
    /// The payloads table and RETENTION_DAYS: the payload of a transaction the
    /// stream shows ending gets its TTL, one it shows reopened loses it
    /// ([`AuditWriter::with_payloads`]).
    payloads: Option<(String, domain::retention::Retention)>,
}

impl AuditWriter {
    pub fn new(
        client: aws_sdk_dynamodb::Client,
        table: impl Into<String>,
        retention: impl Into<Retention>,
    ) -> Self {
        Self {
            client,
            table: table.into(),
            retention: retention.into(),
            payloads: None,
        }
    }

    /// The same writer keeping payloads as long as their records: when a change
    /// ends a transaction it sets the payload's TTL in `table` to the record's
    /// (`domain::retention::purge_at` of the terminal write), and when a change
    /// reopens one it removes it. Stream order per item makes the last change win.
    pub fn with_payloads(
        mut self,
        table: impl Into<String>,
        retention: domain::retention::Retention,
    ) -> Self {
        self.payloads = Some((table.into(), retention));
        self
    }

    /// Writes the entries of one group (one transaction, one `group_key`) with one
    /// unconditional `UpdateItem`: `SET` of each entry's attribute and of
    /// `expires_at`. Setting an attribute again sets the same value, so a redelivered
    /// entry changes nothing; other entries already in the item stay. No entries: no
    /// call.
    pub async fn write_group(&self, entries: &[AuditEntry]) -> Result<(), PortError> {
        let Some(first) = entries.first() else {
            return Ok(());
        };
        let group = first.group_key();
        if entries
            .iter()
            .any(|e| e.transaction_id != first.transaction_id || e.group_key() != group)
        {
            return Err(PortError::permanent(
                "UpdateItem",
                "an audit group must hold entries of one transaction and one group key",
            ));
        }
        let mut item = group_item(entries, self.retention);
        let mut key = HashMap::new();
        for k in [attr::TRANSACTION_ID, attr::AUDIT_KEY] {
            if let Some(v) = item.remove(k) {
                key.insert(k.to_owned(), v);
            }
        }
        // Placeholders for every name: entry names hold `#` and `:`, and a plain name
        // could be a reserved word.
        let mut names = HashMap::new();
        let mut values = HashMap::new();
        let mut sets = Vec::new();
        let attributes: BTreeMap<String, AttributeValue> = item.into_iter().collect();
        let mut entry_count = 0;
        for (name, value) in attributes {
            let p = if name == attr::EXPIRES_AT {
                "x".to_owned()
            } else {
                entry_count += 1;
                format!("e{}", entry_count - 1)
            };
            sets.push(format!("#{p} = :{p}"));
            names.insert(format!("#{p}"), name);
            values.insert(format!(":{p}"), value);
        }
        self.update(key)
            .update_expression(format!("SET {}", sets.join(", ")))
            .set_expression_attribute_names(Some(names))
            .set_expression_attribute_values(Some(values))
            .send()
            .await
            .map_err(|e| classify("UpdateItem", &e, crate::dynamo::update_item_kind))?;
        Ok(())
    }

    /// An UpdateItem of the audit item keyed as `item` (its other attributes unused).
    fn update(&self, item: HashMap<String, AttributeValue>) -> UpdateItemFluentBuilder {
        let key = item
            .into_iter()
            .filter(|(k, _)| k == attr::TRANSACTION_ID || k == attr::AUDIT_KEY)
            .collect();
        self.client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(key))
    }

    async fn write_owned<T>(&self, tag: T, group: Vec<AuditEntry>) -> (T, Result<(), PortError>) {
        let result = self.write_group(&group).await;
        (tag, result)
    }

    /// Writes one entry (a group of one).
    pub async fn write(&self, entry: &AuditEntry) -> Result<(), PortError> {
        self.write_group(std::slice::from_ref(entry)).await
    }

    /// Audits one change given as flattened images, on its own (one `UpdateItem` if
    /// it is a transition). A batch of changes is cheaper through
    /// [`AuditWriter::apply_batch`].
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

    /// Audits a batch of changes (old image, new image), in order: each change
    /// becomes its entry, the entries are grouped by (transaction, `group_key`) in
    /// the order groups are first seen, and each group is written once
    /// ([`AuditWriter::write_group`]), up to [`GROUP_WRITES_IN_FLIGHT`] at once.
    /// Decoding stops at the first change that does not decode; the groups of the
    /// changes before it are still written.
    pub async fn apply_batch<'a, I>(&self, changes: I) -> BatchAudit
    where
        I: IntoIterator<Item = (Option<&'a FlatItem>, Option<&'a FlatItem>)>,
    {
        let mut entries: Vec<Option<AuditEntry>> = Vec::new();
        let mut undecodable = None;
        for (old, new) in changes {
            match entry_from_images(old, new) {
                Ok(e) => entries.push(e),
                Err(e) => {
                    undecodable = Some(e);
                    break;
                }
            }
        }
        // Groups in first-seen order, each with the changes (indexes) it holds.
        let mut order: Vec<Vec<usize>> = Vec::new();
        let mut index: HashMap<(&TransactionId, String), usize> = HashMap::new();
        for (i, e) in entries.iter().enumerate() {
            let Some(e) = e else { continue };
            let slot = *index
                .entry((&e.transaction_id, e.group_key()))
                .or_insert_with(|| {
                    order.push(Vec::new());
                    order.len() - 1
                });
            if let Some(members) = order.get_mut(slot) {
                members.push(i);
            }
        }
        let mut failed: HashMap<usize, PortError> = HashMap::new();
        let mut items_written = 0;
        // Each group is its own item and its entries their own attributes: the
        // writes do not depend on one another, so up to GROUP_WRITES_IN_FLIGHT go at
        // once (one after the other, a batch of a busy stream takes as many round
        // trips as it holds groups).
        let mut writes = Vec::with_capacity(order.len());
        for members in &order {
            let group: Vec<AuditEntry> = members
                .iter()
                .filter_map(|&i| entries.get(i).cloned().flatten())
                .collect();
            writes.push(self.write_owned(members, group));
        }
        let written: Vec<_> = futures::stream::iter(writes)
            .buffered(GROUP_WRITES_IN_FLIGHT)
            .collect()
            .await;
        for (members, result) in written {
            match result {
                Ok(()) => items_written += 1,
                Err(e) => {
                    for &i in members {
                        failed.insert(i, e.clone());
                    }
                }
            }
        }
        // A replay moved its transaction's deadline: the rows written before it are
        // kept as long as the replay's own (after its group is written, so a retried
        // batch finds the replay's item and sets the same expiry again).
        for (i, e) in entries.iter().enumerate() {
            let Some(e) = e.as_ref().filter(|e| e.reopens()) else {
                continue;
            };
            if failed.contains_key(&i) {
                continue;
            }
            if let Err(err) = self
                .keep_rows(&e.transaction_id, self.retention.expires_at(e.at))
                .await
            {
                failed.insert(i, err);
            }
        }
        // The payload expires with its record: its TTL follows the stream's terminal
        // and reopening transitions, in stream order.
        if let Some((table, retention)) = &self.payloads {
            for (i, e) in entries.iter().enumerate() {
                let Some(e) = e.as_ref().filter(|e| e.is_transition()) else {
                    continue;
                };
                let purge = if e.to.is_terminal() {
                    domain::retention::purge_at(e.to, e.at, *retention)
                } else if e.reopens() {
                    None
                } else {
                    continue;
                };
                if failed.contains_key(&i) {
                    continue;
                }
                if let Err(err) = crate::retention::set_payload_purge(
                    &self.client,
                    table,
                    &e.transaction_id,
                    purge,
                )
                .await
                {
                    failed.insert(i, err);
                }
            }
        }
        let mut results: Vec<Result<Audited, AuditError>> = entries
            .into_iter()
            .enumerate()
            .map(|(i, e)| match (e, failed.remove(&i)) {
                (None, _) => Ok(Audited::Skipped),
                (Some(_), Some(err)) => Err(AuditError::Port(err)),
                (Some(entry), None) => {
                    let exhausted = entry.is_exhaustion();
                    Ok(Audited::Written { entry, exhausted })
                }
            })
            .collect();
        if let Some(e) = undecodable {
            results.push(Err(AuditError::Image(e)));
        }
        BatchAudit {
            results,
            items_written,
        }
    }

    /// Raises the expiry of every item of transaction `id` to `expires` (epoch
    /// seconds) where it is lower: a Query on the key, then one conditional
    /// `UpdateItem` per item to raise (a lost race with a higher expiry writes
    /// nothing). Returns the items raised.
    pub async fn keep_rows(&self, id: &TransactionId, expires: i64) -> Result<usize, PortError> {
        let mut raised = 0;
        for item in self.items(id, true).await? {
            let current = match item.get(attr::EXPIRES_AT) {
                Some(AttributeValue::N(v)) => v.parse::<i64>().ok(),
                _ => None,
            };
            if current.is_some_and(|c| c >= expires) {
                continue;
            }
            let written = self
                .update(item)
                .update_expression("SET #x = :x")
                .condition_expression(
                    "attribute_exists(#k) AND (attribute_not_exists(#x) OR #x < :x)",
                )
                .expression_attribute_names("#x", attr::EXPIRES_AT)
                .expression_attribute_names("#k", attr::AUDIT_KEY)
                .expression_attribute_values(":x", n(expires))
                .send()
                .await;
            raised += usize::from(crate::dynamo::condition_held(written)?);
        }
        Ok(raised)
    }

    /// Every item of transaction `id`, all pages (a consistent Query on the key);
    /// `keys_only`: the key and `expires_at` of each.
    async fn items(
        &self,
        id: &TransactionId,
        keys_only: bool,
    ) -> Result<Vec<HashMap<String, AttributeValue>>, PortError> {
        let mut items = Vec::new();
        let mut start = None;
        loop {
            let mut query = self
                .client
                .query()
                .table_name(&self.table)
                .key_condition_expression("#id = :id")
                .expression_attribute_names("#id", attr::TRANSACTION_ID)
                .expression_attribute_values(":id", s(id.as_str()))
                .consistent_read(true)
                .set_exclusive_start_key(start);
            if keys_only {
                query = query
                    .projection_expression("#id, #k, #x")
                    .expression_attribute_names("#k", attr::AUDIT_KEY)
                    .expression_attribute_names("#x", attr::EXPIRES_AT);
            }
            let out = query
                .send()
                .await
                .map_err(|e| classify("Query", &e, query_kind))?;
            items.extend(out.items().iter().cloned());
            match out.last_evaluated_key().filter(|k| !k.is_empty()) {
                Some(k) => start = Some(k.clone()),
                None => return Ok(items),
            }
        }
    }

    /// Removes the reason texts (`reason`, `operator_reason`) from every entry of
    /// transaction `id` but the erasures' own (an erasure's reason says why, and is
    /// the erasing operator's): one `UpdateItem` per item that holds any. Returns
    /// what it removed.
    pub async fn erase_reasons(&self, id: &TransactionId) -> Result<ErasedSet, PortError> {
        let mut erased = ErasedSet::default();
        for item in self.items(id, false).await? {
            let mut names = HashMap::new();
            let mut removes = Vec::new();
            for (name, value) in &item {
                let AttributeValue::M(fields) = value else {
                    continue;
                };
                if !name.starts_with(attr::ENTRY_PREFIX)
                    || fields.get(attr::NOTICE).and_then(|v| v.as_s().ok())
                        == Some(&Notice::Erased.as_str().to_owned())
                {
                    continue;
                }
                let e = format!("#e{}", names.len());
                names.insert(e.clone(), name.clone());
                for (field, kind) in [
                    (attr::REASON, Erased::ServiceReason),
                    (attr::OPERATOR_REASON, Erased::OperatorReason),
                ] {
                    if fields.contains_key(field) {
                        removes.push(format!("{e}.#{field}"));
                        names.insert(format!("#{field}"), field.to_owned());
                        erased.insert(kind);
                    }
                }
            }
            if removes.is_empty() {
                continue;
            }
            self.update(item)
                .update_expression(format!("REMOVE {}", removes.join(", ")))
                .set_expression_attribute_names(Some(names))
                .send()
                .await
                .map_err(|e| classify("UpdateItem", &e, crate::dynamo::update_item_kind))?;
        }
        Ok(erased)
    }

    /// The entries of one transaction, oldest first (a Query on the table's key,
    /// every entry of every item).
    pub async fn history(&self, id: &TransactionId) -> Result<Vec<AuditEntry>, PortError> {
        let mut rows = Vec::new();
        for item in self.items(id, false).await? {
            rows.extend(
                entries_from_item(&item)
                    .map_err(|e| PortError::permanent("Query", e.to_string()))?,
            );
        }
        Ok(in_transition_order(rows))
    }
}

/// The response handler's notices (a conflicting SUCCESS) go in the audit table beside
/// the stream's entries: one `UpdateItem` adding the entry's attribute to its group.
impl AuditNotes for AuditWriter {
    async fn note(&self, entry: &AuditEntry) -> Result<(), PortError> {
        self.write(entry).await
    }
}

/// Orders entries as the transitions happened: by `AuditEntry::sort_key()`, which
/// breaks ties between transitions written at one instant by attempt and then by the
/// status's place in the lifecycle. Entries of one sort key are one entry, kept once:
/// a change written before its group key moved to an item of its own (a hold, a
/// notice) and redelivered after is in both items.
pub fn in_transition_order(rows: Vec<AuditEntry>) -> Vec<AuditEntry> {
    let mut keyed: Vec<(String, AuditEntry)> =
        rows.into_iter().map(|e| (e.sort_key(), e)).collect();
    keyed.sort_by(|a, b| a.0.cmp(&b.0));
    keyed.dedup_by(|a, b| a.0 == b.0);
    keyed.into_iter().map(|(_, e)| e).collect()
}

/// One stream record, images flattened.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamChange {
    pub sequence_number: String,
    /// `INSERT`, `MODIFY` or `REMOVE`.
    pub event_name: String,
    pub old: Option<FlatItem>,
    pub new: Option<FlatItem>,
}

impl StreamChange {
    /// A stream record, images flattened (`None`: a record without its DynamoDB part).
    pub fn from_record(r: &aws_sdk_dynamodbstreams::types::Record) -> Option<Self> {
        let d = r.dynamodb()?;
        Some(Self {
            sequence_number: d.sequence_number().unwrap_or_default().to_owned(),
            event_name: r
                .event_name()
                .map(|e| e.as_str().to_owned())
                .unwrap_or_default(),
            old: d.old_image().map(flat_from_streams),
            new: d.new_image().map(flat_from_streams),
        })
    }
}

/// A range of one shard of a stream, as the audit writer's event source reports a
/// batch it gave up on (the `DDBStreamBatchInfo` of its on-failure record).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamRange {
    pub stream_arn: String,
    pub shard_id: String,
    pub start: String,
    pub end: String,
}

impl StreamRange {
    /// The range an on-failure record names; the missing field named otherwise.
    pub fn from_failure_record(body: &str) -> Result<Self, String> {
        let v: serde_json::Value =
            serde_json::from_str(body).map_err(|e| format!("not JSON: {e}"))?;
        let info = v
            .get("DDBStreamBatchInfo")
            .ok_or("no `DDBStreamBatchInfo`: not an on-failure record of a stream")?;
        let field = |name: &str| {
            info.get(name)
                .and_then(|x| x.as_str())
                .map(str::to_owned)
                .ok_or_else(|| format!("`DDBStreamBatchInfo.{name}` missing"))
        };
        Ok(Self {
            stream_arn: field("streamArn")?,
            shard_id: field("shardId")?,
            start: field("startSequenceNumber")?,
            end: field("endSequenceNumber")?,
        })
    }

    /// True when `seq` is within the range.
    pub fn contains(&self, seq: &str) -> bool {
        (seq_order(&self.start)..=seq_order(&self.end)).contains(&seq_order(seq))
    }

    fn past_end(&self, seq: &str) -> bool {
        seq_order(seq) > seq_order(&self.end)
    }
}

/// A stream sequence number in numeric order: they are decimal strings of up to 40
/// digits, compared by length, then digit by digit.
fn seq_order(seq: &str) -> (usize, &str) {
    (seq.len(), seq)
}

/// Reads the records of `range` again, while the stream still holds them (24 h). A
/// range the stream no longer holds is an error naming the operation
/// (`TrimmedDataAccessException`, `ResourceNotFoundException`).
pub async fn read_range(
    client: &aws_sdk_dynamodbstreams::Client,
    range: &StreamRange,
) -> Result<Vec<StreamChange>, PortError> {
    let mut it = client
        .get_shard_iterator()
        .stream_arn(&range.stream_arn)
        .shard_id(&range.shard_id)
        .shard_iterator_type(ShardIteratorType::AtSequenceNumber)
        .sequence_number(&range.start)
        .send()
        .await
        .map_err(|e| classify("GetShardIterator", &e, |_| None))?
        .shard_iterator()
        .map(str::to_owned);
    let mut changes = Vec::new();
    while let Some(current) = it.take() {
        let page = records_page(client, &current).await?;
        for c in page.changes {
            if range.past_end(&c.sequence_number) {
                return Ok(changes);
            }
            if range.contains(&c.sequence_number) {
                changes.push(c);
            }
        }
        if page.records == 0 {
            break;
        }
        it = page.next;
    }
    Ok(changes)
}

/// One `GetRecords` page.
pub struct Page {
    pub changes: Vec<StreamChange>,
    /// Records on the page (those without a DynamoDB part included).
    pub records: usize,
    pub next: Option<String>,
}

/// Reads one `GetRecords` page at `iterator`.
pub async fn records_page(
    client: &aws_sdk_dynamodbstreams::Client,
    iterator: &str,
) -> Result<Page, PortError> {
    let out = client
        .get_records()
        .shard_iterator(iterator)
        .send()
        .await
        .map_err(|e| classify("GetRecords", &e, |_| None))?;
    Ok(Page {
        changes: out
            .records()
            .iter()
            .filter_map(StreamChange::from_record)
            .collect(),
        records: out.records().len(),
        next: out.next_shard_iterator().map(str::to_owned),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::item::record_to_item;
    use domain::{MaxAttempts, TransactionRecord};

    fn change(old: &TransactionRecord, new: &TransactionRecord) -> AuditEntry {
        let o = flat_from_dynamodb(&record_to_item(old));
        let nw = flat_from_dynamodb(&record_to_item(new));
        entry_from_images(Some(&o), Some(&nw)).unwrap().unwrap()
    }

    /// IN_PROGRESS(1) at `at`, with a long (UUID-sized) id.
    fn started(at: i64) -> TransactionRecord {
        TransactionRecord::started(
            TransactionId::parse("TX-6f1c2a9e-4b7d-4e0a-9c3f-2d8b5e7a1f04").unwrap(),
            MaxAttempts::new(5).unwrap(),
            Timestamp::from_millis(at),
        )
    }

    /// The response handler's run on attempt 1: IN_PROGRESS → SCHEDULING →
    /// SCHEDULED, 3 ms apart.
    fn answer_run(r: &TransactionRecord) -> (TransactionRecord, Vec<AuditEntry>) {
        let mut a = r.clone();
        a.status = Status::Scheduling;
        a.next_attempt = Some(Attempt::new(2).unwrap());
        a.next_fire_at = Some(r.updated_at.plus_millis(60_000));
        a.schedule_name = Some(ScheduleName::for_retry(
            &r.transaction_id,
            Attempt::new(2).unwrap(),
        ));
        a.last_outcome = Some(Outcome::Cancelled);
        a.last_reason = Some("NOT_AVAILABLE".into());
        a.last_actor = Actor::ResponseHandler;
        a.updated_at = r.updated_at.plus_millis(1_000);
        let mut b = a.clone();
        b.status = Status::Scheduled;
        b.updated_at = a.updated_at.plus_millis(3);
        let entries = vec![change(r, &a), change(&a, &b)];
        (b, entries)
    }

    #[test]
    fn a_stream_range_orders_sequence_numbers_as_numbers() {
        let r = StreamRange {
            stream_arn: "arn".into(),
            shard_id: "shard".into(),
            start: "900".into(),
            end: "1100".into(),
        };
        // As text "1000" < "900"; as numbers it is inside the range.
        assert!(r.contains("1000"));
        assert!(r.contains("900") && r.contains("1100"));
        assert!(!r.contains("899") && !r.contains("1101"));
        assert!(r.past_end("1101") && r.past_end("10000"));
        assert!(!r.past_end("1100") && !r.past_end("999"));
    }

    #[test]
    fn entries_round_trip_and_expire_after_retention() {
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
        let entry = change(&old, &new);
        assert!(entry.is_exhaustion());
        let item = audit_item(&entry, 30);
        assert_eq!(
            item["expires_at"],
            AttributeValue::N((86_401 + 30 * 86_400).to_string())
        );
        // With a transaction deadline of 7 days: kept 30 days past it.
        let kept = audit_item(&entry, Retention::new(30, Duration::from_secs(7 * 86_400)));
        assert_eq!(
            kept["expires_at"],
            AttributeValue::N((86_401 + 37 * 86_400).to_string())
        );
        assert!(!entry.reopens(), "FAILED is reached, not left");
        assert_eq!(item["audit_key"], s("0001#2-answer"));
        let AttributeValue::M(fields) = &item["e#1970-01-02T00:00:01.500Z#0001#5-FAILED"] else {
            panic!("the entry is a Map: {item:?}");
        };
        assert_eq!(fields["from_status"], s("IN_PROGRESS"));
        assert_eq!(fields["to_status"], s("FAILED"));
        assert_eq!(fields["reason"], s("x"));
        assert!(
            !fields.contains_key("transaction_id"),
            "the key is not repeated"
        );
        assert_eq!(item.len(), 4, "key, one entry, expires_at: {item:?}");
        assert_eq!(entries_from_item(&item).unwrap(), vec![entry]);
        let nw = flat_from_dynamodb(&record_to_item(&new));
        assert_eq!(
            entry_from_images(Some(&nw), None).unwrap(),
            None,
            "a removal is no entry"
        );
        assert_eq!(
            entry_from_images(Some(&nw), Some(&nw)).unwrap(),
            None,
            "a no-op is no entry"
        );
    }

    /// GIVEN an operator's replay with a note WHEN audited from the stream's images
    /// THEN the entry holds the caller and the reason, stored and read back.
    #[test]
    fn an_operator_entry_keeps_who_and_why() {
        let mut old = started(0);
        old.status = Status::Failed;
        let mut new = old.clone();
        new.status = Status::Scheduling;
        new.updated_at = Timestamp::from_millis(5_000);
        new.last_actor = Actor::Operator;
        let note = domain::machine::OperatorNote::new(
            "arn:aws:sts::1:assumed-role/oncall/bob",
            Some("fixed"),
        )
        .unwrap();
        new.operator = Some(Box::new(note.clone()));
        let entry = change(&old, &new);
        assert_eq!(entry.operator, Some(note));
        let item = audit_item(&entry, 30);
        let back = entries_from_item(&item).unwrap();
        assert_eq!(back, vec![entry]);
        assert_eq!(
            back[0].operator.as_ref().map(|o| o.caller.as_str()),
            Some("arn:aws:sts::1:assumed-role/oncall/bob")
        );
    }

    /// GIVEN a transaction started with a correlation id WHEN its creation and its
    /// next run are audited from the stream's images THEN the creation's entry holds
    /// it, stored and read back, and the later entries do not repeat it.
    #[test]
    fn the_creation_entry_keeps_the_correlation_id() {
        let r = started(0).correlated(Some(domain::CorrelationId::new("req-7f3a").unwrap()));
        let image = flat_from_dynamodb(&record_to_item(&r));
        let created = entry_from_images(None, Some(&image)).unwrap().unwrap();
        assert_eq!(
            created.correlation_id.as_ref().map(|c| c.as_str()),
            Some("req-7f3a")
        );
        let back = entries_from_item(&audit_item(&created, 30)).unwrap();
        assert_eq!(back, vec![created]);
        let (_, run) = answer_run(&r);
        assert!(run.iter().all(|e| e.correlation_id.is_none()), "{run:?}");
    }

    #[test]
    fn a_run_is_one_item_holding_each_of_its_entries() {
        let (_, run) = answer_run(&started(0));
        let item = group_item(&run, 365);
        assert_eq!(item["audit_key"], s("0001#2-answer"));
        // expires_at is the latest entry's.
        let latest = run.iter().map(|e| expires_at(e, 365)).max().unwrap();
        assert_eq!(item["expires_at"], n(latest));
        assert_eq!(
            item.keys()
                .filter(|k| k.starts_with(attr::ENTRY_PREFIX))
                .count(),
            2
        );
        assert_eq!(entries_from_item(&item).unwrap(), run);
        // A repeated entry is one attribute: the same item.
        let twice = [run.clone(), run.clone()].concat();
        assert_eq!(group_item(&twice, 365), item);
        // Given in another order, the item is the same and decodes in order.
        let reversed: Vec<_> = run.iter().rev().cloned().collect();
        assert_eq!(group_item(&reversed, 365), item);
        assert!(group_item(&[], 365).is_empty());
    }

    /// Each write is 1 WRU: a run's item stays under 1 KB with a UUID-sized id and
    /// every optional field set.
    #[test]
    fn a_runs_item_stays_under_one_kilobyte() {
        let r = started(0);
        let (scheduled, answer) = answer_run(&r);
        let mut sending = scheduled.clone();
        sending.status = Status::Sending;
        sending.last_actor = Actor::RetryHandler;
        sending.last_origin = Some(Origin::RetryScheduler);
        sending.updated_at = scheduled.updated_at.plus_millis(60_000);
        let mut out = sending.clone();
        out.status = Status::InProgress;
        out.current_attempt = Attempt::new(2).unwrap();
        out.next_attempt = None;
        out.next_fire_at = None;
        out.updated_at = sending.updated_at.plus_millis(2);
        let send = vec![change(&scheduled, &sending), change(&sending, &out)];
        assert_eq!(send[0].group_key(), send[1].group_key());
        for run in [answer, send] {
            let size = testkit::size::item_size(&group_item(&run, 365));
            assert!(size < 1024, "{size} bytes: {run:?}");
            assert!(size > 2 * 150, "{size} bytes: both entries are in it");
        }
    }

    /// A hold written to its request's send item (the key before holds had items of
    /// their own) and redelivered to its own item: the trail lists it once, in order.
    #[test]
    fn a_hold_in_both_its_earlier_and_its_own_item_is_listed_once() {
        let sent = started(0);
        let mut held = sent.clone();
        held.mark = Some(domain::machine::Mark::HeldOpen);
        held.last_actor = Actor::Reconciler;
        held.updated_at = Timestamp::from_millis(1_900_000);
        let creation = entry_from_images(None, Some(&flat_from_dynamodb(&record_to_item(&sent))))
            .unwrap()
            .unwrap();
        let hold = change(&sent, &held);
        assert!(hold.stands_alone());
        assert_eq!(hold.group_key(), "0001#1-send#1970-01-01T00:31:40.000Z");
        // The earlier item: the send's key holding both.
        let mut earlier = group_item(std::slice::from_ref(&creation), 365);
        earlier.insert(
            entry_attribute(&hold),
            AttributeValue::M(entry_fields(&hold)),
        );
        let own = audit_item(&hold, 365);
        let mut rows = entries_from_item(&earlier).unwrap();
        rows.extend(entries_from_item(&own).unwrap());
        assert_eq!(rows.len(), 3);
        assert_eq!(in_transition_order(rows), vec![creation, hold]);
    }

    /// An item of the one-row-per-transition layout (fields at the top level) still
    /// decodes, as its one entry.
    #[test]
    fn a_row_of_the_earlier_layout_decodes_as_one_entry() {
        let (_, run) = answer_run(&started(0));
        let mut row = entry_fields(&run[0]);
        row.insert(
            attr::TRANSACTION_ID.into(),
            s(run[0].transaction_id.as_str()),
        );
        row.insert(attr::AUDIT_KEY.into(), s(run[0].sort_key()));
        row.insert(attr::EXPIRES_AT.into(), n(expires_at(&run[0], 365)));
        assert_eq!(entries_from_item(&row).unwrap(), vec![run[0].clone()]);
    }

    #[test]
    fn undecodable_items_are_errors() {
        let (_, run) = answer_run(&started(0));
        let mut item = group_item(&run, 365);
        item.insert("e#bad".into(), s("not a map"));
        assert_eq!(
            entries_from_item(&item).unwrap_err().attribute,
            attr::ENTRY_PREFIX
        );
        let mut item = group_item(&run, 365);
        item.remove(attr::TRANSACTION_ID);
        assert_eq!(
            entries_from_item(&item).unwrap_err().attribute,
            attr::TRANSACTION_ID
        );
        let mut item = group_item(&run, 365);
        let name = entry_attribute(&run[1]);
        let mut fields = entry_fields(&run[1]);
        fields.insert(attr::TO_STATUS.into(), s("SLEEPING"));
        item.insert(name, AttributeValue::M(fields));
        assert_eq!(
            entries_from_item(&item).unwrap_err().attribute,
            attr::TO_STATUS
        );
    }
}
