//! What the functions' wirings share: the circuit breaker over DynamoDB and the
//! settings every function starts from. Each function builds itself from its
//! configuration in its own crate (`response_handler::wiring`, `retry_handler::wiring`,
//! `reconciler::wiring`), for the Lambda `main`s and the local stack alike
//! (`docs/functions.md`, "Ports").

use crate::batch::BatchOptions;
use crate::breaker::BreakerGate;
use crate::function::SqsFunction;
use crate::rate::{Paced, Pacer, RateError};
use crate::settings::{Seeds, Settings};
use aws::breaker::DynamoBreaker;
use aws::config::BreakerConfig;
use aws::sqs::{SqsDeadLetter, SqsRequestPublisher};
use domain::policy::PolicySet;
use domain::ports::SystemClock;
use std::sync::Arc;

/// Write shards of the breaker's window counts per bucket: a burst of technical
/// failures spreads over this many items.
const BREAKER_SHARDS: u8 = 4;

/// The circuit breaker of the external service for the function `by`, when
/// configured.
pub fn breaker_gate(
    client: &aws::clients::DynamoClient,
    c: Option<&BreakerConfig>,
    by: &str,
) -> Option<BreakerGate<DynamoBreaker>> {
    c.map(|c| {
        BreakerGate::new(
            DynamoBreaker::new(
                client.clone(),
                &c.table,
                aws::breaker::SERVICE,
                c.settings,
                BREAKER_SHARDS,
            ),
            c.settings,
            c.refresh,
            by,
        )
    })
}

/// The settings a function starts from: its backoff policies and the stuck index's
/// write shards, every other setting at its default.
pub fn settings(policies: PolicySet, shards: u16) -> Settings {
    Settings {
        policies,
        shards,
        ..Settings::default()
    }
}

/// The request queue at `url` behind a [`Pacer`] of the function's own at `rate`
/// requests per second (kept across warm invocations), and that pacer, for its
/// counters.
pub fn paced_requests(
    sqs: &aws_sdk_sqs::Client,
    url: &str,
    rate: f64,
) -> Result<(Paced<SqsRequestPublisher>, Arc<Pacer>), RateError> {
    let pacer = Arc::new(Pacer::per_second(rate)?);
    let requests = SqsRequestPublisher::new(sqs.clone(), url);
    Ok((Paced::new(requests, Arc::clone(&pacer)), pacer))
}

/// The part every SQS-driven function shares, deployed: its dead-letter queue at
/// `dlq_url`, the system clock, `settings`, `concurrency` records at a time
/// (BATCH_CONCURRENCY), draws seeded from entropy, metrics in `namespace`.
pub fn sqs_function(
    sqs: &aws_sdk_sqs::Client,
    dlq_url: &str,
    settings: Settings,
    concurrency: usize,
    namespace: &str,
) -> SqsFunction<SqsDeadLetter> {
    SqsFunction {
        dead_letter: SqsDeadLetter::new(sqs.clone(), dlq_url),
        clock: SystemClock,
        settings,
        batch: BatchOptions { concurrency },
        seeds: Seeds::from_entropy(),
        namespace: namespace.to_owned(),
    }
}
