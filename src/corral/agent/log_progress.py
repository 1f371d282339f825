"""Progress read from a stage's log, for a job that does not call the SDK (the ``progress``
pattern of its stage, see :mod:`corral.agent.log_presets`).

:class:`LogProgress` is the log pump's tap: it gets the child's output as it is read, cuts it
into lines at ``\\n`` and ``\\r`` (a progress bar redraws itself with ``\\r``), masks the job's
secrets, drops ANSI colours and hands each line to the stage's parser. What a line says goes
the way the SDK's ``report()`` goes: a ``progress`` record in the stage's progress file (which
:class:`corral.agent.progress.ProgressTailer` turns into ``corral status``, ``progress``
events and webhooks, the idle watcher's activity and the ETA), and the loss and metrics to the
spec's trackers (``$CORRAL_TRACKERS``, built in a process of their own with the stage's
environment, as the job would build them). A line with only a position (a progress bar) is like
``progress()``: the file only, at most one record a second (the last one is kept and written).
A record without a loss (or epoch) of its own carries the last one read, so ``corral status``
keeps showing it; the trackers get only what the line said.

A reading without a step uses the last step read; one without a total, the last total. Before
any step is known, metrics go in a ``metrics`` record. Nothing here may stop the log pump: a
line that breaks a parser is skipped.
"""

from __future__ import annotations

import json
import os
import queue
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from corral.agent.log_presets import LineParser, Reading, make_parser
from corral.sdk import progress_file
from corral.wire.env import ENV_TRACKERS


class MetricsSink(Protocol):
    """What the tap feeds: :class:`BackgroundTrackers`, or a
    :class:`~corral.sdk.trackers.base.Tracker`."""

    def log(self, metrics: dict[str, Any], step: int) -> None: ...

    def finish(self) -> None: ...


#: A line (between two ``\n``/``\r``) longer than this is not parsed.
MAX_LINE = 64 * 1024
#: Position-only records (a progress bar) are written at most this often, in seconds.
BAR_INTERVAL = 1.0
_ANSI = re.compile(rb"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")
_BREAK = re.compile(rb"[\r\n]")


class LogProgress:
    def __init__(
        self,
        progress: str,
        progress_path: str,
        *,
        mask: list[bytes] | None = None,
        trackers: MetricsSink | None = None,
        clock: Callable[[], float] = time.monotonic,
        bar_interval: float = BAR_INTERVAL,
    ):
        self._parser: LineParser = make_parser(progress)
        self._path = progress_path
        self._mask = sorted(mask or [], key=len, reverse=True)
        self._trackers = trackers
        self._clock = clock
        self._bar_interval = bar_interval
        self._partial = b""
        self._skipping = False  # dropping an over-long line up to its end
        self._step: int | float | None = None
        self._total: int | float | None = None
        self._loss: int | float | None = None
        self._epoch: int | float | None = None
        self._held: Reading | None = None  # a bar position not written yet
        self._written_at: float | None = None
        #: the lines given to the parser so far, and how many of them it read something from
        self.lines = 0
        self.readings = 0

    # --- the pump's side ---------------------------------------------------------------------

    def feed(self, data: bytes) -> None:
        """Take a chunk of the child's output (any cut)."""
        *lines, partial = _BREAK.split(self._partial + data)
        if lines and self._skipping:  # the end of a line too long to parse
            lines, self._skipping = lines[1:], False
        if len(partial) > MAX_LINE:
            partial, self._skipping = b"", True
        self._partial = partial
        for line in lines:
            self._line(line)
        if self._held is not None and self._due():
            self._write_held()

    def close(self) -> None:
        """The output ended: read the last partial line, write what is held."""
        if self._partial and not self._skipping:
            self._line(self._partial)
        self._partial = b""
        flush = getattr(self._parser, "flush", None)
        try:
            held = flush() if flush is not None else None
            if held is not None:
                self._take(held)
        except Exception:  # as for a line: nothing here may stop the pump
            pass
        if self._held is not None:
            self._write_held()
        if self._trackers is not None:
            self._trackers.finish()

    # --- lines -----------------------------------------------------------------------------

    def _line(self, raw: bytes) -> None:
        if not raw.strip() or len(raw) > MAX_LINE:
            return
        try:
            for value in self._mask:
                raw = raw.replace(value, b"***")
            text = _ANSI.sub(b"", raw).decode("utf-8", "replace")
            self.lines += 1
            reading = self._parser.parse(text)
            if reading is not None:
                self.readings += 1
                self._take(reading)
        except Exception:  # a line no parser expected: skipped, the pump goes on
            pass

    def _take(self, reading: Reading) -> None:
        if reading.total is not None:
            self._total = reading.total
        if reading.step is not None:
            if self._held is not None and reading.step < (self._held.step or 0):
                self._write_held()  # the bar went back (a new bar): keep the record of the old one
            self._step = reading.step
        if reading.step is None and not reading.has_values():
            return  # only a total (e.g. nanoGPT's max_iters): it fills the next readings
        if reading.loss is not None:
            self._loss = reading.loss
        if reading.epoch is not None:
            self._epoch = reading.epoch
        reading.step = self._step
        reading.total = self._total
        values = reading.has_values()
        if reading.step is None:  # values before any step: a metrics record
            found = dict(reading.metrics)
            if reading.loss is not None:
                found["loss"] = reading.loss
            progress_file.emit("metrics", file=self._path, step=None, metrics=found)
            return
        if values or self._due():
            self._held = None
            self._write(reading, values=values)
        else:
            self._held = reading

    def _due(self) -> bool:
        return self._written_at is None or self._clock() - self._written_at >= self._bar_interval

    def _write_held(self) -> None:
        held, self._held = self._held, None
        if held is not None:
            self._write(held)

    def _write(self, reading: Reading, values: bool = False) -> None:
        """What ``corral.sdk.report()`` does: the progress record, and the values for the
        trackers (a position alone, like ``progress()``, goes to the file only)."""
        self._written_at = self._clock()
        fields: dict[str, Any] = {"step": reading.step, "total": reading.total}
        loss = reading.loss if reading.loss is not None else self._loss  # status keeps the last
        if loss is not None:
            fields["loss"] = loss
        epoch = reading.epoch if reading.epoch is not None else self._epoch
        if epoch is not None:
            fields["epoch"] = epoch
        fields["metrics"] = dict(reading.metrics)
        progress_file.emit("progress", file=self._path, **fields)
        if self._trackers is not None and values:
            said: dict[str, Any] = dict(reading.metrics)
            if reading.loss is not None:
                said["loss"] = reading.loss
            if reading.epoch is not None:
                said["epoch"] = reading.epoch
            step = reading.step
            self._trackers.log(said, int(step) if step is not None else 0)


class BackgroundTrackers:
    """The spec's trackers, fed from the log pump: they run in a process of their own
    (:mod:`corral.agent.log_trackers`) with the stage's environment and workdir, so that they
    are built as the SDK's ``report()`` builds them in the job (its ``WANDB_MODE``, secrets,
    ``MLFLOW_TRACKING_URI``, the run's id and directory), and fed from a thread: starting a W&B
    run can take seconds, and the log pump must never wait (a full pipe stalls the job). The
    process starts with the first values (a stage whose log says nothing opens no W&B run);
    values that find the queue full are dropped. :meth:`finish` ends the input and returns;
    :meth:`wait` waits for the trackers to be finished (the runner does, before the attempt
    ends), and kills them past its timeout."""

    def __init__(
        self, env: dict[str, str], cwd: str, maxsize: int = 1000, command: list[str] | None = None
    ):
        self._env, self._cwd = env, cwd
        self._command = command or [sys.executable, "-m", "corral.agent.log_trackers"]
        self._queue: queue.Queue[tuple[dict[str, Any], int]] = queue.Queue(maxsize)
        self._done = threading.Event()  # no more values will come
        self._thread: threading.Thread | None = None  # started by the first values
        self._proc: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()

    def _started(self) -> threading.Thread:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="log-trackers", daemon=True)
                self._thread.start()
            return self._thread

    def _run(self) -> None:
        try:
            proc = subprocess.Popen(
                self._command, cwd=self._cwd, env=self._env, stdin=subprocess.PIPE
            )
        except OSError:
            proc = None
        with self._lock:
            self._proc = proc
        while True:
            try:
                metrics, step = self._queue.get(timeout=0.1)
            except queue.Empty:
                if self._done.is_set():
                    break
                continue
            if proc is None or proc.stdin is None:
                continue
            line = json.dumps({"step": step, "metrics": metrics}) + "\n"
            try:
                proc.stdin.write(line.encode())
                proc.stdin.flush()
            except (OSError, ValueError):  # the trackers' process is gone: drop the rest
                proc = None
        if proc is not None and proc.stdin is not None:
            try:
                proc.stdin.close()
            except OSError:
                pass

    def log(self, metrics: dict[str, Any], step: int) -> None:
        self._started()
        try:
            self._queue.put_nowait((metrics, step))
        except queue.Full:
            pass

    def log_table(self, name: str, rows: list[dict[str, Any]], step: int) -> None:
        pass  # the log has no tables

    def finish(self) -> None:
        """No more values: the trackers finish once they have logged those queued (the log
        pump calls it at the stage's end, and does not wait)."""
        self._done.set()

    def wait(self, timeout: float) -> bool:
        """Wait ``timeout`` seconds at most for the trackers to be finished (after
        :meth:`finish`); those still running then are killed. True when they finished."""
        if self._thread is None:
            return True
        deadline = time.monotonic() + timeout
        self._thread.join(timeout)
        with self._lock:
            proc = self._proc
        if proc is None:
            return not self._thread.is_alive()
        try:
            proc.wait(max(0.0, deadline - time.monotonic()))
            return True
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            return False


def stage_trackers(env: dict[str, str], workdir: str) -> BackgroundTrackers | None:
    """The trackers of ``$CORRAL_TRACKERS`` in a stage's environment (``env``, the stage's
    whole environment), or None when there are none. They run in ``workdir`` with ``env``, as
    the job's own would: a ``jsonl`` tracker's relative path is the workdir's, and one without a
    path writes ``metrics`` records to the stage's progress file."""
    raw = env.get(ENV_TRACKERS, "").strip()
    if not raw:
        return None
    try:
        specs = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(specs, list) or not specs:
        return None
    return BackgroundTrackers(_with_corral_importable(env), workdir)


def _with_corral_importable(env: dict[str, str]) -> dict[str, str]:
    """``env`` with this corral first on ``PYTHONPATH``: the trackers' process runs the agent's
    interpreter and code, whatever the job's own path says."""
    import corral

    root = os.path.dirname(os.path.dirname(os.path.abspath(corral.__file__)))
    path = env.get("PYTHONPATH", "")
    return {**env, "PYTHONPATH": root + (os.pathsep + path if path else "")}
