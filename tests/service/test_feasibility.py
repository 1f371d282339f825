"""`corral estimate`, `corral launch` (and `corral preflight`) judge a spec with the same
planner call: an estimate never says "would wait" of a launch that is refused at once."""

from __future__ import annotations

from pathlib import Path

import pytest

from control.planner.helpers import use_fake_cloud
from corral.errors import InfeasibleRequest
from corral.service.estimate import estimate_cost
from corral.service.feasibility import launch_plan
from corral.service.submit import submit_run
from corral.spec import load_spec

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.mark.parametrize(
    "override",
    ["resources.gpus=H100:8", "resources.max_hourly_price=0.01"],
    ids=["no-such-machine", "over-every-price"],
)
def test_an_estimate_says_refused_where_a_launch_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, override: str
) -> None:
    use_fake_cloud(tmp_path, monkeypatch)
    monkeypatch.setenv("CORRAL_PROVIDERS", "fake")  # the local machine's GPU costs nothing
    job = tmp_path / "job.yaml"
    job.write_text("name: j\nrun: echo hi\nresources: {gpus: 'L40S:1'}\n")
    found = estimate_cost(job, hours=1, overrides=[override])
    assert (found.launch, found.chosen) == ("refused", None)
    with pytest.raises(InfeasibleRequest) as refused:
        submit_run(job, overrides=[override], start_controller=False)
    assert found.refusal == refused.value.message


def test_an_estimate_says_now_where_a_launch_starts(tmp_path: Path, monkeypatch) -> None:
    use_fake_cloud(tmp_path, monkeypatch)
    job = tmp_path / "job.yaml"
    job.write_text("name: j\nrun: echo hi\nresources: {gpus: 'L40S:1'}\n")
    found = estimate_cost(job, hours=1)
    assert (found.launch, found.refusal) == ("now", None) and found.chosen is not None


def test_the_default_fake_cloud_runs_the_readmes_8_gpu_pipeline(monkeypatch) -> None:
    monkeypatch.setenv("CORRAL_PROVIDERS", "fake")
    monkeypatch.delenv("CORRAL_FAKE_CLOUD", raising=False)
    plan = launch_plan(load_spec(EXAMPLES / "pipeline" / "corral.yaml"))
    assert plan.cheapest is not None
    assert (plan.cheapest.gpu_type, plan.cheapest.gpu_count) == ("L40S", 8)
