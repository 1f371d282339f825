"""Settings of the local provider: its price and where its machine-wide GPU locks live."""

from __future__ import annotations

import math
import os
from pathlib import Path

from corral.errors import BadInput

#: USD per hour charged for this machine in cost accounting (default 0).
ENV_LOCAL_PRICE = "CORRAL_LOCAL_PRICE_PER_HOUR"


#: Directory of the machine-wide GPU lock files, shared by every user and CORRAL_HOME of this
#: machine (default /tmp/corral-gpus). Only tests and unusual setups change it.
ENV_GPU_LOCK_DIR = "CORRAL_GPU_LOCK_DIR"
DEFAULT_GPU_LOCK_DIR = Path("/tmp/corral-gpus")


def gpu_lock_dir() -> Path:
    """``CORRAL_GPU_LOCK_DIR`` if set, else ``/tmp/corral-gpus`` (not ``$TMPDIR`` nor
    ``$XDG_RUNTIME_DIR``: those can differ between users, and the lock must not)."""
    raw = os.environ.get(ENV_GPU_LOCK_DIR, "").strip()
    return Path(raw) if raw else DEFAULT_GPU_LOCK_DIR


def price(value: float | None) -> float:
    """``value`` if given, else ``CORRAL_LOCAL_PRICE_PER_HOUR``, else 0; checked (>= 0)."""
    source, raw = "price_per_hour", value
    if value is None:
        raw = os.environ.get(ENV_LOCAL_PRICE, "").strip()
        if not raw:
            return 0.0
        source = ENV_LOCAL_PRICE
    try:
        value = float(raw)
    except (TypeError, ValueError):
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise BadInput(
            f"{source}={raw!r}: expected a price in USD per hour such as 0.8 (0 or more)"
        )
    return float(value)
