//! The publisher (outbox mode): reads the transactions table's stream, filtered by
//! its event source to new images in SENDING without `publishing_since`, and runs
//! the domain's publish plan on each (`domain::decide::decide_publish`): the claim
//! write, the request to the FIFO request queue (deduplication id
//! `<id>#<attempt>#<round>`, paced by [`runtime::rate`]), SENDING → IN_PROGRESS. Records
//! are decided concurrently, reported in stream order: the first that failed is the
//! batch item failure, and Lambda retries the batch from it (a record already
//! published is dropped by the domain on the retry). Why and how:
//! `docs/functions.md#publisher`; its AWS wiring: [`wiring`].

use aws_lambda_events::dynamodb::{Event, EventRecord};
use aws_lambda_events::streams::{DynamoDbBatchItemFailure, DynamoDbEventResponse};
use domain::decide::Input;
use domain::exec::PublishPorts;
use domain::machine::TransactionRecord;
use domain::ports::{AuditNotes, Clock, Payloads, RequestPublisher, SystemClock, Transitions};
use domain::Known;
use futures::StreamExt;
use runtime::drive::{drive_from, run_all, verdict};
use runtime::metric::invocation;
use runtime::metrics::Metrics;
use runtime::rate::{self, Pacer};
use runtime::settings::{Seeds, Settings};
use runtime::verdict::Verdict;
use std::convert::Infallible;
use std::sync::Arc;

pub mod wiring;

/// The function's name (binary, `cargo lambda` function, metrics dimension).
pub const FUNCTION: &str = "publisher";

/// Stream records whose new image did not decode into a transaction record.
pub const UNDECODABLE_IMAGES: &str = "UndecodableImages";

/// The transaction record a stream record's new image holds; the error names the
/// attribute at fault.
pub fn new_image(record: &EventRecord) -> Result<TransactionRecord, String> {
    let json = serde_json::to_value(&record.change.new_image).map_err(|e| e.to_string())?;
    aws::item::flat_from_json(&json)
        .and_then(|flat| aws::item::record_from_flat(&flat))
        .map_err(|e| e.to_string())
}

/// The publisher with its ports, built once per process. `requests` is normally a
/// [`runtime::rate::Paced`] publisher to the FIFO request queue; `pacer` is the same
/// pacer, for its counters.
pub struct Publisher<St, Rq, Nt, C = SystemClock> {
    pub store: St,
    pub requests: Rq,
    /// The audit table: a send claimed too long ago, not repeated, is noted there.
    pub notes: Nt,
    pub clock: C,
    /// The deployment's rules (always outbox delivery).
    pub settings: Settings,
    /// Records decided at the same time (BATCH_CONCURRENCY).
    pub concurrency: usize,
    pub seeds: Seeds,
    pub pacer: Option<Arc<Pacer>>,
    /// METRICS_NAMESPACE.
    pub namespace: String,
}

impl<St, Rq, Nt, C> Publisher<St, Rq, Nt, C>
where
    St: Transitions + Payloads,
    Rq: RequestPublisher,
    Nt: AuditNotes,
    C: Clock,
{
    /// Publishes one record's request as the domain decides; `Err` says why the
    /// record must be retried.
    async fn publish_one(&self, record: &EventRecord, metrics: &Metrics) -> Result<(), String> {
        let image = new_image(record).inspect_err(|_| metrics.incr(UNDECODABLE_IMAGES))?;
        let ctx = self.settings.context(self.clock.now());
        let ports = PublishPorts {
            store: &self.store,
            requests: &self.requests,
            notes: &self.notes,
        };
        let mut rng = self.seeds.next();
        let known = Known::Record(&image);
        let input = Input::Publish(image.clone());
        let driven = drive_from(input, known, &ports, &ctx, &mut rng, &mut run_all).await;
        match verdict(&driven, metrics) {
            Verdict::Done(_) | Verdict::Handled(_) | Verdict::Dropped(_) => Ok(()),
            Verdict::Retry { error } => Err(error),
            Verdict::Permanent(p) => Err(p.detail),
        }
    }

    /// Processes one stream batch, counting into `metrics`: the first record in
    /// stream order that failed is reported, so Lambda retries from it.
    pub async fn handle_event(&self, event: &Event, metrics: &Metrics) -> DynamoDbEventResponse {
        // By index: a closure taking `&EventRecord` would make the future `Send` for
        // one lifetime only, and the local stack invokes it as a `Send` future.
        let records = &event.records;
        let work = futures::stream::iter(0..records.len())
            .map(|i| async move { (&records[i], self.publish_one(&records[i], metrics).await) })
            .buffered(self.concurrency.max(1))
            .collect::<Vec<_>>();
        let results = rate::counted(self.pacer.as_deref(), metrics, work).await;
        let mut response = DynamoDbEventResponse::default();
        let failed = results
            .into_iter()
            .find_map(|(r, res)| res.err().map(|e| (r, e)));
        if let Some((record, error)) = failed {
            let seq = record.change.sequence_number.clone();
            tracing::error!(
                event_id = %record.event_id,
                sequence_number = seq.as_deref().unwrap_or(""),
                %error,
                "publish failed: Lambda retries the batch from this record"
            );
            let mut failure = DynamoDbBatchItemFailure::default();
            // Without a sequence number the whole batch is retried (an empty
            // identifier fails the batch).
            failure.item_identifier = Some(seq.unwrap_or_default());
            response.batch_item_failures.push(failure);
        }
        response
    }

    /// One invocation: the batch, then the metrics line on stdout.
    pub async fn invoke(&self, event: Event) -> Result<DynamoDbEventResponse, Infallible> {
        Ok(invocation(&self.namespace, FUNCTION, async |m| {
            self.handle_event(&event, m).await
        })
        .await)
    }
}
