//! The transaction item: record ⇄ DynamoDB attributes, named as in
//! `docs/design.md#the-transaction-item` (times as `Timestamp::to_rfc3339` strings).
//! Optional fields are absent, never NULL — but `mark`: every record this release
//! writes carries it (`NONE` when there is no mark), so an item without it was written
//! by the previous release, whose mark is read from `last_reason`
//! ([`domain::machine::Mark::from_legacy_reason`]).
//!
//! Items arrive in three shapes (the DynamoDB SDK, the DynamoDB Streams SDK, and the
//! DynamoDB JSON of a Lambda stream event); each is flattened into a [`FlatItem`] and
//! decoded once.

use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodbstreams::types::AttributeValue as StreamValue;
use domain::machine::{Actor, Counter, FailedKey, Mark, OperatorNote, PerCounter, ReconcileKey};
use domain::{
    Attempt, CorrelationId, MaxAttempts, Origin, Outcome, ScheduleName, Status, Timestamp,
    TransactionId, TransactionRecord,
};
use std::collections::{BTreeMap, HashMap};
use thiserror::Error;

/// Attribute names of the transaction item.
pub mod attr {
    pub const TRANSACTION_ID: &str = "transaction_id";
    pub const STATUS: &str = "status";
    pub const CURRENT_ATTEMPT: &str = "current_attempt";
    pub const NEXT_ATTEMPT: &str = "next_attempt";
    pub const MAX_ATTEMPTS: &str = "max_attempts";
    pub const NEXT_FIRE_AT: &str = "next_fire_at";
    pub const SCHEDULE_NAME: &str = "schedule_name";
    pub const LAST_OUTCOME: &str = "last_outcome";
    pub const LAST_REASON: &str = "last_reason";
    /// The protocol's mark (`domain::machine::Mark`), `NONE` when there is none.
    pub const MARK: &str = "mark";
    pub const CREATED_AT: &str = "created_at";
    pub const UPDATED_AT: &str = "updated_at";
    pub const LAST_ACTOR: &str = "last_actor";
    pub const LAST_ORIGIN: &str = "last_origin";
    pub const RECONCILE_PK: &str = "reconcile_pk";
    pub const RECONCILE_AT: &str = "reconcile_at";
    pub const ANSWER_DUE_AT: &str = "answer_due_at";
    /// Partition key of the sparse `failed-index` (its sort key is `updated_at`).
    pub const FAILED_PK: &str = "failed_pk";
    /// Who made the last operator write (`OperatorNote::caller`).
    pub const OPERATOR_CALLER: &str = "operator_caller";
    /// The reason that operator gave.
    pub const OPERATOR_REASON: &str = "operator_reason";
    /// The deadline an operator replay set (absent: creation + the deployment's).
    pub const EXPIRES_AT: &str = "expires_at";
    /// The producer's reference given at the start (written by the create only).
    pub const CORRELATION_ID: &str = "correlation_id";
    /// Outbox mode: when the publisher claimed the SENDING record's request (removed
    /// by every write leaving SENDING).
    pub const PUBLISHING_SINCE: &str = "publishing_since";
    /// Payloads table.
    pub const PAYLOAD: &str = "payload";
    pub const PAYLOAD_SHA256: &str = "payload_sha256";

    /// Every attribute a transaction item may carry besides its counters (their
    /// attributes are `domain::machine::Counter::attribute`).
    pub const ALL: [&str; 23] = [
        TRANSACTION_ID,
        STATUS,
        CURRENT_ATTEMPT,
        NEXT_ATTEMPT,
        MAX_ATTEMPTS,
        NEXT_FIRE_AT,
        SCHEDULE_NAME,
        LAST_OUTCOME,
        LAST_REASON,
        MARK,
        CREATED_AT,
        UPDATED_AT,
        LAST_ACTOR,
        LAST_ORIGIN,
        RECONCILE_PK,
        RECONCILE_AT,
        ANSWER_DUE_AT,
        FAILED_PK,
        OPERATOR_CALLER,
        OPERATOR_REASON,
        EXPIRES_AT,
        CORRELATION_ID,
        PUBLISHING_SINCE,
    ];
}

/// A stored item that does not decode into a record.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("item attribute `{attribute}`{}: {problem}", value.as_ref().map(|v| format!(" = {v:?}")).unwrap_or_default())]
pub struct CodecError {
    pub attribute: &'static str,
    pub value: Option<String>,
    pub problem: String,
}

impl CodecError {
    fn new(attribute: &'static str, value: Option<&str>, problem: impl Into<String>) -> Self {
        Self {
            attribute,
            value: value.map(str::to_owned),
            problem: problem.into(),
        }
    }
}

/// One attribute value, reduced to what the codec needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scalar {
    S(String),
    N(String),
    /// Any other type (named), which no attribute of ours uses.
    Other(&'static str),
}

/// An item in any of its three shapes, flattened.
pub type FlatItem = BTreeMap<String, Scalar>;

/// `$name(item)`: an item of the SDK whose attribute value type is `$value`, flattened.
macro_rules! flat_from {
    ($(#[$m:meta])* $name:ident($value:ident)) => {
        $(#[$m])*
        pub fn $name(item: &HashMap<String, $value>) -> FlatItem {
            item.iter()
                .map(|(k, v)| {
                    let s = match v {
                        $value::S(s) => Scalar::S(s.clone()),
                        $value::N(n) => Scalar::N(n.clone()),
                        $value::Null(_) => Scalar::Other("NULL"),
                        $value::Bool(_) => Scalar::Other("BOOL"),
                        _ => Scalar::Other("non-scalar"),
                    };
                    (k.clone(), s)
                })
                .collect()
        }
    };
}

flat_from!(
    /// Flattens an item from the DynamoDB SDK.
    flat_from_dynamodb(AttributeValue)
);
flat_from!(
    /// Flattens an item from the DynamoDB Streams SDK.
    flat_from_streams(StreamValue)
);

/// Flattens an item written in DynamoDB JSON (`{"status": {"S": "SCHEDULED"}, ...}`),
/// as Lambda stream events carry images.
pub fn flat_from_json(value: &serde_json::Value) -> Result<FlatItem, CodecError> {
    let map = value
        .as_object()
        .ok_or_else(|| CodecError::new("(image)", None, "not a JSON object"))?;
    let mut out = FlatItem::new();
    for (k, v) in map {
        let typed = v.as_object().and_then(|o| o.iter().next());
        let s = match typed {
            Some((t, serde_json::Value::String(s))) if t == "S" => Scalar::S(s.clone()),
            Some((t, serde_json::Value::String(n))) if t == "N" => Scalar::N(n.clone()),
            // serde_dynamo writes numbers as strings too; accept a bare JSON number.
            Some((t, serde_json::Value::Number(n))) if t == "N" => Scalar::N(n.to_string()),
            Some((t, _)) if t == "NULL" => Scalar::Other("NULL"),
            _ => Scalar::Other("non-scalar"),
        };
        out.insert(k.clone(), s);
    }
    Ok(out)
}

fn get_s<'a>(item: &'a FlatItem, name: &'static str) -> Result<Option<&'a str>, CodecError> {
    match item.get(name) {
        None => Ok(None),
        Some(Scalar::S(s)) => Ok(Some(s)),
        Some(other) => Err(found_instead(name, "a string (S)", other)),
    }
}

fn need_s<'a>(item: &'a FlatItem, name: &'static str) -> Result<&'a str, CodecError> {
    get_s(item, name)?.ok_or_else(|| CodecError::new(name, None, "missing"))
}

fn get_n(item: &FlatItem, name: &'static str) -> Result<Option<u32>, CodecError> {
    match item.get(name) {
        None => Ok(None),
        Some(Scalar::N(n)) => n
            .parse()
            .map(Some)
            .map_err(|_| CodecError::new(name, Some(n), "not a whole number")),
        Some(other) => Err(found_instead(name, "a number (N)", other)),
    }
}

/// `name` holds `found` where `expected` was wanted.
fn found_instead(name: &'static str, expected: &str, found: &Scalar) -> CodecError {
    let (value, found) = match found {
        Scalar::S(s) => (Some(s.as_str()), "a string"),
        Scalar::N(n) => (Some(n.as_str()), "a number"),
        Scalar::Other(t) => (None, *t),
    };
    CodecError::new(name, value, format!("expected {expected}, found {found}"))
}

fn need_n(item: &FlatItem, name: &'static str) -> Result<u32, CodecError> {
    get_n(item, name)?.ok_or_else(|| CodecError::new(name, None, "missing"))
}

fn ts(name: &'static str, raw: &str) -> Result<Timestamp, CodecError> {
    Timestamp::parse(raw).map_err(|e| CodecError::new(name, Some(raw), e.to_string()))
}

fn attempt(name: &'static str, n: u32) -> Result<Attempt, CodecError> {
    Attempt::new(n).map_err(|e| CodecError::new(name, Some(&n.to_string()), e.to_string()))
}

/// Decodes a transaction record.
pub fn record_from_flat(item: &FlatItem) -> Result<TransactionRecord, CodecError> {
    use attr::*;
    let id_raw = need_s(item, TRANSACTION_ID)?;
    let transaction_id = TransactionId::parse(id_raw)
        .map_err(|e| CodecError::new(TRANSACTION_ID, Some(id_raw), e.to_string()))?;
    let status_raw = need_s(item, STATUS)?;
    let status = Status::parse(status_raw)
        .ok_or_else(|| CodecError::new(STATUS, Some(status_raw), "unknown status"))?;
    let max_raw = need_n(item, MAX_ATTEMPTS)?;
    let max_attempts = MaxAttempts::new(max_raw)
        .map_err(|e| CodecError::new(MAX_ATTEMPTS, Some(&max_raw.to_string()), e.to_string()))?;
    let actor_raw = need_s(item, LAST_ACTOR)?;
    let reconcile = match (get_s(item, RECONCILE_PK)?, get_s(item, RECONCILE_AT)?) {
        (None, None) => None,
        (Some(pk), Some(at)) => Some(ReconcileKey {
            partition: pk.to_owned(),
            at: ts(RECONCILE_AT, at)?,
        }),
        (Some(_), None) => {
            return Err(CodecError::new(
                RECONCILE_AT,
                None,
                "missing while reconcile_pk is set",
            ))
        }
        (None, Some(_)) => {
            return Err(CodecError::new(
                RECONCILE_PK,
                None,
                "missing while reconcile_at is set",
            ))
        }
    };
    Ok(TransactionRecord {
        transaction_id,
        status,
        current_attempt: attempt(CURRENT_ATTEMPT, need_n(item, CURRENT_ATTEMPT)?)?,
        next_attempt: get_n(item, NEXT_ATTEMPT)?
            .map(|n| attempt(NEXT_ATTEMPT, n))
            .transpose()?,
        max_attempts,
        next_fire_at: get_s(item, NEXT_FIRE_AT)?
            .map(|s| ts(NEXT_FIRE_AT, s))
            .transpose()?,
        schedule_name: get_s(item, SCHEDULE_NAME)?
            .map(|s| {
                ScheduleName::from_stored(s)
                    .map_err(|e| CodecError::new(SCHEDULE_NAME, Some(s), e.to_string()))
            })
            .transpose()?,
        last_outcome: get_s(item, LAST_OUTCOME)?
            .map(|s| {
                Outcome::parse(s)
                    .ok_or_else(|| CodecError::new(LAST_OUTCOME, Some(s), "unknown outcome"))
            })
            .transpose()?,
        last_reason: get_s(item, LAST_REASON)?.map(str::to_owned),
        mark: match get_s(item, MARK)? {
            None => Mark::from_legacy_reason(get_s(item, LAST_REASON)?),
            Some(v) => decode_mark(v)?,
        },
        created_at: ts(CREATED_AT, need_s(item, CREATED_AT)?)?,
        updated_at: ts(UPDATED_AT, need_s(item, UPDATED_AT)?)?,
        last_actor: Actor::parse(actor_raw)
            .ok_or_else(|| CodecError::new(LAST_ACTOR, Some(actor_raw), "unknown actor"))?,
        last_origin: get_s(item, LAST_ORIGIN)?
            .map(|s| {
                Origin::parse(s)
                    .ok_or_else(|| CodecError::new(LAST_ORIGIN, Some(s), "unknown origin"))
            })
            .transpose()?,
        reconcile,
        answer_due_at: get_s(item, ANSWER_DUE_AT)?
            .map(|s| ts(ANSWER_DUE_AT, s))
            .transpose()?,
        counts: {
            let mut counts = PerCounter::default();
            for c in Counter::ALL {
                counts[c] = get_n(item, c.attribute())?.unwrap_or(0);
            }
            counts
        },
        failed: get_s(item, FAILED_PK)?.map(|pk| FailedKey {
            partition: pk.to_owned(),
        }),
        operator: match get_s(item, OPERATOR_CALLER)? {
            None => None,
            Some(caller) => Some(Box::new(OperatorNote {
                caller: caller.to_owned(),
                reason: get_s(item, OPERATOR_REASON)?.map(str::to_owned),
            })),
        },
        expires_at: get_s(item, EXPIRES_AT)?
            .map(|s| ts(EXPIRES_AT, s))
            .transpose()?,
        correlation_id: get_s(item, CORRELATION_ID)?
            .map(|s| CorrelationId::new(s).map_err(|e| CodecError::new(CORRELATION_ID, Some(s), e)))
            .transpose()?,
        publishing_since: get_s(item, PUBLISHING_SINCE)?
            .map(|s| ts(PUBLISHING_SINCE, s))
            .transpose()?,
    })
}

/// The stored form of "no mark".
pub const NO_MARK: &str = "NONE";

fn decode_mark(v: &str) -> Result<Option<Mark>, CodecError> {
    if v == NO_MARK {
        return Ok(None);
    }
    Mark::parse(v)
        .map(Some)
        .ok_or_else(|| CodecError::new(attr::MARK, Some(v), "unknown mark"))
}

/// The stored form of a mark.
pub fn mark_value(m: Option<Mark>) -> AttributeValue {
    s(m.map_or(NO_MARK, Mark::as_str))
}

pub(crate) fn s(v: impl Into<String>) -> AttributeValue {
    AttributeValue::S(v.into())
}

pub(crate) fn n(v: impl ToString) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

/// The key of the transaction `id`'s item (the transactions and payloads tables).
pub(crate) fn key(id: &TransactionId) -> HashMap<String, AttributeValue> {
    HashMap::from([(attr::TRANSACTION_ID.to_owned(), s(id.as_str()))])
}

/// Encodes a record as a DynamoDB item (optional fields absent when `None`).
pub fn record_to_item(r: &TransactionRecord) -> HashMap<String, AttributeValue> {
    use attr::*;
    let time = |t: Option<Timestamp>| t.map(|t| s(t.to_rfc3339()));
    let reconcile = r.reconcile.as_ref();
    let operator = r.operator.as_ref();
    let fields = [
        (TRANSACTION_ID, Some(s(r.transaction_id.as_str()))),
        (STATUS, Some(s(r.status.as_str()))),
        (CURRENT_ATTEMPT, Some(n(r.current_attempt.get()))),
        (NEXT_ATTEMPT, r.next_attempt.map(|a| n(a.get()))),
        (MAX_ATTEMPTS, Some(n(r.max_attempts.get()))),
        (NEXT_FIRE_AT, time(r.next_fire_at)),
        (
            SCHEDULE_NAME,
            r.schedule_name.as_ref().map(|x| s(x.as_str())),
        ),
        (LAST_OUTCOME, r.last_outcome.map(|o| s(o.as_str()))),
        (LAST_REASON, r.last_reason.clone().map(s)),
        (MARK, Some(mark_value(r.mark))),
        (CREATED_AT, time(Some(r.created_at))),
        (UPDATED_AT, time(Some(r.updated_at))),
        (LAST_ACTOR, Some(s(r.last_actor.as_str()))),
        (LAST_ORIGIN, r.last_origin.map(|o| s(o.as_str()))),
        (RECONCILE_PK, reconcile.map(|k| s(k.partition.clone()))),
        (RECONCILE_AT, time(reconcile.map(|k| k.at))),
        (ANSWER_DUE_AT, time(r.answer_due_at)),
        (EXPIRES_AT, time(r.expires_at)),
        (
            CORRELATION_ID,
            r.correlation_id.as_ref().map(|c| s(c.as_str())),
        ),
        (PUBLISHING_SINCE, time(r.publishing_since)),
        (FAILED_PK, r.failed.as_ref().map(|k| s(k.partition.clone()))),
        (OPERATOR_CALLER, operator.map(|o| s(o.caller.clone()))),
        (
            OPERATOR_REASON,
            operator.and_then(|o| o.reason.clone()).map(s),
        ),
    ];
    let counts = r
        .counts
        .iter()
        .filter(|(_, k)| **k > 0)
        .map(|(c, k)| (c.attribute(), Some(n(*k))));
    fields
        .into_iter()
        .chain(counts)
        .filter_map(|(name, value)| Some((name.to_owned(), value?)))
        .collect()
}

/// A transaction item as the DynamoDB SDK holds it.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordItem(pub HashMap<String, AttributeValue>);

impl From<&TransactionRecord> for RecordItem {
    fn from(r: &TransactionRecord) -> Self {
        RecordItem(record_to_item(r))
    }
}

impl TryFrom<&RecordItem> for TransactionRecord {
    type Error = CodecError;
    fn try_from(item: &RecordItem) -> Result<Self, CodecError> {
        record_from_flat(&flat_from_dynamodb(&item.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Decoding [`sample`]'s item with `attribute` set to `value`: the error.
    fn sample_with(attribute: &str, value: AttributeValue) -> CodecError {
        let mut item = RecordItem::from(&sample());
        item.0.insert(attribute.into(), value);
        TransactionRecord::try_from(&item).unwrap_err()
    }

    fn sample() -> TransactionRecord {
        let id = TransactionId::parse("TX-100200").unwrap();
        let mut r = TransactionRecord::started(
            id.clone(),
            MaxAttempts::new(4).unwrap(),
            Timestamp::from_millis(1_700_000_000_123),
        );
        r.status = Status::Scheduled;
        r.next_attempt = Some(Attempt::new(2).unwrap());
        r.next_fire_at = Some(Timestamp::from_millis(1_700_007_200_000));
        r.schedule_name = Some(ScheduleName::for_retry(&id, Attempt::new(2).unwrap()));
        r.last_outcome = Some(Outcome::Cancelled);
        r.last_reason = Some("NOT_AVAILABLE".to_owned());
        r.last_actor = Actor::ResponseHandler;
        r.last_origin = Some(Origin::RetryScheduler);
        r.reconcile = ReconcileKey::derive(r.status, &id, 8, r.updated_at, r.next_fire_at);
        r
    }

    #[test]
    fn round_trips_full_and_minimal_records() {
        let full = sample();
        let item = RecordItem::from(&full);
        assert_eq!(
            item.0.len(),
            16,
            "every attribute but the failed key present"
        );
        assert_eq!(item.0["mark"], s("NONE"), "no mark is stored, never absent");
        assert_eq!(TransactionRecord::try_from(&item).unwrap(), full);
        let mut failed = full.clone();
        failed.status = Status::Failed;
        failed.failed = FailedKey::derive(Status::Failed, &failed.transaction_id, 8);
        let item = RecordItem::from(&failed);
        assert_eq!(
            item.0["failed_pk"],
            s(format!("FAILED#{}", failed.transaction_id.shard(8)))
        );
        assert_eq!(TransactionRecord::try_from(&item).unwrap(), failed);
        let mut noted = full.clone();
        noted.operator = Some(Box::new(
            OperatorNote::new("arn:aws:iam::1:user/a", Some("why")).unwrap(),
        ));
        let item = RecordItem::from(&noted);
        assert_eq!(item.0["operator_caller"], s("arn:aws:iam::1:user/a"));
        assert_eq!(item.0["operator_reason"], s("why"));
        assert_eq!(TransactionRecord::try_from(&item).unwrap(), noted);
        assert_eq!(item.0["next_fire_at"], s("2023-11-15T00:13:20.000Z"));
        assert_eq!(item.0["current_attempt"], AttributeValue::N("1".into()));

        let mut claimed = full.clone();
        claimed.status = Status::Sending;
        claimed.publishing_since = Some(Timestamp::from_millis(1_700_000_060_000));
        let item = RecordItem::from(&claimed);
        assert_eq!(
            item.0["publishing_since"],
            s("2023-11-14T22:14:20.000Z"),
            "an instant like the others"
        );
        assert_eq!(TransactionRecord::try_from(&item).unwrap(), claimed);
        let mut item = RecordItem::from(&claimed);
        item.0.insert("publishing_since".into(), n(5));
        let e = TransactionRecord::try_from(&item).unwrap_err();
        assert_eq!(e.attribute, "publishing_since");

        let minimal = TransactionRecord::started(
            TransactionId::parse("TX-1").unwrap(),
            MaxAttempts::new(3).unwrap(),
            Timestamp::from_millis(0),
        );
        let item = RecordItem::from(&minimal);
        assert!(!item.0.contains_key("next_attempt"), "absent, never NULL");
        assert!(
            !item.0.contains_key("publishing_since"),
            "absent when unclaimed"
        );
        assert!(!item.0.contains_key("reconcile_pk"), "sparse index key");
        assert!(!item.0.contains_key("failed_pk"), "sparse index key");
        assert_eq!(TransactionRecord::try_from(&item).unwrap(), minimal);
    }

    #[test]
    fn decoding_errors_name_attribute_and_value() {
        let e = sample_with("status", s("SLEEPING"));
        assert_eq!(e.attribute, "status");
        assert_eq!(
            e.to_string(),
            "item attribute `status` = \"SLEEPING\": unknown status"
        );

        let e = sample_with("current_attempt", s("1"));
        assert!(e.to_string().contains("expected a number"), "{e}");

        let mut item = RecordItem::from(&sample());
        item.0.remove("reconcile_at");
        let e = TransactionRecord::try_from(&item).unwrap_err();
        assert_eq!(e.attribute, "reconcile_at");
    }

    /// GIVEN the items of the previous release (tests/fixtures): no `mark`, the mark
    /// in `last_reason` WHEN decoded THEN the record carries that mark; the same
    /// reason on an item of this release (with `mark`) is only the service's text.
    #[test]
    fn items_of_the_previous_release_decode_with_their_mark() {
        let fixtures: serde_json::Value = serde_json::from_str(include_str!(
            "../tests/fixtures/previous-release-items.json"
        ))
        .unwrap();
        let items = fixtures["items"].as_array().unwrap();
        assert_eq!(items.len(), Mark::LEGACY.len() + 1);
        for case in items {
            let want = case["mark"].as_str().map(|m| Mark::parse(m).unwrap());
            let flat = flat_from_json(&case["item"]).unwrap();
            assert!(!flat.contains_key(attr::MARK));
            let r = record_from_flat(&flat).unwrap();
            assert_eq!(r.mark, want, "{}", case["item"]);
            // Written back by this release: the mark is explicit, and the text in
            // `last_reason` alone no longer makes one.
            let item = record_to_item(&r);
            assert_eq!(item[attr::MARK], mark_value(want));
            let mut this_release = record_to_item(&r);
            this_release.insert(attr::MARK.to_owned(), mark_value(None));
            let r = record_from_flat(&flat_from_dynamodb(&this_release)).unwrap();
            assert_eq!(r.mark, None, "{}", case["item"]);
        }
        let e = sample_with(attr::MARK, s("PAUSED"));
        assert_eq!(
            e.to_string(),
            "item attribute `mark` = \"PAUSED\": unknown mark"
        );
    }

    /// GIVEN an item stored with `correlation_id` and the items of the previous
    /// release WHEN decoded THEN the first has it and is written back the same, the
    /// others have none (expand first: absent = none); an invalid one names the
    /// attribute.
    #[test]
    fn the_correlation_id_is_read_when_present_and_none_before_it_existed() {
        let fixtures: serde_json::Value =
            serde_json::from_str(include_str!("../tests/fixtures/correlated-items.json")).unwrap();
        for case in fixtures["items"].as_array().unwrap() {
            let flat = flat_from_json(&case["item"]).unwrap();
            let r = record_from_flat(&flat).unwrap();
            assert_eq!(
                r.correlation_id.as_ref().map(|c| c.as_str()),
                case["correlation_id"].as_str()
            );
            assert_eq!(flat_from_dynamodb(&record_to_item(&r)), flat);
        }
        let previous: serde_json::Value = serde_json::from_str(include_str!(
            "../tests/fixtures/previous-release-items.json"
        ))
        .unwrap();
        for case in previous["items"].as_array().unwrap() {
            let r = record_from_flat(&flat_from_json(&case["item"]).unwrap()).unwrap();
            assert_eq!(r.correlation_id, None, "{}", case["item"]);
            assert!(!record_to_item(&r).contains_key(attr::CORRELATION_ID));
        }
        let e = sample_with(attr::CORRELATION_ID, s(""));
        assert_eq!(
            e.to_string(),
            "item attribute `correlation_id` = \"\": must not be empty"
        );
    }

    #[test]
    fn dynamodb_json_images_decode_the_same() {
        let r = sample();
        let item = record_to_item(&r);
        let json: serde_json::Map<String, serde_json::Value> = item
            .iter()
            .map(|(k, v)| {
                let typed = match v {
                    AttributeValue::S(x) => serde_json::json!({ "S": x }),
                    AttributeValue::N(x) => serde_json::json!({ "N": x }),
                    _ => unreachable!(),
                };
                (k.clone(), typed)
            })
            .collect();
        let flat = flat_from_json(&serde_json::Value::Object(json)).unwrap();
        assert_eq!(record_from_flat(&flat).unwrap(), r);
    }
}
