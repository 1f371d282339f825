"""``corral launch FILE``: submit a run and follow it until it ends."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer


def launch(
    file: Path = typer.Argument(..., help="The job spec (corral.yaml)."),
    set_: list[str] = typer.Option(
        [], "--set", help="Override a spec field: key.path=value (repeatable)."
    ),
    detach: bool = typer.Option(False, "--detach", "-d", help="Submit and return at once."),
    wait: bool = typer.Option(False, "--wait", help="Wait for the end without streaming logs."),
    json_: bool = typer.Option(
        False, "--json", help="Print the run as JSON (the final run with --wait)."
    ),
) -> None:
    """Launch a run. Streams stage logs with a live status line until the run ends; Ctrl-C
    detaches (the run goes on). Exit code 0 if the run SUCCEEDED, 1 if it ended otherwise."""
    from corral.cli.output import console, err_console, print_json
    from corral.errors import EXIT_INTERRUPTED, EXIT_RUN_NOT_SUCCEEDED
    from corral.service.submit import submit_run

    submitted = submit_run(file, overrides=list(set_))
    for warning in submitted.warnings:
        err_console.print(_budget_warning_text(warning))
    for notice in submitted.notices:
        err_console.print(f"[dim]{notice}[/]")
    run = submitted.run

    if detach or (json_ and not wait):
        if json_:
            print_json(run)
        else:
            console.print(
                f"launched [bold]{run.id}[/] ({run.state})\n"
                f"  follow: corral logs -f {run.id}\n  status: corral status {run.id}"
            )
        return
    try:
        if wait:
            from corral.service.actions import wait_for_end

            run = wait_for_end(run.id)
        else:
            from corral.cli.follow import follow

            err_console.print(f"[dim]run {run.id} (Ctrl-C detaches; the run goes on)[/]")
            run = follow(run.id)
    except KeyboardInterrupt:
        err_console.print(
            f"\ndetached from {run.id}; it keeps running.\n"
            f"  re-attach: corral logs -f {run.id}\n  status:    corral status {run.id}\n"
            f"  stop:      corral stop {run.id}"
        )
        raise typer.Exit(EXIT_INTERRUPTED) from None
    if json_:
        print_json(run)
    else:
        from corral.cli.status import print_summary
        from corral.service.details import get_run

        print_summary(get_run(run.id))
    if run.state != "SUCCEEDED":
        raise typer.Exit(EXIT_RUN_NOT_SUCCEEDED)


def _budget_warning_text(w: Any) -> str:
    """The over-budget warning (a :class:`corral.service.views.BudgetWarning`) as one line."""
    from corral.cli.output import fmt_cost

    return (
        f"[yellow]warning:[/] {w.provider} at {fmt_cost(w.price_per_hour)}/h for the full "
        f"max_runtime ({w.hours:g} h) costs {fmt_cost(w.worst_cost_usd)}, more than the "
        f"{fmt_cost(w.budget_usd)} budget: the run will be stopped at the budget "
        f"(after {w.hours_at_budget:.1f} h)"
    )
