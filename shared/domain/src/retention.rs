//! How long a finished transaction's data is kept, and what an erasure removes.
//!
//! A transaction that ended (SUCCEEDED or FAILED) and its payload are kept
//! `RETENTION_DAYS` after the instant it ended ([`purge_at`]); a live one is kept
//! whatever its age. The stores write the instant as a DynamoDB TTL attribute with
//! the terminal write itself, and remove it with the write that reopens the
//! transaction (an operator replay). An erasure removes the fields listed in
//! [`Erased`] at once, and only from a finished transaction ([`erasable`]).
//! `docs/deploy.md#data-we-keep`.

use crate::ids::Timestamp;
use crate::machine::Status;
use serde::{Deserialize, Serialize};
use strum::{EnumString, IntoStaticStr, VariantArray};

const DAY_MS: i64 = 86_400_000;

/// Days a finished transaction is kept (`RETENTION_DAYS`, `RetentionDays`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Retention {
    days: u32,
}

/// Fewest days a deployment may keep a finished transaction: an operator needs time
/// to replay a FAILED one after its alert.
pub const RETENTION_DAYS_MIN: u32 = 1;
/// Most days a deployment may keep a finished transaction (ten years).
pub const RETENTION_DAYS_MAX: u32 = 3650;

const _: () = assert!(
    crate::defaults::RETENTION_DAYS >= RETENTION_DAYS_MIN
        && crate::defaults::RETENTION_DAYS <= RETENTION_DAYS_MAX
);

impl Retention {
    /// `defaults::RETENTION_DAYS`.
    pub const DEFAULT: Retention = Retention {
        days: crate::defaults::RETENTION_DAYS,
    };
    /// `days`, checked: `RETENTION_DAYS_MIN`–`RETENTION_DAYS_MAX` (the error says
    /// why; the caller names the setting).
    pub fn days(days: u32) -> Result<Self, String> {
        if (RETENTION_DAYS_MIN..=RETENTION_DAYS_MAX).contains(&days) {
            Ok(Self { days })
        } else {
            Err(format!(
                "must be {RETENTION_DAYS_MIN}–{RETENTION_DAYS_MAX} days (it is {days})"
            ))
        }
    }

    pub fn get(self) -> u32 {
        self.days
    }
}

/// The instant a transaction that entered `status` at `at` may be deleted: the
/// terminal instant plus the retention, or `None` when `status` is live (a live
/// transaction never expires).
pub fn purge_at(status: Status, at: Timestamp, retention: Retention) -> Option<Timestamp> {
    status
        .is_terminal()
        .then(|| at.plus_millis(i64::from(retention.days) * DAY_MS))
}

/// A piece of a transaction's data an erasure removes. Never its key, status,
/// attempts or instants: the audit trail and the guarantees rest on those.
#[derive(IntoStaticStr, VariantArray, EnumString)]
#[strum(serialize_all = "SCREAMING_SNAKE_CASE")]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Erased {
    /// The request payload (payloads table): the caller's data.
    Payload,
    /// The external service's reason text (`last_reason` of the record, `reason` of
    /// its audit entries): free text from outside, which may name a person.
    ServiceReason,
    /// An operator's reason text (`operator_reason` of the record and of its audit
    /// entries).
    OperatorReason,
}

impl Erased {
    /// Every variant, in declaration order.
    pub const ALL: &'static [Erased] = <Self as VariantArray>::VARIANTS;

    pub fn as_str(self) -> &'static str {
        self.into()
    }

    pub fn parse(s: &str) -> Option<Self> {
        s.parse().ok()
    }
}

/// A set of [`Erased`] (what one erasure removed), in the order of [`Erased::ALL`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(from = "Vec<Erased>", into = "Vec<Erased>")]
pub struct ErasedSet(u8);

impl ErasedSet {
    fn bit(e: Erased) -> u8 {
        1 << (e as u8)
    }

    pub fn insert(&mut self, e: Erased) {
        self.0 |= Self::bit(e);
    }

    pub fn contains(self, e: Erased) -> bool {
        self.0 & Self::bit(e) != 0
    }

    pub fn is_empty(&self) -> bool {
        self.0 == 0
    }

    pub fn iter(self) -> impl Iterator<Item = Erased> {
        Erased::ALL
            .iter()
            .copied()
            .filter(move |e| self.contains(*e))
    }

    /// The names, in order (`PAYLOAD`, `SERVICE_REASON`, …).
    pub fn names(self) -> Vec<&'static str> {
        self.iter().map(Erased::as_str).collect()
    }
}

impl FromIterator<Erased> for ErasedSet {
    fn from_iter<I: IntoIterator<Item = Erased>>(items: I) -> Self {
        let mut set = Self::default();
        for e in items {
            set.insert(e);
        }
        set
    }
}

impl From<Vec<Erased>> for ErasedSet {
    fn from(v: Vec<Erased>) -> Self {
        v.into_iter().collect()
    }
}

impl From<ErasedSet> for Vec<Erased> {
    fn from(s: ErasedSet) -> Self {
        s.iter().collect()
    }
}

/// Whether a transaction in `status` may be erased now: only a finished one (a live
/// one still needs its payload for its next request). `Err` names the status.
pub fn erasable(status: Status) -> Result<(), Status> {
    if status.is_terminal() {
        Ok(())
    } else {
        Err(status)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finished_transactions_expire_after_the_retention_live_ones_never() {
        let r = Retention::days(30).unwrap();
        let at = Timestamp::from_millis(1_000);
        for &status in Status::ALL {
            let expected = status
                .is_terminal()
                .then(|| Timestamp::from_millis(1_000 + 30 * DAY_MS));
            assert_eq!(purge_at(status, at, r), expected, "{status:?}");
            assert_eq!(erasable(status).is_ok(), status.is_terminal(), "{status:?}");
        }
    }

    #[test]
    fn retention_outside_its_range_is_refused_naming_the_value_and_range() {
        assert_eq!(Retention::days(1).unwrap().get(), 1);
        assert_eq!(Retention::days(3650).unwrap().get(), 3650);
        for bad in [0, 3651] {
            let e = Retention::days(bad).unwrap_err();
            assert!(e.contains("1–3650") && e.contains(&bad.to_string()), "{e}");
        }
    }

    #[test]
    fn erased_fields_round_trip_by_name() {
        for &e in Erased::ALL {
            assert_eq!(Erased::parse(e.as_str()), Some(e));
        }
        assert_eq!(Erased::parse("payload"), None);
        let set: ErasedSet = [Erased::OperatorReason, Erased::Payload]
            .into_iter()
            .collect();
        assert_eq!(set.names(), ["PAYLOAD", "OPERATOR_REASON"]);
        assert!(!set.contains(Erased::ServiceReason) && !set.is_empty());
        assert!(ErasedSet::default().is_empty());
    }
}
