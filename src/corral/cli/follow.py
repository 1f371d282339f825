"""Following a run from the CLI: stage logs as they arrive plus a live status line."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from corral import paths

_TS = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z?) ?")
COLORS = ["cyan", "magenta", "green", "yellow", "blue", "red", "bright_cyan", "bright_magenta"]


def split_ts(line: str) -> tuple[str, str]:
    m = _TS.match(line)
    if not m:
        return "", line
    return m.group(1), line[m.end() :]


class LogTailer:
    """Reads new complete lines of a run's copied stage logs (all attempts, in order)."""

    def __init__(
        self,
        run_id: str,
        *,
        stages: list[str] | None = None,
        attempt: int | None = None,
        from_end: bool = False,
    ):
        self.root = paths.home() / "runs" / run_id / "logs"
        self.stages = set(stages) if stages else None
        self.attempt = attempt
        self.offsets: dict[Path, int] = {}
        self.seen_attempts: set[int] = set()
        if from_end:
            for path in self._files():
                self.offsets[path] = path.stat().st_size

    def _files(self) -> list[Path]:
        if not self.root.exists():
            return []
        out = []
        for adir in sorted(self.root.glob("a*"), key=lambda p: int(p.name[1:] or 0)):
            if not adir.name[1:].isdigit():
                continue
            if self.attempt is not None and int(adir.name[1:]) != self.attempt:
                continue
            for f in sorted(adir.glob("*.log")):
                if self.stages is None or f.stem in self.stages:
                    out.append(f)
        return out

    def read(self) -> Iterator[tuple[int, str, str, str]]:
        """New lines as (attempt, stage, timestamp, text), ordered by timestamp per batch."""
        batch: list[tuple[int, str, str, str]] = []
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
            attempt = int(path.parent.name[1:])
            for raw in data[: end + 1].decode("utf-8", "replace").splitlines():
                ts, text = split_ts(raw)
                batch.append((attempt, path.stem, ts, text))
        batch.sort(key=lambda r: (r[0], r[2]))
        yield from batch


def stage_width(run: Any) -> int:
    """Width of the stage-name column: the longest stage name of the run's spec."""
    names = [s.get("name", "") for s in ((run.spec or {}).get("stages") or [])] or ["main"]
    if (run.spec or {}).get("setup"):
        names.append("_setup")
    return min(24, max(len(n) for n in names))


def format_line(
    stage: str, ts: str, text: str, colors: dict[str, str], width: int, timestamps: bool = False
) -> str:
    from rich.markup import escape

    c = colors.setdefault(stage, COLORS[len(colors) % len(COLORS)])
    prefix = f"[{c}]{stage:<{width}}[/] [dim]|[/] "
    if timestamps and ts:
        prefix += f"[dim]{ts}[/] "
    return prefix + escape(text)


def _status_line(run: Any, attempt: Any | None) -> str:
    from corral.cli.output import fmt_cost, fmt_duration, run_duration, styled_state
    from corral.cli.status import fmt_loss, fmt_progress

    parts = [f"[bold]{run.id}[/]", styled_state(run.state)]
    if run.attempt and run.attempt > 1:
        parts.append(f"attempt {run.attempt}")
    status = ((attempt.data or {}).get("status") if attempt else None) or {}
    for st in status.get("stages", []):
        if st.get("state") != "running":
            continue
        prog = st.get("progress") or {}
        text = st["name"]
        if prog.get("step") is not None:
            text += f" step {fmt_progress(prog)}"
            if fmt_loss(prog.get("loss")) != "-":
                text += f" loss {fmt_loss(prog.get('loss'))}"
        parts.append(text)
    if run.cost_usd:
        parts.append(fmt_cost(run.cost_usd))
    parts.append(fmt_duration(run_duration(run)))
    if run.reason and run.state in ("PENDING", "RECOVERING", "STOPPING"):
        parts.append(f"[dim]{run.reason}[/]")
    return " · ".join(parts)


def follow(
    store: Any,
    run_id: str,
    *,
    stages: list[str] | None = None,
    poll_s: float = 0.25,
    live: bool = True,
    timestamps: bool = False,
    from_end: bool = False,
    status_lines: bool = True,
) -> Any:
    """Print new log lines until the run ends; returns the final run record."""
    from rich.live import Live

    from corral.cli.output import console

    tailer = LogTailer(run_id, stages=stages, from_end=from_end)
    color: dict[str, str] = {}
    width = stage_width(store.get_run(run_id))
    last_attempt = [0]

    def emit(printer: Any) -> None:
        for attempt, stage, ts, text in tailer.read():
            if attempt != last_attempt[0]:
                if last_attempt[0]:
                    printer(f"[bold]── attempt {attempt} ──[/]")
                last_attempt[0] = attempt
            printer(format_line(stage, ts, text, color, width, timestamps))

    def snapshot() -> tuple[Any, Any]:
        run = store.get_run(run_id)
        attempt = None
        if run.attempt:
            try:
                attempt = store.get_attempt(run.id, run.attempt)
            except Exception:
                attempt = None
        return run, attempt

    from corral.cli.output import err_console
    from corral.cli.waiting import ControllerGuard

    guard = ControllerGuard(notify=lambda m: err_console.print(f"[dim]{m}[/]"))
    run, attempt = snapshot()
    use_live = live and console.is_terminal
    if not use_live:
        # no live line in a pipe: print each state change (with its reason) as a line instead
        last_state = None
        while True:
            if status_lines and run.state != last_state and not run.terminal:
                last_state = run.state
                reason = f": {run.reason}" if run.reason else ""
                err_console.print(f"[dim]{run.id} {run.state}{reason}[/]")
            emit(console.print)
            if run.terminal:
                emit(console.print)
                return run
            guard.check(run)
            time.sleep(poll_s)
            run, attempt = snapshot()
    with Live(
        _status_line(run, attempt), console=console, refresh_per_second=4, transient=True
    ) as lv:
        while True:
            emit(lv.console.print)
            lv.update(_status_line(run, attempt))
            if run.terminal:
                emit(lv.console.print)
                return run
            guard.check(run)
            time.sleep(poll_s)
            run, attempt = snapshot()
