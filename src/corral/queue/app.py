"""The pool's Celery app: one per pool name, configured for long GPU jobs.

* ``worker_prefetch_multiplier=1`` and ``worker_disable_prefetch``: a worker takes the next
  attempt only when it is free, so the highest-priority waiting attempt gets the next GPU;
* ``task_acks_late``: an attempt is acked when it ends, not when it starts;
* ``worker_max_tasks_per_child=1``: a fresh process for every attempt;
* ``visibility_timeout`` (Redis) longer than the longest run the pool accepts
  (``PoolSettings.visibility_timeout_s``): Redis re-delivers an unacked task only after it,
  and the attempt's claim drops such a re-delivery anyway;
* ``task_reject_on_worker_lost=False``: a task whose process died is acked, not re-queued:
  the controller recovers the run as a new attempt from its checkpoint (a lost machine);
* priorities 0-9 on Redis (``queue_order_strategy="priority"``), first come first served
  within one priority;
* no result backend: an attempt's state is its record (:mod:`corral.queue.attempts`).

Every key, queue and broadcast exchange is named after the pool, so pools and tests can share
a Redis server.
"""

from __future__ import annotations

from typing import Any

from corral.queue.keys import PRIORITY_STEPS, Keys
from corral.queue.settings import PoolSettings

#: the task that runs one attempt (defined in :mod:`corral.queue.tasks`)
TASK_NAME = "corral.run_attempt"


def make_app(settings: PoolSettings) -> Any:
    """A Celery app for ``settings``' pool (Celery imported here, not at module import).
    ProviderError naming the extra when Celery is missing."""
    try:
        from celery import Celery
    except ImportError:
        from corral.errors import ProviderError
        from corral.queue.client import EXTRA_HINT

        raise ProviderError(f"the worker pool needs the queue extra: {EXTRA_HINT}") from None

    keys = Keys(settings.name)
    app = Celery(f"corral-{settings.name}", broker=settings.broker_url, set_as_current=False)
    app.conf.update(
        broker_connection_retry_on_startup=True,
        broker_transport_options={
            "visibility_timeout": settings.visibility_timeout_s,
            "queue_order_strategy": "priority",
            "priority_steps": list(PRIORITY_STEPS),
            "global_keyprefix": keys.celery_prefix,
        },
        result_backend=None,
        task_ignore_result=True,
        task_acks_late=True,
        task_reject_on_worker_lost=False,
        task_acks_on_failure_or_timeout=True,
        task_default_queue=f"{settings.name}.default",
        task_default_exchange=f"{settings.name}.default",
        task_serializer="json",
        accept_content=["json"],
        worker_prefetch_multiplier=1,
        worker_disable_prefetch=True,
        worker_max_tasks_per_child=1,
        worker_concurrency=1,
        worker_hijack_root_logger=False,
        worker_send_task_events=True,
        control_exchange=f"{settings.name}.control",
        event_exchange=f"{settings.name}.events",
        worker_cancel_long_running_tasks_on_connection_loss=False,
    )
    return app
