//! Runs one domain [`Run`] through [`execute`] and reports it.
//!
//! This is the only place where a plan's outcome becomes a [`Verdict`], metrics and log
//! lines; it maps names, it decides nothing.

use crate::metric::Metric;
use crate::metrics::{names, Metrics};
use crate::verdict::{Permanent, Verdict};
use domain::decide::{AlertKind, DropReason, Input, Rejection};
use domain::exec::{execute, ExecError, Perform};
use domain::policy::RandomSource;
use domain::ports::{Cause, PortError};
use domain::{Context, Disposition, Effect, Known, Observed, Run};

/// The hook that lets every effect run (production).
pub fn run_all(_: &Effect) -> bool {
    true
}

/// What a run did.
#[derive(Debug)]
pub struct Driven {
    pub result: Result<Disposition, ExecError>,
    pub run: Run,
}

/// Starts a run on `input` from an unread record and executes it over `ports`.
pub async fn drive<P: Perform>(
    input: Input,
    ports: &P,
    ctx: &Context,
    rng: &mut (dyn RandomSource + Send),
    hook: &mut (dyn FnMut(&Effect) -> bool + Send),
) -> Driven {
    drive_from(input, Known::Unread, ports, ctx, rng, hook).await
}

/// [`drive`], from what is already `known` of the record (a function that read it
/// first decides from it rather than blind).
pub async fn drive_from<P: Perform>(
    input: Input,
    known: Known<'_>,
    ports: &P,
    ctx: &Context,
    rng: &mut (dyn RandomSource + Send),
    hook: &mut (dyn FnMut(&Effect) -> bool + Send),
) -> Driven {
    let mut run = Run::new(input, known, ctx, rng);
    let result = execute(&mut run, ports, ctx, rng, hook).await;
    Driven { result, run }
}

/// Counts what the trail did and raises the business alert it carries.
pub fn report_trail(run: &Run, metrics: &Metrics) {
    for (effect, observed) in run.trail() {
        match (effect, observed) {
            (Effect::CreateSchedule(_), Observed::ScheduleCreated) => {
                metrics.incr(names::SCHEDULES_CREATED)
            }
            (Effect::CreateSchedule(_), Observed::ScheduleAlreadyExists) => {
                metrics.incr(names::SCHEDULE_CONFLICTS)
            }
            (Effect::DeleteSchedule(_), Observed::ScheduleDeleted) => {
                metrics.incr(names::SCHEDULES_DELETED)
            }
            (Effect::PublishRequest(h), Observed::Published) => {
                metrics.incr(names::REQUESTS_PUBLISHED);
                if matches!(run.input(), Input::Reconcile(_)) {
                    // The same attempt again, for want of an answer: not a retry.
                    metrics.incr(names::REQUESTS_REPUBLISHED);
                } else if h.attempt.get() > 1 {
                    metrics.incr(names::RETRIES_PUBLISHED);
                }
                tracing::info!(
                    transaction_id = %h.transaction_id,
                    attempt = h.attempt.get(),
                    idempotency_key = %domain::IdempotencyKey::new(&h.transaction_id, h.attempt),
                    correlation_id = h.correlation_id.as_ref().map(|c| c.as_str()),
                    "request published"
                );
            }
            (Effect::PublishRetry(e), Observed::Published) => {
                metrics.incr(names::RETRY_EVENTS_PUBLISHED);
                tracing::info!(
                    transaction_id = %e.transaction_id,
                    attempt = e.attempt.get(),
                    origin = %e.origin,
                    "retry event published"
                );
            }
            (Effect::Alert(a), Observed::Alerted) => raise(a, metrics),
            (Effect::Write(w), Observed::Written(r)) => {
                tracing::debug!(
                    transaction_id = %r.transaction_id,
                    event = ?w.event(),
                    status = %r.status,
                    "transition written"
                );
            }
            _ => {}
        }
    }
}

/// The metric and the ERROR log line of each business alert.
fn alert_line(kind: AlertKind) -> (&'static str, &'static str) {
    match kind {
        AlertKind::AttemptsExhausted => (
            names::ATTEMPTS_EXHAUSTED,
            "business alert: attempts exhausted",
        ),
        AlertKind::Unanswered => (
            names::TRANSACTIONS_UNANSWERED,
            "business alert: request never answered, republishes spent; transaction FAILED (UNANSWERED)",
        ),
        AlertKind::TechnicalExhausted => (
            names::TECHNICAL_EXHAUSTED,
            "business alert: every technical re-send answered ERROR; transaction FAILED (TECHNICAL_EXHAUSTED)",
        ),
        AlertKind::Expired => (
            names::TRANSACTIONS_EXPIRED,
            "business alert: transaction deadline passed; transaction FAILED (EXPIRED)",
        ),
        AlertKind::Ambiguous => (
            names::TRANSACTIONS_AMBIGUOUS,
            "business alert: an ERROR that may have run, not sent again (resolve or replay); transaction FAILED (AMBIGUOUS)",
        ),
        AlertKind::Rejected => (
            names::TRANSACTIONS_REJECTED,
            "business alert: the service rejected the request, never retried; transaction FAILED (REJECTED)",
        ),
    }
}

/// Counts a business alert and logs it: the transaction, its attempt (`attempts` when
/// they are exhausted), the idempotency key of a request left unanswered, sent in vain
/// or rejected, and the service's reason where it ended the transaction.
fn raise(a: &domain::decide::Alert, metrics: &Metrics) {
    let (metric, message) = alert_line(a.kind);
    metrics.incr(metric);
    let exhausted = a.kind == AlertKind::AttemptsExhausted;
    let keyed = matches!(
        a.kind,
        AlertKind::Unanswered | AlertKind::TechnicalExhausted | AlertKind::Rejected
    );
    let reasoned = exhausted || a.kind == AlertKind::Rejected;
    let count = a.attempts.get();
    tracing::error!(
        alert = a.kind.label(),
        transaction_id = %a.transaction_id,
        attempts = exhausted.then_some(count),
        attempt = (!exhausted).then_some(count),
        idempotency_key = keyed.then(|| tracing::field::display(domain::IdempotencyKey::new(&a.transaction_id, a.attempts))),
        reason = reasoned.then(|| a.last_reason.as_deref().unwrap_or("")),
        "{message}"
    );
}

/// Turns a finished run into a verdict, counting its disposition (`Ack<Label>`,
/// `Drop<Label>`, `Reject<Label>`).
pub fn verdict(driven: &Driven, metrics: &Metrics) -> Verdict {
    report_trail(&driven.run, metrics);
    match &driven.result {
        Ok(d) => {
            metrics.record(Metric::of(d));
            match d {
                Disposition::Ack(a) => {
                    if *a == domain::decide::Ack::Paused {
                        metrics.incr(names::RETRIES_PAUSED_BY_BREAKER);
                    }
                    if *a == domain::decide::Ack::PublishUnconfirmed {
                        metrics.incr(names::PUBLISHES_UNCONFIRMED);
                        tracing::warn!(
                            transaction_id = %driven.run.input().transaction_id(),
                            "claimed longer ago than the resend window: not published again; its answer deadline decides"
                        );
                    }
                    Verdict::Done(*a)
                }
                Disposition::Drop(reason @ DropReason::ConflictingSuccess { attempt, status }) => {
                    metrics.incr(names::CONFLICTING_SUCCESS);
                    tracing::error!(
                        transaction_id = %driven.run.input().transaction_id(),
                        attempt = %attempt,
                        status = %status,
                        "the service answered SUCCESS for an attempt already answered CANCELLED or resolved: possible double execution"
                    );
                    Verdict::Dropped(reason.clone())
                }
                Disposition::Drop(reason) => {
                    tracing::info!(drop = ?reason, "message changes nothing");
                    Verdict::Dropped(reason.clone())
                }
                // The record kept changing under this message: contention, not a bad
                // message. SQS redelivers it later.
                Disposition::Reject(r @ Rejection::TooManyRedecisions { .. }) => Verdict::Retry {
                    error: r.to_string(),
                },
                Disposition::Reject(r) => Verdict::Permanent(Permanent::rejected(r)),
            }
        }
        Err(ExecError::Port(e)) if e.is_retryable() => {
            if let Some(name) = scheduler_limit(e) {
                metrics.incr(name);
            }
            Verdict::Retry {
                error: e.to_string(),
            }
        }
        Err(ExecError::Port(e)) => Verdict::Permanent(Permanent::port(e)),
        // A simulated crash (tests) or an executor bug: leave the message to SQS.
        Err(e @ (ExecError::Stopped(_) | ExecError::Unexpected(_))) => Verdict::Retry {
            error: e.to_string(),
        },
    }
}

/// The metric of a scheduler call refused for a limit of the account: throttling or
/// a used-up quota (both retryable, both with an alarm).
fn scheduler_limit(e: &PortError) -> Option<&'static str> {
    if !matches!(e.operation, "CreateSchedule" | "DeleteSchedule") {
        return None;
    }
    match e.cause {
        Cause::Throttled => Some(names::SCHEDULER_THROTTLED),
        Cause::QuotaExceeded => Some(names::SCHEDULER_QUOTA_EXCEEDED),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use domain::exec::ExecError;
    use domain::policy::FixedRandom;
    use domain::{Outcome, Response, TransactionId};

    fn driven(result: Result<Disposition, ExecError>) -> Driven {
        let ctx = crate::settings::Settings::default().context(domain::Timestamp::from_millis(0));
        let run = Run::new(
            Input::Response(Response {
                transaction_id: TransactionId::parse("TX-1").unwrap(),
                attempt: domain::Attempt::FIRST,
                outcome: Outcome::Success,
                reason: None,
                retry_after_seconds: None,
                round: None,
                execution: None,
            }),
            Known::Unread,
            &ctx,
            &mut FixedRandom(0.5),
        );
        Driven { result, run }
    }

    #[test]
    fn dispositions_and_errors_map_to_verdicts() {
        let m = Metrics::new("NS", "f");
        let id = TransactionId::parse("TX-1").unwrap();
        let unknown = driven(Ok(Disposition::Reject(Rejection::UnknownTransaction {
            transaction_id: id.clone(),
        })));
        assert!(
            matches!(verdict(&unknown, &m), Verdict::Permanent(p) if p.reason.label() == "unknown-transaction")
        );
        let contended = driven(Ok(Disposition::Reject(Rejection::TooManyRedecisions {
            transaction_id: id,
        })));
        assert!(matches!(verdict(&contended, &m), Verdict::Retry { .. }));
        let throttled = driven(Err(ExecError::Port(PortError::retryable(
            "UpdateItem",
            "throttled",
        ))));
        assert!(matches!(verdict(&throttled, &m), Verdict::Retry { .. }));
        let invalid = driven(Err(ExecError::Port(PortError::permanent(
            "UpdateItem",
            "ValidationException",
        ))));
        assert!(
            matches!(verdict(&invalid, &m), Verdict::Permanent(p) if p.reason == crate::verdict::PermanentReason::PortError)
        );
        assert_eq!(m.count("RejectUnknownTransaction"), 1);
        assert_eq!(m.count("RejectTooManyRedecisions"), 1);
    }

    /// A scheduler call refused for an account limit is retried like any retryable
    /// error, and counted by its own metric (each has an alarm); the same causes on
    /// another service count nothing there.
    #[test]
    fn scheduler_limits_are_retried_and_counted_apart() {
        let m = Metrics::new("NS", "f");
        let limited = |operation, cause| {
            driven(Err(ExecError::Port(PortError {
                cause,
                ..PortError::retryable(operation, "limited")
            })))
        };
        for (operation, cause) in [
            ("CreateSchedule", Cause::QuotaExceeded),
            ("CreateSchedule", Cause::Throttled),
            ("DeleteSchedule", Cause::Throttled),
            ("UpdateItem", Cause::Throttled),
        ] {
            assert!(matches!(
                verdict(&limited(operation, cause), &m),
                Verdict::Retry { .. }
            ));
        }
        assert_eq!(m.count(names::SCHEDULER_QUOTA_EXCEEDED), 1);
        assert_eq!(m.count(names::SCHEDULER_THROTTLED), 2);
    }

    /// A conflicting SUCCESS is dropped (the message is done with) but counted as a
    /// business alert; a plain late answer is not.
    #[test]
    fn a_conflicting_success_is_dropped_and_alerted() {
        let m = Metrics::new("NS", "f");
        let conflicting = driven(Ok(Disposition::Drop(DropReason::ConflictingSuccess {
            attempt: domain::Attempt::FIRST,
            status: domain::Status::Scheduled,
        })));
        assert!(matches!(verdict(&conflicting, &m), Verdict::Dropped(_)));
        let late = driven(Ok(Disposition::Drop(DropReason::LateResponse {
            attempt: domain::Attempt::FIRST,
            current: domain::Attempt::FIRST.next(),
        })));
        assert!(matches!(verdict(&late, &m), Verdict::Dropped(_)));
        assert_eq!(m.count(names::CONFLICTING_SUCCESS), 1);
        assert_eq!(m.count("DropConflictingSuccess"), 1);
        assert_eq!(m.count("DropLateResponse"), 1);
    }

    /// Each business alert counts its metric and logs one ERROR line with the fields
    /// an operator searches by (docs/functions.md shows the exhausted one).
    #[test]
    fn each_alert_counts_its_metric_and_logs_its_fields() {
        let cases = [
            (
                AlertKind::AttemptsExhausted,
                names::ATTEMPTS_EXHAUSTED,
                "attempts reason",
            ),
            (
                AlertKind::Unanswered,
                names::TRANSACTIONS_UNANSWERED,
                "attempt idempotency_key",
            ),
            (
                AlertKind::TechnicalExhausted,
                names::TECHNICAL_EXHAUSTED,
                "attempt idempotency_key",
            ),
            (AlertKind::Expired, names::TRANSACTIONS_EXPIRED, "attempt"),
            (
                AlertKind::Ambiguous,
                names::TRANSACTIONS_AMBIGUOUS,
                "attempt",
            ),
            (
                AlertKind::Rejected,
                names::TRANSACTIONS_REJECTED,
                "attempt idempotency_key reason",
            ),
        ];
        for (kind, metric, fields) in cases {
            let m = Metrics::new("NS", "f");
            let alert = domain::decide::Alert {
                kind,
                transaction_id: TransactionId::parse("TX-7").unwrap(),
                attempts: domain::Attempt::FIRST.next(),
                last_reason: Some("NOT_AVAILABLE".into()),
            };
            let (logs, guard) = testkit::logs::capture();
            raise(&alert, &m);
            drop(guard);
            assert_eq!(m.count(metric), 1, "{kind:?}");
            let line = &logs.lines()[0];
            for field in ["attempts", "attempt", "idempotency_key", "reason"] {
                let expected = fields.split(' ').any(|f| f == field);
                assert_eq!(
                    line.get(field).is_some(),
                    expected,
                    "{kind:?} {field}: {line}"
                );
            }
            assert_eq!(line["alert"], kind.label());
            assert_eq!(line["level"], "ERROR");
            assert!(line["message"]
                .as_str()
                .unwrap()
                .starts_with("business alert: "));
            if let Some(count) = line.get("attempts").or(line.get("attempt")) {
                assert_eq!(count, 2);
            }
            if let Some(key) = line.get("idempotency_key") {
                assert_eq!(key, "TX-7#2");
            }
            if let Some(reason) = line.get("reason") {
                assert_eq!(reason, "NOT_AVAILABLE");
            }
        }
    }
}
