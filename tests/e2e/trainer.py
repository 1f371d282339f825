"""A small deterministic training job on the SDK (numpy only), used by the babysitting tests:
exact resume from checkpoints, a graceful save on SIGTERM, final weights in out/weights.npy.

    python trainer.py [--total N] [--step-seconds S] [--every K]
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

from corral import sdk


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--total", type=int, default=40)
    p.add_argument("--step-seconds", type=float, default=0.15)
    p.add_argument("--every", type=int, default=5)
    args = p.parse_args()
    print(f"trainer: attempt {os.environ.get('CORRAL_ATTEMPT', '-')}", flush=True)
    sdk.install_signal_handlers()
    ck = sdk.Checkpointer()
    state = ck.restore()
    rng = np.random.default_rng(0)
    w, step = np.zeros(16), 0
    if state is not None:
        w, step = state["w"], state["step"]
        rng.bit_generator.state = state["rng"]
        print(f"trainer: resumed at step {step}", flush=True)

    def snapshot() -> dict:
        return {"w": w.copy(), "step": step, "rng": rng.bit_generator.state}

    while step < args.total:
        w = 0.9 * w + 0.1 * rng.standard_normal(16) * (1 + step % 3)
        step += 1
        sdk.report(step=step, total=args.total, loss=float(np.abs(w).mean()))
        time.sleep(args.step_seconds)
        if step % args.every == 0:
            ck.save(snapshot(), step)
        sdk.exit_if_preempted(ck, snapshot, step)
    ck.wait()
    os.makedirs("out", exist_ok=True)
    np.save("out/weights.npy", w)
    print(f"trainer: done at step {step}", flush=True)


if __name__ == "__main__":
    main()
