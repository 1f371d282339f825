"""Running the controller: in the foreground (``corral controller``), or in the background,
started by the CLI when none runs for this CORRAL_HOME (one per home, guarded by a lock)."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from corral import paths
from corral.control.lock import ControllerLock, running_pid
from corral.control.nudges import wake
from corral.errors import ControllerError
from corral.files import write_json_atomic

LOG_FILE = "controller.log"
ENV_FILE = "controller.env.json"
#: what a controller (and the agents it launches) takes from its environment: a CLI whose
#: values differ restarts the background controller so that the latest one wins
CONTROLLER_ENV = (
    "CORRAL_FAKE_GPUS",
    "CORRAL_LOCAL_PRICE_PER_HOUR",
    "CORRAL_PROVIDERS",
    "CORRAL_FAKE_CLOUD",
    "CORRAL_DATABASE_URL",
    "CORRAL_POOL_BROKER",
    "CORRAL_POOL_NAME",
    "CORRAL_POOL_PRICE_PER_GPU_HOUR",
    "CORRAL_POOL_MAX_RUNTIME",
    "CORRAL_POLL_INTERVAL",
    "CORRAL_QUIET_POLL_INTERVAL",
    "CORRAL_GANG_TIMEOUT",
    "CORRAL_GANG_REPAIR",
    "CORRAL_BELL",
    "CORRAL_BELL_ADVERTISE",
    "CORRAL_GPU_HISTORY_EVERY",
    "CORRAL_GPU_HISTORY_KEEP",
    "CUDA_VISIBLE_DEVICES",
    "PATH",
    "VIRTUAL_ENV",
)


def env_snapshot(environ: dict[str, str] | None = None) -> dict[str, str | None]:
    env = os.environ if environ is None else environ
    return {name: env.get(name) for name in CONTROLLER_ENV}


def _recorded_env(home: Path) -> dict[str, str | None] | None:
    import json

    try:
        return json.loads((home / ENV_FILE).read_text())
    except (OSError, ValueError):
        return None


ENV_LEASE = "CORRAL_CONTROLLER_LEASE"


def lease_default(default: float) -> float:
    """``CORRAL_CONTROLLER_LEASE`` (seconds a controller's lease on a run lasts) if set."""
    raw = os.environ.get(ENV_LEASE)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = 0.0
    if value < 1.0:
        raise ControllerError(f"{ENV_LEASE}={raw!r}: expected seconds, 1 or more")
    return value


ENV_IDLE_EXIT = "CORRAL_CONTROLLER_IDLE_EXIT"
#: seconds between two looks at a quiet RUNNING run (``Settings.poll_interval_s``)
ENV_POLL_INTERVAL = "CORRAL_POLL_INTERVAL"
DEFAULT_IDLE_EXIT_S = 600.0


def poll_interval_default(name: str = ENV_POLL_INTERVAL) -> float | None:
    """``CORRAL_POLL_INTERVAL`` (or the interval ``name``) in seconds (None: unset);
    ControllerError naming a bad one."""
    from corral.control.context import interval_env

    return interval_env(name)


#: seconds a gang (a multi-node attempt) may take to have every node ready
ENV_GANG_TIMEOUT = "CORRAL_GANG_TIMEOUT"
#: ``off``: a gang that lost nodes is relaunched whole rather than repaired
ENV_GANG_REPAIR = "CORRAL_GANG_REPAIR"


def gang_repair_default() -> bool:
    """``CORRAL_GANG_REPAIR`` (on, the default, or off); ControllerError naming a bad one."""
    raw = os.environ.get(ENV_GANG_REPAIR, "").strip().lower()
    if raw in ("", "on", "1", "true", "yes"):
        return True
    if raw in ("off", "0", "false", "no"):
        return False
    raise ControllerError(f"{ENV_GANG_REPAIR}={raw!r}: expected on or off")


ENV_GPU_HISTORY_EVERY = "CORRAL_GPU_HISTORY_EVERY"
ENV_GPU_HISTORY_KEEP = "CORRAL_GPU_HISTORY_KEEP"
#: what turns the GPU history off (``CORRAL_GPU_HISTORY_EVERY=off``)
HISTORY_OFF = ("off", "none", "0")


def _history_duration(name: str, raw: str) -> float:
    from corral.spec.units import parse_duration

    try:
        value = float(parse_duration(raw))
    except (TypeError, ValueError):
        value = 0.0
    if not value >= 1.0 or value == float("inf"):
        raise ControllerError(
            f"{name}={raw!r}: expected a duration of 1 s or more (90s, 15m, 12h, 7d or seconds)"
        )
    return value


def history_settings(
    every_s: float | None, keep_s: float, environ: Mapping[str, str] | None = None
) -> tuple[float | None, float]:
    """(seconds between two readings of a GPU in the GPU history, None: no history; seconds
    a reading is kept): ``CORRAL_GPU_HISTORY_EVERY`` (``off``: none) and
    ``CORRAL_GPU_HISTORY_KEEP`` where set, else ``every_s`` and ``keep_s``; ControllerError
    naming the variable when one is not a duration."""
    env = os.environ if environ is None else environ
    raw = (env.get(ENV_GPU_HISTORY_EVERY) or "").strip()
    if raw.lower() in HISTORY_OFF:
        every_s = None
    elif raw:
        every_s = _history_duration(ENV_GPU_HISTORY_EVERY, raw)
    raw = (env.get(ENV_GPU_HISTORY_KEEP) or "").strip()
    if raw:
        keep_s = _history_duration(ENV_GPU_HISTORY_KEEP, raw)
    return every_s, keep_s


def idle_exit_default() -> float:
    raw = os.environ.get(ENV_IDLE_EXIT)
    if raw is None:
        return DEFAULT_IDLE_EXIT_S
    try:
        return float(raw)
    except ValueError:
        raise ControllerError(f"{ENV_IDLE_EXIT}={raw!r} is not a number of seconds") from None


def run_foreground(
    *,
    idle_exit_s: float | None = None,
    tick_seconds: float | None = None,
    poll_interval_s: float | None = None,
    log_to: Path | None = None,
) -> int:
    """Hold the lock and look after the runs until stopped; returns 0. Raises Conflict if
    another controller already runs for this home. ``poll_interval_s``: a quiet run's
    interval (default ``CORRAL_POLL_INTERVAL``, else ``Settings.poll_interval_s``)."""
    # lazy on purpose (not a cycle: nothing below imports daemon): the CLI imports this
    # module to start or find a background controller and should not load the controller
    from corral.control.bell import bell_settings, quiet_poll_default
    from corral.control.context import Context, Settings
    from corral.control.controller import Controller
    from corral.control.providers import load_providers
    from corral.store import Store

    home = paths.home()
    if threading.current_thread() is threading.main_thread():
        # a CLI wakes a running controller with SIGUSR1: ignore it until serve() handles it,
        # or a wake-up during start-up would kill this process (SIGUSR1's default action)
        signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    lock = ControllerLock(home)
    if not lock.acquire():
        from corral.errors import Conflict

        raise Conflict(f"a controller already runs for {home} (pid {running_pid(home)})")
    handler: logging.Handler = (
        logging.FileHandler(log_to) if log_to else logging.StreamHandler(sys.stderr)
    )
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    from corral.secrets import install_log_redaction

    install_log_redaction(handler)  # no secret value ever reaches the controller's log
    logger = logging.getLogger("corral")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        write_json_atomic(home / ENV_FILE, env_snapshot(), mode=0o600, fsync=False)
        settings = Settings()
        if tick_seconds is not None:
            settings.tick_seconds = tick_seconds
        poll_s = poll_interval_s if poll_interval_s is not None else poll_interval_default()
        if poll_s is not None:
            settings.poll_interval_s = poll_s
        quiet_s = quiet_poll_default()
        if quiet_s is not None:
            settings.quiet_poll_s = quiet_s
        gang_s = poll_interval_default(ENV_GANG_TIMEOUT)
        if gang_s is not None:
            settings.gang_timeout_s = gang_s
        settings.gang_repair = gang_repair_default()
        bell_settings()  # a bad CORRAL_BELL is said here, not at the first look
        settings.gpu_history_every_s, settings.gpu_history_keep_s = history_settings(
            settings.gpu_history_every_s, settings.gpu_history_keep_s
        )
        # the workers share the store: keep enough connections open for them to reuse
        store = Store.open(connections=settings.poll_workers + settings.ops_workers)
        providers, skipped = load_providers()
        for name, why in skipped.items():
            logger.warning("provider %s left out: %s", name, why)
        settings.lease_ttl_s = lease_default(settings.lease_ttl_s)
        from corral.control.leases import Leases, owner_id

        # controllers sharing the store each babysit the runs they hold a lease on
        # the runs they share out (a newcomer gets its part) are those whose machines they
        # all see
        movable = {name for name, p in providers.items() if p.shared_machines}
        leases = Leases(store, owner_id(home), settings.lease_ttl_s, movable=movable)
        controller = Controller(
            Context(store=store, providers=providers, settings=settings, home=home),
            leases=leases,
        )
        from corral.notify import Dispatcher

        # webhooks go out from their own threads: a slow receiver never slows the loop; one
        # controller of those sharing the store delivers them (it holds the feed's lease)
        dispatcher = Dispatcher(store, lease=leases.webhooks).start()
        # idle exit waits for deliveries, and never comes while a schedule needs ticks
        controller.busy = lambda: dispatcher.pending() > 0 or store.count_schedules() > 0
        logger.info("controller %d started for %s", os.getpid(), home)
        try:
            controller.serve(idle_exit_s=idle_exit_s)
        finally:
            dispatcher.stop()
            leases.release()  # another controller takes the runs over at once
            controller.ctx.close()  # the shared agent connection pool
        logger.info("controller %d stopped", os.getpid())
        return 0
    finally:
        lock.release()
        logger.removeHandler(handler)


def start_background(*, wait_s: float = 5.0, notify: Callable[[str], None] | None = None) -> int:
    """Start a background controller unless one runs; wake it either way. Returns its pid.
    With ``wait_s=0`` it does not wait for the new controller to take the lock.

    A running controller whose environment (``CONTROLLER_ENV``: fake GPUs, local price,
    providers, PATH, ...) differs from this process's is restarted, so the latest CLI's
    settings apply (a restart is safe: runs are re-attached, nothing is launched twice)."""
    home = paths.home()
    pid = running_pid(home)
    if pid and pid > 0:
        recorded = _recorded_env(home)
        current = env_snapshot()
        if recorded is None or recorded == current:
            wake(pid)
            return pid
        changed = sorted(k for k in current if recorded.get(k) != current[k])
        if notify:
            notify(f"restarting the controller: {', '.join(changed)} changed")
        stop_background()
    log_path = home / LOG_FILE
    with open(log_path, "ab") as out, open(os.devnull, "rb") as devnull:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "corral.control",
                "--idle-exit",
                str(idle_exit_default()),
                "--log-file",
                str(log_path),
            ],
            stdin=devnull,
            stdout=out,
            stderr=out,
            start_new_session=True,
            close_fds=True,
        )
    if wait_s <= 0:  # fire and forget: it takes the lock (or loses a race) on its own
        return proc.pid
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        pid = running_pid(home)
        if pid and pid > 0:
            return pid
        if proc.poll() is not None:  # lost a race to another controller, or failed
            pid = running_pid(home)
            if pid:
                return pid
            raise ControllerError(f"the controller failed to start; see {log_path}")
        time.sleep(0.02)
    raise ControllerError(f"the controller did not start within {wait_s:.0f}s; see {log_path}")


def stop_background(*, timeout_s: float = 10.0) -> int | None:
    """Stop the controller of this home (SIGTERM, then wait). Returns its pid or None."""
    home = paths.home()
    pid = running_pid(home)
    if not pid or pid < 0:
        return None
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return pid
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if running_pid(home) is None:
            return pid
        time.sleep(0.05)
    raise ControllerError(f"controller {pid} did not stop within {timeout_s:.0f}s")
