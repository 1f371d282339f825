"""``corral preflight FILE``: the SDK's pre-flight checks for a job spec, before paying for GPUs.

What is checked, from the spec:

* the workdir is readable, and writable with 1 GB free (outputs are written there);
* ``checkpoints.dir`` (inside the workdir) writable with 1 GB free; ``checkpoints.storage``
  and ``artifacts.storage`` (local: writable; ``s3://``: not checked here);
* the dataset and the model, when the job's ``env`` (or a stage's) names them: ``DATASET``/
  ``DATA_DIR``/``DATASET_PATH`` and ``MODEL_PATH``/``MODEL_DIR`` (relative paths are under the
  workdir; a Hub id ``org/name`` is "not checked" unless ``HF_HUB_OFFLINE`` is set);
* the spec's ``secrets:``: each resolves (the secret store, else the environment), as the launch
  requires;
* each tracker's credentials, in the environment the job will have: this one plus the spec's
  ``secrets:`` and ``env`` (``WANDB_MODE``, ``MLFLOW_TRACKING_URI``, ...; a relative sqlite
  store is under the workdir). Secret values are never shown;
* GPUs (``resources.gpus`` min), only when they must be on *this* machine: the spec allows
  only providers that run on this machine (the capability
  :class:`~corral.providers.base.RunsOnThisMachine`), or the command runs inside a corral run
  (``CORRAL_RUN_ID`` set).
  Otherwise the rented machine brings them and the check says "not checked";
* what the spec allows but would quietly lose work (:mod:`corral.spec.advice`: checkpoints
  at ``checkpoints.path`` that no stage resumes from), as warnings;
* that a launch could go ahead (``launch``): the same planner call ``corral launch`` makes
  (the enabled providers, ``CORRAL_PROVIDERS``), so a spec that launch would refuse at once
  (exit 5) fails here; no free offer now is a warning (a launch would wait).

Exit code 0 when every check passes (warnings allowed), 2 with the table when one fails.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import typer

DATASET_KEYS = ("DATASET", "DATA_DIR", "DATASET_PATH")
MODEL_KEYS = ("MODEL_PATH", "MODEL_DIR")
WANDB_KEY = "WANDB_API_KEY"


def _under(workdir: Path, value: str) -> str:
    if "://" in value or Path(value).expanduser().is_absolute():
        return value
    return str(workdir / value)


def _model_under(workdir: Path, value: str) -> str:
    """A model path under the workdir; a Hub id (``org/name``, and no ``org`` in the workdir)
    stays an id (the check then says "not checked" unless ``HF_HUB_OFFLINE`` is set)."""
    from corral.sdk.preflight_checks import looks_like_hub_id

    path = _under(workdir, value)
    if looks_like_hub_id(value) and not (workdir / value.split("/", 1)[0]).exists():
        return value  # no <workdir>/org either: a Hub id, not a local path
    return path


def _tracking_uri_under(workdir: Path, uri: str) -> str:
    """An MLflow ``sqlite:///relative.db`` or plain relative path as the job sees it: under
    its workdir (the job runs there), not under the directory this command runs in."""
    prefix = "sqlite:///"
    if uri.startswith(prefix) and not uri[len(prefix) :].startswith("/"):
        rest = uri[len(prefix) :]
        if rest and not rest.startswith(":memory:"):
            return prefix + str(workdir / rest)
        return uri
    if ":" not in uri and not Path(uri).expanduser().is_absolute():
        return str(workdir / uri)
    return uri


def _first(env: dict[str, str], keys: tuple[str, ...]) -> str | None:
    return next((env[k] for k in keys if env.get(k)), None)


def _secrets(names: list[str]) -> tuple[dict[str, str], Any]:
    """The values of the spec's ``secrets:`` as the launch resolves them (the secret store,
    then the environment), and a check saying whether they all resolve (never their values)."""
    from corral.errors import CorralError
    from corral.sdk.preflight_checks import Check
    from corral.secrets import register_names, resolve

    if not names:
        return {}, None
    register_names(names)  # whatever is resolved is *** in every detail shown
    found: dict[str, str] = {}
    missing: list[str] = []
    unreadable: list[str] = []
    for name in dict.fromkeys(names):
        try:
            value = resolve(name)
        except CorralError:  # in the store, but it cannot be decrypted (a wrong key)
            unreadable.append(name)
            continue
        if value is None:
            missing.append(name)
        else:
            found[name] = value
    problems = []
    if missing:
        problems.append(
            f"not set: {', '.join(missing)} (set with `corral secret set NAME`, or export it "
            "where the controller runs)"
        )
    if unreadable:
        problems.append(f"cannot be decrypted: {', '.join(unreadable)} (check CORRAL_SECRET_KEY)")
    if problems:
        return found, Check("secrets", "fail", "; ".join(problems))
    return found, Check("secrets", "pass", f"{', '.join(found)} set (values not shown)")


def _stored_secret_names() -> set[str]:
    from corral.secrets import SecretStore

    try:
        return set(SecretStore().names())
    except Exception:  # only for a hint: an unreadable store is not this check
        return set()


def _spec_checks(spec: Any) -> tuple[dict[str, Any], list[Any], list[Any]]:
    """The ``preflight(...)`` arguments for ``spec``, and the checks shown before and after
    the ones it runs. Credentials are checked in the environment the job will have: this
    one, plus the spec's ``secrets:`` (from the secret store) and its ``env``."""
    from corral.sdk.preflight_checks import Check, check_model, check_readable, check_storage
    from corral.wire.env import ENV_RUN_ID

    workdir = Path(spec.workdir)
    env = {str(k): str(v) for k, v in (spec.env or {}).items()}
    secret_values, secrets_check = _secrets(list(spec.secrets or []))
    job_env = {**os.environ, **secret_values, **env}
    workdir_check = check_readable("workdir", workdir)
    if workdir_check.status == "pass" and not workdir.is_dir():
        workdir_check = Check("workdir", "fail", f"{workdir} is not a directory")
    extra = [workdir_check]
    if secrets_check is not None:
        extra.append(secrets_check)
    after: list[Any] = []
    kwargs: dict[str, Any] = {"output_dir": workdir, "environ": job_env}
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
        kwargs["model_path"] = _model_under(workdir, model)
    trackers = []
    for tracker in spec.trackers:
        entry = tracker.model_dump(exclude_none=True)
        if entry.get("tracking_uri"):
            entry["tracking_uri"] = _tracking_uri_under(workdir, str(entry["tracking_uri"]))
        trackers.append(entry)
    kwargs["trackers"] = trackers
    if job_env.get("MLFLOW_TRACKING_URI"):
        job_env["MLFLOW_TRACKING_URI"] = _tracking_uri_under(
            workdir, job_env["MLFLOW_TRACKING_URI"]
        )
    # a stage's own env may name another dataset or model: check those too
    for stage in spec.stages or []:
        stage_env = {**env, **{str(k): str(v) for k, v in (stage.env or {}).items()}}
        stage_data = _first(stage_env, DATASET_KEYS)
        if stage_data and stage_data != dataset:
            found = check_readable(f"dataset (stage {stage.name})", _under(workdir, stage_data))
            after.append(found)
        stage_model = _first(stage_env, MODEL_KEYS)
        if stage_model and stage_model != model:
            found = check_model(_model_under(workdir, stage_model), {**job_env, **stage_env})
            after.append(Check(f"model (stage {stage.name})", found.status, found.detail))
    need = int(spec.resources.gpus.min)
    providers = spec.resources.providers
    on_this_machine = bool(os.environ.get(ENV_RUN_ID)) or _all_on_this_machine(providers)
    if need > 0 and on_this_machine:
        kwargs["need_gpu"] = need
    elif need > 0:
        after.append(
            Check("gpu", "skip", f"not checked: {need} GPU(s) come with the rented machine")
        )
    return kwargs, extra, after


def _launch_check(spec: Any, source: str) -> Any:
    """Whether ``corral launch`` would start the spec now, wait for capacity or refuse it."""
    from corral.sdk.preflight_checks import Check
    from corral.service.feasibility import launch_plan, refusal

    result = launch_plan(spec)
    refused = refusal(result, source)
    if refused:
        return Check("launch", "fail", refused)
    offer = result.cheapest
    if offer is None:
        return Check("launch", "warn", "no offer is free now: a launch would wait for one")
    return Check("launch", "pass", f"{offer.provider}/{offer.region} {offer.offer_id} fits")


def _advice_checks(spec: Any) -> list[Any]:
    """What the spec allows but would quietly lose work (:mod:`corral.spec.advice`), as
    warnings: checks that do not fail the pre-flight."""
    from corral.sdk.preflight_checks import Check
    from corral.spec.advice import spec_warnings

    return [Check("resume", "warn", warning) for warning in spec_warnings(spec)]


def _all_on_this_machine(providers: list[str] | None) -> bool:
    """Whether the spec allows only providers whose machine is this one."""
    from corral.errors import CorralError
    from corral.providers.registry import runs_on_this_machine

    if not providers:
        return False
    try:
        return all(runs_on_this_machine(name) for name in providers)
    except CorralError:  # unknown or not installed: it is not this machine
        return False


def _explain_wandb(report: Any, spec: Any) -> None:
    """A failed W&B check whose key is in the secret store but not in the spec's ``secrets:``
    says so: the job gets only the secrets its spec lists."""
    from corral.sdk.preflight_checks import Check

    for i, check in enumerate(report.checks):
        if check.name != "tracker: wandb" or check.status != "fail":
            continue
        if WANDB_KEY in _stored_secret_names() and WANDB_KEY not in (spec.secrets or []):
            report.checks[i] = Check(
                check.name,
                "fail",
                f"{WANDB_KEY} is in the secret store but not in the spec's `secrets:` (add "
                f"`secrets: [{WANDB_KEY}]` so the job gets it)",
            )


def preflight(
    file: Path = typer.Argument(..., help="The job spec (corral.yaml)."),
    set_: list[str] = typer.Option(
        [], "--set", help="Override a spec value, e.g. --set resources.gpus=L40S:1 (repeatable)."
    ),
    json_: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Check a job spec's dataset, directories, disk, tracker credentials and GPUs, and that
    a launch could go ahead (an enabled provider has a machine that fits)."""
    from corral.cli.output import console, print_json
    from corral.errors import EXIT_BAD_INPUT
    from corral.sdk.preflight_checks import preflight as run_checks
    from corral.spec import load_spec

    spec = load_spec(file, list(set_))
    kwargs, before, after = _spec_checks(spec)
    report = run_checks(**kwargs, raise_on_fail=False, show=False)
    report.checks[:0] = before
    report.checks.extend(after)
    report.checks.append(_launch_check(spec, str(file)))
    report.checks.extend(_advice_checks(spec))
    _explain_wandb(report, spec)
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
