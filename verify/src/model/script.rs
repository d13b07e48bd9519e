//! Driving the model by hand: the failure-table tests script executions with these.

use super::step::{Next, ProtocolModel};
use super::world::{Action, Firing, State};
use domain::decide::{Effect, Step};
use domain::machine::Actor;
use domain::message::Outcome;
use stateright::Model;

/// Scripting helpers: drive the model by hand (the failure-table tests use them).
impl ProtocolModel {
    /// Index of the first run of `kind` on `tx`.
    pub fn run_of(s: &State, kind: Actor, tx: u8) -> Option<usize> {
        s.runs.iter().position(|r| r.kind == kind && r.tx == tx)
    }

    /// The label of the next effect of the first run of `kind` on `tx`
    /// (`write <Event>` for writes).
    pub fn next_effect(s: &State, kind: Actor, tx: u8) -> Option<String> {
        let r = &s.runs[Self::run_of(s, kind, tx)?];
        match r.run.step() {
            Step::Perform(Effect::Write(w)) => Some(format!("write {:?}", w.event())),
            Step::Perform(e) => Some(e.label().to_owned()),
            Step::Done(_) => None,
        }
    }

    /// Steps the first run of `kind` on `tx` until its next effect is `label` (or it ends).
    pub fn step_until(&self, mut s: State, kind: Actor, tx: u8, label: &str) -> State {
        for _ in 0..64 {
            match Self::next_effect(&s, kind, tx) {
                Some(l) if l != label => {
                    let run = Self::run_of(&s, kind, tx).unwrap_or(0);
                    s = self.apply(&s, &Action::Step { run });
                }
                _ => break,
            }
        }
        s
    }

    /// Runs the first run of `kind` on `tx` to its end.
    pub fn finish_run(&self, s: State, kind: Actor, tx: u8) -> State {
        self.step_until(s, kind, tx, "<end>")
    }

    /// Stops the first run of `kind` on `tx` before its next effect (a crash).
    pub fn crash(&self, s: &State, kind: Actor, tx: u8) -> State {
        let mut s = s.clone();
        s.budgets.crashes = s.budgets.crashes.max(1);
        match Self::run_of(&s, kind, tx) {
            Some(run) => self.apply(&s, &Action::Crash { run }),
            None => s,
        }
    }

    /// The external service receives every queued request.
    pub fn service_receives_all(&self, mut s: State) -> State {
        while !s.requests.is_empty() {
            s = self.apply(
                &s,
                &Action::ServiceReceive {
                    i: 0,
                    duplicate: false,
                },
            );
        }
        s
    }

    /// The service answers attempt `attempt` of `tx` (again, if it already did).
    pub fn answer(&self, s: &State, tx: u8, attempt: u32, outcome: Outcome) -> State {
        let mut s = s.clone();
        s.budgets.extra_answers = s.budgets.extra_answers.max(1);
        self.apply(
            &s,
            &Action::ServiceAnswer {
                tx,
                attempt,
                outcome,
                may_have_run: false,
            },
        )
    }

    /// Delivers the first queued response of `tx` (keeping a copy when `duplicate`).
    pub fn deliver_response(&self, s: &State, tx: u8, duplicate: bool) -> State {
        let i = s.responses.iter().position(|r| r.tx == tx);
        self.deliver(s, i.map(|i| Action::DeliverResponse { i, duplicate }))
    }

    /// Delivers the first stream record of `tx` to the publisher (keeping a copy when
    /// `duplicate`).
    pub fn deliver_stream(&self, s: &State, tx: u8, duplicate: bool) -> State {
        let i = s.stream.iter().position(|m| m.tx == tx);
        self.deliver(s, i.map(|i| Action::DeliverStream { i, duplicate }))
    }

    /// Delivers the first queued retry event of `tx` (keeping a copy when `duplicate`).
    pub fn deliver_retry(&self, s: &State, tx: u8, duplicate: bool) -> State {
        let i = s.retries.iter().position(|e| e.tx == tx);
        self.deliver(s, i.map(|i| Action::DeliverRetry { i, duplicate }))
    }

    fn deliver(&self, s: &State, delivery: Option<Action>) -> State {
        let mut s = s.clone();
        s.budgets.duplicate_deliveries = s.budgets.duplicate_deliveries.max(1);
        match delivery {
            Some(a) => self.apply(&s, &a),
            None => s,
        }
    }

    /// Fires the first live schedule of `tx`.
    pub fn fire(&self, s: &State, tx: u8, how: Firing) -> State {
        let mut s = s.clone();
        s.budgets.double_fires = s.budgets.double_fires.max(1);
        s.budgets.undeliverable_fires = s.budgets.undeliverable_fires.max(1);
        match s.schedules.iter().position(|x| x.tx == tx) {
            Some(i) => self.apply(&s, &Action::Fire { i, how }),
            None => s,
        }
    }

    /// Starts a reconciler run on `tx` (late: past the fire instant).
    pub fn reconcile(&self, s: &State, tx: u8, late: bool) -> State {
        let mut s = s.clone();
        s.budgets.reconciler_runs = s.budgets.reconciler_runs.max(1);
        self.apply(&s, &Action::Reconcile { tx, late })
    }

    /// Advances the clock one tick.
    pub fn tick(&self, s: &State) -> State {
        let mut s = s.clone();
        s.budgets.ticks = s.budgets.ticks.max(1);
        self.apply(&s, &Action::Tick)
    }

    /// Drives everything to the end without faults, answering every attempt with
    /// `outcome`. Returns the final state.
    pub fn settle_with(&self, s: State, outcome: Outcome) -> State {
        let order = [
            Next::Step,
            Next::Stream,
            Next::Request,
            Next::Answer(outcome),
            Next::Response,
            Next::Retry,
            Next::Fire,
        ];
        self.without_faults(s, &order, 1_000)
    }

    /// The initial state.
    pub fn initial_state(&self) -> State {
        self.initial()
    }

    /// Whether the safety properties hold in `s` (the names of those that do not).
    pub fn broken(&self, s: &State) -> Vec<&'static str> {
        self.properties()
            .iter()
            .filter(|p| p.expectation == stateright::Expectation::Always)
            .filter(|p| !(p.condition)(self, s))
            .map(|p| p.name)
            .collect()
    }
}
