//! The service's answers, built for tests: [`response`], with the reason every test uses.

use domain::ids::{Attempt, TransactionId};
use domain::message::{Outcome, Response};

/// The service's answer to `attempt` of `transaction_id`: this outcome, reason
/// `NOT_AVAILABLE`, nothing else said.
pub fn response(transaction_id: TransactionId, attempt: Attempt, outcome: Outcome) -> Response {
    Response {
        transaction_id,
        attempt,
        outcome,
        reason: Some("NOT_AVAILABLE".into()),
        retry_after_seconds: None,
        round: None,
        execution: None,
    }
}
