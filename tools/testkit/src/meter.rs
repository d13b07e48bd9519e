//! Call and capacity accounting as an SDK interceptor: a [`CallMeter`] builds
//! clients that count every API call they make and the DynamoDB capacity it consumed,
//! so tests can assert the cost of a handler path and the benchmark can price it.
//! The adapters know nothing of it: give them a metered client
//! (`DynamoStore::new(meter.dynamodb(&sdk), table)`).
//!
//! Before a DynamoDB call is serialized the interceptor asks for
//! `ReturnConsumedCapacity=INDEXES` (production calls do not), and after it it books
//! the call by operation and the units DynamoDB reported by table and index. A call
//! counts once whatever the SDK retried inside it, as the adapter made it once.

use aws_config::SdkConfig;
use aws_sdk_dynamodb::config::interceptors::{
    BeforeSerializationInterceptorContextMut, FinalizerInterceptorContextRef,
};
use aws_sdk_dynamodb::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_dynamodb::error::BoxError;
use aws_sdk_dynamodb::operation::get_item::{GetItemInput, GetItemOutput};
use aws_sdk_dynamodb::operation::query::{QueryInput, QueryOutput};
use aws_sdk_dynamodb::operation::transact_write_items::{
    TransactWriteItemsInput, TransactWriteItemsOutput,
};
use aws_sdk_dynamodb::operation::update_item::{
    UpdateItemError, UpdateItemInput, UpdateItemOutput,
};
use aws_sdk_dynamodb::types::{ConsumedCapacity, ReturnConsumedCapacity};
use aws_smithy_types::config_bag::{Storable, StoreReplace};
use std::collections::{BTreeMap, BTreeSet};
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
    /// GetItem / UpdateItem on a circuit breaker's table
    /// ([`CallMeter::with_breaker_table`]): per refresh period and per batch, not per
    /// record, so kept out of [`CallCounts::dynamodb_requests`].
    pub breaker_reads: u64,
    pub breaker_writes: u64,
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
enum Call {
    Write,
    Create,
    Read,
    PayloadRead,
    BreakerRead,
    BreakerWrite,
    Query,
    AuditWrite,
    ScheduleCreate,
    ScheduleDelete,
    Send,
}

#[derive(Debug, Default)]
struct State {
    counts: CallCounts,
    payload_tables: BTreeSet<String>,
    breaker_tables: BTreeSet<String>,
}

/// A `$service` client on `$sdk` with the adapters' retry policy, booking on `$meter`.
macro_rules! metered {
    ($service:ident, $meter:expr, $sdk:expr) => {
        $service::Client::from_conf(
            $service::config::Builder::from($sdk)
                .retry_config(aws::clients::retry_config())
                .interceptor(Tap($meter.clone()))
                .build(),
        )
    };
}

/// Shared counters: every client built by one meter (or its clones) books here.
#[derive(Debug, Clone, Default)]
pub struct CallMeter {
    inner: Arc<Mutex<State>>,
}

impl CallMeter {
    pub fn new() -> Self {
        Self::default()
    }

    /// `GetItem`s on `table` count as payload reads (the payloads table).
    pub fn with_payloads_table(self, table: impl Into<String>) -> Self {
        self.lock().payload_tables.insert(table.into());
        self
    }

    /// `GetItem`s and `UpdateItem`s on `table` count as the circuit breaker's
    /// (`breaker_reads`, `breaker_writes`), not as state-item calls.
    pub fn with_breaker_table(self, table: impl Into<String>) -> Self {
        self.lock().breaker_tables.insert(table.into());
        self
    }

    /// The counter of an item call on `table`: `breaker` on a breaker's table, else
    /// `special` when `is_special` (an audit item, a payload), else `state`.
    fn item_call(
        &self,
        table: Option<&String>,
        is_special: bool,
        [breaker, special, state]: [Call; 3],
    ) -> Call {
        if table.is_some_and(|t| self.lock().breaker_tables.contains(t)) {
            breaker
        } else if is_special {
            special
        } else {
            state
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A DynamoDB client on `sdk` (the adapters' retry policy) whose calls this
    /// meter counts.
    pub fn dynamodb(&self, sdk: &SdkConfig) -> aws_sdk_dynamodb::Client {
        metered!(aws_sdk_dynamodb, self, sdk)
    }

    /// The three clients of a function, metered.
    pub fn clients(&self, sdk: &SdkConfig) -> aws::clients::Clients {
        aws::clients::Clients {
            dynamodb: self.dynamodb(sdk),
            sqs: self.sqs(sdk),
            scheduler: self.scheduler(sdk),
        }
    }

    /// An SQS client on `sdk` whose `SendMessage`s this meter counts.
    pub fn sqs(&self, sdk: &SdkConfig) -> aws_sdk_sqs::Client {
        metered!(aws_sdk_sqs, self, sdk)
    }

    /// A Scheduler client on `sdk` whose creates and deletes this meter counts.
    pub fn scheduler(&self, sdk: &SdkConfig) -> aws_sdk_scheduler::Client {
        metered!(aws_sdk_scheduler, self, sdk)
    }

    fn count(&self, call: Call) {
        let mut s = self.lock();
        let c = &mut s.counts;
        let slot = match call {
            Call::Write => &mut c.writes,
            Call::Create => &mut c.creates,
            Call::Read => &mut c.reads,
            Call::PayloadRead => &mut c.payload_reads,
            Call::BreakerRead => &mut c.breaker_reads,
            Call::BreakerWrite => &mut c.breaker_writes,
            Call::Query => &mut c.queries,
            Call::AuditWrite => &mut c.audit_writes,
            Call::ScheduleCreate => &mut c.schedule_creates,
            Call::ScheduleDelete => &mut c.schedule_deletes,
            Call::Send => &mut c.sends,
        };
        *slot += 1;
    }

    fn failed_condition(&self) {
        self.lock().counts.failed_conditions += 1;
    }

    /// Adds consumed capacity as read or write units. With `INDEXES`, DynamoDB
    /// reports the table and each index apart; when only a total is reported (moto),
    /// the total is booked on the table.
    fn capacity<'a>(&self, consumed: impl IntoIterator<Item = &'a ConsumedCapacity>, write: bool) {
        let mut s = self.lock();
        let c = &mut s.counts;
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
            let global = cc.global_secondary_indexes().into_iter().flatten();
            let local = cc.local_secondary_indexes().into_iter().flatten();
            for (name, ix) in global.chain(local) {
                add(
                    format!("{table}/{name}"),
                    ix.capacity_units().unwrap_or(0.0),
                );
            }
        }
    }

    pub fn snapshot(&self) -> CallCounts {
        self.lock().counts.clone()
    }

    pub fn reset(&self) {
        self.lock().counts = CallCounts::default();
    }
}

/// What the interceptor learnt of a DynamoDB call from its input, kept in the
/// call's configuration bag until the call ends (the input is gone by then).
#[derive(Debug, Clone, Copy)]
struct Booking(Call);

impl Storable for Booking {
    type Storer = StoreReplace<Self>;
}

/// The interceptor a [`CallMeter`]'s clients carry.
#[derive(Debug)]
struct Tap(CallMeter);

/// The audit writer's items are keyed by transaction and `audit_key`.
const AUDIT_KEY: &str = "audit_key";

impl Intercept for Tap {
    fn name(&self) -> &'static str {
        "CallMeter"
    }

    fn modify_before_serialization(
        &self,
        context: &mut BeforeSerializationInterceptorContextMut<'_>,
        _runtime_components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let indexes = Some(ReturnConsumedCapacity::Indexes);
        let input = context.input_mut();
        let meter = &self.0;
        let call = if let Some(i) = input.downcast_mut::<UpdateItemInput>() {
            i.return_consumed_capacity = indexes;
            let audit = i.key.as_ref().is_some_and(|k| k.contains_key(AUDIT_KEY));
            let calls = [Call::BreakerWrite, Call::AuditWrite, Call::Write];
            Some(meter.item_call(i.table_name.as_ref(), audit, calls))
        } else if let Some(i) = input.downcast_mut::<GetItemInput>() {
            i.return_consumed_capacity = indexes;
            let payload = i
                .table_name
                .as_ref()
                .is_some_and(|t| meter.lock().payload_tables.contains(t));
            let calls = [Call::BreakerRead, Call::PayloadRead, Call::Read];
            Some(meter.item_call(i.table_name.as_ref(), payload, calls))
        } else if let Some(i) = input.downcast_mut::<QueryInput>() {
            i.return_consumed_capacity = indexes;
            Some(Call::Query)
        } else if let Some(i) = input.downcast_mut::<TransactWriteItemsInput>() {
            i.return_consumed_capacity = indexes;
            Some(Call::Create)
        } else if input
            .downcast_ref::<aws_sdk_sqs::operation::send_message::SendMessageInput>()
            .is_some()
        {
            Some(Call::Send)
        } else if input
            .downcast_ref::<aws_sdk_scheduler::operation::create_schedule::CreateScheduleInput>()
            .is_some()
        {
            Some(Call::ScheduleCreate)
        } else if input
            .downcast_ref::<aws_sdk_scheduler::operation::delete_schedule::DeleteScheduleInput>()
            .is_some()
        {
            Some(Call::ScheduleDelete)
        } else {
            None
        };
        if let Some(call) = call {
            cfg.interceptor_state().store_put(Booking(call));
        }
        Ok(())
    }

    fn read_after_execution(
        &self,
        context: &FinalizerInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let Some(Booking(call)) = cfg.load::<Booking>().copied() else {
            return Ok(());
        };
        let meter = &self.0;
        meter.count(call);
        match context.output_or_error() {
            Some(Ok(out)) => {
                if let Some(o) = out.downcast_ref::<UpdateItemOutput>() {
                    meter.capacity(o.consumed_capacity(), true);
                } else if let Some(o) = out.downcast_ref::<TransactWriteItemsOutput>() {
                    meter.capacity(o.consumed_capacity(), true);
                } else if let Some(o) = out.downcast_ref::<GetItemOutput>() {
                    meter.capacity(o.consumed_capacity(), false);
                } else if let Some(o) = out.downcast_ref::<QueryOutput>() {
                    meter.capacity(o.consumed_capacity(), false);
                }
            }
            Some(Err(e)) => {
                // A failed condition still consumes write capacity; DynamoDB does not
                // report it on the error, so it is not booked.
                let failed = e
                    .as_operation_error()
                    .and_then(|e| e.downcast_ref::<UpdateItemError>())
                    .is_some_and(UpdateItemError::is_conditional_check_failed_exception);
                if failed && call != Call::BreakerWrite {
                    meter.failed_condition();
                }
            }
            None => {}
        }
        Ok(())
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
