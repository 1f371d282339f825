"""corral's own processes skip pydantic's search for plugins (every installed distribution's
metadata, read on the first model class); a user's choice and a user's process are left alone."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from corral.startup import PYDANTIC_PLUGINS_ENV

# a model class built after the call: the search would read the distributions' metadata
SCRIPT = textwrap.dedent(
    """
    import importlib.metadata, sys
    from corral.startup import skip_pydantic_plugins

    searched = []
    real = importlib.metadata.distributions

    def distributions(*a, **k):
        searched.append(True)
        return real(*a, **k)

    importlib.metadata.distributions = distributions
    done = skip_pydantic_plugins() if sys.argv[1] == "skip" else None
    from pydantic import BaseModel

    class Model(BaseModel):
        x: int

    assert Model(x=1).x == 1
    print(done, bool(searched))
    """
)


def _run(mode: str, **env: str) -> list[str]:
    environ = {k: v for k, v in os.environ.items() if k != PYDANTIC_PLUGINS_ENV}
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, mode],
        env={**environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def test_without_the_call_pydantic_searches_the_distributions():
    assert _run("plain") == ["None", "True"]  # the cost the call removes is real here


def test_the_call_skips_the_search_and_leaves_the_environment_alone():
    assert _run("skip") == ["True", "False"]
    assert PYDANTIC_PLUGINS_ENV not in os.environ


@pytest.mark.parametrize("value", ["", "some_plugin"])
def test_the_users_own_setting_decides(value):
    # set by the user (even to name one plugin), pydantic's switch is theirs: no skip
    assert _run("skip", **{PYDANTIC_PLUGINS_ENV: value}) == ["False", "True"]


# what a process that searched leaves behind: sitecustomize runs before any corral code
SITECUSTOMIZE = """
import importlib.metadata, os
_real = importlib.metadata.distributions

def _distributions(*a, **k):
    open(os.environ["SEARCH_MARK"], "w").close()
    return _real(*a, **k)

importlib.metadata.distributions = _distributions
"""


@pytest.mark.parametrize(
    "command",
    [
        ["-m", "corral.agent", "--plan", "missing.json"],
        ["-m", "corral.cli", "launch", "missing.yaml"],
    ],
    ids=["agent", "launch"],
)
def test_corrals_processes_build_their_models_without_the_search(tmp_path, command):
    """The agent (its plan's models) and ``corral launch`` (the spec's) both build models
    before they find the file missing; neither reads the distributions' metadata."""
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(SITECUSTOMIZE)
    mark = tmp_path / "searched"
    environ = {k: v for k, v in os.environ.items() if k != PYDANTIC_PLUGINS_ENV}
    path = os.pathsep.join([str(tmp_path / "site"), environ.get("PYTHONPATH", "")])
    out = subprocess.run(
        [sys.executable, *command],
        env={
            **environ,
            "PYTHONPATH": path,
            "SEARCH_MARK": str(mark),
            "CORRAL_HOME": str(tmp_path / "home"),
            "CORRAL_AGENT_TOKEN": "t" * 32,
        },
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode != 0 and "missing" in out.stderr, out.stderr  # it got that far
    assert not mark.exists()
    # the same process without corral's call does search (the mark is not dead code)
    probe = subprocess.run(
        [sys.executable, "-c", "import pydantic\nclass M(pydantic.BaseModel):\n    x: int"],
        env={**environ, "PYTHONPATH": path, "SEARCH_MARK": str(mark)},
        timeout=60,
    )
    assert probe.returncode == 0 and mark.exists()
