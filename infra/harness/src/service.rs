//! The harness on AWS: consumes the request queue (behind Lambda's SQS event source
//! mapping), records each idempotency key once, and answers on the response queue as
//! [`crate::rules`] decide. Per request: 1. plan the reply (`rules::plan`, draws derived
//! from the key, so a redelivery plans the same reply); 2. record it with a conditional
//! `PutItem` (`attribute_not_exists`): a later delivery fails the condition, gets the
//! recorded item back (`ALL_OLD`, no extra read), counts itself (`ADD receive_count 1`)
//! and replays the **recorded** reply, as an idempotent service does; 3. answer
//! (`SendMessage` with `DelaySeconds`) unless the reply is `NONE`. A body that is not a
//! request, or a script it cannot follow, is permanent: the message goes unchanged to
//! the request queue's DLQ (`runtime::batch`); an AWS error is retryable (a batch item
//! failure). See `infra/README.md#the-staging-harness`.

use crate::config::HarnessConfig;
use crate::rules::{self, Draws, Plan, Reply};
use aws::sqs::SqsDeadLetter;
use aws_config::SdkConfig;
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValuesOnConditionCheckFailure};
use domain::message::MessageError;
use domain::ports::{Clock, SystemClock};
use domain::{Attempt, Request, TransactionId};
use runtime::batch::{process_batch, BatchError};
use runtime::{
    BatchOptions, Inbound, Metrics, Permanent, PermanentReason, SqsBatchResponse, SqsEvent, Verdict,
};
use std::collections::HashMap;

/// The binary, and the `Function` of its log lines.
pub const FUNCTION: &str = "harness";
/// Partition key of the harness table.
pub const KEY: &str = "idempotency_key";
/// TTL attribute of the harness table.
pub const TTL_ATTRIBUTE: &str = "expires_at";

/// What the harness recorded for one idempotency key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Received {
    pub idempotency_key: String,
    pub transaction_id: String,
    pub attempt: u32,
    /// `SUCCESS`, `CANCELLED`, `NONE`, …
    pub reply: String,
    pub delay_seconds: u32,
    pub scripted: bool,
    /// Deliveries of this key (1 = no duplicate).
    pub receive_count: u32,
    pub first_received_at: String,
}

fn s(v: impl Into<String>) -> AttributeValue {
    AttributeValue::S(v.into())
}

fn n(v: impl ToString) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

impl Received {
    pub fn from_item(item: &HashMap<String, AttributeValue>) -> Option<Self> {
        let text = |k: &str| item.get(k).and_then(|v| v.as_s().ok()).cloned();
        let num = |k: &str| {
            item.get(k)
                .and_then(|v| v.as_n().ok())
                .and_then(|v| v.parse::<u32>().ok())
        };
        Some(Self {
            idempotency_key: text(KEY)?,
            transaction_id: text("transaction_id")?,
            attempt: num("attempt")?,
            reply: text("reply")?,
            delay_seconds: num("delay_seconds").unwrap_or(0),
            scripted: item
                .get("scripted")
                .and_then(|v| v.as_bool().ok())
                .copied()
                .unwrap_or(false),
            receive_count: num("receive_count").unwrap_or(1),
            first_received_at: text("first_received_at").unwrap_or_default(),
        })
    }
}

/// Reads what the harness recorded for `<id>#<attempt>`; `None` if it never received it.
pub async fn received(
    ddb: &aws_sdk_dynamodb::Client,
    table: &str,
    id: &TransactionId,
    attempt: Attempt,
) -> Result<Option<Received>, String> {
    let key = domain::IdempotencyKey::new(id, attempt);
    let out = ddb
        .get_item()
        .table_name(table)
        .key(KEY, s(key.as_str()))
        .consistent_read(true)
        .send()
        .await
        .map_err(aws::errors::sdk_error(format!("GetItem {key} on {table}")))?;
    Ok(out.item().and_then(Received::from_item))
}

/// A request, as the batch processor parses it.
pub struct Incoming(pub Request);

impl Inbound for Incoming {
    fn parse(body: &str) -> Result<Self, MessageError> {
        Request::parse(body).map(Incoming)
    }
    fn transaction_id(&self) -> &TransactionId {
        &self.0.transaction_id
    }
    fn attempt(&self) -> Attempt {
        self.0.attempt
    }
}

/// The harness with its clients, built once per process.
pub struct Harness {
    ddb: aws_sdk_dynamodb::Client,
    sqs: aws_sdk_sqs::Client,
    dead_letter: SqsDeadLetter,
    config: HarnessConfig,
}

/// Whether this delivery of a key was the first.
enum Recorded {
    First,
    /// A repeated key: the reply recorded by its first delivery.
    Again(Option<Received>),
}

impl Harness {
    pub fn new(sdk: &SdkConfig, config: HarnessConfig) -> Self {
        let sqs = aws::clients::sqs(sdk);
        Self {
            ddb: aws::clients::dynamodb(sdk),
            dead_letter: SqsDeadLetter::new(sqs.clone(), &config.request_dlq_url),
            sqs,
            config,
        }
    }

    pub fn config(&self) -> &HarnessConfig {
        &self.config
    }

    /// One SQS batch of requests.
    pub async fn handle_event(
        &self,
        event: SqsEvent,
        metrics: &Metrics,
    ) -> Result<SqsBatchResponse, BatchError> {
        let options = BatchOptions {
            concurrency: self.config.batch_concurrency,
        };
        process_batch(
            event,
            &options,
            &self.dead_letter,
            metrics,
            |m: Incoming| self.handle(m.0),
        )
        .await
    }

    /// One invocation. Counts are kept for the batch processor's logs; the harness
    /// publishes no metrics of its own.
    pub async fn invoke(&self, event: SqsEvent) -> Result<SqsBatchResponse, BatchError> {
        let metrics = Metrics::new("DeferredRetryHarness", FUNCTION);
        self.handle_event(event, &metrics).await
    }

    async fn handle(&self, request: Request) -> Verdict {
        let key = request.idempotency_key.as_str().to_owned();
        let draws = Draws::for_key(self.config.behaviour.seed, &key);
        let mut plan = match rules::plan(&self.config.behaviour, &request, draws) {
            Ok(p) => p,
            Err(e) => {
                let rules::RuleError::Invalid {
                    field,
                    value,
                    reason,
                } = &e;
                return Verdict::Permanent(Permanent {
                    reason: PermanentReason::Unprocessable,
                    field: Some(field.clone()),
                    value: Some(value.clone()),
                    detail: format!("the harness cannot follow this script: {reason}"),
                });
            }
        };
        match self.record(&request, &plan).await {
            Ok(Recorded::First) => {}
            Ok(Recorded::Again(previous)) => {
                if let Some(reply) = previous.as_ref().and_then(|p| Reply::parse(&p.reply)) {
                    plan.reply = reply;
                }
                if let Some(p) = previous {
                    plan.delay_seconds = p.delay_seconds;
                }
                tracing::info!(key = %key, reply = plan.reply.as_str(), "repeated idempotency key: replaying the recorded reply");
            }
            Err(error) => return Verdict::Retry { error },
        }
        let Some(response) = plan.response(&request) else {
            tracing::info!(key = %key, "recorded, not answered (NONE)");
            return Verdict::Handled("recorded-not-answered");
        };
        let delay = i32::try_from(plan.delay_seconds).unwrap_or(i32::MAX);
        match self
            .sqs
            .send_message()
            .queue_url(&self.config.response_queue_url)
            .message_body(response.to_json())
            .delay_seconds(delay)
            .send()
            .await
        {
            Ok(_) => {
                tracing::info!(key = %key, reply = plan.reply.as_str(), delay_seconds = plan.delay_seconds, "answered");
                Verdict::Handled("answered")
            }
            Err(e) => Verdict::Retry {
                error: aws::errors::sdk_error(format!("SendMessage (answer {key})"))(e),
            },
        }
    }

    /// The conditional put that makes the first delivery of a key the one that counts.
    async fn record(&self, request: &Request, plan: &Plan) -> Result<Recorded, String> {
        let now = SystemClock.now();
        let expires = now.epoch_seconds() + i64::from(self.config.retention_days) * 86_400;
        let key = request.idempotency_key.as_str();
        let put = self
            .ddb
            .put_item()
            .table_name(&self.config.table)
            .item(KEY, s(key))
            .item("transaction_id", s(request.transaction_id.as_str()))
            .item("attempt", n(request.attempt.get()))
            .item("reply", s(plan.reply.as_str()))
            .item("delay_seconds", n(plan.delay_seconds))
            .item("scripted", AttributeValue::Bool(plan.scripted))
            .item("receive_count", n(1))
            .item("first_received_at", s(now.to_rfc3339()))
            .item(TTL_ATTRIBUTE, n(expires))
            .condition_expression("attribute_not_exists(#k)")
            .expression_attribute_names("#k", KEY)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        let previous = match put {
            Ok(_) => return Ok(Recorded::First),
            Err(e) => match e.into_service_error() {
                PutItemError::ConditionalCheckFailedException(c) => {
                    c.item().and_then(Received::from_item)
                }
                other => return Err(aws::errors::sdk_error(format!("PutItem {key}"))(other)),
            },
        };
        self.ddb
            .update_item()
            .table_name(&self.config.table)
            .key(KEY, s(key))
            .update_expression("ADD #c :one SET #l = :now")
            .expression_attribute_names("#c", "receive_count")
            .expression_attribute_names("#l", "last_received_at")
            .expression_attribute_values(":one", n(1))
            .expression_attribute_values(":now", s(now.to_rfc3339()))
            .send()
            .await
            .map_err(aws::errors::sdk_error(format!("UpdateItem {key}")))?;
        Ok(Recorded::Again(previous))
    }
}
