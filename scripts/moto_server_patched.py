#!/usr/bin/env python3
"""The local stack's AWS: moto's own server (moto 5.x) with fixes that make it keep
the promises of DynamoDB it breaks, and speed fixes to its SQS backend. None of them
changes what a call answers when calls do not overlap (bench/tests/moto_fast.rs and
shared/aws/tests/moto_patched.rs compare answers with stock moto).

DynamoDB (correctness):

1. Each DynamoDB and DynamoDB Streams request runs alone (one lock). Stock moto's
   server is threaded and its conditional writes check, then write: two concurrent
   conditional UpdateItems on one item can both pass their condition.
2. A cancelled TransactWriteItems undoes only its own items. Stock moto deep-copies
   every table the transaction touches (O(table size) per call) and, when the
   transaction is cancelled, puts the copies back: any write another request made to
   those tables in between is erased, and the table's stream shard is replaced by its
   copy, so every stream reader's iterator points at a shard nobody appends to any
   more (the audit writer stops seeing changes). Here the transaction snapshots the
   items it touches and the stream's length, and a cancellation puts back those items
   and drops the stream records it wrote.

EventBridge Scheduler (correctness):

6. ListSchedules pages survive deletions. Stock moto's page token names the first
   schedule of the next page; once that schedule is deleted (a one-time schedule
   deletes itself after it fires) the next page fails with InvalidToken, so a
   listing of a busy group fails again and again. AWS's tokens do not. Here the
   token names the last schedule returned and the next page starts after it, in
   the same order (newest first).

SQS FIFO (correctness):

7. MessageDeduplicationId (explicit, or the body's SHA-256 with content-based
   deduplication) deduplicates for 5 minutes from the first successful send, as SQS
   does, even after that message was received and deleted; with DeduplicationScope
   messageGroup (high-throughput FIFO) only within the message group. Stock moto
   compares only with the messages still in the queue (a send after the first was
   deleted is delivered again) and across the whole queue whatever the scope.
   MOTO_SQS_DEDUPLICATION_SECONDS shortens the window for tests (default 300, SQS's).

SQS (speed): stock moto computes every queue attribute on each message sent and on
each message received — including ApproximateNumberOfMessages, ...NotVisible and
...Delayed, each a scan of the whole queue, and three times over in
GetQueueAttributes — and reads the clock through datetime arithmetic on every message
it scans. With 10,000 messages queued a single SendMessage takes ~0.5 s and a
ReceiveMessage of 10 several seconds, so a 10,000-message burst never drains. Here:

3. the clock is read with time.time() (same value: seconds since the epoch);
4. Queue.attributes leaves out the three message counters except inside
   GetQueueAttributes, which computes the full set once per call (stock: three times);
5. the retention check on each received message reads MessageRetentionPeriod
   directly instead of calling GetQueueAttributes.

Usage: the same arguments as moto_server (`moto_server_patched.py -H 127.0.0.1 -p 5000`).
The local stack, the tests and the benchmarks run it (testkit::moto::MotoServer::PROGRAM).
"""
import sys
import threading
import time

import moto

if not moto.__version__.startswith("5."):
    sys.exit(
        f"moto_server_patched.py patches moto 5.x internals; this is moto {moto.__version__} "
        "(scripts/tools.sh installs moto[server]>=5.1,<6)"
    )

from moto.core import utils as core_utils
from moto.core.utils import camelcase_to_underscores
import moto.sqs.models as sqs

_datetime_unix_time = core_utils.unix_time


def unix_time(dt=None):
    return time.time() if dt is None else _datetime_unix_time(dt)


def unix_time_millis(dt=None):
    return unix_time(dt) * 1000.0


sqs.unix_time = unix_time
sqs.unix_time_millis = unix_time_millis

COUNTERS = frozenset(
    [
        "ApproximateNumberOfMessages",
        "ApproximateNumberOfMessagesNotVisible",
        "ApproximateNumberOfMessagesDelayed",
    ]
)
_full_attributes = sqs.Queue.attributes.fget
_in_get_queue_attributes = threading.local()


def _attributes(self):
    full = getattr(_in_get_queue_attributes, "queues", {}).get(id(self))
    if full is not None:
        return full
    # moto's Queue.attributes, without the three counters.
    result = {}
    names = [a for a in self.BASE_ATTRIBUTES if a not in COUNTERS]
    if self.fifo_queue:
        names += self.FIFO_ATTRIBUTES
    if self.kms_master_key_id:
        names += self.KMS_ATTRIBUTES
    for name in names:
        result[name] = getattr(self, camelcase_to_underscores(name))
    if self.policy:
        result["Policy"] = self.policy
    if self.redrive_policy:
        result["RedrivePolicy"] = sqs.json.dumps(self.redrive_policy)
    for key in result:
        if isinstance(result[key], bool):
            result[key] = str(result[key]).lower()
    return result


sqs.Queue.attributes = property(_attributes)
_get_queue_attributes = sqs.SQSBackend.get_queue_attributes


def get_queue_attributes(self, queue_name, attribute_names):
    queue = self.get_queue(queue_name)
    queues = getattr(_in_get_queue_attributes, "queues", None)
    if queues is None:
        queues = _in_get_queue_attributes.queues = {}
    queues[id(queue)] = _full_attributes(queue)
    try:
        return _get_queue_attributes(self, queue_name, attribute_names)
    finally:
        queues.pop(id(queue), None)


sqs.SQSBackend.get_queue_attributes = get_queue_attributes


def is_message_valid_based_on_retention_period(self, queue_name, message):
    retention_period = self.get_queue(queue_name).message_retention_period
    return retention_period + message.sent_timestamp / 1000 > unix_time()


sqs.SQSBackend.is_message_valid_based_on_retention_period = (
    is_message_valid_based_on_retention_period
)

# 7. FIFO deduplication: 5 minutes from the first send, deleted or not, per scope.
import os

DEDUPLICATION_MS = 1000 * int(
    os.environ.get("MOTO_SQS_DEDUPLICATION_SECONDS", sqs.DEDUPLICATION_TIME_IN_SECONDS)
)
_stock_add_message = sqs.Queue.add_message
_DEDUPLICATION = threading.Lock()


def add_message(self, message):
    dedup_id = message.deduplication_id
    if not (self.fifo_queue and dedup_id):
        return _stock_add_message(self, message)
    group = message.group_id if self.deduplication_scope == "messageGroup" else None
    sent = message.sent_timestamp
    with _DEDUPLICATION:
        first_sent = self.__dict__.setdefault("_first_sent", {})
        if len(first_sent) > 10_000:
            for key in [k for k, t in first_sent.items() if sent - t >= DEDUPLICATION_MS]:
                del first_sent[key]
        first = first_sent.get((group, dedup_id))
        if first is not None and sent - first < DEDUPLICATION_MS:
            return  # accepted, never delivered
        first_sent[(group, dedup_id)] = sent
    # Stock moto's own check (the queue's messages only, whatever the scope) is
    # skipped: the id is hidden from it while the message is added.
    message.deduplication_id = None
    try:
        return _stock_add_message(self, message)
    finally:
        message.deduplication_id = dedup_id


sqs.Queue.add_message = add_message

# --- DynamoDB -----------------------------------------------------------------------

import copy

import moto.dynamodb.models as ddb_models
from moto.dynamodb.exceptions import (
    ConditionalCheckFailed,
    MockValidationException,
    MultipleTransactionsException,
    TooManyTransactionsException,
    TransactionCanceledException,
    TransactWriteSingleOpException,
)
from moto.dynamodb.responses import DynamoHandler
from moto.dynamodbstreams.responses import DynamoDBStreamsHandler

for _name in ("transact_write_items", "get_item", "put_item", "delete_item", "get_table"):
    if not hasattr(ddb_models.DynamoDBBackend, _name):
        sys.exit(f"moto_server_patched.py: DynamoDBBackend.{_name} not found in moto {moto.__version__}")

# 1. One DynamoDB request at a time.
_DYNAMODB = threading.RLock()


def _locked(call_action):
    def call(self):
        with _DYNAMODB:
            return call_action(self)

    return call


DynamoHandler.call_action = _locked(DynamoHandler.call_action)
DynamoDBStreamsHandler.call_action = _locked(DynamoDBStreamsHandler.call_action)

# 2. A cancelled transaction undoes only its own items.
_stock_transact = ddb_models.DynamoDBBackend.transact_write_items


def _target(backend, op_type, op):
    """(table name, key) of one transaction item; None when stock moto must decide."""
    table_name = op.get("TableName")
    if not table_name or table_name not in backend.tables:
        return None
    table = backend.tables[table_name]
    if op_type == "Put":
        attrs = op.get("Item", {})
        if table.hash_key_attr not in attrs:
            return None
        key = {table.hash_key_attr: attrs[table.hash_key_attr]}
        if table.range_key_attr is not None:
            if table.range_key_attr not in attrs:
                return None
            key[table.range_key_attr] = attrs[table.range_key_attr]
        return table_name, key
    key = op.get("Key")
    return (table_name, key) if key else None


def transact_write_items(self, transact_items):
    targets = []
    for item in transact_items:
        if len(item) != 1:
            return _stock_transact(self, transact_items)
        op_type, op = next(iter(item.items()))
        t = _target(self, op_type, op)
        if t is None:
            # Malformed: stock moto raises the validation error it always did.
            return _stock_transact(self, transact_items)
        targets.append(t)
    # Snapshot the items this transaction touches and the length of each touched
    # table's stream (the lock keeps every other request out meanwhile).
    before = []
    for table_name, key in targets:
        current = self.get_item(table_name, key)
        before.append((table_name, key, copy.deepcopy(current.to_json()["Attributes"]) if current else None))
    streams = {}
    for table_name, _ in targets:
        shard = getattr(self.tables[table_name], "stream_shard", None)
        if shard is not None:
            streams[table_name] = (shard, len(shard.items))
    real_tables = dict(self.tables)

    def rollback():
        # The tables stock moto put back are its copies: keep the real ones.
        self.tables.update(real_tables)
        for table_name, key, attrs in before:
            if attrs is None:
                if self.get_item(table_name, key) is not None:
                    self.delete_item(table_name, key)
            else:
                self.put_item(table_name, attrs)
        for table_name, (shard, length) in streams.items():
            self.tables[table_name].stream_shard = shard
            del shard.items[length:]

    # Stock moto without its whole-table copies: deepcopy of a Table returns the
    # table itself while the transaction runs, so its "restore" is a no-op.
    saved = ddb_models.Table.__deepcopy__ if hasattr(ddb_models.Table, "__deepcopy__") else None
    ddb_models.Table.__deepcopy__ = lambda table, memo: table
    try:
        _stock_transact(self, transact_items)
    except (TransactionCanceledException, MultipleTransactionsException, MockValidationException,
            TooManyTransactionsException, TransactWriteSingleOpException, ConditionalCheckFailed):
        rollback()
        raise
    finally:
        if saved is None:
            del ddb_models.Table.__deepcopy__
        else:
            ddb_models.Table.__deepcopy__ = saved


ddb_models.DynamoDBBackend.transact_write_items = transact_write_items

# --- EventBridge Scheduler: pages that survive deletions (6) ------------------------

import base64
import json

import moto.scheduler.models as scheduler_models
from moto.utilities.paginator import InvalidToken as _InvalidToken


def _schedule_order(schedule):
    return (-schedule.creation_date, schedule.arn)


def list_schedules(self, group_names, state, name_prefix=None, max_results=None, next_token=None):
    results = []
    for group in self.schedule_groups.values():
        if not group_names or group.name in group_names:
            for schedule in group.schedules.values():
                if not state or schedule.state == state:
                    if not name_prefix or schedule.name.startswith(name_prefix):
                        results.append(schedule)
    results.sort(key=_schedule_order)
    if next_token:
        try:
            after = json.loads(base64.b64decode(next_token))
            after = (float(after[0]), str(after[1]))
        except (ValueError, TypeError, IndexError):
            raise _InvalidToken("Invalid token")
        results = [s for s in results if _schedule_order(s) > after]
    limit = max_results or 50
    page = results[:limit]
    token = None
    if len(results) > limit:
        last = _schedule_order(page[-1])
        token = base64.b64encode(json.dumps([last[0], last[1]]).encode()).decode()
    return page, token


scheduler_models.EventBridgeSchedulerBackend.list_schedules = list_schedules

if __name__ == "__main__":
    from moto.server import main

    sys.exit(main())
