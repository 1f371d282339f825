"""An attempt's task put on its queue without Celery: the message Celery's ``send_task`` puts
on the pool's Redis (task protocol 2 through kombu's Redis transport), pushed in one LPUSH.

Why: ``corral launch`` sends its run's first attempt itself, and importing Celery and kombu and
building the app was most of what the pool added to a launch before its job's first line
(a quarter of a second on a quiet machine, up to a second on a busy one), for one message.
The workers are Celery's as before: they take this message as one of Celery's own, so
priorities, acks, the visibility timeout, revokes and Flower work as they did (Flower sees
the task when a worker receives it: no "task-sent" event is sent).

``tests/pool/test_send.py`` holds the message and its list to what this Celery and kombu
send, so an upgrade that changes either fails there, not in a pool.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import uuid
from typing import Any

from corral.queue.keys import MAX_PRIORITY, Keys


def task_message(
    task: str,
    task_id: str,
    args: list[Any],
    *,
    queue: str,
    priority: int,
    soft_time_limit: float | None = None,
    time_limit: float | None = None,
) -> dict[str, Any]:
    """The message, as kombu's Redis transport stores it, of Celery's ``send_task(task,
    args, task_id=, queue=, routing_key=queue, priority=, soft_time_limit=, time_limit=)``
    (no result backend: nobody is replied to)."""
    body = [args, {}, {"callbacks": None, "errbacks": None, "chain": None, "chord": None}]
    headers: dict[str, Any] = {
        "lang": "py",
        "task": task,
        "id": task_id,
        "shadow": None,
        "eta": None,
        "expires": None,
        "group": None,
        "group_index": None,
        "retries": 0,
        "timelimit": [time_limit, soft_time_limit],
        "root_id": task_id,
        "parent_id": None,
        "argsrepr": repr(args),
        "kwargsrepr": "{}",
        "origin": f"gen{os.getpid()}@{socket.gethostname()}",
        "ignore_result": None,
        "replaced_task_nesting": 0,
        "stamped_headers": None,
        "stamps": {},
    }
    return {
        "body": base64.b64encode(json.dumps(body).encode()).decode(),
        "content-encoding": "utf-8",
        "content-type": "application/json",
        "headers": headers,
        "properties": {
            "correlation_id": task_id,
            "reply_to": "",
            "delivery_mode": 2,
            "delivery_info": {"exchange": "", "routing_key": queue},
            "priority": priority,
            "body_encoding": "base64",
            "delivery_tag": str(uuid.uuid4()),
        },
    }


def queue_list(keys: Keys, queue: str, priority: int) -> str:
    """The Redis list the workers of ``queue`` take a message of broker ``priority`` from."""
    return keys.queue_lists(queue)[max(0, min(MAX_PRIORITY, priority))]


def send_task(client: Any, keys: Keys, message: dict[str, Any]) -> None:
    """Put ``message`` (:func:`task_message`) on its queue: a worker serving it takes it as
    Celery's ``send_task`` had sent it. The client's Redis errors are raised as they are."""
    props = message["properties"]
    name = queue_list(keys, props["delivery_info"]["routing_key"], int(props["priority"]))
    client.lpush(name, json.dumps(message))
