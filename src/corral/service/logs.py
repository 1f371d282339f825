"""A run's stage logs, as the controller copies them from the node to
``CORRAL_HOME/runs/<run>/logs/a<attempt>/<stage>.log`` (one line per record, each starting
with the agent's UTC timestamp).

* :func:`open_logs` - a :class:`LogTailer` over the run's logs (all attempts, or one; some
  stages): each ``read()`` gives the complete lines written since the last one.
* :func:`log_files` - which stage logs exist and their sizes.
* :func:`read_log` - a chunk of one stage log from a byte offset (for a client that pages).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from corral import paths
from corral.control.watching import TOUCH_S, mark_followed
from corral.errors import BadInput, NotFound
from corral.service._store import using
from corral.service.node import check_node
from corral.service.views import LogChunk, LogFile, LogLine
from corral.store import RunRecord, Store

#: the stage name of the setup commands' log
SETUP_STAGE = "_setup"
#: the stage name of a spec with a top-level ``run:`` and no ``stages:``
MAIN_STAGE = "main"
#: the largest chunk :func:`read_log` returns
MAX_CHUNK = 4 * 1024 * 1024

#: ANSI escapes (a piece made only of these and blanks shows nothing)
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")
_TS = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z?) ?")


def split_ts(line: str) -> tuple[str, str]:
    """(the line's leading timestamp or "", the rest)."""
    m = _TS.match(line)
    if not m:
        return "", line
    return m.group(1), line[m.end() :]


def parse_log(text: str, attempt: int, stage: str) -> list[LogLine]:
    """The lines of a stored stage log (or of a part of it that starts at a record), in the
    order written. Each record (``<ts> <text>``, up to a ``\\n``) holds what the job wrote up
    to its newline, a progress bar's redraws too (pieces after ``\\r``): each piece is a line
    of its own with the record's timestamp, so that sorting lines by time keeps them where they
    were written. A record without a timestamp takes the one before it."""
    out: list[LogLine] = []
    last = ""
    for record in text.split("\n"):
        if not record:
            continue
        ts, rest = split_ts(record)
        last = ts = ts or last
        pieces = rest.split("\r")
        if len(pieces) > 1:  # the redraws that show something (not a bar cleared, a cursor move)
            pieces = [piece for piece in pieces if _ANSI.sub("", piece).strip()] or [""]
        out.extend(LogLine(attempt=attempt, stage=stage, ts=ts, text=piece) for piece in pieces)
    return out


def logs_dir(run_id: str) -> Path:
    return paths.home() / "runs" / run_id / "logs"


def stage_names(spec: dict[str, Any] | None) -> list[str]:
    """The names of the stages that write a log, in spec order (``_setup`` last when the spec
    has setup commands)."""
    spec = spec or {}
    names = [str(s.get("name", "")) for s in spec.get("stages") or []] or [MAIN_STAGE]
    if spec.get("setup"):
        names.append(SETUP_STAGE)
    return names


def _attempt_dirs(root: Path) -> list[tuple[int, Path]]:
    if not root.exists():
        return []
    found = [(int(p.name[1:]), p) for p in root.glob("a*") if p.name[1:].isdigit()]
    return sorted(found)


def _node_dirs(attempt_dir: Path) -> list[tuple[int, Path]]:
    """A gang's other nodes' log folders in an attempt's (``node<rank>``), by rank."""
    found = [
        (int(p.name[4:]), p)
        for p in attempt_dir.glob("node*")
        if p.name[4:].isdigit() and p.is_dir()
    ]
    return sorted(found)


def _origin(path: Path) -> tuple[int, str]:
    """The attempt and the label of a copied stage log: its stage, prefixed with its node in
    a gang's attempt (``node1/train``; the head's ``node0/train``)."""
    parent = path.parent
    if parent.name.startswith("node") and parent.name[4:].isdigit():
        return int(parent.parent.name[1:]), f"{parent.name}/{path.stem}"
    if _node_dirs(parent):
        return int(parent.name[1:]), f"node0/{path.stem}"
    return int(parent.name[1:]), path.stem


class LogTailer:
    """Reads the new complete lines of a run's copied stage logs (all attempts, in order).
    ``stages``/``attempt`` narrow what is read; ``from_end`` skips what is there now."""

    def __init__(
        self,
        run_id: str,
        *,
        stages: Iterable[str] | None = None,
        attempt: int | None = None,
        from_end: bool = False,
        stage_names: list[str] | None = None,
        node: int | None = None,
    ):
        self.run_id = run_id
        #: a gang's node whose logs are read (None: every node's; 0: the head's)
        self.node = node
        #: every stage of the run that writes a log (for a caller laying out columns)
        self.stage_names = list(stage_names or [MAIN_STAGE])
        self.root = logs_dir(run_id)
        self.stages = set(stages) if stages else None
        self.attempt = attempt
        #: bytes already read of each log file
        self.offsets: dict[Path, int] = {}
        #: when this reader last said it follows the run (``control.watching``)
        self._marked = 0.0
        if from_end:
            for path in self._files():
                self.offsets[path] = path.stat().st_size

    def files(self) -> list[Path]:
        """The log files this tailer reads, by attempt then name."""
        return self._files()

    def _files(self) -> list[Path]:
        out = []
        for number, adir in _attempt_dirs(self.root):
            if self.attempt is not None and number != self.attempt:
                continue
            dirs = [(0, adir), *_node_dirs(adir)]
            for rank, d in dirs:
                if self.node is not None and rank != self.node:
                    continue
                for f in sorted(d.glob("*.log")):
                    if self.stages is None or f.stem in self.stages:
                        out.append(f)
        return out

    def read(self) -> list[LogLine]:
        """The new complete lines, ordered by attempt then timestamp. A partial last line is
        left for the next read. A reader that reads again and again is following the run:
        the controller copies its logs at the usual pace, not a quiet run's
        (``control.watching``)."""
        now = time.monotonic()
        if now - self._marked >= TOUCH_S:
            self._marked = now
            mark_followed(self.run_id)
        batch: list[LogLine] = []
        for path in self._files():
            offset = self.offsets.get(path, 0)
            size = path.stat().st_size
            if size <= offset:
                continue
            with open(path, "rb") as f:
                f.seek(offset)
                data = f.read(size - offset)
            end = data.rfind(b"\n")
            if end < 0:
                continue
            self.offsets[path] = offset + end + 1
            attempt, label = _origin(path)
            batch += parse_log(data[: end + 1].decode("utf-8", "replace"), attempt, label)
        batch.sort(key=lambda line: (line.attempt, line.ts))
        return batch


def _check(run: RunRecord, stages: Iterable[str], attempt: int | None) -> None:
    """NotFound for a stage the run's spec does not have or an attempt it never made."""
    if run.spec:
        known = set(stage_names(run.spec)) - {SETUP_STAGE}
        for s in stages:
            if s not in known and s != SETUP_STAGE:
                raise NotFound(
                    f"run {run.id} has no stage {s!r} (stages: {', '.join(sorted(known))})"
                )
    if attempt is not None and not 1 <= attempt <= max(run.attempt, 1):
        raise NotFound(f"run {run.id} has no attempt {attempt} (attempts: 1..{run.attempt})")


def open_logs(
    ref: str,
    *,
    stages: Iterable[str] | None = None,
    attempt: int | None = None,
    from_end: bool = False,
    store: Store | None = None,
    node: int | None = None,
) -> LogTailer:
    """A :class:`LogTailer` over the logs of the run named by ``ref``, after checking that
    the run has the ``stages``, the ``attempt`` and the gang's ``node`` asked for (NotFound
    otherwise)."""
    wanted = list(stages or [])
    with using(store) as st:
        run = st.get_run(ref)
    _check(run, wanted, attempt)
    if node is not None:
        check_node(run, node)
    return LogTailer(
        run.id,
        stages=wanted or None,
        attempt=attempt,
        from_end=from_end,
        stage_names=stage_names(run.spec),
        node=node,
    )


def log_files(ref: str, *, store: Store | None = None) -> list[LogFile]:
    """The stage logs copied so far, by attempt then stage name."""
    with using(store) as st:
        run = st.get_run(ref)
    return [
        LogFile(attempt=number, stage=f.stem, size=f.stat().st_size)
        for number, adir in _attempt_dirs(logs_dir(run.id))
        for f in sorted(adir.glob("*.log"))
    ]


def read_log(
    ref: str,
    stage: str,
    *,
    attempt: int | None = None,
    offset: int = 0,
    max_bytes: int = 64 * 1024,
    store: Store | None = None,
) -> LogChunk:
    """Up to ``max_bytes`` of the log of ``stage`` (default attempt: the run's current one)
    from byte ``offset``; ask again from ``next_offset`` for more. A log not copied yet reads
    as empty."""
    if offset < 0:
        raise BadInput(f"offset must be >= 0, not {offset}")
    if not 1 <= max_bytes <= MAX_CHUNK:
        raise BadInput(f"max_bytes must be between 1 and {MAX_CHUNK}, not {max_bytes}")
    with using(store) as st:
        run = st.get_run(ref)
    _check(run, [stage], attempt)
    number = attempt if attempt is not None else max(run.attempt, 1)
    path = logs_dir(run.id) / f"a{number}" / f"{stage}.log"
    data = b""
    size = 0
    if path.is_file():
        with open(path, "rb") as f:
            size = f.seek(0, 2)
            if offset < size:  # past the end nothing is read (and no seek can overflow)
                f.seek(offset)
                data = f.read(max_bytes)
    if offset + len(data) < size and b"\n" in data:  # more follows: end at a line end
        data = data[: data.rfind(b"\n") + 1]
    next_offset = offset + len(data)
    return LogChunk(
        run_id=run.id,
        attempt=number,
        stage=stage,
        offset=offset,
        next_offset=next_offset,
        eof=next_offset >= size,
        text=data.decode("utf-8", "replace"),
    )


def log_tail(
    ref: str, *, lines: int = 200, max_bytes: int = 64 * 1024, store: Store | None = None
) -> list[LogLine]:
    """The last ``lines`` lines of the current attempt's stage logs together, in time order
    (at most ``max_bytes`` read from the end of each log; a line cut by that limit is left
    out)."""
    if lines < 1 or not 1 <= max_bytes <= MAX_CHUNK:
        raise BadInput(f"lines must be >= 1 and max_bytes 1..{MAX_CHUNK}")
    with using(store) as st:
        run = st.get_run(ref)
    number = max(run.attempt, 1)
    adir = logs_dir(run.id) / f"a{number}"
    found: list[LogLine] = []
    for path in sorted(adir.glob("*.log")) if adir.is_dir() else []:
        with open(path, "rb") as f:
            size = f.seek(0, 2)
            start = max(0, size - max_bytes)
            f.seek(start)
            data = f.read(size - start)
        if start > 0:  # the first line may be cut: keep only what follows a line end
            data = data[data.find(b"\n") + 1 :] if b"\n" in data else b""
        found += parse_log(data.decode("utf-8", "replace"), number, path.stem)
    found.sort(key=lambda line: line.ts)
    return found[-lines:]
