//! The metrics named after what a run ended in: each name is built here, from the
//! enums that say what happened, and nowhere else.

use crate::metrics::{pascal, Metrics};
use crate::verdict::PermanentReason;
use domain::decide::{Ack, DropReason, Rejection};
use domain::{Disposition, Status};

/// A count named after what happened.
#[derive(Debug, Clone, Copy)]
pub enum Metric<'a> {
    /// `Ack<Ack>`: `AckScheduled`, `AckAlreadyHandled`.
    Ack(Ack),
    /// `Drop<Reason>`: `DropLateResponse`.
    Drop(&'a DropReason),
    /// `Reject<Reason>`: `RejectUnknownTransaction`.
    Reject(&'a Rejection),
    /// `PermanentError<Reason>`: `PermanentErrorMalformedBody`.
    PermanentError(&'a PermanentReason),
    /// `Reconcile<Status><Action>`: `ReconcileSendingRequeued`, from the reconciler's
    /// kebab-case label of what it did with a record (`requeued`, `not-stuck`).
    Reconciled(Status, &'static str),
}

impl<'a> Metric<'a> {
    /// The metric a run's disposition counts.
    pub fn of(d: &'a Disposition) -> Self {
        match d {
            Disposition::Ack(a) => Metric::Ack(*a),
            Disposition::Drop(r) => Metric::Drop(r),
            Disposition::Reject(r) => Metric::Reject(r),
        }
    }

    /// The metric's name in CloudWatch.
    pub fn name(&self) -> String {
        let (prefix, parts) = match self {
            Metric::Ack(a) => ("Ack", [a.label(), ""]),
            Metric::Drop(d) => ("Drop", [d.label(), ""]),
            Metric::Reject(r) => ("Reject", [r.label(), ""]),
            Metric::PermanentError(p) => ("PermanentError", [p.label(), ""]),
            Metric::Reconciled(s, a) => ("Reconcile", [s.as_str(), *a]),
        };
        parts.iter().fold(prefix.to_owned(), |n, p| n + &pascal(p))
    }
}

/// One invocation of `function`: `body` counts into metrics of its own, written as
/// the invocation's one EMF line when it is done.
pub async fn invocation<T>(
    namespace: &str,
    function: &str,
    body: impl AsyncFnOnce(&Metrics) -> T,
) -> T {
    let metrics = Metrics::new(namespace, function);
    let result = body(&metrics).await;
    metrics.emit();
    result
}

impl Metrics {
    /// Counts one occurrence of `m`.
    pub fn record(&self, m: Metric<'_>) {
        self.incr(&m.name());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use domain::{Attempt, TransactionId};

    #[test]
    fn names_are_built_from_what_happened() {
        let late = DropReason::LateResponse {
            attempt: Attempt::FIRST,
            current: Attempt::FIRST,
        };
        let unknown = Rejection::UnknownTransaction {
            transaction_id: TransactionId::parse("TX-1").unwrap(),
        };
        let cases = [
            (Metric::Ack(Ack::AlreadyHandled), "AckAlreadyHandled"),
            (Metric::Drop(&late), "DropLateResponse"),
            (Metric::Reject(&unknown), "RejectUnknownTransaction"),
            (
                Metric::PermanentError(&PermanentReason::MalformedBody),
                "PermanentErrorMalformedBody",
            ),
            (
                Metric::Reconciled(Status::InProgress, "requeued"),
                "ReconcileInProgressRequeued",
            ),
            (
                Metric::Reconciled(Status::Sending, "not-stuck"),
                "ReconcileSendingNotStuck",
            ),
        ];
        for (m, name) in cases {
            assert_eq!(m.name(), name);
        }
    }
}
