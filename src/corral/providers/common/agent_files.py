"""Files an agent running on this machine writes in its state dir, read by its agent host.

* ``agent.json``: where the agent's HTTP API listens (``{"url": ...}``, or ``host`` + ``port``).
* ``children.json``: ``[{"stage", "pgid", "create_time"}]``, one process group per stage,
  with ``"cleanup"`` (an argv: its container's removal) for a stage run in an image.
* ``*.log`` files: stage logs, tailed by :func:`tail_logs` together with ``agent.out``.
"""

from __future__ import annotations

from collections import deque
from pathlib import Path

from corral.providers.common.files import read_json
from corral.providers.common.host_state import AGENT_DIR, AGENT_JSON, AGENT_OUT, CHILDREN_JSON
from corral.providers.common.process import Group


def agent_endpoint(agent_dir: Path) -> str | None:
    """Base URL of the agent's HTTP API from ``agent.json``, or None until it is written."""
    data = read_json(agent_dir / AGENT_JSON)
    if not isinstance(data, dict):
        return None
    for key in ("url", "endpoint"):
        if isinstance(data.get(key), str) and data[key]:
            return data[key].rstrip("/")
    port = data.get("port")
    if isinstance(port, int) and port > 0:
        host = data.get("host") or "127.0.0.1"
        if host in ("0.0.0.0", "::"):
            host = "127.0.0.1"
        return f"http://{host}:{port}"
    return None


def stage_groups(agent_dir: Path) -> list[Group]:
    """The stage process groups listed in ``children.json`` (malformed entries skipped)."""
    data = read_json(agent_dir / CHILDREN_JSON)
    if isinstance(data, dict):  # tolerate {"children": [...]}
        data = data.get("children")
    if not isinstance(data, list):
        return []
    groups = []
    for item in data:
        if not isinstance(item, dict):
            continue
        pgid, ct = item.get("pgid"), item.get("create_time")
        if not isinstance(pgid, int) or isinstance(pgid, bool) or pgid <= 1:
            continue
        ct = float(ct) if isinstance(ct, int | float) and not isinstance(ct, bool) else None
        groups.append(Group(pgid, ct, f"stage:{item.get('stage', '?')}"))
    return groups


def stage_cleanups(agent_dir: Path) -> list[list[str]]:
    """The cleanup commands listed in ``children.json`` (a stage container's removal)."""
    data = read_json(agent_dir / CHILDREN_JSON)
    if not isinstance(data, list):
        return []
    return [
        item["cleanup"]
        for item in data
        if isinstance(item, dict)
        and isinstance(item.get("cleanup"), list)
        and item["cleanup"]
        and all(isinstance(a, str) for a in item["cleanup"])
    ]


def _tail(path: Path, n: int) -> list[str]:
    try:
        with open(path, errors="replace") as f:
            return list(deque(f, maxlen=n))
    except OSError:
        return []


def tail_logs(instance_dir: Path, tail: int = 200) -> str:
    """The last ``tail`` lines of ``agent.out`` and of every log file the agent wrote, each
    under a ``==> name <==`` header (like ``tail`` with several files)."""
    tail = max(1, int(tail))
    agent_dir = instance_dir / AGENT_DIR
    files = [instance_dir / AGENT_OUT]
    if agent_dir.is_dir():
        files += sorted(p for p in agent_dir.rglob("*.log") if p.is_file())
    parts = []
    for path in files:
        if not path.is_file():
            continue
        lines = _tail(path, tail)
        name = path.relative_to(instance_dir)
        parts.append(f"==> {name} <==\n" + "".join(lines))
    return "\n".join(parts)
