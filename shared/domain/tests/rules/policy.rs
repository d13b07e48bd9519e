//! The backoff policy: `wait(k)` always within `bounds(k)` for any valid policy, any
//! attempt and any value the random source returns; the fire time is a whole second,
//! never before now, and within the same bounds (rounded up to the second).

use domain::ids::{Attempt, Timestamp};
use domain::policy::{PolicyError, PolicySet, RandomSource, RetryPolicy, MAX_CAP};
use proptest::prelude::*;
use std::time::Duration;

/// A random source that returns the values it is given, in turn.
struct Scripted(Vec<f64>, usize);

impl RandomSource for Scripted {
    fn next_unit(&mut self) -> f64 {
        let v = self.0[self.1 % self.0.len()];
        self.1 += 1;
        v
    }
}

fn valid_policy() -> impl Strategy<Value = RetryPolicy> {
    let base_ms = prop_oneof![
        1u64..=1_000,
        1_000u64..=86_400_000,
        Just(7_200_000u64),
        Just(u64::try_from(MAX_CAP.as_millis()).unwrap()),
    ];
    let factor = prop_oneof![Just(1.0f64), 1.0f64..4.0, 4.0f64..1e6, Just(f64::MAX)];
    let jitter = prop_oneof![Just(0.0f64), 0.0f64..1.0, Just(0.999_999_999)];
    (base_ms, factor, 0.0f64..=1.0, jitter, any::<bool>()).prop_map(
        |(base_ms, factor, cap_share, jitter, strict)| {
            let base = Duration::from_millis(base_ms);
            let cap = base + (MAX_CAP - base).mul_f64(cap_share);
            RetryPolicy::new(base, factor, cap, jitter, strict).unwrap()
        },
    )
}

/// Anything a random source might return, including what it never should.
fn any_unit() -> impl Strategy<Value = f64> {
    prop_oneof![
        4 => 0.0f64..1.0,
        1 => Just(0.0),
        1 => Just(1.0),
        1 => Just(-0.0),
        1 => Just(f64::NAN),
        1 => Just(f64::INFINITY),
        1 => Just(f64::NEG_INFINITY),
        1 => any::<f64>(),
    ]
}

proptest! {
    #![proptest_config(crate::cases(4000))]

    #[test]
    fn wait_is_always_within_bounds(p in valid_policy(), k in crate::attempts(12), u in any_unit()) {
        let (lo, hi) = p.bounds(k);
        prop_assert!(lo <= hi);
        let nominal = p.nominal(k);
        prop_assert!(nominal >= p.base().min(p.cap()) && nominal <= p.cap());
        let wait = p.wait(k, &mut Scripted(vec![u], 0));
        prop_assert!(lo <= wait && wait <= hi, "{wait:?} outside {lo:?}..={hi:?} for u={u}");
        if p.strict_cap() {
            prop_assert!(wait <= p.cap(), "strict cap: {wait:?} > {:?}", p.cap());
        }
        // The bounds are the formula's: nominal × (1 ± jitter), clamped when strict.
        let n = nominal.as_secs_f64();
        prop_assert!(lo.as_secs_f64() <= n * (1.0 - p.jitter()) + 1e-6);
        let ceiling = if p.strict_cap() { p.cap().as_secs_f64() } else { f64::MAX };
        let top = (n * (1.0 + p.jitter())).min(ceiling);
        prop_assert!(hi.as_secs_f64() >= top - 1e-6, "{hi:?} < {top}");
    }

    #[test]
    fn fire_at_is_a_whole_second_not_before_now_and_within_bounds(
        p in valid_policy(),
        k in crate::attempts(12),
        u in any_unit(),
        now_ms in -10_000_000_000_000i64..10_000_000_000_000,
    ) {
        let now = Timestamp::from_millis(now_ms);
        let fire = p.fire_at(now, k, &mut Scripted(vec![u], 0));
        prop_assert_eq!(fire.millis().rem_euclid(1000), 0, "whole second: {}", fire);
        prop_assert!(fire >= now);
        let (lo, hi) = p.bounds(k);
        let waited = u128::try_from(fire.millis() - now.millis()).unwrap();
        prop_assert!(waited >= lo.as_millis(), "{waited} ms < {lo:?}");
        prop_assert!(waited < hi.as_millis() + 1000, "{waited} ms > {hi:?} + 1 s");
        // Every persisted instant can be written as an `at()` expression.
        prop_assert_eq!(fire.to_schedule_at().len(), 19, "{}", fire.to_schedule_at());
        prop_assert_eq!(Timestamp::parse(&fire.to_rfc3339()).unwrap(), fire);
    }
}

/// A random source out of contract (NaN) must not turn into a zero wait (an immediate
/// retry burst): it is read as the middle of the range.
#[test]
fn a_nan_draw_is_the_nominal_wait() {
    let p = RetryPolicy::article_default();
    let k = Attempt::new(2).unwrap();
    assert_eq!(p.wait(k, &mut Scripted(vec![f64::NAN], 0)), p.nominal(k));
}

/// Settings beyond what any schedule can hold are refused with the setting named,
/// instead of panicking or wrapping around to a fire time in 1970.
#[test]
fn absurd_settings_are_refused_not_panicked_on() {
    let err = RetryPolicy::new(
        Duration::from_secs(1),
        2.0,
        MAX_CAP + Duration::from_secs(1),
        0.1,
        false,
    )
    .unwrap_err();
    assert!(err.to_string().contains("`cap`"), "{err}");
    assert!(
        err.to_string().contains("at most 31536000 s (365 days)"),
        "{err}"
    );
    for json in [
        r#"{"X":{"base_seconds":1e30,"factor":2,"cap_seconds":1e30,"jitter":0.1}}"#,
        r#"{"X":{"base_seconds":60,"factor":2,"cap_seconds":1e300,"jitter":0.1}}"#,
        r#"{"X":{"base_seconds":60,"factor":2,"cap_seconds":40000000,"jitter":0.1}}"#,
    ] {
        let err = PolicySet::default().with_overrides_json(json).unwrap_err();
        assert!(matches!(err, PolicyError::Overrides { .. }), "{err:?}");
        assert!(err.to_string().contains("at most"), "{err}");
    }
    let longest = RetryPolicy::new(MAX_CAP, 1.0, MAX_CAP, 0.999_999, false).unwrap();
    let k = Attempt::new(u32::MAX).unwrap();
    let fire = longest.fire_at(Timestamp::from_millis(0), k, &mut Scripted(vec![1.0], 0));
    assert!(fire.to_rfc3339().starts_with("1971-12-"), "{fire}");
}
