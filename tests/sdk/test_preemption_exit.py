"""Preemption must end in exit 75 ("resume me") whatever else is wrong at that moment."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from corral.sdk import Checkpointer, exit_if_preempted, install_signal_handlers
from corral.sdk import signals as sig
from corral.wire.env import EXIT_PREEMPTED

from .gloo_parts import free_port, rank_env


@pytest.mark.parametrize("raw", ["soon", "-5"])
def test_a_malformed_grace_period_still_saves_and_exits_75(
    tmp_path: Path, monkeypatch, capsys, raw
):
    monkeypatch.setenv("CORRAL_GRACE_SECONDS", raw)
    cp = Checkpointer(tmp_path / "ck")
    install_signal_handlers()
    os.kill(os.getpid(), signal.SIGTERM)
    with pytest.raises(SystemExit) as exited:
        exit_if_preempted(cp, lambda: {"step": 4}, step=4)
    assert exited.value.code == EXIT_PREEMPTED
    assert cp.latest().step == 4  # the default grace period (30 s) was used
    assert "CORRAL_GRACE_SECONDS" in capsys.readouterr().err


def test_seconds_left_falls_back_to_the_default_grace_period(monkeypatch, capsys):
    monkeypatch.setenv("CORRAL_GRACE_SECONDS", "soon")
    assert sig.seconds_left() is None  # not preempted: nothing to say
    install_signal_handlers()
    os.kill(os.getpid(), signal.SIGTERM)
    left = sig.seconds_left(clock=lambda: sig._signal_at + 10.0)
    assert left == pytest.approx(sig.DEFAULT_GRACE_SECONDS - 10.0)
    assert "CORRAL_GRACE_SECONDS" in capsys.readouterr().err


# Exit 75 must reach the controller: from a training loop run in a thread, and through the
# script's own ``finally: dist.destroy_process_group()`` in a distributed job (real processes,
# real signals, a gloo group over loopback).


THREAD_LOOP = textwrap.dedent(
    """
    import sys, threading, time
    from corral.sdk import Checkpointer, exit_if_preempted, install_signal_handlers

    cp = Checkpointer(sys.argv[1])
    install_signal_handlers()  # in the main thread, as required

    def loop():
        for step in range(1, 100_000):
            if step == 5:
                print("ready", flush=True)
            exit_if_preempted(cp, lambda s=step: {"step": s}, step=step)
            time.sleep(0.01)

    worker = threading.Thread(target=loop)
    worker.start()
    worker.join()
    print("main thread finished", flush=True)  # exit 0: "done", with training unfinished
    """
)


def wait_ready(proc: subprocess.Popen, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    line = proc.stdout.readline()  # type: ignore[union-attr]
    assert line.strip() == "ready" and time.monotonic() < deadline, line


def test_preemption_in_a_training_thread_ends_the_process_with_75(tmp_path: Path):
    script = tmp_path / "thread_loop.py"
    script.write_text(THREAD_LOOP)
    ckpt = tmp_path / "ck"
    proc = subprocess.Popen(
        [sys.executable, str(script), str(ckpt)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_ready(proc)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == EXIT_PREEMPTED, (out, err)
    assert "main thread finished" not in out
    assert Checkpointer(ckpt).latest().step >= 5  # the preemption save is durable


DDP_FINALLY = textwrap.dedent(
    """
    import datetime, sys, time
    import torch
    import torch.distributed as dist
    from corral.sdk import Checkpointer, exit_if_preempted, install_signal_handlers

    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=15))
    rank = dist.get_rank()
    cp = Checkpointer(sys.argv[1])
    install_signal_handlers()
    try:
        for step in range(1, 100_000):
            grad = torch.ones(1)
            dist.all_reduce(grad)
            if step == 5:
                print("ready", flush=True)
            exit_if_preempted(cp, lambda s=step: {"step": s, "rank": rank}, step=step)
            time.sleep(0.01)
    finally:
        dist.destroy_process_group()  # the usual clean-up of a torchrun script
    """
)


@pytest.mark.torch
@pytest.mark.slow
def test_the_scripts_own_destroy_process_group_in_finally_keeps_exit_75(tmp_path: Path):
    dist = pytest.importorskip("torch.distributed")
    if not dist.is_available():
        pytest.skip("torch.distributed is not available")
    script = tmp_path / "ddp_finally.py"
    script.write_text(DDP_FINALLY)
    ckpt = tmp_path / "ck"
    port = free_port()
    procs = []
    try:
        for rank in (0, 1):
            env = rank_env(rank, port)
            procs.append(
                subprocess.Popen(
                    [sys.executable, str(script), str(ckpt)],
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                    env=env,
                )
            )
        wait_ready(procs[1])
        procs[1].send_signal(signal.SIGTERM)
        results = [p.communicate(timeout=20) for p in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    codes = [p.returncode for p in procs]
    assert codes == [EXIT_PREEMPTED, EXIT_PREEMPTED], [err[-2000:] for _, err in results]
    assert all("Traceback" not in err for _, err in results)
    state = Checkpointer(ckpt).restore()
    assert state["rank"] == 0 and state["step"] >= 5
