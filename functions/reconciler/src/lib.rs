//! The reconciler (cron): finds transactions stuck in an intermediate state longer than
//! the threshold and runs the domain's reconcile plans on them, through the same
//! idempotent paths as the handlers. Per write shard it pages through
//! [`StuckIndex::query_stuck`] (a Query on the sparse, sharded index, never a Scan) with
//! `before = now − threshold`, reads each record (strongly consistent) and lets the
//! domain decide; shards are visited round-robin within the run's budget
//! (RECONCILE_MAX_ITEMS), and an index entry whose item will not decode is skipped and
//! reported, never failing its page. With a circuit breaker, the answer deadlines that
//! fired are its signals, and an unanswered request past its deadline asks the breaker
//! before it goes out again. Why, and every case:
//! `docs/design.md#the-reconciler-and-its-index`,
//! `docs/design.md#the-circuit-breaker-an-outage-pauses-retries`.

use domain::breaker::Tally;
use domain::decide::{Ack, DropReason, Input};
use domain::exec::ReconcilePorts;
use domain::policy::RandomSource;
use domain::ports::{
    AuditNotes, Clock, Payloads, RequestPublisher, RetryPublisher, ScheduleCreator, StuckIndex,
    StuckQuery, SystemClock, Transitions,
};
use domain::{Status, Timestamp, TransactionRecord};
use futures::StreamExt;
use runtime::breaker::{BreakerGate, BreakerStore};
use runtime::drive::{drive, run_all, verdict};
use runtime::metric::{invocation, Metric};
use runtime::metrics::{names, Metrics};
use runtime::settings::{Seeds, Settings};
use runtime::verdict::Verdict;
use serde::{Serialize, Serializer};
use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use thiserror::Error;
use tracing::Instrument;

pub mod wiring;

/// The function's name (binary, `cargo lambda` function, metrics dimension).
pub const FUNCTION: &str = "reconciler";

/// How much one run may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Records examined per run at most (RECONCILE_MAX_ITEMS).
    pub max_items: u32,
    /// Query page size.
    pub page_size: u32,
    /// Records of a page handled at the same time.
    pub concurrency: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_items: domain::defaults::RECONCILE_MAX_ITEMS,
            page_size: 100,
            concurrency: 8,
        }
    }
}

/// What one run did: counts by state and action, as logged and returned.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Report {
    /// `now − threshold`: records older than this were looked at.
    pub before: String,
    pub examined: u64,
    /// `{"SCHEDULING": {"scheduled": 2, "requeued": 1}, "SENDING": {"requeued": 1}}`.
    pub actions: BTreeMap<Status, BTreeMap<Action, u64>>,
    /// Records whose plan failed (left for the next run).
    pub errors: u64,
    /// Index queries that failed.
    pub query_errors: u64,
    /// Index entries whose item would not decode (skipped, logged, counted).
    pub undecodable: u64,
    /// True when the run stopped at the item bound with work left.
    pub truncated: bool,
}

impl Report {
    /// The count for one state and action (0 when none).
    pub fn count(&self, status: Status, action: Action) -> u64 {
        self.actions
            .get(&status)
            .and_then(|m| m.get(&action))
            .copied()
            .unwrap_or(0)
    }
}

/// What the reconciler did with one record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Action {
    /// Its plan acknowledged: `scheduled` (the schedule created from the stored
    /// instant), `requeued` (the retry event put back), or another acknowledgement.
    Done(Ack),
    /// Not stuck (any more).
    NotStuck,
    /// Requeued RECONCILE_REQUEUE_MAX times without progress: left alone, reported.
    Parked,
    /// Its plan failed; the next run tries again.
    Error,
}

impl Action {
    /// The action of a reconcile verdict.
    pub fn of(v: &Verdict) -> Self {
        match v {
            Verdict::Done(a) => Action::Done(*a),
            Verdict::Dropped(DropReason::Parked { .. }) => Action::Parked,
            // Otherwise a reconcile plan drops only what is not stuck.
            Verdict::Dropped(_) => Action::NotStuck,
            // No reconcile plan ends `Handled` (it is for consumers outside the
            // domain); were one to, it would show as an error, never as work done.
            Verdict::Retry { .. } | Verdict::Permanent(_) | Verdict::Handled(_) => Action::Error,
        }
    }

    /// `scheduled`, `requeued`, `not-stuck`, `error`.
    pub fn label(self) -> &'static str {
        match self {
            Action::Done(Ack::ReconcilerScheduled) => "scheduled",
            Action::Done(Ack::ReconcilerRequeued) => "requeued",
            Action::Done(a) => a.label(),
            Action::NotStuck => "not-stuck",
            Action::Parked => "parked",
            Action::Error => "error",
        }
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

impl Serialize for Action {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.label())
    }
}

/// The store a reconciler run queries and changes: the stuck index, the records'
/// transitions and the payloads republished.
pub trait ReconcileStore: StuckIndex + Transitions + Payloads {}
impl<S: StuckIndex + Transitions + Payloads> ReconcileStore for S {}

/// One reconciler run at `now`: the index queried through `ports.store`, each record
/// found decided and its plan performed over `ports`. `breaker`: the circuit breaker
/// an unanswered request past its deadline asks before it goes out again.
///
/// With a circuit breaker, the answer deadlines that fired in this run (a request
/// published again, or abandoned UNANSWERED) are counted into its window once per run.
#[allow(clippy::too_many_arguments)]
pub async fn run_once<St, Sc, Rt, Rq, Nt, Br>(
    ports: &ReconcilePorts<'_, St, Sc, Rt, Rq, Nt>,
    settings: &Settings,
    now: Timestamp,
    breaker: Option<&BreakerGate<Br>>,
    limits: &Limits,
    seeds: &Seeds,
    metrics: &Metrics,
) -> Report
where
    St: ReconcileStore,
    Sc: ScheduleCreator,
    Rt: RetryPublisher,
    Rq: RequestPublisher,
    Nt: AuditNotes,
    Br: BreakerStore,
{
    let ctx = settings.context(now);
    let threshold_ms = i64::try_from(settings.reconcile_threshold.as_millis()).unwrap_or(i64::MAX);
    let before = now.plus_millis(threshold_ms.saturating_neg());
    let store = ports.store;
    let mut report = Report {
        before: before.to_rfc3339(),
        ..Report::default()
    };
    let shards = settings.shards.max(1);
    let first = first_shard(shards, &mut seeds.next());
    let mut queue: VecDeque<(u16, Option<String>)> =
        (0..shards).map(|i| ((first + i) % shards, None)).collect();
    let mut remaining = limits.max_items;
    while let Some((shard, cursor)) = queue.pop_front() {
        if remaining == 0 {
            report.truncated = true;
            break;
        }
        let query = StuckQuery {
            shard,
            before,
            limit: page_limit(limits.page_size, remaining, queue.len() + 1),
            cursor,
        };
        let page = match store.query_stuck(&query).await {
            Ok(page) => page,
            Err(e) => {
                report.query_errors += 1;
                metrics.incr(names::RECONCILE_ERRORS);
                tracing::warn!(shard, error = %e, "reconciler index query failed");
                continue;
            }
        };
        for bad in &page.undecodable {
            report.undecodable += 1;
            metrics.incr(names::RECONCILE_UNDECODABLE);
            tracing::error!(
                shard,
                key = %bad.key,
                detail = %bad.detail,
                "reconciler skipped an index entry whose item will not decode; fix or delete the item"
            );
        }
        let taken = u32::try_from(page.records.len() + page.undecodable.len()).unwrap_or(u32::MAX);
        remaining = remaining.saturating_sub(taken);
        let verdicts: Vec<(Status, String, Verdict)> = futures::stream::iter(page.records)
            .map(|record: TransactionRecord| {
                let ctx = &ctx;
                async move {
                    let status = record.status;
                    let id = record.transaction_id.to_string();
                    let span = tracing::info_span!(
                        "reconcile",
                        transaction_id = %record.transaction_id,
                        status = %status,
                    );
                    async move {
                        let mut rng = seeds.next();
                        // Only a request about to go out again asks the breaker (a
                        // probe is counted when it is one).
                        let (hold, probe) = match breaker {
                            Some(gate) if domain::decide::asks_breaker(&record, ctx) => {
                                gate.admission(now, &mut rng, metrics).await
                            }
                            _ => (None, false),
                        };
                        // A context of its own only for a request the breaker holds or
                        // lets out as a probe; every other record shares the run's.
                        let own;
                        let ctx = if hold.is_some() || probe {
                            own = ctx.clone().with_hold(hold).with_probe(probe);
                            &own
                        } else {
                            ctx
                        };
                        let driven =
                            drive(Input::Reconcile(record), ports, ctx, &mut rng, &mut run_all)
                                .await;
                        (status, id, verdict(&driven, metrics))
                    }
                    .instrument(span)
                    .await
                }
            })
            .buffer_unordered(limits.concurrency.max(1))
            .collect()
            .await;
        for (status, id, v) in verdicts {
            report.examined += 1;
            metrics.incr(names::RECONCILE_EXAMINED);
            if status != Status::InProgress {
                metrics.incr(names::RECONCILE_STUCK);
            }
            let act = Action::of(&v);
            if act == Action::Parked {
                metrics.incr(names::RECONCILE_PARKED);
                tracing::error!(
                    transaction_id = %id,
                    status = %status,
                    "reconciler parked a record: requeued RECONCILE_REQUEUE_MAX times without progress; see `retryctl stuck` and the retry DLQ for why its retry keeps failing"
                );
            }
            if act == Action::Error {
                report.errors += 1;
                metrics.incr(names::RECONCILE_ERRORS);
                tracing::warn!(status = %status, verdict = ?v, "reconciling a record failed; the next run retries it");
            }
            metrics.record(Metric::Reconciled(status, act.label()));
            *report
                .actions
                .entry(status)
                .or_default()
                .entry(act)
                .or_default() += 1;
        }
        if let Some(next) = page.next {
            queue.push_back((shard, Some(next)));
        }
    }
    if report.truncated {
        metrics.incr(names::RECONCILE_TRUNCATED);
    }
    report
}

/// The shard a run starts from: drawn from the run's seed, so over runs every shard
/// comes first as often as any other.
fn first_shard(shards: u16, rng: &mut impl RandomSource) -> u16 {
    let drawn = (rng.next_unit() * f64::from(shards)).floor();
    (0..shards).find(|s| f64::from(*s) >= drawn).unwrap_or(0)
}

/// A page's size: the page size, but no more than an equal share (rounded up) of
/// what is left of the run's budget among the `pending` shard pages queued.
fn page_limit(page_size: u32, remaining: u32, pending: usize) -> u32 {
    let pending = u32::try_from(pending.max(1)).unwrap_or(u32::MAX);
    page_size.max(1).min(remaining.div_ceil(pending)).max(1)
}

/// The run failed as a whole (some index query failed): the invocation reports an
/// error so the function's Errors metric shows it; what it did is still logged.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{failed} reconciler index queries failed (see the log); examined {examined} records")]
pub struct ReconcileFailed {
    pub failed: u64,
    pub examined: u64,
}

impl Report {
    /// The answer deadlines this run saw fire (a request published again or
    /// abandoned), as the breaker counts them: not those published again as probes.
    pub fn deadlines_fired(&self) -> Tally {
        let fired = self.count(Status::InProgress, Action::Done(Ack::ReconcilerRepublished))
            + self.count(Status::InProgress, Action::Done(Ack::Unanswered));
        Tally {
            deadlines: u32::try_from(fired).unwrap_or(u32::MAX),
            ..Tally::default()
        }
    }
}

/// The reconciler with its ports, built once per process.
pub struct Reconciler<St, Sc, Rt, Rq, Nt, Br, C = SystemClock> {
    pub store: St,
    pub scheduler: Sc,
    pub retries: Rt,
    /// The request queue: an unanswered request is published again (direct mode),
    /// a stuck SENDING published (both modes).
    pub requests: Rq,
    /// The audit table: outbox mode notes a send claimed too long ago, not repeated.
    pub notes: Nt,
    /// The circuit breaker the deadlines feed (`None`: no breaker).
    pub breaker: Option<BreakerGate<Br>>,
    pub clock: C,
    pub settings: Settings,
    pub limits: Limits,
    pub seeds: Seeds,
    /// METRICS_NAMESPACE.
    pub namespace: String,
}

impl<St, Sc, Rt, Rq, Nt, Br, C> Reconciler<St, Sc, Rt, Rq, Nt, Br, C>
where
    St: ReconcileStore,
    Sc: ScheduleCreator,
    Rt: RetryPublisher,
    Rq: RequestPublisher,
    Nt: AuditNotes,
    Br: BreakerStore,
    C: Clock,
{
    /// One run, counting into `metrics`.
    pub async fn run(&self, metrics: &Metrics) -> Report {
        let ports = ReconcilePorts {
            store: &self.store,
            scheduler: &self.scheduler,
            retries: &self.retries,
            requests: &self.requests,
            notes: &self.notes,
        };
        let report = run_once(
            &ports,
            &self.settings,
            self.clock.now(),
            self.breaker.as_ref(),
            &self.limits,
            &self.seeds,
            metrics,
        )
        .await;
        if let Some(gate) = &self.breaker {
            let now = self.clock.now();
            gate.observe_counted(&report.deadlines_fired(), now, metrics)
                .await;
            gate.gauge(now, metrics).await;
        }
        report
    }

    /// One invocation from the schedule's event (any JSON; its `id` and `time` are
    /// logged): the run, its report logged, the metrics line on stdout.
    pub async fn invoke(&self, event: serde_json::Value) -> Result<Report, ReconcileFailed> {
        tracing::info!(
            event_id = event.get("id").and_then(|v| v.as_str()).unwrap_or(""),
            event_time = event.get("time").and_then(|v| v.as_str()).unwrap_or(""),
            "reconciler run"
        );
        let report = invocation(&self.namespace, FUNCTION, async |m| self.run(m).await).await;
        tracing::info!(
            examined = report.examined,
            errors = report.errors,
            query_errors = report.query_errors,
            truncated = report.truncated,
            actions = %serde_json::to_string(&report.actions).unwrap_or_default(),
            "reconciler run done"
        );
        if report.query_errors > 0 {
            return Err(ReconcileFailed {
                failed: report.query_errors,
                examined: report.examined,
            });
        }
        Ok(report)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The breaker's deadline signal: requests published again or abandoned count; a
    /// request held back by the breaker and published once it let requests out does
    /// not (its deadline passed during the outage), nor one published as a probe,
    /// nor anything else.
    #[test]
    fn only_fresh_deadlines_are_the_breakers_signal() {
        let mut r = Report::default();
        let mut add = |ack: Ack, n: u64| {
            *r.actions
                .entry(Status::InProgress)
                .or_default()
                .entry(Action::Done(ack))
                .or_default() += n;
        };
        add(Ack::ReconcilerRepublished, 3);
        add(Ack::Unanswered, 1);
        add(Ack::ReconcilerRepublishedAfterHold, 7);
        add(Ack::ReconcilerHeld, 5);
        add(Ack::ReconcilerAwaiting, 2);
        assert_eq!(
            r.deadlines_fired(),
            Tally {
                deadlines: 4,
                ..Tally::default()
            }
        );
        let mut probed = r.clone();
        *probed
            .actions
            .entry(Status::InProgress)
            .or_default()
            .entry(Action::Done(Ack::ReconcilerProbed))
            .or_default() += 6;
        assert_eq!(
            probed.deadlines_fired().deadlines,
            4,
            "a probe is not a deadline"
        );
    }
}
