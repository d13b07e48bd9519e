//! What a function needs besides its ports to build a decision [`Context`], and the
//! per-record random source for jitter.

use domain::defaults;
use domain::policy::SplitMix64;
use domain::{Context, PolicySet, Timestamp};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The decision settings of a function (from its configuration).
#[derive(Debug, Clone)]
pub struct Settings {
    pub policies: PolicySet,
    /// Write shards of the reconciler index (RECONCILE_SHARDS).
    pub shards: u16,
    /// How long an intermediate state may last before the reconciler acts
    /// (RECONCILE_THRESHOLD_SECONDS; only the reconciler uses it).
    pub reconcile_threshold: Duration,
    /// How long a request may go unanswered (ANSWER_TIMEOUT_SECONDS).
    pub answer_timeout: Duration,
    /// Republishes of an unanswered request before FAILED/UNANSWERED
    /// (ANSWER_REPUBLISH_MAX; only the reconciler uses it).
    pub answer_republish_max: u32,
    /// Requeues without progress before a record is parked (RECONCILE_REQUEUE_MAX;
    /// only the reconciler uses it).
    pub requeue_max: u32,
    /// Technical re-sends of a transaction before an ERROR ends it FAILED
    /// (TECHNICAL_RESEND_MAX; only the response handler uses it).
    pub technical_resend_max: u32,
    /// How long a transaction may stay open (TRANSACTION_DEADLINE_SECONDS).
    pub transaction_deadline: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            policies: PolicySet::default(),
            shards: defaults::RECONCILE_SHARDS,
            reconcile_threshold: defaults::RECONCILE_THRESHOLD,
            answer_timeout: defaults::ANSWER_TIMEOUT,
            answer_republish_max: defaults::ANSWER_REPUBLISH_MAX,
            requeue_max: defaults::RECONCILE_REQUEUE_MAX,
            technical_resend_max: defaults::TECHNICAL_RESEND_MAX,
            transaction_deadline: defaults::TRANSACTION_DEADLINE,
        }
    }
}

impl Settings {
    /// The context of one decision made at `now`.
    pub fn context(&self, now: Timestamp) -> Context {
        Context::new(
            now,
            self.policies.clone(),
            self.shards,
            self.reconcile_threshold,
        )
        .with_answer_deadline(self.answer_timeout, self.answer_republish_max)
        .with_requeue_max(self.requeue_max)
        .with_technical_resend_max(self.technical_resend_max)
        .with_transaction_deadline(self.transaction_deadline)
    }
}

/// Hands out one independent jitter source per record: a process-wide sequence of
/// seeds, so concurrent records never share a generator and a fixed first seed makes
/// a test repeatable.
#[derive(Debug)]
pub struct Seeds(AtomicU64);

impl Seeds {
    pub fn fixed(first: u64) -> Self {
        Self(AtomicU64::new(first))
    }

    /// Seeded from the clock and the process id (jitter only; nothing secret).
    pub fn from_entropy() -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let mixed = (nanos as u64) ^ (u64::from(std::process::id()) << 32);
        Self::fixed(mixed)
    }

    pub fn next(&self) -> SplitMix64 {
        SplitMix64::new(self.0.fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed))
    }
}

impl Default for Seeds {
    fn default() -> Self {
        Self::from_entropy()
    }
}
