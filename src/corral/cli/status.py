"""``corral status [RUN]``: one run in detail (the newest run when none is named)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import typer

if TYPE_CHECKING:
    from corral.service.views import RunDetails


def fmt_loss(loss: Any) -> str:
    """A stage's loss: a number, ``nan``/``inf``/``-inf`` when it diverged, ``-`` when none."""
    if isinstance(loss, str) and loss in ("nan", "inf", "-inf"):
        return loss
    if isinstance(loss, bool) or not isinstance(loss, (int, float)):
        return "-"
    return f"{loss:.4g}"


def fmt_progress(prog: dict[str, Any] | None) -> str:
    """``step/total (percent%)``, ``step`` when the total is unknown, ``-`` before any report."""
    prog = prog or {}
    if prog.get("step") is None:
        return "-"
    text = f"{prog['step']}" + (f"/{prog['total']}" if prog.get("total") else "")
    if isinstance(prog.get("percent"), (int, float)):
        text += f" ({prog['percent']:.0f}%)"
    return text


def acceptance_line(acc: Any) -> str | None:
    """The acceptance verdict as one line (rich markup), or None without criteria."""
    from corral.service.details import NOT_RUN

    if not isinstance(acc, dict) or not acc.get("criteria"):
        return None
    if acc.get("status") == NOT_RUN:
        return f"  acceptance  [yellow]not run[/]: {acc.get('error')}"
    verdict = "[green]pass[/]" if acc.get("all_pass") else "[red]fail[/]"

    def num(value: Any) -> str:
        return f"{value:g}" if isinstance(value, (int, float)) else str(value)

    checks = ", ".join(
        f"{c.get('metric')} {c.get('op')} {num(c.get('value'))} ({c.get('observed')})"
        for c in acc["criteria"]
        if isinstance(c, dict)
    )
    return f"  acceptance  {verdict}: {checks}"


def print_summary(run: RunDetails) -> None:
    """The end-of-run line (state, reason, duration, cost) and the acceptance verdict."""
    from corral.cli.output import console, fmt_cost, fmt_duration, styled_state

    line = f"{styled_state(run.state)} [bold]{run.id}[/]"
    if run.reason:
        line += f": {run.reason}"
    line += f" · {fmt_duration(run.duration_s)} · {fmt_cost(run.cost_usd)}"
    console.print(line)
    # A run whose evaluation missed its criteria still SUCCEEDED (unless the spec says
    # eval.fail_run_on_reject): say so here, not only in `corral status`.
    verdict = acceptance_line(run.acceptance)
    if verdict:
        console.print(verdict)


def status(
    run_ref: str = typer.Argument(
        None, metavar="[RUN]", help="Run id, id prefix or name (default: the newest run)."
    ),
    json_: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Show a run: state and reason, attempts, stages with progress, cost."""
    from corral.cli.output import print_json
    from corral.service.details import get_run

    details = get_run(run_ref or None)
    if json_:
        print_json(details)
        return
    _print_details(details)


def _print_details(run: RunDetails) -> None:
    from rich.table import Table

    from corral.cli.output import ago, console, fmt_cost, fmt_duration, styled_state

    console.print(
        f"[bold]{run.id}[/]  {styled_state(run.state)}" + (f"  {run.reason}" if run.reason else "")
    )
    console.print(
        f"  name {run.name} · attempt {run.attempt} · provider {run.provider or '-'} · "
        f"cost {fmt_cost(run.cost_usd)} · created {ago(run.created_at)} · "
        f"ran {fmt_duration(run.duration_s)}"
    )
    if run.failed_stage:
        console.print(f"  failed stage [red]{run.failed_stage}[/] (exit code {run.exit_code})")
    if run.stages:
        t = Table(box=None, pad_edge=False, header_style="bold")
        for col in ("STAGE", "STATE", "GPUS", "PROGRESS", "LOSS", "EXIT"):
            t.add_column(col)
        for st in run.stages:
            prog: Any = st.get("progress") or {}
            t.add_row(
                str(st.get("name", "?")),
                str(st.get("state", "?")),
                ",".join(str(g) for g in _list(st.get("gpus"))) or "-",
                fmt_progress(prog),
                fmt_loss(prog.get("loss")),
                "-" if st.get("exit_code") is None else str(st.get("exit_code")),
            )
        console.print(t)
    if len(run.attempts) > 1:
        for a in run.attempts:
            console.print(
                f"  attempt {a.number}: {a.provider} {a.exit_reason or a.state}"
                f" · {fmt_cost(a.cost_usd)}"
            )
    verdict = acceptance_line(run.acceptance)
    if verdict:
        console.print(verdict)
    man = run.manifest
    if isinstance(man, dict) and man.get("uri"):
        console.print(f"  manifest    {man['uri']} ({man.get('files', 0)} files)")
    if run.checkpoint_dir:
        console.print(f"  checkpoints {run.checkpoint_dir}")
    console.print(f"  logs        corral logs {run.id}")


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []
