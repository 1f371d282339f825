"""Preemption in a data-parallel job: all ranks agree on the step, one rank saves, all exit 75.

Two real processes on a gloo group over loopback run a DDP-like loop (a tensor all_reduce per
step stands in for the gradient all-reduce); only rank 1 gets the SIGTERM."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest

from corral.errors import BadInput
from corral.sdk import Checkpointer, distributed, exit_if_preempted, install_signal_handlers
from corral.wire.env import EXIT_PREEMPTED

from .gloo_parts import free_port, rank_env

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available():
    pytest.skip("torch.distributed is not available", allow_module_level=True)

pytestmark = [pytest.mark.torch, pytest.mark.slow]

READY_AT = 12  # rank 1 prints "ready" at this step; the test then sends it SIGTERM
PERIODIC = 10  # rank 0 saves every 10 steps

WORKER = r"""
import datetime, os, sys, time
import numpy as np
import torch
import torch.distributed as dist
from corral.sdk import Checkpointer, exit_if_preempted, install_signal_handlers

ckpt_root, check_every, saving_rank = sys.argv[1], int(sys.argv[2]), sys.argv[3]
saving_rank = None if saving_rank == "none" else int(saving_rank)
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=15))
rank = dist.get_rank()
ckpt_dir = ckpt_root if saving_rank is not None else os.path.join(ckpt_root, f"rank-{rank}")
cp = Checkpointer(ckpt_dir, keep_last=5)
install_signal_handlers()
w = np.zeros(50_000)
step = 0
try:
    for step in range(1, 100_000):
        grad = torch.ones(1)
        dist.all_reduce(grad)  # DDP's gradient all-reduce: every rank must be in it
        w += grad.item()  # after step s every weight is 2 * s
        if (rank == 0 or saving_rank is None) and step % PERIODIC == 0:
            cp.save({"step": step, "rank": rank, "w": w}, step)
        if step == READY_AT:
            print("ready", flush=True)
        exit_if_preempted(
            cp,
            lambda s=step: {"step": s, "rank": rank, "w": w},
            step=step,
            saving_rank=saving_rank,
            check_every=check_every,
        )
        time.sleep(0.01)
except SystemExit:
    print(f"exit at {step}", flush=True)
    raise
""".replace("PERIODIC", str(PERIODIC)).replace("READY_AT", str(READY_AT))


def run_job(
    tmp_path: Path,
    *,
    check_every: int = 1,
    saving_rank: str = "0",
    graces: tuple[str, str] = ("30", "30"),
    timeout: float = 20.0,
) -> tuple[list[int], list[str], list[str], Path]:
    """Start 2 ranks, SIGTERM rank 1 only once it is past READY_AT; returns the exit codes,
    stdouts and stderrs (by rank) and the checkpoint root."""
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    ckpt = tmp_path / "ck"
    port = free_port()
    procs = []
    logs = [(tmp_path / f"rank{r}.out", tmp_path / f"rank{r}.err") for r in (0, 1)]
    try:
        for rank in (0, 1):
            env = rank_env(rank, port, CORRAL_GRACE_SECONDS=graces[rank])
            out, err = logs[rank]
            with out.open("w") as out_f, err.open("w") as err_f:
                argv = [sys.executable, str(script), str(ckpt), str(check_every), saving_rank]
                procs.append(subprocess.Popen(argv, stdout=out_f, stderr=err_f, env=env))
        deadline = time.monotonic() + timeout
        while "ready" not in logs[1][0].read_text():
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                pytest.fail(f"rank 1 never got ready: {[e.read_text() for _, e in logs]}")
            time.sleep(0.02)
        procs[1].send_signal(signal.SIGTERM)  # rank 1 only
        deadline = time.monotonic() + timeout
        for rank, proc in enumerate(procs):
            try:
                proc.wait(timeout=max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                pytest.fail(f"rank {rank} did not exit within {timeout}s (hung in a collective?)")
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    codes = [p.returncode for p in procs]
    outs = [o.read_text() for o, _ in logs]
    errs = [e.read_text() for _, e in logs]
    return codes, outs, errs, ckpt


def exit_step(out: str) -> int:
    match = re.search(r"exit at (\d+)", out)
    assert match, out
    return int(match.group(1))


def restored(ckpt: Path) -> dict:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # every checkpoint present is whole
        return Checkpointer(ckpt).restore()


def test_sigterm_to_one_rank_stops_both_at_the_same_step_and_rank_0_saves_it(tmp_path):
    codes, outs, errs, ckpt = run_job(tmp_path)
    assert codes == [EXIT_PREEMPTED, EXIT_PREEMPTED], errs
    step = exit_step(outs[0])
    assert exit_step(outs[1]) == step >= READY_AT
    entries = sorted(os.listdir(ckpt))
    assert all(re.fullmatch(r"ckpt-\d+", e) for e in entries), entries  # no .tmp left over
    assert entries.count(f"ckpt-{step}") == 1
    assert Checkpointer(ckpt).latest().step == step
    state = restored(ckpt)
    assert state["step"] == step and state["rank"] == 0
    assert (state["w"] == 2 * step).all()


def test_saving_rank_none_saves_each_ranks_own_checkpointer(tmp_path):
    codes, outs, errs, ckpt = run_job(tmp_path, saving_rank="none")
    assert codes == [EXIT_PREEMPTED, EXIT_PREEMPTED], errs
    step = exit_step(outs[0])
    assert exit_step(outs[1]) == step
    for rank in (0, 1):
        state = restored(ckpt / f"rank-{rank}")
        assert (state["step"], state["rank"]) == (step, rank)


def test_too_short_agreed_grace_exits_75_on_both_without_a_new_checkpoint(tmp_path):
    # Rank 0, the saver, was not signalled and has 30 s of grace of its own: only the agreed
    # value (rank 1's 0 s) keeps it from saving.
    codes, outs, errs, ckpt = run_job(tmp_path, graces=("30", "0"))
    assert codes == [EXIT_PREEMPTED, EXIT_PREEMPTED], errs
    step = exit_step(outs[0])
    assert exit_step(outs[1]) == step
    if step % PERIODIC:  # (at a multiple of 10 the step was already saved: nothing to decide)
        assert "not enough for a checkpoint" in errs[0]
    entries = sorted(os.listdir(ckpt))
    assert all(re.fullmatch(r"ckpt-\d+", e) for e in entries), entries
    assert all(int(e.split("-")[1]) % PERIODIC == 0 for e in entries), entries
    state = restored(ckpt)
    assert state["step"] % PERIODIC == 0 and state["step"] <= step


def test_check_every_decides_only_on_its_multiples(tmp_path):
    codes, outs, errs, ckpt = run_job(tmp_path, check_every=5)
    assert codes == [EXIT_PREEMPTED, EXIT_PREEMPTED], errs
    step = exit_step(outs[0])
    assert exit_step(outs[1]) == step
    assert step % 5 == 0 and step > READY_AT
    assert restored(ckpt)["step"] == step


# --- in-process unit tests -------------------------------------------------------------------


def assert_single_process_answers() -> None:
    assert distributed.is_distributed() is False
    assert distributed.rank() == 0
    assert distributed.world_size() == 1
    assert distributed.agree_seconds_left(None) is None
    assert distributed.agree_seconds_left(2.5) == 2.5
    assert distributed.agree_left_and_estimate(3.0, 1.5) == (3.0, 1.5)
    assert distributed.agree_left_and_estimate(3.0, 1.5, contributes=False) == (3.0, None)
    assert distributed.agree_left_and_estimate(None, None) == (None, None)
    assert distributed.barrier() is None


def test_helpers_are_no_ops_without_an_initialized_group(monkeypatch):
    assert not dist.is_initialized()
    assert_single_process_answers()
    monkeypatch.setitem(sys.modules, "torch", None)  # a script that never imported torch
    assert_single_process_answers()


def test_helpers_are_no_ops_in_a_group_of_one(tmp_path):
    dist.init_process_group(
        "gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1
    )
    try:
        assert dist.is_initialized()
        assert_single_process_answers()
    finally:
        dist.destroy_process_group()


def test_a_failing_collective_reports_and_exits_75_without_a_traceback(
    tmp_path, monkeypatch, capsys
):
    cp = Checkpointer(tmp_path / "ck")
    cp.save({"step": 4}, 4)  # in flight: made durable before exiting

    def broken(local):
        raise RuntimeError("Connection closed by peer")

    monkeypatch.setattr(distributed, "world_size", lambda: 2)
    monkeypatch.setattr(distributed, "agree_seconds_left", broken)
    install_signal_handlers()
    os.kill(os.getpid(), signal.SIGTERM)  # this rank was preempted: 75 whatever the peers do
    with pytest.raises(SystemExit) as exited:
        exit_if_preempted(cp, lambda: {"step": 5}, step=5)
    assert exited.value.code == EXIT_PREEMPTED
    assert "could not agree on preemption" in capsys.readouterr().err
    assert cp.latest().step == 4


def test_a_failing_collective_without_a_signal_is_a_crash_not_a_preemption(tmp_path, monkeypatch):
    """A peer killed (OOM) or a broken network must not read as "preempted, resume me"."""
    cp = Checkpointer(tmp_path / "ck")
    cp.save({"step": 4}, 4)

    def broken(local):
        raise RuntimeError("Connection closed by peer")

    monkeypatch.setattr(distributed, "world_size", lambda: 2)
    monkeypatch.setattr(distributed, "agree_seconds_left", broken)
    with pytest.raises(RuntimeError, match="closed by peer"):
        exit_if_preempted(cp, lambda: {"step": 5}, step=5)
    assert cp.latest().step == 4  # the save in flight was still made durable


def test_distributed_arguments_are_checked(monkeypatch):
    with pytest.raises(BadInput, match="check_every"):
        exit_if_preempted(check_every=0)
    with pytest.raises(BadInput, match="saving_rank"):
        exit_if_preempted(saving_rank=-1)
    monkeypatch.setattr(distributed, "world_size", lambda: 2)
    with pytest.raises(BadInput, match="saving_rank 2"):
        exit_if_preempted(saving_rank=2)


def test_single_process_ignores_check_every(tmp_path):
    install_signal_handlers()
    os.kill(os.getpid(), signal.SIGTERM)
    cp = Checkpointer(tmp_path / "ck")
    with pytest.raises(SystemExit):
        exit_if_preempted(cp, lambda: {"step": 7}, step=7, check_every=5)
    assert cp.latest().step == 7


# --- the HF callback, its agreement faked ----------------------------------------------------


def step_end(callback, monkeypatch, agreed_left, agreed_estimate=None, agreed_stop=False):
    """on_step_end on a rank that got no signal, while the (faked) agreement says another rank
    did (``agreed_left`` not None) or asked to stop (``agreed_stop``)."""
    hf = pytest.importorskip("corral.sdk.integrations.hf")
    transformers = pytest.importorskip("transformers")
    calls = []
    monkeypatch.setattr(hf.distributed, "is_distributed", lambda: True)
    monkeypatch.setattr(
        hf.distributed,
        "agree_left_and_stop",
        lambda local, stop: calls.append((local, stop)) or (agreed_left, agreed_stop),
    )
    monkeypatch.setattr(
        hf.distributed, "agree_left_and_estimate", lambda left, est: (left, agreed_estimate)
    )
    state = transformers.TrainerState()
    state.global_step, state.max_steps = 3, 10
    state.is_world_process_zero = False
    control = transformers.TrainerControl()
    args = SimpleNamespace(output_dir=".")
    callback.on_step_end(args, state, control)
    assert calls == [(None, False)]  # this rank's own flags: not signalled, no stop asked
    return control


def test_hf_callback_stops_a_rank_that_got_no_signal_when_another_did(monkeypatch):
    hf = pytest.importorskip("corral.sdk.integrations.hf")
    callback = hf.CorralCallback(install_signals=False)
    control = step_end(callback, monkeypatch, agreed_left=None)
    assert not control.should_training_stop and not control.should_save

    control = step_end(callback, monkeypatch, agreed_left=25.0, agreed_estimate=2.0)
    assert control.should_training_stop and control.should_save
    assert callback.stopped_for == "preempted"
    with pytest.raises(SystemExit) as exited:
        callback.exit_if_preempted()
    assert exited.value.code == EXIT_PREEMPTED


def test_hf_callback_stops_every_rank_when_one_rank_asks_to_stop(monkeypatch):
    """A budget or early stop decided on one rank only would leave the others in a collective."""
    hf = pytest.importorskip("corral.sdk.integrations.hf")
    callback = hf.CorralCallback(install_signals=False)
    control = step_end(callback, monkeypatch, agreed_left=None, agreed_stop=True)
    assert control.should_training_stop and control.should_save
    assert callback.stopped_for == "stopped by another rank"
    callback.exit_if_preempted()  # not a preemption: returns, the script ends normally


def test_hf_callback_uses_the_agreed_estimate_for_the_save_decision(monkeypatch, capsys):
    hf = pytest.importorskip("corral.sdk.integrations.hf")
    callback = hf.CorralCallback(install_signals=False)
    callback.save_seconds = 0.1  # this rank's own last save was quick; another rank's was not
    control = step_end(callback, monkeypatch, agreed_left=5.0, agreed_estimate=8.0)
    assert control.should_training_stop and not control.should_save
    assert callback.preempted_without_save
    assert "not enough for a save (the last took 8.0s)" in capsys.readouterr().err


def test_hf_callback_exits_75_when_the_agreement_fails(monkeypatch, capsys):
    hf = pytest.importorskip("corral.sdk.integrations.hf")
    callback = hf.CorralCallback(install_signals=False)

    def broken(local, stop):
        raise RuntimeError("Connection closed by peer")

    monkeypatch.setattr(hf.distributed, "is_distributed", lambda: True)
    monkeypatch.setattr(hf.distributed, "agree_left_and_stop", broken)
    transformers = pytest.importorskip("transformers")
    state = transformers.TrainerState()
    state.is_world_process_zero = False
    args, control = SimpleNamespace(output_dir="."), transformers.TrainerControl()
    with pytest.raises(RuntimeError, match="closed by peer"):  # not signalled: a crash
        callback.on_step_end(args, state, control)
    install_signal_handlers()
    os.kill(os.getpid(), signal.SIGTERM)
    with pytest.raises(SystemExit) as exited:
        callback.on_step_end(args, state, control)
    assert exited.value.code == EXIT_PREEMPTED
    assert "could not agree on preemption" in capsys.readouterr().err


STOP_WORKER = r"""
import datetime, sys, time
import torch
import torch.distributed as dist
from corral.sdk import request_stop, should_stop_all, stop_reason

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=15))
rank = dist.get_rank()
step = 0
for step in range(1, 10_000):
    grad = torch.ones(1)
    dist.all_reduce(grad)  # DDP's gradient all-reduce
    if rank == 1 and step == 12:
        request_stop("budget")  # e.g. the cost meter, on this rank only
    if should_stop_all():
        break
    time.sleep(0.005)
print(f"stopped at {step}: {stop_reason()}", flush=True)
dist.destroy_process_group()
"""


def test_should_stop_all_ends_every_rank_at_the_same_step(tmp_path):
    script = tmp_path / "stop_worker.py"
    script.write_text(STOP_WORKER)
    port = free_port()
    procs = []
    try:
        for rank in (0, 1):
            env = rank_env(rank, port)
            argv = [sys.executable, str(script)]
            pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE}
            procs.append(subprocess.Popen(argv, env=env, text=True, **pipes))
        outs = []
        for rank, proc in enumerate(procs):
            try:
                out, err = proc.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                pytest.fail(f"rank {rank} did not stop (hung in a collective?)")
            assert proc.returncode == 0, err
            outs.append(out.strip())
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert outs == ["stopped at 12: stopped by another rank", "stopped at 12: budget"]


def test_should_stop_all_is_should_stop_in_a_single_process():
    from corral.sdk import request_stop, should_stop_all

    assert should_stop_all() is False
    request_stop("budget")
    assert should_stop_all() is True


def test_hf_callback_agrees_only_every_check_every_steps(monkeypatch):
    hf = pytest.importorskip("corral.sdk.integrations.hf")
    transformers = pytest.importorskip("transformers")
    with pytest.raises(BadInput, match="check_every"):
        hf.CorralCallback(install_signals=False, check_every=0)
    callback = hf.CorralCallback(install_signals=False, check_every=5)
    calls = []
    monkeypatch.setattr(hf.distributed, "is_distributed", lambda: True)
    monkeypatch.setattr(
        hf.distributed,
        "agree_left_and_stop",
        lambda local, stop: calls.append(local) or (None, False),
    )
    state = transformers.TrainerState()
    state.is_world_process_zero = False
    for step in range(1, 11):
        state.global_step = step
        callback.on_step_end(SimpleNamespace(output_dir="."), state, transformers.TrainerControl())
    assert len(calls) == 2  # at steps 5 and 10 only


HF_AFTER_TRAIN = r"""
import datetime, os, signal, sys
import torch.distributed as dist
from corral.sdk.integrations.hf import CorralCallback

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=15))
callback = CorralCallback()
# ... trainer.train() returned on every rank at the last agreed step; then rank 1 gets a notice
if dist.get_rank() == 1:
    os.kill(os.getpid(), signal.SIGTERM)
callback.exit_if_preempted()
print("not preempted", flush=True)
dist.destroy_process_group()
"""


def test_hf_a_rank_signalled_after_the_last_agreed_step_makes_every_rank_exit_75(tmp_path):
    pytest.importorskip("transformers")
    script = tmp_path / "after_train.py"
    script.write_text(HF_AFTER_TRAIN)
    port = free_port()
    procs = [
        subprocess.Popen([sys.executable, str(script)], env=rank_env(rank, port),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for rank in (0, 1)
    ]  # fmt: skip
    try:
        results = [p.communicate(timeout=60) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    codes = [p.returncode for p in procs]
    assert codes == [EXIT_PREEMPTED, EXIT_PREEMPTED], results
    assert all("not preempted" not in out for out, _ in results)


def test_hf_exit_if_preempted_without_any_signal_returns_on_every_rank(monkeypatch):
    hf = pytest.importorskip("corral.sdk.integrations.hf")
    callback = hf.CorralCallback(install_signals=False)
    asked = []
    monkeypatch.setattr(hf.distributed, "is_distributed", lambda: True)
    monkeypatch.setattr(hf.distributed, "agree_seconds_left", lambda v: asked.append(v) or None)
    callback.exit_if_preempted()  # nobody was signalled: returns
    assert asked == [None]


def test_hf_exit_if_preempted_when_the_agreement_fails(monkeypatch, capsys):
    hf = pytest.importorskip("corral.sdk.integrations.hf")
    callback = hf.CorralCallback(install_signals=False)

    def broken(value):
        raise RuntimeError("Connection closed by peer")

    monkeypatch.setattr(hf.distributed, "is_distributed", lambda: True)
    monkeypatch.setattr(hf.distributed, "agree_seconds_left", broken)
    with pytest.raises(RuntimeError, match="closed by peer"):  # not signalled: a crash
        callback.exit_if_preempted()
    callback.stopped_for = "preempted"
    with pytest.raises(SystemExit) as exited:
        callback.exit_if_preempted()
    assert exited.value.code == EXIT_PREEMPTED
    assert "could not agree" in capsys.readouterr().err
