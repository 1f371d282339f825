"""A stand-in for ``python -m corral.agent`` used until the real agent lands (tests only).

Writes what the local provider reads from the agent (``agent.json``, ``children.json``, stage
logs under ``logs/``), runs the stages one after another, each in its own session, and stays
up after the last one until SIGTERM, which it forwards to the running stage's group.
Run as ``standin_agent.py -m corral.agent --plan PLAN`` (the wrapper passes the module args).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path


def main(argv: list[str]) -> int:
    plan = json.loads(Path(argv[argv.index("--plan") + 1]).read_text())
    state = Path(plan["state_dir"])
    (state / "logs").mkdir(parents=True, exist_ok=True)
    current: list[subprocess.Popen] = []

    def on_term(signum, frame):
        for p in current:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        sys.exit(143)

    signal.signal(signal.SIGTERM, on_term)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    (state / "agent.json").write_text(json.dumps({"url": url, "pid": os.getpid()}))
    print("standin agent up", flush=True)
    env = {**os.environ, **plan.get("env", {}), "CUDA_VISIBLE_DEVICES": ",".join(plan["devices"])}
    for stage in plan["stages"]:
        with open(state / "logs" / f"{stage['name']}.log", "ab") as log:
            p = subprocess.Popen(
                ["bash", "-c", stage["run"]],
                cwd=plan["workdir"],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        current.append(p)
        import psutil

        entry = {
            "stage": stage["name"],
            "pgid": p.pid,
            "create_time": psutil.Process(p.pid).create_time(),
        }
        (state / "children.json").write_text(json.dumps([entry]))
        p.wait()
        current.clear()
    while True:
        time.sleep(1)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
