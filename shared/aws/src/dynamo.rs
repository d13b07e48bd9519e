//! The DynamoDB state store: `create` (one `TransactWriteItems` of the record and its
//! payload, both `attribute_not_exists`; on cancellation `AlreadyExists { same_payload }`),
//! `transition` (ONE `UpdateItem` from a [`Write`]: the guard becomes the
//! `ConditionExpression`; `ALL_NEW` gives the written record, and on a failed condition
//! `ALL_OLD` the current one, with no second read; `ConditionFailedOnRetry` when the SDK
//! sent the call more than once), `get` (consistent), `payload`, and `query_stuck` /
//! `query_failed` (`Query` on the sparse indexes, never a Scan). Every operation and
//! its condition: `docs/adapters.md#operations`.
//!
//! `Write::apply` is the specification; `tests/dynamo_store.rs` checks that the table's
//! result equals it for a table of writes and records.

use crate::config::{FAILED_INDEX, RECONCILE_INDEX};
use crate::errors::classify;
use crate::item::{
    self, attr, flat_from_dynamodb, key, n, record_from_flat, record_to_item, s, CodecError,
};
use aws_sdk_dynamodb::config::http::HttpResponse;
use aws_sdk_dynamodb::config::interceptors::BeforeTransmitInterceptorContextRef;
use aws_sdk_dynamodb::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_dynamodb::error::{BoxError, SdkError};
use aws_sdk_dynamodb::operation::get_item::GetItemError;
use aws_sdk_dynamodb::operation::query::QueryError;
use aws_sdk_dynamodb::operation::transact_write_items::builders::TransactWriteItemsFluentBuilder;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{
    builders::PutBuilder, AttributeValue, Put, ReturnValue, ReturnValuesOnConditionCheckFailure,
    TransactWriteItem,
};
use aws_sdk_dynamodb::Client;
use domain::machine::{BudgetGuard, Change, Mark, Write};
use domain::machine::{FailedKey, ReconcileKey};
use domain::ports::{
    CreateOutcome, Creates, Payloads, PortError, Records, StuckIndex, StuckPage, StuckQuery,
    Transitions, Undecodable, WriteOutcome,
};
use domain::{Payload, Timestamp, TransactionId, TransactionRecord};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

/// Counts the attempts the SDK makes for one call. More than one: an earlier attempt
/// may have applied with its answer lost, so a failed condition may be the call's
/// own result — the store says so, the domain decides.
#[derive(Debug, Clone, Default)]
struct Attempts(Arc<AtomicU32>);

impl Attempts {
    fn retried(&self) -> bool {
        self.0.load(Ordering::Relaxed) > 1
    }
}

impl Intercept for Attempts {
    fn name(&self) -> &'static str {
        "Attempts"
    }

    fn read_before_attempt(
        &self,
        _: &BeforeTransmitInterceptorContextRef<'_>,
        _: &RuntimeComponents,
        _: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        self.0.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

/// An `UpdateItem` expression with its placeholders.
#[derive(Debug, Clone, PartialEq)]
pub struct UpdateExpr {
    pub condition: String,
    pub update: String,
    pub names: HashMap<String, String>,
    pub values: HashMap<String, AttributeValue>,
}

#[derive(Default)]
struct Builder {
    names: HashMap<String, String>,
    values: HashMap<String, AttributeValue>,
    /// The update's `SET` and `REMOVE` clauses, in order.
    set: Vec<String>,
    remove: Vec<String>,
}

impl Builder {
    /// `#<attribute>` placeholder, registered on first use (DynamoDB rejects unused ones).
    fn name(&mut self, attribute: &str) -> String {
        let p = format!("#{attribute}");
        self.names.insert(p.clone(), attribute.to_owned());
        p
    }

    fn value(&mut self, key: &str, v: AttributeValue) -> String {
        let p = format!(":{key}");
        self.values.insert(p.clone(), v);
        p
    }

    /// `SET <attribute> = v`.
    fn put(&mut self, a: &str, v: AttributeValue) {
        let name = self.name(a);
        let val = self.value(&format!("v_{a}"), v);
        self.set.push(format!("{name} = {val}"));
    }

    /// `REMOVE <attribute>`.
    fn clear(&mut self, a: &str) {
        let name = self.name(a);
        self.remove.push(name);
    }

    /// The attribute as `ch` says: kept, set (encoded by `enc`) or removed.
    fn change<T>(&mut self, a: &str, ch: &Change<T>, enc: impl Fn(&T) -> AttributeValue) {
        match ch {
            Change::Keep => {}
            Change::Set(v) => self.put(a, enc(v)),
            Change::Clear => self.clear(a),
        }
    }
}

/// The expression of a conditional write: guard → condition, changes → update.
pub fn update_expression(w: &Write) -> UpdateExpr {
    let mut b = Builder::default();
    let g = &w.guard;

    // Condition. `attribute_exists` makes a missing item fail the condition instead
    // of creating a partial one.
    let mut cond = vec![format!(
        "attribute_exists({})",
        b.name(attr::TRANSACTION_ID)
    )];
    let statuses: Vec<String> = w
        .from()
        .iter()
        .enumerate()
        .map(|(i, st)| b.value(&format!("g_status{i}"), s(st.as_str())))
        .collect();
    cond.push(format!(
        "{} IN ({})",
        b.name(attr::STATUS),
        statuses.join(", ")
    ));
    if let Some(a) = g.current_attempt {
        let v = b.value("g_current", n(a.get()));
        cond.push(format!("{} = {v}", b.name(attr::CURRENT_ATTEMPT)));
    }
    if let Some(a) = g.next_attempt {
        let v = b.value("g_next", n(a.get()));
        cond.push(format!("{} = {v}", b.name(attr::NEXT_ATTEMPT)));
    }
    match g.budget {
        None => {}
        Some(BudgetGuard::Remaining) => cond.push(format!(
            "{} > {}",
            b.name(attr::MAX_ATTEMPTS),
            b.name(attr::CURRENT_ATTEMPT)
        )),
        Some(BudgetGuard::Exhausted) => cond.push(format!(
            "{} <= {}",
            b.name(attr::MAX_ATTEMPTS),
            b.name(attr::CURRENT_ATTEMPT)
        )),
    }

    // A count whose absent attribute means 0.
    for (c, expected) in g.counts.iter() {
        let a = c.attribute();
        if let Some(k) = *expected {
            let name = b.name(a);
            let v = b.value(&format!("g_{a}"), n(k));
            cond.push(if k == 0 {
                format!("(attribute_not_exists({name}) OR {name} = {v})")
            } else {
                format!("{name} = {v}")
            });
        }
    }

    // The probe mark. An item of the previous release (no `mark`) carries it in
    // `last_reason`, as `item::record_from_item` reads it.
    if let Some(probing) = g.probe {
        let mark = b.name(attr::MARK);
        let reason = b.name(attr::LAST_REASON);
        let v = b.value("g_probe", s(Mark::Probe.as_str()));
        let legacy = b.value("g_probe_legacy", s(Mark::Probe.legacy_reason()));
        let is_probe =
            format!("({mark} = {v} OR (attribute_not_exists({mark}) AND {reason} = {legacy}))");
        cond.push(if probing {
            is_probe
        } else {
            format!("NOT {is_probe}")
        });
    }

    // The transaction deadline still ahead: the replay's `expires_at`, or — none
    // set — a creation after `now` − the deadline (timestamps sort as text).
    if let Some(d) = g.live {
        let expires = b.name(attr::EXPIRES_AT);
        let created = b.name(attr::CREATED_AT);
        let now = b.value("g_live_now", s(d.now.to_rfc3339()));
        let born = b.value("g_live_born", s(d.born_after.to_rfc3339()));
        cond.push(format!(
            "({expires} > {now} OR (attribute_not_exists({expires}) AND {created} > {born}))"
        ));
    }

    // No publisher's claim yet (outbox mode): the claim is taken once.
    if g.unclaimed {
        cond.push(format!(
            "attribute_not_exists({})",
            b.name(attr::PUBLISHING_SINCE)
        ));
    }

    // Update.
    let c = &w.set;
    b.put(attr::STATUS, s(w.to().as_str()));
    if let Some(a) = c.current_attempt {
        b.put(attr::CURRENT_ATTEMPT, n(a.get()));
    }
    if let Some(m) = c.max_attempts {
        b.put(attr::MAX_ATTEMPTS, n(m.get()));
    }
    b.change(attr::NEXT_ATTEMPT, &c.next_attempt, |a| n(a.get()));
    b.change(attr::NEXT_FIRE_AT, &c.next_fire_at, |t| s(t.to_rfc3339()));
    b.change(attr::SCHEDULE_NAME, &c.schedule_name, |x| s(x.as_str()));
    if let Some(o) = c.last_outcome {
        b.put(attr::LAST_OUTCOME, s(o.as_str()));
    }
    b.change(attr::LAST_REASON, &c.last_reason, |x| s(x.clone()));
    // Cleared as `NONE`, never removed: an item without `mark` is the previous
    // release's.
    match c.mark {
        Change::Keep => {}
        Change::Set(m) => b.put(attr::MARK, item::mark_value(Some(m))),
        Change::Clear => b.put(attr::MARK, item::mark_value(None)),
    }
    b.put(attr::UPDATED_AT, s(c.updated_at.to_rfc3339()));
    b.put(attr::LAST_ACTOR, s(c.actor.as_str()));
    b.change(attr::LAST_ORIGIN, &c.origin, |o| s(o.as_str()));
    match &c.reconcile {
        Change::Keep => {}
        Change::Set(k) => {
            b.put(attr::RECONCILE_PK, s(k.partition.clone()));
            b.put(attr::RECONCILE_AT, s(k.at.to_rfc3339()));
        }
        Change::Clear => {
            b.clear(attr::RECONCILE_PK);
            b.clear(attr::RECONCILE_AT);
        }
    }
    b.change(attr::ANSWER_DUE_AT, &c.answer_due_at, |t| s(t.to_rfc3339()));
    for (counter, count) in c.counts.iter() {
        b.change(counter.attribute(), count, |k| n(*k));
    }
    b.change(attr::EXPIRES_AT, &c.expires_at, |t| s(t.to_rfc3339()));
    b.change(attr::FAILED_PK, &c.failed, |k| s(k.partition.clone()));
    b.change(attr::PUBLISHING_SINCE, &c.publishing_since, |t| {
        s(t.to_rfc3339())
    });
    match &c.operator {
        Change::Keep => {}
        Change::Set(o) => {
            b.put(attr::OPERATOR_CALLER, s(o.caller.clone()));
            match &o.reason {
                Some(r) => b.put(attr::OPERATOR_REASON, s(r.clone())),
                None => b.clear(attr::OPERATOR_REASON),
            }
        }
        Change::Clear => {
            b.clear(attr::OPERATOR_CALLER);
            b.clear(attr::OPERATOR_REASON);
        }
    }
    let mut update = format!("SET {}", b.set.join(", "));
    if !b.remove.is_empty() {
        update.push_str(&format!(" REMOVE {}", b.remove.join(", ")));
    }
    UpdateExpr {
        condition: cond.join(" AND "),
        update,
        names: b.names,
        values: b.values,
    }
}

/// The DynamoDB state store: [`Transitions`], [`Records`] and [`StuckIndex`] on the
/// transactions table; with the payloads table ([`DynamoStore::with_payloads_table`]),
/// also [`Creates`] and [`Payloads`] — a store without it does not have those ports.
///
/// ```
/// use aws_sdk_dynamodb::config::{BehaviorVersion, Config};
/// fn reads_payloads<P: domain::ports::Payloads>(_: &P) {}
/// let client = aws_sdk_dynamodb::Client::from_conf(
///     Config::builder().behavior_version(BehaviorVersion::latest()).build(),
/// );
/// let store = aws::dynamo::DynamoStore::new(client, "transactions");
/// reads_payloads(&store.with_payloads_table("payloads"));
/// ```
///
/// ```compile_fail
/// use aws_sdk_dynamodb::config::{BehaviorVersion, Config};
/// fn reads_payloads<P: domain::ports::Payloads>(_: &P) {}
/// let client = aws_sdk_dynamodb::Client::from_conf(
///     Config::builder().behavior_version(BehaviorVersion::latest()).build(),
/// );
/// reads_payloads(&aws::dynamo::DynamoStore::new(client, "transactions"));
/// ```
#[derive(Debug, Clone)]
pub struct DynamoStore<P = NoPayloads> {
    client: Client,
    transactions_table: String,
    payloads_table: P,
    /// RETENTION_DAYS: a terminal write sets the record's TTL
    /// (`purge::with_purge`); `None`: it sets none.
    retention: Option<domain::retention::Retention>,
}

/// A [`DynamoStore`] that knows no payloads table.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoPayloads;

/// The payloads table of a [`DynamoStore`].
#[derive(Debug, Clone)]
pub struct PayloadsTable(String);

fn codec(operation: &'static str, e: CodecError) -> PortError {
    PortError::permanent(operation, e.to_string())
}

fn sha256_hex(text: &str) -> String {
    Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

impl DynamoStore {
    /// A store on `transactions_table`. Functions that create transactions or read
    /// payloads also need [`DynamoStore::with_payloads_table`].
    pub fn new(client: Client, transactions_table: impl Into<String>) -> Self {
        Self {
            client,
            transactions_table: transactions_table.into(),
            payloads_table: NoPayloads,
            retention: None,
        }
    }

    /// The same store with the payloads table: it creates transactions and reads
    /// their payloads.
    pub fn with_payloads_table(self, name: impl Into<String>) -> DynamoStore<PayloadsTable> {
        DynamoStore {
            client: self.client,
            transactions_table: self.transactions_table,
            payloads_table: PayloadsTable(name.into()),
            retention: self.retention,
        }
    }
}

impl<P> DynamoStore<P> {
    /// The same store keeping finished transactions `retention` (RETENTION_DAYS):
    /// each terminal write sets the record's TTL (`purge::with_purge`).
    pub fn retaining(mut self, retention: domain::retention::Retention) -> Self {
        self.retention = Some(retention);
        self
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    pub fn transactions_table(&self) -> &str {
        &self.transactions_table
    }

    /// Consistent read of the record (used by `get` and after a cancelled create).
    async fn read(&self, id: &TransactionId) -> Result<Option<TransactionRecord>, PortError> {
        self.read_item(id)
            .await?
            .map(|i| record_from_flat(&flat_from_dynamodb(&i)).map_err(|e| codec("GetItem", e)))
            .transpose()
    }

    /// Consistent read of the record's item, undecoded.
    async fn read_item(
        &self,
        id: &TransactionId,
    ) -> Result<Option<HashMap<String, AttributeValue>>, PortError> {
        self.get_item(&self.transactions_table, id).await
    }

    /// The item of `id` in `table`, read consistently.
    async fn get_item(
        &self,
        table: &str,
        id: &TransactionId,
    ) -> Result<Option<HashMap<String, AttributeValue>>, PortError> {
        let out = self
            .client
            .get_item()
            .table_name(table)
            .set_key(Some(key(id)))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| classify("GetItem", &e, get_item_kind))?;
        Ok(out.item)
    }
}

impl DynamoStore<PayloadsTable> {
    async fn read_payload_item(
        &self,
        id: &TransactionId,
    ) -> Result<Option<HashMap<String, AttributeValue>>, PortError> {
        self.get_item(&self.payloads_table.0, id).await
    }
}

crate::errors::error_kinds!(dynamodb
    /// How a GetItem error is classified.
    pub(crate) fn get_item_kind(GetItemError) {
        retryable: [],
        permanent: [ResourceNotFoundException],
    }
);

crate::errors::error_kinds!(dynamodb
    /// How an UpdateItem error is classified (state and audit tables alike).
    pub(crate) fn update_item_kind(UpdateItemError) {
        retryable: [TransactionConflictException, ReplicatedWriteConflictException],
        permanent: [ResourceNotFoundException, ItemCollectionSizeLimitExceededException],
    }
);

/// A TransactWriteItems of `puts`, each built (one that does not build is a
/// permanent error).
pub(crate) fn transact_puts(
    client: &Client,
    puts: impl IntoIterator<Item = PutBuilder>,
) -> Result<TransactWriteItemsFluentBuilder, PortError> {
    let mut call = client.transact_write_items();
    for put in puts {
        let put = put
            .build()
            .map_err(|e| PortError::permanent("TransactWriteItems", e.to_string()))?;
        call = call.transact_items(TransactWriteItem::builder().put(put).build());
    }
    Ok(call)
}

/// Whether a conditional UpdateItem (of a table other than the record's) wrote:
/// `false` when its condition failed, else its error classified.
pub(crate) fn condition_held<O>(
    result: Result<O, SdkError<UpdateItemError, HttpResponse>>,
) -> Result<bool, PortError> {
    crate::errors::settled(
        "UpdateItem",
        result,
        (true, false),
        UpdateItemError::is_conditional_check_failed_exception,
        update_item_kind,
    )
}

crate::errors::error_kinds!(dynamodb
    /// How a TransactWriteItems error is classified.
    pub(crate) fn transact_kind(TransactWriteItemsError) {
        retryable: [TransactionInProgressException, TransactionCanceledException],
        permanent: [ResourceNotFoundException, IdempotentParameterMismatchException],
    }
);

crate::errors::error_kinds!(dynamodb
    /// How a Query error is classified.
    pub(crate) fn query_kind(QueryError) {
        retryable: [],
        permanent: [ResourceNotFoundException],
    }
);

/// The opaque pagination cursor: the index's LastEvaluatedKey as a JSON object of
/// strings (every key attribute of the index and table is a string).
fn encode_cursor(lek: &HashMap<String, AttributeValue>) -> Result<String, PortError> {
    let mut m = BTreeMap::new();
    for (k, v) in lek {
        match v {
            AttributeValue::S(s) => {
                m.insert(k.clone(), s.clone());
            }
            _ => {
                return Err(PortError::permanent(
                    "Query",
                    format!("LastEvaluatedKey attribute `{k}` is not a string"),
                ))
            }
        }
    }
    serde_json::to_string(&m).map_err(|e| PortError::permanent("Query", e.to_string()))
}

fn decode_cursor(cursor: &str) -> Result<HashMap<String, AttributeValue>, PortError> {
    let m: BTreeMap<String, String> = serde_json::from_str(cursor)
        .map_err(|e| PortError::permanent("Query", format!("invalid cursor {cursor:?}: {e}")))?;
    Ok(m.into_iter().map(|(k, v)| (k, s(v))).collect())
}

impl Creates for DynamoStore<PayloadsTable> {
    async fn create(
        &self,
        record: &TransactionRecord,
        payload: &Payload,
    ) -> Result<CreateOutcome, PortError> {
        let payloads = self.payloads_table.0.clone();
        let id_name = HashMap::from([("#id".to_owned(), attr::TRANSACTION_ID.to_owned())]);
        let put_record = Put::builder()
            .table_name(&self.transactions_table)
            .set_item(Some(record_to_item(record)))
            .condition_expression("attribute_not_exists(#id)")
            .set_expression_attribute_names(Some(id_name.clone()));
        let mut payload_item = key(&record.transaction_id);
        payload_item.insert(attr::PAYLOAD.to_owned(), s(payload.as_json()));
        payload_item.insert(
            attr::PAYLOAD_SHA256.to_owned(),
            s(sha256_hex(payload.as_json())),
        );
        payload_item.insert(
            attr::CREATED_AT.to_owned(),
            s(record.created_at.to_rfc3339()),
        );
        let put_payload = Put::builder()
            .table_name(payloads)
            .set_item(Some(payload_item))
            .condition_expression("attribute_not_exists(#id)")
            .set_expression_attribute_names(Some(id_name));
        let attempts = Attempts::default();
        let result = transact_puts(&self.client, [put_record, put_payload])?
            .customize()
            .interceptor(attempts.clone())
            .send()
            .await;
        match result {
            Ok(_) => Ok(CreateOutcome::Created),
            Err(e) => {
                let cancelled = matches!(
                    e.as_service_error(),
                    Some(TransactWriteItemsError::TransactionCanceledException(_))
                );
                if !cancelled {
                    return Err(classify("TransactWriteItems", &e, transact_kind));
                }
                // Cancelled: most likely the transaction exists. Read both back; if
                // the record is not there the cancellation had another cause (a
                // concurrent transaction), which is worth retrying.
                let Some(existing) = self.read(&record.transaction_id).await? else {
                    return Err(classify("TransactWriteItems", &e, transact_kind));
                };
                let stored = self.read_payload_item(&record.transaction_id).await?;
                let stored_sha = stored
                    .as_ref()
                    .and_then(|i| i.get(attr::PAYLOAD_SHA256))
                    .and_then(|v| v.as_s().ok());
                let same_payload = stored_sha.is_some_and(|h| *h == sha256_hex(payload.as_json()));
                Ok(if attempts.retried() {
                    CreateOutcome::FoundOnRetry {
                        record: Box::new(existing),
                        same_payload,
                    }
                } else {
                    CreateOutcome::AlreadyExists {
                        record: Box::new(existing),
                        same_payload,
                    }
                })
            }
        }
    }
}

impl<P: Send + Sync> Transitions for DynamoStore<P> {
    async fn transition(&self, write: &Write) -> Result<WriteOutcome, PortError> {
        let mut x = update_expression(write);
        crate::purge::with_purge(
            &mut x.update,
            &mut x.names,
            &mut x.values,
            write,
            self.retention,
        );
        let attempts = Attempts::default();
        let result = self
            .client
            .update_item()
            .table_name(&self.transactions_table)
            .set_key(Some(key(&write.transaction_id)))
            .condition_expression(x.condition)
            .update_expression(x.update)
            .set_expression_attribute_names(Some(x.names))
            .set_expression_attribute_values(Some(x.values))
            .return_values(ReturnValue::AllNew)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .customize()
            .interceptor(attempts.clone())
            .send()
            .await;
        match result {
            Ok(out) => {
                let item = out.attributes().ok_or_else(|| {
                    PortError::permanent("UpdateItem", "ALL_NEW returned no attributes")
                })?;
                record_from_flat(&flat_from_dynamodb(item))
                    .map(WriteOutcome::Written)
                    .map_err(|e| codec("UpdateItem", e))
            }
            Err(e) => match e.as_service_error() {
                Some(UpdateItemError::ConditionalCheckFailedException(ccf)) => {
                    // A failed condition still consumes write capacity; DynamoDB does
                    // not report it on the error, so it is not booked here.
                    let current = ccf
                        .item()
                        .map(|i| {
                            record_from_flat(&flat_from_dynamodb(i))
                                .map_err(|e| codec("UpdateItem", e))
                        })
                        .transpose()?;
                    Ok(if attempts.retried() {
                        WriteOutcome::ConditionFailedOnRetry(current)
                    } else {
                        WriteOutcome::ConditionFailed(current)
                    })
                }
                _ => Err(classify("UpdateItem", &e, update_item_kind)),
            },
        }
    }
}

impl<P: Send + Sync> Records for DynamoStore<P> {
    async fn get(&self, id: &TransactionId) -> Result<Option<TransactionRecord>, PortError> {
        self.read(id).await
    }
}

impl Payloads for DynamoStore<PayloadsTable> {
    async fn payload(&self, id: &TransactionId) -> Result<Option<Payload>, PortError> {
        let Some(item) = self.read_payload_item(id).await? else {
            return Ok(None);
        };
        let text = item
            .get(attr::PAYLOAD)
            .and_then(|v| v.as_s().ok())
            .ok_or_else(|| {
                PortError::permanent(
                    "GetItem",
                    format!("payload of `{id}` has no `payload` string"),
                )
            })?;
        Payload::from_json(text)
            .map(Some)
            .map_err(|e| PortError::permanent("GetItem", format!("stored payload of `{id}`: {e}")))
    }
}

/// One entry of the failed-index: a FAILED transaction and the time it was last
/// written (when it failed).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct FailedEntry {
    pub updated_at: Timestamp,
    pub transaction_id: TransactionId,
}

/// One page of the failed-index of a shard.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FailedPage {
    pub entries: Vec<FailedEntry>,
    /// Where the next page starts (`None`: the shard has no more in the range).
    pub next: Option<String>,
}

impl<P: Send + Sync> DynamoStore<P> {
    /// The FAILED transactions of `shard` whose `updated_at` lies in `[from, until]`
    /// (each bound optional, both inclusive), oldest first: one page of at most `limit`
    /// entries of the sparse index `failed-index` (a Query on one partition, keys only:
    /// the records themselves are not read).
    pub async fn query_failed(
        &self,
        shard: u16,
        from: Option<Timestamp>,
        until: Option<Timestamp>,
        limit: u32,
        cursor: Option<&str>,
    ) -> Result<FailedPage, PortError> {
        let start = cursor.map(decode_cursor).transpose()?;
        let range = match (from, until) {
            (None, None) => "",
            (Some(_), None) => " AND #at >= :from",
            (None, Some(_)) => " AND #at <= :until",
            (Some(_), Some(_)) => " AND #at BETWEEN :from AND :until",
        };
        let mut names = HashMap::from([("#pk".to_owned(), attr::FAILED_PK.to_owned())]);
        if !range.is_empty() {
            names.insert("#at".to_owned(), attr::UPDATED_AT.to_owned());
        }
        let mut values = HashMap::from([(":pk".to_owned(), s(FailedKey::partition_for(shard)))]);
        if let Some(t) = from {
            values.insert(":from".to_owned(), s(t.to_rfc3339()));
        }
        if let Some(t) = until {
            values.insert(":until".to_owned(), s(t.to_rfc3339()));
        }
        let out = self
            .client
            .query()
            .table_name(&self.transactions_table)
            .index_name(FAILED_INDEX)
            .key_condition_expression(format!("#pk = :pk{range}"))
            .set_expression_attribute_names(Some(names))
            .set_expression_attribute_values(Some(values))
            .limit(i32::try_from(limit.max(1)).unwrap_or(i32::MAX))
            .set_exclusive_start_key(start)
            .send()
            .await
            .map_err(|e| classify("Query", &e, query_kind))?;
        let mut entries = Vec::with_capacity(out.items().len());
        for item in out.items() {
            let get = |a: &'static str| {
                item.get(a).and_then(|v| v.as_s().ok()).ok_or_else(|| {
                    PortError::permanent(
                        "Query",
                        format!("{FAILED_INDEX} entry without a `{a}` string: {item:?}"),
                    )
                })
            };
            let (raw_id, raw_at) = (get(attr::TRANSACTION_ID)?, get(attr::UPDATED_AT)?);
            let transaction_id = TransactionId::parse(raw_id).map_err(|e| {
                PortError::permanent(
                    "Query",
                    format!("`{}` = {raw_id:?}: {e}", attr::TRANSACTION_ID),
                )
            })?;
            let updated_at = Timestamp::parse(raw_at).map_err(|e| {
                PortError::permanent("Query", format!("`{}` = {raw_at:?}: {e}", attr::UPDATED_AT))
            })?;
            entries.push(FailedEntry {
                updated_at,
                transaction_id,
            });
        }
        let next = out
            .last_evaluated_key()
            .filter(|k| !k.is_empty())
            .map(encode_cursor)
            .transpose()?;
        Ok(FailedPage { entries, next })
    }
}

impl<P: Send + Sync> StuckIndex for DynamoStore<P> {
    async fn query_stuck(&self, q: &StuckQuery) -> Result<StuckPage, PortError> {
        let start = q.cursor.as_deref().map(decode_cursor).transpose()?;
        let out = self
            .client
            .query()
            .table_name(&self.transactions_table)
            .index_name(RECONCILE_INDEX)
            .key_condition_expression("#pk = :pk AND #at < :before")
            .expression_attribute_names("#pk", attr::RECONCILE_PK)
            .expression_attribute_names("#at", attr::RECONCILE_AT)
            .expression_attribute_values(":pk", s(ReconcileKey::partition_for(q.shard)))
            .expression_attribute_values(":before", s(q.before.to_rfc3339()))
            .limit(i32::try_from(q.limit.max(1)).unwrap_or(i32::MAX))
            .set_exclusive_start_key(start)
            .send()
            .await
            .map_err(|e| classify("Query", &e, query_kind))?;
        // The index projects keys only (so no transition but entering and leaving it
        // writes it): read each record, strongly consistent, and hand over its
        // current state. One that has left the index meanwhile is not returned.
        let mut records = Vec::with_capacity(out.items().len());
        let mut undecodable = Vec::new();
        for item in out.items() {
            let raw = item.get(attr::TRANSACTION_ID).and_then(|v| v.as_s().ok());
            let id = match raw.map(|raw| (raw, TransactionId::parse(raw))) {
                Some((_, Ok(id))) => id,
                Some((raw, Err(e))) => {
                    undecodable.push(Undecodable {
                        key: raw.clone(),
                        detail: format!("`{}`: {e}", attr::TRANSACTION_ID),
                    });
                    continue;
                }
                None => {
                    undecodable.push(Undecodable {
                        key: format!("{item:?}"),
                        detail: format!("index entry without a `{}` string", attr::TRANSACTION_ID),
                    });
                    continue;
                }
            };
            let Some(item) = self.read_item(&id).await? else {
                continue;
            };
            match record_from_flat(&flat_from_dynamodb(&item)) {
                Ok(r) if r.reconcile.is_some() => records.push(r),
                Ok(_) => {}
                Err(e) => undecodable.push(Undecodable {
                    key: id.to_string(),
                    detail: e.to_string(),
                }),
            }
        }
        let next = out
            .last_evaluated_key()
            .filter(|k| !k.is_empty())
            .map(encode_cursor)
            .transpose()?;
        Ok(StuckPage {
            records,
            undecodable,
            next,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use domain::decide::{decide_publish, Delivery, Deployment};
    use domain::machine::{Actor, Event};
    use domain::{MaxAttempts, Timestamp, TransactionId, TransactionRecord};

    /// GIVEN the publisher's plan for an unclaimed SENDING record WHEN its writes are
    /// encoded THEN the claim carries `attribute_not_exists(#publishing_since)` and sets
    /// it as an instant; the write leaving SENDING removes it; no other write names it.
    #[test]
    fn the_claim_is_conditional_on_no_claim_and_leaving_sending_removes_it() {
        let r = TransactionRecord::started_queued(
            TransactionId::parse("TX-1").unwrap(),
            MaxAttempts::new(3).unwrap(),
            Timestamp::from_millis(0),
            8,
        );
        let ctx = Deployment::default()
            .context(Timestamp::from_millis(1_000))
            .with_delivery(Delivery::Outbox);
        let writes: Vec<Write> = decide_publish(&r, &ctx, Actor::Publisher)
            .into_iter()
            .filter_map(|e| match e {
                domain::Effect::Write(w) => Some(w),
                _ => None,
            })
            .collect();
        let [claim, published] = writes.as_slice() else {
            panic!("{writes:?}")
        };
        assert_eq!(claim.event(), Event::PublishClaimed);
        let e = update_expression(claim);
        assert!(
            e.condition
                .ends_with(" AND attribute_not_exists(#publishing_since)"),
            "{}",
            e.condition
        );
        assert_eq!(e.names["#publishing_since"], "publishing_since");
        assert!(e.update.contains("#publishing_since = :v_publishing_since"));
        assert_eq!(
            e.values[":v_publishing_since"],
            AttributeValue::S("1970-01-01T00:00:01.000Z".into())
        );
        let e = update_expression(published);
        assert!(!e.condition.contains("publishing_since"), "{}", e.condition);
        let removed = e.update.split(" REMOVE ").nth(1).unwrap_or_default();
        assert!(removed.contains("#publishing_since"), "{}", e.update);
        // A write that neither leaves SENDING nor claims leaves the attribute alone.
        let answered = Write::new(
            r.transaction_id.clone(),
            domain::arrow!([domain::Status::InProgress], Event::Success),
            Timestamp::from_millis(2_000),
            Actor::ResponseHandler,
        );
        let e = update_expression(&answered);
        assert!(!e.names.contains_key("#publishing_since"), "{e:?}");
    }
}
