"""Shipping a workdir to a node: corral against ``tar czf`` plus a plain HTTP copy, and the
bytes a recovery sends again.

    python benchmarks/ship.py [--json] [--size-mb 100] [--repeat 1]

1. A workdir of ``--size-mb`` MB of mixed files (source-like text in 2,000 small files, numeric
   data that compresses about 2:1, random bytes that do not compress) is made once.
2. **baseline**: ``tar czf`` of it, then a PUT of the archive to a plain ``http.server`` on
   loopback (the stdlib, streaming to a file). Time: both together.
3. **corral**: the controller's path, cold (nothing cached): pack the workdir (``.gitignore``
   rules, sha256-addressed gzip), upload it to an agent on loopback through ``PUT /code``
   (resumable pieces, as the controller's uploader does), which verifies the sha256 as it
   arrives and unpacks it; the time ends when the agent says its code is ready.
4. **recovery**: a run with object storage (``file://``): the launch of attempt 1 puts the
   bundle there; the launch of attempt 2 (another machine) sends nothing, and its agent fetches
   the bundle itself. ``resent_bytes`` is what the controller sent for attempt 2.

Figures: ``ship_s`` (corral), ``baseline_s``, their ratio (target <= 1.2), ``resent_bytes``
(target 0), and the sizes.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

TOKEN = "bench-token-0123456789"
_LOW_NIBBLE = bytes(i & 0x0F for i in range(256))


def make_workdir(root: Path, size_mb: int, seed: int = 7) -> int:
    """Mixed files: 40 % text, 20 % compressible numbers, 40 % random. Returns the bytes."""
    rng = random.Random(seed)
    total = size_mb * 1_000_000
    words = [
        "".join(rng.choice("abcdefghijklmnopqrstuvwxyz_") for _ in range(rng.randint(2, 12)))
        for _ in range(5000)
    ]
    text_budget, numbers_budget = int(total * 0.4), int(total * 0.2)
    written = 0
    n = 0
    while written < text_budget:
        d = root / "src" / f"pkg{n // 100:02d}"
        d.mkdir(parents=True, exist_ok=True)
        lines = [" ".join(rng.choices(words, k=12)) for _ in range(300)]
        data = ("\n".join(lines) + "\n").encode()
        (d / f"mod{n:04d}.py").write_bytes(data)
        written += len(data)
        n += 1
    data_dir = root / "data"
    data_dir.mkdir()
    chunk = 5_000_000
    i = 0
    while written < text_budget + numbers_budget:
        nums = os.urandom(chunk).translate(_LOW_NIBBLE)  # 4 bits of entropy a byte
        (data_dir / f"table{i}.bin").write_bytes(nums)
        written += chunk
        i += 1
    i = 0
    while written < total:
        (data_dir / f"blob{i}.bin").write_bytes(os.urandom(chunk))
        written += chunk
        i += 1
    (root / ".gitignore").write_text("__pycache__/\n*.ckpt\n")
    return written


class _Sink(BaseHTTPRequestHandler):
    target: Path

    def log_message(self, *args: object) -> None:
        pass

    def do_PUT(self) -> None:
        left = int(self.headers["Content-Length"])
        with open(self.target, "wb") as out:
            while left:
                data = self.rfile.read(min(left, 1 << 20))
                out.write(data)
                left -= len(data)
        self.send_response(201)
        self.send_header("Content-Length", "0")
        self.end_headers()


def baseline(work: Path, tmp: Path) -> dict[str, float]:
    archive = tmp / "baseline.tgz"
    t0 = time.perf_counter()
    subprocess.run(["tar", "czf", str(archive), "-C", str(work), "."], check=True)
    t_tar = time.perf_counter() - t0

    class Sink(_Sink):
        target = tmp / "received.tgz"

    server = ThreadingHTTPServer(("127.0.0.1", 0), Sink)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        t1 = time.perf_counter()
        size = archive.stat().st_size
        conn = http.client.HTTPConnection("127.0.0.1", server.server_address[1])
        with open(archive, "rb") as f:
            conn.request("PUT", "/archive.tgz", body=f, headers={"Content-Length": str(size)})
            assert conn.getresponse().status == 201
        conn.close()
        t_http = time.perf_counter() - t1
    finally:
        server.shutdown()
        server.server_close()
    return {"tar_s": t_tar, "http_s": t_http, "baseline_s": t_tar + t_http, "tgz_bytes": size}


def _agent(tmp: Path, name: str, bundle_sha: str, size: int, storage: str | None):
    from corral.agent.main import Agent, NodeLaunch
    from corral.wire.code import BundleRef, CodePlan
    from corral.wire.plan import AgentPlan

    plan = AgentPlan.model_validate(
        {
            "run_id": "bench-1",
            "attempt": 1,
            "workdir": "/work",
            "checkpoint_dir": "/ckpt",
            "state_dir": "/state",
            "devices": [],
            "stages": [{"name": "main", "run": "true"}],
            "code": CodePlan(
                bundle=BundleRef(sha256=bundle_sha, size=size, storage=storage)
            ).model_dump(),
        }
    )
    agent = Agent(plan, TOKEN, launch=NodeLaunch(root=str(tmp / name)))
    return agent, agent.start()


def _wait_ready(agent, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while agent.code.state != "ready":
        if agent.code.state == "failed" or time.monotonic() > deadline:
            raise SystemExit(f"the agent's code is {agent.code.state}: {agent.code.reason}")
        time.sleep(0.005)


def corral_ship(work: Path, tmp: Path) -> dict[str, float]:
    from corral.bundle import pack as packing
    from corral.control import shipping
    from corral.control.agent_client import AgentClient

    t0 = time.perf_counter()
    items = packing.collect(str(work))
    bundle = packing.pack(tmp / "cache", items)
    t_pack = time.perf_counter() - t0
    # the agent waits for its code (started before the clock, as a booted machine would be)
    t_boot = time.perf_counter()
    agent, url = _agent(tmp, "node-1", bundle.sha256, bundle.size, None)
    boot_s = time.perf_counter() - t_boot
    client = AgentClient(url, TOKEN)
    try:
        t1 = time.perf_counter()
        uploads = shipping.Uploads()
        uploads.ensure("bench", bundle.path, bundle.sha256, 0, client.put_code)
        uploads.wait()
        _wait_ready(agent)
        t_send = time.perf_counter() - t1
        sent = uploads.finished("bench")
    finally:
        client.close()
        agent.close(timeout=10)
    return {
        "pack_s": t_pack,
        "send_unpack_s": t_send,
        "ship_s": t_pack + t_send,
        "bundle_bytes": bundle.size,
        "sent_bytes": sent or 0,
        "agent_start_s": boot_s,
        "sha256": bundle.sha256,
    }


def recovery(work: Path, tmp: Path) -> dict[str, float]:
    """Two launches of one run with object storage: what the controller sends for each."""
    from corral.control import shipping
    from corral.spec import load_spec_text
    from corral.store import Store

    os.environ["CORRAL_HOME"] = str(tmp / "home")
    store = Store.open(f"sqlite:///{tmp / 'bench.db'}")
    bucket = tmp / "bucket"
    spec = load_spec_text(
        f"name: bench\nrun: 'true'\nworkdir: {work}\ncheckpoints: {{storage: 'file://{bucket}'}}\n",
        base_dir=tmp,
    )
    run = store.create_run(
        name="bench",
        spec=spec.model_dump(mode="json"),
        spec_hash="x",
        spec_path="-",
        workdir=str(work),
    )
    sent = []
    for attempt in (1, 2):
        code = shipping.code_plan(store, run.id, spec, tmp / "home", attempt=attempt)
        events = store.events(run.id, types=[shipping.UPLOADED])
        sent.append(sum(e.data.get("bytes", 0) for e in events if e.attempt == attempt))
        assert code.bundle is not None and code.bundle.storage
        agent, _ = _agent(
            tmp, f"rnode-{attempt}", code.bundle.sha256, code.bundle.size, code.bundle.storage
        )
        try:
            _wait_ready(agent)
            assert agent.code.source == "storage"
        finally:
            agent.close(timeout=10)
    store.close()
    return {"first_sent_bytes": sent[0], "resent_bytes": sent[1]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--size-mb", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        work = tmp / "work"
        work.mkdir()
        content = make_workdir(work, args.size_mb)
        rows = []
        for i in range(args.repeat):
            run_dir = tmp / f"r{i}"
            run_dir.mkdir()
            b = baseline(work, run_dir)
            c = corral_ship(work, run_dir)
            rows.append({**b, **c})
            shutil.rmtree(run_dir)
        (tmp / "recovery").mkdir()
        rec = recovery(work, tmp / "recovery")
    best = min(rows, key=lambda r: r["ship_s"])
    base = min(r["baseline_s"] for r in rows)
    result = {
        "size_mb": round(content / 1e6, 1),
        "ship_s": round(best["ship_s"], 3),
        "baseline_s": round(base, 3),
        "ratio": round(best["ship_s"] / base, 3),
        "pack_s": round(best["pack_s"], 3),
        "send_unpack_s": round(best["send_unpack_s"], 3),
        "tar_s": round(best["tar_s"], 3),
        "http_s": round(best["http_s"], 3),
        "bundle_mb": round(best["bundle_bytes"] / 1e6, 1),
        "tgz_mb": round(best["tgz_bytes"] / 1e6, 1),
        "first_sent_bytes": rec["first_sent_bytes"],
        "resent_bytes": rec["resent_bytes"],
        "runs": [{k: round(v, 3) for k, v in r.items() if isinstance(v, float)} for r in rows],
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"workdir: {result['size_mb']} MB of mixed files (text, numbers, random)")
    print(f"{'':34}{'seconds':>10}")
    print(f"{'baseline: tar czf':34}{best['tar_s']:>10.2f}   -> {result['tgz_mb']} MB")
    print(f"{'          + HTTP PUT (loopback)':34}{best['http_s']:>10.2f}")
    print(f"{'          total':34}{base:>10.2f}")
    print(f"{'corral:   pack (cold)':34}{best['pack_s']:>10.2f}   -> {result['bundle_mb']} MB")
    print(f"{'          + PUT /code, verify, unpack':34}{best['send_unpack_s']:>10.2f}")
    print(
        f"{'          total':34}{best['ship_s']:>10.2f}   ({result['ratio']:.2f}x baseline; "
        "target <= 1.2x)"
    )
    print(
        f"recovery: attempt 1 sent {rec['first_sent_bytes']} bytes to storage; attempt 2 "
        f"sent {rec['resent_bytes']} (target 0)"
    )


if __name__ == "__main__":
    sys.exit(main())
