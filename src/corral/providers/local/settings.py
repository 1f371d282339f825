"""Settings of the local provider: its price and where its machine-wide GPU locks live."""

from __future__ import annotations

import math
import os

# the machine-wide GPU lock directory lives with the locks (the pool's workers take them too)
from corral.device_locks import DEFAULT_GPU_LOCK_DIR, ENV_GPU_LOCK_DIR, gpu_lock_dir
from corral.errors import BadInput

#: USD per hour charged for this machine in cost accounting (default 0).
ENV_LOCAL_PRICE = "CORRAL_LOCAL_PRICE_PER_HOUR"

__all__ = ["DEFAULT_GPU_LOCK_DIR", "ENV_GPU_LOCK_DIR", "ENV_LOCAL_PRICE", "gpu_lock_dir", "price"]


def price(value: float | None) -> float:
    """``value`` if given, else ``CORRAL_LOCAL_PRICE_PER_HOUR``, else 0; checked (>= 0)."""
    source = "price_per_hour"
    raw: float | str
    if value is None:
        raw = os.environ.get(ENV_LOCAL_PRICE, "").strip()
        if not raw:
            return 0.0
        source = ENV_LOCAL_PRICE
    else:
        raw = value
    try:
        value = float(raw)
    except (TypeError, ValueError):
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise BadInput(
            f"{source}={raw!r}: expected a price in USD per hour such as 0.8 (0 or more)"
        )
    return float(value)
