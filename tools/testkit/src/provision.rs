//! Creates every resource of a stack on an endpoint (moto server locally), from
//! definitions kept as data so that a test can compare them with `template.yaml`.
//!
//! Tables: transactions (stream NEW_AND_OLD_IMAGES, sparse GSI `reconcile-index`),
//! payloads, audit (TTL on `expires_at`). Queues: request, response, retry and intake, each
//! with a DLQ through a redrive policy (maxReceiveCount 5) and a visibility timeout of
//! 6 × its consumer's timeout; the scheduler DLQ and the audit-stream failure DLQ.
//! The schedule group.

use crate::moto::{LOCAL_ACCOUNT, LOCAL_REGION};
use aws::config::vars;
use aws::config::{timeouts, StackNames, FAILED_INDEX, RECONCILE_INDEX};
use aws_config::SdkConfig;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, GlobalSecondaryIndex, KeySchemaElement, KeyType, Projection,
    ProjectionType, ScalarAttributeType, StreamSpecification, StreamViewType,
    TimeToLiveSpecification,
};
use aws_sdk_sqs::types::QueueAttributeName;
use std::collections::HashMap;
use thiserror::Error;

/// Redrive: messages received this many times go to the DLQ.
pub const MAX_RECEIVE_COUNT: u32 = 5;
/// DLQs keep messages 14 days (the SQS maximum) for a human to look at.
pub const DLQ_RETENTION_SECONDS: u32 = 1_209_600;
/// Stream view of the transactions table (the audit needs both images).
pub const STREAM_VIEW: &str = "NEW_AND_OLD_IMAGES";
/// TTL attribute of the audit table.
pub const AUDIT_TTL_ATTRIBUTE: &str = "expires_at";

/// A secondary index, as data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexDef {
    pub name: &'static str,
    pub hash_key: &'static str,
    pub range_key: Option<&'static str>,
    /// `ALL`, `KEYS_ONLY` or `INCLUDE`.
    pub projection: &'static str,
}

/// A table, as data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableDef {
    /// The logical id in `template.yaml`.
    pub logical_id: &'static str,
    pub name: String,
    pub hash_key: &'static str,
    pub range_key: Option<&'static str>,
    /// Every key attribute of the table and its indexes, with its type (`S`, `N`).
    pub attributes: Vec<(&'static str, &'static str)>,
    pub indexes: Vec<IndexDef>,
    /// `Some(view)` when the table has a stream.
    pub stream_view: Option<&'static str>,
    pub ttl_attribute: Option<&'static str>,
    /// Always on-demand.
    pub billing_mode: &'static str,
}

impl TableDef {
    /// An on-demand table `name` keyed by the string attribute `hash_key` alone: no
    /// index, stream or TTL (for tests of the SDK and of the server themselves).
    pub fn keyed(name: &str, hash_key: &'static str) -> Self {
        TableDef {
            logical_id: "Table",
            name: name.to_owned(),
            hash_key,
            range_key: None,
            attributes: vec![(hash_key, "S")],
            indexes: vec![],
            stream_view: None,
            ttl_attribute: None,
            billing_mode: "PAY_PER_REQUEST",
        }
    }
}

/// A redrive policy, as data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedriveDef {
    /// The logical id of the DLQ.
    pub dlq_logical_id: &'static str,
    pub max_receive_count: u32,
}

/// A queue, as data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueDef {
    pub logical_id: &'static str,
    pub name: String,
    /// `None`: the SQS default (30 s) — for queues no function of ours consumes.
    pub visibility_timeout_seconds: Option<u32>,
    pub message_retention_seconds: Option<u32>,
    pub redrive: Option<RedriveDef>,
    /// A FIFO queue (name ending `.fifo`): the request queue and its DLQ in outbox
    /// delivery. Its attributes: [`QueueDef::fifo_attributes`].
    pub fifo: bool,
}

/// The FIFO queue name of `name`: `.fifo` appended (SQS requires the suffix).
pub fn fifo_name(name: &str) -> String {
    if name.ends_with(FIFO_SUFFIX) {
        name.to_owned()
    } else {
        format!("{name}{FIFO_SUFFIX}")
    }
}

/// The suffix every FIFO queue name ends with.
pub const FIFO_SUFFIX: &str = ".fifo";

impl QueueDef {
    /// The FIFO attributes of the queue as the template sets them in outbox delivery
    /// (none for a standard queue): deduplication by the explicit
    /// `MessageDeduplicationId` only, scoped to the message group, with the
    /// per-group throughput limit (high-throughput FIFO).
    pub fn fifo_attributes(&self) -> Vec<(QueueAttributeName, &'static str)> {
        if !self.fifo {
            return vec![];
        }
        vec![
            (QueueAttributeName::FifoQueue, "true"),
            (QueueAttributeName::ContentBasedDeduplication, "false"),
            (QueueAttributeName::DeduplicationScope, "messageGroup"),
            (QueueAttributeName::FifoThroughputLimit, "perMessageGroupId"),
        ]
    }
}

/// The three tables of a stack.
pub fn table_definitions(names: &StackNames) -> Vec<TableDef> {
    vec![
        TableDef {
            logical_id: "TransactionsTable",
            name: names.transactions_table.clone(),
            hash_key: "transaction_id",
            range_key: None,
            attributes: vec![
                ("transaction_id", "S"),
                ("reconcile_pk", "S"),
                ("reconcile_at", "S"),
                ("failed_pk", "S"),
                ("updated_at", "S"),
            ],
            indexes: vec![
                IndexDef {
                    name: RECONCILE_INDEX,
                    hash_key: "reconcile_pk",
                    range_key: Some("reconcile_at"),
                    // Keys only: the entry is written when a cycle enters the index
                    // and when it leaves, never by the transitions in between.
                    projection: "KEYS_ONLY",
                },
                IndexDef {
                    name: FAILED_INDEX,
                    hash_key: "failed_pk",
                    range_key: Some("updated_at"),
                    // Keys only: written when a transaction fails and when it is
                    // replayed (only FAILED items carry `failed_pk`).
                    projection: "KEYS_ONLY",
                },
            ],
            stream_view: Some(STREAM_VIEW),
            ttl_attribute: Some(aws::retention::PURGE_AT),
            billing_mode: "PAY_PER_REQUEST",
        },
        TableDef {
            logical_id: "PayloadsTable",
            name: names.payloads_table.clone(),
            hash_key: "transaction_id",
            range_key: None,
            attributes: vec![("transaction_id", "S")],
            indexes: vec![],
            stream_view: None,
            ttl_attribute: Some(aws::retention::PURGE_AT),
            billing_mode: "PAY_PER_REQUEST",
        },
        TableDef {
            logical_id: "AuditTable",
            name: names.audit_table.clone(),
            hash_key: "transaction_id",
            range_key: Some("audit_key"),
            attributes: vec![("transaction_id", "S"), ("audit_key", "S")],
            indexes: vec![],
            stream_view: None,
            ttl_attribute: Some(AUDIT_TTL_ATTRIBUTE),
            billing_mode: "PAY_PER_REQUEST",
        },
        TableDef {
            logical_id: "BreakerTable",
            name: names.breaker_table.clone(),
            hash_key: "pk",
            range_key: Some("sk"),
            attributes: vec![("pk", "S"), ("sk", "S")],
            indexes: vec![],
            stream_view: None,
            ttl_attribute: Some(aws::breaker::attr::EXPIRES_AT),
            billing_mode: "PAY_PER_REQUEST",
        },
    ]
}

/// The staging harness's table, as data (`infra/template.yaml` declares the same; a
/// test compares them).
pub fn harness_table_definition(name: &str) -> TableDef {
    TableDef {
        logical_id: "HarnessTable",
        name: name.to_owned(),
        hash_key: harness::service::KEY,
        range_key: None,
        attributes: vec![(harness::service::KEY, "S")],
        indexes: vec![],
        stream_view: None,
        ttl_attribute: Some(harness::service::TTL_ATTRIBUTE),
        billing_mode: "PAY_PER_REQUEST",
    }
}

/// The queues of a stack in direct delivery, DLQs first (a redrive policy names an
/// existing queue).
pub fn queue_definitions(names: &StackNames) -> Vec<QueueDef> {
    queue_definitions_for(names, false)
}

/// The queues of a stack, DLQs first; `fifo_requests`: outbox delivery, whose request
/// queue and request DLQ are FIFO queues (names ending `.fifo`, [`fifo_name`]).
pub fn queue_definitions_for(names: &StackNames, fifo_requests: bool) -> Vec<QueueDef> {
    let dlq = |logical_id, name: &String| QueueDef {
        logical_id,
        name: name.clone(),
        visibility_timeout_seconds: None,
        message_retention_seconds: Some(DLQ_RETENTION_SECONDS),
        redrive: None,
        fifo: false,
    };
    let request_name = |name: &String| {
        if fifo_requests {
            fifo_name(name)
        } else {
            name.clone()
        }
    };
    let redrive = |dlq_logical_id| {
        Some(RedriveDef {
            dlq_logical_id,
            max_receive_count: MAX_RECEIVE_COUNT,
        })
    };
    let six_x = |t: u32| Some(timeouts::VISIBILITY_FACTOR * t);
    vec![
        QueueDef {
            fifo: fifo_requests,
            ..dlq("RequestDLQ", &request_name(&names.request_dlq))
        },
        dlq("ResponseDLQ", &names.response_dlq),
        dlq("RetryDLQ", &names.retry_dlq),
        dlq("SchedulerDLQ", &names.scheduler_dlq),
        dlq("AuditDLQ", &names.audit_dlq),
        dlq("IntakeDLQ", &names.intake_dlq),
        QueueDef {
            logical_id: "RequestQueue",
            name: request_name(&names.request_queue),
            // Consumed by the external service, not by a function of this stack.
            visibility_timeout_seconds: None,
            message_retention_seconds: None,
            redrive: redrive("RequestDLQ"),
            fifo: fifo_requests,
        },
        QueueDef {
            logical_id: "ResponseQueue",
            name: names.response_queue.clone(),
            visibility_timeout_seconds: six_x(timeouts::RESPONSE_HANDLER_SECONDS),
            message_retention_seconds: None,
            redrive: redrive("ResponseDLQ"),
            fifo: false,
        },
        QueueDef {
            logical_id: "RetryQueue",
            name: names.retry_queue.clone(),
            visibility_timeout_seconds: six_x(timeouts::RETRY_HANDLER_SECONDS),
            message_retention_seconds: None,
            redrive: redrive("RetryDLQ"),
            fifo: false,
        },
        QueueDef {
            logical_id: "IntakeQueue",
            name: names.intake_queue.clone(),
            visibility_timeout_seconds: six_x(timeouts::STARTER_SECONDS),
            message_retention_seconds: None,
            redrive: redrive("IntakeDLQ"),
            fifo: false,
        },
    ]
}

/// A created queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueRef {
    pub name: String,
    pub url: String,
    pub arn: String,
}

/// Everything [`provision`] created.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Provisioned {
    pub endpoint: String,
    pub names: StackNames,
    pub transactions_table_arn: String,
    /// The stream the audit writer reads.
    pub transactions_stream_arn: String,
    pub request: QueueRef,
    pub request_dlq: QueueRef,
    pub response: QueueRef,
    pub response_dlq: QueueRef,
    pub retry: QueueRef,
    pub retry_dlq: QueueRef,
    pub scheduler_dlq: QueueRef,
    pub audit_dlq: QueueRef,
    /// The starter's queue and its DLQ.
    pub intake: QueueRef,
    pub intake_dlq: QueueRef,
    pub schedule_group_arn: String,
    /// Local stand-in for the scheduler role (moto does not check it).
    pub scheduler_role_arn: String,
}

impl Provisioned {
    /// Environment variables of a function for this stack (names as in `config`).
    /// `function` is `response-handler`, `retry-handler`, `reconciler`,
    /// `audit-writer`, `starter`, `publisher` (outbox delivery's stream reader) or
    /// `http-bridge` (its endpoint a loopback stand-in,
    /// [`LOCAL_HTTP_ENDPOINT`], that callers replace with their server's); anything
    /// else gets an empty list. The settings the
    /// template passes from a parameter are given their defaults.
    pub fn env_for(&self, function: &str) -> Vec<(&'static str, String)> {
        use domain::defaults as d;
        use vars::*;
        let n = &self.names;
        let var = |name: &'static str, value: &str| (name, value.to_owned());
        let tx = var(TRANSACTIONS_TABLE.name, &n.transactions_table);
        let payloads = var(PAYLOADS_TABLE.name, &n.payloads_table);
        let audit = var(AUDIT_TABLE.name, &n.audit_table);
        let breaker = var(BREAKER_TABLE.name, &n.breaker_table);
        let requests = var(REQUEST_QUEUE_URL.name, &self.request.url);
        let retries = var(RETRY_QUEUE_URL.name, &self.retry.url);
        let rate = (
            MAX_REQUESTS_PER_SECOND.name,
            d::MAX_REQUESTS_PER_SECOND.to_string(),
        );
        let sched = [
            var(SCHEDULE_GROUP.name, &n.schedule_group),
            var(RETRY_QUEUE_ARN.name, &self.retry.arn),
            var(SCHEDULER_ROLE_ARN.name, &self.scheduler_role_arn),
            var(SCHEDULER_DLQ_ARN.name, &self.scheduler_dlq.arn),
        ];
        match function {
            "response-handler" => [
                &[tx][..],
                &sched,
                &[
                    var(RESPONSE_DLQ_URL.name, &self.response_dlq.url),
                    retries,
                    audit,
                    breaker,
                ],
            ]
            .concat(),
            "retry-handler" => vec![
                tx,
                payloads,
                requests,
                var(RETRY_DLQ_URL.name, &self.retry_dlq.url),
                rate,
                retries,
                breaker,
            ],
            "reconciler" => [
                &[tx, payloads, audit, retries, requests][..],
                &sched,
                &[breaker],
            ]
            .concat(),
            "audit-writer" => vec![audit, payloads],
            "starter" => vec![
                tx,
                payloads,
                requests,
                var(INTAKE_DLQ_URL.name, &self.intake_dlq.url),
                (DEFAULT_MAX_ATTEMPTS.name, d::MAX_ATTEMPTS.to_string()),
                (rate.0, d::INTAKE_STARTS_PER_SECOND.to_string()),
            ],
            "publisher" => vec![tx, payloads, requests, audit, rate],
            "http-bridge" => vec![
                var(RESPONSE_QUEUE_URL.name, &self.response.url),
                var(REQUEST_DLQ_URL.name, &self.request_dlq.url),
                var(HTTP_ENDPOINT.name, LOCAL_HTTP_ENDPOINT),
            ],
            _ => vec![],
        }
    }
}

/// The HTTP bridge's endpoint in [`Provisioned::env_for`]: loopback, discard port.
pub const LOCAL_HTTP_ENDPOINT: &str = "http://127.0.0.1:9/{transaction_id}";

/// A resource could not be created.
#[derive(Debug, Error)]
#[error("provisioning {resource}: {detail}")]
pub struct ProvisionError {
    pub resource: String,
    pub detail: String,
}

fn fail(resource: &str, e: impl std::fmt::Display) -> ProvisionError {
    ProvisionError {
        resource: resource.to_owned(),
        detail: e.to_string(),
    }
}

fn fail_sdk<E>(resource: &str, e: E) -> ProvisionError
where
    E: std::error::Error + 'static,
{
    use std::fmt::Write as _;
    let mut detail = e.to_string();
    let mut src = e.source();
    while let Some(s) = src {
        let _ = write!(detail, ": {s}");
        src = s.source();
    }
    fail(resource, detail)
}

fn scalar(t: &str) -> ScalarAttributeType {
    match t {
        "N" => ScalarAttributeType::N,
        "B" => ScalarAttributeType::B,
        _ => ScalarAttributeType::S,
    }
}

fn key(name: &str, kind: KeyType) -> Result<KeySchemaElement, ProvisionError> {
    KeySchemaElement::builder()
        .attribute_name(name)
        .key_type(kind)
        .build()
        .map_err(|e| fail(name, e))
}

fn key_schema(hash: &str, range: Option<&str>) -> Result<Vec<KeySchemaElement>, ProvisionError> {
    let mut v = vec![key(hash, KeyType::Hash)?];
    if let Some(r) = range {
        v.push(key(r, KeyType::Range)?);
    }
    Ok(v)
}

/// Creates one table from its definition; returns (table ARN, stream ARN).
pub async fn create_table(
    client: &aws_sdk_dynamodb::Client,
    def: &TableDef,
) -> Result<(String, Option<String>), ProvisionError> {
    let mut req = client
        .create_table()
        .table_name(&def.name)
        .billing_mode(BillingMode::PayPerRequest)
        .set_key_schema(Some(key_schema(def.hash_key, def.range_key)?));
    for (name, t) in &def.attributes {
        req = req.attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name(*name)
                .attribute_type(scalar(t))
                .build()
                .map_err(|e| fail(&def.name, e))?,
        );
    }
    for ix in &def.indexes {
        req = req.global_secondary_indexes(
            GlobalSecondaryIndex::builder()
                .index_name(ix.name)
                .set_key_schema(Some(key_schema(ix.hash_key, ix.range_key)?))
                .projection(
                    Projection::builder()
                        .projection_type(ProjectionType::from(ix.projection))
                        .build(),
                )
                .build()
                .map_err(|e| fail(ix.name, e))?,
        );
    }
    if let Some(view) = def.stream_view {
        req = req.stream_specification(
            StreamSpecification::builder()
                .stream_enabled(true)
                .stream_view_type(StreamViewType::from(view))
                .build()
                .map_err(|e| fail(&def.name, e))?,
        );
    }
    let out = req.send().await.map_err(|e| fail_sdk(&def.name, e))?;
    let desc = out.table_description();
    let arn = desc
        .and_then(|d| d.table_arn())
        .unwrap_or_default()
        .to_owned();
    let stream = desc.and_then(|d| d.latest_stream_arn()).map(str::to_owned);
    if let Some(attr) = def.ttl_attribute {
        client
            .update_time_to_live()
            .table_name(&def.name)
            .time_to_live_specification(
                TimeToLiveSpecification::builder()
                    .enabled(true)
                    .attribute_name(attr)
                    .build()
                    .map_err(|e| fail(&def.name, e))?,
            )
            .send()
            .await
            .map_err(|e| fail_sdk(&def.name, e))?;
    }
    Ok((arn, stream))
}

/// The item of transaction `id` in `table` (a consistent read), as stored: for tests
/// that check an attribute no decoder reads (a TTL).
pub async fn read_item(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    id: &str,
) -> Result<Option<HashMap<String, aws_sdk_dynamodb::types::AttributeValue>>, String> {
    read_item_at(client, table, &[("transaction_id", id)]).await
}

/// The item of `table` whose key attributes have these string values (a consistent
/// read), as stored.
pub async fn read_item_at(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    key: &[(&str, &str)],
) -> Result<Option<HashMap<String, aws_sdk_dynamodb::types::AttributeValue>>, String> {
    let values: Vec<&str> = key.iter().map(|(_, v)| *v).collect();
    let key = key
        .iter()
        .map(|(k, v)| {
            let v = aws_sdk_dynamodb::types::AttributeValue::S((*v).to_owned());
            ((*k).to_owned(), v)
        })
        .collect();
    client
        .get_item()
        .table_name(table)
        .set_key(Some(key))
        .consistent_read(true)
        .send()
        .await
        .map(|o| o.item)
        .map_err(|e| format!("GetItem {table} {}: {e}", values.join(" ")))
}

fn queue_arn(name: &str) -> String {
    format!("arn:aws:sqs:{LOCAL_REGION}:{LOCAL_ACCOUNT}:{name}")
}

/// Creates every resource of `names` on the endpoint of `sdk` (direct delivery).
pub async fn provision(sdk: &SdkConfig, names: &StackNames) -> Result<Provisioned, ProvisionError> {
    provision_for(sdk, names, false).await
}

/// Creates every resource of `names` on the endpoint of `sdk`; `fifo_requests`:
/// outbox delivery, the request queue and its DLQ FIFO ([`queue_definitions_for`]).
pub async fn provision_for(
    sdk: &SdkConfig,
    names: &StackNames,
    fifo_requests: bool,
) -> Result<Provisioned, ProvisionError> {
    let ddb = aws_sdk_dynamodb::Client::new(sdk);
    let sqs = aws_sdk_sqs::Client::new(sdk);
    let sched = aws_sdk_scheduler::Client::new(sdk);

    let mut tx_arn = String::new();
    let mut stream_arn = None;
    for def in table_definitions(names) {
        let (arn, stream) = create_table(&ddb, &def).await?;
        if def.logical_id == "TransactionsTable" {
            tx_arn = arn;
            stream_arn = stream;
        }
    }
    let stream_arn = stream_arn.ok_or_else(|| {
        fail(
            &names.transactions_table,
            "the table was created without a stream ARN",
        )
    })?;

    let mut queues: HashMap<&'static str, QueueRef> = HashMap::new();
    for def in queue_definitions_for(names, fifo_requests) {
        let mut attrs: HashMap<QueueAttributeName, String> = def
            .fifo_attributes()
            .into_iter()
            .map(|(k, v)| (k, v.to_owned()))
            .collect();
        if let Some(v) = def.visibility_timeout_seconds {
            attrs.insert(QueueAttributeName::VisibilityTimeout, v.to_string());
        }
        if let Some(v) = def.message_retention_seconds {
            attrs.insert(QueueAttributeName::MessageRetentionPeriod, v.to_string());
        }
        if let Some(r) = &def.redrive {
            let dlq = queues.get(r.dlq_logical_id).ok_or_else(|| {
                fail(
                    &def.name,
                    format!("DLQ {} not created first", r.dlq_logical_id),
                )
            })?;
            attrs.insert(
                QueueAttributeName::RedrivePolicy,
                serde_json::json!({
                    "deadLetterTargetArn": dlq.arn,
                    "maxReceiveCount": r.max_receive_count,
                })
                .to_string(),
            );
        }
        let out = sqs
            .create_queue()
            .queue_name(&def.name)
            .set_attributes(Some(attrs))
            .send()
            .await
            .map_err(|e| fail_sdk(&def.name, e))?;
        let url = out
            .queue_url()
            .ok_or_else(|| fail(&def.name, "CreateQueue returned no URL"))?
            .to_owned();
        queues.insert(
            def.logical_id,
            QueueRef {
                name: def.name.clone(),
                url,
                arn: queue_arn(&def.name),
            },
        );
    }
    let mut take = |id: &str| {
        queues
            .remove(id)
            .ok_or_else(|| fail(id, "queue definition missing"))
    };

    let group = sched
        .create_schedule_group()
        .name(&names.schedule_group)
        .send()
        .await
        .map_err(|e| fail_sdk(&names.schedule_group, e))?;

    Ok(Provisioned {
        endpoint: sdk.endpoint_url().map(str::to_owned).unwrap_or_default(),
        names: names.clone(),
        transactions_table_arn: tx_arn,
        transactions_stream_arn: stream_arn,
        request: take("RequestQueue")?,
        request_dlq: take("RequestDLQ")?,
        response: take("ResponseQueue")?,
        response_dlq: take("ResponseDLQ")?,
        retry: take("RetryQueue")?,
        retry_dlq: take("RetryDLQ")?,
        scheduler_dlq: take("SchedulerDLQ")?,
        audit_dlq: take("AuditDLQ")?,
        intake: take("IntakeQueue")?,
        intake_dlq: take("IntakeDLQ")?,
        schedule_group_arn: group.schedule_group_arn().to_owned(),
        scheduler_role_arn: format!("arn:aws:iam::{LOCAL_ACCOUNT}:role/{}", names.scheduler_role),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn visibility_is_six_times_the_consumer_timeout() {
        let q = queue_definitions(&StackNames::new("p"));
        let get = |id: &str| q.iter().find(|d| d.logical_id == id).unwrap().clone();
        assert_eq!(get("ResponseQueue").visibility_timeout_seconds, Some(180));
        assert_eq!(get("RetryQueue").visibility_timeout_seconds, Some(360));
        assert_eq!(get("IntakeQueue").visibility_timeout_seconds, Some(180));
        for id in ["RequestQueue", "ResponseQueue", "RetryQueue", "IntakeQueue"] {
            assert_eq!(get(id).redrive.unwrap().max_receive_count, 5);
        }
        // DLQs come before the queues that name them.
        let pos = |id: &str| q.iter().position(|d| d.logical_id == id).unwrap();
        assert!(pos("RetryDLQ") < pos("RetryQueue"));
    }

    /// Outbox delivery changes the request queue and its DLQ alone: FIFO, `.fifo`
    /// names, deduplication by explicit id per message group.
    #[test]
    fn outbox_delivery_makes_the_request_queue_and_its_dlq_fifo() {
        let names = StackNames::new("p");
        let direct = queue_definitions(&names);
        let outbox = queue_definitions_for(&names, true);
        assert_eq!(direct.len(), outbox.len());
        for (d, o) in direct.iter().zip(&outbox) {
            let request = ["RequestQueue", "RequestDLQ"].contains(&d.logical_id);
            assert_eq!(o.fifo, request, "{}", o.logical_id);
            assert!(!d.fifo && d.fifo_attributes().is_empty());
            if request {
                assert_eq!(o.name, format!("{}.fifo", d.name));
                assert!(o
                    .fifo_attributes()
                    .contains(&(QueueAttributeName::ContentBasedDeduplication, "false")));
                assert!(o
                    .fifo_attributes()
                    .contains(&(QueueAttributeName::DeduplicationScope, "messageGroup")));
            } else {
                assert_eq!(o, d);
            }
        }
        assert_eq!(fifo_name("q.fifo"), "q.fifo");
    }

    #[test]
    fn the_reconcile_index_is_declared() {
        let t = table_definitions(&StackNames::new("p"));
        let tx = &t[0];
        assert_eq!(tx.indexes[0].name, "reconcile-index");
        assert_eq!(tx.indexes[0].hash_key, "reconcile_pk");
        assert_eq!(tx.indexes[0].range_key, Some("reconcile_at"));
        assert_eq!(tx.indexes[1].name, "failed-index");
        assert_eq!(tx.indexes[1].hash_key, "failed_pk");
        assert_eq!(tx.indexes[1].range_key, Some("updated_at"));
        assert_eq!(tx.stream_view, Some("NEW_AND_OLD_IMAGES"));
        assert_eq!(t[2].ttl_attribute, Some("expires_at"));
    }
}
