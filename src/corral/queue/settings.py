"""Settings of the pool, shared by the controller's ``pool`` provider and the workers.

Every value comes from the environment (``CORRAL_POOL_*``); ``corral worker`` options override
them for one worker. Both sides must agree on the broker and the pool name: the name prefixes
every Redis key and queue of the pool, so several pools (or tests) share one Redis server.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace

from corral.errors import BadInput

ENV_BROKER = "CORRAL_POOL_BROKER"
ENV_NAME = "CORRAL_POOL_NAME"
ENV_PRICE = "CORRAL_POOL_PRICE_PER_GPU_HOUR"
ENV_MAX_RUNTIME = "CORRAL_POOL_MAX_RUNTIME"
ENV_HEARTBEAT = "CORRAL_POOL_HEARTBEAT"
ENV_LOST_AFTER = "CORRAL_POOL_LOST_AFTER"
ENV_START_MARGIN = "CORRAL_POOL_START_MARGIN"
ENV_OUTAGE_GRACE = "CORRAL_POOL_OUTAGE_GRACE"
ENV_SHARED_FILES = "CORRAL_POOL_SHARED_FILES"

DEFAULT_BROKER = "redis://127.0.0.1:6379/0"
DEFAULT_NAME = "corral"
DEFAULT_MAX_RUNTIME_S = 7 * 86400.0
DEFAULT_HEARTBEAT_S = 2.0
DEFAULT_LOST_AFTER_S = 30.0
DEFAULT_START_MARGIN_S = 1800.0
#: a broker outage (a Redis restart, a network cut) shorter than this stops no running job
DEFAULT_OUTAGE_GRACE_S = 120.0

_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,39}$")
_DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(raw: str, source: str) -> float:
    """Seconds from ``"90"``, ``"90s"``, ``"15m"``, ``"12h"`` or ``"7d"``; :class:`BadInput`
    naming ``source`` otherwise."""
    m = _DURATION_RE.match(str(raw).lower())
    value = float(m.group(1)) * _UNITS[m.group(2) or "s"] if m else math.nan
    if not math.isfinite(value) or value <= 0:
        raise BadInput(f"{source}={raw!r}: expected a duration such as 90s, 15m, 12h or 7d")
    return value


def _price(raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise BadInput(f"{ENV_PRICE}={raw!r}: expected USD per GPU-hour such as 1.2 (0 or more)")
    return value


def check_name(name: str, source: str = ENV_NAME) -> str:
    if not _NAME_RE.match(name):
        raise BadInput(
            f"{source}={name!r}: use 1-40 lower-case letters, digits, '-' and '_' "
            "(it prefixes the pool's Redis keys and queues)"
        )
    return name


@dataclass(frozen=True)
class PoolSettings:
    """The pool as the controller and the workers see it."""

    #: the Celery broker, a Redis URL (``rediss://`` for TLS; a password in the URL is never
    #: printed)
    broker_url: str = DEFAULT_BROKER
    #: prefixes every Redis key and queue name of this pool
    name: str = DEFAULT_NAME
    #: what one GPU-hour of the pool costs in budgets and cost accounting (USD)
    price_per_gpu_hour: float = 0.0
    #: the longest run the pool accepts; a job asking for more is refused, one asking for
    #: nothing gets this as its task's time limit; the broker's visibility timeout is longer
    max_runtime_s: float = DEFAULT_MAX_RUNTIME_S
    #: how often a worker and a running attempt say they are alive
    heartbeat_s: float = DEFAULT_HEARTBEAT_S
    #: an attempt whose worker has not said so for this long is lost (its machine is gone)
    lost_after_s: float = DEFAULT_LOST_AFTER_S
    #: time an attempt may take beyond its runtime limit (setup, the agent's start, the final
    #: sync) before the task's soft time limit
    start_margin_s: float = DEFAULT_START_MARGIN_S
    #: how long a running attempt's worker keeps its job going while it cannot reach the
    #: broker (a broker restart or a network cut shorter than this stops nothing); a lost
    #: attempt is recovered only once its worker has surely stopped it (see docs/pool.md)
    outage_grace_s: float = DEFAULT_OUTAGE_GRACE_S
    #: the workers see the controller's files at the same paths (one machine, NFS): jobs run
    #: in their workdir in place; otherwise (the default) the code is shipped to the worker
    shared_files: bool = False

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> PoolSettings:
        env = os.environ if environ is None else environ

        def get(name: str) -> str:
            return env.get(name, "").strip()

        s = cls()
        if get(ENV_BROKER):
            s = replace(s, broker_url=get(ENV_BROKER))
        if get(ENV_NAME):
            s = replace(s, name=check_name(get(ENV_NAME)))
        if get(ENV_SHARED_FILES):
            flag = get(ENV_SHARED_FILES).lower()
            if flag not in ("1", "0", "true", "false", "yes", "no"):
                raise BadInput(f"{ENV_SHARED_FILES}={flag!r}: expected 1 or 0")
            s = replace(s, shared_files=flag in ("1", "true", "yes"))
        if get(ENV_PRICE):
            s = replace(s, price_per_gpu_hour=_price(get(ENV_PRICE)))
        durations: dict[str, float] = {}
        for env_name, field in (
            (ENV_MAX_RUNTIME, "max_runtime_s"),
            (ENV_HEARTBEAT, "heartbeat_s"),
            (ENV_LOST_AFTER, "lost_after_s"),
            (ENV_START_MARGIN, "start_margin_s"),
            (ENV_OUTAGE_GRACE, "outage_grace_s"),
        ):
            if get(env_name):
                durations[field] = parse_duration(get(env_name), env_name)
        return replace(s, **durations).checked()  # type: ignore[arg-type]

    def checked(self) -> PoolSettings:
        if not self.broker_url.startswith(("redis://", "rediss://", "unix://")):
            raise BadInput(
                f"{ENV_BROKER}: the pool's broker must be Redis (redis://host:6379/0, "
                "rediss:// for TLS)"
            )
        check_name(self.name)
        if self.lost_after_s < 2 * self.heartbeat_s:
            raise BadInput(
                f"{ENV_LOST_AFTER} ({self.lost_after_s:g}s) must be at least twice "
                f"{ENV_HEARTBEAT} ({self.heartbeat_s:g}s)"
            )
        if self.outage_grace_s < self.lost_after_s:
            raise BadInput(
                f"{ENV_OUTAGE_GRACE} ({self.outage_grace_s:g}s) must be at least "
                f"{ENV_LOST_AFTER} ({self.lost_after_s:g}s)"
            )
        return self

    @property
    def recovery_fence_s(self) -> float:
        """Seconds after an attempt is declared lost before it counts as gone (and its run is
        recovered): its worker, if it still runs but cannot reach the broker, stops the job
        within ``outage_grace_s`` of its last heartbeat, which was at least ``lost_after_s``
        before the declaration; one heartbeat period more covers the worker's poll."""
        return max(0.0, self.outage_grace_s - self.lost_after_s) + self.heartbeat_s

    @property
    def visibility_timeout_s(self) -> float:
        """The broker's visibility timeout: longer than the longest task the pool runs (its
        hard time limit), so the broker never hands a running attempt to a second worker on
        its own. (If it did, the claim in :mod:`~corral.queue.attempts` would drop it.)"""
        return self.max_runtime_s + self.start_margin_s + 3600.0

    def time_limits(self, max_runtime_s: float | None, grace_s: float) -> tuple[float, float]:
        """(soft, hard) Celery time limits of an attempt: its runtime limit (the pool's when
        the job gives none) plus the start margin; then the grace period and a minute more.
        The controller stops a run at its limit first; these hold when no controller does."""
        runtime = min(max_runtime_s or self.max_runtime_s, self.max_runtime_s)
        soft = runtime + self.start_margin_s
        return soft, soft + grace_s + 60.0
