"""The CLI's remote mode: with ``CORRAL_SERVER`` (and ``CORRAL_TOKEN``) set, ``launch``,
``ls``, ``status``, ``logs``, ``stop`` and ``cancel`` talk to that ``corral server`` instead
of the local store (not a command: helpers those commands share)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from corral.remote.client import RemoteClient
    from corral.service.run_view import RunView


def print_logs(
    remote: RemoteClient,
    ref: str,
    *,
    stages: Sequence[str] = (),
    attempt: int | None = None,
    timestamps: bool = False,
) -> None:
    """Every line of the run's copied stage logs, as ``corral logs`` prints local ones."""
    from corral.cli.follow import format_line, stage_width
    from corral.cli.output import console

    _, lines = remote.log_lines(ref, stages=stages, attempt=attempt)
    colors: dict[str, str] = {}
    width = stage_width({line.stage for line in lines})
    shown = 0
    for line in lines:
        if line.attempt != shown:
            if shown:
                console.print(f"[bold]── attempt {line.attempt} ──[/]")
            shown = line.attempt
        console.print(format_line(line.stage, line.ts, line.text, colors, width, timestamps))


def follow(
    remote: RemoteClient,
    ref: str,
    *,
    stages: Sequence[str] = (),
    timestamps: bool = False,
) -> RunView:
    """Print the run's log lines as the server streams them, until the run ends; the run."""
    from corral.cli.follow import format_line
    from corral.cli.output import console, err_console
    from corral.service.run_view import RunView

    colors: dict[str, str] = {}
    width = 8
    shown = 0
    for item in remote.follow(ref, stages=stages):
        if isinstance(item, RunView):
            err_console.print(f"[dim]{item.id} {item.state}: {item.shown_reason}[/]")
            return item
        width = max(width, min(24, len(item.stage)))
        if item.attempt != shown:
            if shown:
                console.print(f"[bold]── attempt {item.attempt} ──[/]")
            shown = item.attempt
        console.print(format_line(item.stage, item.ts, item.text, colors, width, timestamps))
    raise AssertionError("unreachable: the stream ends with the run")  # pragma: no cover
