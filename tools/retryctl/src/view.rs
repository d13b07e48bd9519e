//! How operator commands print: a text form for people and a JSON form for scripts.

use domain::audit::AuditEntry;
use domain::machine::Actor;
use domain::{Status, TransactionRecord};
use serde::Serialize;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// A transaction's audit rows in transition order.
pub fn chain(rows: &[AuditEntry]) -> Vec<AuditEntry> {
    aws::audit::in_transition_order(rows.to_vec())
}

/// Attributes of the record that are bookkeeping of the protocol, not shown: the
/// index keys, the answer deadline, and the operator note (shown as
/// `operator_caller` and `operator_reason`).
const NOT_SHOWN: [&str; 3] = ["reconcile", "failed", "operator"];

/// The state item as JSON: the record's own serialisation (the attribute names of the
/// table, counters included) without its bookkeeping, and the operator note as two keys.
/// Every key is present, `null` when it does not apply.
pub fn record_json(r: &TransactionRecord) -> Value {
    let mut v = serde_json::to_value(r).unwrap_or_default();
    if let Some(map) = v.as_object_mut() {
        for key in NOT_SHOWN {
            map.remove(key);
        }
        let note = r.operator.as_deref();
        map.insert("operator_caller".into(), json!(note.map(|o| &o.caller)));
        map.insert(
            "operator_reason".into(),
            json!(note.and_then(|o| o.reason.as_deref())),
        );
    }
    v
}

/// A timeline row as JSON: what the transition changed. Every key is present; the ones
/// the transition is not about are `null` (a SENDING row carries no outcome).
pub fn audit_json(e: &AuditEntry) -> Value {
    let c = changed(e);
    let answered = c.outcome.is_some();
    json!({
        "at": e.at.to_rfc3339(),
        "actor": e.actor.as_str(),
        "from": e.from.map(Status::as_str),
        "to": e.to.as_str(),
        "current_attempt": e.current_attempt.get(),
        "next_attempt": e.next_attempt.map(|a| a.get()),
        "max_attempts": e.max_attempts,
        "schedule_name": c.schedule,
        "next_fire_at": c.fire.map(|t| t.to_rfc3339()),
        "fire_drift_ms": fire_drift_ms(e),
        "idempotency_key": request_key(e),
        "outcome": if answered { e.outcome.map(|o| o.as_str()) } else { None },
        "reason": if answered { e.reason.clone() } else { None },
        "origin": c.origin,
        "operator_caller": e.operator.as_ref().map(|o| o.caller.as_str()),
        "operator_reason": e.operator.as_ref().and_then(|o| o.reason.as_deref()),
        "notice": e.notice.map(|n| n.as_str()),
        "erased": e.erased.names(),
        "paused_by_breaker": e.paused_by(),
        "correlation_id": e.correlation_id.as_ref().map(|c| c.as_str()),
    })
}

/// The transition column: `FROM → TO`, or for a notice (no transition) what was
/// noticed and the status the record had, e.g. `CONFLICTING_SUCCESS in SCHEDULED`.
fn arrow_text(e: &AuditEntry) -> String {
    match (e.notice, e.paused_by()) {
        (Some(n), _) => format!("{} in {}", n.as_str(), e.to),
        (None, Some(_)) => format!("{} → {} PAUSED", e.from.map_or("[*]", Status::as_str), e.to),
        (None, None) => format!("{} → {}", e.from.map_or("[*]", Status::as_str), e.to),
    }
}

/// How late the retry left after its fire time (SCHEDULED → SENDING), in ms.
pub fn fire_drift_ms(e: &AuditEntry) -> Option<i64> {
    (e.to == Status::Sending)
        .then_some(e.next_fire_at)
        .flatten()
        .map(|fire| e.at.millis() - fire.millis())
}

/// The idempotency key of the request a transition published (→ IN_PROGRESS).
pub fn request_key(e: &AuditEntry) -> Option<String> {
    (e.to == Status::InProgress).then(|| {
        domain::IdempotencyKey::new(&e.transaction_id, e.current_attempt)
            .as_str()
            .to_owned()
    })
}

/// Seconds with a sign and millisecond precision: `+3.512s`.
fn secs(ms: i64) -> String {
    format!(
        "{}{}.{:03}s",
        if ms < 0 { "-" } else { "+" },
        ms.abs() / 1000,
        ms.abs() % 1000
    )
}

/// The compact timeline: one line per transition, its time relative to the start and
/// to the line before, the fire drift of each retry, the idempotency key of each
/// request.
pub fn compact_timeline(rows: &[AuditEntry]) -> String {
    let mut s = String::new();
    let start = rows.first().map_or(0, |e| e.at.millis());
    let mut prev = start;
    for e in rows {
        let c = changed(e);
        let mut line = format!(
            "  {:>10} {:>10}  {:<16} {:<26} #{}",
            secs(e.at.millis() - start),
            format!("({})", secs(e.at.millis() - prev)),
            e.actor.as_str(),
            arrow_text(e),
            e.current_attempt,
        );
        prev = e.at.millis();
        if let Some(n) = e.next_attempt {
            line.push_str(&format!(" → #{n}"));
        }
        if let (true, Some(fire)) = (e.to == Status::Scheduled, c.fire) {
            line.push_str(&format!("  fires {}", secs(fire.millis() - start)));
        }
        if let Some(d) = fire_drift_ms(e) {
            line.push_str(&format!("  fired {} late", secs(d)));
        }
        if let Some(k) = request_key(e) {
            line.push_str(&format!("  key {k}"));
        }
        if let Some(o) = &c.outcome {
            line.push_str(&format!("  {o}"));
        }
        if let Some(o) = &c.origin {
            line.push_str(&format!("  origin {o}"));
        }
        if let Some(state) = e.paused_by() {
            line.push_str(&format!("  PAUSED by the circuit breaker ({state})"));
        }
        if let Some(o) = &e.operator {
            line.push_str(&format!("  by {}", o.caller));
            if let Some(r) = &o.reason {
                line.push_str(&format!(": {r}"));
            }
        }
        let _ = writeln!(s, "{line}");
    }
    s
}

/// What one transition is about, and nothing else: the schedule while waiting for a
/// retry, the fire time until the retry is sent, the outcome when an answer (or an
/// operator) moved it, the origin when a retry event did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Changed {
    pub schedule: Option<String>,
    pub fire: Option<domain::Timestamp>,
    pub outcome: Option<String>,
    pub origin: Option<String>,
}

pub fn changed(e: &AuditEntry) -> Changed {
    if e.notice.is_some() {
        // A notice changed nothing: only the answer it records.
        return Changed {
            schedule: None,
            fire: None,
            outcome: answer_text(e),
            origin: None,
        };
    }
    let waiting = matches!(e.to, Status::Scheduling | Status::Scheduled);
    let schedule = if waiting {
        e.schedule_name.as_ref().map(|s| s.as_str().to_owned())
    } else {
        None
    };
    let fire = if waiting || e.to == Status::Sending {
        e.next_fire_at
    } else {
        None
    };
    let answered = e.from == Some(Status::InProgress) && e.actor == Actor::ResponseHandler;
    let outcome = if answered || e.to == Status::Succeeded {
        answer_text(e)
    } else {
        None
    };
    let origin = if matches!(e.to, Status::Sending) || e.from == Some(Status::Failed) {
        e.origin.map(|o| o.as_str().to_owned())
    } else {
        None
    };
    Changed {
        schedule,
        fire,
        outcome,
        origin,
    }
}

/// The outcome and reason an entry carries, e.g. `CANCELLED NOT_AVAILABLE`.
fn answer_text(e: &AuditEntry) -> Option<String> {
    match (e.outcome, &e.reason) {
        (Some(o), Some(r)) => Some(format!("{} {r}", o.as_str())),
        (Some(o), None) => Some(o.as_str().to_owned()),
        (None, Some(r)) => Some(r.clone()),
        (None, None) => None,
    }
}

/// One line of the wide timeline for an audit row (without the time column).
pub fn transition_text(e: &AuditEntry) -> String {
    let attempt = match e.next_attempt {
        Some(n) => format!("{} → {}", e.current_attempt, n),
        None => e.current_attempt.to_string(),
    };
    let Changed {
        schedule,
        fire,
        outcome,
        origin,
    } = changed(e);
    format!(
        "{:<17} {:<26} {:<8} {:<34} {:<24} {:<24} {}",
        e.actor.as_str(),
        arrow_text(e),
        attempt,
        schedule.unwrap_or_else(|| "-".into()),
        fire.map_or_else(|| "-".into(), |t| t.to_rfc3339()),
        outcome.unwrap_or_else(|| "-".into()),
        origin.unwrap_or_else(|| "-".into()),
    )
    .trim_end()
    .to_owned()
}

/// `retryctl show`: the record, then the timeline.
pub fn show_text(r: &TransactionRecord, audit: &[AuditEntry], wide: bool) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "transaction   {}", r.transaction_id);
    if let Some(c) = &r.correlation_id {
        let _ = writeln!(s, "correlation   {c}");
    }
    let _ = writeln!(
        s,
        "status        {}   attempt {} of {}{}",
        r.status,
        r.current_attempt,
        r.max_attempts,
        r.next_attempt
            .map(|n| format!(", next attempt {n}"))
            .unwrap_or_default()
    );
    if let Some(t) = r.next_fire_at {
        let _ = writeln!(s, "next fire at  {t}");
    }
    if let Some(n) = &r.schedule_name {
        let _ = writeln!(s, "schedule      {n}");
    }
    if r.status == Status::Succeeded && r.last_actor == Actor::Operator {
        // Resolved by other means: the outcome on the record is the service's last
        // answer (CANCELLED), not how the transaction ended.
        let _ = writeln!(
            s,
            "resolved      by an operator ({}); the service's last answer was {}",
            r.last_reason.as_deref().unwrap_or("-"),
            r.last_outcome.map_or("-", |o| o.as_str())
        );
    } else if let Some(o) = r.last_outcome {
        let _ = writeln!(
            s,
            "last outcome  {}{}",
            o.as_str(),
            r.last_reason
                .as_ref()
                .map(|x| format!(" ({x})"))
                .unwrap_or_default()
        );
    } else if let Some(x) = &r.last_reason {
        let _ = writeln!(s, "last reason   {x}");
    }
    let _ = writeln!(s, "created       {}", r.created_at);
    let _ = writeln!(
        s,
        "updated       {} by {}{}",
        r.updated_at,
        r.last_actor.as_str(),
        r.last_origin
            .map(|o| format!(" (origin {})", o.as_str()))
            .unwrap_or_default()
    );
    if let Some(o) = &r.operator {
        let _ = writeln!(
            s,
            "operator      {}{}",
            o.caller,
            o.reason
                .as_ref()
                .map(|x| format!(": {x}"))
                .unwrap_or_default()
        );
    }
    let rows = chain(audit);
    let _ = writeln!(s);
    let _ = writeln!(s, "timeline ({} transitions)", rows.len());
    if wide {
        let _ = writeln!(
            s,
            "  {:<24}  {:<17} {:<26} {:<8} {:<34} {:<24} {:<24} ORIGIN",
            "TIME", "ACTOR", "FROM → TO", "ATTEMPT", "SCHEDULE", "FIRE AT", "OUTCOME / REASON",
        );
        for e in &rows {
            let _ = writeln!(s, "  {}  {}", e.at, transition_text(e));
        }
    } else {
        s.push_str(&compact_timeline(&rows));
    }
    let _ = writeln!(s, "{}", audit_lag(r, &rows).text());
    s
}

/// How the audit trail stands against the record: up to date when its last entry is
/// the record's last write (same status, attempt and time); else behind by the time
/// between the two.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditLag {
    pub up_to_date: bool,
    /// The time of the trail's last entry (`None`: no entry yet).
    pub last_audited_at: Option<domain::Timestamp>,
    pub last_audited: Option<(Status, u32)>,
    pub record: (Status, u32, domain::Timestamp),
}

/// The lag of `rows` (in transition order) behind `r`.
pub fn audit_lag(r: &TransactionRecord, rows: &[AuditEntry]) -> AuditLag {
    let last = rows.iter().rev().find(|e| e.is_transition());
    AuditLag {
        up_to_date: last.is_some_and(|e| {
            e.to == r.status && e.current_attempt == r.current_attempt && e.at == r.updated_at
        }),
        last_audited_at: last.map(|e| e.at),
        last_audited: last.map(|e| (e.to, e.current_attempt.get())),
        record: (r.status, r.current_attempt.get(), r.updated_at),
    }
}

impl AuditLag {
    /// Milliseconds between the trail's last entry (or none) and the record's last
    /// write, when behind.
    pub fn behind_ms(&self) -> Option<i64> {
        if self.up_to_date {
            return None;
        }
        let (_, _, written) = self.record;
        Some(
            written.millis()
                - self
                    .last_audited_at
                    .map_or(written.millis(), |t| t.millis()),
        )
    }

    pub fn text(&self) -> String {
        let (status, attempt, written) = self.record;
        if self.up_to_date {
            return "audit         up to date (its last entry is the record's last write)".into();
        }
        let ends = match (self.last_audited, self.last_audited_at) {
            (Some((st, n)), Some(_)) => format!(
                "the trail ends at {st} #{n}, {} earlier",
                secs(self.behind_ms().unwrap_or(0)).trim_start_matches('+')
            ),
            _ => "the trail has no entry yet".to_owned(),
        };
        format!(
            "audit         behind: the record's last write ({status} #{attempt} at {written}) is not audited yet; {ends}"
        )
    }

    pub fn json(&self) -> Value {
        let (status, attempt, written) = self.record;
        json!({
            "up_to_date": self.up_to_date,
            "behind_ms": self.behind_ms(),
            "last_audited_at": self.last_audited_at.map(|t| t.to_rfc3339()),
            "last_audited_status": self.last_audited.map(|(s, _)| s.as_str()),
            "record_status": status.as_str(),
            "record_attempt": attempt,
            "record_updated_at": written.to_rfc3339(),
        })
    }
}

pub fn show_json(r: &TransactionRecord, audit: &[AuditEntry]) -> Value {
    let chained = chain(audit);
    let rows: Vec<Value> = chained.iter().map(audit_json).collect();
    json!({
        "record": record_json(r),
        "timeline": rows,
        "audit": audit_lag(r, &chained).json(),
    })
}

/// `retryctl stats`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Stats {
    pub total: u64,
    pub by_status: BTreeMap<Status, u64>,
    /// status → current attempt → count.
    pub by_status_and_attempt: BTreeMap<Status, BTreeMap<u32, u64>>,
    /// Items whose status is none of the machine's (never written by the handlers).
    pub unreadable: u64,
}

pub fn stats_text(st: &Stats) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "{} transactions", st.total);
    let max_attempt = st
        .by_status_and_attempt
        .values()
        .flat_map(|m| m.keys().copied())
        .max()
        .unwrap_or(1);
    let _ = write!(s, "{:<12} {:>7}", "STATUS", "TOTAL");
    for a in 1..=max_attempt {
        let _ = write!(s, " {:>7}", format!("att {a}"));
    }
    let _ = writeln!(s);
    for &status in Status::ALL {
        let total = st.by_status.get(&status).copied().unwrap_or(0);
        let _ = write!(s, "{:<12} {:>7}", status.as_str(), total);
        for a in 1..=max_attempt {
            let n = st
                .by_status_and_attempt
                .get(&status)
                .and_then(|m| m.get(&a))
                .copied()
                .unwrap_or(0);
            let _ = write!(s, " {:>7}", n);
        }
        let _ = writeln!(s);
    }
    if st.unreadable > 0 {
        let _ = writeln!(s, "{} items with an unreadable status", st.unreadable);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use domain::machine::Counter;
    use domain::{MaxAttempts, Timestamp, TransactionId};

    /// A record of `id` started at 1 s with at most `max` attempts.
    fn started(id: &str, max: u32) -> TransactionRecord {
        TransactionRecord::started(
            TransactionId::parse(id).unwrap(),
            MaxAttempts::new(max).unwrap(),
            Timestamp::from_millis(1_000),
        )
    }

    /// GIVEN a record and its trail WHEN the trail holds its last write THEN the audit
    /// is up to date; WHEN the record moved on (or nothing is audited yet) THEN it is
    /// behind, by the time between the trail's end and the record's last write.
    #[test]
    fn the_audit_lag_is_said_not_guessed() {
        let started = started("TX-LAG", 2);
        let first = AuditEntry::from_change(None, &started).unwrap();
        let lag = audit_lag(&started, std::slice::from_ref(&first));
        assert!(lag.up_to_date);
        assert_eq!(lag.behind_ms(), None);
        assert!(lag.text().contains("up to date"), "{}", lag.text());

        let mut failed = started.clone();
        failed.status = Status::Failed;
        failed.updated_at = Timestamp::from_millis(13_345);
        let lag = audit_lag(&failed, std::slice::from_ref(&first));
        assert!(!lag.up_to_date);
        assert_eq!(lag.behind_ms(), Some(12_345));
        assert!(
            lag.text()
                .contains("the trail ends at IN_PROGRESS #1, 12.345s earlier"),
            "{}",
            lag.text()
        );
        assert_eq!(lag.json()["behind_ms"], 12_345);
        let none = audit_lag(&failed, &[]);
        assert!(none.text().contains("no entry yet"), "{}", none.text());
    }

    /// GIVEN a trail ending with the notice of a conflicting SUCCESS WHEN shown THEN
    /// the line names the notice, the status and the attempt (compact, wide, JSON),
    /// and the audit is judged by the last transition, not by the notice.
    #[test]
    fn a_conflicting_success_is_shown_as_a_notice() {
        let mut failed = started("TX-CS", 1);
        let first = AuditEntry::from_change(None, &failed).unwrap();
        failed.status = Status::Failed;
        failed.updated_at = Timestamp::from_millis(2_000);
        let last = AuditEntry::from_change(None, &failed).unwrap();
        let notice = AuditEntry::conflicting_success(
            &failed,
            domain::Attempt::new(1).unwrap(),
            Some("DONE".into()),
            Timestamp::from_millis(9_000),
        );
        let rows = vec![first, last, notice.clone()];
        let compact = compact_timeline(&rows);
        let line = compact.lines().last().unwrap();
        assert!(line.contains("CONFLICTING_SUCCESS in FAILED"), "{line}");
        assert!(
            line.contains("#1") && line.contains("SUCCESS DONE"),
            "{line}"
        );
        assert!(transition_text(&notice).contains("CONFLICTING_SUCCESS in FAILED"));
        let json = audit_json(&notice);
        assert_eq!(json["notice"], "CONFLICTING_SUCCESS");
        assert_eq!(json["outcome"], "SUCCESS");
        assert!(audit_lag(&failed, &rows).up_to_date);
    }

    /// GIVEN a retry paused by the circuit breaker (its write's reason names the
    /// breaker state) WHEN shown THEN the row is marked PAUSED with that state
    /// (compact, wide, JSON); a CANCELLED cycle's SCHEDULING is not a pause.
    #[test]
    fn a_pause_by_the_breaker_is_marked_in_the_timeline() {
        let mut r = started("TX-PB", 3);
        r.status = Status::Scheduled;
        r.next_attempt = Some(domain::Attempt::new(2).unwrap());
        r.last_reason = Some("NOT_AVAILABLE".into());
        let scheduled = r.clone();
        r.status = Status::Scheduling;
        r.updated_at = Timestamp::from_millis(5_000);
        r.last_actor = Actor::RetryHandler;
        r.last_reason = Some("BREAKER_OPEN".into());
        r.counts[Counter::Round] = 1;
        r.counts[Counter::ProbeErrors] = 1;
        let pause = AuditEntry::from_change(Some(&scheduled), &r).unwrap();
        assert_eq!(pause.paused_by(), Some("OPEN"));
        let compact = compact_timeline(std::slice::from_ref(&pause));
        assert!(
            compact.contains("SCHEDULED → SCHEDULING PAUSED")
                && compact.contains("PAUSED by the circuit breaker (OPEN)"),
            "{compact}"
        );
        assert!(transition_text(&pause).contains("PAUSED"));
        assert_eq!(audit_json(&pause)["paused_by_breaker"], "OPEN");
        // The response handler's CANCELLED cycle: not a pause.
        let mut answered = scheduled.clone();
        answered.status = Status::Scheduling;
        answered.last_actor = Actor::ResponseHandler;
        let mut in_progress = scheduled;
        in_progress.status = Status::InProgress;
        let cycle = AuditEntry::from_change(Some(&in_progress), &answered).unwrap();
        assert_eq!(cycle.paused_by(), None);
        assert!(!compact_timeline(&[cycle]).contains("PAUSED"));
    }

    /// The record's view is its serialisation: the table's attribute names, the
    /// counters, the operator note as two keys; bookkeeping left out.
    #[test]
    fn the_record_view_shows_its_attributes_and_counters() {
        let mut r = started("TX-V", 3);
        r.counts[Counter::Republishes] = 1;
        r.counts[Counter::Requeues] = 2;
        r.counts[Counter::Round] = 3;
        r.counts[Counter::ProbeErrors] = 1;
        r.operator = Some(Box::new(domain::machine::OperatorNote {
            caller: "arn:aws:iam::1:user/ops".into(),
            reason: Some("ticket 7".into()),
        }));
        let v = record_json(&r);
        let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            [
                "answer_due_at",
                "correlation_id",
                "created_at",
                "current_attempt",
                "expires_at",
                "last_actor",
                "last_origin",
                "last_outcome",
                "last_reason",
                "mark",
                "max_attempts",
                "next_attempt",
                "next_fire_at",
                "operator_caller",
                "operator_reason",
                "pauses",
                "publishing_since",
                "republishes",
                "requeues",
                "resends",
                "schedule_name",
                "status",
                "transaction_id",
                "updated_at",
            ]
        );
        assert_eq!(v["created_at"], "1970-01-01T00:00:01.000Z");
        assert_eq!(v["status"], r.status.as_str());
        assert_eq!(v["last_actor"], r.last_actor.as_str());
        assert_eq!(v["current_attempt"], 1);
        assert_eq!(v["next_attempt"], Value::Null);
        assert_eq!(
            (
                &v["republishes"],
                &v["requeues"],
                &v["resends"],
                &v["pauses"]
            ),
            (&json!(1), &json!(2), &json!(3), &json!(1))
        );
        assert_eq!(v["operator_caller"], "arn:aws:iam::1:user/ops");
        assert_eq!(v["operator_reason"], "ticket 7");
    }
}
