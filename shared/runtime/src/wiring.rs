//! Each function built from its configuration and the AWS adapters, once per process:
//! what the Lambda `main`s call, and what the local stack calls with an SDK
//! configuration pointed at moto, so both run the very same handlers.

use crate::batch::BatchOptions;
use crate::dead_letter::DeadLetter;
use crate::rate::{Paced, Pacer, RateError};
use crate::reconcile::{Limits, Reconciler};
use crate::response::ResponseHandler;
use crate::retry::RetryHandler;
use crate::settings::{Seeds, Settings};
use aws::config::{ReconcilerConfig, ResponseHandlerConfig, RetryHandlerConfig};
use aws::dynamo::DynamoStore;
use aws::scheduler::EventBridgeScheduler;
use aws::sqs::{SqsRequestPublisher, SqsRetryPublisher};
use aws_config::SdkConfig;
use aws_lambda_events::sqs::{SqsMessage, SqsMessageAttribute};
use aws_sdk_sqs::primitives::Blob;
use aws_sdk_sqs::types::MessageAttributeValue;
use domain::policy::PolicySet;
use domain::ports::{PortError, SystemClock};
use std::collections::HashMap;
use std::sync::Arc;

/// The response handler on AWS.
pub type AwsResponseHandler = ResponseHandler<DynamoStore, EventBridgeScheduler, SqsDeadLetter>;
/// The retry handler on AWS (its publisher paced by the process-wide pacer).
pub type AwsRetryHandler = RetryHandler<DynamoStore, Paced<SqsRequestPublisher>, SqsDeadLetter>;
/// The reconciler on AWS.
pub type AwsReconciler = Reconciler<DynamoStore, EventBridgeScheduler, SqsRetryPublisher>;

/// Sends a received message, body and message attributes unchanged, to a DLQ.
#[derive(Debug, Clone)]
pub struct SqsDeadLetter {
    client: aws_sdk_sqs::Client,
    queue_url: String,
}

impl SqsDeadLetter {
    pub fn new(client: aws_sdk_sqs::Client, queue_url: impl Into<String>) -> Self {
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
    a: &SqsMessageAttribute,
) -> Result<MessageAttributeValue, PortError> {
    let data_type = a.data_type.clone().unwrap_or_else(|| {
        if a.binary_value.is_some() {
            "Binary".to_owned()
        } else {
            "String".to_owned()
        }
    });
    let mut b = MessageAttributeValue::builder().data_type(data_type);
    if let Some(s) = &a.string_value {
        b = b.string_value(s);
    }
    if let Some(bin) = &a.binary_value {
        b = b.binary_value(Blob::new(bin.0.clone()));
    }
    b.build().map_err(|e| {
        PortError::permanent(
            "SendMessage",
            format!("message attribute `{name}` cannot be copied: {e}"),
        )
    })
}

impl DeadLetter for SqsDeadLetter {
    async fn send(&self, message: &SqsMessage) -> Result<(), PortError> {
        let attributes = message
            .message_attributes
            .iter()
            .map(|(k, v)| Ok((k.clone(), to_sdk_attribute(k, v)?)))
            .collect::<Result<HashMap<_, _>, PortError>>()?;
        aws::sqs::send_to_dlq(
            &self.client,
            &self.queue_url,
            message.body.as_deref().unwrap_or(""),
            attributes,
        )
        .await
    }
}

fn settings(policies: PolicySet, shards: u16) -> Settings {
    Settings {
        policies,
        shards,
        ..Settings::default()
    }
}

/// The response handler from its configuration.
pub fn response_handler(sdk: &SdkConfig, c: &ResponseHandlerConfig) -> AwsResponseHandler {
    let sqs = aws::clients::sqs(sdk);
    ResponseHandler {
        store: DynamoStore::new(aws::clients::dynamodb(sdk), &c.transactions_table),
        scheduler: EventBridgeScheduler::new(aws::clients::scheduler(sdk), c.scheduler.clone()),
        dead_letter: SqsDeadLetter::new(sqs, &c.response_dlq_url),
        clock: SystemClock,
        settings: settings(c.policies.clone(), c.reconcile_shards),
        batch: BatchOptions {
            concurrency: c.batch_concurrency,
        },
        seeds: Seeds::from_entropy(),
        namespace: c.metrics_namespace.clone(),
    }
}

/// The retry handler from its configuration, its publisher paced by the
/// process-wide [`Pacer`] at `MAX_REQUESTS_PER_SECOND`.
pub fn retry_handler(
    sdk: &SdkConfig,
    c: &RetryHandlerConfig,
) -> Result<AwsRetryHandler, RateError> {
    let pacer: Arc<Pacer> = Pacer::global(c.max_requests_per_second)?;
    let sqs = aws::clients::sqs(sdk);
    Ok(RetryHandler {
        store: DynamoStore::new(aws::clients::dynamodb(sdk), &c.transactions_table)
            .with_payloads_table(&c.payloads_table),
        requests: Paced::new(
            SqsRequestPublisher::new(sqs.clone(), &c.request_queue_url),
            Arc::clone(&pacer),
        ),
        dead_letter: SqsDeadLetter::new(sqs, &c.retry_dlq_url),
        clock: SystemClock,
        settings: settings(PolicySet::default(), c.reconcile_shards),
        batch: BatchOptions {
            concurrency: c.batch_concurrency,
        },
        seeds: Seeds::from_entropy(),
        pacer: Some(pacer),
        namespace: c.metrics_namespace.clone(),
    })
}

/// The reconciler from its configuration.
pub fn reconciler(sdk: &SdkConfig, c: &ReconcilerConfig) -> AwsReconciler {
    Reconciler {
        store: DynamoStore::new(aws::clients::dynamodb(sdk), &c.transactions_table),
        scheduler: EventBridgeScheduler::new(aws::clients::scheduler(sdk), c.scheduler.clone()),
        retries: SqsRetryPublisher::new(aws::clients::sqs(sdk), &c.retry_queue_url),
        clock: SystemClock,
        settings: Settings {
            reconcile_threshold: c.reconcile_threshold,
            ..settings(PolicySet::default(), c.reconcile_shards)
        },
        limits: Limits {
            max_items: c.reconcile_max_items,
            ..Limits::default()
        },
        seeds: Seeds::from_entropy(),
        namespace: c.metrics_namespace.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr(json: serde_json::Value) -> SqsMessageAttribute {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn received_attributes_are_copied_as_they_came() {
        let s = to_sdk_attribute(
            "trace_id",
            &attr(serde_json::json!({"stringValue": "t-1", "dataType": "String"})),
        )
        .unwrap();
        assert_eq!(s.data_type(), "String");
        assert_eq!(s.string_value(), Some("t-1"));
        let n = to_sdk_attribute(
            "n",
            &attr(serde_json::json!({"stringValue": "42", "dataType": "Number.int"})),
        )
        .unwrap();
        assert_eq!(n.data_type(), "Number.int");
        let b = to_sdk_attribute(
            "b",
            &attr(serde_json::json!({"binaryValue": "AQID", "dataType": "Binary"})),
        )
        .unwrap();
        assert_eq!(
            b.binary_value().map(|b| b.as_ref().to_vec()),
            Some(vec![1, 2, 3])
        );
    }
}
