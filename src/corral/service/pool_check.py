"""``corral pool check``: what a pool box needs, checked in one go (the Celery guide's
``check``): its GPUs (the NVIDIA driver through NVML, or a declared fake inventory), the
broker (reachable, its latency), the store (reachable, its schema current), the disk under
``CORRAL_HOME`` and the clock (its skew against the broker's: heartbeats, leases and schedules
compare clocks across machines).

Each check is ``ok``, ``warn`` or ``fail`` with one line saying why; a failed check never stops
the others.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Mapping
from typing import Literal

from corral import gpu, paths
from corral.errors import CorralError
from corral.queue.client import connect, safe_url
from corral.queue.settings import PoolSettings
from corral.service.views import View

Level = Literal["ok", "warn", "fail"]
#: free space under CORRAL_HOME below which the disk check warns (fails under a tenth of it)
DISK_WARN_GB = 10.0
#: clock skew against the broker that warns (fails at five times it)
SKEW_WARN_S = 2.0
#: a broker round trip slower than this warns
LATENCY_WARN_MS = 50.0


class Check(View):
    name: str
    level: Level
    detail: str


class CheckReport(View):
    ok: bool
    checks: list[Check]


def _gpus(environ: Mapping[str, str]) -> Check:
    found = gpu.detect(environ)
    if not found:
        return Check(
            name="gpus",
            level="warn",
            detail="no GPU visible (no NVIDIA driver or NVML, or CUDA_VISIBLE_DEVICES hides "
            "them): this box can serve CPU work only (corral worker --cpu-slots N)",
        )
    fake = " (declared: CORRAL_FAKE_GPUS)" if environ.get(gpu.ENV_FAKE_GPUS) else ""
    return Check(name="gpus", level="ok", detail=f"{gpu.describe(found)}{fake}")


def _broker(settings: PoolSettings, clock: Callable[[], float]) -> tuple[Check, Check]:
    client = connect(settings)
    try:
        began = time.perf_counter()
        client.ping()
        latency_ms = (time.perf_counter() - began) * 1000
        seconds, micros = client.time()
        version = str(client.info("server").get("redis_version", "?"))
    finally:
        client.close()
    skew = clock() - (float(seconds) + float(micros) / 1e6)
    level: Level = "warn" if latency_ms > LATENCY_WARN_MS else "ok"
    broker = Check(
        name="broker",
        level=level,
        detail=f"Redis {version} at {safe_url(settings.broker_url)}, {latency_ms:.1f} ms a round trip",
    )
    off = abs(skew)
    clock_level: Level = "fail" if off > 5 * SKEW_WARN_S else "warn" if off > SKEW_WARN_S else "ok"
    said = "ahead of" if skew > 0 else "behind"
    return broker, Check(
        name="clock", level=clock_level, detail=f"{off:.2f} s {said} the broker's clock"
    )


def _store() -> Check:
    from corral.store import Store
    from corral.store.migrate import HEAD

    with Store.open() as store:
        runs = store.count_runs()
        kind, url = store.dialect, store.url
    return Check(name="store", level="ok", detail=f"{kind} at {url}, schema {HEAD}, {runs} runs")


def _disk() -> Check:
    home = paths.home()
    home.mkdir(parents=True, exist_ok=True)
    free_gb = shutil.disk_usage(home).free / 1e9
    level: Level = (
        "fail" if free_gb < DISK_WARN_GB / 10 else "warn" if free_gb < DISK_WARN_GB else "ok"
    )
    return Check(name="disk", level=level, detail=f"{free_gb:.1f} GB free under {home}")


def check(
    settings: PoolSettings,
    environ: Mapping[str, str] | None = None,
    clock: Callable[[], float] = time.time,
) -> CheckReport:
    env = os.environ if environ is None else environ
    out: list[Check] = []
    try:
        out.append(_gpus(env))
    except Exception as exc:
        out.append(Check(name="gpus", level="fail", detail=f"cannot read the GPUs: {exc}"))
    try:
        out.extend(_broker(settings, clock))
    except Exception as exc:
        why = exc.message if isinstance(exc, CorralError) else f"{type(exc).__name__}: {exc}"
        out.append(
            Check(name="broker", level="fail", detail=f"{safe_url(settings.broker_url)}: {why}")
        )
        out.append(Check(name="clock", level="warn", detail="not compared: no broker"))
    try:
        out.append(_store())
    except Exception as exc:
        why = exc.message if isinstance(exc, CorralError) else f"{type(exc).__name__}: {exc}"
        out.append(Check(name="store", level="fail", detail=why))
    try:
        out.append(_disk())
    except OSError as exc:
        out.append(Check(name="disk", level="fail", detail=f"{paths.home()}: {exc.strerror}"))
    return CheckReport(ok=all(c.level != "fail" for c in out), checks=out)
