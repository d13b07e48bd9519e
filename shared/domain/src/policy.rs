//! The backoff policy.
//!
//! `wait(k) = min(base × factor^(k−1), cap) × (1 + u)`, `u ∈ [−jitter, +jitter]`, with
//! `k = n`, the attempt that just failed. Jitter is applied after the cap, so the real
//! wait can reach `cap × (1 + jitter)` (26.4 h with the defaults) unless `strict_cap`
//! clamps it again. The wait is computed here, in the application, and the resulting
//! instant is persisted before any schedule exists: never delegated to the scheduler.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;
use thiserror::Error;

use crate::ids::{Attempt, Timestamp};

/// A source of uniform numbers in `[0, 1)`. Injected so tests and simulations are
/// deterministic; production uses a seeded PRNG per process.
pub trait RandomSource {
    fn next_unit(&mut self) -> f64;
}

/// Always returns the same value: jitter-free tests and model checking.
#[derive(Debug, Clone, Copy)]
pub struct FixedRandom(pub f64);

impl RandomSource for FixedRandom {
    fn next_unit(&mut self) -> f64 {
        self.0
    }
}

/// A small, fast, deterministic PRNG (SplitMix64). Good enough for jitter; never used
/// for anything secret.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

impl RandomSource for SplitMix64 {
    fn next_unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// The longest cap accepted: 365 days. Beyond it a fire time stops being a date a
/// one-time schedule can hold (and `Duration` conversions would overflow).
pub const MAX_CAP: Duration = Duration::from_secs(365 * 24 * 3600);

/// One backoff policy, validated.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "PolicySpec", into = "PolicySpec")]
pub struct RetryPolicy {
    base: Duration,
    factor: f64,
    cap: Duration,
    jitter: f64,
    strict_cap: bool,
}

/// The serialised form of a policy (seconds), as written in configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicySpec {
    pub base_seconds: f64,
    pub factor: f64,
    pub cap_seconds: f64,
    pub jitter: f64,
    #[serde(default)]
    pub strict_cap: bool,
}

/// A rejected policy value: names the setting, the value and the rule.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum PolicyError {
    #[error("backoff `{field}` = {value} is invalid: {rule}")]
    Invalid {
        field: &'static str,
        value: f64,
        rule: &'static str,
    },
    #[error("backoff overrides are not valid JSON ({detail}); expected {{\"REASON\": {{\"base_seconds\": .., \"factor\": .., \"cap_seconds\": .., \"jitter\": ..}}}}")]
    Overrides { detail: String },
}

impl RetryPolicy {
    /// The article's defaults ([`crate::defaults`]): base 2 h, factor 2, cap 24 h,
    /// jitter ±10 %, jitter after cap.
    pub fn article_default() -> Self {
        use crate::defaults as d;
        Self {
            base: d::BACKOFF_BASE,
            factor: d::BACKOFF_FACTOR,
            cap: d::BACKOFF_CAP,
            jitter: d::BACKOFF_JITTER,
            strict_cap: d::BACKOFF_STRICT_CAP,
        }
    }

    /// The backoff of technical re-sends ([`crate::defaults`]): base 60 s, factor 2,
    /// cap 1 h, jitter ±10 %: `wait(k)` before re-send k.
    pub fn technical_default() -> Self {
        use crate::defaults as d;
        Self {
            base: d::TECHNICAL_BACKOFF_BASE,
            factor: d::TECHNICAL_BACKOFF_FACTOR,
            cap: d::TECHNICAL_BACKOFF_CAP,
            jitter: d::TECHNICAL_BACKOFF_JITTER,
            strict_cap: false,
        }
    }

    /// Validates: base > 0, factor >= 1, base <= cap <= [`MAX_CAP`], 0 <= jitter < 1.
    pub fn new(
        base: Duration,
        factor: f64,
        cap: Duration,
        jitter: f64,
        strict_cap: bool,
    ) -> Result<Self, PolicyError> {
        let invalid = |field, value, rule| Err(PolicyError::Invalid { field, value, rule });
        if base.is_zero() {
            return invalid("base", 0.0, "must be greater than 0");
        }
        if !factor.is_finite() || factor < 1.0 {
            return invalid("factor", factor, "must be a number >= 1");
        }
        if cap < base {
            return invalid("cap", cap.as_secs_f64(), "must be >= base");
        }
        if cap > MAX_CAP {
            return invalid(
                "cap",
                cap.as_secs_f64(),
                "must be at most 31536000 s (365 days)",
            );
        }
        if !jitter.is_finite() || !(0.0..1.0).contains(&jitter) {
            return invalid("jitter", jitter, "must be >= 0 and < 1");
        }
        Ok(Self {
            base,
            factor,
            cap,
            jitter,
            strict_cap,
        })
    }

    pub fn base(&self) -> Duration {
        self.base
    }
    pub fn factor(&self) -> f64 {
        self.factor
    }
    pub fn cap(&self) -> Duration {
        self.cap
    }
    pub fn jitter(&self) -> f64 {
        self.jitter
    }
    pub fn strict_cap(&self) -> bool {
        self.strict_cap
    }

    /// The nominal (jitter-free) wait after attempt `k` failed: `min(base × factor^(k−1), cap)`.
    pub fn nominal(&self, k: Attempt) -> Duration {
        let exp = i32::try_from(k.get().saturating_sub(1)).unwrap_or(i32::MAX);
        let raw = self.base.as_secs_f64() * self.factor.powi(exp);
        if !raw.is_finite() || raw >= self.cap.as_secs_f64() {
            return self.cap;
        }
        Duration::try_from_secs_f64(raw).map_or(self.cap, |d| d.min(self.cap))
    }

    /// The bounds `wait(k)` always falls within.
    pub fn bounds(&self, k: Attempt) -> (Duration, Duration) {
        let n = self.nominal(k);
        let lo = scale(n, 1.0 - self.jitter);
        let hi = scale(n, 1.0 + self.jitter);
        if self.strict_cap {
            (lo.min(self.cap), hi.min(self.cap))
        } else {
            (lo, hi)
        }
    }

    /// `wait(k)` with `u = jitter × (2r − 1)` for `r` drawn from `rng`. A draw outside
    /// `[0, 1]` is clamped into it; a NaN draw counts as 0.5 (the nominal wait), never
    /// as an immediate retry.
    pub fn wait(&self, k: Attempt, rng: &mut dyn RandomSource) -> Duration {
        let drawn = rng.next_unit();
        let r = if drawn.is_nan() {
            0.5
        } else {
            drawn.clamp(0.0, 1.0)
        };
        let u = self.jitter * (2.0 * r - 1.0);
        let wait = scale(self.nominal(k), 1.0 + u);
        if self.strict_cap {
            // Clamped as a `Duration`: a float round trip could pass the cap by a few ns.
            wait.min(self.cap)
        } else {
            wait
        }
    }

    /// The retry instant after attempt `k` failed at `now`, rounded up to a whole second
    /// (one-time schedules take `at(yyyy-mm-ddThh:mm:ss)`), so the persisted instant and
    /// the schedule's are the same.
    pub fn fire_at(&self, now: Timestamp, k: Attempt, rng: &mut dyn RandomSource) -> Timestamp {
        let ms = i64::try_from(self.wait(k, rng).as_millis()).unwrap_or(i64::MAX);
        now.plus_millis(ms).ceil_to_second()
    }
}

/// `d × by` for `0 <= by < 2`; monotonic in `by`, so the bounds and the wait computed
/// with it keep their order.
fn scale(d: Duration, by: f64) -> Duration {
    Duration::try_from_secs_f64(d.as_secs_f64() * by.max(0.0)).unwrap_or(Duration::MAX)
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self::article_default()
    }
}

impl TryFrom<PolicySpec> for RetryPolicy {
    type Error = PolicyError;
    fn try_from(s: PolicySpec) -> Result<Self, PolicyError> {
        let secs = |field: &'static str, v: f64| match Duration::try_from_secs_f64(v) {
            Ok(d) if v > 0.0 => Ok(d),
            _ => Err(PolicyError::Invalid {
                field,
                value: v,
                rule: "must be a number of seconds greater than 0 and at most 31536000 (365 days)",
            }),
        };
        RetryPolicy::new(
            secs("base", s.base_seconds)?,
            s.factor,
            secs("cap", s.cap_seconds)?,
            s.jitter,
            s.strict_cap,
        )
    }
}

impl From<RetryPolicy> for PolicySpec {
    fn from(p: RetryPolicy) -> Self {
        PolicySpec {
            base_seconds: p.base.as_secs_f64(),
            factor: p.factor,
            cap_seconds: p.cap.as_secs_f64(),
            jitter: p.jitter,
            strict_cap: p.strict_cap,
        }
    }
}

/// The default policy plus optional per-reason overrides: the response's `reason`
/// picks the policy (the article: not every CANCELLED deserves the same wait).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct PolicySet {
    pub default: RetryPolicy,
    pub by_reason: BTreeMap<String, RetryPolicy>,
}

impl PolicySet {
    pub fn uniform(policy: RetryPolicy) -> Self {
        Self {
            default: policy,
            by_reason: BTreeMap::new(),
        }
    }

    /// Parses overrides written as `{"REASON": {"base_seconds": .., ...}}`.
    pub fn with_overrides_json(mut self, json: &str) -> Result<Self, PolicyError> {
        if json.trim().is_empty() {
            return Ok(self);
        }
        let map: BTreeMap<String, RetryPolicy> =
            serde_json::from_str(json).map_err(|e| PolicyError::Overrides {
                detail: e.to_string(),
            })?;
        self.by_reason.extend(map);
        Ok(self)
    }

    pub fn for_reason(&self, reason: Option<&str>) -> &RetryPolicy {
        reason
            .and_then(|r| self.by_reason.get(r))
            .unwrap_or(&self.default)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const H: u64 = 3600;

    fn a(n: u32) -> Attempt {
        Attempt::new(n).unwrap()
    }

    /// The article's table: retry 1/2/3 → attempts 2/3/4 → 2 h, 4 h, 8 h, ±10 %.
    #[test]
    fn article_backoff_table() {
        let p = RetryPolicy::article_default();
        let rows = [
            (1, 2 * H, (108 * 60, 132 * 60)),
            (2, 4 * H, (216 * 60, 264 * 60)),
            (3, 8 * H, (432 * 60, 528 * 60)),
        ];
        for (k, nominal, (lo, hi)) in rows {
            assert_eq!(p.nominal(a(k)), Duration::from_secs(nominal), "k={k}");
            let (l, h) = p.bounds(a(k));
            assert_eq!(l.as_secs(), lo, "k={k} low");
            assert_eq!(h.as_secs(), hi, "k={k} high");
            assert_eq!(p.wait(a(k), &mut FixedRandom(0.0)).as_secs(), lo);
            assert_eq!(p.wait(a(k), &mut FixedRandom(0.5)).as_secs(), nominal);
            // r → 1 approaches the top of the range.
            let top = p.wait(a(k), &mut FixedRandom(1.0)).as_secs();
            assert_eq!(top, hi);
        }
    }

    #[test]
    fn cap_with_and_without_strict_clamp() {
        let p = RetryPolicy::article_default();
        // k = 5 → 32 h nominal, capped at 24 h, jitter after cap → up to 26.4 h.
        assert_eq!(p.nominal(a(5)), Duration::from_secs(24 * H));
        let top = p.wait(a(5), &mut FixedRandom(1.0));
        assert_eq!(top.as_secs_f64(), 26.4 * H as f64);
        let strict = RetryPolicy::new(p.base(), 2.0, p.cap(), 0.1, true).unwrap();
        assert_eq!(strict.wait(a(5), &mut FixedRandom(1.0)).as_secs(), 24 * H);
        assert_eq!(strict.bounds(a(5)).1.as_secs(), 24 * H);
        assert_eq!(
            strict.wait(a(5), &mut FixedRandom(0.0)).as_secs_f64(),
            21.6 * H as f64
        );
    }

    #[test]
    fn validation_names_the_setting() {
        let b = Duration::from_secs(10);
        let err = |r: Result<RetryPolicy, PolicyError>| r.unwrap_err().to_string();
        assert!(err(RetryPolicy::new(Duration::ZERO, 2.0, b, 0.1, false)).contains("`base`"));
        assert!(err(RetryPolicy::new(b, 0.5, b, 0.1, false)).contains("`factor` = 0.5"));
        assert!(
            err(RetryPolicy::new(b, 2.0, Duration::from_secs(5), 0.1, false))
                .contains("`cap` = 5 is invalid: must be >= base")
        );
        assert!(err(RetryPolicy::new(b, 2.0, b, 1.0, false)).contains("`jitter` = 1"));
        assert!(err(RetryPolicy::new(b, 2.0, b, -0.1, false)).contains("`jitter` = -0.1"));
        assert!(RetryPolicy::new(b, 1.0, b, 0.0, false).is_ok());
    }

    #[test]
    fn per_reason_overrides_pick_the_policy() {
        let set = PolicySet::default()
            .with_overrides_json(
                r#"{"MAINTENANCE":{"base_seconds":60,"factor":1,"cap_seconds":60,"jitter":0}}"#,
            )
            .unwrap();
        assert_eq!(
            set.for_reason(Some("MAINTENANCE")).nominal(a(3)),
            Duration::from_secs(60)
        );
        assert_eq!(
            set.for_reason(Some("OTHER")),
            &RetryPolicy::article_default()
        );
        assert_eq!(set.for_reason(None), &RetryPolicy::article_default());
        let bad = PolicySet::default()
            .with_overrides_json(
                r#"{"X":{"base_seconds":60,"factor":0.5,"cap_seconds":60,"jitter":0}}"#,
            )
            .unwrap_err();
        assert!(bad.to_string().contains("factor"), "{bad}");
    }

    #[test]
    fn fire_at_is_a_whole_second() {
        let p = RetryPolicy::new(
            Duration::from_millis(1500),
            2.0,
            Duration::from_secs(60),
            0.0,
            false,
        )
        .unwrap();
        let t = p.fire_at(Timestamp::from_millis(10_200), a(1), &mut FixedRandom(0.5));
        assert_eq!(t.millis(), 12_000);
    }

    #[test]
    fn splitmix_is_deterministic_and_in_range() {
        let mut x = SplitMix64::new(7);
        let mut y = SplitMix64::new(7);
        for _ in 0..1000 {
            let v = x.next_unit();
            assert_eq!(v, y.next_unit());
            assert!((0.0..1.0).contains(&v));
        }
    }
}
