//! The local stand-in for the audit writer's stream event source: reads every record
//! not yet read from a table's stream and audits the changes as one batch, through the
//! same [`AuditWriter`] the Lambda uses. Tests, the local stack and the benchmarks
//! poll with it; no Lambda links it.

use aws::audit::{records_page, AuditError, AuditWriter, Audited, StreamChange};
use aws::errors::classify;
use aws_sdk_dynamodbstreams::types::ShardIteratorType;
use domain::ports::PortError;
use domain::TransactionId;
use std::collections::BTreeMap;

/// Records per `GetRecords` page (the API's maximum and default).
const GET_RECORDS_PAGE: usize = 1000;

/// Where a reader is in each shard of a stream (start: nothing read).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StreamPosition {
    /// Next iterator per shard; `None` once a closed shard is fully read.
    iterators: BTreeMap<String, Option<String>>,
}

/// Reads every record not yet read from the stream (all shards, from the oldest
/// record on the first call), in order within each shard.
pub async fn drain_stream(
    client: &aws_sdk_dynamodbstreams::Client,
    stream_arn: &str,
    position: &mut StreamPosition,
) -> Result<Vec<StreamChange>, PortError> {
    // Discover shards (new ones appear as the table grows or splits).
    let mut shards = Vec::new();
    let mut last = None;
    loop {
        let out = client
            .describe_stream()
            .stream_arn(stream_arn)
            .set_exclusive_start_shard_id(last.clone())
            .send()
            .await
            .map_err(|e| classify("DescribeStream", &e, |_| None))?;
        let Some(desc) = out.stream_description() else {
            break;
        };
        for sh in desc.shards() {
            if let Some(id) = sh.shard_id() {
                shards.push(id.to_owned());
            }
        }
        match desc.last_evaluated_shard_id() {
            Some(l) => last = Some(l.to_owned()),
            None => break,
        }
    }
    let mut changes = Vec::new();
    for shard in shards {
        let iterator = match position.iterators.get(&shard) {
            Some(Some(it)) => it.clone(),
            Some(None) => continue,
            None => client
                .get_shard_iterator()
                .stream_arn(stream_arn)
                .shard_id(&shard)
                .shard_iterator_type(ShardIteratorType::TrimHorizon)
                .send()
                .await
                .map_err(|e| classify("GetShardIterator", &e, |_| None))?
                .shard_iterator()
                .map(str::to_owned)
                .ok_or_else(|| PortError::permanent("GetShardIterator", "no iterator returned"))?,
        };
        let mut it = Some(iterator);
        while let Some(current) = it.take() {
            let page = records_page(client, &current).await?;
            let records = page.records;
            changes.extend(page.changes);
            let next = page.next;
            if records == 0 {
                // Caught up (open shard) or finished (closed shard: no next).
                position.iterators.insert(shard.clone(), next);
                break;
            }
            // Keep the position after every page, and stop at a short page: on a
            // busy table a new record arrives before every call, so "until an empty
            // page" would never return (the next call resumes from here).
            position.iterators.insert(shard.clone(), next.clone());
            match next {
                Some(n) if records >= GET_RECORDS_PAGE => it = Some(n),
                _ => {}
            }
        }
    }
    Ok(changes)
}

/// What [`drain_into`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DrainReport {
    pub changes: usize,
    /// Entries written (one per transition; a redelivered change counts again).
    pub rows: usize,
    /// Items written (`UpdateItem` calls: one per group).
    pub items: usize,
    pub exhausted: Vec<TransactionId>,
}

/// Drains the stream and audits every change as one batch (the local stand-in for
/// the Lambda). The first failure is returned after the groups that could be
/// written were written, and `position` is left where it was: as the event source
/// retries a failed batch, the next call reads the same changes again (rewriting an
/// entry sets the same value), so a write that failed is not skipped for good.
pub async fn drain_into(
    writer: &AuditWriter,
    client: &aws_sdk_dynamodbstreams::Client,
    stream_arn: &str,
    position: &mut StreamPosition,
) -> Result<DrainReport, AuditError> {
    let before = position.clone();
    let result = drain_once(writer, client, stream_arn, position).await;
    if result.is_err() {
        *position = before;
    }
    result
}

async fn drain_once(
    writer: &AuditWriter,
    client: &aws_sdk_dynamodbstreams::Client,
    stream_arn: &str,
    position: &mut StreamPosition,
) -> Result<DrainReport, AuditError> {
    let changes = drain_stream(client, stream_arn, position).await?;
    let batch = writer
        .apply_batch(changes.iter().map(|c| (c.old.as_ref(), c.new.as_ref())))
        .await;
    let mut report = DrainReport {
        changes: changes.len(),
        rows: batch.entries_written(),
        items: batch.items_written,
        ..DrainReport::default()
    };
    for r in batch.results {
        match r {
            Ok(Audited::Written { entry, exhausted }) => {
                if exhausted {
                    report.exhausted.push(entry.transaction_id);
                }
            }
            Ok(Audited::Skipped) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(report)
}

/// The on-failure record the stream event source mapping writes when it gives up on a
/// batch: here the whole first shard of `stream_arn` so far (what `retryctl redrive
/// audit` reads again), as JSON text; and that shard's id. `shard_id` replaces the
/// shard's own id in the record when given (a shard the stream does not have).
pub async fn failure_record(
    streams: &aws_sdk_dynamodbstreams::Client,
    stream_arn: &str,
    shard_id: Option<&str>,
) -> Result<(String, String), String> {
    let described = streams
        .describe_stream()
        .stream_arn(stream_arn)
        .send()
        .await
        .map_err(|e| format!("DescribeStream {stream_arn}: {e:?}"))?;
    let shard = described
        .stream_description()
        .and_then(|d| d.shards().first())
        .ok_or_else(|| format!("stream {stream_arn} has no shard"))?;
    let own = shard.shard_id().unwrap_or_default().to_owned();
    let start = shard
        .sequence_number_range()
        .and_then(|r| r.starting_sequence_number())
        .ok_or_else(|| format!("shard {own} has no starting sequence number"))?;
    let record = serde_json::json!({
        "requestContext": {"condition": "RetryAttemptsExhausted", "approximateInvokeCount": 3},
        "version": "1.0",
        "DDBStreamBatchInfo": {
            "shardId": shard_id.unwrap_or(&own),
            "startSequenceNumber": start,
            "endSequenceNumber": "9".repeat(start.len()),
            "batchSize": 10,
            "streamArn": stream_arn,
        }
    });
    Ok((record.to_string(), own))
}
