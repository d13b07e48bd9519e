//! The circuit breaker in DynamoDB ([`DynamoBreaker`]): one item for the breaker,
//! written only when its state changes, conditional on the version read and together
//! with an entry of its change log (one TransactWriteItems); the sliding window's counts
//! in items of their own, one per bucket and shard, changed by unconditional `ADD` (a
//! burst of failures spreads over `shards` items and never conflicts). Reading the
//! breaker is one GetItem, plus one Query over the window's partition only when the
//! window is asked for. The table layout is on [`DynamoBreaker`]; the why:
//! `docs/design.md#the-circuit-breaker-an-outage-pauses-retries`.

use crate::errors::classify;
use crate::item::{n, s};
use aws_sdk_dynamodb::operation::query::builders::QueryFluentBuilder;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodb::types::Put;
use aws_sdk_dynamodb::Client;
use domain::breaker::{
    bucket_of, window_total, Breaker, BreakerSettings, BreakerState, Change, Tally,
};
use domain::ports::{
    BreakerCounts, BreakerNote, BreakerReads, BreakerView, BreakerWrites, PortError,
};
use domain::Timestamp;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

/// The name the external service's breaker is kept under (one service per stack).
pub const SERVICE: &str = "external-service";

/// Attribute names of the breaker table.
pub mod attr {
    pub const PK: &str = "pk";
    pub const SK: &str = "sk";
    pub const BREAKER_SK: &str = "BREAKER";
    pub const STATE: &str = "state";
    pub const VERSION: &str = "version";
    pub const UNTIL: &str = "until";
    pub const SINCE: &str = "since";
    pub const ADMITTED: &str = "admitted";
    pub const COOLDOWN_MS: &str = "cooldown_ms";
    pub const ANSWERED: &str = "answered";
    pub const TECHNICAL: &str = "technical";
    pub const DEADLINES: &str = "deadlines";
    pub const EXPIRES_AT: &str = "expires_at";
    // The change log's entries.
    pub const AT: &str = "at";
    pub const BY: &str = "by";
    pub const CHANGE: &str = "change";
    pub const FROM: &str = "from_state";
    pub const TO: &str = "to_state";
    pub const REASON: &str = "reason";
}

/// How long the breaker's change log keeps an entry (TTL): 400 days.
pub const LOG_RETENTION_SECONDS: i64 = 400 * 86_400;

/// The breaker of one service in its table.
///
/// Table layout (partition `pk`, sort `sk`, both strings; TTL on `expires_at`):
///
/// | item | `pk` | `sk` | attributes |
/// |---|---|---|---|
/// | the breaker | `<service>` | `BREAKER` | `state` (`CLOSED`/`OPEN`/`HALF_OPEN`), `version`, `until`, `since`, `admitted`, `cooldown_ms` |
/// | a change-log entry | `<service>#log` | `<at, ms, 15 digits>#<version, 10 digits>` | `at`, `by`, `change`, `from_state`, `to_state`, `version`, `reason`, the window's counts when it opened, `expires_at` (400 days) |
/// | a window bucket | `<service>#window` | `<bucket start, ms, 15 digits>#<shard, 2 digits>` | `answered`, `technical`, `deadlines`, `expires_at` |
///
/// Reading the window is one Query over its partition: at most `BUCKETS × shards` small
/// items.
#[derive(Debug)]
pub struct DynamoBreaker {
    client: Client,
    table: String,
    service: String,
    settings: BreakerSettings,
    shards: u8,
    next_shard: AtomicU64,
}

/// A whole number; absent is 0 (the window's counts, written by `ADD`).
fn num(item: &HashMap<String, AttributeValue>, name: &'static str) -> Result<i64, PortError> {
    match item.get(name) {
        None => Ok(0),
        Some(_) => required(item, name),
    }
}

/// A whole number the item must carry: absent is an error, never 0 (a HALF_OPEN
/// breaker without its cool-down would make every request a free probe).
fn required(item: &HashMap<String, AttributeValue>, name: &'static str) -> Result<i64, PortError> {
    match item.get(name) {
        Some(AttributeValue::N(v)) => v.parse().map_err(|_| {
            PortError::permanent(
                "GetItem",
                format!("breaker attribute {name} = {v}: not a whole number"),
            )
        }),
        None => Err(PortError::permanent(
            "GetItem",
            format!("breaker attribute {name}: missing"),
        )),
        Some(other) => Err(PortError::permanent(
            "GetItem",
            format!("breaker attribute {name} = {other:?}: not a number"),
        )),
    }
}

/// A duration in milliseconds the item must carry: positive.
fn positive(item: &HashMap<String, AttributeValue>, name: &'static str) -> Result<i64, PortError> {
    let v = required(item, name)?;
    if v > 0 {
        Ok(v)
    } else {
        Err(PortError::permanent(
            "GetItem",
            format!("breaker attribute {name} = {v}: must be greater than 0"),
        ))
    }
}

fn count(item: &HashMap<String, AttributeValue>, name: &'static str) -> Result<u32, PortError> {
    let v = num(item, name)?;
    u32::try_from(v).map_err(|_| {
        PortError::permanent(
            "Query",
            format!("breaker attribute {name} = {v}: out of range"),
        )
    })
}

/// The breaker stored in an item. Every attribute its state needs must be there, of
/// its type: an item that does not say what it is is an error (the functions count
/// `BreakerErrors` and let requests out; `retryctl breaker open|close` overwrites it),
/// never a guess.
pub fn breaker_from_item(item: &HashMap<String, AttributeValue>) -> Result<Breaker, PortError> {
    let version = u64::try_from(required(item, attr::VERSION)?)
        .map_err(|_| PortError::permanent("GetItem", "breaker attribute version: negative"))?;
    let state = match item.get(attr::STATE) {
        Some(AttributeValue::S(v)) if v == "CLOSED" => BreakerState::Closed,
        Some(AttributeValue::S(v)) if v == "OPEN" => BreakerState::Open {
            until: Timestamp::from_millis(required(item, attr::UNTIL)?),
            cooldown_ms: positive(item, attr::COOLDOWN_MS)?,
        },
        Some(AttributeValue::S(v)) if v == "HALF_OPEN" => BreakerState::HalfOpen {
            since: Timestamp::from_millis(required(item, attr::SINCE)?),
            admitted: u32::try_from(required(item, attr::ADMITTED)?).map_err(|_| {
                PortError::permanent("GetItem", "breaker attribute admitted: out of range")
            })?,
            cooldown_ms: positive(item, attr::COOLDOWN_MS)?,
        },
        None => {
            return Err(PortError::permanent(
                "GetItem",
                "breaker attribute state: missing",
            ))
        }
        Some(other) => {
            return Err(PortError::permanent(
                "GetItem",
                format!("breaker attribute state = {other:?}: not CLOSED, OPEN or HALF_OPEN"),
            ))
        }
    };
    Ok(Breaker { state, version })
}

/// The item of a breaker (without its key).
pub fn breaker_item(b: &Breaker) -> HashMap<String, AttributeValue> {
    let mut m = HashMap::from([
        (attr::STATE.to_owned(), s(b.state.name())),
        (attr::VERSION.to_owned(), n(b.version)),
    ]);
    match b.state {
        BreakerState::Closed => {}
        BreakerState::Open { until, cooldown_ms } => {
            m.insert(attr::UNTIL.to_owned(), n(until.millis()));
            m.insert(attr::COOLDOWN_MS.to_owned(), n(cooldown_ms));
        }
        BreakerState::HalfOpen {
            since,
            admitted,
            cooldown_ms,
        } => {
            m.insert(attr::SINCE.to_owned(), n(since.millis()));
            m.insert(attr::ADMITTED.to_owned(), n(admitted));
            m.insert(attr::COOLDOWN_MS.to_owned(), n(cooldown_ms));
        }
    }
    m
}

impl DynamoBreaker {
    /// The breaker of `service` in `table`, its counts spread over `shards` items per
    /// bucket (at least one).
    pub fn new(
        client: Client,
        table: impl Into<String>,
        service: impl Into<String>,
        settings: BreakerSettings,
        shards: u8,
    ) -> Self {
        Self {
            client,
            table: table.into(),
            service: service.into(),
            settings,
            shards: shards.max(1),
            next_shard: AtomicU64::new(0),
        }
    }

    /// A Query of the table on `condition`, its partition `#pk` being `pk`.
    fn query(&self, condition: &str, pk: String) -> QueryFluentBuilder {
        self.client
            .query()
            .table_name(&self.table)
            .key_condition_expression(condition)
            .expression_attribute_names("#pk", attr::PK)
            .expression_attribute_values(":pk", s(pk))
    }

    fn window_pk(&self) -> String {
        format!("{}#window", self.service)
    }

    fn bucket_sk(bucket: Timestamp, shard: u8) -> String {
        format!("{:015}#{shard:02}", bucket.millis().max(0))
    }

    /// The breaker's item as stored (`None`: none yet), read consistently.
    async fn breaker_item(&self) -> Result<Option<HashMap<String, AttributeValue>>, PortError> {
        let got = self
            .client
            .get_item()
            .table_name(&self.table)
            .key(attr::PK, s(&self.service))
            .key(attr::SK, s(attr::BREAKER_SK))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| classify("GetItem", &e, crate::dynamo::get_item_kind))?;
        Ok(got.item)
    }

    fn window_ms(&self) -> i64 {
        i64::try_from(self.settings.window.as_millis()).unwrap_or(i64::MAX)
    }
}

impl BreakerReads for DynamoBreaker {
    async fn load(&self, now: Timestamp, window: bool) -> Result<BreakerView, PortError> {
        let got = self.breaker_item().await?;
        let breaker = match &got {
            Some(item) => breaker_from_item(item)?,
            None => Breaker::default(),
        };
        if !window {
            return Ok(BreakerView {
                breaker,
                window: Tally::default(),
            });
        }
        let oldest = bucket_of(now.plus_millis(-self.window_ms()), &self.settings);
        let mut buckets: Vec<(Timestamp, Tally)> = Vec::new();
        let mut start: Option<HashMap<String, AttributeValue>> = None;
        loop {
            let page = self
                .query("#pk = :pk AND #sk >= :from", self.window_pk())
                .expression_attribute_names("#sk", attr::SK)
                .expression_attribute_values(":from", s(Self::bucket_sk(oldest, 0)))
                .consistent_read(true)
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .map_err(|e| classify("Query", &e, crate::dynamo::query_kind))?;
            for item in page.items() {
                let bucket = match item.get(attr::SK) {
                    Some(AttributeValue::S(sk)) => sk
                        .split('#')
                        .next()
                        .and_then(|ms| ms.parse::<i64>().ok())
                        .map(Timestamp::from_millis),
                    _ => None,
                };
                let Some(bucket) = bucket else {
                    return Err(PortError::permanent(
                        "Query",
                        format!("breaker window item without a bucket sort key: {item:?}"),
                    ));
                };
                buckets.push((
                    bucket,
                    Tally {
                        answered: count(item, attr::ANSWERED)?,
                        technical: count(item, attr::TECHNICAL)?,
                        deadlines: count(item, attr::DEADLINES)?,
                        probes_answered: 0,
                    },
                ));
            }
            match page.last_evaluated_key() {
                Some(k) if !k.is_empty() => start = Some(k.clone()),
                _ => break,
            }
        }
        let window = window_total(buckets.iter().map(|(b, t)| (*b, t)), now, &self.settings);
        Ok(BreakerView { breaker, window })
    }
}

impl BreakerWrites for DynamoBreaker {
    async fn save(
        &self,
        read: &Breaker,
        new: &Breaker,
        note: &BreakerNote,
    ) -> Result<bool, PortError> {
        let guard = if read.version == 0 {
            VersionGuard::NoneYet
        } else {
            VersionGuard::Is(n(read.version))
        };
        self.put(guard, read.state.name(), new, note).await
    }
}

/// The condition a write of the breaker item is made on.
enum VersionGuard {
    /// No item yet, or one of version 0.
    NoneYet,
    /// The `version` attribute as read, whatever its type.
    Is(AttributeValue),
    /// An item without `version`.
    Missing,
}

/// What an operator's override finds in the breaker's item.
#[derive(Debug, Clone, PartialEq)]
pub enum Found {
    Breaker(Breaker),
    /// An item that does not decode: what is wrong, and its `version` attribute as
    /// stored (the override is conditional on it).
    Corrupt {
        problem: String,
        version: Option<AttributeValue>,
    },
}

impl DynamoBreaker {
    /// The breaker's item as an operator's override needs it: decoded, or — when it
    /// does not decode — what is wrong with it, so that it can still be overwritten.
    pub async fn find(&self) -> Result<Found, PortError> {
        let got = self.breaker_item().await?;
        Ok(match &got {
            None => Found::Breaker(Breaker::default()),
            Some(item) => match breaker_from_item(item) {
                Ok(b) => Found::Breaker(b),
                Err(e) => Found::Corrupt {
                    problem: e.message,
                    version: item.get(attr::VERSION).cloned(),
                },
            },
        })
    }

    /// Writes `new` over an item that does not decode, conditional on its `version`
    /// attribute as [`Self::find`] read it (so a concurrent repair is not lost), with
    /// an entry of the change log (from `CORRUPT`). `Ok(false)`: it changed since.
    pub async fn overwrite(
        &self,
        version: Option<&AttributeValue>,
        new: &Breaker,
        note: &BreakerNote,
    ) -> Result<bool, PortError> {
        let guard = match version {
            Some(v) => VersionGuard::Is(v.clone()),
            None => VersionGuard::Missing,
        };
        self.put(guard, "CORRUPT", new, note).await
    }

    /// The version an override of an item that did not decode counts from: its
    /// `version` when that is a whole number, else 0 (the override writes one past it).
    pub fn stored_version(version: Option<&AttributeValue>) -> u64 {
        match version {
            Some(AttributeValue::N(v)) => v.parse().unwrap_or(0),
            _ => 0,
        }
    }

    async fn put(
        &self,
        guard: VersionGuard,
        from_state: &str,
        new: &Breaker,
        note: &BreakerNote,
    ) -> Result<bool, PortError> {
        let mut item = breaker_item(new);
        item.insert(attr::PK.to_owned(), s(&self.service));
        item.insert(attr::SK.to_owned(), s(attr::BREAKER_SK));
        let mut names = HashMap::from([("#v".to_owned(), attr::VERSION.to_owned())]);
        let mut values = HashMap::new();
        let condition = match guard {
            VersionGuard::NoneYet => {
                names.insert("#pk".to_owned(), attr::PK.to_owned());
                values.insert(":v".to_owned(), n(0));
                "attribute_not_exists(#pk) OR #v = :v"
            }
            VersionGuard::Is(v) => {
                values.insert(":v".to_owned(), v);
                "#v = :v"
            }
            VersionGuard::Missing => {
                names.insert("#pk".to_owned(), attr::PK.to_owned());
                "attribute_exists(#pk) AND attribute_not_exists(#v)"
            }
        };
        let put_breaker = Put::builder()
            .table_name(&self.table)
            .set_item(Some(item))
            .condition_expression(condition)
            .set_expression_attribute_names(Some(names))
            .set_expression_attribute_values((!values.is_empty()).then_some(values));
        let put_log = Put::builder()
            .table_name(&self.table)
            .set_item(Some(self.log_item(from_state, new, note)));
        let sent = crate::dynamo::transact_puts(&self.client, [put_breaker, put_log])?
            .send()
            .await;
        match sent {
            Ok(_) => Ok(true),
            Err(e) => {
                let lost_the_race = match e.as_service_error() {
                    Some(TransactWriteItemsError::TransactionCanceledException(c)) => {
                        c.cancellation_reasons().first().and_then(|r| r.code())
                            == Some("ConditionalCheckFailed")
                    }
                    _ => false,
                };
                if lost_the_race {
                    Ok(false)
                } else {
                    Err(classify(
                        "TransactWriteItems",
                        &e,
                        crate::dynamo::transact_kind,
                    ))
                }
            }
        }
    }
}

/// One entry of the breaker's change log, newest first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BreakerLogEntry {
    pub at: Timestamp,
    pub by: String,
    pub change: String,
    pub from: String,
    pub to: String,
    pub version: u64,
    pub reason: Option<String>,
    /// The window's counts when it opened (`answered/technical/deadlines`).
    pub window: Option<Tally>,
}

impl DynamoBreaker {
    fn log_pk(&self) -> String {
        format!("{}#log", self.service)
    }

    fn log_item(
        &self,
        from_state: &str,
        new: &Breaker,
        note: &BreakerNote,
    ) -> HashMap<String, AttributeValue> {
        let mut m = HashMap::from([
            (attr::PK.to_owned(), s(self.log_pk())),
            (
                attr::SK.to_owned(),
                s(format!(
                    "{:015}#{:010}",
                    note.at.millis().max(0),
                    new.version
                )),
            ),
            (attr::AT.to_owned(), n(note.at.millis())),
            (attr::BY.to_owned(), s(&note.by)),
            (attr::CHANGE.to_owned(), s(note.change.label())),
            (attr::FROM.to_owned(), s(from_state)),
            (attr::TO.to_owned(), s(new.state.name())),
            (attr::VERSION.to_owned(), n(new.version)),
            (
                attr::EXPIRES_AT.to_owned(),
                n(note.at.epoch_seconds() + LOG_RETENTION_SECONDS),
            ),
        ]);
        if let Some(r) = &note.reason {
            m.insert(attr::REASON.to_owned(), s(r));
        }
        if let Change::Opened(t) = note.change {
            m.insert(attr::ANSWERED.to_owned(), n(t.answered));
            m.insert(attr::TECHNICAL.to_owned(), n(t.technical));
            m.insert(attr::DEADLINES.to_owned(), n(t.deadlines));
        }
        m
    }

    /// The breaker's latest `limit` changes, newest first.
    pub async fn history(&self, limit: i32) -> Result<Vec<BreakerLogEntry>, PortError> {
        let page = self
            .query("#pk = :pk", self.log_pk())
            .scan_index_forward(false)
            .limit(limit.max(1))
            .send()
            .await
            .map_err(|e| classify("Query", &e, crate::dynamo::query_kind))?;
        let text = |item: &HashMap<String, AttributeValue>, k: &str| match item.get(k) {
            Some(AttributeValue::S(v)) => v.clone(),
            _ => String::new(),
        };
        page.items()
            .iter()
            .map(|item| {
                let opened = item.contains_key(attr::TECHNICAL);
                Ok(BreakerLogEntry {
                    at: Timestamp::from_millis(num(item, attr::AT)?),
                    by: text(item, attr::BY),
                    change: text(item, attr::CHANGE),
                    from: text(item, attr::FROM),
                    to: text(item, attr::TO),
                    version: u64::try_from(num(item, attr::VERSION)?).unwrap_or(0),
                    reason: item.get(attr::REASON).and_then(|v| v.as_s().ok()).cloned(),
                    window: if opened {
                        Some(Tally {
                            answered: count(item, attr::ANSWERED)?,
                            technical: count(item, attr::TECHNICAL)?,
                            deadlines: count(item, attr::DEADLINES)?,
                            probes_answered: 0,
                        })
                    } else {
                        None
                    },
                })
            })
            .collect()
    }
}

impl BreakerCounts for DynamoBreaker {
    async fn count(&self, at: Timestamp, tally: &Tally) -> Result<(), PortError> {
        if *tally == Tally::default() {
            return Ok(());
        }
        let shard =
            u8::try_from(self.next_shard.fetch_add(1, Ordering::Relaxed) % u64::from(self.shards))
                .unwrap_or(0);
        let bucket = bucket_of(at, &self.settings);
        // Kept two windows past the bucket, then removed by TTL.
        let expires = bucket.plus_millis(2 * self.window_ms()).epoch_seconds();
        self.client
            .update_item()
            .table_name(&self.table)
            .key(attr::PK, s(self.window_pk()))
            .key(attr::SK, s(Self::bucket_sk(bucket, shard)))
            .update_expression("ADD #a :a, #t :t, #d :d SET #x = :x")
            .expression_attribute_names("#a", attr::ANSWERED)
            .expression_attribute_names("#t", attr::TECHNICAL)
            .expression_attribute_names("#d", attr::DEADLINES)
            .expression_attribute_names("#x", attr::EXPIRES_AT)
            .expression_attribute_values(":a", n(tally.answered))
            .expression_attribute_values(":t", n(tally.technical))
            .expression_attribute_values(":d", n(tally.deadlines))
            .expression_attribute_values(":x", n(expires))
            .send()
            .await
            .map_err(|e| classify("UpdateItem", &e, crate::dynamo::update_item_kind))?;
        Ok(())
    }
}
