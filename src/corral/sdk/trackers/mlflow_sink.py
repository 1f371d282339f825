"""MLflow sink, on the client API (no global "active run"). ``mlflow`` is imported only when
this tracker is built.

The MLflow run is found by the tag ``corral.run_id`` = ``$CORRAL_RUN_ID`` (also its run name),
so every attempt of a corral run continues the same MLflow run; without a corral run id each
tracker starts a new MLflow run. For a ``sqlite:///path/mlflow.db`` store, artifacts (tables)
go next to the database in ``mlartifacts/`` unless ``artifact_location`` says otherwise.
"""

from __future__ import annotations

import json
import logging
import os
import posixpath
import re
import time
from pathlib import Path
from typing import Any

from corral.sdk.trackers.base import Tracker, numeric_metrics, table_columns
from corral.wire.env import ENV_RUN_ID

__all__ = ["RUN_ID_TAG", "MlflowTracker", "metric_name"]

RUN_ID_TAG = "corral.run_id"
#: MLflow's limits: a metric name's characters and length, metrics per ``log_batch`` call.
_NAME_CHARS = re.compile(r"[^/\w.\- :]")
_MAX_NAME = 250
_MAX_BATCH = 1000

log = logging.getLogger("corral.sdk.trackers")


def metric_name(key: str) -> str:
    """``key`` as a name MLflow accepts: other characters than letters, digits, ``_-. :/``
    become ``_``, at most 250 characters, and no name that reads as another path
    (``a//b``, ``./a``, ``/a``, ``..``); a valid name is kept as it is."""
    name = _NAME_CHARS.sub("_", key)[:_MAX_NAME]
    norm = posixpath.normpath(name)
    if not name or norm != name or norm == "." or norm.startswith(("..", "/")):
        name = re.sub(r"[./]", "_", name) or "_"
    return name


def _sqlite_file(uri: str) -> Path | None:
    prefix = "sqlite:///"
    if not uri.startswith(prefix):
        return None
    rest = uri[len(prefix) :].split("?", 1)[0]
    return Path(rest) if rest and rest != ":memory:" else None


def _plain(value: Any) -> Any:
    if hasattr(value, "item") and callable(value.item):
        try:
            return value.item()
        except Exception:
            pass
    return str(value)


class MlflowTracker(Tracker):
    def __init__(
        self,
        tracking_uri: str | None = None,
        *,
        experiment: str | None = None,
        run_id: str | None = None,
        artifact_location: str | None = None,
        params: dict[str, Any] | None = None,
    ):
        from mlflow import MlflowClient

        uri = tracking_uri or os.environ.get("MLFLOW_TRACKING_URI")
        if not uri:
            from corral.sdk.config import run_dir

            uri = f"sqlite:///{run_dir() / 'mlflow.db'}"
        db = _sqlite_file(uri)
        if db is not None:
            db.parent.mkdir(parents=True, exist_ok=True)
            if artifact_location is None:
                artifact_location = (db.parent.resolve() / "mlartifacts").as_uri()
        self.tracking_uri = uri
        self.client = MlflowClient(tracking_uri=uri)
        name = experiment or "corral"
        found = self.client.get_experiment_by_name(name)
        if found is not None:
            experiment_id = found.experiment_id
        else:
            experiment_id = self.client.create_experiment(name, artifact_location=artifact_location)
        self.experiment_id = experiment_id
        corral_id = run_id or os.environ.get(ENV_RUN_ID) or None
        self.corral_run_id = corral_id
        self.run_id = self._find_or_create(experiment_id, corral_id)
        self._renamed: dict[str, str] = {}
        if params:
            for key, value in params.items():
                self.client.log_param(self.run_id, str(key), str(value)[:6000])

    def _find_or_create(self, experiment_id: str, corral_id: str | None) -> str:
        if corral_id:
            runs = [
                run
                for run in self.client.search_runs(
                    [experiment_id],
                    filter_string=_tag_filter(corral_id),
                    max_results=100,
                    order_by=["attributes.start_time ASC"],
                )
                if run.data.tags.get(RUN_ID_TAG) == corral_id  # LIKE (below) matches more
            ]
            if runs:
                run_id = runs[0].info.run_id
                if runs[0].info.status != "RUNNING":
                    self.client.update_run(run_id, status="RUNNING")
                return run_id
        tags = {RUN_ID_TAG: corral_id} if corral_id else {}
        run = self.client.create_run(experiment_id, run_name=corral_id, tags=tags)
        return run.info.run_id

    def log(self, metrics: dict[str, Any], step: int) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        values: dict[str, float] = {}
        for key, value in numeric_metrics(metrics).items():
            values[self._name(key)] = value  # one bad name must not lose the whole batch
        batch = [Metric(key=k, value=v, timestamp=now, step=int(step)) for k, v in values.items()]
        for start in range(0, len(batch), _MAX_BATCH):
            self.client.log_batch(self.run_id, metrics=batch[start : start + _MAX_BATCH])

    def _name(self, key: str) -> str:
        name = self._renamed.get(key)
        if name is None:
            name = self._renamed[key] = metric_name(key)
            if name != key:
                log.warning("MLflow: metric %r is logged as %r (a name MLflow accepts)", key, name)
        return name

    def log_table(self, name: str, rows: list[dict[str, Any]], step: int) -> None:
        """A JSON artifact ``tables/<name>/step-<step>.json`` with ``columns`` and ``rows``."""
        doc = {"name": name, "step": int(step), "columns": table_columns(rows), "rows": rows}
        doc = json.loads(json.dumps(doc, default=_plain))  # numpy/torch values become plain
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
        self.client.log_dict(self.run_id, doc, f"tables/{safe}/step-{int(step)}.json")

    def finish(self) -> None:
        """End the MLflow run: FINISHED, or KILLED when the process was preempted (the next
        attempt sets it back to RUNNING)."""
        import sys

        status = "FINISHED"
        signals = sys.modules.get("corral.sdk.signals")
        try:
            if signals is not None and signals.preempted():
                status = "KILLED"
        except Exception:
            pass
        self.client.set_terminated(self.run_id, status=status)

    def __repr__(self) -> str:
        return f"MlflowTracker(tracking_uri={self.tracking_uri!r}, run_id={self.run_id!r})"


def _tag_filter(corral_id: str) -> str:
    """An MLflow filter for the runs tagged ``corral_id``. Values are quoted with ' or "; an id
    holding both quote characters is matched with LIKE, each quote a one-character wildcard,
    and the caller keeps the exact matches."""
    if "'" not in corral_id:
        return f"tags.`{RUN_ID_TAG}` = '{corral_id}'"
    if '"' not in corral_id:
        return f'tags.`{RUN_ID_TAG}` = "{corral_id}"'
    pattern = corral_id.replace("'", "_").replace('"', "_")
    return f"tags.`{RUN_ID_TAG}` LIKE '{pattern}'"
