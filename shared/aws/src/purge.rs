//! The record's TTL in a conditional write: set by the write that ends a transaction,
//! removed by the write that reopens one (`domain::retention::purge_at`). Apart from
//! `dynamo` (which applies it to every transition) and from `retention` (the erasure
//! and the payload's TTL, which use `dynamo`).

use aws_sdk_dynamodb::types::AttributeValue;
use domain::machine::Write;
use domain::retention::{purge_at, Retention};
use domain::Status;
use std::collections::HashMap;

/// TTL attribute (Number, epoch seconds) of a transaction item and of its payload
/// item: the instant a finished transaction may be deleted. Absent while it is live.
pub const PURGE_AT: &str = "purge_at";

/// Adds the record's TTL to `update` (with its placeholders in `names` and `values`),
/// the update expression of `w`: set to `domain::retention::purge_at` of the write's
/// instant when the write ends the transaction and `retention` is given; removed when
/// the write leaves a terminal status for a live one. Any other write does not touch
/// it.
pub fn with_purge(
    update: &mut String,
    names: &mut HashMap<String, String>,
    values: &mut HashMap<String, AttributeValue>,
    w: &Write,
    retention: Option<Retention>,
) {
    let name = format!("#{PURGE_AT}");
    let to = w.to();
    if let Some(at) = retention.and_then(|r| purge_at(to, w.set.updated_at, r)) {
        let value = format!(":v_{PURGE_AT}");
        names.insert(name.clone(), PURGE_AT.to_owned());
        values.insert(
            value.clone(),
            AttributeValue::N(at.epoch_seconds().to_string()),
        );
        *update = match update.strip_prefix("SET ") {
            Some(rest) => format!("SET {name} = {value}, {rest}"),
            None => format!("SET {name} = {value} {update}"),
        };
    } else if !to.is_terminal() && w.from().iter().any(Status::is_terminal) {
        names.insert(name.clone(), PURGE_AT.to_owned());
        if update.contains(" REMOVE ") {
            update.push_str(&format!(", {name}"));
        } else {
            update.push_str(&format!(" REMOVE {name}"));
        }
    }
}
