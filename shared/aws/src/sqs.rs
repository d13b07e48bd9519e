//! SQS adapters: the request publisher (body `Request::to_json()`, message attribute
//! `idempotency_key`), the retry-event publisher (body `RetryEvent::to_json()`), and
//! [`send_to_dlq`], which the handlers use to park a message that can never succeed
//! (body and attributes unchanged) before acknowledging it.

use crate::errors::classify;
use crate::meter::{Call, CallMeter};
use aws_sdk_sqs::operation::send_message::SendMessageError;
use aws_sdk_sqs::types::MessageAttributeValue;
use aws_sdk_sqs::Client;
use domain::ports::{ErrorKind, PortError, RequestPublisher, RetryPublisher};
use domain::{Request, RetryEvent};
use std::collections::HashMap;

/// The message attribute carrying the idempotency key on request messages.
pub const IDEMPOTENCY_KEY_ATTRIBUTE: &str = "idempotency_key";

fn send_kind(e: &SendMessageError) -> Option<ErrorKind> {
    match e {
        SendMessageError::RequestThrottled(_) | SendMessageError::KmsThrottled(_) => {
            Some(ErrorKind::Retryable)
        }
        SendMessageError::QueueDoesNotExist(_)
        | SendMessageError::InvalidMessageContents(_)
        | SendMessageError::InvalidAddress(_)
        | SendMessageError::InvalidSecurity(_)
        | SendMessageError::UnsupportedOperation(_)
        | SendMessageError::KmsAccessDenied(_)
        | SendMessageError::KmsDisabled(_)
        | SendMessageError::KmsInvalidKeyUsage(_)
        | SendMessageError::KmsInvalidState(_)
        | SendMessageError::KmsNotFound(_)
        | SendMessageError::KmsOptInRequired(_) => Some(ErrorKind::Permanent),
        _ => None,
    }
}

/// A `String` message attribute.
pub fn string_attribute(value: impl Into<String>) -> Result<MessageAttributeValue, PortError> {
    MessageAttributeValue::builder()
        .data_type("String")
        .string_value(value)
        .build()
        .map_err(|e| PortError::permanent("SendMessage", e.to_string()))
}

async fn send(
    client: &Client,
    meter: &CallMeter,
    queue_url: &str,
    body: &str,
    attributes: Option<HashMap<String, MessageAttributeValue>>,
) -> Result<(), PortError> {
    meter.count(Call::Send);
    client
        .send_message()
        .queue_url(queue_url)
        .message_body(body)
        .set_message_attributes(attributes.filter(|a| !a.is_empty()))
        .send()
        .await
        .map(|_| ())
        .map_err(|e| classify("SendMessage", &e, send_kind))
}

/// Publishes requests to the external service's queue.
#[derive(Debug, Clone)]
pub struct SqsRequestPublisher {
    client: Client,
    queue_url: String,
    meter: CallMeter,
}

impl SqsRequestPublisher {
    pub fn new(client: Client, queue_url: impl Into<String>) -> Self {
        Self {
            client,
            queue_url: queue_url.into(),
            meter: CallMeter::new(),
        }
    }

    pub fn with_meter(mut self, meter: CallMeter) -> Self {
        self.meter = meter;
        self
    }
}

impl RequestPublisher for SqsRequestPublisher {
    async fn publish(&self, request: &Request) -> Result<(), PortError> {
        let attrs = HashMap::from([(
            IDEMPOTENCY_KEY_ATTRIBUTE.to_owned(),
            string_attribute(request.idempotency_key.as_str())?,
        )]);
        send(
            &self.client,
            &self.meter,
            &self.queue_url,
            &request.to_json(),
            Some(attrs),
        )
        .await
    }
}

/// Puts retry events on the retry queue (reconciler, operator).
#[derive(Debug, Clone)]
pub struct SqsRetryPublisher {
    client: Client,
    queue_url: String,
    meter: CallMeter,
}

impl SqsRetryPublisher {
    pub fn new(client: Client, queue_url: impl Into<String>) -> Self {
        Self {
            client,
            queue_url: queue_url.into(),
            meter: CallMeter::new(),
        }
    }

    pub fn with_meter(mut self, meter: CallMeter) -> Self {
        self.meter = meter;
        self
    }
}

impl RetryPublisher for SqsRetryPublisher {
    async fn publish(&self, event: &RetryEvent) -> Result<(), PortError> {
        send(
            &self.client,
            &self.meter,
            &self.queue_url,
            &event.to_json(),
            None,
        )
        .await
    }
}

/// Sends a message, body and attributes unchanged, to a dead-letter queue.
pub async fn send_to_dlq(
    client: &Client,
    queue_url: &str,
    body: &str,
    attributes: HashMap<String, MessageAttributeValue>,
) -> Result<(), PortError> {
    send(client, &CallMeter::new(), queue_url, body, Some(attributes)).await
}

/// [`send_to_dlq`], counted in `meter`.
pub async fn send_to_dlq_metered(
    client: &Client,
    meter: &CallMeter,
    queue_url: &str,
    body: &str,
    attributes: HashMap<String, MessageAttributeValue>,
) -> Result<(), PortError> {
    send(client, meter, queue_url, body, Some(attributes)).await
}
