"""The run manifest (``manifest.json``) an attempt writes at its end: what it produced and how.

Written into the agent's ``state_dir`` and, with artifact storage, to
``<storage>/<run_id>/manifest.json`` after every artifact file. Fields::

    {"format": "corral-run-manifest", "format_version": 1, "corral_version": "0.1.0",
     "run_id": "r-1", "run_name": "asr", "attempt": 2, "attempts": 2,
     "phase": "succeeded", "reason": "", "spec_hash": "9f...", "created_at": "2026-...Z",
     "git": {"commit": "4e1c...", "dirty": false} | null,
     "stages": [{"name": "train", "state": "succeeded", "exit_code": 0,
                 "started_at": "...Z", "finished_at": "...Z", "duration_s": 3600.2}],
     "cost": {"total_usd": 1.23, "attempt_usd": 0.41, "earlier_attempts_usd": 0.82,
              "hourly_price": 0.41, "attempt_seconds": 3600.0},
     "storage": "s3://bucket/runs" | null, "artifacts_uri": ".../r-1/artifacts" | null,
     "files": {"outputs/model.safetensors": {"size": 1234, "sha256": "..."}},
     "total_bytes": 1234, "warnings": [], "upload_error": null,
     "eval": {acceptance result, see corral.agent.acceptance} | null,
     "code": {"source": "workdir" | "git", "sha256": "...", "size": 1234,
              "git": {"url", "ref", "commit"}, "checkout": {"commit", "dirty"}} | null,
     "nodes": 2,   (a multi-node run's only: the machines of its gang; the head writes it)
     "node_attempts": [   (a multi-node run's only: each node's history, by rank)
        {"rank": 0, "attempts": [
           {"attempt": 1, "provider": "cloud", "instance_id": "m-0a", "region": "r1",
            "zone": "r1-b", "ended": "kept"},
           {"attempt": 2, "provider": "cloud", "instance_id": "m-0a", "region": "r1",
            "zone": "r1-b", "ended": "succeeded"}]},
        {"rank": 1, "attempts": [
           {"attempt": 1, ..., "instance_id": "m-0b", "ended": "preempted"},
           {"attempt": 2, ..., "instance_id": "m-0c", "ended": "succeeded"}]}]}

``phase`` is the attempt's phase before acceptance (a rejected run is failed by the runner
after the manifest is written). ``attempts`` is the number of attempts so far (this one
included). ``git.dirty`` counts changes to tracked files only (untracked outputs do not make a
checkout dirty). ``code`` is what was shipped to a node that does not share the controller's
files (the bundle's sha256 and size, the git commit); ``git`` is then the commit cloned, or
the one of the local checkout the workdir was packed from.

``node_attempts`` comes from the controller's books (the gang's resource rows per attempt,
sent to every node with ``POST /gang/start``): for each rank, every attempt it took part in,
on which machine (``provider``, ``instance_id``, ``region``, ``zone`` where the provider
says), and how that attempt ended for it: ``kept`` (its machine went on into the next
attempt: a repaired gang), ``preempted`` or ``lost`` (the provider took it), ``released``
(terminated with a gang that lost another node: relaunched whole), else the attempt's exit
reason (``gang_incomplete``, ``failed``, ...); the attempt writing the manifest: its
``phase``. A rank's machine kept through a repair shows the same ``instance_id`` in
consecutive attempts. Absent when the gang never started (no ``POST /gang/start``).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from datetime import datetime
from pathlib import Path
from typing import Any

from corral import __version__
from corral.wire.gang import NodeAttempt
from corral.wire.plan import AgentPlan

FORMAT_NAME = "corral-run-manifest"
FORMAT_VERSION = 1
GIT_TIMEOUT_S = 10.0


def sha256_file(path: str | Path) -> tuple[str, int]:
    """``(hex sha256, size in bytes)`` of a file, read in chunks."""
    digest = hashlib.sha256()
    size = 0
    with open(path, "rb", buffering=0) as f:
        buf = bytearray(4 * 1024 * 1024)
        view = memoryview(buf)
        while n := f.readinto(buf):
            digest.update(view[:n])
            size += n
    return digest.hexdigest(), size


def _git(workdir: str, *args: str) -> str | None:
    env = {**os.environ, "GIT_OPTIONAL_LOCKS": "0", "LC_ALL": "C"}
    try:
        done = subprocess.run(
            ["git", "-C", workdir, *args],
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT_S,
            env=env,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def git_info(workdir: str | Path) -> dict[str, Any] | None:
    """``{"commit", "dirty"}`` of the git checkout holding ``workdir``, or None (no git, not a
    repository, or a repository without a commit)."""
    if not os.path.isdir(workdir):
        return None
    head = _git(str(workdir), "rev-parse", "--verify", "-q", "HEAD")
    if not head or not head.strip():
        return None
    changes = _git(str(workdir), "status", "--porcelain", "--untracked-files=no")
    return {"commit": head.strip(), "dirty": None if changes is None else bool(changes.strip())}


def _seconds(stamp: str | None) -> float | None:
    if not stamp:
        return None
    return datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%f%z").timestamp()


def stage_timings(stages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per-stage timings from the runner's status rows."""
    out = []
    for stage in stages:
        start, end = _seconds(stage.get("started_at")), _seconds(stage.get("finished_at"))
        duration = round(end - start, 3) if start is not None and end is not None else None
        out.append(
            {
                "name": stage["name"],
                "state": stage["state"],
                "exit_code": stage.get("exit_code"),
                "started_at": stage.get("started_at"),
                "finished_at": stage.get("finished_at"),
                "duration_s": duration,
            }
        )
    return out


def cost(hourly_price: float, offset_usd: float, seconds: float) -> dict[str, float]:
    """This attempt's price x time plus the cost of the earlier attempts."""
    seconds = max(0.0, seconds)
    attempt = hourly_price * seconds / 3600.0
    return {
        "total_usd": round(offset_usd + attempt, 6),
        "attempt_usd": round(attempt, 6),
        "earlier_attempts_usd": round(offset_usd, 6),
        "hourly_price": hourly_price,
        "attempt_seconds": round(seconds, 3),
    }


def build(
    *,
    run_id: str,
    run_name: str,
    attempt: int,
    phase: str,
    reason: str,
    spec_hash: str,
    created_at: str,
    git: dict[str, Any] | None,
    stages: list[dict[str, Any]],
    cost: dict[str, float],
    storage: str | None,
    artifacts_uri: str | None,
    files: dict[str, dict[str, Any]],
    warnings: list[str],
    upload_error: str | None,
    eval: dict[str, Any] | None,
    code: dict[str, Any] | None = None,
    nodes: int = 1,
    node_attempts: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    return {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "corral_version": __version__,
        "run_id": run_id,
        "run_name": run_name,
        "attempt": attempt,
        "attempts": attempt,
        "phase": phase,
        "reason": reason,
        "spec_hash": spec_hash,
        "created_at": created_at,
        "git": git,
        "stages": stages,
        "cost": cost,
        "storage": storage,
        "artifacts_uri": artifacts_uri,
        "files": dict(sorted(files.items())),
        "total_bytes": sum(f["size"] for f in files.values()),
        "warnings": warnings,
        "upload_error": upload_error,
        "eval": eval,
        "code": code,
        **({"nodes": nodes} if nodes > 1 else {}),
        **({"node_attempts": node_attempts} if nodes > 1 and node_attempts else {}),
    }


def node_history(nodes: list[NodeAttempt], attempt: int, ended: str) -> list[dict[str, Any]]:
    """``node_attempts``: per rank (in order), the attempts it took part in, each with its
    machine and how it ended; attempt ``attempt``'s nodes, running when the head writes the
    manifest, ended as ``ended`` (its phase)."""
    ranks: dict[int, list[dict[str, Any]]] = {}
    for n in sorted(nodes, key=lambda n: (n.rank, n.attempt)):
        entry = n.model_dump(exclude={"rank"})
        if n.attempt == attempt and n.ended is None:
            entry["ended"] = ended
        ranks.setdefault(n.rank, []).append(entry)
    return [{"rank": rank, "attempts": items} for rank, items in sorted(ranks.items())]


def code_info(plan: AgentPlan) -> dict[str, Any] | None:
    """What code the attempt ran when it was shipped (``plan.code``): the bundle's sha256 and
    size, the git source and commit, the local checkout it came from; None otherwise."""
    code = plan.code
    if code is None:
        return None
    out: dict[str, Any] = {"source": code.source}
    if code.bundle is not None:
        out.update(sha256=code.bundle.sha256, size=code.bundle.size)
    if code.git is not None:
        out["git"] = {"url": code.git.url, "ref": code.git.ref, "commit": code.git.commit}
    if code.local_commit:
        out["checkout"] = {"commit": code.local_commit, "dirty": code.local_dirty}
    return out


def shipped_git(plan: AgentPlan) -> dict[str, Any] | None:
    """``git`` of the manifest for shipped code: the commit cloned, else the local
    checkout's the workdir was packed from."""
    code = plan.code
    if code is None:
        return None
    if code.git is not None:
        return {"commit": code.git.commit, "dirty": bool(code.local_dirty and code.bundle)}
    if code.local_commit:
        return {"commit": code.local_commit, "dirty": code.local_dirty}
    return None
