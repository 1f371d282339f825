"""Shared by the service tests: runs recorded straight in the store (no controller), and
stage log files laid out as the controller copies them."""

from __future__ import annotations

from pathlib import Path

from corral import paths
from corral.spec import load_spec_text
from corral.store import Store


def resolved_spec(text: str = "name: rec\nstages: [{name: train, run: 'true'}]\n") -> dict:
    """A spec as a run records it: validated, every default filled in."""
    return load_spec_text(text).model_dump(mode="json")


def record_run(store: Store, name: str = "rec", spec: dict | None = None) -> str:
    """A PENDING run with ``spec`` (default: one stage named ``train``), nothing launched."""
    run = store.create_run(
        name=name,
        spec=resolved_spec() if spec is None else spec,
        spec_hash="h",
        spec_path="corral.yaml",
        workdir="/tmp",
    )
    return run.id


def write_log(run_id: str, attempt: int, stage: str, text: str) -> Path:
    path = paths.home() / "runs" / run_id / "logs" / f"a{attempt}" / f"{stage}.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as f:
        f.write(text)
    return path
