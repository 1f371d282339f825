"""Scripts written without corral (nanoGPT-, Ultralytics-, HF Trainer- and Lightning-style
stand-ins) under a real controller on the fake cloud: each machine has a root of its own (the
code shipped, the workdir deleted once the run is launched), the script saves its checkpoints
its own way at ``checkpoints.path`` and prints its tool's own log lines, and the run is
preempted twice. Each time the next machine restores the mirrored checkpoint and the script,
given its ``resume_args``, goes on at the saved step + 1 (never 0); the run ends with the
result of an uninterrupted one. The stage's ``progress`` preset reads the log alone: every
attempt's ``progress`` events start where that attempt's script started, and ``corral status``
shows the last step."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from corral.providers.fake import ENV_FAKE_CLOUD, FakeProvider
from corral.store import Store
from support.waiting import wait_until

pytestmark = [pytest.mark.slow]

STEPS = 40
#: Batches per epoch of the epoch-based stand-ins (Ultralytics, Lightning).
BATCHES = 4
#: The attempts the test preempts go slowly, so none can finish before its preemption lands.
PACE = 'pace = 0.3 if int(os.environ["CORRAL_ATTEMPT"]) < 3 else 0.02'

# nanoGPT's train.py: `--init_from=resume` loads out_dir/ckpt.pt and goes on from iter_num;
# it saves with torch.save straight into ckpt.pt (written in place) every eval_interval.
NANOGPT = f"""\
import os, pickle, sys, time
args = dict(a[2:].split("=", 1) for a in sys.argv[1:])
out_dir, init_from = args.get("out_dir", "out"), args.get("init_from", "scratch")
{PACE}
path = os.path.join(out_dir, "ckpt.pt")
if init_from == "resume":
    with open(path, "rb") as f:
        ck = pickle.load(f)
    iter_num, total, starts = ck["iter_num"] + 1, ck["total"], ck["starts"]
    starts.append([ck["iter_num"], iter_num])
else:
    iter_num, total, starts = 0, 0, [[None, 0]]
os.makedirs(out_dir, exist_ok=True)
print("Overriding: max_iters = {STEPS}", flush=True)
while iter_num <= {STEPS}:
    total += iter_num * iter_num
    if iter_num % 5 == 0 and iter_num > 0:
        with open(path, "wb") as f:  # in place, like torch.save(checkpoint, path)
            pickle.dump({{"iter_num": iter_num, "total": total, "starts": starts}}, f)
    loss = 1.0 / (iter_num + 1)
    print(f"iter {{iter_num}}: loss {{loss:.4f}}, time {{pace * 1000:.2f}}ms, mfu 1.23%", flush=True)
    time.sleep(pace)
    iter_num += 1
"""

# Ultralytics: each epoch writes runs/detect/<name>/weights/last.pt; `resume=True
# model=<last.pt>` goes on from the epoch after the saved one. Its log: a table header, then
# each epoch's row (epochs counted from 1) with the batches' bar redrawn after it, and the
# validation's `all` row.
ULTRALYTICS = f"""\
import os, pickle, sys, time
args = dict(a.split("=", 1) for a in sys.argv[2:])
{PACE}
if args.get("resume") == "True":
    with open(args["model"], "rb") as f:
        ck = pickle.load(f)
    epoch, total, starts = ck["epoch"] + 1, ck["total"], ck["starts"]
    starts.append([ck["epoch"], epoch])
else:
    epoch, total, starts = 0, 0, [[None, 0]]
weights = os.path.join("runs", "detect", args.get("name", "train"), "weights")
HEADER = "\\n      Epoch    GPU_mem   box_loss   cls_loss   dfl_loss  Instances       Size"
VAL_HEADER = "                 Class     Images  Instances      Box(P          R      mAP50  mAP50-95): 100%|##########| 1/1 [00:00<00:00,  5.00it/s]"
os.makedirs(weights, exist_ok=True)
while epoch <= {STEPS}:
    total += epoch * epoch
    time.sleep(pace)
    if epoch % 5 == 0 and epoch > 0:
        with open(os.path.join(weights, "last.pt"), "wb") as f:
            pickle.dump({{"epoch": epoch, "total": total, "starts": starts}}, f)
    print(HEADER, flush=True)
    row = f"{{epoch + 1:>11}}/{STEPS + 1}        0G  {{1.0 / (epoch + 1):9.4f}}      1.000      0.500        12        640: "
    for n in range(1, {BATCHES} + 1):
        bar = f"{{100 * n // {BATCHES}:3d}}%|#####     | {{n}}/{BATCHES} [00:01<00:01,  3.10it/s]"
        sys.stdout.write(row + bar + ("\\n" if n == {BATCHES} else "\\r"))
        sys.stdout.flush()
    print(VAL_HEADER, flush=True)
    print(f"                   all         16        120      0.671      0.552  {{epoch / 100:9.3f}}      0.451", flush=True)
    epoch += 1
"""

# The HF Trainer (transformers 5.x): output_dir/checkpoint-<global_step>/ made in place, its
# files written one after another (the weights, the optimizer, trainer_state.json last; no
# staging directory, no rename), the oldest beyond save_total_limit deleted;
# `--resume_from_checkpoint <dir>` goes on at global_step + 1.
HF = f"""\
import json, os, shutil, sys, time
args = sys.argv[1:]
opt = {{args[i]: args[i + 1] for i in range(0, len(args) - 1, 2) if args[i].startswith("--")}}
out, limit = opt["--output_dir"], int(opt.get("--save_total_limit", "2"))
{PACE}
resume = opt.get("--resume_from_checkpoint")
if resume:
    with open(os.path.join(resume, "trainer_state.json")) as f:
        st = json.load(f)
    step, total, starts = st["global_step"] + 1, st["total"], st["starts"]
    starts.append([st["global_step"], step])
else:
    step, total, starts = 0, 0, [[None, 0]]
os.makedirs(out, exist_ok=True)
while step <= {STEPS}:
    total += step * step
    time.sleep(pace)
    if step % 5 == 0 and step > 0:
        ck = os.path.join(out, f"checkpoint-{{step}}")
        os.makedirs(ck, exist_ok=True)
        for name in ("model.safetensors", "optimizer.pt"):
            with open(os.path.join(ck, name), "wb") as f:
                f.write(os.urandom(4096))
            time.sleep(0.05)  # the next part takes a moment to gather
        with open(os.path.join(ck, "trainer_state.json"), "w") as f:
            json.dump({{"global_step": step, "total": total, "starts": starts}}, f)
        kept = sorted(
            (d for d in os.listdir(out) if d.startswith("checkpoint-")),
            key=lambda d: int(d.split("-")[1]),
        )
        for old in kept[:-limit]:
            shutil.rmtree(os.path.join(out, old))
    # tqdm's bar on stderr, redrawn with \\r and cleared before the Trainer prints its logs
    sys.stderr.write(f"\\r{{100 * step // {STEPS}:3d}}%|###   | {{step}}/{STEPS} [00:01<00:09,  9.99it/s]")
    sys.stderr.write("\\r" + " " * 60 + "\\r")
    sys.stderr.flush()
    logs = {{"loss": round(1.0 / (step + 1), 4), "learning_rate": 5e-05, "epoch": step / {STEPS}}}
    print(logs, flush=True)
    step += 1
"""

# PyTorch Lightning: the logger takes the next lightning_logs/version_<n> (a resumed run gets a
# new one), ModelCheckpoint(every_n_train_steps=5, save_top_k=2) saves
# version_<n>/checkpoints/epoch=<e>-step=<global step>.ckpt with torch.save (in place, in
# pieces, then closed) and deletes the older ones beyond the two best; `--ckpt_path <file>`
# goes on at the checkpoint's global step (the batch after the saved one). The bar redraws
# with \r on stdout: `Epoch 2:  50%|####      | 2/4 [00:01<00:01, 30.0it/s, loss=0.123, v_num=0]`.
LIGHTNING = f"""\
import os, pickle, sys, time
args = sys.argv[1:]
opt = {{args[i]: args[i + 1] for i in range(0, len(args) - 1, 2) if args[i].startswith("--")}}
{PACE}
if opt.get("--ckpt_path"):
    with open(opt["--ckpt_path"], "rb") as f:
        ck = pickle.load(f)
    step, total, starts = ck["global_step"], ck["total"], ck["starts"]
    starts.append([step - 1, step])
else:
    step, total, starts = 0, 0, [[None, 0]]
logs = "lightning_logs"
versions = [int(d.split("_")[1]) for d in os.listdir(logs)] if os.path.isdir(logs) else []
version = max(versions, default=-1) + 1
ckpts = os.path.join(logs, f"version_{{version}}", "checkpoints")
os.makedirs(ckpts, exist_ok=True)
saved = []
while step <= {STEPS}:
    total += step * step
    time.sleep(pace)
    epoch, batch = divmod(step, {BATCHES})
    loss = 1.0 / (step + 1)
    bar = (
        f"Epoch {{epoch}}: {{100 * (batch + 1) // {BATCHES}:3d}}%|####      | {{batch + 1}}/{BATCHES} "
        f"[00:01<00:01, 30.0it/s, loss={{loss:.3g}}, v_num={{version}}]"
    )
    sys.stdout.write(("\\r" if batch else "\\n") + bar)
    sys.stdout.flush()
    if step % 5 == 0 and step > 0:
        path = os.path.join(ckpts, f"epoch={{epoch}}-step={{step + 1}}.ckpt")
        state = {{"global_step": step + 1, "epoch": epoch, "total": total, "starts": starts}}
        data = pickle.dumps(state) + os.urandom(8192)  # the weights
        with open(path, "wb") as f:
            for i in range(0, len(data), 2048):
                f.write(data[i : i + 2048])
                f.flush()
                time.sleep(0.005)
        saved.append(path)
        for old in saved[:-2]:
            os.remove(old)
        saved = saved[-2:]
    step += 1
print(flush=True)
"""

STAND_INS = {
    "nanogpt": {
        "script": ("train.py", NANOGPT),
        "spec": """
            run: python train.py --out_dir=out
            resume_args: --init_from=resume
            progress: nanogpt
            checkpoints: {path: out/ckpt.pt, settle: 1s, storage: "file://BUCKET"}
        """,
        "state": "out/ckpt.pt",
        # the log's step for the stand-in's step i (the iteration), and the last (step, total)
        "log_step": lambda i: i,
        "last": (STEPS, STEPS),
    },
    "ultralytics": {
        "script": ("yolo.py", ULTRALYTICS),
        "spec": """
            run: python yolo.py train name=exp
            resume_args: resume=True model=$CORRAL_RESUME_FROM
            progress: ultralytics
            checkpoints: {path: "runs/*/*/weights/last.pt", settle: 1s, storage: "file://BUCKET"}
        """,
        "state": "runs/detect/exp/weights/last.pt",
        # batches over the run: the first bar of epoch i (shown as i + 1) is batch 1
        "log_step": lambda i: i * BATCHES + 1,
        "last": ((STEPS + 1) * BATCHES, (STEPS + 1) * BATCHES),
    },
    "hf": {
        "script": ("run_clm.py", HF),
        "spec": """
            run: python run_clm.py --output_dir out --save_total_limit 2
            resume_args: --resume_from_checkpoint "$CORRAL_RESUME_FROM"
            progress: hf
            checkpoints: {path: "out/checkpoint-*", storage: "file://BUCKET"}
        """,
        "state": None,
        "log_step": lambda i: i,
        "last": (STEPS, STEPS),
    },
    "lightning": {
        "script": ("train_lit.py", LIGHTNING),
        "spec": """
            run: python train_lit.py --max_epochs 11
            resume_args: --ckpt_path "$CORRAL_RESUME_FROM"
            progress: lightning
            checkpoints: {path: "lightning_logs/**/checkpoints/*.ckpt", settle: 1s, storage: "file://BUCKET"}
        """,
        "state": "lightning_logs/*/checkpoints/*.ckpt",
        # batches over the run: epoch * batches + the bar's batch (from 1); the plain bar
        # does not say how many epochs, so no total
        "log_step": lambda i: i + 1,
        "last": (STEPS + 1, None),
    },
}

RESULT = """\
import glob, json, os, pickle
state = {state!r}
if state is None:
    state = max(glob.glob("out/checkpoint-*"), key=lambda d: int(d.split("-")[1]))
    data = json.load(open(os.path.join(state, "trainer_state.json")))
elif "*" in state:  # the newest of the files it matches, by the step in the name
    state = max(glob.glob(state), key=lambda p: int(p.rsplit("step=", 1)[1].split(".")[0]))
    data = pickle.load(open(state, "rb"))
else:
    data = pickle.load(open(state, "rb"))
os.makedirs("result", exist_ok=True)
json.dump({{"total": data["total"], "starts": data["starts"]}}, open("result/result.json", "w"))
"""


def _spec(kind: str, bucket: Path) -> str:
    """The stand-in as stage ``train`` (its ``resume_args`` go after its command), then a
    stage that reads its last checkpoint into the result."""
    body = STAND_INS[kind]["spec"].replace("BUCKET", str(bucket))
    run, resume, progress, checkpoints = (
        line.strip() for line in body.splitlines() if line.strip()
    )
    return (
        f"name: foreign-{kind}\n"
        "resources: {spot: true, providers: [fake]}\n"
        "stages:\n"
        f"  - name: train\n    {run}\n    {resume}\n    {progress}\n"
        "  - {name: result, needs: [train], run: python result.py}\n"
        f"{checkpoints}\n"
        f'artifacts: {{paths: ["result/**"], storage: "file://{bucket}"}}\n'
        "recovery: {max_preemption_restarts: 3}\n"
    )


@pytest.mark.parametrize("kind", ["nanogpt", "ultralytics", "hf", "lightning"])
def test_a_script_without_corral_is_preempted_twice_and_resumes_at_the_saved_step(
    kind, corral_home, monkeypatch, tmp_path
) -> None:
    from control.helpers import start_controller, submit, wait_for

    cloud_file = tmp_path / "cloud.json"
    offer = {
        "id": "box",
        "region": "r1",
        "gpu_type": "L40S",
        "gpu_count": 1,
        "spot_price": 0.3,
        "on_demand_price": 0.9,
        "capacity": 2,
    }
    cloud_file.write_text(json.dumps({"offers": [offer], "launch_delay_s": 0.3, "notice_s": 3.0}))
    monkeypatch.setenv(ENV_FAKE_CLOUD, str(cloud_file))
    monkeypatch.setenv("CORRAL_PROVIDERS", "fake")
    work, bucket = tmp_path / "work", tmp_path / "bucket"
    work.mkdir()
    name, script = STAND_INS[kind]["script"]
    (work / name).write_text(script)
    (work / "result.py").write_text(RESULT.format(state=STAND_INS[kind]["state"]))
    (work / "corral.yaml").write_text(_spec(kind, bucket))
    run_id = submit(work / "corral.yaml")
    store = Store.open()
    proc = start_controller()
    try:
        for attempt in (1, 2):

            def mirrored(n: int = attempt) -> bool:
                events = store.events(run_id, types=["checkpoint.uploaded"])
                return sum(e.attempt == n for e in events) >= 2

            wait_until(
                mirrored,
                timeout=90,
                interval=0.2,
                message=lambda n=attempt: f"attempt {n}'s mirror; events: {_events(store, run_id)}",
            )
            if attempt == 1:
                shutil.rmtree(work)  # the code travelled: only the storage is shared from now on
            [res] = [r for r in store.resources(run_id=run_id, open_only=True) if r.instance_id]
            fake = FakeProvider(home=corral_home)
            [inst] = [i for i in fake.list_instances() if i.instance_id == res.instance_id]
            fake.preempt(inst, grace=3.0)
            wait_until(
                lambda n=attempt: store.get_run(run_id).attempt > n,
                timeout=90,
                interval=0.2,
                message=f"attempt {attempt + 1}",
            )
        run = wait_for(store, run_id, {"SUCCEEDED", "FAILED"}, timeout=120)
    finally:
        proc.terminate()
        proc.wait(10)
    assert run.state == "SUCCEEDED", run.reason
    reasons = [a.exit_reason for a in store.attempts(run_id)]
    assert reasons == ["preempted", "preempted", "succeeded"], reasons
    result = json.loads((bucket / run_id / "artifacts" / "result" / "result.json").read_text())
    assert result["total"] == sum(i * i for i in range(STEPS + 1))  # as if never interrupted
    first, *resumed = result["starts"]
    assert first == [None, 0] and len(resumed) == 2
    for saved, started in resumed:
        assert saved > 0 and started == saved + 1
    restored = store.events(run_id, types=["checkpoint.restored"])
    assert sorted(e.attempt for e in restored) == [2, 3]  # from storage, on new machines
    assert not store.events(run_id, types=["checkpoint.warning"])
    assert FakeProvider(home=corral_home).list_instances() == []
    assert os.path.isdir(bucket / run_id / "mirror")
    # progress from the log alone: each attempt's first step is where its script started
    log_step = STAND_INS[kind]["log_step"]
    progress = [e for e in store.events(run_id, types=["progress"]) if e.data["stage"] == "train"]
    for attempt, (_saved, started) in enumerate(result["starts"], start=1):
        steps = [e.data["step"] for e in progress if e.attempt == attempt]
        assert steps and steps[0] == log_step(started), (attempt, steps)
        totals = {e.data["total"] for e in progress if e.attempt == attempt}
        assert totals == {STAND_INS[kind]["last"][1]}, totals
    shown = _status(run_id)
    [train] = [s for s in shown["stages"] if s["name"] == "train"]
    last = train["progress"]
    step, total = STAND_INS[kind]["last"]
    assert (last["step"], last["total"]) == (step, total)
    assert last["percent"] == (None if total is None else 100.0)
    assert last["loss"] is not None


def _events(store: Store, run_id: str) -> list[tuple]:
    return [(e.attempt, e.type, e.reason) for e in store.events(run_id)]


def _status(run_id: str) -> dict:
    from typer.testing import CliRunner

    from corral.cli.app import app

    shown = CliRunner().invoke(app, ["status", run_id, "--json"])
    assert shown.exit_code == 0, shown.output
    return json.loads(shown.stdout)


def test_on_one_machine_without_storage_a_preempted_script_resumes_without_shell_tricks(
    corral_home, tmp_path
) -> None:
    """The issue's first try, on the local provider: nanoGPT's train.py unmodified, preempted
    by hand (`corral debug preempt`), goes on at the saved iteration + 1 through its
    `resume_args` alone (no `$(if [ -f ... ])` in `run:`)."""
    from control.helpers import start_controller, submit, wait_for
    from corral.providers.registry import get_provider

    (tmp_path / "train.py").write_text(NANOGPT)
    (tmp_path / "result.py").write_text(RESULT.format(state="out/ckpt.pt"))
    (tmp_path / "corral.yaml").write_text(
        "name: nanogpt\n"
        "stages:\n"
        "  - {name: train, run: python train.py --out_dir=out, resume_args: --init_from=resume}\n"
        "  - {name: result, needs: [train], run: python result.py}\n"
        "checkpoints: {path: out/ckpt.pt}\n"
        "recovery: {max_preemption_restarts: 3}\n"
    )
    run_id = submit(tmp_path / "corral.yaml")
    store = Store.open()
    proc = start_controller()
    try:
        for attempt in (1, 2):
            wait_until(
                lambda n=attempt: len(_starts(tmp_path)) == n,
                60,
                interval=0.2,
                message=f"attempt {attempt}'s first save",
            )
            [res] = [r for r in store.resources(run_id=run_id, open_only=True) if r.instance_id]
            local = get_provider("local")
            [inst] = [i for i in local.list_instances() if i.instance_id == res.instance_id]
            local.preempt(inst, grace=3.0)
            wait_until(lambda n=attempt: store.get_run(run_id).attempt > n, 60, interval=0.2)
        run = wait_for(store, run_id, {"SUCCEEDED", "FAILED"}, timeout=120)
    finally:
        proc.terminate()
        proc.wait(10)
    assert run.state == "SUCCEEDED", run.reason
    result = json.loads((tmp_path / "result" / "result.json").read_text())
    assert result["total"] == sum(i * i for i in range(STEPS + 1))
    first, *resumed = result["starts"]
    assert first == [None, 0] and len(resumed) == 2
    for saved, started in resumed:
        assert saved > 0 and started == saved + 1


def _starts(workdir: Path) -> list:
    """The starts recorded in the stand-in's ckpt.pt (one per attempt that saved since)."""
    import pickle

    try:
        return pickle.loads((workdir / "out" / "ckpt.pt").read_bytes())["starts"]
    except (OSError, EOFError, pickle.UnpicklingError, KeyError):
        return []
