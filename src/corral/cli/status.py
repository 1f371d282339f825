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
    """``step/total (percent%) ETA 12m05s``, ``step`` when the total is unknown, ``-`` before
    any report. The ETA is the agent's (from the rate of the recent progress records)."""
    from corral.cli.output import fmt_duration

    prog = prog or {}
    if prog.get("step") is None:
        return "-"
    text = f"{prog['step']}" + (f"/{prog['total']}" if prog.get("total") else "")
    if isinstance(prog.get("percent"), (int, float)):
        text += f" ({prog['percent']:.0f}%)"
    eta = prog.get("eta_s")
    if isinstance(eta, (int, float)) and not isinstance(eta, bool) and eta > 0:
        text += f" ETA {fmt_duration(eta)}"
    return text


def unread_line(stage: Any) -> str | None:
    """``  progress    train: nothing read from its log by progress 'lightning' (342 lines)``
    for a stage whose ``progress`` pattern has read nothing so far (the agent's
    ``progress_unread``), else None."""
    unread = stage.get("progress_unread") if isinstance(stage, dict) else None
    if not isinstance(unread, dict) or (stage.get("progress") or {}).get("step") is not None:
        return None
    pattern = unread.get("pattern")
    what = "its regex" if pattern == "regex" else f"progress {pattern!r}"
    lines = unread.get("lines")
    count = f" ({lines} line{'' if lines == 1 else 's'})" if isinstance(lines, int) else ""
    return f"  progress    {stage.get('name', '?')}: nothing read from its log by {what}{count}"


def checkpoint_line(last: Any, sync: Any) -> str | None:
    """``  checkpoint  step 1200 (4 shards) · uploaded step 1000``, or None before any."""
    parts = []
    if isinstance(last, dict) and last.get("step") is not None:
        text = f"step {last['step']}"
        shards = last.get("shards")
        if isinstance(shards, int) and not isinstance(shards, bool) and shards > 1:
            text += f" ({shards} shards)"
        parts.append(text)
    if isinstance(sync, dict) and sync.get("last_uploaded_step") is not None:
        parts.append(f"uploaded step {sync['last_uploaded_step']}")
    return "  checkpoint  " + " · ".join(parts) if parts else None


def mirror_line(mirror: Any) -> str | None:
    """``  mirrored    out/ckpt.pt (3 copies) · restored /w/out/ckpt.pt``, or None before
    any (the mirror of ``checkpoints.path``)."""
    if not isinstance(mirror, dict):
        return None
    parts = []
    if mirror.get("last_uploaded"):
        n = mirror.get("uploaded", 0)
        parts.append(f"{mirror['last_uploaded']} ({n} cop{'y' if n == 1 else 'ies'})")
    if mirror.get("restored"):
        parts.append(f"restored {mirror['restored']}")
    if mirror.get("last_error"):
        parts.append(f"error: {mirror['last_error']}")
    if not parts:
        return None
    from rich.markup import escape

    return "  mirrored    " + escape(" · ".join(parts))


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
    from corral.remote import connect

    remote = connect()
    if remote is not None:  # CORRAL_SERVER: the server's run
        details = remote.get_run(run_ref or None)
    else:
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
        for st in run.stages:
            line = unread_line(st)
            if line:
                console.print(line, highlight=False, markup=False)
    if run.nodes:
        nodes = Table(box=None, pad_edge=False, header_style="bold")
        for col in ("NODE", "MACHINE", "PROVIDER", "STATE", "COST"):
            nodes.add_column(col)
        for node in run.nodes:
            where = "/".join(str(v) for v in (node.get("provider"), node.get("region")) if v)
            kept = " (kept)" if node.get("kept") else ""
            nodes.add_row(
                str(node.get("rank", "?")),
                str(node.get("instance_id") or "-") + kept,
                where or "-",
                str(node.get("state", "?")),
                fmt_cost(cost if isinstance(cost := node.get("cost_usd"), int | float) else 0.0),
            )
        console.print(nodes)
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
    code_text = code_line(run.code)
    if code_text:
        console.print(code_text)
    if run.checkpoint_dir:
        console.print(f"  checkpoints {run.checkpoint_dir}")
    line = checkpoint_line(run.last_checkpoint, run.checkpoint_sync)
    if line:
        console.print(line)
    line = mirror_line(run.checkpoint_mirror)
    if line:
        console.print(line, highlight=False)
    from rich.markup import escape

    if run.budget:
        console.print(f"  budget      {escape(run.budget)}", highlight=False)
    ahead: Any = run.forecast
    if isinstance(ahead, dict) and isinstance(ahead.get("cost_usd"), int | float):
        console.print(
            f"  forecast    {fmt_cost(float(ahead['cost_usd']))} in all, the running stages done "
            f"in {fmt_duration(float(ahead.get('finish_in_s') or 0))} (from their progress rate)",
            highlight=False,
        )
    for warning in run.warnings or []:
        console.print(f"  [yellow]warning[/]     {escape(warning)}", highlight=False)
    for svc in run.services or []:
        health_words: dict[object, str] = {True: "[green]healthy[/]", False: "[red]unhealthy[/]"}
        health = health_words.get(svc.get("healthy"), "health unknown")
        if svc.get("url"):
            console.print(f"  service     {svc['stage']}: {svc['url']} ({health})", highlight=False)
        else:
            console.print(f"  service     {svc['stage']}: not serving", highlight=False)
    console.print(f"  logs        corral logs {run.id}")


def code_line(code: Any) -> str | None:
    """What the run shipped, as one line: the git commit, or the workdir's bundle."""
    if not isinstance(code, dict):
        return None
    git = code.get("git")
    size = code.get("size")
    extra = f" + {size / 1e6:.1f} MB bundle" if isinstance(size, int) and size else ""
    if isinstance(git, dict) and git.get("commit"):
        ref = f" ({git['ref']})" if git.get("ref") else ""
        return f"  code        git {git.get('url')} @ {str(git['commit'])[:12]}{ref}{extra}"
    sha = str(code.get("sha256") or "")[:12]
    text = f"  code        workdir, {code.get('members', '?')} files, "
    text += f"{(size or 0) / 1e6:.1f} MB packed (sha256 {sha})"
    checkout = code.get("checkout")
    if isinstance(checkout, dict) and checkout.get("commit"):
        dirty = " + local changes" if checkout.get("dirty") else ""
        text += f" from commit {str(checkout['commit'])[:12]}{dirty}"
    return text


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []
