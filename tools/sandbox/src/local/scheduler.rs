//! An emulator of EventBridge Scheduler's delivery of one-time schedules (moto stores
//! schedules but never fires them), for one group, through the real Scheduler and SQS
//! APIs: it lists the group's schedules and reads each new or modified one once (a
//! failed read is made again on the next tick); fires each ENABLED one-time
//! `at(yyyy-mm-ddThh:mm:ss)` schedule once its instant has come, sending `Target.Input`
//! unchanged to the target queue; on delivery failure retries within the
//! `RetryPolicy`, then sends the input to the dead-letter queue; deletes the schedule
//! when `ActionAfterCompletion` is `DELETE` (a missing one is fine), else never fires it
//! again; records each delivery's drift. Only the `UTC` time zone (anything else is
//! reported and skipped) and SQS targets. In detail:
//! `docs/operations.md#how-the-emulators-mirror-aws`.

use super::stop::Stop;
use super::SqsDirectory;
use aws_sdk_scheduler::types::{ActionAfterCompletion, ScheduleState};
use aws_sdk_sqs::types::MessageAttributeValue;
use domain::policy::{RandomSource, SplitMix64};
use domain::ports::{Clock, SystemClock};
use domain::Timestamp;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use testkit::faults::ProcessRates;

#[derive(Debug, Clone)]
pub struct SchedulerSettings {
    pub group: String,
    /// How often the group is listed (the resolution of the emulated clock).
    pub tick: Duration,
    /// A chaos run's delivery faults: late, twice, never (zero: none).
    pub process: ProcessRates,
    /// Seed of those faults.
    pub seed: u64,
}

/// A delivery fault of a chaos run.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Misfire {
    Late(Duration),
    Twice,
    Never,
}

/// Draws the delivery fault of one schedule (three numbers each, always).
fn misfire(p: &ProcessRates, dice: &mut SplitMix64) -> Option<Misfire> {
    let (roll, kind, amount) = (dice.next_unit(), dice.next_unit(), dice.next_unit());
    let total = p.fire_late + p.fire_twice + p.never_fire;
    if roll >= total {
        return None;
    }
    let k = kind * total;
    Some(if k < p.fire_late {
        Misfire::Late(Duration::from_millis(p.late_ms).mul_f64(amount))
    } else if k < p.fire_late + p.fire_twice {
        Misfire::Twice
    } else {
        Misfire::Never
    })
}

/// What the emulator did, readable while it runs.
#[derive(Debug, Default)]
pub struct SchedulerStats {
    pub fired: AtomicU64,
    pub deleted: AtomicU64,
    pub delivery_failures: AtomicU64,
    pub dead_lettered: AtomicU64,
    pub unsupported: AtomicU64,
    /// GetSchedule calls that failed (moto busy, connection reset): each such schedule
    /// is read again on the next tick.
    pub read_failures: AtomicU64,
    /// Deliveries a chaos run made late, doubled, or dropped.
    pub fired_late: AtomicU64,
    pub fired_twice: AtomicU64,
    pub never_fired: AtomicU64,
    drift_ms: Mutex<Vec<i64>>,
    deliveries: Mutex<HashMap<String, Delivery>>,
}

/// The instants of one schedule's delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Delivery {
    /// The schedule's instant.
    pub fire_at: Timestamp,
    /// When the schedule got the definition that fired (its `LastModificationDate`):
    /// a schedule created after its instant could not fire before it was created.
    pub defined_at: Option<Timestamp>,
    /// When the emulator had read it.
    pub read_at: Timestamp,
    /// When the emulator began delivering it.
    pub started_at: Timestamp,
    /// When its message was in the target queue (the `SendMessage` answered).
    pub delivered_at: Timestamp,
}

impl Delivery {
    /// Delivery − the schedule's instant.
    pub fn drift_ms(&self) -> i64 {
        self.delivered_at.millis() - self.fire_at.millis()
    }

    /// The emulator's own part of the drift: delivery − the later of the instant
    /// and the schedule's definition (the time before the schedule existed is the
    /// creator's, not the scheduler's).
    pub fn own_drift_ms(&self) -> i64 {
        self.delivered_at.millis() - self.due_from().millis()
    }

    /// The later of the instant and the definition.
    fn due_from(&self) -> Timestamp {
        self.defined_at
            .map_or(self.fire_at, |d| d.max(self.fire_at))
    }

    /// Where the emulator's own drift went, in milliseconds: reading the schedule
    /// after it was due (discovery), starting the delivery after it was due and
    /// read (timer, a free slot), and the delivery itself (`SendMessage`).
    pub fn parts_ms(&self) -> (i64, i64, i64) {
        let due = self.due_from();
        let discovery = (self.read_at.millis() - due.millis()).max(0);
        let ready = due.max(self.read_at);
        let start = (self.started_at.millis() - ready.millis()).max(0);
        let send = self.delivered_at.millis() - self.started_at.millis();
        (discovery, start, send)
    }
}

impl SchedulerStats {
    pub fn get(&self, c: &AtomicU64) -> u64 {
        c.load(Ordering::Relaxed)
    }

    /// Fire-time drift of every delivery so far, in milliseconds, sorted.
    pub fn drift_ms(&self) -> Vec<i64> {
        let mut v = self.drift_ms.lock().map(|g| g.clone()).unwrap_or_default();
        v.sort_unstable();
        v
    }

    /// The last delivery of each schedule, by schedule name.
    pub fn deliveries(&self) -> HashMap<String, Delivery> {
        self.deliveries
            .lock()
            .map(|g| g.clone())
            .unwrap_or_default()
    }
}

/// A schedule as read with `GetSchedule`.
#[derive(Debug, Clone, PartialEq)]
pub struct OneTime {
    pub name: String,
    pub arn: String,
    pub fire_at: Timestamp,
    pub target_arn: String,
    pub input: String,
    pub delete_after: bool,
    pub enabled: bool,
    pub max_retries: u32,
    pub max_event_age: Duration,
    pub dead_letter_arn: Option<String>,
    /// `LastModificationDate`.
    pub defined_at: Option<Timestamp>,
    /// When the emulator read it.
    pub read_at: Timestamp,
}

/// Parses `at(yyyy-mm-ddThh:mm:ss)` in UTC.
pub fn parse_at(expression: &str, timezone: Option<&str>) -> Result<Timestamp, String> {
    let tz = timezone.unwrap_or("UTC");
    if tz != "UTC" {
        return Err(format!(
            "schedule time zone `{tz}` is not supported by the local emulator (only UTC)"
        ));
    }
    let inner = expression
        .strip_prefix("at(")
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| format!("`{expression}` is not a one-time at(...) expression"))?;
    if inner.len() != 19 {
        return Err(format!("`{expression}`: expected at(yyyy-mm-ddThh:mm:ss)"));
    }
    Timestamp::parse(&format!("{inner}Z")).map_err(|e| format!("`{expression}`: {e}"))
}

/// Why a schedule could not be read.
#[derive(Debug, Clone, PartialEq)]
enum ReadError {
    /// Not a schedule the emulator can fire: reported once per modification.
    Unsupported(String),
    /// The call failed: read it again on the next tick.
    Call(String),
}

/// What the emulator knows of one listed schedule.
#[derive(Debug, Default)]
struct Entry {
    /// The modification stamp of the last read that settled it (the schedule, or
    /// "unsupported", or "gone"); `None` until one has.
    read: Option<Option<i64>>,
    schedule: Option<OneTime>,
    failures: u32,
    fired: bool,
    /// Being delivered now.
    in_flight: bool,
    /// After a failed delivery, not before this instant (one tick later).
    retry_at: Option<Timestamp>,
}

impl Entry {
    /// Whether the schedule, listed with this modification stamp, must be read.
    fn needs_read(&self, modified: Option<i64>) -> bool {
        self.read != Some(modified)
    }

    /// Takes in the result of reading the schedule listed with `modified`. A failed
    /// call leaves the entry as it was, so the next tick reads it again: a schedule
    /// whose read failed once must still fire.
    fn record_read(
        &mut self,
        modified: Option<i64>,
        result: Result<Option<OneTime>, ReadError>,
    ) -> Result<(), ReadError> {
        if !self.needs_read(modified) {
            // Settled by another read of the same version (the full and the newest
            // listings run apart): taking it again would let a fired schedule fire
            // twice.
            return Ok(());
        }
        match result {
            Ok(Some(s)) => {
                self.schedule = Some(s);
                self.fired = false;
                self.failures = 0;
                self.retry_at = None;
            }
            Ok(None) => {}
            Err(e @ ReadError::Unsupported(_)) => {
                self.read = Some(modified);
                return Err(e);
            }
            Err(e @ ReadError::Call(_)) => return Err(e),
        }
        self.read = Some(modified);
        Ok(())
    }
}

/// Starts the emulator; it runs until `stop` is asked.
pub fn spawn(
    scheduler: aws_sdk_scheduler::Client,
    sqs: SqsDirectory,
    settings: SchedulerSettings,
    stop: Stop,
) -> (tokio::task::JoinHandle<()>, Arc<SchedulerStats>) {
    super::spawn_counted(|stats| run(scheduler, sqs, settings, stop, stats))
}

/// What the two tasks share: every listed schedule, and a wake-up for the deliverer
/// when new ones are known.
#[derive(Debug, Default)]
struct Shared {
    known: Mutex<HashMap<String, Entry>>,
    wake: tokio::sync::Notify,
}

impl Shared {
    fn known(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        self.known.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Three tasks, as the service keeps its timers apart from its API: one lists the
/// group's newest schedules and reads the new ones every tick, one lists the whole
/// group every tenth tick (to forget deleted schedules), and the third sleeps until
/// the next known instant and delivers what is due, so a slow listing (hundreds of
/// schedules on a busy endpoint) never delays a delivery.
async fn run(
    scheduler: aws_sdk_scheduler::Client,
    sqs: SqsDirectory,
    settings: SchedulerSettings,
    stop: Stop,
    stats: Arc<SchedulerStats>,
) {
    let shared = Arc::new(Shared::default());
    let listing = |full: bool, every: Duration| {
        let (scheduler, settings, stop, stats, shared) = (
            scheduler.clone(),
            settings.clone(),
            stop.clone(),
            stats.clone(),
            shared.clone(),
        );
        tokio::spawn(async move {
            discover_loop(&scheduler, &settings, full, every, stop, &stats, &shared).await
        })
    };
    let newest = listing(false, settings.tick);
    let full = listing(
        true,
        settings.tick * u32::try_from(FULL_LISTING_EVERY).unwrap_or(10),
    );
    let deliverer = tokio::spawn(deliver_loop(
        scheduler,
        sqs,
        settings,
        stop,
        stats,
        shared.clone(),
    ));
    let _ = newest.await;
    let _ = full.await;
    shared.wake.notify_one();
    let _ = deliverer.await;
}

/// Lists the group (all of it when `full`, else its newest pages) every `every`
/// until stopped. The two listings run as two tasks: a full listing of a busy group
/// takes many pages, and new schedules must not wait for it.
async fn discover_loop(
    scheduler: &aws_sdk_scheduler::Client,
    settings: &SchedulerSettings,
    full: bool,
    every: Duration,
    mut stop: Stop,
    stats: &SchedulerStats,
    shared: &Shared,
) {
    loop {
        if let Err(e) = discover(scheduler, settings, full, stats, shared).await {
            tracing::warn!(group = %settings.group, error = %e, "scheduler emulator listing failed");
        }
        if stop.sleep(every).await {
            break;
        }
    }
}

/// Every this many ticks the whole group is listed (to forget deleted schedules);
/// every tick, only the newest pages, up to the first schedule already known.
const FULL_LISTING_EVERY: u64 = 10;

/// Calls made at the same time (reads of new schedules, deliveries).
const PARALLEL: usize = 32;

/// Lists the group — all of it when `full`, then forgetting what is gone; otherwise
/// only its newest pages (ListSchedules lists newest first), stopping at the first
/// page that holds a schedule already known — and reads every new or modified
/// schedule (`GetSchedule`, in parallel); wakes the deliverer when something was read.
async fn discover(
    scheduler: &aws_sdk_scheduler::Client,
    settings: &SchedulerSettings,
    full: bool,
    stats: &SchedulerStats,
    shared: &Shared,
) -> Result<(), String> {
    use futures::StreamExt;
    let listing_started = SystemClock.now();
    let mut listed: HashMap<String, Option<i64>> = HashMap::new();
    let mut token: Option<String> = None;
    loop {
        let page = scheduler
            .list_schedules()
            .group_name(&settings.group)
            .set_next_token(token.take())
            .send()
            .await
            .map_err(aws::errors::sdk_error("ListSchedules"))?;
        let mut reached_known = false;
        {
            let known = shared.known();
            for s in page.schedules() {
                if let Some(name) = s.name() {
                    let modified = s
                        .last_modification_date()
                        .map(|d| d.to_millis().unwrap_or(0));
                    reached_known |= known.get(name).is_some_and(|e| !e.needs_read(modified));
                    listed.insert(name.to_owned(), modified);
                }
            }
        }
        match page.next_token() {
            Some(t) if !t.is_empty() && (full || !reached_known) => token = Some(t.to_owned()),
            _ => break,
        }
    }
    let to_read: Vec<(String, Option<i64>)> = {
        let mut known = shared.known();
        if full {
            // A schedule being delivered stays until its delivery is settled, and
            // one the newest listing read meanwhile stays too.
            known.retain(|name, e| {
                e.in_flight
                    || listed.contains_key(name)
                    || e.schedule
                        .as_ref()
                        .is_some_and(|s| s.read_at >= listing_started)
            });
        }
        listed
            .iter()
            .filter(|(name, modified)| known.get(*name).is_none_or(|e| e.needs_read(**modified)))
            .map(|(n, m)| (n.clone(), *m))
            .collect()
    };
    if to_read.is_empty() {
        return Ok(());
    }
    let reads: Vec<_> = futures::stream::iter(to_read)
        .map(|(name, modified)| async move {
            let r = read(scheduler, &settings.group, &name).await;
            (name, modified, r)
        })
        .buffer_unordered(PARALLEL)
        .collect()
        .await;
    {
        let mut known = shared.known();
        for (name, modified, r) in reads {
            match known
                .entry(name.clone())
                .or_default()
                .record_read(modified, r)
            {
                Ok(()) => {}
                Err(ReadError::Unsupported(e)) => {
                    stats.unsupported.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(schedule = %name, error = %e, "schedule skipped");
                }
                Err(ReadError::Call(e)) => {
                    stats.read_failures.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(schedule = %name, error = %e, "schedule read failed; reading it again on the next tick");
                }
            }
        }
    }
    shared.wake.notify_one();
    Ok(())
}

/// Sleeps until the earliest known instant (or a wake-up, or a tick at the most),
/// then starts the delivery of every due schedule, earliest first, each on its own
/// task, at most [`PARALLEL`] at once. The loop never waits for a delivery to end
/// (nor for the `DeleteSchedule` after it): a slow call holds one slot, not every
/// schedule due after it.
async fn deliver_loop(
    scheduler: aws_sdk_scheduler::Client,
    sqs: SqsDirectory,
    settings: SchedulerSettings,
    mut stop: Stop,
    stats: Arc<SchedulerStats>,
    shared: Arc<Shared>,
) {
    let slots = Arc::new(tokio::sync::Semaphore::new(PARALLEL));
    let mut dice = SplitMix64::new(settings.seed);
    let tick_ms = i64::try_from(settings.tick.as_millis()).unwrap_or(i64::MAX);
    let mut running = tokio::task::JoinSet::new();
    while !stop.is_stopped() {
        while running.try_join_next().is_some() {}
        let now = SystemClock.now();
        let (due, next) = due_now(&mut shared.known(), now);
        if !due.is_empty() {
            for (s, failures) in due {
                let misfire = (failures == 0)
                    .then(|| misfire(&settings.process, &mut dice))
                    .flatten();
                let Ok(slot) = slots.clone().acquire_owned().await else {
                    return;
                };
                let (scheduler, sqs, stats, shared, group) = (
                    scheduler.clone(),
                    sqs.clone(),
                    stats.clone(),
                    shared.clone(),
                    settings.group.clone(),
                );
                running.spawn(async move {
                    let (completed, failed) =
                        fire(&scheduler, &sqs, &group, &s, failures, now, &stats, misfire).await;
                    drop(slot);
                    let retry_at = SystemClock.now().plus_millis(tick_ms);
                    if let Some(e) = shared.known().get_mut(&s.name) {
                        e.in_flight = false;
                        if failed {
                            e.failures += 1;
                            e.retry_at = Some(retry_at);
                        }
                        if completed {
                            e.fired = true;
                        }
                    }
                    shared.wake.notify_one();
                });
            }
            continue;
        }
        let wait = next
            .map(|n| Duration::from_millis(u64::try_from(n.millis() - now.millis()).unwrap_or(0)))
            .unwrap_or(settings.tick)
            .min(settings.tick);
        tokio::select! {
            () = shared.wake.notified() => {}
            _ = stop.sleep(wait) => {}
        }
    }
    while running.join_next().await.is_some() {}
}

/// Marks every schedule due at `now` in flight and returns them, earliest instant
/// first (then by name), with their failed deliveries so far; and the next instant
/// after `now`.
fn due_now(
    known: &mut HashMap<String, Entry>,
    now: Timestamp,
) -> (Vec<(OneTime, u32)>, Option<Timestamp>) {
    let mut due: Vec<(Timestamp, OneTime, u32)> = Vec::new();
    let mut next: Option<Timestamp> = None;
    for e in known.values_mut() {
        let Some(s) = e.schedule.as_ref() else {
            continue;
        };
        if e.fired || e.in_flight || !s.enabled {
            continue;
        }
        let at = s.fire_at.max(e.retry_at.unwrap_or(s.fire_at));
        if at <= now {
            e.in_flight = true;
            due.push((at, s.clone(), e.failures));
        } else {
            next = Some(next.map_or(at, |n| n.min(at)));
        }
    }
    due.sort_by(|a, b| (a.0, &a.1.name).cmp(&(b.0, &b.1.name)));
    (due.into_iter().map(|(_, s, f)| (s, f)).collect(), next)
}

/// Delivers one due schedule (late, twice or not at all when `misfire` says so);
/// returns (completed, delivery failed).
#[allow(clippy::too_many_arguments)]
async fn fire(
    scheduler: &aws_sdk_scheduler::Client,
    sqs: &SqsDirectory,
    group: &str,
    s: &OneTime,
    failures: u32,
    now: Timestamp,
    stats: &SchedulerStats,
    misfire: Option<Misfire>,
) -> (bool, bool) {
    let started_at = SystemClock.now();
    let delivered = match misfire {
        Some(Misfire::Never) => {
            // Lost by the service: gone without a delivery.
            stats.never_fired.fetch_add(1, Ordering::Relaxed);
            Ok(())
        }
        Some(Misfire::Late(by)) => {
            stats.fired_late.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(by).await;
            deliver(sqs, s).await
        }
        Some(Misfire::Twice) => {
            let first = deliver(sqs, s).await;
            if first.is_ok() && deliver(sqs, s).await.is_ok() {
                stats.fired_twice.fetch_add(1, Ordering::Relaxed);
            }
            first
        }
        None => deliver(sqs, s).await,
    };
    let (completed, failed) = match delivered {
        Ok(()) if misfire == Some(Misfire::Never) => (true, false),
        Ok(()) => {
            let delivery = Delivery {
                fire_at: s.fire_at,
                defined_at: s.defined_at,
                read_at: s.read_at,
                started_at,
                delivered_at: SystemClock.now(),
            };
            if let Ok(mut d) = stats.drift_ms.lock() {
                d.push(delivery.drift_ms());
            }
            if let Ok(mut d) = stats.deliveries.lock() {
                d.insert(s.name.clone(), delivery);
            }
            stats.fired.fetch_add(1, Ordering::Relaxed);
            (true, false)
        }
        Err(e) => {
            stats.delivery_failures.fetch_add(1, Ordering::Relaxed);
            let age = Duration::from_millis(
                u64::try_from(now.millis() - s.fire_at.millis()).unwrap_or(0),
            );
            if failures + 1 > s.max_retries || age > s.max_event_age {
                dead_letter(sqs, s, &e, failures + 1).await;
                stats.dead_lettered.fetch_add(1, Ordering::Relaxed);
                (true, true)
            } else {
                tracing::warn!(schedule = %s.name, error = %e, "delivery failed; retrying on the next tick");
                (false, true)
            }
        }
    };
    if completed && s.delete_after {
        match scheduler
            .delete_schedule()
            .group_name(group)
            .name(&s.name)
            .send()
            .await
        {
            Ok(_) => {
                stats.deleted.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                let not_found = e
                    .as_service_error()
                    .is_some_and(|se| se.is_resource_not_found_exception());
                if !not_found {
                    tracing::warn!(schedule = %s.name, error = %aws_sdk_scheduler::error::DisplayErrorContext(e), "DeleteSchedule failed after delivery");
                }
            }
        }
    }
    (completed, failed)
}

async fn read(
    scheduler: &aws_sdk_scheduler::Client,
    group: &str,
    name: &str,
) -> Result<Option<OneTime>, ReadError> {
    let out = match scheduler
        .get_schedule()
        .group_name(group)
        .name(name)
        .send()
        .await
    {
        Ok(o) => o,
        Err(e) => {
            if e.as_service_error()
                .is_some_and(|se| se.is_resource_not_found_exception())
            {
                return Ok(None);
            }
            return Err(ReadError::Call(aws::errors::sdk_error("GetSchedule")(e)));
        }
    };
    let expression = out.schedule_expression().unwrap_or_default();
    let fire_at =
        parse_at(expression, out.schedule_expression_timezone()).map_err(ReadError::Unsupported)?;
    let target = out
        .target()
        .ok_or_else(|| ReadError::Unsupported(format!("schedule `{name}` has no target")))?;
    let policy = target.retry_policy();
    Ok(Some(OneTime {
        name: name.to_owned(),
        arn: out.arn().unwrap_or_default().to_owned(),
        fire_at,
        target_arn: target.arn().to_owned(),
        input: target.input().unwrap_or_default().to_owned(),
        delete_after: matches!(
            out.action_after_completion(),
            Some(ActionAfterCompletion::Delete)
        ),
        enabled: !matches!(out.state(), Some(ScheduleState::Disabled)),
        // The service's defaults: 185 retries within 24 h.
        max_retries: policy
            .and_then(|p| p.maximum_retry_attempts())
            .and_then(|n| u32::try_from(n).ok())
            .unwrap_or(185),
        max_event_age: Duration::from_secs(
            policy
                .and_then(|p| p.maximum_event_age_in_seconds())
                .and_then(|n| u64::try_from(n).ok())
                .unwrap_or(86_400),
        ),
        dead_letter_arn: target
            .dead_letter_config()
            .and_then(|d| d.arn())
            .map(str::to_owned),
        defined_at: out
            .last_modification_date()
            .or(out.creation_date())
            .and_then(|d| d.to_millis().ok())
            .map(Timestamp::from_millis),
        read_at: SystemClock.now(),
    }))
}

async fn deliver(sqs: &SqsDirectory, s: &OneTime) -> Result<(), String> {
    let url = sqs.url_for_arn(&s.target_arn).await?;
    sqs.client()
        .send_message()
        .queue_url(url)
        .message_body(&s.input)
        .send()
        .await
        .map(|_| ())
        .map_err(aws::errors::sdk_error("SendMessage"))
}

async fn dead_letter(sqs: &SqsDirectory, s: &OneTime, error: &str, attempts: u32) {
    let Some(dlq) = &s.dead_letter_arn else {
        tracing::error!(schedule = %s.name, error, "delivery failed for good and the schedule has no dead-letter queue: the event is dropped");
        return;
    };
    let attr = |v: &str| {
        MessageAttributeValue::builder()
            .data_type("String")
            .string_value(v)
            .build()
            .ok()
    };
    let result = async {
        let url = sqs.url_for_arn(dlq).await?;
        let mut req = sqs
            .client()
            .send_message()
            .queue_url(url)
            .message_body(&s.input);
        for (k, v) in [
            ("SCHEDULE_ARN", s.arn.as_str()),
            ("TARGET_ARN", s.target_arn.as_str()),
            ("ERROR_MESSAGE", error),
            ("EXHAUSTED_RETRY_CONDITION", "MaximumRetryAttempts"),
            ("RETRY_ATTEMPTS", &attempts.to_string()),
        ] {
            if let Some(a) = attr(v) {
                req = req.message_attributes(k, a);
            }
        }
        req.send()
            .await
            .map(|_| ())
            .map_err(aws::errors::sdk_error("SendMessage"))
    }
    .await;
    if let Err(e) = result {
        tracing::error!(schedule = %s.name, error = %e, "cannot write to the schedule's dead-letter queue");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_one_time_expressions() {
        let t = parse_at("at(2026-10-03T16:38:00)", Some("UTC")).unwrap();
        assert_eq!(t.to_rfc3339(), "2026-10-03T16:38:00.000Z");
        assert_eq!(t.to_schedule_at(), "2026-10-03T16:38:00");
        assert!(parse_at("rate(5 minutes)", None).is_err());
        assert!(parse_at("at(2026-10-03T16:38)", None).is_err());
        let e = parse_at("at(2026-10-03T16:38:00)", Some("Europe/Madrid")).unwrap_err();
        assert!(e.contains("Europe/Madrid"), "{e}");
    }

    fn one_time(name: &str, input: &str) -> OneTime {
        OneTime {
            name: name.into(),
            arn: format!("arn:aws:scheduler:us-east-1:123456789012:schedule/g/{name}"),
            fire_at: parse_at("at(2026-10-03T16:38:00)", None).unwrap(),
            target_arn: "arn:aws:sqs:us-east-1:123456789012:retry".into(),
            input: input.into(),
            delete_after: true,
            enabled: true,
            max_retries: 3,
            max_event_age: Duration::from_secs(3600),
            dead_letter_arn: None,
            defined_at: None,
            read_at: Timestamp::from_millis(0),
        }
    }

    /// An entry whose schedule (input `a`) was read at stamp 5 and fired.
    fn fired_entry() -> Entry {
        let mut e = Entry::default();
        e.record_read(Some(5), Ok(Some(one_time("s", "a"))))
            .unwrap();
        e.fired = true;
        e
    }

    #[test]
    fn a_failed_read_is_made_again_until_one_succeeds() {
        let mut e = Entry::default();
        assert!(e.needs_read(Some(5)), "a new schedule is read");
        let failed = e.record_read(Some(5), Err(ReadError::Call("GetSchedule: timeout".into())));
        assert!(matches!(failed, Err(ReadError::Call(_))));
        assert!(e.schedule.is_none());
        assert!(
            e.needs_read(Some(5)),
            "after a failed call the same stamp is read again"
        );
        assert!(e.needs_read(None));

        assert_eq!(e.record_read(Some(5), Ok(Some(one_time("s", "a")))), Ok(()));
        assert!(!e.needs_read(Some(5)), "read once it succeeded");
        assert_eq!(e.schedule.as_ref().map(|s| s.input.as_str()), Some("a"));
        assert!(e.needs_read(Some(6)), "a modified schedule is read again");
    }

    #[test]
    fn a_failed_reread_keeps_what_was_known() {
        let mut e = fired_entry();
        e.failures = 2;
        let r = e.record_read(Some(6), Err(ReadError::Call("reset".into())));
        assert!(r.is_err());
        assert!(e.fired && e.failures == 2, "a failed call changes nothing");
        assert_eq!(e.schedule.as_ref().map(|s| s.input.as_str()), Some("a"));
        assert!(e.needs_read(Some(6)));

        e.record_read(Some(6), Ok(Some(one_time("s", "b"))))
            .unwrap();
        assert!(
            !e.fired && e.failures == 0,
            "a modified schedule may fire again"
        );
        assert_eq!(e.schedule.as_ref().map(|s| s.input.as_str()), Some("b"));
    }

    /// Due schedules come earliest first, each once (in flight until settled); the
    /// next instant is the earliest one still ahead.
    #[test]
    fn due_schedules_come_earliest_first_and_once() {
        let at = |name: &str, ms: i64| {
            let mut s = one_time(name, name);
            s.fire_at = Timestamp::from_millis(ms);
            Entry {
                schedule: Some(s),
                ..Entry::default()
            }
        };
        let mut known: HashMap<String, Entry> = [
            ("c", 3_000),
            ("a", 2_000),
            ("b", 1_000),
            ("later", 9_000),
            ("d", 1_000),
        ]
        .into_iter()
        .map(|(n, ms)| (n.to_owned(), at(n, ms)))
        .collect();
        let (due, next) = due_now(&mut known, Timestamp::from_millis(5_000));
        let names: Vec<&str> = due.iter().map(|(s, _)| s.name.as_str()).collect();
        assert_eq!(names, vec!["b", "d", "a", "c"]);
        assert_eq!(next, Some(Timestamp::from_millis(9_000)));
        let (again, _) = due_now(&mut known, Timestamp::from_millis(5_000));
        assert!(again.is_empty(), "in flight: not due again");
    }

    /// Drift counts from the instant; the emulator's own part from the later of the
    /// instant and the schedule's definition.
    #[test]
    fn the_emulators_own_drift_starts_once_the_schedule_exists() {
        let d = |defined: Option<i64>| Delivery {
            fire_at: Timestamp::from_millis(10_000),
            defined_at: defined.map(Timestamp::from_millis),
            read_at: Timestamp::from_millis(10_500),
            started_at: Timestamp::from_millis(11_000),
            delivered_at: Timestamp::from_millis(12_000),
        };
        assert_eq!(d(Some(8_000)).drift_ms(), 2_000);
        assert_eq!(d(Some(8_000)).own_drift_ms(), 2_000);
        assert_eq!(d(Some(11_500)).drift_ms(), 2_000);
        assert_eq!(d(Some(11_500)).own_drift_ms(), 500, "created 1.5 s late");
        assert_eq!(d(None).own_drift_ms(), 2_000);
        assert_eq!(d(Some(8_000)).parts_ms(), (500, 500, 1_000));
        assert_eq!(d(Some(11_500)).parts_ms(), (0, 0, 1_000));
    }

    /// A second read of a version already taken (the other listing's) changes
    /// nothing: a fired schedule does not fire again.
    #[test]
    fn a_version_read_twice_is_taken_once() {
        let mut e = fired_entry();
        assert_eq!(e.record_read(Some(5), Ok(Some(one_time("s", "b")))), Ok(()));
        assert!(e.fired, "still fired");
        assert_eq!(e.schedule.as_ref().map(|s| s.input.as_str()), Some("a"));
    }

    #[test]
    fn an_unsupported_or_gone_schedule_is_read_once_per_modification() {
        let mut e = Entry::default();
        let r = e.record_read(
            Some(5),
            Err(ReadError::Unsupported("rate(1 minute)".into())),
        );
        assert!(matches!(r, Err(ReadError::Unsupported(_))));
        assert!(!e.needs_read(Some(5)));
        assert!(e.needs_read(Some(7)));

        let mut gone = Entry::default();
        assert_eq!(gone.record_read(Some(5), Ok(None)), Ok(()));
        assert!(!gone.needs_read(Some(5)));
        assert!(gone.schedule.is_none());
    }
}
