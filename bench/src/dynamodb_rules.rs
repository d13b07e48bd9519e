//! What DynamoDB bills for an operation, computed from the item sizes with its published
//! rules — because moto's `ConsumedCapacity` does not. What moto (5.x) returns, checked
//! against a local server: a constant 1.0 for every PutItem, 0.5 for every UpdateItem
//! and GetItem (strongly consistent or not, whatever the item's size), nothing for
//! secondary indexes, nothing for a failed condition, and an empty list for
//! TransactWriteItems. The benchmark prints moto's figures beside ours and prices only
//! ours. The rules are listed, with their sources, on [`dynamodb_billed_units`]; the
//! figures they give: `docs/benchmarks.md#billable-operations-per-retry-cycle-measured-against-moto`.

use aws::item::{FlatItem, Scalar};
use testkit::provision::IndexDef;
use testkit::size::number_size;

/// Bytes per write request unit.
pub const WRITE_UNIT_BYTES: usize = 1024;
/// Bytes per (strongly consistent) read request unit.
pub const READ_UNIT_BYTES: usize = 4096;
/// Overhead DynamoDB counts per secondary index entry.
pub const INDEX_ENTRY_OVERHEAD_BYTES: usize = 100;

/// DynamoDB's size of an item.
pub fn item_size(item: &FlatItem) -> usize {
    item.iter()
        .map(|(name, value)| {
            name.len()
                + match value {
                    Scalar::S(s) => s.len(),
                    Scalar::N(n) => number_size(n),
                    // No attribute of ours has another type; count a byte.
                    Scalar::Other(_) => 1,
                }
        })
        .sum()
}

fn units(size: usize, per: usize) -> f64 {
    size.div_ceil(per).max(1) as f64
}

/// One DynamoDB operation, as the benchmark observed it.
#[derive(Debug, Clone, Copy)]
pub enum DynamoOp<'a> {
    /// A write that was applied (UpdateItem, PutItem, DeleteItem: `after = None`),
    /// with the item before and after (from the stream's NEW_AND_OLD_IMAGES).
    Write {
        before: Option<&'a FlatItem>,
        after: Option<&'a FlatItem>,
        /// Part of a TransactWriteItems.
        transactional: bool,
    },
    /// A conditional write whose condition failed, on this existing item.
    FailedCondition { existing: Option<&'a FlatItem> },
    /// A write to a table without secondary indexes, given the sizes of the item
    /// before (0: none) and after (for items with Maps: [`testkit::size::item_size`]).
    SizedWrite {
        before_bytes: usize,
        after_bytes: usize,
    },
    /// A GetItem.
    Read {
        item: Option<&'a FlatItem>,
        consistent: bool,
    },
}

/// Request units DynamoDB bills for one operation.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Billed {
    /// Write request units on the table.
    pub table_write: f64,
    /// Write request units on the table's secondary indexes.
    pub index_write: f64,
    /// Read request units.
    pub read: f64,
}

impl Billed {
    pub fn write(&self) -> f64 {
        self.table_write + self.index_write
    }
}

impl std::ops::AddAssign for Billed {
    fn add_assign(&mut self, o: Self) {
        self.table_write += o.table_write;
        self.index_write += o.index_write;
        self.read += o.read;
    }
}

/// The index key of an item, if the item is in the (sparse) index.
fn index_key<'a>(
    item: Option<&'a FlatItem>,
    index: &IndexDef,
) -> Option<(&'a Scalar, Option<&'a Scalar>)> {
    let item = item?;
    let hash = item.get(index.hash_key)?;
    match index.range_key {
        Some(r) => item.get(r).map(|range| (hash, Some(range))),
        None => Some((hash, None)),
    }
}

/// The size of an item's entry in an index.
fn index_entry_size(item: &FlatItem, index: &IndexDef, table_keys: &[&str]) -> usize {
    let projected: FlatItem = match index.projection {
        "ALL" => item.clone(),
        _ => item
            .iter()
            .filter(|(k, _)| {
                table_keys.contains(&k.as_str())
                    || k.as_str() == index.hash_key
                    || Some(k.as_str()) == index.range_key
            })
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
    };
    item_size(&projected) + INDEX_ENTRY_OVERHEAD_BYTES
}

/// THE function applying DynamoDB's published billing rules to one operation on a
/// table with `indexes` (global secondary indexes) and primary key attributes
/// `table_keys`:
/// - item size = Σ (attribute name bytes + value size), by [`testkit::size`]: a string is
///   its UTF-8 bytes, a number about 1 byte per two significant digits + 1 byte;
/// - a write costs ⌈size / 1 KB⌉ write request units (minimum 1); an UpdateItem or a
///   replacing PutItem is charged by the LARGER of the item before and after;
/// - a transactional write (TransactWriteItems) costs twice that, per item;
/// - a write whose condition fails still costs write units for the size of the
///   existing item (minimum 1); it writes no index;
/// - a global secondary index is written when the write touches it: its key appears
///   (1 put), changes (1 delete + 1 put = 2 writes), disappears (1 delete), or stays
///   while a projected attribute changes (1 put). An index entry is the projected item
///   plus 100 bytes of overhead (the figure DynamoDB documents for index entries; it
///   changes nothing while items stay under ~900 bytes);
/// - a read costs ⌈size / 4 KB⌉ read request units (minimum 1) strongly consistent,
///   half that eventually consistent.
///
/// Sources: DynamoDB Developer Guide — "Item sizes and formats", "Read/write capacity
/// mode" (request units), "Condition expressions" (failed conditional writes),
/// "Global secondary indexes: write activity", "Transactions: capacity management".
pub fn dynamodb_billed_units(
    op: DynamoOp<'_>,
    indexes: &[IndexDef],
    table_keys: &[&str],
) -> Billed {
    match op {
        DynamoOp::Read { item, consistent } => {
            let full = units(item.map(item_size).unwrap_or(0), READ_UNIT_BYTES);
            Billed {
                read: if consistent { full } else { full / 2.0 },
                ..Billed::default()
            }
        }
        DynamoOp::SizedWrite {
            before_bytes,
            after_bytes,
        } => Billed {
            table_write: units(before_bytes.max(after_bytes), WRITE_UNIT_BYTES),
            ..Billed::default()
        },
        DynamoOp::FailedCondition { existing } => Billed {
            table_write: units(existing.map(item_size).unwrap_or(0), WRITE_UNIT_BYTES),
            ..Billed::default()
        },
        DynamoOp::Write {
            before,
            after,
            transactional,
        } => {
            let size = before
                .map(item_size)
                .unwrap_or(0)
                .max(after.map(item_size).unwrap_or(0));
            let factor = if transactional { 2.0 } else { 1.0 };
            let mut index_write = 0.0;
            for ix in indexes {
                let put = |item: &FlatItem| {
                    units(index_entry_size(item, ix, table_keys), WRITE_UNIT_BYTES)
                };
                index_write += match (index_key(before, ix), index_key(after, ix), before, after) {
                    (None, Some(_), _, Some(a)) => put(a),
                    (Some(_), None, Some(b), _) => put(b),
                    (Some(kb), Some(ka), Some(b), Some(a)) if kb != ka => put(b) + put(a),
                    (Some(_), Some(_), Some(b), Some(a)) => {
                        let changed = match ix.projection {
                            "ALL" => b != a,
                            _ => false,
                        };
                        if changed {
                            put(a)
                        } else {
                            0.0
                        }
                    }
                    _ => 0.0,
                };
            }
            Billed {
                table_write: factor * units(size, WRITE_UNIT_BYTES),
                index_write: factor * index_write,
                read: 0.0,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(pairs: &[(&str, Scalar)]) -> FlatItem {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .collect()
    }

    fn s(v: &str) -> Scalar {
        Scalar::S(v.to_owned())
    }

    fn ix() -> IndexDef {
        IndexDef {
            name: "reconcile-index",
            hash_key: "pk",
            range_key: Some("at"),
            projection: "ALL",
        }
    }

    /// What `op` bills on a table keyed by `id`, with the reconcile index or none.
    fn bill(op: DynamoOp<'_>, indexed: bool) -> Billed {
        let indexes = if indexed { vec![ix()] } else { vec![] };
        dynamodb_billed_units(op, &indexes, &["id"])
    }

    /// An applied write from `before` to `after`.
    fn write<'a>(
        before: Option<&'a FlatItem>,
        after: &'a FlatItem,
        transactional: bool,
    ) -> DynamoOp<'a> {
        DynamoOp::Write {
            before,
            after: Some(after),
            transactional,
        }
    }

    #[test]
    fn an_update_is_charged_by_the_larger_image_and_rounds_up_per_kilobyte() {
        let small = item(&[("id", s("a"))]);
        let big = item(&[("id", s("a")), ("v", s(&"x".repeat(1500)))]);
        assert_eq!(
            bill(write(Some(&big), &small, false), false).table_write,
            2.0
        );
        let t = bill(write(None, &small, true), false);
        assert_eq!(t.table_write, 2.0, "transactional = 2×");
    }

    #[test]
    fn index_writes_follow_the_key() {
        let out = item(&[("id", s("a")), ("status", s("IN_PROGRESS"))]);
        let k1 = item(&[("id", s("a")), ("pk", s("SCHEDULING#1")), ("at", s("t1"))]);
        let k2 = item(&[("id", s("a")), ("pk", s("SCHEDULED#1")), ("at", s("t2"))]);
        let k2b = item(&[
            ("id", s("a")),
            ("pk", s("SCHEDULED#1")),
            ("at", s("t2")),
            ("x", s("y")),
        ]);
        let w = |b: &FlatItem, a: &FlatItem| bill(write(Some(b), a, false), true).index_write;
        assert_eq!(w(&out, &k1), 1.0, "key appears: put");
        assert_eq!(w(&k1, &k2), 2.0, "key changes: delete + put");
        assert_eq!(w(&k2, &k2b), 1.0, "projected attribute changes: put");
        assert_eq!(w(&k2, &k2), 0.0, "nothing changes");
        assert_eq!(w(&k2, &out), 1.0, "key disappears: delete");
        assert_eq!(w(&out, &out), 0.0, "never indexed");
    }

    #[test]
    fn a_sized_write_bills_the_larger_image() {
        let w = |before_bytes, after_bytes| {
            let op = DynamoOp::SizedWrite {
                before_bytes,
                after_bytes,
            };
            bill(op, true)
        };
        assert_eq!(
            w(0, 700),
            Billed {
                table_write: 1.0,
                ..Billed::default()
            }
        );
        assert_eq!(w(1025, 700).table_write, 2.0, "the larger image");
        assert_eq!(w(700, 2049).table_write, 3.0);
        assert_eq!(w(0, 0).table_write, 1.0, "at least one unit");
    }

    #[test]
    fn failed_conditions_and_reads() {
        let it = item(&[("id", s("a")), ("v", s(&"x".repeat(5000)))]);
        let existing = Some(&it);
        let f = bill(DynamoOp::FailedCondition { existing }, true);
        assert_eq!((f.table_write, f.index_write), (5.0, 0.0));
        let read = |consistent| {
            bill(
                DynamoOp::Read {
                    item: existing,
                    consistent,
                },
                false,
            )
            .read
        };
        assert_eq!(read(true), 2.0);
        assert_eq!(read(false), 1.0);
    }
}
