"""The pipeline example's stage script, run directly with python and imported."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from corral.spec import load_spec

from .helpers import PIPELINE, run_script, script_env

STAGE = PIPELINE / "stage.py"


def _load_stage_module():
    spec = importlib.util.spec_from_file_location("pipeline_stage", STAGE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


stage = _load_stage_module()


def _run(tmp_path: Path, *args: str, **env: str):
    return run_script(STAGE, *args, "--seconds", "0.3", cwd=tmp_path, env=script_env(**env))


def test_stage_with_its_devices_reports_progress_and_writes_its_output(tmp_path: Path) -> None:
    progress = tmp_path / "progress.jsonl"
    result = _run(
        tmp_path,
        "detection",
        "--gpus",
        "4",
        CUDA_VISIBLE_DEVICES="0,1,2,3",
        CORRAL_NUM_GPUS="4",
        CORRAL_STAGE="detection",
        CORRAL_RUN_ID="run-1",
        CORRAL_PROGRESS_FILE=str(progress),
    )
    assert result.returncode == 0, result.stderr
    assert "CUDA_VISIBLE_DEVICES='0,1,2,3' CORRAL_STAGE='detection' CORRAL_NUM_GPUS='4'" in (
        result.stdout
    )
    output = json.loads((tmp_path / "out" / "detection.json").read_text())
    assert output["devices"] == ["0", "1", "2", "3"]
    assert output["run_id"] == "run-1" and output["stage"] == "detection"
    records = [json.loads(line) for line in progress.read_text().splitlines()]
    steps = [r["step"] for r in records if r["kind"] == "progress"]
    assert steps and steps[-1] == output["ticks"] and records[-1]["total"] == output["ticks"]


@pytest.mark.parametrize(
    ("visible", "num_gpus", "message"),
    [
        ("0,1", None, "expected 4 GPU(s), got 2"),
        ("0,1,2,3,4", None, "expected 4 GPU(s), got 5"),
        ("", None, "expected 4 GPU(s), got 0"),
        (None, None, "CUDA_VISIBLE_DEVICES is not set"),
        ("0,1,2,2", None, "repeats a device"),
        ("0,1,2,3", "8", "CORRAL_NUM_GPUS='8'"),
    ],
)
def test_stage_with_the_wrong_devices_exits_3_with_a_clear_message(
    tmp_path: Path, visible: str | None, num_gpus: str | None, message: str
) -> None:
    env = {}
    if visible is not None:
        env["CUDA_VISIBLE_DEVICES"] = visible
    if num_gpus is not None:
        env["CORRAL_NUM_GPUS"] = num_gpus
    with pytest.raises(stage.StageFailed) as failed:
        stage.visible_devices(env, 4)
    assert failed.value.code == 3 and message in str(failed.value)


def test_stage_process_exits_3_on_a_wrong_device_count_and_writes_nothing(
    tmp_path: Path,
) -> None:
    result = _run(tmp_path, "recognition", "--gpus", "4", CUDA_VISIBLE_DEVICES="4,5")
    assert result.returncode == 3
    assert "[recognition] error: expected 4 GPU(s), got 2" in result.stderr
    assert not (tmp_path / "out" / "recognition.json").exists()


def test_cpu_stage_accepts_no_devices(tmp_path: Path) -> None:
    result = _run(tmp_path, "lm", "--gpus", "0", CUDA_VISIBLE_DEVICES="")
    assert result.returncode == 0, result.stderr
    assert json.loads((tmp_path / "out" / "lm.json").read_text())["devices"] == []


def _output(out: Path, name: str, devices: list[str], span: tuple[float, float], run_id: str):
    out.mkdir(parents=True, exist_ok=True)
    data = {
        "stage": name,
        "run_id": run_id,
        "devices": devices,
        "seconds": span[1] - span[0],
        "started_at": span[0],
        "finished_at": span[1],
    }
    (out / f"{name}.json").write_text(json.dumps(data))


def test_evaluate_reports_disjoint_gpus_and_parallel_stages(tmp_path: Path) -> None:
    out = tmp_path / "out"
    _output(out, "detection", ["0", "1", "2", "3"], (10.0, 14.0), "run-1")
    _output(out, "recognition", ["4", "5", "6", "7"], (10.5, 13.0), "run-1")
    _output(out, "lm", [], (11.0, 12.0), "run-1")
    needs = ("--needs", "detection", "recognition", "lm")
    result = _run(
        tmp_path, "evaluate", "--gpus", "1", *needs, CUDA_VISIBLE_DEVICES="2", CORRAL_RUN_ID="run-1"
    )
    assert result.returncode == 0, result.stderr
    report = json.loads((out / "report.json").read_text())
    assert report["stages_ok"] == 3 and report["gpus_used"] == 8
    assert report["gpus_disjoint"] is True and report["ran_in_parallel"] is True
    assert report["stages"]["recognition"]["devices"] == ["4", "5", "6", "7"]
    assert (out / "evaluate.json").is_file()


def test_evaluate_sees_stages_that_ran_one_after_another() -> None:
    inputs = {
        "a": {"devices": ["0"], "seconds": 1, "started_at": 0.0, "finished_at": 1.0},
        "b": {"devices": ["1"], "seconds": 1, "started_at": 1.5, "finished_at": 2.5},
    }
    result = stage.compare(inputs)
    assert result["ran_in_parallel"] is False and result["gpus_disjoint"] is True


def test_evaluate_fails_when_stages_shared_a_gpu(tmp_path: Path) -> None:
    out = tmp_path / "out"
    _output(out, "detection", ["0", "1", "2", "3"], (0.0, 1.0), "r")
    _output(out, "recognition", ["3", "4", "5", "6"], (0.0, 1.0), "r")
    result = _run(
        tmp_path,
        "evaluate",
        "--gpus",
        "1",
        "--needs",
        "detection",
        "recognition",
        CUDA_VISIBLE_DEVICES="0",
    )
    assert result.returncode == 3
    assert "shared GPUs" in result.stderr and "3 (detection, recognition)" in result.stderr
    assert not (out / "report.json").exists()


def test_evaluate_exits_4_on_a_missing_or_stale_input(tmp_path: Path) -> None:
    out = tmp_path / "out"
    _output(out, "detection", ["0"], (0.0, 1.0), "old-run")
    args = ("evaluate", "--gpus", "1", "--needs", "detection", "lm")
    missing = _run(tmp_path, *args, CUDA_VISIBLE_DEVICES="0", CORRAL_RUN_ID="old-run")
    assert missing.returncode == 4
    assert "missing output of stage 'lm'" in missing.stderr

    _output(out, "lm", [], (0.0, 1.0), "old-run")
    stale = _run(tmp_path, *args, CUDA_VISIBLE_DEVICES="0", CORRAL_RUN_ID="new-run")
    assert stale.returncode == 4
    assert "from run 'old-run', not 'new-run'" in stale.stderr


def test_work_reports_each_tick_until_the_time_is_up(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [100.0]
    slept: list[float] = []
    reported: list[tuple[int, int]] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    monkeypatch.setattr(
        stage, "report_progress", lambda step, total: reported.append((step, total))
    )
    ticks = stage.work(1.0, clock=lambda: now[0], sleep=sleep)
    assert ticks == 4
    assert reported == [(1, 4), (2, 4), (3, 4), (4, 4)]
    assert now[0] == pytest.approx(101.0)


def test_pipeline_spec_splits_eight_gpus_between_parallel_stages() -> None:
    spec = load_spec(PIPELINE / "corral.yaml")
    stages = {s.name: s for s in spec.stages}
    assert (spec.resources.gpus.type, spec.resources.gpus.max) == ("L40S", 8)
    assert stages["detection"].gpus == [0, 1, 2, 3]
    assert stages["recognition"].gpus == [4, 5, 6, 7]
    assert stages["lm"].gpus == 0 and stages["evaluate"].gpus == 1
    assert set(stages["evaluate"].needs) == {"detection", "recognition", "lm"}
    assert not any(stages[n].needs for n in ("detection", "recognition", "lm"))
    for s in spec.stages:  # the --gpus each stage checks matches what the spec gives it
        count = len(s.gpus) if isinstance(s.gpus, list) else s.gpus
        assert f"stage.py {s.name} --gpus {count}" in s.run
