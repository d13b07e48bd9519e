//! What every SQS-driven function (response handler, retry handler, starter) holds
//! besides its ports, and the shape of its batch: each message parsed, decided with
//! the context of now and a fresh draw, its failures reported back to SQS
//! ([`crate::batch`]). Why: `docs/functions.md`.

use crate::batch::{process_batch, BatchError, BatchOptions, Inbound};
use crate::metrics::Metrics;
use crate::settings::{Seeds, Settings};
use crate::verdict::Verdict;
use aws_lambda_events::sqs::{SqsBatchResponse, SqsEvent};
use domain::policy::SplitMix64;
use domain::ports::{Clock, DeadLetter, SystemClock};
use domain::Context;
use std::future::Future;

/// The part of an SQS-driven function that is the same in each: where a message that
/// can never be handled goes, the clock, the deployment's rules, how a batch is run,
/// the draws, and the metrics namespace.
pub struct SqsFunction<D, C = SystemClock> {
    /// The function's dead-letter queue, for a message that can never be handled.
    pub dead_letter: D,
    pub clock: C,
    pub settings: Settings,
    pub batch: BatchOptions,
    pub seeds: Seeds,
    /// METRICS_NAMESPACE.
    pub namespace: String,
}

impl<D: DeadLetter, C: Clock> SqsFunction<D, C> {
    /// Runs `handle` on each message of `event`, parsed as `M`, with the decision
    /// context of the moment it is handled and a fresh draw.
    pub async fn each<M, F, Fut>(
        &self,
        event: SqsEvent,
        metrics: &Metrics,
        handle: F,
    ) -> Result<SqsBatchResponse, BatchError>
    where
        M: Inbound,
        F: Fn(M, Context, SplitMix64) -> Fut,
        Fut: Future<Output = Verdict>,
    {
        let handle = &handle;
        process_batch(event, &self.batch, &self.dead_letter, metrics, |m: M| {
            let ctx = self.settings.context(self.clock.now());
            handle(m, ctx, self.seeds.next())
        })
        .await
    }
}
