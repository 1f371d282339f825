"""The fake cloud's machines behave like a real cloud's: every machine of a run sees its workdir
at the same absolute path, a file one machine writes there is not on another (nor are the
other machines' directories on this one), and a machine
that is gone leaves nothing the next one can read. So a tool that keeps an absolute path in
its checkpoint (Ultralytics' ``save_dir`` in ``last.pt``) writes, after a resume, on the new
machine, where corral mirrors it.

The same paths need a mount namespace per machine (root and ``unshare``: CI); where this
machine cannot make one, the tests that need it are skipped, saying why."""

from __future__ import annotations

import json
import pickle
import uuid
from pathlib import Path

import pytest

from corral.providers.base import Bootstrap, InstanceState, Requirements
from corral.providers.common.node import NODE_MOUNT, NodeView, node_root, private_mounts
from corral.providers.fake import ENV_FAKE_CLOUD, FakeProvider
from support.waiting import wait_until

from .contract import trivial_plan, wait_state

needs_namespaces = pytest.mark.skipif(
    not private_mounts(),
    reason="the same paths on every simulated machine need a mount namespace per machine "
    "(root, unshare and mount); this machine cannot make one, so each machine's paths are "
    "under its own directory",
)

OFFER = {
    "id": "box",
    "region": "r1",
    "gpu_type": "L40S",
    "gpu_count": 1,
    "spot_price": 0.3,
    "on_demand_price": 0.9,
    "capacity": 2,
}


def fake(corral_home: Path, **kw) -> FakeProvider:
    spec = {"offers": [OFFER], "launch_delay_s": 0.0, "notice_s": 10.0, **kw}
    return FakeProvider(spec, home=corral_home, timers=False)


def launch(p: FakeProvider, workdir: Path, key: str, run: str):
    plan = trivial_plan(workdir, key, run)
    boot = Bootstrap(plan=plan.model_dump(mode="json"), token="tok-" + uuid.uuid4().hex)
    offer = next(o for o in p.offers(Requirements(spot=True)) if o.available)
    inst = p.launch(offer, boot, key)
    wait_state(p, inst, InstanceState.RUNNING)
    return inst


def machine(inst) -> Path:
    """The machine's directory on this machine (what the test, the host, sees)."""
    return Path(inst.data["dir"]) / "machine"


def on_node(inst, path: Path) -> Path:
    """``path`` of the plan (under the node's root) where this machine keeps it."""
    return machine(inst) / "fs" / str(path).lstrip("/")


def written(inst, path: Path) -> str:
    """The text the job wrote at ``path`` of the plan, once it is there."""
    f = on_node(inst, path)
    return wait_until(lambda: f.exists() and f.read_text().strip(), message=f"{f} to be written")


@needs_namespaces
def test_two_machines_see_the_same_workdir_path_and_not_each_others_files(
    corral_home, tmp_path
) -> None:
    p = fake(corral_home)
    first = launch(p, tmp_path, "same-a1", 'echo "$PWD" > where; echo one > mine; sleep 60')
    where = written(first, tmp_path / "where")
    assert where == f"{NODE_MOUNT}/fs{tmp_path}"  # the node's root, not the machine's dir
    assert written(first, tmp_path / "mine") == "one"
    # the first machine still runs and has its file at that very path: not on the second,
    # nor where this machine keeps the first machine's files
    theirs = on_node(first, tmp_path / "mine")
    look = f'echo "$PWD" > where; for f in "{where}/mine" "{theirs}" "{machine(first)}"; do '
    look += '[ -e "$f" ] && echo "$f"; done > saw; echo done > ended; sleep 60'
    second = launch(p, tmp_path, "same-a2", look)
    assert written(second, tmp_path / "where") == where
    written(second, tmp_path / "ended")
    assert on_node(second, tmp_path / "saw").read_text() == ""
    assert on_node(first, tmp_path / "mine").read_text() == "one\n"
    for inst in (first, second):
        p.terminate(inst)


def test_a_machine_that_is_gone_leaves_nothing_the_next_machine_can_read(
    corral_home, tmp_path
) -> None:
    p = fake(corral_home, ephemeral_disk=True)
    run = 'echo one > mine; echo ck > "$CORRAL_CHECKPOINT_DIR/ck"; echo "$PWD" > where; sleep 60'
    first = launch(p, tmp_path, "gone-a1", run)
    where = written(first, tmp_path / "where")
    # every path the first machine's files were at: as it saw them, and as this machine does
    paths = [
        on_node(first, tmp_path / "mine"),
        machine(first) / "disk" / "checkpoints" / "ck",
        machine(first) / "fs",
        machine(first) / "disk",
    ]
    assert all(path.exists() for path in paths[:2])
    p.preempt(first, grace=0.0)  # the market takes it back: its disk goes with it
    assert p.status(first).state == InstanceState.PREEMPTED
    assert not [path for path in paths if path.exists()]
    look = " ".join(f'"{q}"' for q in [*map(str, paths), f"{where}/mine"])
    check = f'for f in {look}; do [ -e "$f" ] && echo "$f"; done > saw; echo done > ended; sleep 60'
    second = launch(p, tmp_path, "gone-a2", check)
    written(second, tmp_path / "ended")
    assert on_node(second, tmp_path / "saw").read_text() == ""
    p.terminate(second)
    assert not (machine(second) / "fs").exists()  # terminated: gone too


# An Ultralytics-like trainer: it keeps its save dir as an absolute path in last.pt and, on
# `resume=True model=<last.pt>`, goes on writing in that saved directory (as Ultralytics does).
TRAINER = """\
import os, pickle, sys, time
args = dict(a.split("=", 1) for a in sys.argv[1:])
pace = 0.3 if os.environ["CORRAL_ATTEMPT"] == "1" else 0.05
if args.get("resume") == "True":
    with open(args["model"], "rb") as f:
        ck = pickle.load(f)
    save_dir, epoch, starts = ck["save_dir"], ck["epoch"] + 1, ck["starts"] + [os.getcwd()]
else:
    save_dir, epoch, starts = os.path.abspath("runs/detect/exp"), 0, [os.getcwd()]
weights = os.path.join(save_dir, "weights")
os.makedirs(weights, exist_ok=True)
while epoch <= 20:
    time.sleep(pace)
    if epoch % 5 == 0 and epoch > 0:
        with open(os.path.join(weights, "last.pt"), "wb") as f:
            pickle.dump({"epoch": epoch, "save_dir": save_dir, "starts": starts}, f)
    print(f"epoch {epoch}", flush=True)
    epoch += 1
"""


@needs_namespaces
@pytest.mark.slow
def test_a_job_that_keeps_its_absolute_save_dir_has_its_resumed_checkpoints_mirrored(
    corral_home, monkeypatch, tmp_path
) -> None:
    from control.helpers import start_controller, submit, wait_for
    from corral.store import Store

    cloud_file = tmp_path / "cloud.json"
    cloud_file.write_text(json.dumps({"offers": [OFFER], "launch_delay_s": 0.3, "notice_s": 3.0}))
    monkeypatch.setenv(ENV_FAKE_CLOUD, str(cloud_file))
    monkeypatch.setenv("CORRAL_PROVIDERS", "fake")
    work, bucket = tmp_path / "work", tmp_path / "bucket"
    work.mkdir()
    (work / "yolo.py").write_text(TRAINER)
    (work / "corral.yaml").write_text(
        "name: abs-save-dir\n"
        "resources: {spot: true, providers: [fake]}\n"
        "run: python yolo.py name=exp\n"
        "resume_args: resume=True model=$CORRAL_RESUME_FROM\n"
        f'checkpoints: {{path: "runs/*/*/weights/last.pt", settle: 1s, storage: "file://{bucket}"}}\n'
        "recovery: {max_preemption_restarts: 2}\n"
    )
    run_id = submit(work / "corral.yaml")
    store = Store.open()

    def uploads(attempt: int) -> list:
        events = store.events(run_id, types=["checkpoint.uploaded"])
        return [e for e in events if e.attempt == attempt]

    proc = start_controller()
    try:
        wait_until(lambda: len(uploads(1)) >= 2, 90, interval=0.2, message="attempt 1's mirror")
        [res] = [r for r in store.resources(run_id=run_id, open_only=True) if r.instance_id]
        provider = FakeProvider(home=corral_home)
        [inst] = [i for i in provider.list_instances() if i.instance_id == res.instance_id]
        provider.preempt(inst, grace=3.0)
        run = wait_for(store, run_id, {"SUCCEEDED", "FAILED"}, timeout=120)
    finally:
        proc.terminate()
        proc.wait(10)
    assert run.state == "SUCCEEDED", run.reason
    assert [a.exit_reason for a in store.attempts(run_id)] == ["preempted", "succeeded"]
    restored = store.events(run_id, types=["checkpoint.restored"])
    assert [e.attempt for e in restored] == [2]
    # attempt 2 wrote in the save dir its checkpoint named, on its own machine: mirrored
    assert uploads(2), [(e.attempt, e.type) for e in store.events(run_id)]
    assert not store.events(run_id, types=["checkpoint.warning"])
    saved = [pickle.loads(f.read_bytes()) for f in (bucket / run_id).rglob("last.pt")]
    assert max(ck["epoch"] for ck in saved) == 20
    [last] = [ck for ck in saved if ck["epoch"] == 20]
    first, second = last["starts"]  # each attempt's working directory
    assert first == second == last["save_dir"].rsplit("/runs/", 1)[0]


def test_a_kept_disk_is_the_one_the_machine_had_when_it_went(tmp_path) -> None:
    """Reclaimed (erased, kept aside), then terminated (erased again): a file a dying process
    wrote in between does not replace the disk the machine had."""
    machine = tmp_path / "machine"
    root, disk = node_root(machine), machine / "disk"
    (root / "work").mkdir(parents=True)
    (root / "work" / "ckpt.pt").write_text("step 20")
    disk.mkdir()
    node = NodeView(machine)
    node.erase(disk, keep=True)
    (root / "state").mkdir(parents=True)  # written after the machine went
    node.erase(disk, keep=True)
    gone = root.with_name(root.name + ".gone")
    assert (gone / "work" / "ckpt.pt").read_text() == "step 20"
    assert not root.exists() and not disk.exists() and (machine / "disk.gone").is_dir()
