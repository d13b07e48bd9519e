//! What a function needs besides its ports to build a decision `domain::Context`: the
//! deployment's rules, and the per-record random source for jitter.

use domain::policy::SplitMix64;
use std::sync::atomic::{AtomicU64, Ordering};

/// The decision settings of a function (from its configuration): the deployment's
/// rules, whose [`Settings::context`] is one decision's [`domain::Context`].
pub use domain::decide::Deployment as Settings;

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
