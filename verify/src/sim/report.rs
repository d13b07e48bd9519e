//! What a simulation observed, and how it reads.

use std::collections::BTreeMap;
use std::fmt;
use testkit::oracle::Violation;

/// What a simulation observed. Counts add up over seeds ([`Report::merge`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    pub seeds: u64,
    pub attempted: u64,
    pub succeeded: u64,
    pub failed: u64,
    /// Not terminal at the end, and no DLQ holds a message for it: silently lost.
    pub lost: u64,
    /// Not terminal at the end (lost ones included).
    pub stuck: u64,
    /// Stuck with a message in a DLQ (its alarm fires; an operator redrives it).
    pub stuck_in_dlq: u64,
    /// Requests accepted by the service beyond one per cancellation.
    pub duplicated: u64,
    pub exceeded_max: u64,
    /// Late responses that changed a record.
    pub late_applied: u64,
    /// Late responses received and dropped.
    pub late_dropped: u64,
    pub illegal_transitions: u64,
    /// Schedules created with another instant than the persisted one.
    pub instant_mismatches: u64,
    /// Retry events for the pending attempt that the retry handler discarded.
    pub pending_retries_dropped: u64,
    /// Messages a handler rejected as permanently failed.
    pub rejected: u64,
    /// FAILED transactions that raised no business alert.
    pub alerts_missing: u64,
    pub alerts: u64,
    pub requests_published: u64,
    pub requests_deduplicated: u64,
    pub requests_accepted: u64,
    pub retry_requests_published: u64,
    /// Highest number of retry-handler publishes in any one-second window.
    pub max_requests_per_second: u64,
    /// The configured fleet bound (MaximumConcurrency × MAX_REQUESTS_PER_SECOND).
    pub rate_limit: u64,
    pub dlq_response: u64,
    pub dlq_retry: u64,
    pub dlq_scheduler: u64,
    pub crashes: u64,
    pub throttles: u64,
    pub duplicate_deliveries: u64,
    pub late_fires: u64,
    pub double_fires: u64,
    pub late_responses: u64,
    pub start_crashes: u64,
    pub requests_lost: u64,
    pub answers_lost: u64,
    /// Requests published again by the reconciler for want of an answer.
    pub republished: u64,
    /// Transactions ended FAILED because their request was never answered.
    pub unanswered: u64,
    /// Answers ERROR the service gave (technical failures).
    pub technical_failures: u64,
    /// Requests the retry handler sent again after an ERROR (same attempt, same key).
    pub technical_resends: u64,
    /// Alerts of transactions ended FAILED/TECHNICAL_EXHAUSTED.
    pub technical_exhausted: u64,
    /// Transactions ended FAILED/EXPIRED (their deadline passed).
    pub expired: u64,
    /// Answers REJECTED the service gave.
    pub rejected_answers: u64,
    /// Transactions ended FAILED/REJECTED.
    pub ended_rejected: u64,
    /// Requests published for a transaction already FAILED/REJECTED by a run that
    /// began after it, or for a later attempt.
    pub published_after_rejection: u64,
    /// Transactions that ended later than one wait after their deadline.
    pub ended_past_deadline: u64,
    /// Answers ERROR the service gave during an outage window.
    pub outage_errors: u64,
    /// Requests that reached the service during a silent outage (never answered).
    pub outage_unanswered: u64,
    /// Times the breaker opened (from CLOSED, or after a failed probe round).
    pub breaker_opened: u64,
    pub breaker_closed: u64,
    /// First opening and last closing, in ms from the start of the run (one seed's;
    /// over seeds the earliest and the latest).
    pub first_opened_ms: Option<i64>,
    pub last_closed_ms: Option<i64>,
    /// Operators' commands: resolved, replayed, refused (the transaction had moved on
    /// since it was read).
    /// Writes that left a record contradicting its status (`oracle::inconsistency`).
    pub inconsistent_records: u64,
    pub operator_resolved: u64,
    pub operator_replayed: u64,
    pub operator_refused: u64,
    /// Breaker admissions decided from an environment's cached view, and cached views
    /// whose write lost to a newer item (decided again on a fresh read).
    pub breaker_cached_admissions: u64,
    pub breaker_stale_writes: u64,
    /// Retry events the retry handler held back for the breaker (deferred on the
    /// retry queue).
    pub retries_paused: u64,
    /// Transactions held at least once, and the most holds of one of them.
    pub paused_transactions: u64,
    pub max_pauses: u64,
    /// Held transactions not terminal at the end with nothing in a DLQ for them.
    pub paused_stuck: u64,
    /// Transactions ended FAILED/TECHNICAL_EXHAUSTED or FAILED/UNANSWERED in a run
    /// whose only technical failures are the outage windows (counted then only).
    pub failed_by_outage: u64,
    /// HALF_OPEN rounds with a request out, and the most retry requests of one round.
    pub probe_rounds: u64,
    pub max_probes_per_round: u64,
    /// The breaker's probes per round (0: no breaker).
    pub probe_limit: u64,
    /// Highest number of retry publishes in one second in the minute after the breaker
    /// closed.
    pub peak_after_reopening: u64,
    pub schedules_created: u64,
    pub schedule_conflicts: u64,
    pub reconciler_invocations: u64,
    pub reconciler_actions: u64,
    pub transitions: u64,
    pub events: u64,
    pub virtual_ms: i64,
    /// The service did not deduplicate: it ran every request message it received
    /// (the figures below are counted then only).
    pub non_idempotent: bool,
    /// (transaction, attempt) it ran at least once, its runs in all, the most runs
    /// of one attempt.
    pub attempts_run: u64,
    pub runs: u64,
    pub most_runs: u64,
    /// (transaction, attempt) it ran more than once, and its runs beyond the first
    /// of each (each a [`Violation::ExecutedTwice`]).
    pub executed_twice: u64,
    pub extra_runs: u64,
    /// Runs beyond an attempt's first, by who published the message that ran it
    /// (`start`, `retry-handler`, `reconciler`).
    pub ran_again_by: BTreeMap<String, u64>,
    /// Copies of one request message the queue delivered again (the service runs a
    /// message once, whatever its copies).
    pub request_copies: u64,
    /// Outbox delivery: the publisher sends each intent the table's stream carries
    /// to a FIFO request queue (the figures below are counted then only).
    pub outbox: bool,
    /// Stream records delivered to the publisher, and those delivered again (a batch
    /// retried after a crash, or delivered twice).
    pub stream_records: u64,
    pub stream_redeliveries: u64,
    /// `SendMessage` calls the FIFO queue accepted, and repeats it dropped (same
    /// deduplication id within its window).
    pub fifo_accepted: u64,
    pub fifo_deduplicated: u64,
    /// Deduplication ids the queue accepted more than once (each a
    /// [`Violation::PublishedTwice`]).
    pub published_twice: u64,
    /// Claims found older than the publish window: not sent again, left to the answer
    /// deadline.
    pub publish_unconfirmed: u64,
    /// ERROR answers saying the call may have run (`execution UNKNOWN`), and those
    /// saying it did not (`NOT_RUN`).
    pub errors_unknown: u64,
    pub errors_not_run: u64,
    /// Crashes and throttles by failure point (`<handler> before <effect>`).
    pub failure_points: BTreeMap<String, u64>,
    /// A digest of every event processed, in order.
    pub digest: u64,
}

impl Report {
    /// Counts one broken guarantee under the report's name for it.
    pub fn count(&mut self, v: Violation) {
        let n = match v {
            Violation::DuplicateAccepted | Violation::RetryWithoutCancellation => {
                &mut self.duplicated
            }
            Violation::ExceededMaxAttempts => &mut self.exceeded_max,
            Violation::LateResponseApplied => &mut self.late_applied,
            Violation::IllegalTransition => &mut self.illegal_transitions,
            Violation::ScheduleNotFromPersistedInstant | Violation::TwoInstantsForOneAttempt => {
                &mut self.instant_mismatches
            }
            Violation::PendingRetryDropped => &mut self.pending_retries_dropped,
            Violation::MessageRejected | Violation::ImpossibleObservation => &mut self.rejected,
            Violation::Lost => &mut self.lost,
            Violation::AlertMissing => &mut self.alerts_missing,
            Violation::Stuck => &mut self.stuck,
            Violation::RecordInconsistent => &mut self.inconsistent_records,
            Violation::ExecutedTwice => &mut self.extra_runs,
            Violation::PublishedTwice => &mut self.published_twice,
            // Judged from the whole run (`max_requests_per_second`), or not something a
            // simulation can show.
            Violation::RateExceeded | Violation::Disagreement | Violation::AuditGap => return,
        };
        *n += 1;
    }

    /// Adds another seed's report.
    pub fn merge(&mut self, o: &Report) {
        macro_rules! add {
            ($($f:ident),*) => { $( self.$f += o.$f; )* };
        }
        add!(
            seeds,
            attempted,
            succeeded,
            failed,
            lost,
            stuck,
            stuck_in_dlq,
            duplicated,
            exceeded_max,
            late_applied,
            late_dropped,
            illegal_transitions,
            instant_mismatches,
            pending_retries_dropped,
            rejected,
            alerts_missing,
            alerts,
            requests_published,
            requests_deduplicated,
            requests_accepted,
            retry_requests_published,
            dlq_response,
            dlq_retry,
            dlq_scheduler,
            crashes,
            throttles,
            duplicate_deliveries,
            late_fires,
            double_fires,
            late_responses,
            start_crashes,
            requests_lost,
            answers_lost,
            republished,
            unanswered,
            technical_failures,
            technical_resends,
            technical_exhausted,
            expired,
            rejected_answers,
            ended_rejected,
            published_after_rejection,
            ended_past_deadline,
            outage_errors,
            outage_unanswered,
            breaker_opened,
            breaker_closed,
            retries_paused,
            operator_resolved,
            inconsistent_records,
            operator_replayed,
            operator_refused,
            breaker_cached_admissions,
            breaker_stale_writes,
            paused_transactions,
            paused_stuck,
            failed_by_outage,
            probe_rounds,
            schedules_created,
            schedule_conflicts,
            reconciler_invocations,
            reconciler_actions,
            transitions,
            events,
            virtual_ms,
            attempts_run,
            runs,
            executed_twice,
            extra_runs,
            request_copies,
            stream_records,
            stream_redeliveries,
            fifo_accepted,
            fifo_deduplicated,
            published_twice,
            publish_unconfirmed,
            errors_unknown,
            errors_not_run
        );
        self.non_idempotent |= o.non_idempotent;
        self.outbox |= o.outbox;
        self.most_runs = self.most_runs.max(o.most_runs);
        for (k, v) in &o.ran_again_by {
            *self.ran_again_by.entry(k.clone()).or_default() += v;
        }
        self.max_requests_per_second = self.max_requests_per_second.max(o.max_requests_per_second);
        self.rate_limit = self.rate_limit.max(o.rate_limit);
        self.max_pauses = self.max_pauses.max(o.max_pauses);
        self.max_probes_per_round = self.max_probes_per_round.max(o.max_probes_per_round);
        self.probe_limit = self.probe_limit.max(o.probe_limit);
        self.peak_after_reopening = self.peak_after_reopening.max(o.peak_after_reopening);
        self.first_opened_ms = match (self.first_opened_ms, o.first_opened_ms) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.last_closed_ms = self.last_closed_ms.max(o.last_closed_ms);
        for (k, v) in &o.failure_points {
            *self.failure_points.entry(k.clone()).or_default() += v;
        }
        self.digest = self.digest.rotate_left(7) ^ o.digest;
    }

    /// Every broken guarantee, by name and count.
    pub fn violations(&self) -> Vec<(&'static str, u64)> {
        let mut v = vec![
            ("lost", self.lost),
            ("duplicated", self.duplicated),
            ("exceeded-max", self.exceeded_max),
            ("late-applied", self.late_applied),
            ("illegal-transitions", self.illegal_transitions),
            ("inconsistent-records", self.inconsistent_records),
            ("instant-mismatches", self.instant_mismatches),
            ("pending-retries-dropped", self.pending_retries_dropped),
            ("rejected", self.rejected),
            ("alerts-missing", self.alerts_missing),
            ("paused-stuck", self.paused_stuck),
            ("failed-by-outage", self.failed_by_outage),
            ("ended-past-deadline", self.ended_past_deadline),
            ("published-after-rejection", self.published_after_rejection),
            ("executed-twice", self.executed_twice),
            ("published-twice", self.published_twice),
        ];
        if self.probe_limit > 0 && self.max_probes_per_round > self.probe_limit {
            v.push(("probes-exceeded", self.max_probes_per_round));
        }
        if self.rate_limit > 0 && self.peak_after_reopening > self.rate_limit {
            v.push((
                "rate-limit-exceeded-at-reopening",
                self.peak_after_reopening,
            ));
        }
        if self.rate_limit > 0 && self.max_requests_per_second > self.rate_limit {
            v.push(("rate-limit-exceeded", self.max_requests_per_second));
        }
        v.retain(|(_, n)| *n > 0);
        v
    }

    /// True when the guarantee called `name` is among [`Report::violations`].
    pub fn violates(&self, name: &str) -> bool {
        self.violations().iter().any(|(n, _)| *n == name)
    }

    /// Runs beyond an attempt's first per million attempts run, rounded (0 when
    /// nothing ran).
    pub fn extra_runs_per_million(&self) -> u64 {
        if self.attempts_run == 0 {
            return 0;
        }
        (self.extra_runs as f64 * 1e6 / self.attempts_run as f64).round() as u64
    }

    pub fn is_valid(&self) -> bool {
        self.violations().is_empty()
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let flag = |n: u64| if n > 0 { "   <-- VIOLATION" } else { "" };
        writeln!(f, "seeds                      {:>12}", self.seeds)?;
        writeln!(f, "attempted                  {:>12}", self.attempted)?;
        writeln!(f, "  succeeded                {:>12}", self.succeeded)?;
        writeln!(
            f,
            "  failed                   {:>12}   (exhausted, or unanswered: {}, or expired: {})",
            self.failed, self.unanswered, self.expired
        )?;
        writeln!(
            f,
            "  lost                     {:>12}{}",
            self.lost,
            flag(self.lost)
        )?;
        writeln!(
            f,
            "  stuck                    {:>12}   (in a DLQ, alarmed: {})",
            self.stuck, self.stuck_in_dlq
        )?;
        writeln!(
            f,
            "duplicated                 {:>12}{}",
            self.duplicated,
            flag(self.duplicated)
        )?;
        writeln!(
            f,
            "exceeded-max               {:>12}{}",
            self.exceeded_max,
            flag(self.exceeded_max)
        )?;
        writeln!(
            f,
            "late-applied               {:>12}{}   (late responses dropped: {})",
            self.late_applied,
            flag(self.late_applied),
            self.late_dropped
        )?;
        writeln!(
            f,
            "illegal transitions        {:>12}{}",
            self.illegal_transitions,
            flag(self.illegal_transitions)
        )?;
        writeln!(
            f,
            "inconsistent records       {:>12}{}",
            self.inconsistent_records,
            flag(self.inconsistent_records)
        )?;
        writeln!(
            f,
            "instant mismatches         {:>12}{}",
            self.instant_mismatches,
            flag(self.instant_mismatches)
        )?;
        writeln!(
            f,
            "pending retries dropped    {:>12}{}",
            self.pending_retries_dropped,
            flag(self.pending_retries_dropped)
        )?;
        writeln!(
            f,
            "rejected messages          {:>12}{}",
            self.rejected,
            flag(self.rejected)
        )?;
        writeln!(
            f,
            "alerts missing             {:>12}{}   (business alerts raised: {})",
            self.alerts_missing,
            flag(self.alerts_missing),
            self.alerts
        )?;
        let over = self.rate_limit > 0 && self.max_requests_per_second > self.rate_limit;
        let limit = if self.rate_limit > 0 {
            self.rate_limit.to_string()
        } else {
            "none".into()
        };
        writeln!(
            f,
            "max retry requests in 1 s  {:>12}   (limit {limit}){}",
            self.max_requests_per_second,
            if over { "   <-- VIOLATION" } else { "" }
        )?;
        if self.breaker_cached_admissions + self.breaker_stale_writes > 0 {
            writeln!(
                f,
                "breaker cache              admissions from a cached view {}, cached views that lost to a newer item {}",
                self.breaker_cached_admissions, self.breaker_stale_writes
            )?;
        }
        if self.operator_resolved + self.operator_replayed + self.operator_refused > 0 {
            writeln!(
                f,
                "operators                  resolved {}, replayed {}, refused (moved on since read) {}",
                self.operator_resolved, self.operator_replayed, self.operator_refused
            )?;
        }
        writeln!(
            f,
            "requests                   published {} (retries {}), deduplicated by key {}, accepted {}",
            self.requests_published, self.retry_requests_published, self.requests_deduplicated, self.requests_accepted
        )?;
        writeln!(
            f,
            "DLQ                        response {}, retry {}, scheduler {}",
            self.dlq_response, self.dlq_retry, self.dlq_scheduler
        )?;
        writeln!(
            f,
            "faults injected            crashes {}, throttles {}, duplicate deliveries {}, late fires {}, double fires {}, late responses {}",
            self.crashes, self.throttles, self.duplicate_deliveries, self.late_fires, self.double_fires, self.late_responses
        )?;
        writeln!(
            f,
            "unanswered requests        starts crashed before publishing {}, requests lost {}, answers lost {}; republished {}, ended FAILED/UNANSWERED {}",
            self.start_crashes, self.requests_lost, self.answers_lost, self.republished, self.unanswered
        )?;
        if self.non_idempotent {
            let by: Vec<String> = self
                .ran_again_by
                .iter()
                .map(|(k, n)| format!("{k} {n}"))
                .collect();
            writeln!(
                f,
                "service runs (no dedup)    {} attempts run {} times (at most {} each); executed twice {}{}",
                self.attempts_run,
                self.runs,
                self.most_runs,
                self.executed_twice,
                flag(self.executed_twice)
            )?;
            writeln!(
                f,
                "                           runs beyond the first {} ({} per million attempts run), by publisher: {}; queue copies of one message (run once) {}",
                self.extra_runs,
                self.extra_runs_per_million(),
                if by.is_empty() { "none".to_owned() } else { by.join(", ") },
                self.request_copies
            )?;
        }
        if self.outbox {
            writeln!(
                f,
                "outbox delivery            stream records {} (delivered again {}); SendMessage accepted by the FIFO queue {}, dropped as repeats {}; claims past the window not sent again {}",
                self.stream_records,
                self.stream_redeliveries,
                self.fifo_accepted,
                self.fifo_deduplicated,
                self.publish_unconfirmed
            )?;
            writeln!(
                f,
                "                           published twice {}{} / executed twice {}{}; ERROR answers NOT_RUN {}, UNKNOWN {}",
                self.published_twice,
                flag(self.published_twice),
                self.executed_twice,
                flag(self.executed_twice),
                self.errors_not_run,
                self.errors_unknown
            )?;
        }
        if self.expired > 0 || self.ended_past_deadline > 0 {
            writeln!(
                f,
                "transaction deadline       ended FAILED/EXPIRED {}; ended later than one wait past it {}{}",
                self.expired,
                self.ended_past_deadline,
                flag(self.ended_past_deadline)
            )?;
        }
        if self.technical_failures > 0 {
            writeln!(
                f,
                "technical failures         answered ERROR {}; re-sent (same attempt, same key) {}; ended FAILED/TECHNICAL_EXHAUSTED {} (alerts)",
                self.technical_failures, self.technical_resends, self.technical_exhausted
            )?;
        }
        if self.rejected_answers > 0 || self.published_after_rejection > 0 {
            writeln!(
                f,
                "rejected answers           answered REJECTED {}; ended FAILED/REJECTED {}; published after the rejection {}{}",
                self.rejected_answers,
                self.ended_rejected,
                self.published_after_rejection,
                flag(self.published_after_rejection)
            )?;
        }
        if self.outage_errors > 0 || self.outage_unanswered > 0 || self.probe_limit > 0 {
            let secs = |ms: Option<i64>| {
                ms.map_or("never".to_owned(), |m| {
                    format!("{:.1} s", m as f64 / 1000.0)
                })
            };
            writeln!(
                f,
                "outage                     answered ERROR {}, unanswered {}; ended FAILED/TECHNICAL_EXHAUSTED or UNANSWERED by it {}{}",
                self.outage_errors, self.outage_unanswered, self.failed_by_outage, flag(self.failed_by_outage)
            )?;
            writeln!(
                f,
                "breaker                    opened {} (first at {}), closed {} (last at {})",
                self.breaker_opened,
                secs(self.first_opened_ms),
                self.breaker_closed,
                secs(self.last_closed_ms)
            )?;
            writeln!(
                f,
                "retries held               {} ({} transactions, at most {} holds each); held and stuck {}{}",
                self.retries_paused, self.paused_transactions, self.max_pauses, self.paused_stuck, flag(self.paused_stuck)
            )?;
            let over = self.probe_limit > 0 && self.max_probes_per_round > self.probe_limit;
            writeln!(
                f,
                "probes per HALF_OPEN round at most {} (limit {}) over {} rounds{}",
                self.max_probes_per_round,
                self.probe_limit,
                self.probe_rounds,
                flag(u64::from(over))
            )?;
            let over = self.rate_limit > 0 && self.peak_after_reopening > self.rate_limit;
            writeln!(
                f,
                "peak retry requests in 1 s after reopening {} (limit {}){}",
                self.peak_after_reopening,
                self.rate_limit,
                flag(u64::from(over))
            )?;
        }
        writeln!(
            f,
            "work                       transitions {}, schedules {} (conflicts {}), reconciler invocations {} acting on {} records, events {}",
            self.transitions, self.schedules_created, self.schedule_conflicts, self.reconciler_invocations, self.reconciler_actions, self.events
        )?;
        writeln!(
            f,
            "virtual time               {:.1} h",
            self.virtual_ms as f64 / 3_600_000.0
        )?;
        writeln!(
            f,
            "failure points hit         {}",
            self.failure_points.len()
        )?;
        for (k, v) in &self.failure_points {
            writeln!(f, "  {k:<58} {v:>10}")?;
        }
        write!(f, "digest                     {:016x}", self.digest)
    }
}
