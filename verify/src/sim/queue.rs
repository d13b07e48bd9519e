//! The seed's randomness and the SQS queues.

use domain::policy::{RandomSource, SplitMix64};
use std::collections::{BTreeMap, BTreeSet};

/// A stream of the seed's randomness.
#[derive(Debug, Clone)]
pub(crate) struct Rng(SplitMix64);

impl Rng {
    pub(crate) fn new(seed: u64, stream: u64) -> Self {
        let mut mix = SplitMix64::new(seed ^ stream.wrapping_mul(0xA076_1D64_78BD_642F));
        Self(SplitMix64::new(mix.next_u64()))
    }

    pub(crate) fn unit(&mut self) -> f64 {
        self.0.next_unit()
    }

    pub(super) fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && self.unit() < p
    }

    /// Uniform in `lo..=hi`.
    pub(super) fn range(&mut self, lo: i64, hi: i64) -> i64 {
        if hi <= lo {
            return lo;
        }
        let span = u64::try_from(hi - lo + 1).unwrap_or(1);
        lo + i64::try_from(self.0.next_u64() % span).unwrap_or(0)
    }
}

impl RandomSource for Rng {
    fn next_unit(&mut self) -> f64 {
        self.unit()
    }
}

// ---------------------------------------------------------------------------
// Queues
// ---------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum QueueId {
    Response,
    Retry,
}

#[derive(Debug, Clone)]
pub(super) struct Message<T> {
    pub(super) body: T,
    pub(super) receives: u32,
    pub(super) visible_at: i64,
}

/// An SQS standard queue: at-least-once, reordering among visible messages.
#[derive(Debug)]
pub(super) struct SimQueue<T> {
    pub(super) messages: BTreeMap<u64, Message<T>>,
    /// (visible_at, id) of every message.
    pub(super) order: BTreeSet<(i64, u64)>,
    pub(super) dlq: Vec<T>,
    pub(super) visibility_ms: i64,
    pub(super) max_receive: u32,
    pub(super) idle_workers: BTreeSet<usize>,
    pub(super) wake_at: Option<i64>,
}

impl<T: Clone> SimQueue<T> {
    pub(super) fn new(visibility_ms: i64, max_receive: u32, workers: usize) -> Self {
        Self {
            messages: BTreeMap::new(),
            order: BTreeSet::new(),
            dlq: Vec::new(),
            visibility_ms,
            max_receive,
            idle_workers: (0..workers.max(1)).collect(),
            wake_at: None,
        }
    }

    pub(super) fn send(&mut self, id: u64, body: T, now: i64) {
        self.messages.insert(
            id,
            Message {
                body,
                receives: 0,
                visible_at: now,
            },
        );
        self.order.insert((now, id));
    }

    pub(super) fn delete(&mut self, id: u64) {
        if let Some(m) = self.messages.remove(&id) {
            self.order.remove(&(m.visible_at, id));
        }
    }

    /// Picks one of the first few visible messages. Returns (id, body), after moving
    /// messages past maxReceiveCount to the DLQ (their bodies returned in `to_dlq`).
    pub(super) fn receive(
        &mut self,
        now: i64,
        rng: &mut Rng,
        duplicate: bool,
        to_dlq: &mut Vec<T>,
    ) -> Option<(u64, T)> {
        loop {
            let visible: Vec<(i64, u64)> = self
                .order
                .iter()
                .take_while(|(at, _)| *at <= now)
                .take(8)
                .copied()
                .collect();
            if visible.is_empty() {
                return None;
            }
            let pick =
                visible[usize::try_from(rng.range(0, visible.len() as i64 - 1)).unwrap_or(0)];
            let id = pick.1;
            let Some(m) = self.messages.get_mut(&id) else {
                self.order.remove(&pick);
                continue;
            };
            m.receives += 1;
            if m.receives > self.max_receive {
                let body = m.body.clone();
                self.delete(id);
                self.dlq.push(body.clone());
                to_dlq.push(body);
                continue;
            }
            let body = m.body.clone();
            if !duplicate {
                self.order.remove(&pick);
                m.visible_at = now + self.visibility_ms;
                self.order.insert((m.visible_at, id));
            }
            return Some((id, body));
        }
    }

    pub(super) fn next_visible_after(&self, now: i64) -> Option<i64> {
        self.order.iter().map(|(at, _)| *at).find(|at| *at > now)
    }

    pub(super) fn is_empty(&self) -> bool {
        self.messages.is_empty()
    }
}
