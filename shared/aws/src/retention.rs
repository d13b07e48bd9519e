//! Retention and erasure in DynamoDB (the rule: `domain::retention`).
//!
//! - The record's TTL [`PURGE_AT`] is set by the terminal write itself (the same
//!   conditional `UpdateItem`, `purge::with_purge`) and removed by a replay's write,
//!   so a live record never carries it.
//! - The payload's is set and removed by the audit writer from the table's stream
//!   ([`set_payload_purge`]): it expires only after its transaction ended.
//! - An erasure deletes the payload ([`delete_payload`]) and the reason texts of the
//!   record ([`scrub_record`]) and of its audit entries (`AuditWriter::erase_reasons`).
//!
//! Why and what is kept: `docs/deploy.md#data-we-keep`.

use crate::errors::classify;
use crate::item::{attr, key, s};
use aws_sdk_dynamodb::operation::delete_item::DeleteItemError;
use aws_sdk_dynamodb::operation::update_item::{
    builders::UpdateItemFluentBuilder, UpdateItemError,
};
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue};
use aws_sdk_dynamodb::Client;
use domain::ports::PortError;
use domain::retention::{Erased, ErasedSet};
use domain::{Status, Timestamp, TransactionId};

pub use crate::purge::{with_purge, PURGE_AT};

/// A Number attribute of epoch seconds.
fn epoch(t: Timestamp) -> AttributeValue {
    AttributeValue::N(t.epoch_seconds().to_string())
}

/// An UpdateItem of the item of `id` in `table`.
fn update(client: &Client, table: &str, id: &TransactionId) -> UpdateItemFluentBuilder {
    client
        .update_item()
        .table_name(table)
        .set_key(Some(key(id)))
}

/// Sets (`Some`) or removes (`None`) the TTL of the payload of `id` in `table`, if
/// the payload is there (an erased one is not created again). Returns whether it was.
pub async fn set_payload_purge(
    client: &Client,
    table: &str,
    id: &TransactionId,
    at: Option<Timestamp>,
) -> Result<bool, PortError> {
    let mut call = update(client, table, id)
        .condition_expression("attribute_exists(#id)")
        .expression_attribute_names("#id", attr::TRANSACTION_ID)
        .expression_attribute_names("#x", PURGE_AT);
    call = match at {
        Some(t) => call
            .update_expression("SET #x = :x")
            .expression_attribute_values(":x", epoch(t)),
        None => call.update_expression("REMOVE #x"),
    };
    crate::dynamo::condition_held(call.send().await)
}

/// Deletes the payload of `id` from `table`. Returns whether there was one.
pub async fn delete_payload(
    client: &Client,
    table: &str,
    id: &TransactionId,
) -> Result<bool, PortError> {
    let out = client
        .delete_item()
        .table_name(table)
        .set_key(Some(key(id)))
        .return_values(ReturnValue::AllOld)
        .send()
        .await
        .map_err(|e| classify("DeleteItem", &e, delete_item_kind))?;
    Ok(out.attributes().is_some_and(|a| !a.is_empty()))
}

/// Removes the reason texts (the service's `last_reason`, the operator's
/// `operator_reason`) from the record of `id` in `table`, only while the record is
/// finished (the condition: SUCCEEDED or FAILED). Returns what it removed. A record
/// that is gone or live again fails the condition: a permanent error naming the
/// transaction, nothing removed.
pub async fn scrub_record(
    client: &Client,
    table: &str,
    id: &TransactionId,
) -> Result<ErasedSet, PortError> {
    let out = update(client, table, id)
        .update_expression("REMOVE #r, #o")
        .condition_expression("attribute_exists(#id) AND #st IN (:ok, :failed)")
        .expression_attribute_names("#r", attr::LAST_REASON)
        .expression_attribute_names("#o", attr::OPERATOR_REASON)
        .expression_attribute_names("#id", attr::TRANSACTION_ID)
        .expression_attribute_names("#st", attr::STATUS)
        .expression_attribute_values(":ok", s(Status::Succeeded.as_str()))
        .expression_attribute_values(":failed", s(Status::Failed.as_str()))
        .return_values(ReturnValue::UpdatedOld)
        .send()
        .await;
    match out {
        Ok(out) => {
            let old = out.attributes();
            let had = |a: &str| old.is_some_and(|o| o.contains_key(a));
            let mut erased = ErasedSet::default();
            if had(attr::LAST_REASON) {
                erased.insert(Erased::ServiceReason);
            }
            if had(attr::OPERATOR_REASON) {
                erased.insert(Erased::OperatorReason);
            }
            Ok(erased)
        }
        Err(e)
            if e.as_service_error()
                .is_some_and(UpdateItemError::is_conditional_check_failed_exception) =>
        {
            Err(PortError::permanent(
                "UpdateItem",
                format!("transaction `{id}` is no longer SUCCEEDED or FAILED: nothing erased from its record"),
            ))
        }
        Err(e) => Err(classify("UpdateItem", &e, crate::dynamo::update_item_kind)),
    }
}

crate::errors::error_kinds!(dynamodb
    /// How a DeleteItem error is classified.
    fn delete_item_kind(DeleteItemError) {
        retryable: [TransactionConflictException, ReplicatedWriteConflictException],
        permanent: [ResourceNotFoundException],
    }
);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dynamo::update_expression;
    use domain::machine::{Actor, Write};
    use domain::retention::Retention;
    use domain::{arrow, Event};

    fn id() -> TransactionId {
        TransactionId::parse("TX-1").unwrap()
    }

    /// The expression of `w` as the store sends it.
    fn sent(w: &Write, r: Option<Retention>) -> crate::dynamo::UpdateExpr {
        let mut x = update_expression(w);
        with_purge(&mut x.update, &mut x.names, &mut x.values, w, r);
        x
    }

    #[test]
    fn only_a_terminal_write_sets_the_ttl_and_only_a_reopening_removes_it() {
        let r = Some(Retention::days(30).unwrap());
        let at = Timestamp::from_millis(86_400_000);
        let write = |arrow, actor| Write::new(id(), arrow, at, actor);
        let end = write(
            arrow!([Status::InProgress], Event::Success),
            Actor::ResponseHandler,
        );
        let x = sent(&end, r);
        assert!(
            x.update.starts_with("SET #purge_at = :v_purge_at, "),
            "{}",
            x.update
        );
        assert_eq!(
            x.values[":v_purge_at"],
            AttributeValue::N((86_400 * 31).to_string())
        );
        // Without a retention the terminal write is unchanged.
        assert_eq!(sent(&end, None), update_expression(&end));

        let live = write(
            arrow!([Status::InProgress], Event::ResponseCancelledRetry),
            Actor::ResponseHandler,
        );
        assert_eq!(sent(&live, r), update_expression(&live));

        let replay = write(
            arrow!([Status::Failed], Event::OperatorReplay),
            Actor::Operator,
        );
        let x = sent(&replay, r);
        assert!(
            x.update.contains(" REMOVE ") && x.update.ends_with("#purge_at"),
            "{}",
            x.update
        );
        assert_eq!(x.names["#purge_at"], PURGE_AT);
    }
}
