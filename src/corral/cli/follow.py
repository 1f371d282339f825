"""Following a run from the CLI: stage logs as they arrive plus a live status line."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from corral.service.controller import ControllerGuard
    from corral.service.logs import LogTailer
    from corral.service.run_view import RunView
    from corral.service.watch import RunWatch

#: ANSI escapes that move the cursor or erase (a progress bar redrawing itself in place:
#: tqdm's ``ESC[A``, Rich's ``ESC[1A ESC[2K``), not colours: printed among other lines they
#: would overwrite them on the reader's terminal.
_CURSOR = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-ln-~]|\x1b[@-Z\\-_]")

COLORS = ["cyan", "magenta", "green", "yellow", "blue", "red", "bright_cyan", "bright_magenta"]


def stage_width(names: Iterable[str]) -> int:
    """Width of the stage-name column: the longest of the run's stage names (at most 24)."""
    return min(24, max((len(n) for n in names), default=0))


def format_line(
    stage: str, ts: str, text: str, colors: dict[str, str], width: int, timestamps: bool = False
) -> str:
    from rich.markup import escape

    c = colors.setdefault(stage, COLORS[len(colors) % len(COLORS)])
    prefix = f"[{c}]{stage:<{width}}[/] [dim]|[/] "
    if timestamps and ts:
        prefix += f"[dim]{ts}[/] "
    return prefix + escape(_CURSOR.sub("", text))


class LinePrinter:
    """Prints a tailer's new lines, with an ``── attempt N ──`` rule when the attempt
    changes."""

    def __init__(self, tailer: LogTailer, *, timestamps: bool = False):
        self.tailer = tailer
        self.timestamps = timestamps
        self.colors: dict[str, str] = {}
        self.width = stage_width(tailer.stage_names)
        self.attempt = 0

    def emit(self, printer: Callable[[str], Any]) -> None:
        for line in self.tailer.read():
            if line.attempt != self.attempt:
                if self.attempt:
                    printer(f"[bold]── attempt {line.attempt} ──[/]")
                self.attempt = line.attempt
            printer(
                format_line(
                    line.stage, line.ts, line.text, self.colors, self.width, self.timestamps
                )
            )


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
    run_ref: str,
    *,
    stages: list[str] | None = None,
    poll_s: float = 0.25,
    live: bool = True,
    timestamps: bool = False,
    from_end: bool = False,
    status_lines: bool = True,
) -> RunView:
    """Print new log lines until the run ends; returns the final run."""
    from corral.cli.output import console, err_console
    from corral.service.controller import ControllerGuard
    from corral.service.watch import watch_run

    with watch_run(run_ref, stages=stages, from_end=from_end) as watch:
        lines = LinePrinter(watch.tailer, timestamps=timestamps)
        guard = ControllerGuard(notify=lambda m: err_console.print(f"[dim]{m}[/]"))
        if live and console.is_terminal:
            return _follow_live(watch, lines, guard, poll_s)
        return _follow_plain(watch, lines, guard, poll_s, status_lines)


#: states whose line waits until the attempt that ended has its last logs copied
_AFTER_LOGS = frozenset({"STOPPING", "RECOVERING"})


def _attempt_closed(number: int, run: RunView, attempt: Any | None) -> bool:
    """Attempt ``number`` has ended and its logs are all copied: the controller copies the
    last logs before it closes the attempt's bill (or the run has moved on or ended)."""
    if run.terminal or run.attempt != number or attempt is None or attempt.number != number:
        return True
    return attempt.billed_until is not None


def _follow_plain(
    watch: RunWatch, lines: LinePrinter, guard: ControllerGuard, poll_s: float, status: bool
) -> RunView:
    """No live line (a pipe): each state change (with its reason) is a line on stderr. The
    line of a run that is stopping or recovering waits for the last log lines of the attempt
    that ended, so that "STOPPING: all stages succeeded" follows the stages' last lines."""
    from corral.cli.output import console, err_console

    run, attempt = watch.snapshot()
    last_state = None
    held: list[tuple[str, int | None]] = []  # (line, the attempt whose logs it waits for)
    while True:
        if status and run.state != last_state and not run.terminal:
            last_state = run.state
            reason = f": {run.shown_reason}" if run.reason else ""
            waits = run.attempt if run.state in _AFTER_LOGS else None
            held.append((f"[dim]{run.id} {run.state}{reason}[/]", waits))
        lines.emit(console.print)
        while held and (held[0][1] is None or _attempt_closed(held[0][1], run, attempt)):
            err_console.print(held.pop(0)[0])
        if run.terminal:
            lines.emit(console.print)
            return run
        guard.check(run.terminal)
        time.sleep(poll_s)
        run, attempt = watch.snapshot()


def _follow_live(
    watch: RunWatch, lines: LinePrinter, guard: ControllerGuard, poll_s: float
) -> RunView:
    """Log lines above a live status line that is redrawn on each poll."""
    from rich.console import Console
    from rich.live import Live

    from corral.cli.output import console

    run, attempt = watch.snapshot()
    with Live(
        _status_line(run, attempt),
        # a LazyConsole passes every call on to its rich Console
        console=cast(Console, console),
        refresh_per_second=4,
        transient=True,
    ) as lv:
        while True:
            lines.emit(lv.console.print)
            lv.update(_status_line(run, attempt))
            if run.terminal:
                lines.emit(lv.console.print)
                return run
            guard.check(run.terminal)
            time.sleep(poll_s)
            run, attempt = watch.snapshot()
