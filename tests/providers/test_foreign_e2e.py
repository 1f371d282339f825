"""Scripts written without corral under a real controller on the fake cloud, preempted twice:
nanoGPT's train.py (no package to install: a stand-in that saves and resumes as its train.py
does) and an Ultralytics-style loop (the real ``yolo train`` is in test_real_tools_e2e.py, which
is skipped where no Python with ultralytics is at hand; this one runs everywhere). The real HF
Trainer and Lightning are in test_real_tools_e2e.py. Each machine has a root of its own (the
code shipped, the workdir deleted once the run is launched), the script saves its checkpoints
its own way at ``checkpoints.path`` and prints its tool's own log lines. Each time the next
machine restores the mirrored checkpoint and the script, given its ``resume_args``, goes on
where the saved one left off (never at 0); the run ends with the result of an uninterrupted
one. The stage's ``progress`` preset reads the log alone: every attempt's ``progress`` events
start where that attempt's script started, and ``corral status`` shows the last step."""

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

# nanoGPT's train.py (karpathy/nanoGPT, master): configurator.py prints each `--key=value` it
# takes as `Overriding: key = value`; at the top of each iteration that is a multiple of
# eval_interval it evaluates (`step N: train loss ..., val loss ...`) and, past 0, saves
# ckpt.pt with torch.save straight into out_dir (in place) with iter_num = N, before that
# iteration's work; `--init_from=resume` loads out_dir/ckpt.pt and goes on at iter_num (the
# saved iteration, evaluated and saved again first); the loop ends once iter_num > max_iters.
NANOGPT = f"""\
import os, pickle, sys, time
args = dict(a[2:].split("=", 1) for a in sys.argv[1:])
for key, value in args.items():
    print(f"Overriding: {{key}} = {{value}}", flush=True)
out_dir, init_from = args.get("out_dir", "out"), args.get("init_from", "scratch")
max_iters, eval_interval = int(args.get("max_iters", "5000")), 5
{PACE}
path = os.path.join(out_dir, "ckpt.pt")
if init_from == "resume":
    with open(path, "rb") as f:
        ck = pickle.load(f)
    iter_num, total, starts = ck["iter_num"], ck["total"], ck["starts"]
    starts.append([ck["iter_num"], iter_num])
else:
    iter_num, total, starts = 0, 0, [[None, 0]]
os.makedirs(out_dir, exist_ok=True)
while True:
    if iter_num % eval_interval == 0:
        loss = 1.0 / (iter_num + 1)
        print(f"step {{iter_num}}: train loss {{loss:.4f}}, val loss {{loss:.4f}}", flush=True)
        if iter_num > 0:
            print(f"saving checkpoint to {{out_dir}}", flush=True)
            with open(path, "wb") as f:  # in place, like torch.save(checkpoint, path)
                pickle.dump({{"iter_num": iter_num, "total": total, "starts": starts}}, f)
    total += iter_num * iter_num
    loss = 1.0 / (iter_num + 1)
    print(f"iter {{iter_num}}: loss {{loss:.4f}}, time {{pace * 1000:.2f}}ms, mfu 1.23%", flush=True)
    time.sleep(pace)
    iter_num += 1
    if iter_num > max_iters:
        break
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

STAND_INS = {
    "nanogpt": {
        "script": ("train.py", NANOGPT),
        "spec": """
            run: python train.py --out_dir=out --max_iters=40
            resume_args: --init_from=resume
            progress: nanogpt
            checkpoints: {path: out/ckpt.pt, settle: 1s, storage: "file://BUCKET"}
        """,
        "state": "out/ckpt.pt",
        # the iteration a resumed run starts at: the saved one (saved before its work)
        "resumes_at": 0,
        # the iterations whose work the last save holds: all but the last (run after it)
        "total": sum(i * i for i in range(STEPS)),
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
        # the epoch after the saved one (saved after its work)
        "resumes_at": 1,
        "total": sum(i * i for i in range(STEPS + 1)),
        # batches over the run: the first bar of epoch i (shown as i + 1) is batch 1
        "log_step": lambda i: i * BATCHES + 1,
        "last": ((STEPS + 1) * BATCHES, (STEPS + 1) * BATCHES),
    },
}

RESULT = """\
import json, os, pickle
data = pickle.load(open({state!r}, "rb"))
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


@pytest.mark.parametrize("kind", ["nanogpt", "ultralytics"])
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
    assert result["total"] == STAND_INS[kind]["total"]  # as if never interrupted
    first, *resumed = result["starts"]
    assert first == [None, 0] and len(resumed) == 2
    for saved, started in resumed:
        assert saved > 0 and started == saved + STAND_INS[kind]["resumes_at"]
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
    by hand (`corral debug preempt`), goes on at the saved iteration through its
    `resume_args` alone (no `$(if [ -f ... ])` in `run:`)."""
    from control.helpers import start_controller, submit, wait_for
    from corral.providers.registry import get_provider

    (tmp_path / "train.py").write_text(NANOGPT)
    (tmp_path / "result.py").write_text(RESULT.format(state="out/ckpt.pt"))
    (tmp_path / "corral.yaml").write_text(
        "name: nanogpt\n"
        "stages:\n"
        "  - {name: train, run: python train.py --out_dir=out --max_iters=40, "
        "resume_args: --init_from=resume}\n"
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
    assert result["total"] == sum(i * i for i in range(STEPS))
    first, *resumed = result["starts"]
    assert first == [None, 0] and len(resumed) == 2
    for saved, started in resumed:
        assert saved > 0 and started == saved


def _starts(workdir: Path) -> list:
    """The starts recorded in the stand-in's ckpt.pt (one per attempt that saved since)."""
    import pickle

    try:
        return pickle.loads((workdir / "out" / "ckpt.pt").read_bytes())["starts"]
    except (OSError, EOFError, pickle.UnpicklingError, KeyError):
        return []
