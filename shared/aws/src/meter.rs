//! Call and capacity accounting: every adapter records the API calls it makes and
//! the DynamoDB capacity they consumed (`ReturnConsumedCapacity=INDEXES`), so tests
//! can assert the cost of a handler path and the benchmark can price it.

use aws_sdk_dynamodb::types::ConsumedCapacity;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

/// Capacity units consumed on one table or index.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Units {
    pub read: f64,
    pub write: f64,
}

/// A snapshot of the calls made through adapters sharing one [`CallMeter`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CallCounts {
    /// Conditional writes of the state item (UpdateItem), including failed ones.
    pub writes: u64,
    /// Of `writes`, those whose condition failed.
    pub failed_conditions: u64,
    /// Conditional creates (one TransactWriteItems of record + payload each).
    pub creates: u64,
    /// GetItem of a state item.
    pub reads: u64,
    /// GetItem of a payload.
    pub payload_reads: u64,
    /// Query pages on the reconciler index.
    pub queries: u64,
    /// UpdateItem of audit items (one per group of entries: a handler run).
    pub audit_writes: u64,
    pub schedule_creates: u64,
    pub schedule_deletes: u64,
    /// SQS SendMessage calls (requests, retry events, DLQ copies).
    pub sends: u64,
    /// Capacity by table name, and by `table/index` for secondary indexes.
    pub capacity: BTreeMap<String, Units>,
}

impl CallCounts {
    /// Write units over every table and index.
    pub fn total_write_units(&self) -> f64 {
        self.capacity.values().map(|u| u.write).sum()
    }

    /// Read units over every table and index.
    pub fn total_read_units(&self) -> f64 {
        self.capacity.values().map(|u| u.read).sum()
    }

    /// DynamoDB requests (every kind counted above).
    pub fn dynamodb_requests(&self) -> u64 {
        self.writes
            + self.creates
            + self.reads
            + self.payload_reads
            + self.queries
            + self.audit_writes
    }
}

/// Which counter a call increments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Call {
    Write,
    FailedCondition,
    Create,
    Read,
    PayloadRead,
    Query,
    AuditWrite,
    ScheduleCreate,
    ScheduleDelete,
    Send,
}

/// Shared counters (clone it into every adapter of one function or test).
#[derive(Debug, Clone, Default)]
pub struct CallMeter {
    inner: Arc<Mutex<CallCounts>>,
}

impl CallMeter {
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, CallCounts> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn count(&self, call: Call) {
        let mut c = self.lock();
        let slot = match call {
            Call::Write => &mut c.writes,
            Call::FailedCondition => &mut c.failed_conditions,
            Call::Create => &mut c.creates,
            Call::Read => &mut c.reads,
            Call::PayloadRead => &mut c.payload_reads,
            Call::Query => &mut c.queries,
            Call::AuditWrite => &mut c.audit_writes,
            Call::ScheduleCreate => &mut c.schedule_creates,
            Call::ScheduleDelete => &mut c.schedule_deletes,
            Call::Send => &mut c.sends,
        };
        *slot += 1;
    }

    /// Adds consumed capacity as read or write units. With `INDEXES`, DynamoDB
    /// reports the table and each index apart; when only a total is reported (moto),
    /// the total is booked on the table.
    pub fn capacity<'a>(
        &self,
        consumed: impl IntoIterator<Item = &'a ConsumedCapacity>,
        write: bool,
    ) {
        let mut c = self.lock();
        for cc in consumed {
            let table = cc.table_name().unwrap_or("?").to_owned();
            let mut add = |key: String, units: f64| {
                let u = c.capacity.entry(key).or_default();
                if write {
                    u.write += units;
                } else {
                    u.read += units;
                }
            };
            let split = cc.table().and_then(|t| t.capacity_units());
            match split {
                Some(t) => add(table.clone(), t),
                None => add(table.clone(), cc.capacity_units().unwrap_or(0.0)),
            }
            for (name, ix) in cc.global_secondary_indexes().into_iter().flatten() {
                add(
                    format!("{table}/{name}"),
                    ix.capacity_units().unwrap_or(0.0),
                );
            }
            for (name, ix) in cc.local_secondary_indexes().into_iter().flatten() {
                add(
                    format!("{table}/{name}"),
                    ix.capacity_units().unwrap_or(0.0),
                );
            }
        }
    }

    pub fn snapshot(&self) -> CallCounts {
        self.lock().clone()
    }

    pub fn reset(&self) {
        *self.lock() = CallCounts::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_dynamodb::types::Capacity;

    #[test]
    fn capacity_is_booked_by_table_and_index() {
        let m = CallMeter::new();
        let split = ConsumedCapacity::builder()
            .table_name("tx")
            .capacity_units(3.0)
            .table(Capacity::builder().capacity_units(1.0).build())
            .global_secondary_indexes(
                "reconcile-index",
                Capacity::builder().capacity_units(2.0).build(),
            )
            .build();
        let total_only = ConsumedCapacity::builder()
            .table_name("tx")
            .capacity_units(0.5)
            .build();
        m.capacity(&[split], true);
        m.capacity(&[total_only], false);
        m.count(Call::Write);
        let s = m.snapshot();
        assert_eq!(
            s.capacity["tx"],
            Units {
                read: 0.5,
                write: 1.0
            }
        );
        assert_eq!(s.capacity["tx/reconcile-index"].write, 2.0);
        assert_eq!(s.total_write_units(), 3.0);
        assert_eq!(s.writes, 1);
        m.reset();
        assert_eq!(m.snapshot(), CallCounts::default());
    }
}
