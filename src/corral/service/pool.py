"""The pool as an operator sees it: ``corral pool status``, and the queue-length hook of
``corral pool watch`` (a command and/or a signed webhook event) that scales workers.

The hook fires for a queue when its numbers change (and at start): ``waiting`` attempts,
``workers``, ``busy`` ones, ``wanted`` (busy + waiting: the workers that would run everything
now) and ``delta`` (wanted - workers: start that many workers when positive; that many idle
ones may go when negative). A command gets them as ``CORRAL_POOL_*`` environment variables;
a webhook gets a ``pool.queue`` JSON event signed like the run webhooks.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from corral.errors import BadInput
from corral.queue.settings import PoolSettings
from corral.queue.status import PoolState, QueueState, read_state
from corral.service.views import View

#: the webhook event of the queue-length hook
EVENT = "pool.queue"


class WorkerView(View):
    name: str
    host: str
    pid: int
    queue: str
    gpu_type: str
    gpus: list[str]
    run_id: str | None
    attempt_key: str | None
    since: float


class QueueView(View):
    queue: str
    gpu_type: str
    gpu_count: int
    workers: int
    busy: int
    waiting: int
    wanted: int
    delta: int


class PoolStatusView(View):
    pool: str
    broker: str
    workers: list[WorkerView]
    queues: list[QueueView]


def _queue_view(q: QueueState) -> QueueView:
    return QueueView(
        queue=q.queue,
        gpu_type=q.gpu_type,
        gpu_count=q.gpu_count,
        workers=q.workers,
        busy=q.busy,
        waiting=q.waiting,
        wanted=q.wanted,
        delta=q.delta,
    )


def _view(state: PoolState) -> PoolStatusView:
    return PoolStatusView(
        pool=state.pool,
        broker=state.broker,
        workers=[
            WorkerView(
                name=w.name,
                host=w.host,
                pid=w.pid,
                queue=w.queue,
                gpu_type=w.gpu_type,
                gpus=list(w.gpus),
                run_id=w.run_id or None,
                attempt_key=w.key or None,
                since=w.started_at,
            )
            for w in state.workers
        ],
        queues=[_queue_view(q) for q in state.queues],
    )


def pool_status(settings: PoolSettings | None = None) -> PoolStatusView:
    return _view(read_state(settings or PoolSettings.from_env()))


# --- the queue-length hook ---------------------------------------------------------------------


@dataclass
class Hook:
    """Where the numbers go: a shell command and/or a webhook URL (signed with ``secret``)."""

    command: str | None = None
    url: str | None = None
    secret: str | None = None
    timeout_s: float = 30.0

    def check(self) -> Hook:
        if not self.command and not self.url:
            raise BadInput("give the hook a --command, a --url, or both")
        if self.url and not self.url.startswith(("http://", "https://")):
            raise BadInput(f"--url {self.url!r}: expected an http:// or https:// URL")
        return self


def hook_env(pool: str, q: QueueView) -> dict[str, str]:
    return {
        "CORRAL_POOL_NAME": pool,
        "CORRAL_POOL_QUEUE": q.queue,
        "CORRAL_POOL_GPU_TYPE": q.gpu_type,
        "CORRAL_POOL_GPU_COUNT": str(q.gpu_count),
        "CORRAL_POOL_WAITING": str(q.waiting),
        "CORRAL_POOL_WORKERS": str(q.workers),
        "CORRAL_POOL_BUSY": str(q.busy),
        "CORRAL_POOL_WANTED": str(q.wanted),
        "CORRAL_POOL_DELTA": str(q.delta),
    }


def _post(hook: Hook, pool: str, q: QueueView, now: float, http: Any) -> str | None:
    from corral.notify.signing import (
        HEADER_DELIVERY,
        HEADER_EVENT,
        HEADER_SIGNATURE,
        HEADER_TIMESTAMP,
        sign,
    )

    delivery = str(uuid.uuid4())
    body = json.dumps(
        {"id": delivery, "type": EVENT, "pool": pool, "at": now, "data": q.to_json()},
        sort_keys=True,
    ).encode()
    stamp = str(int(now))
    headers = {
        "Content-Type": "application/json",
        HEADER_EVENT: EVENT,
        HEADER_DELIVERY: delivery,
        HEADER_TIMESTAMP: stamp,
    }
    if hook.secret:
        headers[HEADER_SIGNATURE] = sign(hook.secret, stamp, body)
    try:
        resp = http.post(hook.url, content=body, headers=headers, timeout=hook.timeout_s)
    except Exception as exc:  # the next change tries again
        return f"POST {hook.url}: {type(exc).__name__}"
    return None if resp.status_code < 300 else f"POST {hook.url}: HTTP {resp.status_code}"


def _run(hook: Hook, pool: str, q: QueueView) -> str | None:
    assert hook.command
    try:
        done = subprocess.run(
            ["bash", "-c", hook.command],
            env={**os.environ, **hook_env(pool, q)},
            timeout=hook.timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return f"the hook command ran over {hook.timeout_s:g}s"
    return None if done.returncode == 0 else f"the hook command exited {done.returncode}"


def watch(
    hook: Hook,
    settings: PoolSettings | None = None,
    *,
    interval_s: float = 10.0,
    once: bool = False,
    say: Callable[[str], None] = print,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
    stop: Callable[[], bool] = lambda: False,
) -> int:
    """Call ``hook`` for each queue whose numbers changed (every queue on the first pass),
    every ``interval_s`` until ``stop()`` (or after one pass with ``once``); returns how many
    calls failed. A failed call is tried again at the next pass."""
    settings = settings or PoolSettings.from_env()
    hook.check()
    http = None
    if hook.url:
        import httpx

        http = httpx.Client(follow_redirects=False)
    last: dict[str, tuple[int, ...]] = {}
    failures = 0
    try:
        while True:
            view = pool_status(settings)
            for q in view.queues:
                numbers = (q.waiting, q.workers, q.busy)
                if last.get(q.queue) == numbers:
                    continue
                errors = []
                if hook.command:
                    errors.append(_run(hook, view.pool, q))
                if hook.url:
                    errors.append(_post(hook, view.pool, q, clock(), http))
                bad = [e for e in errors if e]
                if bad:
                    failures += 1
                    say(f"{q.queue}: {'; '.join(bad)} (tried again next time)")
                    last.pop(q.queue, None)
                else:
                    last[q.queue] = numbers
                    say(
                        f"{q.queue}: {q.waiting} waiting, {q.busy}/{q.workers} workers busy, "
                        f"delta {q.delta:+d}"
                    )
            if once or stop():
                return failures
            sleep(interval_s)
    finally:
        if http is not None:
            http.close()


# --- Flower ------------------------------------------------------------------------------------

#: the secret holding Flower's password (`corral secret set CORRAL_FLOWER_PASSWORD`)
FLOWER_SECRET = "CORRAL_FLOWER_PASSWORD"


def monitor_command(
    settings: PoolSettings | None = None,
    *,
    address: str = "127.0.0.1",
    port: int = 5555,
    user: str = "corral",
) -> tuple[list[str], dict[str, str]]:
    """How to start Flower on the pool with basic auth: the password is the secret
    ``CORRAL_FLOWER_PASSWORD`` (secret store, then environment); BadInput naming it when it is
    not set."""
    from corral.queue.monitor import flower_command
    from corral.secrets import resolve

    password = resolve(FLOWER_SECRET)
    if not password:
        raise BadInput(
            f"Flower runs with a password: set one with `corral secret set {FLOWER_SECRET}`"
        )
    return flower_command(
        settings or PoolSettings.from_env(),
        address=address,
        port=port,
        user=user,
        password=password,
    )
