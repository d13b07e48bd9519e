//! SQS adapters: the request publisher (body `Request::to_json()`, attributes
//! `idempotency_key` and `correlation_id` when there is one), the retry-event publisher,
//! the HTTP bridge's response publisher, and [`SqsDeadLetter`], where a handler parks a
//! message that can never succeed (body and attributes unchanged) before acknowledging
//! it. Every message carries the invocation's X-Ray trace header ([`trace_attribute`]).
//! A FIFO queue (URL ending `.fifo`: outbox mode's request queue and DLQ) gets
//! `MessageDeduplicationId` and `MessageGroupId` from `RequestHeader`, made to fit by
//! [`fifo_id`]; a dead letter gets a never-repeated id, so a message dead-lettered twice
//! is kept twice. [`SqsDirectory`] resolves queue ARNs to URLs (`retryctl redrive`, the
//! local stack's Scheduler emulator). Why and how: `docs/adapters.md`.

use crate::errors::classify;
use aws_sdk_sqs::operation::send_message::SendMessageError;
use aws_sdk_sqs::primitives::Blob;
use aws_sdk_sqs::types::{
    MessageAttributeValue, MessageSystemAttributeNameForSends, MessageSystemAttributeValue,
};
use aws_sdk_sqs::Client;
use domain::ports::{
    DeadLetter, MessageAttribute, PortError, RequestPublisher, RetryPublisher, Undeliverable,
};
use domain::{Request, Response, RetryEvent};
use std::collections::HashMap;
use std::sync::Arc;

/// The message attribute carrying the idempotency key on request messages.
pub const IDEMPOTENCY_KEY_ATTRIBUTE: &str = "idempotency_key";
/// The message attribute carrying the transaction's correlation id on request
/// messages (absent when it has none).
pub const CORRELATION_ID_ATTRIBUTE: &str = "correlation_id";

crate::errors::error_kinds!(
    fn send_kind(SendMessageError) {
        retryable: [RequestThrottled, KmsThrottled],
        permanent: [
            QueueDoesNotExist, InvalidMessageContents, InvalidAddress, InvalidSecurity,
            UnsupportedOperation, KmsAccessDenied, KmsDisabled, KmsInvalidKeyUsage,
            KmsInvalidState, KmsNotFound, KmsOptInRequired,
        ],
    }
);

/// A `String` message attribute.
pub fn string_attribute(value: impl Into<String>) -> Result<MessageAttributeValue, PortError> {
    MessageAttributeValue::builder()
        .data_type("String")
        .string_value(value)
        .build()
        .map_err(|e| PortError::permanent("SendMessage", e.to_string()))
}

/// The environment variable the Lambda runtime sets to the invocation's X-Ray trace
/// header (`Root=…;Parent=…;Sampled=…`) before each invocation.
pub const LAMBDA_TRACE_ENV: &str = "_X_AMZN_TRACE_ID";

/// The `AWSTraceHeader` system attribute of a message sent under the trace header
/// `header` (the invocation's, [`LAMBDA_TRACE_ENV`]): none outside Lambda or without
/// a `Root`, so the consumer's invocation continues the sender's trace only when
/// there is one.
pub fn trace_attribute(
    header: Option<&str>,
) -> Option<HashMap<MessageSystemAttributeNameForSends, MessageSystemAttributeValue>> {
    let header = header.map(str::trim).filter(|h| h.contains("Root="))?;
    let value = MessageSystemAttributeValue::builder()
        .data_type("String")
        .string_value(header)
        .build()
        .ok()?;
    Some(HashMap::from([(
        MessageSystemAttributeNameForSends::AwsTraceHeader,
        value,
    )]))
}

/// SQS's bound on a FIFO message's `MessageDeduplicationId` and `MessageGroupId`, in
/// characters (each one of `a-z`, `A-Z`, `0-9` and the ASCII punctuation).
pub const FIFO_ID_MAX_CHARS: usize = 128;

/// The prefix of a [`fifo_id`] that had to be hashed.
pub const FIFO_ID_HASH_PREFIX: &str = "sha256-";

/// True for a FIFO queue's URL: SQS requires a FIFO queue's name to end in `.fifo`.
pub fn is_fifo_queue(queue_url: &str) -> bool {
    queue_url.ends_with(".fifo")
}

/// `raw` as a FIFO `MessageDeduplicationId` or `MessageGroupId`: itself when SQS
/// accepts it (1 to [`FIFO_ID_MAX_CHARS`] characters, each an ASCII letter, digit or
/// punctuation), otherwise [`FIFO_ID_HASH_PREFIX`] and its SHA-256 in hex (71
/// characters). A transaction id may have 128 characters of any Unicode but control
/// characters (`domain::ids`), so `<id>#<attempt>#<round>` may be longer or hold a
/// space or a letter SQS refuses; the hash keeps one id per text, and distinct texts
/// apart.
pub fn fifo_id(raw: &str) -> String {
    let accepted = !raw.is_empty()
        && raw.len() <= FIFO_ID_MAX_CHARS
        && raw.bytes().all(|b| b.is_ascii_graphic());
    if accepted {
        return raw.to_owned();
    }
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(raw.as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("{FIFO_ID_HASH_PREFIX}{hex}")
}

/// The FIFO system fields of one message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FifoIds {
    pub deduplication_id: String,
    pub group_id: String,
}

async fn send(
    client: &Client,
    queue_url: &str,
    body: &str,
    attributes: Option<HashMap<String, MessageAttributeValue>>,
    delay_seconds: u32,
) -> Result<(), PortError> {
    send_in(client, queue_url, body, attributes, delay_seconds, None).await
}

async fn send_in(
    client: &Client,
    queue_url: &str,
    body: &str,
    attributes: Option<HashMap<String, MessageAttributeValue>>,
    delay_seconds: u32,
    fifo: Option<FifoIds>,
) -> Result<(), PortError> {
    let trace = std::env::var(LAMBDA_TRACE_ENV).ok();
    let (deduplication_id, group_id) = fifo.map(|f| (f.deduplication_id, f.group_id)).unzip();
    client
        .send_message()
        .queue_url(queue_url)
        .message_body(body)
        .set_message_attributes(attributes.filter(|a| !a.is_empty()))
        .set_message_system_attributes(trace_attribute(trace.as_deref()))
        .set_delay_seconds(
            (delay_seconds > 0).then(|| i32::try_from(delay_seconds).unwrap_or(i32::MAX)),
        )
        .set_message_deduplication_id(deduplication_id)
        .set_message_group_id(group_id)
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
}

impl SqsRequestPublisher {
    pub fn new(client: Client, queue_url: impl Into<String>) -> Self {
        Self {
            client,
            queue_url: queue_url.into(),
        }
    }
}

impl RequestPublisher for SqsRequestPublisher {
    async fn publish(&self, request: &Request) -> Result<(), PortError> {
        let mut attrs = HashMap::from([(
            IDEMPOTENCY_KEY_ATTRIBUTE.to_owned(),
            string_attribute(request.idempotency_key.as_str())?,
        )]);
        if let Some(c) = &request.correlation_id {
            attrs.insert(
                CORRELATION_ID_ATTRIBUTE.to_owned(),
                string_attribute(c.as_str())?,
            );
        }
        let fifo = is_fifo_queue(&self.queue_url).then(|| request_fifo_ids(request));
        send_in(
            &self.client,
            &self.queue_url,
            &request.to_json(),
            Some(attrs),
            0,
            fifo,
        )
        .await
    }
}

/// A request's FIFO ids: the header's deduplication id (one per transaction, attempt
/// and round) and group (the transaction), each fitted by [`fifo_id`].
pub fn request_fifo_ids(request: &Request) -> FifoIds {
    let header = domain::decide::RequestHeader {
        transaction_id: request.transaction_id.clone(),
        attempt: request.attempt,
        round: request.round,
        correlation_id: None,
    };
    FifoIds {
        deduplication_id: fifo_id(&header.deduplication_id()),
        group_id: fifo_id(&header.group_id()),
    }
}

/// Puts retry events on the retry queue (reconciler, operator; the retry handler's
/// events held by the breaker, with a delay).
#[derive(Debug, Clone)]
pub struct SqsRetryPublisher {
    client: Client,
    queue_url: String,
}

impl SqsRetryPublisher {
    pub fn new(client: Client, queue_url: impl Into<String>) -> Self {
        Self {
            client,
            queue_url: queue_url.into(),
        }
    }
}

impl RetryPublisher for SqsRetryPublisher {
    async fn publish(&self, event: &RetryEvent, delay_seconds: u32) -> Result<(), PortError> {
        send(
            &self.client,
            &self.queue_url,
            &event.to_json(),
            None,
            delay_seconds,
        )
        .await
    }
}

/// Puts answers on the response queue, as the external service does (the HTTP
/// bridge).
#[derive(Debug, Clone)]
pub struct SqsResponsePublisher {
    client: Client,
    queue_url: String,
}

impl SqsResponsePublisher {
    pub fn new(client: Client, queue_url: impl Into<String>) -> Self {
        Self {
            client,
            queue_url: queue_url.into(),
        }
    }

    pub async fn publish(&self, response: &Response) -> Result<(), PortError> {
        send(&self.client, &self.queue_url, &response.to_json(), None, 0).await
    }
}

/// Keeps a message that can never succeed, body and message attributes as they came,
/// in a dead-letter queue (the handlers' [`DeadLetter`] port).
#[derive(Debug, Clone)]
pub struct SqsDeadLetter {
    client: Client,
    queue_url: String,
}

impl SqsDeadLetter {
    pub fn new(client: Client, queue_url: impl Into<String>) -> Self {
        Self {
            client,
            queue_url: queue_url.into(),
        }
    }
}

/// The SDK's form of a received message attribute (String, Number and Binary types,
/// custom type suffixes kept).
pub fn to_sdk_attribute(
    name: &str,
    a: &MessageAttribute,
) -> Result<MessageAttributeValue, PortError> {
    let mut b = MessageAttributeValue::builder().data_type(&a.data_type);
    if let Some(s) = &a.string_value {
        b = b.string_value(s);
    }
    if let Some(bin) = &a.binary_value {
        b = b.binary_value(Blob::new(bin.clone()));
    }
    b.build().map_err(|e| {
        PortError::permanent(
            "SendMessage",
            format!("message attribute `{name}` cannot be copied: {e}"),
        )
    })
}

impl DeadLetter for SqsDeadLetter {
    async fn send(&self, message: &Undeliverable) -> Result<(), PortError> {
        let attributes = message
            .attributes
            .iter()
            .map(|(k, v)| Ok((k.clone(), to_sdk_attribute(k, v)?)))
            .collect::<Result<HashMap<_, _>, PortError>>()?;
        let fifo = is_fifo_queue(&self.queue_url).then(|| dead_letter_fifo_ids(message));
        send_in(
            &self.client,
            &self.queue_url,
            &message.body,
            Some(attributes),
            0,
            fifo,
        )
        .await
    }
}

/// A dead letter's FIFO ids: grouped by its idempotency key when it has one, and a
/// deduplication id never used before (the process, the instant and a counter), so
/// a message parked again after an operator's redrive is kept again.
fn dead_letter_fifo_ids(message: &Undeliverable) -> FifoIds {
    use std::sync::atomic::{AtomicU64, Ordering};
    static SENT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let n = SENT.fetch_add(1, Ordering::Relaxed);
    let group = message
        .attributes
        .get(IDEMPOTENCY_KEY_ATTRIBUTE)
        .and_then(|a| a.string_value.as_deref())
        .unwrap_or("dead-letter");
    FifoIds {
        deduplication_id: format!("dl-{}-{nanos}-{n}", std::process::id()),
        group_id: fifo_id(group),
    }
}

/// An SQS client that also resolves queue ARNs to URLs (cached), as services that
/// target a queue by ARN must.
#[derive(Debug, Clone)]
pub struct SqsDirectory {
    client: aws_sdk_sqs::Client,
    urls: Arc<tokio::sync::Mutex<HashMap<String, String>>>,
}

impl SqsDirectory {
    pub fn new(client: aws_sdk_sqs::Client) -> Self {
        Self {
            client,
            urls: Arc::default(),
        }
    }

    pub fn client(&self) -> &aws_sdk_sqs::Client {
        &self.client
    }

    /// `arn:aws:sqs:<region>:<account>:<name>` → queue URL.
    pub async fn url_for_arn(&self, arn: &str) -> Result<String, String> {
        if let Some(u) = self.urls.lock().await.get(arn) {
            return Ok(u.clone());
        }
        let parts: Vec<&str> = arn.split(':').collect();
        let (account, name) = match parts.as_slice() {
            ["arn", _, "sqs", _, account, name] => (*account, *name),
            _ => return Err(format!("`{arn}` is not an SQS queue ARN")),
        };
        let out = self
            .client
            .get_queue_url()
            .queue_name(name)
            .queue_owner_aws_account_id(account)
            .send()
            .await
            .map_err(crate::errors::sdk_error(format!("GetQueueUrl for `{arn}`")))?;
        let url = out
            .queue_url()
            .ok_or_else(|| format!("GetQueueUrl for `{arn}` returned no URL"))?
            .to_owned();
        self.urls.lock().await.insert(arn.to_owned(), url.clone());
        Ok(url)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr(data_type: &str, s: Option<&str>, b: Option<&[u8]>) -> MessageAttribute {
        MessageAttribute {
            data_type: data_type.into(),
            string_value: s.map(str::to_owned),
            binary_value: b.map(<[u8]>::to_vec),
        }
    }

    /// GIVEN the invocation's trace header as the Lambda runtime sets it WHEN a
    /// message is sent THEN it is the message's `AWSTraceHeader`; outside Lambda (no
    /// variable) or without a root, no system attribute is sent.
    #[test]
    fn a_message_carries_the_invocations_trace_header() {
        let header = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1";
        let attrs = trace_attribute(Some(header)).unwrap();
        let v = &attrs[&MessageSystemAttributeNameForSends::AwsTraceHeader];
        assert_eq!((v.data_type(), v.string_value()), ("String", Some(header)));
        assert_eq!(trace_attribute(None), None);
        assert_eq!(trace_attribute(Some("")), None);
        assert_eq!(trace_attribute(Some("Parent=53995c3f42cd8ad8")), None);
    }

    /// GIVEN ids SQS accepts THEN they go as they are; GIVEN the longest transaction
    /// id with its attempt and round, or a character SQS refuses THEN the hash, which
    /// SQS accepts, one per text.
    #[test]
    fn fifo_ids_fit_sqs_rules() {
        let ok = |id: &str| {
            !id.is_empty()
                && id.len() <= FIFO_ID_MAX_CHARS
                && id.bytes().all(|b| b.is_ascii_graphic())
        };
        assert_eq!(fifo_id("TX-1#2#0"), "TX-1#2#0");
        let punctuation = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~";
        assert_eq!(fifo_id(punctuation), punctuation);
        let longest = format!(
            "{}#1000#4294967295",
            "x".repeat(domain::ids::MAX_TRANSACTION_ID_CHARS)
        );
        for raw in [longest.as_str(), "TX 1#1#0", "TX-ñ#1#0", "", "TX-1\u{7f}"] {
            let id = fifo_id(raw);
            assert!(ok(&id), "{raw:?} -> {id}");
            assert!(id.starts_with(FIFO_ID_HASH_PREFIX), "{raw:?} -> {id}");
            assert_eq!(fifo_id(raw), id, "one id per text");
        }
        assert_ne!(fifo_id("TX ñ#1#0"), fifo_id("TX ñ#1#1"));
        assert_eq!(
            fifo_id(&"y".repeat(FIFO_ID_MAX_CHARS)).len(),
            FIFO_ID_MAX_CHARS
        );
        assert!(is_fifo_queue(
            "https://sqs.eu-west-1.amazonaws.com/1/dr-request.fifo"
        ));
        assert!(!is_fifo_queue(
            "https://sqs.eu-west-1.amazonaws.com/1/dr-request"
        ));
    }

    #[test]
    fn received_attributes_are_copied_as_they_came() {
        let s = to_sdk_attribute("trace_id", &attr("String", Some("t-1"), None)).unwrap();
        assert_eq!(s.data_type(), "String");
        assert_eq!(s.string_value(), Some("t-1"));
        let n = to_sdk_attribute("n", &attr("Number.int", Some("42"), None)).unwrap();
        assert_eq!(n.data_type(), "Number.int");
        let b = to_sdk_attribute("b", &attr("Binary", None, Some(&[1, 2, 3]))).unwrap();
        assert_eq!(
            b.binary_value().map(|b| b.as_ref().to_vec()),
            Some(vec![1, 2, 3])
        );
    }
}
