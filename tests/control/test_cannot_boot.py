"""A machine that cannot boot corral says why once in its log, before the bootstrap's marker:
the controller reads that reason back for the attempt's failure, and nothing else (a
bootstrap still busy, a reason without the marker, a marker alone)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from corral.control.machine_log import CANNOT_BOOT, cannot_boot
from corral.providers.common import wheel


def test_the_reason_before_the_marker_is_read_back() -> None:
    log = (
        "pulling image\ncorral bootstrap: fetching corral 0.1.0's runtime into /opt/corral/x\n"
        "2026-11-29T08:00:00Z corral bootstrap: corral's runtime could not be unpacked into "
        "/opt/corral/x (disk full?)\n2026-11-29T08:00:00Z " + CANNOT_BOOT + "\n"
    )
    assert (
        cannot_boot(log) == "corral's runtime could not be unpacked into /opt/corral/x (disk full?)"
    )
    assert cannot_boot("corral bootstrap: installing corral 0.1.0 into /opt/corral/venv\n") is None
    assert cannot_boot("corral bootstrap: no python on this machine\n") is None
    assert cannot_boot(CANNOT_BOOT + "\n") is None


def test_the_real_bootstraps_words_are_read_back(tmp_path: Path) -> None:
    script = tmp_path / "node-bootstrap.sh"
    script.write_text(wheel.bootstrap_script())
    done = subprocess.run(
        ["/bin/bash", str(script)], env={"PATH": str(tmp_path)}, capture_output=True, text=True
    )
    assert done.returncode == 78
    assert cannot_boot("boot\n" + done.stderr) == (
        "no python on this machine and no corral runtime shipped (give the run object storage, "
        "or use an image with python 3.11 or later)"
    )
