//! "Start a transaction" (the library operation services and `retryctl submit` call).

use super::{Ack, Context, Effect, Known, Plan, Rejection, RequestHeader};
use crate::ids::{Attempt, MaxAttempts, TransactionId};
use crate::machine::{Counter, Status, TransactionRecord};
use crate::message::Payload;

/// Conditional create of IN_PROGRESS attempt 1 with its payload and its answer
/// deadline (watched by the reconciler from the start: a start that crashes before
/// its publish is rescued at the deadline), then publish attempt 1 (key `<id>#1`). Repeating it is harmless and never publishes a different payload.
pub fn decide_start(
    known: Known<'_>,
    payload_matches: Option<bool>,
    id: &TransactionId,
    payload: &Payload,
    max_attempts: MaxAttempts,
    ctx: &Context,
) -> Plan {
    let first = |round: u32| {
        Effect::PublishRequest(RequestHeader {
            transaction_id: id.clone(),
            attempt: Attempt::FIRST,
            round: Some(round),
        })
    };
    match known {
        Known::Unread | Known::Missing => vec![
            Effect::Create {
                record: TransactionRecord::started(id.clone(), max_attempts, ctx.now).awaiting(
                    ctx.answer_due(),
                    ctx.threshold_ms(),
                    ctx.rules.shards,
                ),
                payload: payload.clone(),
            },
            first(0),
            Effect::Ack(Ack::Started),
        ],
        Known::Record(_) if payload_matches == Some(false) => {
            vec![Effect::Reject(Rejection::PayloadMismatch {
                transaction_id: id.clone(),
            })]
        }
        // Still waiting on attempt 1: publishing again is harmless (same key).
        Known::Record(r)
            if r.status == Status::InProgress && r.current_attempt == Attempt::FIRST =>
        {
            vec![
                first(r.counts[Counter::Round]),
                Effect::Ack(Ack::AlreadyStarted),
            ]
        }
        Known::Record(_) => vec![Effect::Ack(Ack::AlreadyStarted)],
    }
}
