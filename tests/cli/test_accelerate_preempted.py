"""Recipe: an ``accelerate launch`` script with two processes (gloo on CPU) that knows nothing of
corral: it trains with ``accelerate.Accelerator``, ignores SIGTERM, saves its whole state with
``accelerator.save_state`` when SIGUSR1 asks (at a step both processes agree on, into a
temporary directory renamed to ``out/step-<n>``) and goes on from one with ``load_state`` when
its ``resume_args`` say so. Run with ``corral launch`` on two GPUs on the fake cloud (the
``torchrun`` recipe runs on the local provider), preempted by hand twice: each attempt starts
at the saved step + 1 from the checkpoint corral mirrored and restored, and the run ends with
the weights of an uninterrupted run, bit for bit. ``corral stop`` leaves the stage stopped with 75."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from . import launched

torch = pytest.importorskip("torch")
pytest.importorskip("accelerate")

STEPS = 200
LR = 0.0005

TRAIN = f"""
import argparse, json, os, signal, time
from pathlib import Path
import torch
from accelerate import Accelerator

parser = argparse.ArgumentParser()
parser.add_argument("--out", default="out")
parser.add_argument("--log", default="log")
parser.add_argument("--resume", default="")
args = parser.parse_args()
# the attempts the test preempts go slowly, so that none ends before its preemption lands
pace = 0.1 if os.environ.get("CORRAL_ATTEMPT") in ("1", "2") else 0.0
accelerator = Accelerator()
rank, out, log = accelerator.process_index, Path(args.out), Path(args.log)
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr={LR}, momentum=0.9)
model, optimizer = accelerator.prepare(model, optimizer)
x = torch.randn(64, 4, generator=torch.Generator().manual_seed(1))
y = x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]]) + 0.1
step = 0
if args.resume:
    accelerator.load_state(args.resume)
    step = json.loads((Path(args.resume) / "step.json").read_text())["step"]
log.mkdir(parents=True, exist_ok=True)
with (log / f"starts-{{rank}}.txt").open("a") as f:
    f.write(f"{{step + 1}} {{accelerator.num_processes}} {{os.environ['MASTER_PORT']}}\\n")
asked = False
def ask(*_):
    global asked
    asked = True
signal.signal(signal.SIGUSR1, ask)
signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the launcher forwards it: saving takes SIGUSR1
accelerator.wait_for_everyone()
(log / f"up-{{rank}}-a{{os.environ['CORRAL_ATTEMPT']}}").write_text(str(os.getpid()))
while step < {STEPS}:
    step += 1
    loss = ((model(x) - y) ** 2).mean()
    accelerator.backward(loss)
    optimizer.step()
    optimizer.zero_grad()
    if accelerator.is_main_process:
        print(f"step {{step}}/{STEPS} loss {{loss.item():.6f}}", flush=True)
    if accelerator.reduce(torch.tensor([float(asked)]), "sum").item() > 0:
        asked, tmp = False, out / f"tmp-step-{{step}}"
        accelerator.save_state(str(tmp))
        accelerator.wait_for_everyone()
        if accelerator.is_main_process:
            (tmp / "step.json").write_text(json.dumps({{"step": step}}))
            tmp.rename(out / f"step-{{step}}")
        with (log / f"saves-{{rank}}.txt").open("a") as f:
            f.write(f"{{step}}\\n")
    time.sleep(pace)
if accelerator.is_main_process:
    weights = [p.detach().flatten().tolist() for p in accelerator.unwrap_model(model).parameters()]
    (log / "result.json").write_text(json.dumps(weights))
"""

# On a machine with GPUs `accelerate launch train.py` finds them itself; here, on CPU, the
# script's Accelerator is told to use it (ACCELERATE_USE_CPU) and --multi_gpu gets the launcher
# to start both processes (--cpu alone starts one). HF_HOME in the workdir: no default config
# of the user's is read, nothing is downloaded, nothing prompts.
SPEC = r"""
name: accel
resources: {gpus: "L40S:2", providers: [{provider}]}
run: >-
  accelerate launch --multi_gpu --num_processes 2 --num_machines 1 --mixed_precision no
  --dynamo_backend no train.py --log "$CORRAL_CHECKPOINT_DIR"
resume_args: --resume "$CORRAL_RESUME_FROM"
progress: 'step (?P<step>\d+)/(?P<total>\d+) loss (?P<loss>\S+)'
env:
  OMP_NUM_THREADS: 1
  ACCELERATE_USE_CPU: "true"
  HF_HOME: hf
  HF_HUB_OFFLINE: 1
  HF_HUB_DISABLE_TELEMETRY: 1
checkpoints: {path: "out/step-*", storage: "file://BUCKET"}
save_signal: SIGUSR1
stop_grace: 4s
"""


def _uninterrupted() -> list[list[float]]:
    """The weights of the same training run in one go in this process (the two processes'
    gradients are the same, so their mean is too)."""
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
    x = torch.randn(64, 4, generator=torch.Generator().manual_seed(1))
    y = x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]]) + 0.1
    for _ in range(STEPS):
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    return [p.detach().flatten().tolist() for p in model.parameters()]


def _spec(tmp_path: Path) -> str:
    return SPEC.replace("BUCKET", str(tmp_path / "bucket"))


def _up(log: Path, attempt: int) -> bool:
    return all((log / f"up-{r}-a{attempt}").exists() for r in (0, 1))


@pytest.mark.slow
@pytest.mark.parametrize("provider", ["fake"])
def test_an_accelerate_job_saves_on_usr1_and_resumes_from_its_restored_state(
    provider: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id, log = launched.launch(
        provider, tmp_path, monkeypatch, _spec(tmp_path), {"train.py": TRAIN}
    )
    run = launched.preempt_twice(run_id, lambda n: _up(log, n))
    launched.assert_preempted_twice_then_succeeded(run_id, run)
    for rank in (0, 1):
        saves = [int(x) for x in (log / f"saves-{rank}.txt").read_text().split()]
        assert len(saves) == 2 and 0 < saves[0] < saves[1] < STEPS, saves
        starts = [line.split() for line in (log / f"starts-{rank}.txt").read_text().splitlines()]
        # the step after each resume is the saved one + 1; two processes; a port of corral's
        assert [int(s[0]) for s in starts] == [1, saves[0] + 1, saves[1] + 1], starts
        assert {s[1] for s in starts} == {"2"}
        assert "29500" not in {s[2] for s in starts}
    assert json.loads((log / "result.json").read_text()) == _uninterrupted()
    (stage,) = run["stages"]  # the progress is read from rank 0's lines alone
    assert (stage["progress"]["step"], stage["progress"]["total"]) == (STEPS, STEPS)


@pytest.mark.slow
def test_an_accelerate_job_stopped_with_corral_stop_says_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id, log = launched.launch(
        "local", tmp_path, monkeypatch, _spec(tmp_path), {"train.py": TRAIN}
    )
    launched.stop_and_assert_stopped(run_id, lambda: _up(log, 1))
    for rank in (0, 1):  # both processes saved, at the same step, on the save signal
        assert len((log / f"saves-{rank}.txt").read_text().split()) == 1
    assert (log / "saves-0.txt").read_text() == (log / "saves-1.txt").read_text()
