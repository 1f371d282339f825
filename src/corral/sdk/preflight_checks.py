"""Pre-flight checks: fail in the first second, not after an hour of paid GPU time.

``preflight(dataset=..., checkpoint_dir=..., trackers=[{"type": "wandb"}], need_gpu=1)``
runs the checks that apply to what it is given, prints a table and (``raise_on_fail=True``)
raises :class:`corral.errors.BadInput` naming every failed check. Each check ends as:

* ``pass``; ``fail`` (the run would break); ``warn`` (suspicious, not fatal);
* ``skip``: "not checked" with the reason (e.g. ``s3://`` URIs need the aws extra and are checked
  when the run starts).

Checks: dataset readable (a local file is opened, a directory listed); output and checkpoint
dirs writable (created if missing, a probe file written, read back and deleted, and the
directories the check created removed again) with ``min_free_gb`` GB (GiB) free; checkpoint ``storage`` (a local path or ``file://``: writable; ``s3://``: not
checked); trackers' credentials (W&B: ``WANDB_API_KEY``, a ``~/.netrc`` login or offline mode;
MLflow: a usable ``sqlite:///`` file, a writable ``file:`` store, or an ``http(s)`` server that
answers ``/health``); model path present; GPUs visible (:func:`corral.gpu.detect`). Details
never show a secret value or the password of a URI.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from corral.errors import BadInput

__all__ = ["Check", "PreflightReport", "preflight", "safe_uri"]

Status = Literal["pass", "fail", "warn", "skip"]
_GB = 1024**3
_STYLE = {"pass": "green", "fail": "bold red", "warn": "yellow", "skip": "dim"}
_LABEL = {"pass": "PASS", "fail": "FAIL", "warn": "WARN", "skip": "SKIP"}
AWS_EXTRA = "not checked: needs the aws extra (checked when the run starts)"


@dataclass(frozen=True)
class Check:
    name: str
    status: Status
    detail: str


@dataclass
class PreflightReport:
    checks: list[Check] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failed

    @property
    def failed(self) -> list[Check]:
        return [c for c in self.checks if c.status == "fail"]

    def get(self, name: str) -> Check | None:
        return next((c for c in self.checks if c.name == name), None)

    def to_dict(self) -> dict[str, Any]:
        checks = [{**asdict(c), "detail": _shown(c.detail)} for c in self.checks]
        return {"ok": self.ok, "checks": checks}

    def table(self) -> Any:
        from rich.markup import escape
        from rich.table import Table

        table = Table(title="pre-flight checks", title_justify="left")
        table.add_column("check")
        table.add_column("result")
        table.add_column("detail", overflow="fold")
        for c in self.checks:
            label = f"[{_STYLE[c.status]}]{_LABEL[c.status]}[/]"
            table.add_row(escape(c.name), label, escape(_shown(c.detail)))
        return table

    def print(self, console: Any = None) -> None:
        if console is None:
            from rich.console import Console

            console = Console(stderr=True, highlight=False)
        console.print(self.table())

    def raise_if_failed(self) -> None:
        if self.failed:
            names = "; ".join(f"{c.name}: {_shown(c.detail)}" for c in self.failed)
            raise BadInput(f"pre-flight failed: {names}", fields=self.to_dict())


def _shown(detail: str) -> str:
    """``detail`` as it may be shown: every secret value in play (credentials in the
    environment, the secret store, a run's secrets) replaced by ``***``."""
    try:
        from corral.secrets.redact import redact

        return redact(detail)
    except Exception:  # showing the table must not fail: hide the detail instead
        return "(detail hidden: the secret redactor failed)"


def safe_uri(uri: str) -> str:
    """``uri`` without a password (``https://user:***@host/...``), also when the rest of it is
    malformed (a bad port, a broken IPv6 host): no parsing that could fail is involved."""
    head, sep, rest = uri.partition("://")
    if not sep:
        return uri
    end = next((i for i, c in enumerate(rest) if c in "/?#"), len(rest))
    userinfo, at, host = rest[:end].rpartition("@")
    if not at or ":" not in userinfo:
        return uri
    user = userinfo.split(":", 1)[0]
    netloc = f"{user}:***@{host}" if user else host
    return f"{head}://{netloc}{rest[end:]}"


def _scheme(uri: str) -> str:
    head, sep, _ = uri.partition("://")
    return head.lower() if sep and head.isalnum() else ""


def _local_path(uri: str) -> Path | None:
    """The local path of ``uri`` (a plain path or ``file://``), else None."""
    scheme = _scheme(uri)
    if scheme == "file":
        return Path(urlsplit(uri).path)
    return Path(uri).expanduser() if not scheme else None


def check_readable(name: str, target: str | os.PathLike[str]) -> Check:
    uri = os.fspath(target)
    scheme = _scheme(uri)
    if scheme == "s3":
        return Check(name, "skip", f"{safe_uri(uri)}: {AWS_EXTRA}")
    path = _local_path(uri)
    if path is None:
        return Check(name, "skip", f"{safe_uri(uri)}: not checked: {scheme}:// is remote")
    try:
        if not path.exists():
            return Check(name, "fail", f"{path} does not exist")
        if path.is_dir():
            with os.scandir(path) as it:
                first = next(it, None)
            if first is None:
                return Check(name, "warn", f"{path} is an empty directory")
            return Check(name, "pass", f"{path} (directory) is readable")
        with open(path, "rb") as f:
            f.read(1)
        return Check(name, "pass", f"{path} is readable")
    except OSError as e:
        return Check(name, "fail", f"{path} is not readable: {e.strerror or e}")


def _missing_dirs(path: Path) -> list[Path]:
    """``path`` and its ancestors that do not exist yet, deepest first."""
    missing = []
    for candidate in (path, *path.parents):
        if candidate.exists() or candidate.is_symlink():
            break
        missing.append(candidate)
    return missing


def _remove_created(created: list[Path]) -> None:
    """Remove the directories this check created, deepest first, if they are still empty."""
    for directory in created:
        try:
            directory.rmdir()
        except OSError:
            return  # not empty (something else wrote there meanwhile) or gone: leave the rest


def check_writable(name: str, directory: str | os.PathLike[str], min_free_gb: float) -> Check:
    """Create ``directory`` if needed, write, read back and delete a probe file, check the free
    space; then remove the directories this check created (and only those)."""
    path = Path(directory).expanduser()
    try:
        created = _missing_dirs(path.absolute())
    except OSError as e:  # no permission to look into a parent
        return Check(name, "fail", f"{path} is not writable: {e.strerror or e}")
    try:
        return _probe(name, path, min_free_gb)
    finally:
        _remove_created(created)


def _probe(name: str, path: Path, min_free_gb: float) -> Check:
    probe = path / f".corral-preflight-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        if path.exists() and not path.is_dir():
            return Check(name, "fail", f"{path} is not a directory")
        path.mkdir(parents=True, exist_ok=True)
        payload = b"corral pre-flight probe\n"
        with open(probe, "wb") as f:
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        if probe.read_bytes() != payload:
            return Check(name, "fail", f"{path}: a probe file read back differently")
    except NotADirectoryError:
        return Check(name, "fail", f"{path} is not writable: a parent is not a directory")
    except OSError as e:
        return Check(name, "fail", f"{path} is not writable: {e.strerror or e}")
    finally:
        try:
            probe.unlink()
        except OSError:
            pass
    free_gb = shutil.disk_usage(path).free / _GB
    if free_gb < min_free_gb:
        return Check(name, "fail", f"{path}: only {free_gb:.2f} GB free, needs {min_free_gb:g} GB")
    return Check(name, "pass", f"{path} is writable, {free_gb:.1f} GB free")


def check_storage(uri: str | os.PathLike[str], min_free_gb: float, name: str = "storage") -> Check:
    text = os.fspath(uri)
    scheme = _scheme(text)
    if scheme == "s3":
        return Check(name, "skip", f"{safe_uri(text)}: {AWS_EXTRA}")
    if not text.strip() or (scheme == "file" and not urlsplit(text).path):
        return Check(name, "fail", f"{safe_uri(text)!r}: no path given")
    path = _local_path(text)
    if path is None:
        return Check(name, "skip", f"{safe_uri(text)}: not checked: unknown scheme")
    return check_writable(name, path, min_free_gb)


def _tracker_spec(raw: Any) -> dict[str, Any]:
    if isinstance(raw, str):
        return {"type": raw}
    if hasattr(raw, "model_dump"):
        return raw.model_dump(exclude_none=True)
    if isinstance(raw, Mapping):
        return dict(raw)
    raise BadInput(f"tracker spec must be a name or a mapping with a 'type', got {raw!r}")


def _netrc_has(host: str) -> bool:
    import netrc

    try:
        return netrc.netrc().authenticators(host) is not None
    except (OSError, netrc.NetrcParseError):
        return False


def _importable(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def check_wandb(spec: Mapping[str, Any], env: Mapping[str, str]) -> Check:
    name = "tracker: wandb"
    if not _importable("wandb"):
        return Check(name, "fail", "wandb is not installed (pip install 'corral[trackers]')")
    mode = (spec.get("mode") or env.get("WANDB_MODE") or "").lower()
    if mode in ("offline", "disabled", "dryrun"):
        return Check(name, "pass", f"{mode} mode: no credentials needed")
    if env.get("WANDB_API_KEY"):
        return Check(name, "pass", "WANDB_API_KEY is set")
    host = urlsplit(env.get("WANDB_BASE_URL") or "https://api.wandb.ai").hostname or ""
    if _netrc_has(host):
        return Check(name, "pass", f"logged in ({host} in ~/.netrc)")
    return Check(
        name,
        "fail",
        "no WANDB_API_KEY (store it with `corral secret set WANDB_API_KEY` and list it under "
        "the spec's `secrets:`) and not offline (mode: offline or WANDB_MODE=offline)",
    )


def check_mlflow(spec: Mapping[str, Any], env: Mapping[str, str], timeout: float = 3.0) -> Check:
    name = "tracker: mlflow"
    if not _importable("mlflow"):
        return Check(name, "fail", "mlflow is not installed (pip install 'corral[trackers]')")
    uri = spec.get("tracking_uri") or env.get("MLFLOW_TRACKING_URI")
    if not uri:
        return Check(name, "warn", "no tracking_uri: metrics go to sqlite in the run directory")
    scheme = _scheme(uri) if "://" in uri else uri.partition(":")[0].lower()
    if scheme == "sqlite":
        db = uri[len("sqlite:///") :].split("?", 1)[0] if uri.startswith("sqlite:///") else ""
        if not db or db == ":memory:":
            return Check(name, "fail", f"{safe_uri(uri)}: expected sqlite:///path/to/mlflow.db")
        return _check_sqlite(name, Path(db))
    if scheme in ("http", "https"):
        import httpx

        try:
            response = httpx.get(uri.rstrip("/") + "/health", timeout=timeout)
        except (httpx.HTTPError, httpx.InvalidURL, ValueError) as e:  # a bad port: ValueError
            return Check(name, "fail", f"{safe_uri(uri)} is unreachable: {type(e).__name__}")
        if response.status_code != 200:
            return Check(name, "fail", f"{safe_uri(uri)}/health answered {response.status_code}")
        return Check(name, "pass", f"{safe_uri(uri)} is reachable")
    path = _local_path(uri)
    if path is not None:
        return check_writable(name, path, 0.0)
    return Check(name, "skip", f"{safe_uri(uri)}: not checked: unknown scheme")


def _check_sqlite(name: str, db: Path) -> Check:
    try:
        exists = db.exists()
    except OSError as e:
        return Check(name, "fail", f"{db} cannot be read: {e.strerror or e}")
    if exists:
        try:
            con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
            try:
                con.execute("PRAGMA schema_version").fetchone()
            finally:
                con.close()
        except sqlite3.Error as e:
            return Check(name, "fail", f"{db} is not a usable sqlite database: {e}")
        if not os.access(db, os.W_OK):
            return Check(name, "fail", f"{db} is not writable")
        return Check(name, "pass", f"sqlite store {db} is usable")
    writable = check_writable(name, db.parent, 0.0)
    if writable.status != "pass":
        return writable
    return Check(name, "pass", f"sqlite store {db} will be created")


def check_tracker(raw: Any, env: Mapping[str, str]) -> Check:
    spec = _tracker_spec(raw)
    kind = str(spec.get("type", "")).lower()
    if kind == "wandb":
        return check_wandb(spec, env)
    if kind == "mlflow":
        return check_mlflow(spec, env)
    if kind in ("jsonl", "null"):
        return Check(f"tracker: {kind}", "pass", "no credentials needed")
    return Check(f"tracker: {kind or '?'}", "fail", f"unknown tracker type '{kind}'")


def looks_like_hub_id(text: str) -> bool:
    """``org/name``: no scheme, one slash, not starting like a path (``.``, ``/``, ``~``)."""
    return not _scheme(text) and text.count("/") == 1 and not text.startswith((".", "/", "~"))


def check_model(model_path: str | os.PathLike[str], env: Mapping[str, str]) -> Check:
    text = os.fspath(model_path)
    scheme = _scheme(text)
    if scheme == "s3":
        return Check("model", "skip", f"{safe_uri(text)}: {AWS_EXTRA}")
    local = _local_path(text)
    if local is None:
        return Check("model", "skip", f"{safe_uri(text)}: not checked: {scheme}:// is remote")
    path = local
    try:
        if path.exists():
            if path.is_dir() and not any(path.iterdir()):
                return Check("model", "fail", f"{path} is an empty directory")
            return Check("model", "pass", f"{path} is present")
    except OSError as exc:  # e.g. no permission to look into a parent or the directory
        return Check("model", "fail", f"{path} cannot be read: {exc.strerror or exc}")
    offline = str(env.get("HF_HUB_OFFLINE", "")).strip().lower() in ("1", "true", "yes", "on")
    if looks_like_hub_id(text) and not offline:
        return Check("model", "skip", f"{text}: not checked: looks like a Hugging Face Hub id")
    return Check("model", "fail", f"{path} does not exist")


def check_gpu(need: int) -> Check:
    from corral.gpu import detect

    gpus = detect()
    if len(gpus) < need:
        found = ", ".join(sorted({g.name for g in gpus})) or "none"
        return Check("gpu", "fail", f"needs {need} GPU(s), {len(gpus)} visible ({found})")
    names = ", ".join(f"{g.name}" for g in gpus)
    return Check("gpu", "pass", f"{len(gpus)} visible: {names}")


def preflight(
    *,
    dataset: str | os.PathLike[str] | None = None,
    output_dir: str | os.PathLike[str] | None = None,
    checkpoint_dir: str | os.PathLike[str] | None = None,
    min_free_gb: float = 1.0,
    trackers: Iterable[Any] = (),
    model_path: str | os.PathLike[str] | None = None,
    need_gpu: bool | int = False,
    storage: str | os.PathLike[str] | None = None,
    raise_on_fail: bool = True,
    show: bool = True,
    console: Any = None,
    environ: Mapping[str, str] | None = None,
) -> PreflightReport:
    """Run the checks that apply to the arguments given; see the module docstring.

    ``need_gpu``: True means one GPU, an int that many. ``show`` prints the table (to stderr,
    or ``console``). ``environ`` replaces ``os.environ`` for the credential checks.
    """
    env = os.environ if environ is None else environ
    report = PreflightReport()
    add = report.checks.append
    if dataset is not None:
        add(check_readable("dataset", dataset))
    if output_dir is not None:
        add(check_writable("output_dir", output_dir, min_free_gb))
    if checkpoint_dir is not None:
        add(check_writable("checkpoint_dir", checkpoint_dir, min_free_gb))
    if storage is not None:
        add(check_storage(storage, min_free_gb))
    for raw in trackers:
        add(check_tracker(raw, env))
    if model_path is not None:
        add(check_model(model_path, env))
    need = int(need_gpu) if not isinstance(need_gpu, bool) else (1 if need_gpu else 0)
    if need > 0:
        add(check_gpu(need))
    if show:
        report.print(console)
    if raise_on_fail:
        report.raise_if_failed()
    return report
