"""``corral worker``: serve this machine's GPUs to the pool (one Celery worker per GPU)."""

from __future__ import annotations

from pathlib import Path

import typer


def worker(
    gpus: str = typer.Option(
        None, "--gpus", help="GPU ids to serve, comma separated (default: every GPU found)."
    ),
    gpus_per_worker: int = typer.Option(
        1, "--gpus-per-worker", min=1, help="GPUs per Celery worker (per attempt)."
    ),
    broker: str = typer.Option(
        None, "--broker", help="Redis URL of the pool's broker (default: CORRAL_POOL_BROKER)."
    ),
    pool: str = typer.Option(None, "--pool", help="Pool name (default: CORRAL_POOL_NAME)."),
    bind: str = typer.Option(
        "127.0.0.1", "--bind", help="Address the agents' APIs bind (0.0.0.0 for a LAN)."
    ),
    advertise: str = typer.Option(
        None,
        "--advertise",
        help="Address the controller reaches this machine on (default: the bind address; with "
        "0.0.0.0, this machine's address toward the broker).",
    ),
    name: str = typer.Option(
        None, "--name", help="Prefix of the workers' names (default: the host name)."
    ),
    host: str = typer.Option(
        None,
        "--host",
        envvar="CORRAL_WORKER_HOST",
        help="The host these workers stand for (default: this machine's host name): a "
        "multi-node job never gets two workers of one host.",
    ),
    home: Path = typer.Option(
        None, "--home", help="Where attempts keep their files (default: CORRAL_HOME/worker)."
    ),
    workers: int = typer.Option(
        None,
        "--workers",
        min=0,
        help="Workers to start with (default: one per GPU group); `corral pool scale N` "
        "changes it while this runs.",
    ),
    checkpoint_dir: str = typer.Option(
        None,
        "--checkpoint-dir",
        help="Keep checkpoints here (one directory per run) instead of where the plan says; "
        "use object storage (checkpoints.storage) to resume on another machine.",
    ),
    cpu_slots: int = typer.Option(
        0,
        "--cpu-slots",
        envvar="CORRAL_WORKER_CPU_SLOTS",
        help="CPU workers to run beside the GPU ones, for jobs that ask for no GPU (a box "
        "without GPUs serves only these).",
    ),
    job_memory: str = typer.Option(
        None,
        "--job-memory",
        envvar="CORRAL_WORKER_JOB_MEMORY",
        help="Each job's memory limit (16G, 512M; 'share': its worker's share of the box); "
        "a job past it is killed and its run fails. Default: none.",
    ),
    job_cpus: str = typer.Option(
        None,
        "--job-cpus",
        envvar="CORRAL_WORKER_JOB_CPUS",
        help="Each job's CPUs (4, 0.5; 'share': its worker's share of the box). Default: none.",
    ),
    warm_agent: bool = typer.Option(
        True,
        "--warm-agent/--no-warm-agent",
        envvar="CORRAL_WORKER_WARM_AGENT",
        help="Keep each idle worker's next agent started (Python up, its modules loaded: "
        "about 60 MB of memory per worker), so an attempt starts at once.",
    ),
) -> None:
    """Serve this machine's GPUs to the pool: one Celery worker per GPU, pinned with
    CUDA_VISIBLE_DEVICES, each running one attempt at a time through corral's agent
    (and --cpu-slots CPU workers for jobs without a GPU; --job-memory/--job-cpus limit each job).
    Runs in the foreground; Ctrl-C stops taking attempts, a second Ctrl-C stops the running
    ones (their runs resume elsewhere from their checkpoints)."""
    from dataclasses import replace

    from corral.cli.output import err_console
    from corral.queue.limits import parse_cpus, parse_memory
    from corral.queue.settings import PoolSettings, check_name
    from corral.queue.supervisor import WorkerOptions, serve

    settings = PoolSettings.from_env()
    if broker:
        settings = replace(settings, broker_url=broker).checked()
    if pool:
        settings = replace(settings, name=check_name(pool, "--pool"))
    ids = None if gpus is None else [g.strip() for g in gpus.split(",") if g.strip()]
    opts = WorkerOptions(
        gpus=ids,
        gpus_per_worker=gpus_per_worker,
        bind=bind,
        advertise=advertise,
        name=name,
        host=host,
        home=home,
        checkpoint_dir=checkpoint_dir,
        workers=workers,
        cpu_slots=cpu_slots,
        job_memory=None if job_memory is None else parse_memory(job_memory),
        job_cpus=None if job_cpus is None else parse_cpus(job_cpus),
        warm_agent=warm_agent,
    )
    raise typer.Exit(serve(opts, settings, say=lambda line: err_console.print(line, markup=False)))
