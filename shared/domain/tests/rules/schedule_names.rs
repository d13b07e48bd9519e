//! Schedule names: fixed vectors (names already stored must keep resolving to the same
//! schedule), the 64-character boundary, awkward ids, and the property that every
//! name is 1–64 characters of `[0-9a-zA-Z-_.]`, deterministic and distinct per
//! (id, attempt).

use domain::ids::{
    is_schedule_name_char, Attempt, IdempotencyKey, ScheduleName, TransactionId,
    MAX_TRANSACTION_ID_CHARS, SCHEDULE_NAME_MAX,
};
use proptest::prelude::*;

fn name(id: &str, attempt: u32) -> String {
    ScheduleName::for_retry(
        &TransactionId::parse(id).unwrap(),
        Attempt::new(attempt).unwrap(),
    )
    .to_string()
}

fn valid_name(n: &str) -> bool {
    (1..=SCHEDULE_NAME_MAX).contains(&n.len()) && n.chars().all(is_schedule_name_char)
}

/// The hashes were computed independently (Python `hashlib.sha256(id.encode())`,
/// first 16 hex digits), not copied from this implementation.
#[test]
fn fixed_vectors() {
    let long = "x".repeat(MAX_TRANSACTION_ID_CHARS);
    let cases: &[(&str, u32, &str)] = &[
        ("TX-100200", 2, "retry-TX-100200-2"),
        ("TX-100200", 10, "retry-TX-100200-10"),
        ("a_b.c", 2, "retry-a_b.c-2"),
        ("a", 1000, "retry-a-1000"),
        ("TX#1", 2, "retry-h.fdf18baedeb320b1-2"),
        ("orders/2026/17", 2, "retry-h.a00ce02a433f4a8b-2"),
        ("with space", 2, "retry-h.b8b8f25a5fc711ca-2"),
        ("ñandú-7", 2, "retry-h.e067fafa3d14fee6-2"),
        ("TX-100200#2", 3, "retry-h.32136b0ec5fc0b08-3"),
        ("a/b", 2, "retry-h.c14cddc033f64b9d-2"),
        ("TX 1", 4, "retry-h.57c60514f88eaa9a-4"),
        ("日本語", 2, "retry-h.77710aedc74ecfa3-2"),
        ("🙂", 2, "retry-h.d06f1525f7913978-2"),
        ("TX:1", 2, "retry-h.dfba4203321181ee-2"),
        (&long, 2, "retry-h.24da1b81d0b16df6-2"),
        ("h.fdf18baedeb320b1", 2, "retry-h.3c54cf64d82167be-2"),
        ("h.x", 2, "retry-h.ad2191923a941987-2"),
    ];
    let mut wrong = Vec::new();
    for (id, attempt, want) in cases {
        let got = name(id, *attempt);
        assert!(valid_name(&got), "{got}");
        if got != *want {
            wrong.push(format!("({id:?}, {attempt}, {got:?})"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The whole name may be exactly 64 characters; one more and the id is hashed.
#[test]
fn the_64_character_boundary() {
    for attempt in [2u32, 10, 100, 4_294_967_295] {
        let digits = attempt.to_string().len();
        let room = SCHEDULE_NAME_MAX - "retry-".len() - 1 - digits;
        let fits = "x".repeat(room);
        let exact = name(&fits, attempt);
        assert_eq!(exact, format!("retry-{fits}-{attempt}"));
        assert_eq!(exact.len(), 64);
        let over = "x".repeat(room + 1);
        let hashed = name(&over, attempt);
        assert!(hashed.starts_with("retry-h."), "{hashed}");
        assert!(hashed.ends_with(&format!("-{attempt}")), "{hashed}");
        assert!(valid_name(&hashed), "{hashed}");
        assert_eq!(hashed.len(), "retry-h.".len() + 16 + 1 + digits);
    }
}

/// A direct name can never equal a hashed one: an id that looks like a hash is
/// hashed too, so two transactions never share a schedule.
#[test]
fn an_id_shaped_like_a_hash_does_not_collide() {
    let hashed = name("TX#1", 2);
    assert_eq!(hashed, "retry-h.fdf18baedeb320b1-2");
    let lookalike = name("h.fdf18baedeb320b1", 2);
    assert_ne!(lookalike, hashed);
    assert!(valid_name(&lookalike));
    // Any id starting with `h.` is hashed; other dotted ids stay readable.
    assert!(name("h.x", 2).starts_with("retry-h."));
    assert_ne!(name("h.x", 2), "retry-h.x-2");
    assert_eq!(name("hx.1", 2), "retry-hx.1-2");
    assert_eq!(name("h", 2), "retry-h-2");
}

/// The idempotency key keeps the id as is, `#` included.
#[test]
fn idempotency_keys() {
    for (id, n, want) in [
        ("TX-100200", 2, "TX-100200#2"),
        ("TX#1", 1, "TX#1#1"),
        ("a b/ñ", 7, "a b/ñ#7"),
    ] {
        let key = IdempotencyKey::new(&TransactionId::parse(id).unwrap(), Attempt::new(n).unwrap());
        assert_eq!(key.as_str(), want);
    }
}

/// Ids as the contract accepts them: 1–128 characters, no control characters, no
/// surrounding white space; drawn from readable, schedule-safe, hash-like and
/// arbitrary Unicode shapes.
fn any_id() -> impl Strategy<Value = TransactionId> {
    prop_oneof![
        "[0-9a-zA-Z._-]{1,70}",
        "h\\.[0-9a-f]{16}",
        "[0-9a-zA-Z#/ :._-]{1,130}",
        "\\PC{1,130}",
    ]
    .prop_filter_map("not a valid transaction id", |raw| {
        TransactionId::parse(&raw).ok()
    })
}

proptest! {
    #![proptest_config(crate::cases(3000))]

    #[test]
    fn every_name_is_valid_and_deterministic(id in any_id(), n in crate::attempts(20)) {
        let got = ScheduleName::for_retry(&id, n);
        let s = got.as_str();
        prop_assert!(valid_name(s), "{s:?} for {id:?}");
        prop_assert!(s.starts_with("retry-"));
        let suffix = format!("-{n}");
        prop_assert!(s.ends_with(&suffix), "{s}");
        prop_assert_eq!(&got, &ScheduleName::for_retry(&id, n));
        prop_assert_eq!(ScheduleName::from_stored(s).unwrap(), got.clone());
        // The id is readable in the name exactly when the whole name fits the rules.
        let direct = format!("retry-{id}{suffix}");
        if valid_name(&direct) && !id.as_str().starts_with("h.") {
            prop_assert_eq!(s, direct);
        } else {
            prop_assert!(s.starts_with("retry-h."), "{s}");
        }
    }

    #[test]
    fn names_differ_per_id_and_attempt(
        a in any_id(),
        b in any_id(),
        n in crate::attempts(20),
        m in crate::attempts(20),
    ) {
        let same = a == b && n == m;
        prop_assert_eq!(
            ScheduleName::for_retry(&a, n) == ScheduleName::for_retry(&b, m),
            same
        );
    }
}
