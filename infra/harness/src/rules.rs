//! The harness's answering rules: what it answers to one request, and how late. Pure —
//! no AWS, no clock, no randomness of its own: the caller passes the draws ([`Draws`]),
//! so the Lambda function (draws derived from the idempotency key) and the local stack's
//! simulated service (its own seeded generator) answer by the same rules.
//!
//! A [`Reply`] is one of the response contract's outcomes (from [`domain::Outcome`], so
//! an outcome the contract gains is a reply the harness can give) or `NONE`: no answer.
//! Without a script the reply is drawn from a [`Mix`]; a transaction can carry its own
//! answers in its payload, a [`Script`], which overrides the mix. The delay becomes the
//! response's SQS `DelaySeconds` (0–900), so no function sleeps while the service
//! "works". The formats, with examples: `infra/README.md#the-staging-harness`.

use domain::policy::{RandomSource, SplitMix64};
use domain::{Attempt, Outcome, Request, Response};
use serde_json::Value;
use sha2::{Digest, Sha256};
use thiserror::Error;

/// SQS's largest `DelaySeconds`.
pub const MAX_DELAY_SECONDS: u32 = 900;
/// The payload member that carries a script.
pub const SCRIPT_MEMBER: &str = "harness";
/// How a script or a mix names "no answer".
pub const NONE: &str = "NONE";

/// What a rule's input got wrong, naming the field (or setting) and the value.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum RuleError {
    #[error("{field} = `{value}`: {reason}")]
    Invalid {
        field: String,
        value: String,
        reason: String,
    },
}

fn invalid(field: impl Into<String>, value: impl ToString, reason: impl Into<String>) -> RuleError {
    RuleError::Invalid {
        field: field.into(),
        value: value.to_string(),
        reason: reason.into(),
    }
}

/// What the harness does with one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reply {
    /// An answer on the response queue with this outcome.
    Answer(Outcome),
    /// No answer.
    Silent,
}

impl Reply {
    /// `NONE`, or an outcome the response contract accepts.
    pub fn parse(raw: &str) -> Option<Self> {
        if raw == NONE {
            return Some(Self::Silent);
        }
        Outcome::parse(raw).map(Self::Answer)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Answer(o) => o.as_str(),
            Self::Silent => NONE,
        }
    }
}

/// The replies to draw from, each with its probability.
///
/// Written `SUCCESS:0.7,CANCELLED:0.2,NONE:0.1` (the probabilities must add up to 1).
/// The delay before the answer is drawn uniformly in `[min, max]` seconds ([`Latency`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Mix {
    entries: Vec<(Reply, f64)>,
}

impl Mix {
    /// `REPLY:probability` pairs separated by commas; the probabilities add up to 1.
    /// `field` names the setting in errors.
    pub fn parse(field: &str, text: &str) -> Result<Self, RuleError> {
        let mut entries: Vec<(Reply, f64)> = Vec::new();
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (name, p) = part.split_once(':').ok_or_else(|| {
                invalid(field, text, format!("`{part}` is not REPLY:probability"))
            })?;
            let reply = Reply::parse(name.trim()).ok_or_else(|| {
                invalid(
                    field,
                    text,
                    format!(
                        "`{}` is not SUCCESS, CANCELLED, ERROR or {NONE}",
                        name.trim()
                    ),
                )
            })?;
            let p: f64 = p
                .trim()
                .parse()
                .map_err(|e| invalid(field, text, format!("`{}`: {e}", p.trim())))?;
            if !(0.0..=1.0).contains(&p) {
                return Err(invalid(
                    field,
                    text,
                    format!("probability {p} is not in [0, 1]"),
                ));
            }
            if entries.iter().any(|(r, _)| *r == reply) {
                return Err(invalid(
                    field,
                    text,
                    format!("{} is listed twice", reply.as_str()),
                ));
            }
            entries.push((reply, p));
        }
        if entries.is_empty() {
            return Err(invalid(field, text, "no REPLY:probability pair"));
        }
        let sum: f64 = entries.iter().map(|(_, p)| p).sum();
        if (sum - 1.0).abs() > 1e-6 {
            return Err(invalid(
                field,
                text,
                format!("the probabilities add up to {sum}, not 1"),
            ));
        }
        Ok(Self { entries })
    }

    /// Only this reply.
    pub fn always(reply: Reply) -> Self {
        Self {
            entries: vec![(reply, 1.0)],
        }
    }

    /// The reply a uniform draw `u` in `[0, 1)` selects.
    pub fn pick(&self, u: f64) -> Reply {
        let mut acc = 0.0;
        for (reply, p) in &self.entries {
            acc += p;
            if u < acc {
                return *reply;
            }
        }
        // Rounding: the last reply with a non-zero probability.
        self.entries
            .iter()
            .rev()
            .find(|(_, p)| *p > 0.0)
            .map_or(Reply::Silent, |(r, _)| *r)
    }

    /// The probability of `reply`.
    pub fn probability(&self, reply: Reply) -> f64 {
        self.entries
            .iter()
            .find(|(r, _)| *r == reply)
            .map_or(0.0, |(_, p)| *p)
    }
}

/// The delay before an answer, drawn uniformly in `[min, max]` seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Latency {
    min: u32,
    max: u32,
}

impl Latency {
    pub fn new(min_seconds: u32, max_seconds: u32) -> Result<Self, RuleError> {
        if max_seconds > MAX_DELAY_SECONDS {
            return Err(invalid(
                "max delay",
                max_seconds,
                format!("at most {MAX_DELAY_SECONDS} s (SQS DelaySeconds)"),
            ));
        }
        if min_seconds > max_seconds {
            return Err(invalid(
                "min delay",
                min_seconds,
                format!("above the max delay {max_seconds} s"),
            ));
        }
        Ok(Self {
            min: min_seconds,
            max: max_seconds,
        })
    }

    pub fn pick(&self, u: f64) -> u32 {
        let span = f64::from(self.max - self.min + 1);
        // u < 1, so the product is below span; `min` keeps it in range under rounding.
        (self.min + (u.clamp(0.0, 1.0) * span) as u32).min(self.max)
    }
}

/// How the harness answers when a transaction carries no script.
#[derive(Debug, Clone, PartialEq)]
pub struct Behaviour {
    pub mix: Mix,
    pub latency: Latency,
    /// `reason` of a CANCELLED answer.
    pub cancel_reason: String,
    /// Seed of the draws ([`Draws::for_key`]).
    pub seed: u64,
}

/// A transaction's own answers, from its payload.
///
/// What a verification run needs to be deterministic, e.g. the payload
/// `{"order": 42, "harness": {"answers": ["CANCELLED", "SUCCESS"], "delay_seconds": 0, "reason": "NOT_AVAILABLE"}}`.
/// Attempt *n* gets `answers[n-1]`; past the end of the list the last answer repeats
/// (`["CANCELLED"]` cancels every attempt). `delay_seconds` (0–900) replaces the drawn
/// delay, `reason` the configured reason of a CANCELLED answer. Every other member of
/// the payload is left alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Script {
    pub answers: Vec<Reply>,
    pub delay_seconds: Option<u32>,
    pub reason: Option<String>,
}

impl Script {
    /// The script in the payload's `harness` member; `None` when there is none.
    pub fn from_payload(payload_json: &str) -> Result<Option<Self>, RuleError> {
        let v: Value = serde_json::from_str(payload_json)
            .map_err(|e| invalid("payload", payload_json, e.to_string()))?;
        let Some(s) = v.get(SCRIPT_MEMBER) else {
            return Ok(None);
        };
        let field = |name: &str| format!("payload.{SCRIPT_MEMBER}.{name}");
        let answers = s
            .get("answers")
            .and_then(Value::as_array)
            .ok_or_else(|| invalid(field("answers"), s, "must be a non-empty array of replies"))?;
        let answers = answers
            .iter()
            .map(|a| {
                a.as_str().and_then(Reply::parse).ok_or_else(|| {
                    invalid(
                        field("answers"),
                        a,
                        format!("each answer is SUCCESS, CANCELLED, ERROR or {NONE}"),
                    )
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        if answers.is_empty() {
            return Err(invalid(
                field("answers"),
                "[]",
                "must list at least one reply",
            ));
        }
        let delay_seconds = match s.get("delay_seconds") {
            None | Some(Value::Null) => None,
            Some(d) => Some(
                d.as_u64()
                    .filter(|d| *d <= u64::from(MAX_DELAY_SECONDS))
                    .and_then(|d| u32::try_from(d).ok())
                    .ok_or_else(|| {
                        invalid(
                            field("delay_seconds"),
                            d,
                            format!("must be an integer from 0 to {MAX_DELAY_SECONDS}"),
                        )
                    })?,
            ),
        };
        let reason = match s.get("reason") {
            None | Some(Value::Null) => None,
            Some(Value::String(r)) => Some(r.clone()),
            Some(other) => return Err(invalid(field("reason"), other, "must be a string")),
        };
        Ok(Some(Self {
            answers,
            delay_seconds,
            reason,
        }))
    }

    /// The reply for attempt `attempt`: `answers[n-1]`, the last one past the end.
    pub fn reply_for(&self, attempt: Attempt) -> Reply {
        let n = usize::try_from(attempt.get()).unwrap_or(usize::MAX);
        self.answers
            .get(n.saturating_sub(1))
            .or_else(|| self.answers.last())
            .copied()
            .unwrap_or(Reply::Silent)
    }

    /// The payload member that carries this script (to start a transaction with).
    pub fn to_json(&self) -> Value {
        let mut m = serde_json::Map::new();
        m.insert(
            "answers".into(),
            Value::Array(
                self.answers
                    .iter()
                    .map(|a| Value::String(a.as_str().to_owned()))
                    .collect(),
            ),
        );
        if let Some(d) = self.delay_seconds {
            m.insert("delay_seconds".into(), Value::from(d));
        }
        if let Some(r) = &self.reason {
            m.insert("reason".into(), Value::String(r.clone()));
        }
        Value::Object(m)
    }
}

/// The two uniform draws one request consumes: the reply, then the delay.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Draws {
    pub reply: f64,
    pub delay: f64,
}

impl Draws {
    /// Draws that depend only on the seed and the idempotency key: a redelivered
    /// request draws the same reply, whichever execution environment handles it.
    pub fn for_key(seed: u64, key: &str) -> Self {
        let digest = Sha256::new()
            .chain_update(seed.to_le_bytes())
            .chain_update(key.as_bytes())
            .finalize();
        let mut first = [0u8; 8];
        first.copy_from_slice(&digest[..8]);
        let mut rng = SplitMix64::new(u64::from_le_bytes(first));
        Self {
            reply: rng.next_unit(),
            delay: rng.next_unit(),
        }
    }

    pub fn from_source(rng: &mut dyn RandomSource) -> Self {
        Self {
            reply: rng.next_unit(),
            delay: rng.next_unit(),
        }
    }
}

/// What to do with one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub reply: Reply,
    /// `DelaySeconds` of the answer.
    pub delay_seconds: u32,
    /// `reason` of the answer (CANCELLED only).
    pub reason: Option<String>,
    /// Whether a script in the payload decided it.
    pub scripted: bool,
}

impl Plan {
    /// The answer to send, if any.
    pub fn response(&self, request: &Request) -> Option<Response> {
        match self.reply {
            Reply::Silent => None,
            Reply::Answer(outcome) => Some(Response {
                transaction_id: request.transaction_id.clone(),
                attempt: request.attempt,
                outcome,
                reason: self.reason.clone(),
                retry_after_seconds: None,
                round: request.round,
                execution: None,
            }),
        }
    }
}

/// What the harness does with `request`: its script's answer for the attempt if its
/// payload carries one, else a draw from the mix. A malformed script is an error (the
/// harness cannot follow it: a permanent error for the request).
pub fn plan(behaviour: &Behaviour, request: &Request, draws: Draws) -> Result<Plan, RuleError> {
    let script = Script::from_payload(request.payload.as_json())?;
    let (reply, scripted) = match &script {
        Some(s) => (s.reply_for(request.attempt), true),
        None => (behaviour.mix.pick(draws.reply), false),
    };
    let delay_seconds = script
        .as_ref()
        .and_then(|s| s.delay_seconds)
        .unwrap_or_else(|| behaviour.latency.pick(draws.delay));
    let reason = match reply {
        Reply::Answer(Outcome::Cancelled) => Some(
            script
                .and_then(|s| s.reason)
                .unwrap_or_else(|| behaviour.cancel_reason.clone()),
        ),
        _ => None,
    };
    Ok(Plan {
        reply,
        delay_seconds,
        reason,
        scripted,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use domain::{Payload, TransactionId};

    fn request(attempt: u32, payload: &str) -> Request {
        Request::new(
            TransactionId::parse("TX-1").unwrap(),
            Attempt::new(attempt).unwrap(),
            Payload::from_json(payload).unwrap(),
        )
    }

    fn behaviour(mix: &str) -> Behaviour {
        Behaviour {
            mix: Mix::parse("HARNESS_MIX", mix).unwrap(),
            latency: Latency::new(2, 5).unwrap(),
            cancel_reason: "NOT_AVAILABLE".into(),
            seed: 7,
        }
    }

    /// The plan of `r` for `b` with the draws `reply` and `delay`.
    fn planned(b: &Behaviour, r: Request, reply: f64, delay: f64) -> Result<Plan, RuleError> {
        plan(b, &r, Draws { reply, delay })
    }

    const CANCELLED: Reply = Reply::Answer(Outcome::Cancelled);
    const SUCCESS: Reply = Reply::Answer(Outcome::Success);

    /// GIVEN a script of two answers WHEN attempts 1, 2 and 3 arrive THEN each gets its
    /// answer, the third the last one again, whatever the draws say.
    #[test]
    fn a_script_answers_by_attempt_and_repeats_its_last_answer() {
        let b = behaviour("NONE:1");
        let payload = r#"{"order":1,"harness":{"answers":["CANCELLED","SUCCESS"]}}"#;
        let replies: Vec<Reply> = (1..=3)
            .map(|n| planned(&b, request(n, payload), 0.0, 0.0).unwrap().reply)
            .collect();
        assert_eq!(replies, vec![CANCELLED, SUCCESS, SUCCESS]);
        let p = planned(&b, request(1, payload), 0.0, 0.0).unwrap();
        assert!(p.scripted);
        assert_eq!(p.reason.as_deref(), Some("NOT_AVAILABLE"));
    }

    #[test]
    fn a_script_sets_the_delay_and_the_reason_and_none_means_no_answer() {
        let b = behaviour("SUCCESS:1");
        let payload =
            r#"{"harness":{"answers":["NONE","CANCELLED"],"delay_seconds":0,"reason":"BUSY"}}"#;
        let first = planned(&b, request(1, payload), 0.5, 0.99).unwrap();
        assert_eq!(first.reply, Reply::Silent);
        assert_eq!(first.response(&request(1, payload)), None);
        let second = planned(&b, request(2, payload), 0.5, 0.99).unwrap();
        assert_eq!(second.delay_seconds, 0);
        let r = second.response(&request(2, payload)).unwrap();
        assert_eq!(r.outcome, Outcome::Cancelled);
        assert_eq!(r.reason.as_deref(), Some("BUSY"));
        assert_eq!(r.attempt.get(), 2);
    }

    #[test]
    fn without_a_script_the_mix_decides_and_success_carries_no_reason() {
        let b = behaviour("SUCCESS:0.5,CANCELLED:0.25,NONE:0.25");
        let pick = |u: f64| planned(&b, request(1, r#"{"order":1}"#), u, 0.0).unwrap();
        assert_eq!(pick(0.0).reply, SUCCESS);
        assert_eq!(pick(0.49).reply, SUCCESS);
        assert_eq!(pick(0.5).reply, CANCELLED);
        assert_eq!(pick(0.74).reply, CANCELLED);
        assert_eq!(pick(0.75).reply, Reply::Silent);
        assert_eq!(pick(0.999_999).reply, Reply::Silent);
        assert!(!pick(0.1).scripted);
        assert_eq!(pick(0.1).reason, None);
        assert_eq!(pick(0.6).reason.as_deref(), Some("NOT_AVAILABLE"));
    }

    #[test]
    fn the_mix_follows_its_probabilities_over_many_keys() {
        let mix = Mix::parse("HARNESS_MIX", "SUCCESS:0.7,CANCELLED:0.2,NONE:0.1").unwrap();
        let n = 20_000;
        let mut counts = [0u32; 3];
        for i in 0..n {
            let d = Draws::for_key(11, &format!("TX-{i}#1"));
            match mix.pick(d.reply) {
                SUCCESS => counts[0] += 1,
                CANCELLED => counts[1] += 1,
                _ => counts[2] += 1,
            }
        }
        let share = |c: u32| f64::from(c) / f64::from(n);
        assert!((share(counts[0]) - 0.7).abs() < 0.02, "{counts:?}");
        assert!((share(counts[1]) - 0.2).abs() < 0.02, "{counts:?}");
        assert!((share(counts[2]) - 0.1).abs() < 0.02, "{counts:?}");
    }

    #[test]
    fn draws_depend_on_the_key_and_the_seed_only() {
        assert_eq!(Draws::for_key(1, "TX-1#1"), Draws::for_key(1, "TX-1#1"));
        assert_ne!(Draws::for_key(1, "TX-1#1"), Draws::for_key(1, "TX-1#2"));
        assert_ne!(Draws::for_key(1, "TX-1#1"), Draws::for_key(2, "TX-1#1"));
        let d = Draws::for_key(3, "x");
        assert!((0.0..1.0).contains(&d.reply) && (0.0..1.0).contains(&d.delay));
    }

    #[test]
    fn the_delay_stays_within_its_bounds_and_reaches_both() {
        let l = Latency::new(2, 5).unwrap();
        assert_eq!(l.pick(0.0), 2);
        assert_eq!(l.pick(0.999_999), 5);
        let seen: std::collections::BTreeSet<u32> =
            (0..1000).map(|i| l.pick(f64::from(i) / 1000.0)).collect();
        assert_eq!(seen.into_iter().collect::<Vec<_>>(), vec![2, 3, 4, 5]);
        assert_eq!(Latency::new(0, 0).unwrap().pick(0.7), 0);
    }

    #[test]
    fn bad_settings_and_scripts_name_the_field_and_the_value() {
        let err = |r: Result<Mix, RuleError>| r.unwrap_err().to_string();
        assert_eq!(
            err(Mix::parse("HARNESS_MIX", "SUCCESS:0.7,CANCELLED:0.2")),
            "HARNESS_MIX = `SUCCESS:0.7,CANCELLED:0.2`: the probabilities add up to 0.8999999999999999, not 1"
        );
        assert!(err(Mix::parse("HARNESS_MIX", "MAYBE:1"))
            .contains("`MAYBE` is not SUCCESS, CANCELLED, ERROR or NONE"));
        assert!(err(Mix::parse("HARNESS_MIX", "SUCCESS"))
            .contains("`SUCCESS` is not REPLY:probability"));
        assert!(err(Mix::parse("HARNESS_MIX", "SUCCESS:1,SUCCESS:0")).contains("listed twice"));
        assert!(err(Mix::parse("HARNESS_MIX", "")).contains("no REPLY:probability pair"));
        assert!(Latency::new(0, 901)
            .unwrap_err()
            .to_string()
            .contains("at most 900"));
        assert!(Latency::new(6, 5)
            .unwrap_err()
            .to_string()
            .contains("above the max delay"));
        let b = behaviour("SUCCESS:1");
        let bad = |payload: &str| {
            planned(&b, request(1, payload), 0.0, 0.0)
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            bad(r#"{"harness":{"answers":["MAYBE"]}}"#),
            "payload.harness.answers = `\"MAYBE\"`: each answer is SUCCESS, CANCELLED, ERROR or NONE"
        );
        assert!(bad(r#"{"harness":{"answers":[]}}"#).contains("at least one reply"));
        assert!(bad(r#"{"harness":{}}"#).starts_with("payload.harness.answers"));
        assert!(
            bad(r#"{"harness":{"answers":["SUCCESS"],"delay_seconds":901}}"#)
                .starts_with("payload.harness.delay_seconds = `901`")
        );
        assert!(bad(r#"{"harness":{"answers":["SUCCESS"],"reason":3}}"#)
            .starts_with("payload.harness.reason"));
    }

    /// GIVEN a mix with technical failures WHEN requests draw from it THEN some are
    /// answered ERROR (the staging service's outage), with no reason, and the others
    /// by the rest of the mix.
    #[test]
    fn a_mix_can_fail_technically() {
        let b = behaviour("SUCCESS:0.5,ERROR:0.5");
        let error = Reply::Answer(Outcome::Error);
        let at = |u: f64| planned(&b, request(1, "{}"), u, 0.0).unwrap();
        assert_eq!(at(0.2).reply, SUCCESS);
        let failed = at(0.7);
        assert_eq!((failed.reply, failed.reason), (error, None));
        assert_eq!(Reply::parse("ERROR_TECNICO"), Some(error));
        assert_eq!(error.as_str(), "ERROR");
    }

    #[test]
    fn spanish_outcomes_are_replies_too_and_a_script_round_trips() {
        assert_eq!(Reply::parse("CANCELADO"), Some(CANCELLED));
        assert_eq!(Reply::parse("EXITOSO"), Some(SUCCESS));
        let s = Script {
            answers: vec![CANCELLED, SUCCESS],
            delay_seconds: Some(0),
            reason: None,
        };
        let payload = serde_json::json!({ "verify": "x", SCRIPT_MEMBER: s.to_json() }).to_string();
        assert_eq!(Script::from_payload(&payload).unwrap(), Some(s));
        assert_eq!(Script::from_payload(r#"{"order":1}"#).unwrap(), None);
        assert_eq!(Script::from_payload("[1,2]").unwrap(), None);
    }
}
