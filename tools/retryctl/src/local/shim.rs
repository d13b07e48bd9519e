//! TEMPORARY SHIM — to be replaced by `shared/aws` adapters as soon as they land
//! (EventBridge Scheduler adapter, SQS publishers, SQS dead-letter, audit writer).
//! Kept minimal: just enough to run the local stack end to end meanwhile.

use aws::errors::classify;
use aws_lambda_events::sqs::SqsMessage;
use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_scheduler::types::{
    ActionAfterCompletion, DeadLetterConfig, FlexibleTimeWindow, FlexibleTimeWindowMode,
    RetryPolicy, Target,
};
use aws_sdk_sqs::types::MessageAttributeValue;
use domain::audit::AuditEntry;
use domain::decide::ScheduleSpec;
use domain::ports::{
    PortError, RequestPublisher, RetryPublisher, ScheduleCreated, ScheduleDeleted, Scheduler,
};
use domain::{Request, RetryEvent, ScheduleName};
use std::collections::HashMap;

#[derive(Debug, Clone)]
pub struct ShimScheduler {
    pub client: aws_sdk_scheduler::Client,
    pub settings: aws::config::SchedulerSettings,
}

impl Scheduler for ShimScheduler {
    async fn create(&self, spec: &ScheduleSpec) -> Result<ScheduleCreated, PortError> {
        let s = &self.settings;
        let target = Target::builder()
            .arn(&s.retry_queue_arn)
            .role_arn(&s.role_arn)
            .input(spec.event.to_json())
            .retry_policy(
                RetryPolicy::builder()
                    .maximum_retry_attempts(i32::try_from(s.retry_attempts).unwrap_or(5))
                    .maximum_event_age_in_seconds(
                        i32::try_from(s.max_event_age_seconds).unwrap_or(3600),
                    )
                    .build(),
            )
            .dead_letter_config(DeadLetterConfig::builder().arn(&s.dlq_arn).build())
            .build()
            .map_err(|e| PortError::permanent("CreateSchedule", e.to_string()))?;
        let window = FlexibleTimeWindow::builder()
            .mode(FlexibleTimeWindowMode::Off)
            .build()
            .map_err(|e| PortError::permanent("CreateSchedule", e.to_string()))?;
        match self
            .client
            .create_schedule()
            .name(spec.name.as_str())
            .group_name(&s.group)
            .schedule_expression(format!("at({})", spec.fire_at.to_schedule_at()))
            .schedule_expression_timezone("UTC")
            .flexible_time_window(window)
            .action_after_completion(ActionAfterCompletion::Delete)
            .target(target)
            .send()
            .await
        {
            Ok(_) => Ok(ScheduleCreated::Created),
            Err(e)
                if e.as_service_error()
                    .is_some_and(|x| x.is_conflict_exception()) =>
            {
                Ok(ScheduleCreated::AlreadyExists)
            }
            Err(e) => Err(classify("CreateSchedule", &e, |_| None)),
        }
    }

    async fn delete(&self, name: &ScheduleName) -> Result<ScheduleDeleted, PortError> {
        match self
            .client
            .delete_schedule()
            .name(name.as_str())
            .group_name(&self.settings.group)
            .send()
            .await
        {
            Ok(_) => Ok(ScheduleDeleted::Deleted),
            Err(e)
                if e.as_service_error()
                    .is_some_and(|x| x.is_resource_not_found_exception()) =>
            {
                Ok(ScheduleDeleted::NotFound)
            }
            Err(e) => Err(classify("DeleteSchedule", &e, |_| None)),
        }
    }
}

#[derive(Debug, Clone)]
pub struct ShimQueue {
    pub client: aws_sdk_sqs::Client,
    pub url: String,
}

impl RequestPublisher for ShimQueue {
    async fn publish(&self, request: &Request) -> Result<(), PortError> {
        let key = MessageAttributeValue::builder()
            .data_type("String")
            .string_value(request.idempotency_key.as_str())
            .build()
            .map_err(|e| PortError::permanent("SendMessage", e.to_string()))?;
        self.client
            .send_message()
            .queue_url(&self.url)
            .message_body(request.to_json())
            .message_attributes("idempotency_key", key)
            .send()
            .await
            .map(|_| ())
            .map_err(|e| classify("SendMessage", &e, |_| None))
    }
}

impl RetryPublisher for ShimQueue {
    async fn publish(&self, event: &RetryEvent) -> Result<(), PortError> {
        self.client
            .send_message()
            .queue_url(&self.url)
            .message_body(event.to_json())
            .send()
            .await
            .map(|_| ())
            .map_err(|e| classify("SendMessage", &e, |_| None))
    }
}

impl runtime::DeadLetter for ShimQueue {
    async fn send(&self, message: &SqsMessage) -> Result<(), PortError> {
        let mut req = self
            .client
            .send_message()
            .queue_url(&self.url)
            .message_body(message.body.clone().unwrap_or_default());
        for (k, v) in &message.message_attributes {
            if let Some(sv) = &v.string_value {
                if let Ok(a) = MessageAttributeValue::builder()
                    .data_type(v.data_type.clone().unwrap_or_else(|| "String".into()))
                    .string_value(sv)
                    .build()
                {
                    req = req.message_attributes(k, a);
                }
            }
        }
        req.send()
            .await
            .map(|_| ())
            .map_err(|e| classify("SendMessage", &e, |_| None))
    }
}

/// Audit item (shim format: the entry's JSON fields as strings, plus the keys).
pub fn audit_item(e: &AuditEntry) -> HashMap<String, AttributeValue> {
    let mut item = HashMap::new();
    item.insert(
        "transaction_id".to_owned(),
        AttributeValue::S(e.transaction_id.as_str().to_owned()),
    );
    item.insert("audit_key".to_owned(), AttributeValue::S(e.sort_key()));
    item.insert(
        "entry".to_owned(),
        AttributeValue::S(serde_json::to_string(e).unwrap_or_default()),
    );
    item
}

pub fn audit_from_item(item: &HashMap<String, AttributeValue>) -> Option<AuditEntry> {
    let raw = item.get("entry")?.as_s().ok()?;
    serde_json::from_str(raw).ok()
}

/// Reads one pass of every shard of the stream from `iterators` (shard id → next
/// iterator) and writes the audit rows. Returns how many rows were written.
pub async fn drain_stream_once(
    streams: &aws_sdk_dynamodbstreams::Client,
    ddb: &aws_sdk_dynamodb::Client,
    stream_arn: &str,
    audit_table: &str,
    iterators: &mut HashMap<String, Option<String>>,
) -> Result<u64, String> {
    use aws_sdk_dynamodbstreams::types::ShardIteratorType;
    let desc = streams
        .describe_stream()
        .stream_arn(stream_arn)
        .send()
        .await
        .map_err(|e| {
            format!(
                "DescribeStream: {}",
                aws_sdk_dynamodbstreams::error::DisplayErrorContext(e)
            )
        })?;
    let shards: Vec<String> = desc
        .stream_description()
        .map(|d| {
            d.shards()
                .iter()
                .filter_map(|s| s.shard_id().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    for sh in shards {
        if !iterators.contains_key(&sh) {
            let it = streams
                .get_shard_iterator()
                .stream_arn(stream_arn)
                .shard_id(&sh)
                .shard_iterator_type(ShardIteratorType::TrimHorizon)
                .send()
                .await
                .map_err(|e| {
                    format!(
                        "GetShardIterator: {}",
                        aws_sdk_dynamodbstreams::error::DisplayErrorContext(e)
                    )
                })?;
            iterators.insert(sh, it.shard_iterator().map(str::to_owned));
        }
    }
    let mut written = 0;
    for it in iterators.values_mut() {
        let Some(cur) = it.clone() else { continue };
        let out = streams
            .get_records()
            .shard_iterator(cur)
            .send()
            .await
            .map_err(|e| {
                format!(
                    "GetRecords: {}",
                    aws_sdk_dynamodbstreams::error::DisplayErrorContext(e)
                )
            })?;
        for r in out.records() {
            let Some(d) = r.dynamodb() else { continue };
            let new = d
                .new_image()
                .map(|i| aws::item::record_from_flat(&aws::item::flat_from_streams(i)));
            let old = d
                .old_image()
                .map(|i| aws::item::record_from_flat(&aws::item::flat_from_streams(i)));
            let Some(Ok(new)) = new else { continue };
            let old = old.and_then(Result::ok);
            if let Some(entry) = AuditEntry::from_change(old.as_ref(), &new) {
                ddb.put_item()
                    .table_name(audit_table)
                    .set_item(Some(audit_item(&entry)))
                    .send()
                    .await
                    .map_err(|e| {
                        format!(
                            "PutItem: {}",
                            aws_sdk_dynamodb::error::DisplayErrorContext(e)
                        )
                    })?;
                written += 1;
            }
        }
        *it = out.next_shard_iterator().map(str::to_owned);
    }
    Ok(written)
}
