"""``corral status [RUN]``: one run in detail (the newest run when none is named)."""

from __future__ import annotations

from typing import Any

import typer


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


def _agent_status(store: Any, run: Any) -> dict[str, Any]:
    """The agent's last status as the controller cached it on the current attempt."""
    if not run.attempt:
        return {}
    try:
        attempt = store.get_attempt(run.id, run.attempt)
    except Exception:
        return {}
    return dict((attempt.data or {}).get("status") or {})


def run_details(store: Any, run: Any) -> dict[str, Any]:
    from corral import paths
    from corral.cli.output import run_dict
    from corral.control.plan_builder import checkpoint_dir

    d = run_dict(run)
    d["attempts"] = []
    for a in store.attempts(run.id):
        ad = a.to_dict()
        ad.pop("data", None)
        ad.pop("log_offsets", None)
        d["attempts"].append(ad)
    agent = _agent_status(store, run)
    d["stages"] = list(agent.get("stages") or [])
    d["acceptance"] = agent.get("acceptance")
    d["manifest"] = agent.get("manifest")
    d["checkpoint_sync"] = agent.get("checkpoint_sync")
    d["logs_dir"] = str(paths.home() / "runs" / run.id / "logs")
    try:
        from corral.spec import JobSpec

        if run.spec:
            d["checkpoint_dir"] = checkpoint_dir(JobSpec.model_validate(run.spec), run.id)
    except Exception:
        pass
    return d


def acceptance_line(acc: Any) -> str | None:
    """The acceptance verdict as one line (rich markup), or None without criteria."""
    if not isinstance(acc, dict) or not acc.get("criteria"):
        return None
    verdict = "[green]pass[/]" if acc.get("all_pass") else "[red]fail[/]"

    def num(value: Any) -> str:
        return f"{value:g}" if isinstance(value, (int, float)) else str(value)

    checks = ", ".join(
        f"{c.get('metric')} {c.get('op')} {num(c.get('value'))} ({c.get('observed')})"
        for c in acc["criteria"]
        if isinstance(c, dict)
    )
    return f"  acceptance  {verdict}: {checks}"


def print_summary(store: Any, run: Any) -> None:
    from corral.cli.output import console, fmt_cost, fmt_duration, run_duration, styled_state

    line = f"{styled_state(run.state)} [bold]{run.id}[/]"
    if run.reason:
        line += f": {run.reason}"
    line += f" · {fmt_duration(run_duration(run))} · {fmt_cost(run.cost_usd)}"
    console.print(line)
    # A run whose evaluation missed its criteria still SUCCEEDED (unless the spec says
    # eval.fail_run_on_reject): say so here, not only in `corral status`.
    verdict = acceptance_line(_agent_status(store, run).get("acceptance"))
    if verdict:
        console.print(verdict)


def status(
    run_ref: str = typer.Argument(
        None, metavar="[RUN]", help="Run id, id prefix or name (default: the newest run)."
    ),
    json_: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Show a run: state and reason, attempts, stages with progress, cost."""
    from rich.table import Table

    from corral.cli.output import (
        ago,
        console,
        fmt_cost,
        fmt_duration,
        print_json,
        run_duration,
        styled_state,
    )
    from corral.errors import NotFound
    from corral.store import Store

    store = Store.open()
    if run_ref:
        run = store.get_run(run_ref)
    else:
        runs = store.list_runs(limit=1)
        if not runs:
            raise NotFound("no runs yet: start one with `corral launch corral.yaml`")
        run = store.get_run(runs[0].id)
    details = run_details(store, run)
    if json_:
        print_json(details)
        return
    console.print(
        f"[bold]{run.id}[/]  {styled_state(run.state)}" + (f"  {run.reason}" if run.reason else "")
    )
    console.print(
        f"  name {run.name} · attempt {run.attempt} · provider {run.provider or '-'} · "
        f"cost {fmt_cost(run.cost_usd)} · created {ago(run.created_at)} · "
        f"ran {fmt_duration(run_duration(run))}"
    )
    if run.failed_stage:
        console.print(f"  failed stage [red]{run.failed_stage}[/] (exit code {run.exit_code})")
    stages = details["stages"]
    if stages:
        t = Table(box=None, pad_edge=False, header_style="bold")
        for col in ("STAGE", "STATE", "GPUS", "PROGRESS", "LOSS", "EXIT"):
            t.add_column(col)
        for st in stages:
            prog = st.get("progress") or {}
            t.add_row(
                st.get("name", "?"),
                st.get("state", "?"),
                ",".join(st.get("gpus") or []) or "-",
                fmt_progress(prog),
                fmt_loss(prog.get("loss")),
                "-" if st.get("exit_code") is None else str(st.get("exit_code")),
            )
        console.print(t)
    if len(details["attempts"]) > 1:
        for a in details["attempts"]:
            console.print(
                f"  attempt {a['number']}: {a['provider']} {a.get('exit_reason') or a['state']}"
                f" · {fmt_cost(a.get('cost_usd'))}"
            )
    verdict = acceptance_line(details.get("acceptance"))
    if verdict:
        console.print(verdict)
    man = details.get("manifest")
    if man and man.get("uri"):
        console.print(f"  manifest    {man['uri']} ({man.get('files', 0)} files)")
    if details.get("checkpoint_dir"):
        console.print(f"  checkpoints {details['checkpoint_dir']}")
    console.print(f"  logs        corral logs {run.id}")
