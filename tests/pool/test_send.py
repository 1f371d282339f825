"""The attempt's task as ``corral.queue.send`` puts it on Redis is the message Celery's own
``send_task`` puts there, on the same list: the workers cannot tell them apart. (A Celery or
kombu upgrade that changes either fails here; the pool's end-to-end tests run every attempt
through this send.)"""

from __future__ import annotations

import json
from typing import Any

import pytest

from corral.queue.app import TASK_NAME, make_app
from corral.queue.client import connect
from corral.queue.keys import Keys, broker_priority
from corral.queue.send import send_task, task_message
from corral.queue.settings import PoolSettings

#: what differs between two sends of one task by design: the process that sent it, the
#: transport's tag of this delivery, Celery's reply address (no result backend reads it)
PER_SEND = {("headers", "origin"), ("properties", "delivery_tag"), ("properties", "reply_to")}


def _taken(client: Any, keys: Keys, queue: str) -> tuple[str, dict[str, Any]]:
    """The one message waiting on ``queue``: its list and the message, removed."""
    full = [(name, client.lrange(name, 0, -1)) for name in keys.queue_lists(queue)]
    waiting = [(name, items) for name, items in full if items]
    assert len(waiting) == 1 and len(waiting[0][1]) == 1, waiting
    name, (raw,) = waiting[0]
    client.delete(name)
    message = json.loads(raw)
    for part, field in PER_SEND:
        assert message[part].pop(field) is not None
    return name, message


@pytest.mark.parametrize("priority", [0, 5, 9])
def test_the_message_and_its_list_are_celerys(pool: PoolSettings, priority: int) -> None:
    keys = Keys(pool.name)
    client = connect(pool)
    queue = keys.queue("L40S", 1)
    limits = pool.time_limits(None, 30.0)
    make_app(pool).send_task(
        TASK_NAME,
        args=["run-1-a1"],
        queue=queue,
        routing_key=queue,
        priority=broker_priority(priority),
        task_id="tid-1",
        soft_time_limit=limits[0],
        time_limit=limits[1],
    )
    celerys = _taken(client, keys, queue)

    message = task_message(
        TASK_NAME,
        "tid-1",
        ["run-1-a1"],
        queue=queue,
        priority=broker_priority(priority),
        soft_time_limit=limits[0],
        time_limit=limits[1],
    )
    send_task(client, keys, message)
    assert _taken(client, keys, queue) == celerys
