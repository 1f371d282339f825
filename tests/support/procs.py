"""Processes a test started indirectly (through a controller or a provider) and must end."""

from __future__ import annotations

import contextlib
from pathlib import Path

import psutil


def end_processes_under(root: Path) -> None:
    """Kill every process whose command line names a path under ``root`` (an agent a stopped
    controller left serving, say) and wait for them to go."""
    left = [
        proc
        for proc in psutil.process_iter(["cmdline"])
        if any(str(root) in part for part in proc.info["cmdline"] or [])
    ]
    for proc in left:
        with contextlib.suppress(psutil.Error):  # gone already
            proc.kill()
    psutil.wait_procs(left, timeout=5)
