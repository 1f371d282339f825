"""Where the tests find the real training tools that do not install beside corral."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

ENV_ULTRALYTICS_PYTHON = "CORRAL_TEST_ULTRALYTICS_PYTHON"
#: where scripts/ultralytics_venv.sh makes its environment by default
DEFAULT_ULTRALYTICS_VENV = Path.home() / ".cache" / "corral-ultralytics-venv"


def ultralytics_yolo() -> tuple[str, str]:
    """``(python, yolo)``: an interpreter with ultralytics and its ``yolo`` command, from
    ``$CORRAL_TEST_ULTRALYTICS_PYTHON``, else the environment ``scripts/ultralytics_venv.sh``
    makes by default, else this interpreter; the test is skipped, saying how to get one, when
    none has it. (Ultralytics needs torchvision, which does not load beside the dev install's
    CPU torch: it has an environment of its own.)"""
    chosen = os.environ.get(ENV_ULTRALYTICS_PYTHON)
    default = DEFAULT_ULTRALYTICS_VENV / "bin" / "python"
    candidates = [chosen] if chosen else [str(default), sys.executable]
    for python in candidates:
        yolo = shutil.which("yolo", path=str(Path(python).parent))
        if Path(python).exists() and yolo is not None:
            return python, yolo
    where = f"{ENV_ULTRALYTICS_PYTHON}={chosen}" if chosen else "no ultralytics here"
    pytest.skip(
        f"{where}: no yolo command; `bash scripts/ultralytics_venv.sh` makes an environment "
        f"with ultralytics ({DEFAULT_ULTRALYTICS_VENV}, used when present), or set "
        f"{ENV_ULTRALYTICS_PYTHON} to a Python that has it"
    )
