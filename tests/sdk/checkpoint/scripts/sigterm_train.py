"""A small training loop using the SDK's preemption support (used by test_preemption.py).

``sigterm_train.py DIR``: saves every 20 steps, prints ``ready`` once a checkpoint is durable,
and on SIGTERM saves (if the grace period allows) and exits 75, printing ``exit at <step>``.
"""

import sys
import time

import numpy as np

from corral.sdk import Checkpointer, exit_if_preempted, install_signal_handlers, training_state


def main() -> None:
    cp = Checkpointer(sys.argv[1], keep_last=3)
    install_signal_handlers()
    model = {"w": np.zeros(500_000)}  # 4 MB, so a save takes a little while
    step = 0
    try:
        for step in range(1, 1_000_000):
            model["w"] += 1.0  # after step s every weight is s
            if step % 20 == 0:
                cp.save(training_state(model, step=step), step)
            if step == 25:
                cp.wait()
                print("ready", flush=True)
            exit_if_preempted(cp, lambda s=step: training_state(model, step=s), step=step)
            time.sleep(0.002)
    except SystemExit:
        print(f"exit at {step}", flush=True)
        raise


if __name__ == "__main__":
    main()
