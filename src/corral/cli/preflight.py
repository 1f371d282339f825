"""``corral preflight FILE``: the SDK's pre-flight checks for a job spec, before paying for GPUs.

What is checked, from the spec:

* the workdir is readable, and writable with 1 GB free (outputs are written there);
* ``checkpoints.dir`` (inside the workdir) writable with 1 GB free; ``checkpoints.storage``
  and ``artifacts.storage`` (local: writable; ``s3://``: not checked here);
* the dataset and the model, when the job's ``env`` names them: ``DATASET``/``DATA_DIR``/
  ``DATASET_PATH`` and ``MODEL_PATH``/``MODEL_DIR`` (relative paths are under the workdir);
* each tracker's credentials (the secret values themselves are never shown);
* GPUs (``resources.gpus`` min), only when they must be on *this* machine: the spec allows
  only the ``local`` provider, or the command runs inside a corral run (``CORRAL_RUN_ID`` set).
  Otherwise the rented machine brings them and the check says "not checked".

Exit code 0 when every check passes (warnings allowed), 2 with the table when one fails.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import typer

DATASET_KEYS = ("DATASET", "DATA_DIR", "DATASET_PATH")
MODEL_KEYS = ("MODEL_PATH", "MODEL_DIR")


def _under(workdir: Path, value: str) -> str:
    if "://" in value or Path(value).expanduser().is_absolute():
        return value
    return str(workdir / value)


def _first(env: dict[str, str], keys: tuple[str, ...]) -> str | None:
    return next((env[k] for k in keys if env.get(k)), None)


def _spec_checks(spec: Any) -> tuple[dict[str, Any], list[Any], list[Any]]:
    """The ``preflight(...)`` arguments for ``spec``, and the checks shown before and after
    the ones it runs."""
    from corral.constants import ENV_RUN_ID
    from corral.sdk.preflight_checks import Check, check_readable, check_storage

    workdir = Path(spec.workdir)
    env = {str(k): str(v) for k, v in (spec.env or {}).items()}
    extra = [check_readable("workdir", workdir)]
    after: list[Any] = []
    kwargs: dict[str, Any] = {"output_dir": workdir}
    if spec.checkpoints.dir:
        kwargs["checkpoint_dir"] = workdir / str(spec.checkpoints.dir)
    if spec.checkpoints.storage:
        kwargs["storage"] = str(spec.checkpoints.storage)
    if spec.artifacts.storage:
        extra.append(check_storage(str(spec.artifacts.storage), 1.0, "artifact storage"))
    dataset = _first(env, DATASET_KEYS)
    if dataset:
        kwargs["dataset"] = _under(workdir, dataset)
    model = _first(env, MODEL_KEYS)
    if model:
        kwargs["model_path"] = _under(workdir, model)
    kwargs["trackers"] = [t.model_dump(exclude_none=True) for t in spec.trackers]
    need = int(spec.resources.gpus.min)
    providers = spec.resources.providers
    on_this_machine = providers == ["local"] or bool(os.environ.get(ENV_RUN_ID))
    if need > 0 and on_this_machine:
        kwargs["need_gpu"] = need
    elif need > 0:
        after.append(
            Check("gpu", "skip", f"not checked: {need} GPU(s) come with the rented machine")
        )
    return kwargs, extra, after


def preflight(
    file: Path = typer.Argument(..., help="The job spec (corral.yaml)."),
    set_: list[str] = typer.Option(
        [], "--set", help="Override a spec value, e.g. --set resources.gpus=L40S:1 (repeatable)."
    ),
    json_: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Check a job spec's dataset, directories, disk, tracker credentials and GPUs."""
    from corral.cli.output import console, print_json
    from corral.errors import EXIT_BAD_INPUT
    from corral.sdk.preflight_checks import preflight as run_checks
    from corral.spec import load_spec

    spec = load_spec(file, list(set_))
    kwargs, before, after = _spec_checks(spec)
    report = run_checks(**kwargs, raise_on_fail=False, show=False)
    report.checks[:0] = before
    report.checks.extend(after)
    if json_:
        print_json(report.to_dict())
    else:
        console.print(report.table())
        if report.ok:
            console.print("[green]pre-flight passed[/]")
        else:
            names = ", ".join(c.name for c in report.failed)
            console.print(f"[bold red]pre-flight failed:[/] {names}")
    if not report.ok:
        raise typer.Exit(EXIT_BAD_INPUT)
