//! What one model check covers: the transactions and the fault budgets.

use crate::sim::OutageMode;
use crate::Flaws;
use domain::decide::Delivery;
use std::fmt;
use testkit::oracle::ServiceDedup;

/// How far one tick of the model's clock moves time. Long enough that a fire instant
/// computed after a tick differs from one computed before it.
pub const TICK_MS: i64 = 61_000;

/// The reconciler's "late" run sees every intermediate record far past any threshold.
pub(super) const LATE_MS: i64 = 400 * 24 * 3_600_000;

/// The transaction deadline of a scope with a deadline budget: ten days, past every
/// fire instant the model's backoff computes. The reconciler's late run is past it.
pub const DEADLINE_MS: i64 = 10 * 24 * 3_600_000;

/// How far the clock jumps when the deadline passes (every later decision past it).
pub(super) const DEADLINE_JUMP_MS: i64 = 2 * DEADLINE_MS;

/// The scope of a model check: how many transactions, and how many faults of each kind
/// a single execution may contain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scope {
    pub transactions: u8,
    pub max_attempts: u32,
    /// Faults of each kind one execution may contain.
    pub faults: Budgets,
    /// Known-bad designs switched on (verification only).
    pub flaws: Flaws,
    /// Explore every interleaving of the transactions' steps. When false, transaction
    /// k acts only while every transaction before it is quiescent (nothing of theirs
    /// in flight): a partial-order reduction that is sound and complete for these
    /// properties, because transactions share no state (see docs/verification.md).
    pub interleave: bool,
    /// What the service does while an outage (budget `faults.outages`) lasts. With
    /// an outage budget the circuit breaker is modelled.
    pub outage_mode: OutageMode,
    /// The breaker writes each probe it lets out (false: a broken gate whose
    /// HALF_OPEN rounds let out more than their probes).
    pub counts_probes: bool,
    /// With the breaker: explore only executions whose transactions each wait at most
    /// this many times for one attempt (technical re-sends, the record's `resends`,
    /// and holds of their retry event). Holds, each a wait until a later instant,
    /// are not bounded otherwise: this bounds the outage's length.
    pub rounds: u32,
    /// Whether the external service deduplicates by idempotency key (the
    /// deployment's precondition) or runs every request message it receives; then
    /// the property "each (transaction, attempt) runs at most once" is checked too.
    pub service: ServiceDedup,
    /// How requests leave: published by the handler that decides them (`Direct`), or
    /// written as an intent (the record SENDING) that the publisher, reading the
    /// table's stream, sends to a FIFO request queue (`Outbox`); then "each
    /// (transaction, attempt, round) is published at most once" is checked too.
    pub delivery: Delivery,
}

impl Scope {
    /// No faults at all: the happy paths and their interleavings.
    pub fn quiet(transactions: u8, max_attempts: u32) -> Self {
        Self {
            transactions,
            max_attempts,
            faults: Budgets::each(0),
            flaws: Flaws::NONE,
            interleave: true,
            outage_mode: OutageMode::Error,
            counts_probes: true,
            rounds: 3,
            service: ServiceDedup::ByKey,
            delivery: Delivery::Direct,
        }
    }

    /// The scope `cargo test` checks: 2 transactions, max_attempts 3, one fault of each
    /// kind per execution.
    pub fn ci() -> Self {
        Self {
            faults: Budgets::each(1),
            ..Self::quiet(2, 3)
        }
    }

    pub fn with_flaws(mut self, flaws: Flaws) -> Self {
        self.flaws = flaws;
        self
    }

    /// The same scope with the fault budgets `set` gives.
    pub fn with_faults(mut self, set: impl FnOnce(&mut Budgets)) -> Self {
        set(&mut self.faults);
        self
    }

    /// One outage of the service (`mode`) with its circuit breaker, on `self`.
    pub fn with_outage(mut self, mode: OutageMode) -> Self {
        self.faults.outages = 1;
        self.outage_mode = mode;
        self
    }

    /// The same scope against a service that runs every request message it receives.
    pub fn non_idempotent(mut self) -> Self {
        self.service = ServiceDedup::NonIdempotent;
        self
    }

    /// The same scope in outbox delivery.
    pub fn outbox(mut self) -> Self {
        self.delivery = Delivery::Outbox;
        self
    }

    /// True in outbox delivery.
    pub fn is_outbox(&self) -> bool {
        self.delivery == Delivery::Outbox
    }

    /// True when the breaker is part of the model (an outage may happen).
    pub fn breaker(&self) -> bool {
        self.faults.outages > 0
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = &self.faults;
        write!(
            f,
            "{} transactions ({}), max_attempts {}; per execution at most: {} duplicate deliveries, {} crashes, {} extra answers, {} double fires, {} undeliverable fires, {} reconciler runs, {} clock ticks, {} lost messages, {} technical answers, {} rejected answers, {} outages, {} deadline jumps, {} operator actions{}{}{}",
            self.transactions,
            if self.interleave { "every interleaving" } else { "transaction-ordered reduction" },
            self.max_attempts,
            b.duplicate_deliveries,
            b.crashes,
            b.extra_answers,
            b.double_fires,
            b.undeliverable_fires,
            b.reconciler_runs,
            b.ticks,
            b.lost_messages,
            b.technical_answers,
            b.rejected_answers,
            b.outages,
            b.deadlines,
            b.operator_actions,
            if self.breaker() {
                format!(
                    " (answering {}, with the circuit breaker; at most {} retry cycles per attempt)",
                    match self.outage_mode {
                        OutageMode::Error => "ERROR",
                        OutageMode::Silent => "nothing",
                    },
                    self.rounds
                )
            } else {
                String::new()
            },
            if self.service.runs_every_message() {
                "; the service does not deduplicate (it runs every request message it receives)"
            } else {
                ""
            },
            if self.is_outbox() {
                format!(
                    "; outbox delivery (the publisher reads the stream, a FIFO request queue), at most {} window expiries",
                    b.window_expiries
                )
            } else {
                String::new()
            }
        )
    }
}

/// Faults of each kind: what a scope allows one execution, and what an execution has
/// left.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Budgets {
    /// Deliveries of a message while another delivery of it exists (any queue).
    pub duplicate_deliveries: u8,
    /// Handler or reconciler runs stopped between two effects.
    pub crashes: u8,
    /// Answers of the external service beyond the first one for an attempt.
    pub extra_answers: u8,
    /// Schedules that fire twice.
    pub double_fires: u8,
    /// Schedules whose event cannot be delivered (it goes to the scheduler DLQ).
    pub undeliverable_fires: u8,
    /// Reconciler runs.
    pub reconciler_runs: u8,
    /// Advances of the clock.
    pub ticks: u8,
    /// Messages lost on the way: a request that never reaches the service (as after a
    /// start that crashed before its publish), or an answer the service gave that
    /// never reaches the response queue.
    pub lost_messages: u8,
    /// Answers ERROR: the service could not process an attempt (a technical failure;
    /// the attempt is sent again, same key, and answered anew).
    pub technical_answers: u8,
    /// Answers REJECTED: the service refuses an attempt for good (an operator case;
    /// the transaction ends FAILED, never retried).
    pub rejected_answers: u8,
    /// Outages of the service: it goes down (ERROR or silence, as the scope says) and
    /// up again at any later moment.
    pub outages: u8,
    /// Times the clock jumps past the transactions' deadline (0 or 1): with a budget,
    /// the model's deadline is [`DEADLINE_MS`]; without, no decision reaches one.
    pub deadlines: u8,
    /// Operator commands (`resolve` of a waiting transaction, `replay` of one that
    /// ended FAILED by its cancellations), each racing the handlers.
    pub operator_actions: u8,
    /// Outbox delivery: times the clock jumps past the FIFO queue's deduplication
    /// window (5 minutes, so past `PUBLISH_RESEND_WINDOW` too): the queue forgets
    /// every deduplication id it accepted, and every claim made before is older than
    /// the window. 0 is the window assumption: every repeat of a send comes within it.
    pub window_expiries: u8,
}

/// A closure for [`Scope::with_faults`] allowing one fault of each kind named:
/// `faults!(crashes, window_expiries)`.
#[macro_export]
macro_rules! faults {
    ($($kind:ident),+ $(,)?) => {
        |b: &mut $crate::model::Budgets| { $(b.$kind = 1;)+ }
    };
}

impl Budgets {
    /// `n` faults of every kind but outages (which bring the breaker in), rejected
    /// answers, deadlines and operator actions.
    pub const fn each(n: u8) -> Self {
        Self {
            duplicate_deliveries: n,
            crashes: n,
            extra_answers: n,
            double_fires: n,
            undeliverable_fires: n,
            reconciler_runs: n,
            ticks: n,
            lost_messages: n,
            technical_answers: n,
            rejected_answers: 0,
            outages: 0,
            deadlines: 0,
            operator_actions: 0,
            window_expiries: 0,
        }
    }
}
