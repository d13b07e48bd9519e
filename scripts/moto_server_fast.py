#!/usr/bin/env python3
"""moto_server for large bursts: moto's own server with three speed fixes to its SQS
backend (moto 5.x), none of which changes what any API call returns.

Stock moto computes every queue attribute on each message sent and on each message
received — including ApproximateNumberOfMessages, ...NotVisible and ...Delayed, each
a scan of the whole queue, and three times over in GetQueueAttributes — and reads the
clock through datetime arithmetic on every message it scans. With 10,000 messages
queued a single SendMessage takes ~0.5 s and a ReceiveMessage of 10 several seconds,
so a 10,000-message burst never drains. Here:

1. the clock is read with time.time() (same value: seconds since the epoch);
2. Queue.attributes leaves out the three message counters except inside
   GetQueueAttributes, which computes the full set once per call (stock: three times);
3. the retention check on each received message reads MessageRetentionPeriod
   directly instead of calling GetQueueAttributes.

Usage: the same arguments as moto_server (`moto_server_fast.py -H 127.0.0.1 -p 5000`).
Used by the benchmark's burst (`bench --moto-server scripts/moto_server_fast.py`); the
tests and the demo run stock moto_server.
"""
import sys
import threading
import time

import moto

if not moto.__version__.startswith("5."):
    sys.exit(
        f"moto_server_fast.py patches moto 5.x internals; this is moto {moto.__version__} "
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

if __name__ == "__main__":
    from moto.server import main

    sys.exit(main())
