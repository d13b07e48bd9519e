//! Validated identifiers and UTC timestamps.
//!
//! Everything here is validated at the edge (`parse`/`new`) so the rest of the code
//! never sees an empty id, an attempt 0 or a schedule name the Scheduler would reject.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::fmt;
use thiserror::Error;

/// Longest transaction id accepted, in characters.
pub const MAX_TRANSACTION_ID_CHARS: usize = 128;

/// Each newtype shows as its inner value.
macro_rules! shown_as_inner {
    ($($ty:ident),*) => {$(
        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}", self.0)
            }
        }
    )*};
}

/// Each newtype is read through its validating constructor, its error the reader's.
macro_rules! read_checked {
    ($($ty:ident from $raw:ty => $check:expr),* $(,)?) => {$(
        impl<'de> Deserialize<'de> for $ty {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let check: fn($raw) -> Result<$ty, _> = $check;
                check(<$raw>::deserialize(d)?).map_err(serde::de::Error::custom)
            }
        }
    )*};
}

shown_as_inner!(
    TransactionId,
    Attempt,
    MaxAttempts,
    IdempotencyKey,
    CorrelationId,
    ScheduleName
);
read_checked!(
    TransactionId from String => |raw| TransactionId::parse(&raw),
    Attempt from u32 => Attempt::new,
    MaxAttempts from u32 => MaxAttempts::new,
    CorrelationId from String => |raw| CorrelationId::new(&raw),
);

/// A transaction id: 1 to [`MAX_TRANSACTION_ID_CHARS`] Unicode characters, no control
/// characters, no leading or trailing white space. Any other character is accepted
/// (`#`, `/`, spaces inside, non-ASCII): the schedule name hashes ids that do not fit
/// the Scheduler's name rules.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct TransactionId(String);

/// Why a value was rejected. Each variant names the rule broken.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum IdError {
    #[error("must not be empty")]
    Empty,
    #[error("has {chars} characters; at most {max} are accepted")]
    TooLong { chars: usize, max: usize },
    #[error("contains the control character U+{code:04X} at position {position}")]
    ControlCharacter { code: u32, position: usize },
    #[error("must not start or end with white space")]
    SurroundingWhitespace,
    #[error("must be at least 1 (attempt 1 is the original request), got {0}")]
    AttemptZero(u32),
    #[error("must be between 1 and {max}, got {value}")]
    OutOfRange { value: u64, max: u64 },
    #[error("is not an RFC 3339 UTC time ending in Z: {0}")]
    BadTimestamp(String),
}

impl TransactionId {
    /// Validates a transaction id (see the type's documentation for the rules).
    pub fn parse(raw: &str) -> Result<Self, IdError> {
        if raw.is_empty() {
            return Err(IdError::Empty);
        }
        let chars = raw.chars().count();
        if chars > MAX_TRANSACTION_ID_CHARS {
            return Err(IdError::TooLong {
                chars,
                max: MAX_TRANSACTION_ID_CHARS,
            });
        }
        if let Some((position, c)) = raw.chars().enumerate().find(|(_, c)| c.is_control()) {
            return Err(IdError::ControlCharacter {
                code: c as u32,
                position,
            });
        }
        if raw.trim() != raw {
            return Err(IdError::SurroundingWhitespace);
        }
        Ok(Self(raw.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Shard of this id among `shards` write shards of the reconciler index: a stable
    /// hash, the same on every machine and every version.
    pub fn shard(&self, shards: u16) -> u16 {
        let digest = Sha256::digest(self.0.as_bytes());
        let n = u16::from_be_bytes([digest[0], digest[1]]);
        n % shards.max(1)
    }
}

/// An attempt number. Attempt 1 is the original request; the first retry is attempt 2.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct Attempt(u32);

impl Attempt {
    pub const FIRST: Attempt = Attempt(1);

    pub fn new(n: u32) -> Result<Self, IdError> {
        if n == 0 {
            Err(IdError::AttemptZero(n))
        } else {
            Ok(Self(n))
        }
    }

    pub fn get(self) -> u32 {
        self.0
    }

    /// The attempt after this one (saturating; budgets are far below `u32::MAX`).
    pub fn next(self) -> Attempt {
        Attempt(self.0.saturating_add(1))
    }
}

/// Highest `max_attempts` accepted. Far above any sensible budget; it only stops typos.
pub const MAX_ATTEMPTS_LIMIT: u32 = 1000;

/// The attempt budget, **counting the original request**: with 4, there is one
/// original request and at most three retries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct MaxAttempts(u32);

impl MaxAttempts {
    pub fn new(n: u32) -> Result<Self, IdError> {
        if n == 0 || n > MAX_ATTEMPTS_LIMIT {
            Err(IdError::OutOfRange {
                value: u64::from(n),
                max: u64::from(MAX_ATTEMPTS_LIMIT),
            })
        } else {
            Ok(Self(n))
        }
    }

    pub fn get(self) -> u32 {
        self.0
    }

    /// True when attempt `n` is the last one the budget allows (or beyond it).
    pub fn exhausted_by(self, n: Attempt) -> bool {
        n.get() >= self.0
    }
}

/// The key the external service deduplicates by: `<transaction_id>#<attempt>`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct IdempotencyKey(String);

impl IdempotencyKey {
    pub fn new(id: &TransactionId, attempt: Attempt) -> Self {
        Self(format!("{}#{}", id.as_str(), attempt.get()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Longest correlation id accepted, in characters.
pub const MAX_CORRELATION_ID_CHARS: usize = 128;

/// A producer's own reference for a transaction (`correlation_id`): 1 to
/// [`MAX_CORRELATION_ID_CHARS`] characters, no control characters. Given at the start,
/// stored on the record, never changed, and carried in every request of the
/// transaction; no decision reads it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct CorrelationId(String);

impl CorrelationId {
    /// Validates a correlation id; the error is the rule broken.
    pub fn new(raw: &str) -> Result<Self, String> {
        let chars = raw.chars().count();
        if chars == 0 {
            return Err("must not be empty".into());
        }
        if chars > MAX_CORRELATION_ID_CHARS {
            return Err(format!(
                "{chars} characters; at most {MAX_CORRELATION_ID_CHARS}"
            ));
        }
        if let Some(c) = raw.chars().find(|c| c.is_control()) {
            return Err(format!(
                "contains the control character U+{:04X}",
                u32::from(c)
            ));
        }
        Ok(Self(raw.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Longest schedule name EventBridge Scheduler accepts.
pub const SCHEDULE_NAME_MAX: usize = 64;

/// A deterministic one-time schedule name: `retry-<id>-<attempt>`.
///
/// `<id>` is the transaction id itself when the whole name fits the Scheduler's rules
/// (1–64 characters of `[0-9a-zA-Z-_.]`) and the id does not start with `h.`;
/// otherwise it is `h.` followed by the first 16 hex digits of the SHA-256 of the id
/// (so an id shaped like a hash can never take another id's hashed name). `#` is not
/// allowed in schedule names, which is why names use `-` where idempotency keys use `#`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ScheduleName(String);

impl ScheduleName {
    pub fn for_retry(id: &TransactionId, attempt: Attempt) -> Self {
        Self::named(id, &attempt.get().to_string())
    }

    /// The schedule of the `seq`-th technical re-send of the transaction (attempt
    /// `attempt` sent again, same key): `retry-<id>-<attempt>.<seq>`. The `.` keeps it
    /// apart from every `retry-<id>-<attempt>` (whose last `-` is followed by digits
    /// only) and from the re-sends of other ids, so it never meets a schedule already
    /// consumed; `<id>` follows the same rules (hashed when the name would not fit).
    pub fn for_resend(id: &TransactionId, attempt: Attempt, seq: u32) -> Self {
        Self::named(id, &format!("{}.{seq}", attempt.get()))
    }

    fn named(id: &TransactionId, suffix: &str) -> Self {
        let direct = format!("retry-{}-{suffix}", id.as_str());
        if direct.len() <= SCHEDULE_NAME_MAX
            && direct.chars().all(is_schedule_name_char)
            && !id.as_str().starts_with("h.")
        {
            return Self(direct);
        }
        let digest = Sha256::digest(id.as_str().as_bytes());
        let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
        Self(format!("retry-h.{hex}-{suffix}"))
    }

    /// Wraps a name read back from a store. Only checked against the Scheduler's rules.
    pub fn from_stored(raw: &str) -> Result<Self, IdError> {
        if raw.is_empty() {
            return Err(IdError::Empty);
        }
        if raw.len() > SCHEDULE_NAME_MAX {
            return Err(IdError::TooLong {
                chars: raw.len(),
                max: SCHEDULE_NAME_MAX,
            });
        }
        if let Some((position, c)) = raw
            .chars()
            .enumerate()
            .find(|(_, c)| !is_schedule_name_char(*c))
        {
            return Err(IdError::ControlCharacter {
                code: c as u32,
                position,
            });
        }
        Ok(Self(raw.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The Scheduler's name alphabet: `[0-9a-zA-Z-_.]`.
pub fn is_schedule_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.'
}

/// A UTC instant with millisecond precision, written as RFC 3339 with a `Z` suffix
/// and always three fractional digits (`2026-10-03T16:38:00.000Z`), so that stored
/// times sort as text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Timestamp(i64);

impl Timestamp {
    pub const fn from_millis(ms: i64) -> Self {
        Self(ms)
    }

    pub fn millis(self) -> i64 {
        self.0
    }

    pub fn plus_millis(self, ms: i64) -> Self {
        Self(self.0.saturating_add(ms))
    }

    /// The next whole second at or after this instant (one-time schedules take seconds).
    pub fn ceil_to_second(self) -> Self {
        let floor = self.0.div_euclid(1000) * 1000;
        if self.0.rem_euclid(1000) == 0 {
            Self(floor)
        } else {
            // Saturates at the last whole second representable.
            Self(floor.checked_add(1000).unwrap_or(floor))
        }
    }

    fn datetime(self) -> time::OffsetDateTime {
        let nanos = i128::from(self.0) * 1_000_000;
        time::OffsetDateTime::from_unix_timestamp_nanos(nanos)
            .unwrap_or(time::OffsetDateTime::UNIX_EPOCH)
    }

    /// `2026-10-03T16:38:00.000Z`
    pub fn to_rfc3339(self) -> String {
        format!(
            "{}.{:03}Z",
            self.to_schedule_at(),
            self.datetime().millisecond()
        )
    }

    /// The body of a Scheduler `at()` expression: `2026-10-03T16:38:00` (UTC, seconds).
    pub fn to_schedule_at(self) -> String {
        let d = self.datetime();
        format!(
            "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}",
            d.year(),
            u8::from(d.month()),
            d.day(),
            d.hour(),
            d.minute(),
            d.second()
        )
    }

    /// Parses RFC 3339 in UTC (`Z` suffix). Any fractional precision is accepted and
    /// truncated to milliseconds.
    pub fn parse(raw: &str) -> Result<Self, IdError> {
        if !raw.ends_with('Z') {
            return Err(IdError::BadTimestamp(raw.to_owned()));
        }
        let d = time::OffsetDateTime::parse(raw, &time::format_description::well_known::Rfc3339)
            .map_err(|_| IdError::BadTimestamp(raw.to_owned()))?;
        let ms = d.unix_timestamp_nanos() / 1_000_000;
        i64::try_from(ms)
            .map(Self)
            .map_err(|_| IdError::BadTimestamp(raw.to_owned()))
    }

    /// Seconds since the Unix epoch (for TTL attributes).
    pub fn epoch_seconds(self) -> i64 {
        self.0.div_euclid(1000)
    }
}

impl Serialize for Timestamp {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_rfc3339())
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = String::deserialize(d)?;
        Timestamp::parse(&raw).map_err(serde::de::Error::custom)
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_rfc3339())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(s: &str) -> TransactionId {
        TransactionId::parse(s).unwrap()
    }

    #[test]
    fn transaction_id_rules() {
        assert_eq!(TransactionId::parse(""), Err(IdError::Empty));
        assert_eq!(
            TransactionId::parse("TX\u{7}1"),
            Err(IdError::ControlCharacter {
                code: 7,
                position: 2
            })
        );
        assert_eq!(
            TransactionId::parse(" TX"),
            Err(IdError::SurroundingWhitespace)
        );
        let long = "x".repeat(MAX_TRANSACTION_ID_CHARS + 1);
        assert_eq!(
            TransactionId::parse(&long),
            Err(IdError::TooLong {
                chars: 129,
                max: 128
            })
        );
        assert!(TransactionId::parse(&"é".repeat(MAX_TRANSACTION_ID_CHARS)).is_ok());
        assert_eq!(id("TX-100200").as_str(), "TX-100200");
    }

    #[test]
    fn attempt_rules() {
        assert_eq!(Attempt::new(0), Err(IdError::AttemptZero(0)));
        assert_eq!(Attempt::new(2).unwrap().get(), 2);
        assert_eq!(Attempt::FIRST.next().get(), 2);
        assert!(MaxAttempts::new(0).is_err());
        assert!(MaxAttempts::new(MAX_ATTEMPTS_LIMIT + 1).is_err());
        let max = MaxAttempts::new(4).unwrap();
        assert!(!max.exhausted_by(Attempt::new(3).unwrap()));
        assert!(max.exhausted_by(Attempt::new(4).unwrap()));
    }

    #[test]
    fn idempotency_key_joins_with_hash() {
        let key = IdempotencyKey::new(&id("TX-100200"), Attempt::new(2).unwrap());
        assert_eq!(key.as_str(), "TX-100200#2");
    }

    /// Fixed vectors: a change to the naming scheme breaks these on purpose, because
    /// names already stored in production must keep resolving to the same schedule.
    #[test]
    fn schedule_name_vectors() {
        let a2 = Attempt::new(2).unwrap();
        let cases = [
            ("TX-100200", "retry-TX-100200-2"),
            ("a_b.c", "retry-a_b.c-2"),
            ("TX#1", "retry-h.fdf18baedeb320b1-2"),
            ("orders/2026/17", "retry-h.a00ce02a433f4a8b-2"),
            ("with space", "retry-h.b8b8f25a5fc711ca-2"),
            ("ñandú-7", "retry-h.e067fafa3d14fee6-2"),
        ];
        for (raw, expected) in cases {
            let name = ScheduleName::for_retry(&id(raw), a2);
            assert_eq!(name.as_str(), expected, "id {raw:?}");
            assert!(name.as_str().len() <= SCHEDULE_NAME_MAX, "{name}");
            assert!(name.as_str().chars().all(is_schedule_name_char), "{name}");
        }
    }

    #[test]
    fn long_ids_are_hashed_and_stable() {
        let a = Attempt::new(3).unwrap();
        // 64 - len("retry-") - len("-3") = 56 characters still fit.
        let fits = "x".repeat(56);
        assert_eq!(
            ScheduleName::for_retry(&id(&fits), a).as_str(),
            format!("retry-{fits}-3")
        );
        let too_long = "x".repeat(57);
        let hashed = ScheduleName::for_retry(&id(&too_long), a);
        assert!(hashed.as_str().starts_with("retry-h."));
        assert_eq!(hashed, ScheduleName::for_retry(&id(&too_long), a));
        assert_ne!(
            hashed,
            ScheduleName::for_retry(&id(&too_long), Attempt::new(4).unwrap())
        );
    }

    /// A re-send's name: `retry-<id>-<n>.<seq>`, never a retry's name nor another
    /// re-send's (an id ending in `-<n>` included), within the Scheduler's rules at
    /// the longest id and the largest attempt and sequence, hashed like a retry's.
    #[test]
    fn resend_names_are_distinct_and_fit() {
        let a2 = Attempt::new(2).unwrap();
        assert_eq!(
            ScheduleName::for_resend(&id("TX-100200"), a2, 1).as_str(),
            "retry-TX-100200-2.1"
        );
        assert_eq!(
            ScheduleName::for_resend(&id("TX#1"), a2, 3).as_str(),
            "retry-h.fdf18baedeb320b1-2.3"
        );
        // `TX-1` attempt 2 re-send 3 against `TX-1-2` attempt 3.
        assert_ne!(
            ScheduleName::for_resend(&id("TX-1"), a2, 3),
            ScheduleName::for_retry(&id("TX-1-2"), Attempt::new(3).unwrap())
        );
        assert_ne!(
            ScheduleName::for_resend(&id("TX-1"), a2, 3),
            ScheduleName::for_resend(&id("TX-1-2"), Attempt::new(3).unwrap(), 3)
        );
        let mut names = std::collections::BTreeSet::new();
        for raw in ["TX-1", "TX-1-2", "TX-1-2.3"] {
            for n in 1..=4 {
                let attempt = Attempt::new(n).unwrap();
                assert!(names.insert(ScheduleName::for_retry(&id(raw), attempt)));
                for seq in 1..=4 {
                    assert!(names.insert(ScheduleName::for_resend(&id(raw), attempt, seq)));
                }
            }
        }
        let longest = "ñ".repeat(MAX_TRANSACTION_ID_CHARS);
        let fits = "x".repeat(SCHEDULE_NAME_MAX - "retry--2.1".len());
        for raw in [longest.as_str(), fits.as_str(), "h.abc"] {
            let name = ScheduleName::for_resend(
                &id(raw),
                Attempt::new(MAX_ATTEMPTS_LIMIT).unwrap(),
                u32::MAX,
            );
            assert!(name.as_str().len() <= SCHEDULE_NAME_MAX, "{name}");
            assert!(name.as_str().chars().all(is_schedule_name_char), "{name}");
            assert_eq!(ScheduleName::from_stored(name.as_str()).unwrap(), name);
        }
        assert_eq!(
            ScheduleName::for_resend(&id(&fits), a2, 1).as_str(),
            format!("retry-{fits}-2.1")
        );
        assert!(ScheduleName::for_resend(&id(&fits), a2, 10)
            .as_str()
            .starts_with("retry-h."));
    }

    #[test]
    fn timestamps_round_trip_and_sort_as_text() {
        let t = Timestamp::parse("2026-10-03T16:38:00Z").unwrap();
        assert_eq!(t.to_rfc3339(), "2026-10-03T16:38:00.000Z");
        assert_eq!(t.to_schedule_at(), "2026-10-03T16:38:00");
        let later = t.plus_millis(1_500);
        assert!(later.to_rfc3339() > t.to_rfc3339());
        assert_eq!(
            later.ceil_to_second().to_rfc3339(),
            "2026-10-03T16:38:02.000Z"
        );
        assert_eq!(t.ceil_to_second(), t);
        assert!(Timestamp::parse("2026-10-03T16:38:00+02:00").is_err());
        assert!(Timestamp::parse("yesterday").is_err());
    }

    #[test]
    fn shards_are_stable_and_in_range() {
        for s in ["a", "TX-1", "TX-2", "ñ"] {
            let shard = id(s).shard(8);
            assert!(shard < 8);
            assert_eq!(shard, id(s).shard(8));
        }
        assert_eq!(id("a").shard(1), 0);
    }
}
