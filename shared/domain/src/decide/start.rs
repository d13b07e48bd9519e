//! "Start a transaction" (the library operation services and `retryctl submit` call).

use super::{Ack, Context, Effect, Known, Plan, Rejection, RequestHeader};
use crate::ids::{Attempt, CorrelationId, MaxAttempts, TransactionId};
use crate::machine::{Status, TransactionRecord};
use crate::message::Payload;

/// Conditional create of IN_PROGRESS attempt 1 with its payload and its answer
/// deadline (watched by the reconciler from the start: a start that crashes before
/// its publish is rescued at the deadline), then publish attempt 1 (key `<id>#1`). Repeating it is harmless and never publishes a different payload.
/// The record keeps the `correlation_id` of the start that created it; a repeat
/// sends the stored one.
///
/// In outbox mode the create is the intent: the record is created SENDING(1) and the
/// publisher sends attempt 1; a repeat publishes nothing.
pub fn decide_start(
    known: Known<'_>,
    payload_matches: Option<bool>,
    id: &TransactionId,
    payload: &Payload,
    max_attempts: MaxAttempts,
    correlation_id: Option<&CorrelationId>,
    ctx: &Context,
) -> Plan {
    match known {
        Known::Unread | Known::Missing if ctx.outbox() => {
            let record = TransactionRecord::started_queued(
                id.clone(),
                max_attempts,
                ctx.now,
                ctx.rules.shards,
            )
            .correlated(correlation_id.cloned());
            vec![
                Effect::Create {
                    record,
                    payload: payload.clone(),
                },
                Effect::Ack(Ack::Started),
            ]
        }
        Known::Unread | Known::Missing => {
            let record = TransactionRecord::started(id.clone(), max_attempts, ctx.now)
                .correlated(correlation_id.cloned())
                .awaiting(ctx.answer_due(), ctx.threshold_ms(), ctx.rules.shards);
            let first = Effect::PublishRequest(RequestHeader::of(&record, Attempt::FIRST));
            vec![
                Effect::Create {
                    record,
                    payload: payload.clone(),
                },
                first,
                Effect::Ack(Ack::Started),
            ]
        }
        Known::Record(_) if payload_matches == Some(false) => {
            vec![Effect::Reject(Rejection::PayloadMismatch {
                transaction_id: id.clone(),
            })]
        }
        // Still waiting on attempt 1: publishing again is harmless (same key). Never
        // in outbox mode: the publisher sends it, once.
        Known::Record(r)
            if !ctx.outbox()
                && r.status == Status::InProgress
                && r.current_attempt == Attempt::FIRST =>
        {
            vec![
                Effect::PublishRequest(RequestHeader::of(r, Attempt::FIRST)),
                Effect::Ack(Ack::AlreadyStarted),
            ]
        }
        Known::Record(_) => vec![Effect::Ack(Ack::AlreadyStarted)],
    }
}
