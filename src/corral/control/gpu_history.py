"""GPU readings kept as a time series, the controller's side: before each read of the active
runs, at most once per ``Settings.gpu_history_every_s`` (``CORRAL_GPU_HISTORY_EVERY``, 60 s
by default, read by ``control.daemon``) by the context's clock, every GPU is recorded in the store
(``corral.store.gpu_history``):

* this machine's, through NVML or the declared inventory (``corral.gpu.sample``, what the
  server's GPU monitoring reads), under its host name;
* each run's node, from the agent status this controller last took of it (the poll it makes
  anyway: utilisation and memory per GPU, no temperature), when that status is fresh: no
  request of its own to any agent.

Readings older than ``Settings.gpu_history_keep_s`` (``CORRAL_GPU_HISTORY_KEEP``, 7 days)
are deleted, at most every :data:`PRUNE_EVERY_S`. The store keeps a GPU to one reading per
interval however many controllers share it. A failed read or write is logged (once per
distinct error) and skipped: it never stops the loop; in ``Controller.serve`` the sample runs
on a daemon thread of its own, one at a time, so a driver that hangs never holds the loop.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from corral import gpu
from corral.control.context import Context, log
from corral.store.gpu_history import HOST, NODE, GpuReading

#: old readings are deleted at most this often (or once per interval, if that is longer)
PRUNE_EVERY_S = 600.0


def _uuid(gid: str) -> str:
    return gid if gid.startswith(("GPU-", "MIG-")) else ""


class GpuHistory:
    """The sampler (``Controller.gpu_history``): :meth:`advance` before each read of the
    active runs."""

    def __init__(
        self,
        ctx: Context,
        *,
        host: str | None = None,
        read_host: Callable[[], list[gpu.GpuSample]] | None = None,
    ):
        self.ctx = ctx
        self.host = host or socket.gethostname()
        self._read_host = read_host or gpu.sample
        self._last: datetime | None = None
        self._pruned: datetime | None = None
        self._busy = False
        #: the last error logged per part (host, nodes, write, prune): each is logged once
        self._errors: dict[str, str] = {}

    @property
    def every_s(self) -> float | None:
        return self.ctx.settings.gpu_history_every_s

    def advance(self, *, background: bool = False) -> None:
        """Sample if an interval has passed since the last sample: here, or with
        ``background`` on a daemon thread of its own (one at a time: a driver that hangs holds
        that thread, never the loop nor the process's exit). Never raises."""
        try:
            every = self.every_s
            if every is None or self._busy:
                return
            now = self.ctx.clock()
            if self._last is not None and (now - self._last).total_seconds() < every:
                return
            self._last = now
            if not background:
                self.sample(now)
                return
            self._busy = True
            threading.Thread(
                target=self._sample_aside, args=(now,), name="corral-gpu-history", daemon=True
            ).start()
        except Exception as e:  # no thread to be had, say: the next interval tries again
            self._busy = False
            self._trouble("schedule", e)

    def _sample_aside(self, now: datetime) -> None:
        try:
            self.sample(now)
        finally:
            self._busy = False

    def sample(self, now: datetime) -> int:
        """Record every GPU's reading as taken at ``now`` and delete what is older than the
        retention when due; how many rows were written. Never raises."""
        readings = [*self._host_readings(), *self._node_readings(now)]
        written = 0
        if readings:
            try:
                written = self.ctx.store.record_gpu_readings(
                    readings, at=now, every_s=self.every_s or 0.0
                )
                self._errors.pop("write", None)
            except Exception as e:
                self._trouble("write", e)
        self._prune(now)
        return written

    def _host_readings(self) -> list[GpuReading]:
        try:
            rows = self._read_host()
            self._errors.pop("host", None)
        except Exception as e:
            self._trouble("host", e)
            return []
        return [
            GpuReading(
                kind=HOST,
                source=self.host,
                attempt=0,
                gpu=g.index,
                uuid=g.uuid,
                name=g.name,
                memory_total_mb=g.memory_total_mb or None,
                util_pct=g.utilization_pct,
                mem_used_mb=g.memory_used_mb,
                temp_c=g.temperature_c,
            )
            for g in rows
        ]

    def _node_readings(self, now: datetime) -> list[GpuReading]:
        """The GPUs of each run's node as its last poll found them, if that was recent (a
        status older than an interval, or than three quiet polls, is not recorded again)."""
        settings = self.ctx.settings
        fresh = max(self.every_s or 0.0, 3 * settings.poll_interval_s)
        out: list[GpuReading] = []
        try:
            # list() copies without letting another thread in: the workers poll concurrently
            for run_id, state in list(self.ctx.polls.items()):
                seen: Any = getattr(state, "seen", None)
                at: datetime | None = getattr(state, "seen_at", None)
                if seen is None or at is None or (now - at) > timedelta(seconds=fresh):
                    continue
                for i, g in enumerate(seen[1].gpus):
                    out.append(
                        GpuReading(
                            kind=NODE,
                            source=run_id,
                            attempt=int(state.attempt),
                            gpu=i,
                            uuid=_uuid(g.id),
                            memory_total_mb=(int(g.memory_total_mb) if g.memory_total_mb else None),
                            util_pct=g.utilization_pct,
                            mem_used_mb=g.memory_used_mb,
                        )
                    )
            self._errors.pop("nodes", None)
        except Exception as e:
            self._trouble("nodes", e)
        return out

    def _prune(self, now: datetime) -> None:
        every = max(PRUNE_EVERY_S, self.every_s or 0.0)
        if self._pruned is not None and (now - self._pruned).total_seconds() < every:
            return
        self._pruned = now
        keep = self.ctx.settings.gpu_history_keep_s
        try:
            gone = self.ctx.store.prune_gpu_history(now - timedelta(seconds=keep))
            self._errors.pop("prune", None)
        except Exception as e:
            self._trouble("prune", e)
            return
        if gone:
            log.debug("GPU history: %d readings older than %.0f s deleted", gone, keep)

    def _trouble(self, part: str, e: Exception) -> None:
        text = f"{type(e).__name__}: {e}"
        if self._errors.get(part) != text:
            self._errors[part] = text
            log.warning("GPU history (%s) skipped: %s", part, text)
