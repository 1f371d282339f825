"""scripts/new_provider.py scaffolds a provider that works as generated: in a copy of the
repository, the new folder passes ruff and mypy, the import contracts cover it without any
list being touched, the registry knows it, and its own tests (the contract suite and a
machine booting the agent, against its fake cloud) pass."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "new_provider.py"


def _copy_repo(dest: Path) -> Path:
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache", ".mypy_cache")
    for part in ("src", "tests", "scripts", "contracts"):
        shutil.copytree(ROOT / part, dest / part, ignore=ignore)
    shutil.copy(ROOT / "pyproject.toml", dest / "pyproject.toml")
    return dest


def _run(argv: list[str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(cwd / "src")}
    return subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


@pytest.mark.slow
def test_a_scaffolded_provider_is_checked_registered_and_passes_its_own_tests(tmp_path):
    repo = _copy_repo(tmp_path / "repo")
    made = _run([sys.executable, str(repo / "scripts/new_provider.py"), "acme"], repo)
    assert made.returncode == 0, made.stderr
    assert "src/corral/providers/acme/provider.py" in made.stdout
    assert "tests/providers/acme/test_contract.py" in made.stdout
    new = ["src/corral/providers/acme", "tests/providers/acme"]
    ruff = _run([sys.executable, "-m", "ruff", "check", *new], repo)
    assert ruff.returncode == 0, ruff.stdout
    mypy = _run([sys.executable, "-m", "mypy", "src/corral/providers/acme"], repo)
    assert mypy.returncode == 0, mypy.stdout
    shown = _run([sys.executable, "scripts/lint_imports.py", "--show"], repo)
    assert "corral.providers.acme" in shown.stdout  # derived from the folder, no list touched
    layering = _run([sys.executable, "scripts/lint_imports.py"], repo)
    assert layering.returncode == 0, layering.stdout
    named = _run(
        [
            sys.executable,
            "-c",
            "from corral.providers import registry; print(registry.provider_names())",
        ],
        repo,
    )
    assert "'acme'" in named.stdout
    tests = _run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "tests/providers/acme"],
        repo,
        timeout=600,
    )
    assert tests.returncode == 0, tests.stdout[-3000:]
    assert " passed" in tests.stdout and "skipped" not in tests.stdout


def test_a_taken_or_malformed_name_is_one_line_and_writes_nothing(tmp_path):
    repo = tmp_path / "repo"
    (repo / "src/corral/providers").mkdir(parents=True)
    registry = ROOT / "src/corral/providers/registry.py"
    shutil.copy(registry, repo / "src/corral/providers/registry.py")
    for name, why in (("salad", "exists already"), ("Bad-Name", "is not a provider name")):
        done = _run([sys.executable, str(SCRIPT), name, "--root", str(repo)], repo)
        assert done.returncode != 0
        assert done.stderr.strip().count("\n") == 0 and why in done.stderr
    assert sorted(p.name for p in (repo / "src/corral/providers").iterdir()) == ["registry.py"]
    assert (repo / "src/corral/providers/registry.py").read_text() == registry.read_text()
