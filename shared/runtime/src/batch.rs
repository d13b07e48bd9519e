//! The SQS batch processor the SQS-triggered functions use. It takes [`SqsEvent`] (not
//! `SqsEventObj<T>`, which fails the whole batch on one bad body) and parses each body on
//! its own with the domain's parser; processes records concurrently, at most
//! [`BatchOptions::concurrency`] at a time, each in one tracing span (`message_id`,
//! `transaction_id`, `attempt`); catches a panic per record (`catch_unwind`: the release
//! profile keeps `panic = "unwind"`); and returns an [`SqsBatchResponse`] listing
//! exactly the records SQS must redeliver. Per record, by [`Verdict`]: done or dropped →
//! acknowledged; retryable → batch item failure; permanent → an ERROR log naming the
//! field and value, a metric, the original message to the queue's DLQ
//! ([`DeadLetter`]), then acknowledged — or, if that send fails, a batch item failure.
//! See `docs/functions.md#sqs-batches-partial-batch-failures`.

use crate::metric::Metric;
use crate::metrics::{names, Metrics};
use crate::verdict::{Permanent, Verdict};
use aws_lambda_events::sqs::{SqsBatchResponse, SqsEvent, SqsMessage};
use domain::message::MessageError;
use domain::ports::{DeadLetter, MessageAttribute, PortError, Undeliverable};
use domain::{Attempt, Request, Response, RetryEvent, TransactionId};
use futures::{FutureExt, StreamExt};
use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use thiserror::Error;
use tracing::{field, Instrument};

/// How a batch is processed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchOptions {
    /// Records processed at the same time (BATCH_CONCURRENCY).
    pub concurrency: usize,
}

impl Default for BatchOptions {
    fn default() -> Self {
        Self {
            concurrency: domain::defaults::BATCH_CONCURRENCY,
        }
    }
}

/// A message type an SQS handler consumes.
pub trait Inbound: Sized + Send {
    /// Parses a body; the error names the field and the value at fault.
    fn parse(body: &str) -> Result<Self, MessageError>;
    fn transaction_id(&self) -> &TransactionId;
    fn attempt(&self) -> Attempt;
}

/// `Inbound` for messages that parse themselves and carry their transaction id and
/// attempt as fields.
macro_rules! inbound {
    ($($message:ty),*) => {$(
        impl Inbound for $message {
            fn parse(body: &str) -> Result<Self, MessageError> {
                <$message>::parse(body)
            }
            fn transaction_id(&self) -> &TransactionId {
                &self.transaction_id
            }
            fn attempt(&self) -> Attempt {
                self.attempt
            }
        }
    )*};
}

inbound!(Response, Request, RetryEvent);

impl Inbound for domain::intake::StartMessage {
    fn parse(body: &str) -> Result<Self, MessageError> {
        domain::intake::StartMessage::parse(body)
    }
    fn transaction_id(&self) -> &TransactionId {
        &self.transaction_id
    }
    /// A start is always about attempt 1.
    fn attempt(&self) -> Attempt {
        Attempt::FIRST
    }
}

/// A batch the processor cannot answer record by record.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum BatchError {
    /// A record to retry has no message id: no `itemIdentifier` can name it, so the
    /// whole batch fails (SQS redelivers all of it; everything is idempotent).
    #[error("record #{index} must be retried but has no messageId")]
    MissingMessageId { index: usize },
}

/// A received message as the dead-letter port keeps it: the body and every message
/// attribute as they came (an attribute without a data type is `Binary` when it
/// carries bytes, `String` otherwise).
pub fn undeliverable(m: &SqsMessage) -> Undeliverable {
    Undeliverable {
        body: m.body.clone().unwrap_or_default(),
        attributes: m
            .message_attributes
            .iter()
            .map(|(name, a)| {
                let data_type = a.data_type.clone().unwrap_or_else(|| {
                    if a.binary_value.is_some() {
                        "Binary"
                    } else {
                        "String"
                    }
                    .to_owned()
                });
                let attribute = MessageAttribute {
                    data_type,
                    string_value: a.string_value.clone(),
                    binary_value: a.binary_value.as_ref().map(|b| b.0.clone()),
                };
                (name.clone(), attribute)
            })
            .collect(),
    }
}

/// The text of a caught panic.
pub fn panic_message(p: &(dyn Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_owned()
    }
}

/// Processes a batch: see the module documentation.
pub async fn process_batch<M, F, Fut, D>(
    event: SqsEvent,
    options: &BatchOptions,
    dead_letter: &D,
    metrics: &Metrics,
    handler: F,
) -> Result<SqsBatchResponse, BatchError>
where
    M: Inbound,
    F: Fn(M) -> Fut,
    Fut: Future<Output = Verdict>,
    D: DeadLetter,
{
    let handler = &handler;
    let retry: Vec<(usize, Option<String>)> =
        futures::stream::iter(event.records.into_iter().enumerate())
            .map(|(index, record)| async move {
                let id = record.message_id.clone();
                let failed = process_record(record, dead_letter, metrics, handler).await;
                failed.then_some((index, id))
            })
            .buffer_unordered(options.concurrency.max(1))
            .filter_map(|x| async move { x })
            .collect()
            .await;
    let mut retry = retry;
    retry.sort_by_key(|(index, _)| *index);
    let mut response = SqsBatchResponse::default();
    for (index, id) in retry {
        match id {
            Some(id) if !id.is_empty() => response.add_failure(id),
            _ => return Err(BatchError::MissingMessageId { index }),
        }
    }
    Ok(response)
}

/// One record; `true` when SQS must redeliver it.
async fn process_record<M, F, Fut, D>(
    record: SqsMessage,
    dead_letter: &D,
    metrics: &Metrics,
    handler: &F,
) -> bool
where
    M: Inbound,
    F: Fn(M) -> Fut,
    Fut: Future<Output = Verdict>,
    D: DeadLetter,
{
    let message_id = record.message_id.clone().unwrap_or_default();
    let span = tracing::info_span!(
        "record",
        message_id = %message_id,
        transaction_id = field::Empty,
        attempt = field::Empty,
    );
    let inner_span = span.clone();
    async move {
        metrics.incr(names::RECORDS);
        let body = record.body.as_deref().unwrap_or("");
        let decided = AssertUnwindSafe(async {
            match M::parse(body) {
                Err(e) => Verdict::Permanent(Permanent::malformed(&e, body)),
                Ok(msg) => {
                    inner_span.record("transaction_id", msg.transaction_id().as_str());
                    inner_span.record("attempt", msg.attempt().get());
                    handler(msg).await
                }
            }
        })
        .catch_unwind()
        .await;
        let verdict = match decided {
            Ok(v) => v,
            Err(p) => {
                metrics.incr(names::RECORD_PANICS);
                let msg = panic_message(p.as_ref());
                tracing::error!(panic = %msg, "record processing panicked; reported as a batch item failure");
                Verdict::Retry {
                    error: format!("panic: {msg}"),
                }
            }
        };
        match verdict {
            Verdict::Handled(label) => {
                tracing::info!(result = label, "record done");
                false
            }
            Verdict::Done(a) => {
                tracing::info!(result = a.label(), "record done");
                false
            }
            Verdict::Dropped(d) => {
                tracing::info!(result = d.label(), "record dropped: nothing to do");
                false
            }
            Verdict::Retry { error } => {
                metrics.incr(names::RETRYABLE_ERRORS);
                tracing::warn!(error = %error, "retryable error; reported as a batch item failure");
                true
            }
            Verdict::Permanent(p) => {
                metrics.incr(names::PERMANENT_ERRORS);
                metrics.record(Metric::PermanentError(&p.reason));
                tracing::error!(
                    reason = p.reason.label(),
                    field = p.field.as_deref().unwrap_or(""),
                    value = p.value.as_deref().unwrap_or(""),
                    error = %p.detail,
                    "permanent error: message sent unchanged to the dead-letter queue"
                );
                let sent = AssertUnwindSafe(dead_letter.send(&undeliverable(&record)))
                    .catch_unwind()
                    .await
                    .unwrap_or_else(|p| {
                        metrics.incr(names::RECORD_PANICS);
                        Err(PortError::retryable(
                            "SendMessage",
                            format!("panic: {}", panic_message(p.as_ref())),
                        ))
                    });
                match sent {
                    Ok(()) => {
                        metrics.incr(names::DEAD_LETTERED);
                        false
                    }
                    Err(e) => {
                        metrics.incr(names::DEAD_LETTER_FAILURES);
                        tracing::error!(error = %e, "sending to the dead-letter queue failed; reported as a batch item failure");
                        true
                    }
                }
            }
        }
    }
    .instrument(span)
    .await
}

#[cfg(test)]
mod tests;
