//! A simulated external service: the other side of the request and response queues.
//!
//! It consumes the request queue, deduplicates by the `idempotency_key` attribute (the
//! pattern's precondition) and answers SUCCESS or CANCELLED on the response queue after
//! a latency; each attempt's answer is scripted by seed, transaction and attempt alone
//! ([`scripted_outcome`]). In an outage window it answers ERROR (`HTTP_503`) or
//! nothing. A repeated key gets the answer already given. It counts requests per
//! (transaction, attempt), raw and deduplicated, and per second; and keeps the ledger
//! of a service that does not deduplicate ([`Runs`], judged by
//! [`testkit::oracle::Service::runs_again`]) for `--service non-idempotent`.

use super::stop::Stop;
use aws_sdk_sqs::types::MessageSystemAttributeName;
use domain::policy::{RandomSource, SplitMix64};
use domain::{Outcome, Request, Response};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Debug, Clone)]
pub struct ExternalSettings {
    pub request_queue_url: String,
    pub response_queue_url: String,
    /// Probability that a new request is answered CANCELLED.
    pub cancel_probability: f64,
    /// Latency before answering, drawn uniformly in `[min, max]`.
    pub latency_min: Duration,
    pub latency_max: Duration,
    /// Probability that an answer is sent twice (at-least-once delivery on the way back).
    pub duplicate_response_probability: f64,
    /// Probability that a request is taken and never answered (a silent service): the
    /// answer deadline must rescue it.
    pub silent_probability: f64,
    /// The `reason` of a CANCELLED answer.
    pub cancel_reason: String,
    /// Concurrent consumers.
    pub consumers: usize,
    pub seed: u64,
    /// A window during which every request read is answered ERROR, or not at all.
    pub outage: Option<Outage>,
}

/// How the service behaves during an outage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OutageMode {
    /// Every request read is answered ERROR with the reason [`OUTAGE_REASON`].
    Error,
    /// Every request read is taken and never answered.
    Silent,
}

impl OutageMode {
    pub const fn label(self) -> &'static str {
        match self {
            OutageMode::Error => "error",
            OutageMode::Silent => "silent",
        }
    }
}

/// An outage window, in seconds from the start of the run ([`ExternalStats::start_run`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Outage {
    pub start: Duration,
    pub duration: Duration,
    pub mode: OutageMode,
}

impl Outage {
    pub fn end(&self) -> Duration {
        self.start + self.duration
    }

    fn covers(&self, since_start: Duration) -> bool {
        since_start >= self.start && since_start < self.end()
    }
}

/// The reason of the ERROR answers given during an outage.
pub const OUTAGE_REASON: &str = "HTTP_503";

/// The answer the service gives to `attempt` of `transaction_id`: CANCELLED with
/// probability `cancel_probability`, else SUCCESS, drawn from the seed, the
/// transaction and the attempt alone (the same answer in any run with that seed).
pub fn scripted_outcome(
    seed: u64,
    cancel_probability: f64,
    transaction_id: &str,
    attempt: u32,
) -> Outcome {
    // FNV-1a over the key, mixed into the seed.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in transaction_id.bytes().chain(attempt.to_le_bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    let mut rng = SplitMix64::new(seed ^ h);
    if rng.next_unit() < cancel_probability {
        Outcome::Cancelled
    } else {
        Outcome::Success
    }
}

/// The attempts a transaction of at most `max_attempts` uses when every answer is
/// the scripted one: the first SUCCESS, else all of them.
pub fn scripted_attempts(
    seed: u64,
    cancel_probability: f64,
    transaction_id: &str,
    max_attempts: u32,
) -> u32 {
    (1..=max_attempts)
        .find(|k| {
            scripted_outcome(seed, cancel_probability, transaction_id, *k) == Outcome::Success
        })
        .unwrap_or(max_attempts)
}

/// One attempt as the service saw it: the checkers' own witness type.
pub use testkit::oracle::evidence::Seen;

/// The runs of a service that does not deduplicate: every request message it
/// processes is a run, except an ERROR answer (the attempt did not run) and a request
/// taken and never answered by a silent or down service (never processed). A copy of
/// one SQS message the queue delivered again (same message id) is the same message:
/// not a run. Whether a run is a second run of its attempt is the checkers' rule
/// ([`testkit::oracle::Service::runs_again`]), not restated here.
#[derive(Debug, Default)]
pub struct Runs {
    service: testkit::oracle::Service<String>,
    messages: HashSet<String>,
    per_attempt: BTreeMap<(String, u32), u32>,
    executed_twice: BTreeMap<(String, u32), u32>,
    redelivered: u64,
}

/// The ledger at the end of a run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunsSeen {
    /// Runs per (transaction, attempt).
    pub per_attempt: BTreeMap<(String, u32), u32>,
    /// The attempts run more than once, with the runs the rule judged second runs.
    pub executed_twice: BTreeMap<(String, u32), u32>,
    /// Copies of a message already received (same SQS message id): not runs.
    pub redelivered: u64,
}

impl Runs {
    /// A request message for `attempt` of `transaction_id` processed with `outcome`;
    /// `message_id`: its SQS message id (`None`: each call is a message of its own).
    fn processed(
        &mut self,
        transaction_id: &str,
        attempt: u32,
        message_id: Option<&str>,
        outcome: Outcome,
    ) {
        if let Some(m) = message_id {
            if !self.messages.insert(m.to_owned()) {
                self.redelivered += 1;
                return;
            }
        }
        let at = (transaction_id.to_owned(), attempt);
        let again = match (
            domain::TransactionId::parse(transaction_id),
            domain::Attempt::new(attempt),
        ) {
            (Ok(id), Ok(a)) => {
                let tx = transaction_id.to_owned();
                let again = (outcome != Outcome::Error)
                    .then(|| self.service.runs_again(&tx, attempt))
                    .flatten();
                // Its receipt's checks (the key, the budget) are the report's other
                // witnesses' business: only its memory of what it ran is used here.
                let key = domain::IdempotencyKey::new(&id, a);
                let _ = self
                    .service
                    .receive(tx.clone(), &id, attempt, key.as_str(), None, attempt);
                self.service.answer(tx, attempt, outcome);
                again
            }
            // Not a request any function publishes: counted, never judged.
            _ => None,
        };
        if outcome == Outcome::Error {
            return;
        }
        *self.per_attempt.entry(at.clone()).or_insert(0) += 1;
        if again.is_some() {
            *self.executed_twice.entry(at).or_insert(0) += 1;
        }
    }

    fn seen(&self) -> RunsSeen {
        RunsSeen {
            per_attempt: self.per_attempt.clone(),
            executed_twice: self.executed_twice.clone(),
            redelivered: self.redelivered,
        }
    }
}

#[derive(Debug, Default)]
pub struct ExternalStats {
    by_key: Mutex<BTreeMap<(String, u32), Seen>>,
    /// `SentTimestamp` (ms) of each unique request: when it was published (through
    /// the HTTP bridge: when it reached the service).
    sent_ms: Mutex<Vec<i64>>,
    /// The same, for retried requests (attempt >= 2) only.
    retried_sent_ms: Mutex<Vec<i64>>,
    pub malformed: AtomicU64,
    pub missing_key_attribute: AtomicU64,
    pub responses_sent: AtomicU64,
    pub send_failures: AtomicU64,
    /// Requests taken off the queue and never answered (`silent_probability`).
    pub dropped_silently: AtomicU64,
    /// Requests answered ERROR during the outage window.
    pub outage_errors: AtomicU64,
    /// Requests taken and never answered during the outage window.
    pub outage_silenced: AtomicU64,
    /// The start of the run, the origin of the outage window (unset: no outage yet).
    pub(crate) run_started: std::sync::OnceLock<tokio::time::Instant>,
    /// What a service that does not deduplicate would have run.
    runs: Mutex<Runs>,
}

impl ExternalStats {
    /// Every (transaction, attempt) received, with its raw count and answer.
    pub fn seen(&self) -> BTreeMap<(String, u32), Seen> {
        self.by_key.lock().map(|g| g.clone()).unwrap_or_default()
    }

    /// The runs of a service that does not deduplicate ([`Runs`]).
    pub fn runs(&self) -> RunsSeen {
        self.runs.lock().map(|r| r.seen()).unwrap_or_default()
    }

    pub fn raw_requests(&self) -> u64 {
        self.seen().values().map(|s| u64::from(s.raw)).sum()
    }

    pub fn unique_requests(&self) -> u64 {
        self.seen().len() as u64
    }

    /// Highest number of unique requests published within any one second (a sliding
    /// window over each message's `SentTimestamp`, the instant SQS accepted it).
    pub fn peak_per_second(&self) -> u32 {
        self.sent_ms
            .lock()
            .map(|g| max_in_any_second(&g))
            .unwrap_or(0)
    }

    /// The same for retried requests (attempt >= 2): what the retry handler's rate
    /// bound limits.
    pub fn peak_retried_per_second(&self) -> u32 {
        self.retried_sent_ms
            .lock()
            .map(|g| max_in_any_second(&g))
            .unwrap_or(0)
    }

    pub fn get(&self, c: &AtomicU64) -> u64 {
        c.load(Ordering::Relaxed)
    }

    /// Marks the start of the run: the outage window counts from here.
    pub fn start_run(&self, at: tokio::time::Instant) {
        let _ = self.run_started.set(at);
    }

    fn in_outage(&self, outage: Option<&Outage>) -> Option<OutageMode> {
        let o = outage?;
        let started = self.run_started.get()?;
        o.covers(started.elapsed()).then_some(o.mode)
    }
}

/// The service's behaviour, whatever carries its requests and answers: the SQS
/// consumer below ([`spawn`]) or the HTTP server ([`super::http_service`]).
pub(crate) struct Behaviour {
    pub(crate) settings: ExternalSettings,
    pub(crate) stats: Arc<ExternalStats>,
    rng: Mutex<SplitMix64>,
}

/// What the service does with one request it read.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Reply {
    /// Taken and never answered (`silent_probability`, or a silent outage).
    Silent,
    /// Answered `outcome` with `reason`; `twice`: the answer is delivered twice
    /// (`duplicate_response_probability`). During an outage `retry_after` is the
    /// time left until its end.
    Answer {
        outcome: Outcome,
        reason: Option<String>,
        twice: bool,
        retry_after: Option<Duration>,
    },
}

impl Behaviour {
    pub(crate) fn new(settings: ExternalSettings, stats: Arc<ExternalStats>) -> Self {
        Self {
            rng: Mutex::new(SplitMix64::new(settings.seed)),
            settings,
            stats,
        }
    }

    fn draw(&self) -> f64 {
        self.rng.lock().map(|mut r| r.next_unit()).unwrap_or(0.5)
    }

    /// The service at work on `attempt` of `transaction_id`, published at `sent_ms`:
    /// its latency, then silence, or the answer already given for that key (an
    /// idempotent service replays its result), or the scripted one; during an
    /// outage, ERROR or nothing. Counts the request, and the run in the ledger of a
    /// service that does not deduplicate (`message_id`: the SQS message id; `None`:
    /// each call is a message of its own).
    pub(crate) async fn reply(
        &self,
        transaction_id: &str,
        attempt: u32,
        sent_ms: Option<i64>,
        message_id: Option<&str>,
    ) -> Reply {
        let s = &self.settings;
        let stats = &self.stats;
        // Read during the outage window: ERROR, or nothing at all.
        let outage = stats.in_outage(s.outage.as_ref());

        // Latency first: the service "works" on it.
        let span = s.latency_max.saturating_sub(s.latency_min);
        let latency = s.latency_min + span.mul_f64(self.draw());
        tokio::time::sleep(latency).await;

        // A silent service: the request is taken and forgotten, never answered (no
        // draw unless asked for, so the other answers of a seed stay the same).
        if s.silent_probability > 0.0 && self.draw() < s.silent_probability {
            stats.dropped_silently.fetch_add(1, Ordering::Relaxed);
            return Reply::Silent;
        }

        let outcome = {
            let fresh = scripted_outcome(s.seed, s.cancel_probability, transaction_id, attempt);
            let Ok(mut by_key) = stats.by_key.lock() else {
                return Reply::Silent;
            };
            let entry = by_key
                .entry((transaction_id.to_owned(), attempt))
                .or_insert(Seen {
                    raw: 0,
                    outcome: fresh,
                });
            entry.raw += 1;
            if entry.raw == 1 {
                if let Some(t) = sent_ms {
                    if let Ok(mut v) = stats.sent_ms.lock() {
                        v.push(t);
                    }
                    if attempt >= 2 {
                        if let Ok(mut v) = stats.retried_sent_ms.lock() {
                            v.push(t);
                        }
                    }
                }
            }
            entry.outcome
        };
        // The request reached the service (counted above, its scripted answer kept for
        // after the outage), but the service is down.
        let (outcome, reason, retry_after) = match outage {
            Some(OutageMode::Silent) => {
                stats.outage_silenced.fetch_add(1, Ordering::Relaxed);
                return Reply::Silent;
            }
            Some(OutageMode::Error) => {
                stats.outage_errors.fetch_add(1, Ordering::Relaxed);
                let left = match (s.outage.as_ref(), stats.run_started.get()) {
                    (Some(o), Some(started)) => o.end().saturating_sub(started.elapsed()),
                    _ => Duration::ZERO,
                };
                (Outcome::Error, Some(OUTAGE_REASON.to_owned()), Some(left))
            }
            None => (
                outcome,
                (outcome == Outcome::Cancelled).then(|| s.cancel_reason.clone()),
                None,
            ),
        };
        if let Ok(mut runs) = stats.runs.lock() {
            runs.processed(transaction_id, attempt, message_id, outcome);
        }
        Reply::Answer {
            outcome,
            reason,
            twice: self.draw() < s.duplicate_response_probability,
            retry_after,
        }
    }
}

struct Shared {
    sqs: aws_sdk_sqs::Client,
    behaviour: Behaviour,
}

pub fn spawn(
    sqs: aws_sdk_sqs::Client,
    settings: ExternalSettings,
    stop: Stop,
) -> (Vec<tokio::task::JoinHandle<()>>, Arc<ExternalStats>) {
    let stats = Arc::new(ExternalStats::default());
    let consumers = settings.consumers.max(1);
    let shared = Arc::new(Shared {
        sqs,
        behaviour: Behaviour::new(settings, stats.clone()),
    });
    let handles = (0..consumers)
        .map(|_| {
            let (shared, stop) = (shared.clone(), stop.clone());
            tokio::spawn(async move { consume(shared, stop).await })
        })
        .collect();
    (handles, stats)
}

async fn consume(shared: Arc<Shared>, mut stop: Stop) {
    let s = &shared.behaviour.settings;
    while !stop.is_stopped() {
        let received = tokio::select! {
            r = shared
                .sqs
                .receive_message()
                .queue_url(&s.request_queue_url)
                .max_number_of_messages(10)
                .wait_time_seconds(1)
                .message_attribute_names("All")
                .message_system_attribute_names(MessageSystemAttributeName::SentTimestamp)
                .send() => r,
            () = stop.stopped() => break,
        };
        let messages = match received {
            Ok(out) => out.messages.unwrap_or_default(),
            Err(e) => {
                tracing::warn!(error = %aws_sdk_sqs::error::DisplayErrorContext(e), "external service: ReceiveMessage failed");
                if stop.sleep(Duration::from_millis(500)).await {
                    break;
                }
                continue;
            }
        };
        let work = messages.into_iter().map(|m| {
            let shared = shared.clone();
            async move { answer(&shared, m).await }
        });
        futures::future::join_all(work).await;
    }
}

async fn answer(shared: &Shared, m: aws_sdk_sqs::types::Message) {
    let s = &shared.behaviour.settings;
    let stats = &shared.behaviour.stats;
    let body = m.body().unwrap_or_default();
    let delete = || async {
        if let Some(rh) = m.receipt_handle() {
            if let Err(e) = shared
                .sqs
                .delete_message()
                .queue_url(&s.request_queue_url)
                .receipt_handle(rh)
                .send()
                .await
            {
                tracing::warn!(error = %aws_sdk_sqs::error::DisplayErrorContext(e), "external service: DeleteMessage failed");
            }
        }
    };
    let request = match Request::parse(body) {
        Ok(r) => r,
        Err(e) => {
            stats.malformed.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(error = %e, "external service: malformed request dropped");
            delete().await;
            return;
        }
    };
    let key_attr = m
        .message_attributes()
        .and_then(|a| a.get("idempotency_key"))
        .and_then(|v| v.string_value())
        .map(str::to_owned);
    if key_attr.as_deref() != Some(request.idempotency_key.as_str()) {
        stats.missing_key_attribute.fetch_add(1, Ordering::Relaxed);
    }
    let sent_ms: Option<i64> = m
        .attributes()
        .and_then(|a| a.get(&MessageSystemAttributeName::SentTimestamp))
        .and_then(|v| v.parse().ok());
    let reply = shared
        .behaviour
        .reply(
            request.transaction_id.as_str(),
            request.attempt.get(),
            sent_ms,
            m.message_id(),
        )
        .await;
    let Reply::Answer {
        outcome,
        reason,
        twice,
        ..
    } = reply
    else {
        delete().await;
        return;
    };
    let response = Response {
        transaction_id: request.transaction_id.clone(),
        attempt: request.attempt,
        outcome,
        reason,
        retry_after_seconds: None,
        // The send answered, echoed as the contract asks.
        round: request.round,
        execution: None,
    };
    let copies = if twice { 2 } else { 1 };
    for _ in 0..copies {
        match shared
            .sqs
            .send_message()
            .queue_url(&s.response_queue_url)
            .message_body(response.to_json())
            .send()
            .await
        {
            Ok(_) => {
                stats.responses_sent.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                stats.send_failures.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(error = %aws_sdk_sqs::error::DisplayErrorContext(e), "external service: SendMessage (response) failed; the request will come back");
                // Leave the request on the queue: it reappears and is answered again.
                return;
            }
        }
    }
    delete().await;
}

/// The keys received more than once, with how many times.
pub fn duplicated_keys(seen: &BTreeMap<(String, u32), Seen>) -> HashMap<(String, u32), u32> {
    seen.iter()
        .filter(|(_, s)| s.raw > 1)
        .map(|(k, s)| (k.clone(), s.raw))
        .collect()
}

/// The largest number of instants (ms) inside any window `[t, t + 1 s)`.
pub fn max_in_any_second(times: &[i64]) -> u32 {
    let mut v = times.to_vec();
    v.sort_unstable();
    let (mut best, mut lo) = (0usize, 0usize);
    for hi in 0..v.len() {
        while v[hi] - v[lo] >= 1000 {
            lo += 1;
        }
        best = best.max(hi - lo + 1);
    }
    u32::try_from(best).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sliding_window_counts_a_half_open_second() {
        assert_eq!(max_in_any_second(&[]), 0);
        assert_eq!(max_in_any_second(&[0, 200, 400, 600, 800, 1000]), 5);
        assert_eq!(max_in_any_second(&[1000, 0, 999, 1998]), 3);
        assert_eq!(max_in_any_second(&[0, 1000, 2000]), 1);
        assert_eq!(max_in_any_second(&[5, 5, 5]), 3);
    }

    /// The ledger of a service that does not deduplicate: a copy of one message is
    /// not a run, an ERROR answer is not a run (the re-send after it runs the attempt
    /// once), a second message of an attempt already run is executed twice.
    #[test]
    fn the_ledger_counts_runs_by_message_and_doubles_by_the_rule() {
        let mut runs = Runs::default();
        let key = |a: u32| ("TX-000001".to_owned(), a);
        runs.processed("TX-000001", 1, Some("m1"), Outcome::Cancelled);
        runs.processed("TX-000001", 1, Some("m1"), Outcome::Cancelled);
        runs.processed("TX-000001", 2, Some("m2"), Outcome::Error);
        runs.processed("TX-000001", 2, Some("m3"), Outcome::Success);
        let seen = runs.seen();
        assert_eq!(seen.redelivered, 1);
        assert_eq!(seen.per_attempt, BTreeMap::from([(key(1), 1), (key(2), 1)]));
        assert!(seen.executed_twice.is_empty(), "{seen:?}");

        runs.processed("TX-000001", 2, Some("m4"), Outcome::Success);
        runs.processed("TX-000001", 2, None, Outcome::Success);
        let seen = runs.seen();
        assert_eq!(seen.per_attempt[&key(2)], 3);
        assert_eq!(seen.executed_twice, BTreeMap::from([(key(2), 2)]));
    }

    /// The answer depends on the seed and the key alone; the attempts follow it.
    #[test]
    fn the_script_is_per_transaction_and_attempt() {
        let draws: Vec<Outcome> = (1..=200)
            .map(|n| scripted_outcome(7, 0.5, &format!("TX-{n:06}"), 1))
            .collect();
        let again: Vec<Outcome> = (1..=200)
            .rev()
            .map(|n| scripted_outcome(7, 0.5, &format!("TX-{n:06}"), 1))
            .rev()
            .collect();
        assert_eq!(draws, again);
        let cancelled = draws.iter().filter(|o| **o == Outcome::Cancelled).count();
        assert!((70..=130).contains(&cancelled), "{cancelled}");
        assert_ne!(
            (1..=20)
                .map(|k| scripted_outcome(7, 0.5, "TX-000001", k))
                .collect::<Vec<_>>(),
            (1..=20)
                .map(|k| scripted_outcome(8, 0.5, "TX-000001", k))
                .collect::<Vec<_>>(),
            "another seed, another script"
        );
        assert_eq!(scripted_attempts(7, 0.0, "TX-000001", 5), 1);
        assert_eq!(scripted_attempts(7, 1.0, "TX-000001", 5), 5);
        let n = scripted_attempts(7, 0.5, "TX-000002", 5);
        assert!((1..5)
            .take_while(|k| *k < n)
            .all(|k| scripted_outcome(7, 0.5, "TX-000002", k) == Outcome::Cancelled));
    }
}
