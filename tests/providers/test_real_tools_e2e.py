"""The real tools, unmodified, preempted mid-run on the fake cloud and resumed on a new machine:
the HF Trainer (transformers 5.x, a script shaped like ``run_clm.py``), a Lightning script with
``ModelCheckpoint`` and the default progress bar, and Ultralytics' ``yolo train`` (where an
interpreter with ultralytics is at hand). Each saves its own checkpoints its own way at
``checkpoints.path``; the test waits for the first machine's checkpoints to be mirrored,
preempts that machine, and checks that

* every checkpoint complete on the first machine's disk when it stopped was mirrored (read
  from that machine's disk, which the test alone can see, against the ``checkpoint.uploaded``
  events), and nothing that was not;
* the second machine restored the newest of them, and the tool says, in its own words, that it
  went on from exactly that checkpoint's step; its later checkpoints are the ones after it.

The first attempt of each is paced by the test (a sleep per step while ``$CORRAL_ATTEMPT`` is 1,
in the test's own script or callback), so the preemption, sent once a known checkpoint is up,
lands mid-run; the second runs at full speed."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from corral.providers.fake import ENV_FAKE_CLOUD, FakeProvider
from corral.store import Store
from support.tools import ultralytics_yolo
from support.waiting import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.torch]

SCRIPTS = Path(__file__).parents[1] / "support" / "tool_scripts"
#: ``checkpoints.settle``: the tools' checkpoints are copied once closed and unchanged whatever
#: it is; it sets when "the path matched nothing while the log grows" is said (three settles),
#: and a tool's start (imports, model, data) before its first save can take longer than 30 s
#: on a loaded 2-core machine
SETTLE = "60s"


@dataclass
class Preempted:
    run_id: str
    state: str
    reason: str | None
    #: the first machine's "/" (its disk as the stop left it)
    first_fs: Path
    #: checkpoint names (workdir-relative) uploaded by attempt 1 and 2
    uploaded: dict[int, list[str]]
    #: what attempt 2 restored
    restored: list[str]
    logs: dict[int, str]
    store: Store


def _preempt_once(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    files: dict[str, str],
    spec: str,
    saves: int,
    prepare: Callable[[Path], object] | None = None,
) -> Preempted:
    """Launch ``spec`` (``BUCKET`` standing for the storage folder) with ``files`` in its
    workdir (and whatever ``prepare`` makes there) on the fake cloud, preempt its machine once
    attempt 1 has mirrored ``saves`` checkpoints, and wait for the run to end."""
    from control.helpers import start_controller, submit, wait_for

    offer = {
        "id": "box",
        "region": "r1",
        "gpu_type": "L40S",
        "gpu_count": 1,
        "spot_price": 0.3,
        "on_demand_price": 0.9,
        "capacity": 2,
    }
    cloud_file = tmp_path / "cloud.json"
    # the first machine's disk is kept aside when it goes (no machine sees it), so the test
    # can compare what the tool left there with what was mirrored
    cloud = {"offers": [offer], "launch_delay_s": 0.3, "keep_gone_disks": True}
    cloud_file.write_text(json.dumps(cloud))
    monkeypatch.setenv(ENV_FAKE_CLOUD, str(cloud_file))
    monkeypatch.setenv("CORRAL_PROVIDERS", "fake")
    home = Path(os.environ["CORRAL_HOME"])
    work, bucket = tmp_path / "work", tmp_path / "bucket"
    work.mkdir()
    for name, text in files.items():
        (work / name).write_text(text)
    if prepare is not None:
        prepare(work)
    (work / "corral.yaml").write_text(spec.replace("BUCKET", str(bucket)).replace("SETTLE", SETTLE))
    run_id = submit(work / "corral.yaml")
    store = Store.open()

    def uploaded(attempt: int) -> list[str]:
        events = store.events(run_id, types=["checkpoint.uploaded"])
        return [e.data["name"] for e in events if e.attempt == attempt]

    def events() -> str:
        return str([(e.attempt, e.type, e.reason, e.data) for e in store.events(run_id)])[-4000:]

    proc = start_controller()
    try:
        wait_until(
            lambda: len(uploaded(1)) >= saves,
            timeout=240,
            interval=0.2,
            message=lambda: f"attempt 1's first {saves} checkpoints mirrored; events: {events()}",
        )
        shutil.rmtree(work)  # the code travelled: only the storage is shared from now on
        [res] = [r for r in store.resources(run_id=run_id, open_only=True) if r.instance_id]
        fake = FakeProvider(home=home)
        [inst] = [i for i in fake.list_instances() if i.instance_id == res.instance_id]
        first_fs = Path(inst.data["dir"]) / "machine" / "fs.gone"  # once the machine is gone
        fake.preempt(inst, grace=3.0)
        wait_until(
            lambda: store.get_run(run_id).attempt > 1, timeout=90, interval=0.2, message="attempt 2"
        )
        run = wait_for(store, run_id, {"SUCCEEDED", "FAILED"}, timeout=300)
    finally:
        proc.terminate()
        proc.wait(10)
    logs = {n: _log(home, run_id, n, "train") for n in (1, 2)}
    restored = [
        e.data["name"]
        for e in store.events(run_id, types=["checkpoint.restored"])
        if e.attempt == 2
    ]
    return Preempted(
        run_id=run_id,
        state=run.state,
        reason=run.reason,
        first_fs=first_fs,
        uploaded={1: uploaded(1), 2: uploaded(2)},
        restored=restored,
        logs=logs,
        store=store,
    )


def _last_progress(run_id: str) -> tuple[int, int]:
    """The train stage's last step and total as ``corral status --json`` shows them."""
    from typer.testing import CliRunner

    from corral.cli.app import app

    shown = CliRunner().invoke(app, ["status", run_id, "--json"])
    assert shown.exit_code == 0, shown.output
    [train] = [s for s in json.loads(shown.stdout)["stages"] if s["name"] == "train"]
    return train["progress"]["step"], train["progress"]["total"]


def _log(home: Path, run_id: str, attempt: int, stage: str) -> str:
    path = home / "runs" / run_id / "logs" / f"a{attempt}" / f"{stage}.log"
    return path.read_text(errors="replace") if path.exists() else ""


def _workdir_on(fs: Path, marker: str) -> Path:
    """The job's workdir on a machine: the folder holding ``marker`` (the script shipped)."""
    [found] = list(fs.rglob(marker))
    return found.parent


def _check_ends(got: Preempted) -> None:
    assert got.state == "SUCCEEDED", (got.reason, got.logs[2][-3000:])
    reasons = [a.exit_reason for a in got.store.attempts(got.run_id)]
    assert reasons == ["preempted", "succeeded"], reasons
    assert not got.store.events(got.run_id, types=["checkpoint.warning"])


HF_SPEC = """\
name: real-hf
resources: {spot: true, providers: [fake]}
stages:
  - name: train
    run: >-
      python hf_run_clm.py --output_dir out --max_steps 40 --save_steps 5 --logging_steps 5
      --per_device_train_batch_size 4 --use_cpu --report_to none --log_level info
    resume_args: --resume_from_checkpoint "$CORRAL_RESUME_FROM"
    progress: hf
    env: {PACE_S: "0.3", HF_HUB_OFFLINE: "1", TRANSFORMERS_OFFLINE: "1", HF_DATASETS_OFFLINE: "1"}
checkpoints: {path: "out/checkpoint-*", storage: "file://BUCKET", settle: SETTLE}
recovery: {max_preemption_restarts: 2}
"""


def test_hf_trainer_preempted_mid_run_resumes_at_the_last_mirrored_checkpoint(
    corral_home, monkeypatch, tmp_path
) -> None:
    pytest.importorskip("transformers")
    script = (SCRIPTS / "hf_run_clm.py").read_text()
    got = _preempt_once(tmp_path, monkeypatch, {"hf_run_clm.py": script}, HF_SPEC, saves=2)
    _check_ends(got)
    # what the Trainer left on the first machine: checkpoint-<step> folders, complete once
    # trainer_state.json (written last) is there
    out = _workdir_on(got.first_fs, "hf_run_clm.py") / "out"
    complete = {}
    for folder in out.glob("checkpoint-*"):
        state = folder / "trainer_state.json"
        if state.exists():
            complete[f"out/{folder.name}"] = json.loads(state.read_text())["global_step"]
    assert complete and all(name == f"out/checkpoint-{step}" for name, step in complete.items()), (
        complete
    )
    assert sorted(got.uploaded[1]) == sorted(complete), (got.uploaded[1], complete)
    last = max(complete.values())
    assert got.restored == [f"out/checkpoint-{last}"]
    assert 10 <= last < 40  # mid-run
    # the Trainer's own account of where it went on from
    said = re.findall(
        r"Resuming training from checkpoint with epoch \d+ and global step (\d+)", got.logs[2]
    )
    assert said == [str(last)], got.logs[2][-3000:]
    assert "Resuming training" not in got.logs[1]
    # and it saved the steps after that one only, up to the end
    assert sorted(got.uploaded[2], key=_step) == [
        f"out/checkpoint-{s}" for s in range(last + 5, 41, 5)
    ]
    assert _last_progress(got.run_id) == (40, 40)  # read from its bar


def _step(name: str) -> int:
    """The step in a checkpoint's name: ``out/checkpoint-15``, ``.../epoch=1-step=15.ckpt``."""
    found = re.search(r"(\d+)(?:\.ckpt)?$", name)
    assert found, name
    return int(found.group(1))


LIGHTNING_SPEC = """\
name: real-lightning
resources: {spot: true, providers: [fake]}
stages:
  - name: train
    run: python lightning_resume.py --max_epochs 5 --every 5
    resume_args: --ckpt_path "$CORRAL_RESUME_FROM"
    progress: lightning
    env: {PACE_S: "0.3"}
checkpoints: {path: "lightning_logs/**/checkpoints/*.ckpt", storage: "file://BUCKET", settle: SETTLE}
recovery: {max_preemption_restarts: 2}
"""


def test_lightning_preempted_mid_run_resumes_at_the_last_mirrored_checkpoint(
    corral_home, monkeypatch, tmp_path
) -> None:
    pytest.importorskip("lightning")
    import torch

    script = (SCRIPTS / "lightning_resume.py").read_text()
    files = {"lightning_resume.py": script}
    got = _preempt_once(tmp_path, monkeypatch, files, LIGHTNING_SPEC, saves=2)
    _check_ends(got)
    # what ModelCheckpoint left on the first machine: complete when torch.load reads it
    work = _workdir_on(got.first_fs, "lightning_resume.py")
    complete = {}
    for path in (work / "lightning_logs").rglob("*.ckpt"):
        try:
            saved = torch.load(path, map_location="cpu", weights_only=False)
        except Exception:  # torn by the stop: not a checkpoint
            continue
        complete[str(path.relative_to(work))] = saved["global_step"]
    assert sorted(got.uploaded[1]) == sorted(complete), (got.uploaded[1], complete)
    last = max(complete.values())
    [newest] = [name for name, step in complete.items() if step == last]
    assert newest.endswith(f"-step={last}.ckpt") and newest.startswith("lightning_logs/version_0/")
    assert got.restored == [newest]
    assert 10 <= last < 40  # mid-run
    # Lightning's own account: the checkpoint it restored, and its global step at the start
    assert (
        f"Restored all states from the checkpoint at {_restored_path(got.logs[2])}" in got.logs[2]
    )
    assert _restored_path(got.logs[2]).endswith(newest)
    assert re.findall(r"fit starts at global step (\d+)", got.logs[2]) == [str(last)]
    assert re.findall(r"fit starts at global step (\d+)", got.logs[1]) == ["0"]
    # then the checkpoints after it, in the next logger version, up to the end
    assert sorted(got.uploaded[2], key=_step) == [
        f"lightning_logs/version_1/checkpoints/epoch={(s - 1) // 8}-step={s}.ckpt"
        for s in range(last + 5, 41, 5)
    ]
    assert _last_progress(got.run_id) == (40, 40)  # 5 epochs of 8 batches, read from its bar


def _restored_path(log: str) -> str:
    found = re.findall(r"Restoring states from the checkpoint path at (\S+\.ckpt)", log)
    assert len(found) == 1, log[-3000:]
    return found[0]


# `save_dir` as the first attempt has it, given again on resume: a resumed `yolo train` writes to
# the checkpoint's save_dir, an absolute path, unless told; the fake cloud's machines have their
# workdirs at different absolute paths (a real cloud's machines have the same one)
YOLO_SPEC = """\
name: real-yolo
resources: {spot: true, providers: [fake]}
stages:
  - name: train
    run: >-
      YOLO train model=yolov8n.yaml data=data/data.yaml epochs=EPOCHS imgsz=64 batch=4
      device=cpu workers=0 plots=False amp=False save_dir=runs/detect/exp
    resume_args: resume=True model="$CORRAL_RESUME_FROM" save_dir=runs/detect/exp
    progress: ultralytics
    env: {YOLO_OFFLINE: "1"}
checkpoints: {path: "runs/*/*/weights/last.pt", storage: "file://BUCKET", settle: SETTLE}
recovery: {max_preemption_restarts: 2}
"""
#: enough that the two versions waited for are up well before the last epoch, even on a
#: loaded machine (a stop after the last one restores a finished training, which
#: Ultralytics refuses to resume)
YOLO_EPOCHS = 12
#: 16 images in batches of 4
YOLO_BATCHES = 4

LAST_EPOCH = """\
import sys, torch
try:
    print(torch.load(sys.argv[1], map_location="cpu", weights_only=False)["epoch"])
except Exception:  # torn by the stop: not a checkpoint
    print("torn")
"""


def test_ultralytics_yolo_train_preempted_mid_run_resumes_at_the_last_mirrored_epoch(
    corral_home, monkeypatch, tmp_path
) -> None:
    """``yolo train`` rewrites ``weights/last.pt`` in place after each epoch; not paced by the
    test (its CLI takes no callback): twelve epochs of a second or two each, preempted once two
    versions are up."""
    python, yolo = ultralytics_yolo()

    def dataset(work: Path) -> None:
        script = SCRIPTS / "ultralytics_data.py"
        subprocess.run([python, str(script), str(work / "data")], check=True)

    spec = YOLO_SPEC.replace("YOLO", yolo, 1).replace("EPOCHS", str(YOLO_EPOCHS))
    got = _preempt_once(tmp_path, monkeypatch, {}, spec, saves=2, prepare=dataset)
    _check_ends(got)
    name = "runs/detect/exp/weights/last.pt"
    assert set(got.uploaded[1]) == {name} and len(got.uploaded[1]) >= 2, got.uploaded
    assert got.restored == [name]
    # the version on the first machine's disk when it stopped (the epoch it saved, from 0)
    disk = _workdir_on(got.first_fs, "data.yaml").parent / name
    shown = subprocess.run(
        [python, "-c", LAST_EPOCH, str(disk)], check=True, capture_output=True, text=True
    )
    saved = shown.stdout.strip()
    # Ultralytics' own account: it goes on at the epoch after the one saved (counted from 1)
    said = re.findall(r"Resuming training \S+ from epoch (\d+) to (\d+) total epochs", got.logs[2])
    assert len(said) == 1, got.logs[2][-3000:]
    start, total = map(int, said[0])
    assert total == YOLO_EPOCHS
    if saved != "torn":  # complete when the stop came: it is the one restored
        assert start == int(saved) + 2, (saved, said)
    assert 2 <= start - 1 < YOLO_EPOCHS  # mid-run, after the two versions waited for
    assert f"{YOLO_EPOCHS - start + 1} epochs completed" in got.logs[2]
    assert "Resuming training" not in got.logs[1]
    batches = YOLO_EPOCHS * YOLO_BATCHES
    assert _last_progress(got.run_id) == (batches, batches)  # read from its table
