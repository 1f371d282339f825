"""Helpers for the store tests (a fake clock, a run factory, subprocess runners)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from datetime import UTC, datetime, timedelta

from corral.store import RunRecord, Store


class FakeClock:
    """A settable clock: ``clock()`` returns ``now``; ``advance`` moves it."""

    def __init__(self, start: datetime = datetime(2026, 1, 2, 3, 4, 5, 123456, tzinfo=UTC)):
        self.now = start

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> datetime:
        self.now += timedelta(seconds=seconds)
        return self.now


def make_run(store: Store, name: str = "quickstart", **kw: object) -> RunRecord:
    return store.create_run(
        name=name,
        spec={"name": name, "stages": [{"name": "train", "run": "python train.py"}]},
        spec_hash="abc123",
        spec_path=f"/jobs/{name}.yaml",
        workdir="/jobs",
        **kw,  # type: ignore[arg-type]
    )


def run_python(code: str, *, env: dict[str, str] | None = None, timeout: float = 60) -> str:
    """Run ``code`` in a fresh interpreter; return its stdout (fails the test on error)."""
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def start_python(code: str, *, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
