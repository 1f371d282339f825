"""The real tools, run unmodified as a stage of a real agent with their ``progress`` preset:
what the agent reads from their output as they write it (tiny CPU runs of a few seconds).
``tool_output/`` holds the same output captured, for the fast parser tests."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from support.tools import ultralytics_yolo

from .helpers import make_plan

pytestmark = [pytest.mark.slow, pytest.mark.torch]

SCRIPTS = Path(__file__).parents[1] / "support" / "tool_scripts"


def _records(plan, stage: str) -> list[dict]:
    path = Path(plan.state_dir) / "progress" / f"{stage}.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return [r for r in map(json.loads, lines) if r["kind"] == "progress"]


def _log(plan, stage: str) -> str:
    return (Path(plan.state_dir) / "logs" / f"{stage}.log").read_text(errors="replace")


def test_hf_trainer_steps_and_loss_come_from_its_bar_not_the_tokenisation_bar(
    tmp_path, start_agent
):
    pytest.importorskip("transformers")
    run = f"{sys.executable} {SCRIPTS / 'hf_trainer.py'} out 30"
    plan = make_plan(tmp_path, [{"name": "train", "run": run, "progress": "hf"}])
    status = start_agent(plan).wait_finished(timeout=180)
    log = _log(plan, "train")
    assert status["phase"] == "succeeded", log[-3000:]
    assert "| 184/184 [" in log  # the tokenisation's bar came first, as in run_clm.py
    progress = next(s for s in status["stages"] if s["name"] == "train")["progress"]
    assert (progress["step"], progress["total"], progress["percent"]) == (30, 30, 100.0)
    last_loss = log.rsplit("{'loss': '", 1)[1].split("'", 1)[0]
    assert progress["loss"] == float(last_loss)
    assert progress["metrics"]["learning_rate"] == 5e-05 and "eval_loss" in progress["metrics"]
    records = _records(plan, "train")
    assert {r["total"] for r in records} == {30}  # never the 184 of the tokenisation bar
    assert [r["step"] for r in records] == sorted(r["step"] for r in records)
    # each printed dict at the step it was logged at (every 5), however late the bar was drawn
    assert [r["step"] for r in records if "grad_norm" in r["metrics"]] == [5, 10, 15, 20, 25, 30]


def test_lightning_default_rich_bar_gives_batches_and_loss_while_it_runs(tmp_path, start_agent):
    """Lightning 2.6 draws its default bar with Rich (importable beside corral), which draws
    nothing on a non-terminal until the run ends: the agent gives a ``progress: lightning``
    stage the environment that makes Rich draw it as it goes. A spec that sets it otherwise
    (``TTY_COMPATIBLE=0`` here) keeps its setting, and then nothing is read until the end."""
    pytest.importorskip("lightning")
    pytest.importorskip("rich")
    script = SCRIPTS / "lightning_fit.py"
    plan = make_plan(
        tmp_path,
        [
            {"name": "train", "run": f"{sys.executable} {script} a 3", "progress": "lightning"},
            {
                "name": "plain",
                "run": f"{sys.executable} {script} b 3",
                "progress": "lightning",
                "env": {"TTY_COMPATIBLE": "0"},
            },
        ],
    )
    status = start_agent(plan).wait_finished(timeout=180)
    assert status["phase"] == "succeeded", _log(plan, "train")[-3000:]
    assert (Path(plan.workdir) / "a" / "lightning_logs" / "version_0" / "checkpoints").is_dir()
    stages = {s["name"]: s for s in status["stages"]}
    progress = stages["train"]["progress"]
    assert (progress["step"], progress["total"], progress["epoch"]) == (48, 48, 2)
    assert isinstance(progress["loss"], float) and progress["loss"] > 0
    assert "val_loss" in progress["metrics"]
    steps = [r["step"] for r in _records(plan, "train")]
    assert len(set(steps)) >= 6 and steps == sorted(steps)  # batch by batch, as it ran
    assert {r["epoch"] for r in _records(plan, "train")} == {0, 1, 2}
    # the spec's own TTY_COMPATIBLE=0: Rich drew the bar once, at the end
    assert {r["step"] for r in _records(plan, "plain")} <= {48}


def test_ultralytics_yolo_train_gives_batches_and_losses(tmp_path, start_agent):
    python, yolo = ultralytics_yolo()
    data = tmp_path / "data"
    subprocess.run([python, str(SCRIPTS / "ultralytics_data.py"), str(data)], check=True)
    run = (
        f"{yolo} train model=yolov8n.yaml data={data / 'data.yaml'} epochs=3 imgsz=64 batch=4 "
        f"device=cpu workers=0 plots=False amp=False project={tmp_path / 'runs'} name=t"
    )
    plan = make_plan(
        tmp_path,
        [{"name": "train", "run": run, "progress": "ultralytics", "env": {"YOLO_OFFLINE": "1"}}],
    )
    status = start_agent(plan).wait_finished(timeout=300)
    assert status["phase"] == "succeeded", _log(plan, "train")[-3000:]
    assert (tmp_path / "runs" / "t" / "weights" / "last.pt").is_file()
    progress = next(s for s in status["stages"] if s["name"] == "train")["progress"]
    # 16 images in batches of 4: 4 batches an epoch, 12 over the 3 epochs
    assert (progress["step"], progress["total"], progress["epoch"]) == (12, 12, 3)
    losses = ("box_loss", "cls_loss", "dfl_loss")
    assert progress["loss"] == pytest.approx(sum(progress["metrics"][k] for k in losses))
    assert "box_mAP50-95" in progress["metrics"]
    steps = [r["step"] for r in _records(plan, "train")]
    assert steps == sorted(steps) and len(set(steps)) > 3  # batches, not only the 3 epochs
