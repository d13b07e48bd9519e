//! Values the model checker, the simulator and the tests share: transaction ids, the
//! payload, the epoch of virtual time and the decision context.

use domain::decide::{Context, Input};
use domain::defaults;
use domain::ids::{MaxAttempts, Timestamp, TransactionId};
use domain::machine::{Status, TransactionRecord};
use domain::message::Payload;
use domain::policy::{PolicySet, RetryPolicy};
use std::time::Duration;

/// Virtual time starts here: 2026-01-01T00:00:00Z.
pub const EPOCH_MS: i64 = 1_767_225_600_000;

/// The reason every simulated cancellation carries.
pub const CANCEL_REASON: &str = "NOT_AVAILABLE";

/// `TX-<n>`: "TX-" followed by digits always satisfies the id rules.
pub fn tx_id(n: usize) -> TransactionId {
    TransactionId::parse(&format!("TX-{n}"))
        .unwrap_or_else(|e| panic!("`TX-{n}` must be a valid transaction id: {e}"))
}

/// The payload every simulated transaction starts with.
pub fn payload(n: usize) -> Payload {
    Payload::from_json(&format!("{{\"order\":{n}}}"))
        .unwrap_or_else(|e| panic!("the simulated payload must be valid JSON: {e}"))
}

/// `max_attempts`, clamped into the accepted range.
pub fn max_attempts(n: u32) -> MaxAttempts {
    MaxAttempts::new(n.clamp(1, domain::ids::MAX_ATTEMPTS_LIMIT))
        .unwrap_or_else(|e| panic!("a clamped max_attempts is valid: {e}"))
}

/// The decision context at `now`.
pub fn context(now: Timestamp, policies: &PolicySet, threshold: Duration) -> Context {
    Context::new(now, policies.clone(), defaults::RECONCILE_SHARDS, threshold)
}

/// The article's policy (base 2 h, factor 2, cap 24 h, jitter ±10 %).
pub fn article_policies() -> PolicySet {
    PolicySet::uniform(RetryPolicy::article_default())
}

/// An operator's command, as the model and the simulator run it: chosen from what
/// `retryctl list` shows of a transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Command {
    /// `retryctl resolve`: the outcome was settled elsewhere (SCHEDULING or
    /// SCHEDULED → SUCCEEDED).
    Resolve,
    /// `retryctl replay` with one more attempt (FAILED → SCHEDULING).
    Replay,
}

impl Command {
    /// `resolve` while `r` waits for its retry, `replay` once it ended FAILED by its
    /// cancellations (the service never ran it to the end); nothing otherwise.
    pub fn for_record(r: &TransactionRecord) -> Option<Self> {
        match r.status {
            Status::Scheduling | Status::Scheduled => Some(Command::Resolve),
            Status::Failed if r.mark.is_none() => Some(Command::Replay),
            _ => None,
        }
    }

    /// The command's input for transaction `id`.
    pub fn input(self, id: TransactionId) -> Input {
        match self {
            Command::Resolve => Input::Resolve(id),
            Command::Replay => Input::Replay {
                transaction_id: id,
                budget: 1,
            },
        }
    }
}

/// The attempt budget the service checks a request against: the configured one, or
/// the one an operator's replay raised the record's to.
pub fn budget(record: Option<&TransactionRecord>, configured: u32) -> u32 {
    record.map_or(0, |r| r.max_attempts.get()).max(configured)
}
