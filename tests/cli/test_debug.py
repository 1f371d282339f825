"""``corral debug preempt``: a local run and a fake-cloud run are preempted by hand and
recovered by the controller; a finished run, a run with no machine and a provider that cannot
preempt are clear errors."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path
from typing import ClassVar

import pytest
import typer
from typer.testing import CliRunner

from corral.cli import debug
from corral.cli.app import app as corral_app
from corral.cli.errors import CorralGroup
from corral.errors import EXIT_CONFLICT, EXIT_PROVIDER
from corral.providers import registry
from corral.providers.base import (
    Instance,
    InstanceState,
    InstanceStatus,
    Offer,
    Provider,
    Requirements,
)
from corral.providers.fake import ENV_FAKE_CLOUD
from corral.store import Store
from support.waiting import wait_until

from .helpers import wait_state

runner = CliRunner()

# the debug sub-app mounted the way `corral` mounts it (`corral debug preempt ...`)
root = typer.Typer(cls=CorralGroup, add_completion=False)
root.add_typer(debug.app, name="debug")


@root.callback()
def _root() -> None:
    """corral (test mount)"""


def cli(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(root if args[0] == "debug" else corral_app, list(args))
    return result.exit_code, result.stdout, result.stderr


def write_spec(tmp_path: Path, body: str) -> str:
    path = tmp_path / "corral.yaml"
    path.write_text(textwrap.dedent(body).lstrip())
    return str(path)


SPOTTY = """
    name: spotty
    resources: {{providers: [{provider}]}}
    stages:
      - name: train
        run: |
          cd "$CORRAL_CHECKPOINT_DIR"
          echo "attempt $CORRAL_ATTEMPT" >> attempts.txt
          if [ "$CORRAL_ATTEMPT" = 1 ]; then
            trap 'echo noticed >> attempts.txt; exit 75' TERM; touch up; sleep 60 & wait
          fi
"""


@pytest.mark.slow
@pytest.mark.parametrize("provider", ["local", "fake"])
def test_preempting_a_run_by_hand_makes_the_controller_recover_it(
    provider: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if provider == "fake":
        cloud = tmp_path / "cloud.json"
        cloud.write_text(json.dumps({"launch_delay_s": 0.2, "notice_s": 5.0}))
        monkeypatch.setenv(ENV_FAKE_CLOUD, str(cloud))
        monkeypatch.setenv("CORRAL_PROVIDERS", "fake")
    code, out, err = cli(
        "launch", write_spec(tmp_path, SPOTTY.format(provider=provider)), "--detach", "--json"
    )
    assert code == 0, err
    run_id = json.loads(out)["id"]
    # the markers are in the run's checkpoint directory: under CORRAL_HOME on this machine,
    # on the fake cloud's volume of the run for machines that share no file with this one
    home = Path(os.environ["CORRAL_HOME"])
    marks = home / "runs" / run_id if provider == "local" else home / "fake" / "volumes" / run_id
    marks /= "checkpoints"
    wait_until((marks / "up").exists, 60, message="attempt 1's trap")  # it runs, trap set
    code, out, err = cli("debug", "preempt", run_id, "--grace", "3", "--json")
    assert code == 0, err
    info = json.loads(out)
    assert (info["run_id"], info["attempt"], info["provider"]) == (run_id, 1, provider)
    # the controller may already have torn the preempted machine down
    assert info["instance_state"] in {InstanceState.PREEMPTED, InstanceState.TERMINATED}
    assert info["key"] == f"{run_id}-a1" and info["grace_s"] == 3.0
    run = wait_state(run_id, {"SUCCEEDED", "FAILED"})
    assert run["state"] == "SUCCEEDED", run["reason"]
    assert run["attempt"] == 2
    first = Store.open().attempts(run_id)[0]
    assert first.exit_reason == "preempted" and first.provider == provider
    assert (marks / "attempts.txt").read_text() == "attempt 1\nnoticed\nattempt 2\n"


def test_preempting_a_finished_run_is_a_conflict(tmp_path: Path) -> None:
    code, out, err = cli(
        "launch", write_spec(tmp_path, "name: quick\nrun: echo hi\n"), "--wait", "--json"
    )
    assert code == 0, err
    run_id = json.loads(out)["id"]
    code, _, err = cli("debug", "preempt", run_id)
    assert code == EXIT_CONFLICT
    assert f"run {run_id} is SUCCEEDED: it has no machine to preempt" in err
    assert "Traceback" not in err


def _run(provider: str, *, launched: bool) -> str:
    store = Store.open()
    run = store.create_run(name="manual", spec={}, spec_hash="h", spec_path="x", workdir="/tmp")
    if not launched:
        return run.id
    store.transition(run.id, "PROVISIONING", "launching", attempt=1)
    key = f"{run.id}-a1"
    store.record_intent(run_id=run.id, attempt=1, provider=provider, key=key)
    inst = Instance(
        provider=provider, instance_id="i-1", key=key, offer=Offer(provider=provider, offer_id="o")
    )
    store.update_resource(key, state="active", instance=inst.model_dump(mode="json"))
    return run.id


class NoPreemptProvider(Provider):
    """A provider without SupportsSimulatedPreemption (its reason is what the user sees)."""

    name = "nopreempt"
    unsupported: ClassVar[dict[str, str]] = {
        "SupportsSimulatedPreemption": "its machines can only be terminated"
    }

    def offers(self, req: Requirements) -> list[Offer]:
        return []

    def launch(self, offer, bootstrap, key):
        raise NotImplementedError

    def status(self, instance: Instance) -> InstanceStatus:
        return InstanceStatus(state=InstanceState.RUNNING)

    def terminate(self, instance: Instance) -> None:
        return None

    def find(self, key: str) -> Instance | None:
        return None


def test_a_provider_that_cannot_preempt_is_named_with_its_reason(monkeypatch) -> None:
    monkeypatch.setitem(registry._PROVIDERS, "nopreempt", f"{__name__}:NoPreemptProvider")
    run_id = _run("nopreempt", launched=True)
    code, _, err = cli("debug", "preempt", run_id)
    assert code == EXIT_PROVIDER
    assert "nopreempt does not support simulated preemption" in err
    assert "its machines can only be terminated" in err


def test_a_run_without_a_launched_machine_is_a_conflict() -> None:
    run_id = _run("local", launched=False)
    code, _, err = cli("debug", "preempt", run_id)
    assert code == EXIT_CONFLICT
    assert f"run {run_id} (PENDING, attempt 0) has no launched machine to preempt" in err
