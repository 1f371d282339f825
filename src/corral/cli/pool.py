"""``corral pool status|check|logs|purge|scale|restart|monitor|watch``: the GPU worker pool as an operator sees it."""

from __future__ import annotations

from pathlib import Path

import typer

from corral.cli.errors import CorralGroup

app = typer.Typer(
    cls=CorralGroup,
    help="Watch the GPU worker pool (workers, queues, Flower, a scaling hook).",
    no_args_is_help=True,
    add_completion=False,
)

BROKER = typer.Option(
    None, "--broker", help="Redis URL of the broker (default: CORRAL_POOL_BROKER)."
)
POOL = typer.Option(None, "--pool", help="Pool name (default: CORRAL_POOL_NAME).")
HOME = typer.Option(None, "--home", help="The workers' home (corral worker --home).")


@app.callback()
def _pool() -> None:
    """Watch the GPU worker pool (workers, queues, Flower, a scaling hook)."""


def _settings(broker: str | None, pool: str | None):
    from dataclasses import replace

    from corral.queue.settings import PoolSettings, check_name

    settings = PoolSettings.from_env()
    if broker:
        settings = replace(settings, broker_url=broker).checked()
    if pool:
        settings = replace(settings, name=check_name(pool, "--pool"))
    return settings


@app.command("status")
def status(
    broker: str = BROKER,
    pool: str = POOL,
    json_: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Each worker with its GPU and current run, and each queue's length."""
    from corral.cli.output import console, print_json
    from corral.service.pool import pool_status

    view = pool_status(_settings(broker, pool))
    if json_:
        print_json(view)
        return
    from rich.table import Table

    console.print(f"pool [bold]{view.pool}[/] on {view.broker}", markup=True, highlight=False)
    if not view.queues:
        console.print("no worker has joined yet (corral worker on a GPU machine)")
        return
    t = Table(box=None, pad_edge=False, header_style="bold")
    for col in ("WORKER", "HOST", "GPU", "TYPE", "RUN", "PID"):
        t.add_column(col)
    for w in view.workers:
        t.add_row(
            w.name,
            w.host,
            ",".join(w.gpus) or "-",
            w.gpu_type,
            w.run_id or "[green]idle[/]",
            str(w.pid),
        )
    if view.workers:
        console.print(t)
    else:
        console.print("no live worker")
    q = Table(box=None, pad_edge=False, header_style="bold")
    for col in ("QUEUE", "GPUS", "WORKERS", "BUSY", "WAITING"):
        q.add_column(col)
    for row in view.queues:
        q.add_row(
            row.queue,
            f"{row.gpu_type} x{row.gpu_count}" if row.gpu_count else "CPU",
            str(row.workers),
            str(row.busy),
            str(row.waiting),
        )
    console.print(q)


@app.command("check")
def check(
    broker: str = BROKER,
    pool: str = POOL,
    json_: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Check this box for the pool: GPUs (driver, NVML), the broker, the store, the disk and
    the clock's skew against the broker's. Exit 1 when a check fails."""
    from corral.cli.output import console, print_json
    from corral.service.pool_check import check as run_checks

    report = run_checks(_settings(broker, pool))
    if json_:
        print_json(report)
    else:
        marks = {"ok": "[green]ok[/]  ", "warn": "[yellow]warn[/]", "fail": "[red]FAIL[/]"}
        for c in report.checks:
            console.print(f"{marks[c.level]} {c.name:<7} {c.detail}", highlight=False)
    if not report.ok:
        raise typer.Exit(1)


@app.command("logs")
def logs(
    worker: str = typer.Argument(..., metavar="WORKER", help="A worker's name (pool status)."),
    lines: int = typer.Option(100, "--lines", "-n", min=0, help="Lines from the end to show."),
    follow_: bool = typer.Option(False, "--follow", "-f", help="Keep printing new lines."),
    home: Path = HOME,
    json_: bool = typer.Option(
        False, "--json", help="One JSON object a line: {worker, line} (with -f, as they come)."
    ),
) -> None:
    """Print a worker's log on this box (its Celery worker and what it ran); -f follows it."""
    import json
    import sys

    from corral.service.pool_logs import follow, last_lines, worker_log

    def show(line: str) -> None:
        text = json.dumps({"worker": worker, "line": line}) if json_ else line
        sys.stdout.write(text + "\n")

    path = worker_log(worker, home)
    shown, end = last_lines(path, lines)
    for line in shown:
        show(line)
    sys.stdout.flush()
    if follow_:
        try:
            for line in follow(path, end, stop=lambda: False):
                show(line)
                sys.stdout.flush()
        except KeyboardInterrupt:
            return


@app.command("purge")
def purge(
    queue: str = typer.Argument(..., metavar="QUEUE", help="A queue of `corral pool status`."),
    yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask for confirmation."),
    broker: str = BROKER,
    pool: str = POOL,
    json_: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Cancel the runs waiting in QUEUE (running ones are left alone), after confirmation."""
    import sys

    from corral.cli.output import console, print_json
    from corral.errors import BadInput
    from corral.service.pool_purge import purge as purge_queue
    from corral.service.pool_purge import waiting_runs

    settings = _settings(broker, pool)
    if not yes:
        waiting, running = waiting_runs(settings, queue)
        if not waiting:
            console.print(f"{queue}: no run waiting ({running} running, left alone)")
            return
        if not sys.stdin.isatty():
            raise BadInput(f"{queue}: {len(waiting)} waiting runs; pass --yes to cancel them")
        typer.confirm(
            f"cancel the {len(waiting)} runs waiting in {queue} ({running} running are left "
            "alone)?",
            abort=True,
        )
    view = purge_queue(settings, queue)
    if json_:
        print_json(view)
        return
    console.print(
        f"{queue}: {len(view.cancelled)} waiting runs cancelled, {view.running} running left alone"
    )


@app.command("scale")
def scale(
    count: int = typer.Argument(..., metavar="N", min=0, help="Workers to run on this box."),
    home: Path = HOME,
    broker: str = BROKER,
    pool: str = POOL,
    wait: bool = typer.Option(True, "--wait/--no-wait", help="Wait until they answer."),
    timeout: float = typer.Option(120.0, "--timeout", min=1, help="Seconds to wait."),
    json_: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Run N workers of this box's `corral worker` (one per GPU at most): more are started,
    fewer stop warm (the idle ones first; a running attempt finishes first)."""
    from corral.cli.output import console, err_console, print_json
    from corral.service.pool_scale import scale as scale_box

    say = (lambda _line: None) if json_ else (lambda line: err_console.print(line, markup=False))
    view = scale_box(
        count, _settings(broker, pool), home=home, timeout_s=timeout, wait=wait, say=say
    )
    if json_:
        print_json(view)
        return
    line = f"{len(view.answering)} of {view.workers} workers answer ({view.seconds:g}s)"
    if view.stopping:
        line += f"; stopping after their attempt: {', '.join(view.stopping)}"
    console.print(line, highlight=False)


@app.command("restart")
def restart(
    workers: list[str] = typer.Argument(
        None, metavar="[WORKER]...", help="Workers to restart (default: every running one)."
    ),
    home: Path = HOME,
    broker: str = BROKER,
    pool: str = POOL,
    timeout: float = typer.Option(600.0, "--timeout", min=1, help="Seconds to wait."),
    json_: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Restart this box's workers one at a time, warm (a running attempt finishes first), each
    answering again before the next: new worker processes run the corral installed now."""
    from corral.cli.output import console, err_console, print_json
    from corral.service.pool_scale import restart as restart_box

    say = (lambda _line: None) if json_ else (lambda line: err_console.print(line, markup=False))
    view = restart_box(
        list(workers or []), _settings(broker, pool), home=home, timeout_s=timeout, say=say
    )
    if json_:
        print_json(view)
        return
    console.print(f"{len(view.restarted)} workers restarted ({view.seconds:g}s)", highlight=False)


@app.command("monitor")
def monitor(
    broker: str = BROKER,
    pool: str = POOL,
    address: str = typer.Option("127.0.0.1", "--address", help="Address Flower listens on."),
    port: int = typer.Option(5555, "--port", min=1, max=65535, help="Port Flower listens on."),
    user: str = typer.Option("corral", "--user", help="The user name of Flower's basic auth."),
) -> None:
    """Start Flower on the pool with HTTP basic auth (the password is the secret
    CORRAL_FLOWER_PASSWORD: `corral secret set CORRAL_FLOWER_PASSWORD`). Runs in the
    foreground."""
    import subprocess

    from corral.cli.output import err_console
    from corral.service.pool import monitor_command

    argv, env = monitor_command(_settings(broker, pool), address=address, port=port, user=user)
    err_console.print(
        f"Flower on http://{address}:{port} (user {user}, password: the secret "
        "CORRAL_FLOWER_PASSWORD)",
        markup=False,
    )
    try:
        code = subprocess.run(argv, env=env, check=False).returncode
    except KeyboardInterrupt:
        code = 0
    raise typer.Exit(code)


@app.command("watch")
def watch(
    broker: str = BROKER,
    pool: str = POOL,
    command: str = typer.Option(
        None,
        "--command",
        help="Run this (bash) for each queue whose numbers change, with CORRAL_POOL_QUEUE, "
        "_WAITING, _WORKERS, _BUSY, _WANTED and _DELTA in its environment.",
    ),
    url: str = typer.Option(
        None, "--url", help="POST a signed pool.queue event here for each change."
    ),
    secret: str = typer.Option(
        None, "--secret", help="Name of the secret that signs the webhook (corral secret set)."
    ),
    interval: float = typer.Option(10.0, "--interval", min=0.5, help="Seconds between looks."),
    once: bool = typer.Option(False, "--once", help="Look once, call the hook, exit."),
) -> None:
    """The queue-length hook: call a command and/or a webhook when a queue's length or its
    workers change, so a script can start or stop workers (delta > 0: start that many)."""
    from corral.cli.output import err_console
    from corral.errors import BadInput
    from corral.service.pool import Hook
    from corral.service.pool import watch as run_watch

    value = None
    if secret:
        from corral.secrets import resolve

        value = resolve(secret)
        if not value:
            raise BadInput(f"--secret {secret}: no such secret (corral secret set {secret})")
    hook = Hook(command=command, url=url, secret=value)
    try:
        failed = run_watch(
            hook,
            _settings(broker, pool),
            interval_s=interval,
            once=once,
            say=lambda line: err_console.print(line, markup=False),
        )
    except KeyboardInterrupt:
        failed = 0
    raise typer.Exit(1 if (once and failed) else 0)
