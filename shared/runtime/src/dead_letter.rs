//! The dead-letter port: where a message that can never succeed is kept for a human.
//!
//! A permanent error (malformed body, unknown transaction, a rejected input) is not
//! retried pointlessly: the batch processor sends the **original** message — body and
//! message attributes exactly as received — to the consumed queue's DLQ, then
//! acknowledges it. If that send fails, the record is reported as a batch item failure
//! instead, so the message is never lost (SQS's redrive policy moves it to the same
//! DLQ after `maxReceiveCount`).

use aws_lambda_events::sqs::SqsMessage;
use domain::ports::PortError;
use std::future::Future;
use std::sync::Mutex;

/// Sends a received SQS message, unchanged, to a dead-letter queue.
pub trait DeadLetter: Send + Sync {
    fn send(&self, message: &SqsMessage) -> impl Future<Output = Result<(), PortError>> + Send;
}

impl<T: DeadLetter> DeadLetter for &T {
    fn send(&self, message: &SqsMessage) -> impl Future<Output = Result<(), PortError>> + Send {
        (**self).send(message)
    }
}

/// A dead-letter queue in memory (tests, local stack). It can be told to fail, to
/// prove that a failed send never loses a record.
#[derive(Debug, Default)]
pub struct MemoryDeadLetter {
    messages: Mutex<Vec<SqsMessage>>,
    failing: Mutex<bool>,
}

impl MemoryDeadLetter {
    pub fn new() -> Self {
        Self::default()
    }

    /// The messages received, in order.
    pub fn messages(&self) -> Vec<SqsMessage> {
        self.messages
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// While `true`, every send fails with a retryable error.
    pub fn set_failing(&self, failing: bool) {
        *self.failing.lock().unwrap_or_else(|e| e.into_inner()) = failing;
    }
}

impl DeadLetter for MemoryDeadLetter {
    async fn send(&self, message: &SqsMessage) -> Result<(), PortError> {
        if *self.failing.lock().unwrap_or_else(|e| e.into_inner()) {
            return Err(PortError::retryable(
                "SendMessage",
                "dead-letter queue unavailable",
            ));
        }
        self.messages
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(message.clone());
        Ok(())
    }
}
