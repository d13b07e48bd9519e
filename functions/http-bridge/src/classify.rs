//! What an HTTP answer means for the transaction: pure, no I/O. An answer (status,
//! headers, body bytes) or a transport failure (timeout, connection, TLS) becomes a
//! [`Response`] for the response queue (outcome, reason, `retry_after_seconds`, the
//! request's `round` echoed; with `ERROR` its `execution`, `NOT_RUN` or `UNKNOWN`:
//! [`Transport::execution`], [`default_execution`]) or an [`OperatorCase`]: an answer
//! saying the request can never succeed (422 key reused, 413, other 4xx), sent
//! unchanged to the request DLQ, or answered `REJECTED` with [`OperatorCases::Reject`].
//! The defaults are the table in `docs/http-bridge.md`; [`Rules`] (`HTTP_CLASSIFICATION`)
//! add status ranges and JSON-pointer body values ahead of them. A decision reads the
//! status, a configured body value or `Retry-After`: never free text from the service
//! (the body only reaches a reason, cut short, for an answer no rule knows).

use domain::message::{Execution, MAX_REASON_CHARS, MAX_RETRY_AFTER_SECONDS};
use domain::{Outcome, Request, Response};
use http::header::RETRY_AFTER;
use http::HeaderMap;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::time::SystemTime;
use thiserror::Error;

/// An HTTP answer as received.
#[derive(Debug, Clone, Copy)]
pub struct HttpAnswer<'a> {
    pub status: u16,
    pub headers: &'a HeaderMap,
    pub body: &'a [u8],
}

/// A call that brought no HTTP answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transport {
    /// The total timeout passed (connection, request or body): the service may have
    /// run the request.
    Timeout,
    /// No connection (refused, unreachable, DNS, connect timeout).
    Connect(String),
    /// The TLS handshake failed (certificate, protocol).
    Tls(String),
    /// Anything else on the way (connection reset mid-answer, a body cut short).
    Other(String),
}

impl Transport {
    /// The reason the ERROR answer carries.
    pub fn reason(&self) -> &'static str {
        match self {
            Transport::Timeout => "TIMEOUT",
            Transport::Connect(_) => "CONNECT",
            Transport::Tls(_) => "TLS",
            Transport::Other(_) => "TRANSPORT",
        }
    }

    /// Whether the request may have run: no connection, or a TLS handshake that
    /// failed while connecting, sent nothing (`NOT_RUN`); a timeout or a connection
    /// lost after sending may have run it (`UNKNOWN`).
    pub fn execution(&self) -> Execution {
        match self {
            Transport::Connect(_) | Transport::Tls(_) => Execution::NotRun,
            Transport::Timeout | Transport::Other(_) => Execution::Unknown,
        }
    }
}

/// What the bridge does with an answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Classified {
    /// Sent to the response queue.
    Answer(Response),
    /// Never retried, never answered: the request goes to the request DLQ for the
    /// operator.
    Operator(OperatorCase),
}

/// An answer that says the request can never succeed as it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OperatorCase {
    pub status: u16,
    /// `HTTP_<status>`, or the rule's reason.
    pub reason: String,
    /// The start of the body, for the log line.
    pub body: String,
}

/// What a rule decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Decision {
    Success,
    Cancelled,
    Error,
    /// To the request DLQ, never retried.
    Operator,
    /// Answered `REJECTED`: the transaction ends FAILED, never retried. Only with
    /// [`OperatorCases::Reject`].
    Rejected,
}

/// What the bridge does with an answer that says the request can never succeed
/// (`HTTP_OPERATOR_CASES`). A new outcome reaches the response handlers only once
/// they all read it, so answering `REJECTED` is a setting, switched on after they
/// are upgraded (`docs/compatibility.md`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum OperatorCases {
    /// `dead-letter`: the request to the request DLQ, unanswered (the default).
    #[default]
    DeadLetter,
    /// `reject`: the default operator cases answer `REJECTED`, and rules may say
    /// `REJECTED`.
    Reject,
}

impl OperatorCases {
    /// The setting's values, as written.
    pub const NAMES: [&str; 2] = ["dead-letter", "reject"];

    pub fn parse(raw: &str) -> Option<Self> {
        match raw {
            "dead-letter" => Some(Self::DeadLetter),
            "reject" => Some(Self::Reject),
            _ => None,
        }
    }
}

/// A decision and its reason.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Verdict {
    pub outcome: Decision,
    /// Default `HTTP_<status>`. A CANCELLED reason is the key of `BACKOFF_OVERRIDES`.
    #[serde(default)]
    pub reason: Option<String>,
}

/// Status codes `from..=to` decide `outcome` (`to` defaults to `from`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StatusRule {
    pub from: u16,
    #[serde(default)]
    pub to: Option<u16>,
    pub outcome: Decision,
    #[serde(default)]
    pub reason: Option<String>,
}

/// For an answer whose status is within `from..=to` (default 100–599), the JSON
/// value at `pointer` in the body (a string, number or boolean, as text) decides,
/// when it is one of `values`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BodyRule {
    pub pointer: String,
    #[serde(default = "lowest_status")]
    pub from: u16,
    #[serde(default = "highest_status")]
    pub to: u16,
    pub values: BTreeMap<String, Verdict>,
}

fn lowest_status() -> u16 {
    100
}

fn highest_status() -> u16 {
    599
}

/// The declarative overrides (`HTTP_CLASSIFICATION`): body rules first, then status
/// rules, each in order, then the defaults.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rules {
    #[serde(default)]
    pub statuses: Vec<StatusRule>,
    #[serde(default)]
    pub body: Vec<BodyRule>,
    /// `HTTP_OPERATOR_CASES` (not part of the JSON): see [`Rules::with_operator_cases`].
    #[serde(skip)]
    pub operator_cases: OperatorCases,
}

/// A classification the bridge cannot start with: the field at fault and why.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{field}: {reason}")]
pub struct RulesError {
    pub field: String,
    pub reason: String,
}

fn refuse(field: String, reason: impl Into<String>) -> RulesError {
    RulesError {
        field,
        reason: reason.into(),
    }
}

fn check_range(at: &str, from: u16, to: u16) -> Result<(), RulesError> {
    for (name, v) in [("from", from), ("to", to)] {
        if !(100..=599).contains(&v) {
            return Err(refuse(
                format!("{at}.{name}"),
                format!("{v} is not an HTTP status (100-599)"),
            ));
        }
    }
    if from > to {
        return Err(refuse(
            format!("{at}.to"),
            format!("{to} is below from={from}"),
        ));
    }
    Ok(())
}

fn check_reason(at: String, reason: Option<&String>) -> Result<(), RulesError> {
    match reason {
        Some(r) if r.trim().is_empty() => Err(refuse(at, "must not be blank")),
        Some(r) if r.chars().count() > MAX_REASON_CHARS => Err(refuse(
            at,
            format!(
                "{} characters; at most {MAX_REASON_CHARS}",
                r.chars().count()
            ),
        )),
        _ => Ok(()),
    }
}

impl Rules {
    /// Parses and checks `HTTP_CLASSIFICATION`; blank text is no overrides.
    pub fn from_json(text: &str) -> Result<Self, RulesError> {
        if text.trim().is_empty() {
            return Ok(Self::default());
        }
        let rules: Rules =
            serde_json::from_str(text).map_err(|e| refuse("(json)".into(), e.to_string()))?;
        for (i, r) in rules.statuses.iter().enumerate() {
            let at = format!("statuses[{i}]");
            check_range(&at, r.from, r.to.unwrap_or(r.from))?;
            check_reason(format!("{at}.reason"), r.reason.as_ref())?;
        }
        for (i, r) in rules.body.iter().enumerate() {
            let at = format!("body[{i}]");
            check_range(&at, r.from, r.to)?;
            if !r.pointer.is_empty() && !r.pointer.starts_with('/') {
                return Err(refuse(
                    format!("{at}.pointer"),
                    format!("{:?} is not a JSON pointer (starts with `/`)", r.pointer),
                ));
            }
            if r.values.is_empty() {
                return Err(refuse(
                    format!("{at}.values"),
                    "must name at least one value",
                ));
            }
            for (value, v) in &r.values {
                check_reason(format!("{at}.values[{value:?}].reason"), v.reason.as_ref())?;
            }
        }
        Ok(rules)
    }

    /// The same rules with `mode` for the operator cases. A rule saying `REJECTED`
    /// needs [`OperatorCases::Reject`]: with `dead-letter` it is refused, naming it.
    pub fn with_operator_cases(mut self, mode: OperatorCases) -> Result<Self, RulesError> {
        if mode == OperatorCases::DeadLetter {
            let statuses = self
                .statuses
                .iter()
                .enumerate()
                .filter(|(_, r)| r.outcome == Decision::Rejected)
                .map(|(i, _)| format!("statuses[{i}].outcome"));
            let body = self.body.iter().enumerate().flat_map(|(i, r)| {
                r.values
                    .iter()
                    .filter(|(_, v)| v.outcome == Decision::Rejected)
                    .map(move |(value, _)| format!("body[{i}].values[{value:?}].outcome"))
            });
            if let Some(at) = statuses.chain(body).next() {
                return Err(refuse(
                    at,
                    "REJECTED needs HTTP_OPERATOR_CASES=reject (every response handler upgraded first)",
                ));
            }
        }
        self.operator_cases = mode;
        Ok(self)
    }

    /// The first configured verdict for this answer, if any.
    fn configured(&self, answer: &HttpAnswer<'_>) -> Option<Verdict> {
        let status = answer.status;
        let mut body: Option<Option<serde_json::Value>> = None;
        for rule in self
            .body
            .iter()
            .filter(|r| (r.from..=r.to).contains(&status))
        {
            let json = body.get_or_insert_with(|| serde_json::from_slice(answer.body).ok());
            let text = match json.as_ref().and_then(|j| j.pointer(&rule.pointer)) {
                Some(serde_json::Value::String(s)) => s.clone(),
                Some(v @ (serde_json::Value::Number(_) | serde_json::Value::Bool(_))) => {
                    v.to_string()
                }
                _ => continue,
            };
            if let Some(v) = rule.values.get(&text) {
                return Some(v.clone());
            }
        }
        self.statuses
            .iter()
            .find(|r| (r.from..=r.to.unwrap_or(r.from)).contains(&status))
            .map(|r| Verdict {
                outcome: r.outcome,
                reason: r.reason.clone(),
            })
    }
}

/// The default decision of a status (the table in `docs/http-bridge.md`); `None`:
/// unclassifiable (1xx, 3xx — redirects are not followed — and beyond 599).
pub fn default_decision(status: u16) -> Option<Decision> {
    match status {
        200..=299 => Some(Decision::Success),
        // 408 the server gave up waiting for the request; 409 (Idempotency-Key draft)
        // the key is still being processed; 423 the resource is locked; 425 the
        // server will not risk a replay yet; 429 too many requests. None processed
        // the request: re-sent later under the same key, budget untouched.
        408 | 409 | 423 | 425 | 429 => Some(Decision::Error),
        // 413 the same bytes will always be too large; 422 (Idempotency-Key draft)
        // the key was used with another payload, or the payload is refused; every
        // other 4xx (400, 401, 403, 404, 405, …): the request as it is can never
        // succeed. For the operator, never retried.
        400..=499 => Some(Decision::Operator),
        500..=599 => Some(Decision::Error),
        _ => None,
    }
}

/// Whether an ERROR answer with `status` says the request did not run. 408, 409,
/// 423, 425 and 429 are refusals before processing (the defaults' reading above), and
/// a 503 with `Retry-After` is the service itself turning the request away for a
/// while: `NOT_RUN`. Any other status (500, 502 and 504 from a gateway whose backend
/// may have run it, a 503 without `Retry-After`, which a proxy may have answered
/// after forwarding, an unclassifiable answer) may have run: `UNKNOWN`.
pub fn default_execution(status: u16, retry_after: Option<u32>) -> Execution {
    match (status, retry_after) {
        (408 | 409 | 423 | 425 | 429, _) | (503, Some(_)) => Execution::NotRun,
        _ => Execution::Unknown,
    }
}

/// At most this many characters of a body go into a reason or a log line.
pub const BODY_EXCERPT_CHARS: usize = 160;

/// The start of a body as printable text.
pub fn excerpt(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let mut cut: String = text
        .chars()
        .take(BODY_EXCERPT_CHARS)
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if text.chars().count() > BODY_EXCERPT_CHARS {
        cut.push('…');
    }
    cut
}

/// `Retry-After` in whole seconds from `now`: delta-seconds, or an HTTP-date (any of
/// its three forms) rounded up; a date past is 0; capped at one day. `None` when the
/// header is absent or unreadable (the technical backoff alone applies).
pub fn retry_after(headers: &HeaderMap, now: SystemTime) -> Option<u32> {
    let raw = headers.get(RETRY_AFTER)?.to_str().ok()?.trim();
    let seconds = if !raw.is_empty() && raw.bytes().all(|b| b.is_ascii_digit()) {
        // Digits only: too many for a u64 is still "a long time".
        raw.parse::<u64>().unwrap_or(u64::MAX)
    } else {
        let at = httpdate::parse_http_date(raw).ok()?;
        match at.duration_since(now) {
            Ok(d) => d.as_secs() + u64::from(d.subsec_nanos() > 0),
            Err(_) => 0,
        }
    };
    Some(
        u32::try_from(seconds.min(u64::from(MAX_RETRY_AFTER_SECONDS)))
            .unwrap_or(MAX_RETRY_AFTER_SECONDS),
    )
}

fn response(
    request: &Request,
    outcome: Outcome,
    reason: String,
    retry_after: Option<u32>,
    execution: Execution,
) -> Classified {
    let error = outcome == Outcome::Error;
    Classified::Answer(Response {
        transaction_id: request.transaction_id.clone(),
        attempt: request.attempt,
        outcome,
        reason: Some(cut_reason(reason)),
        retry_after_seconds: if outcome == Outcome::Error {
            retry_after
        } else {
            None
        },
        round: request.round,
        execution: error.then_some(execution),
    })
}

fn cut_reason(reason: String) -> String {
    if reason.chars().count() <= MAX_REASON_CHARS {
        return reason;
    }
    let mut cut: String = reason.chars().take(MAX_REASON_CHARS - 1).collect();
    cut.push('…');
    cut
}

/// What the answer to `request` (or its failure) means, with `rules` ahead of the
/// defaults, `Retry-After` read relative to `now`.
pub fn classify(
    rules: &Rules,
    request: &Request,
    result: Result<HttpAnswer<'_>, Transport>,
    now: SystemTime,
) -> Classified {
    let answer = match result {
        Ok(a) => a,
        // Ambiguous for a timeout (the service may have run it): the same key again.
        Err(t) => {
            let execution = t.execution();
            return response(
                request,
                Outcome::Error,
                t.reason().to_owned(),
                None,
                execution,
            );
        }
    };
    let status = answer.status;
    let retry = retry_after(answer.headers, now);
    let execution = default_execution(status, retry);
    let verdict = rules.configured(&answer).or_else(|| {
        default_decision(status).map(|outcome| Verdict {
            // A default operator case is answered REJECTED when the setting says so;
            // a rule saying OPERATOR still sends the request to the DLQ.
            outcome: match (outcome, rules.operator_cases) {
                (Decision::Operator, OperatorCases::Reject) => Decision::Rejected,
                (outcome, _) => outcome,
            },
            reason: None,
        })
    });
    let Some(Verdict { outcome, reason }) = verdict else {
        let reason = format!("HTTP_{status} unclassified: {}", excerpt(answer.body));
        return response(request, Outcome::Error, reason, retry, execution);
    };
    let reason = reason.unwrap_or_else(|| format!("HTTP_{status}"));
    match outcome {
        Decision::Success => response(request, Outcome::Success, reason, None, execution),
        Decision::Cancelled => response(request, Outcome::Cancelled, reason, None, execution),
        Decision::Error => response(request, Outcome::Error, reason, retry, execution),
        Decision::Rejected => response(request, Outcome::Rejected, reason, None, execution),
        Decision::Operator => Classified::Operator(OperatorCase {
            status,
            reason,
            body: excerpt(answer.body),
        }),
    }
}

#[cfg(test)]
mod tests;
