"""Saves checkpoints as fast as it can until it is killed (used by test_kill9.py).

Run as ``kill9_writer.py DIR``: a fork server. Each ``go`` line on stdin forks a writer process
(imports already done, so a trial starts in milliseconds) that prints ``ready <pid>``; when the
writer dies the server prints ``dead``.

Resumes from the newest checkpoint in DIR, then saves steps latest+1, latest+2, ... (every
fifth step is saved twice, to exercise replacing a step). The state of step s is derived from s,
so the test can check a restored state is whole.
"""

import os
import sys

import numpy as np

from corral.sdk import Checkpointer


def state_for(step: int) -> dict:
    return {
        "step": step,
        "w": np.full(200_000, step, dtype=np.float64),
        "b": np.full(3_000, step % 251, dtype=np.uint8),
        "blob": bytes([step % 256]) * 50_000,
    }


def writer(directory: str) -> None:
    cp = Checkpointer(directory, keep_last=2, async_save=True)
    restored = cp.restore()
    step = restored["step"] + 1 if restored else 1
    print(f"ready {os.getpid()}", flush=True)
    while True:
        cp.save(state_for(step), step, {"loss": 1.0 / step})
        if step % 5 == 0:
            cp.save(state_for(step), step, {"loss": 1.0 / step})
        step += 1


def main() -> None:
    for line in sys.stdin:
        if line.strip() != "go":
            break
        pid = os.fork()
        if pid == 0:
            try:
                writer(sys.argv[1])
            finally:
                os._exit(1)
        os.waitpid(pid, 0)
        print("dead", flush=True)


if __name__ == "__main__":
    main()
