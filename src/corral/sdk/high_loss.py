"""Keep the N worst samples of an evaluation (by loss) and send them to the trackers.

::

    worst = HighLossLogger(n=20)
    for batch in val_loader:
        losses = per_sample_loss(batch)                  # list, numpy array or tensor
        worst.add(batch["id"], losses, inputs=batch["text"], outputs=predictions)
    worst.flush(step)      # a table for W&B, a JSON artifact for MLflow, a JSONL record

Memory stays O(n) whatever the size of the evaluation (a heap of the n highest losses). A NaN
loss ranks above every number, ``+inf`` included (a sample that produces NaN is the first one to
look at), then ``+inf``, then the finite losses; ``-inf`` ranks last. Ties (equal losses, or two
NaNs) keep the sample added first. Rows are ``{"id", "loss"}`` plus ``"input"``/``"output"`` when
given, worst first.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from typing import Any

from corral.sdk.trackers.base import Tracker

__all__ = ["HighLossLogger"]


def _as_list(values: Any, what: str) -> list[Any]:
    if values is None:
        return []
    if hasattr(values, "detach"):  # torch tensor
        values = values.detach().cpu()
    if hasattr(values, "tolist"):
        out = values.tolist()
        return out if isinstance(out, list) else [out]
    if isinstance(values, (str, bytes)):
        raise ValueError(f"HighLossLogger: {what} must be a sequence, got a string")
    return list(values)


def _numbers(values: list[Any]) -> list[float]:
    """The losses as floats; a ``(batch, 1)`` column (``keepdim=True``) counts as a batch."""
    if values and all(isinstance(v, list) and len(v) == 1 for v in values):
        values = [v[0] for v in values]
    out = []
    for i, value in enumerate(values):
        try:
            out.append(float(value))
        except (TypeError, ValueError):
            raise ValueError(
                f"HighLossLogger.add: loss {i} is not a number: {value!r} "
                "(pass one loss per sample)"
            ) from None
    return out


class HighLossLogger:
    def __init__(self, n: int = 20, tracker: Tracker | None = None, *, name: str = "high_loss"):
        if n < 1:
            raise ValueError(f"HighLossLogger: n must be >= 1, got {n}")
        self.n = n
        self.tracker = tracker
        self.name = name
        self._heap: list[tuple[tuple[int, float], int, dict[str, Any]]] = []
        self._seq = 0

    def __len__(self) -> int:
        return len(self._heap)

    def add(
        self,
        ids: Sequence[Any] | Any,
        losses: Sequence[float] | Any,
        inputs: Sequence[Any] | Any | None = None,
        outputs: Sequence[Any] | Any | None = None,
    ) -> None:
        """Offer a batch of samples; only the ``n`` highest losses seen so far are kept."""
        id_list = _as_list(ids, "ids")
        loss_list = _numbers(_as_list(losses, "losses"))
        extra: dict[str, list[Any]] = {}
        for what, values in (("input", inputs), ("output", outputs)):
            if values is not None:
                extra[what] = _as_list(values, what + "s")
        for what, values in (("losses", loss_list), *((k + "s", v) for k, v in extra.items())):
            if len(values) != len(id_list):
                raise ValueError(f"HighLossLogger.add: {len(id_list)} ids but {len(values)} {what}")
        for i, (sample_id, loss) in enumerate(zip(id_list, loss_list, strict=True)):
            key = (1, 0.0) if math.isnan(loss) else (0, loss)  # NaN above everything, +inf too
            self._seq += 1
            # (key, -seq): among equal losses the newest is the smallest, so it is evicted first.
            entry = (key, -self._seq, {"id": sample_id, "loss": loss})
            if len(self._heap) < self.n:
                heapq.heappush(self._heap, entry)
            elif entry[:2] > self._heap[0][:2]:
                heapq.heapreplace(self._heap, entry)
            else:
                continue
            for what, values in extra.items():
                entry[2][what] = values[i]

    def worst(self) -> list[dict[str, Any]]:
        """The kept samples, highest loss first (a copy)."""
        ordered = sorted(self._heap, key=lambda e: (e[0], e[1]), reverse=True)  # worst, then oldest
        return [dict(e[2]) for e in ordered]

    def clear(self) -> None:
        self._heap.clear()

    def flush(self, step: int) -> list[dict[str, Any]]:
        """Send the worst samples to the tracker (default: the SDK's default tracker set) as
        the table ``name``, clear, and return the rows sent."""
        rows = self.worst()
        if rows:
            if self.tracker is not None:
                self.tracker.log_table(self.name, rows, step)
            else:
                from corral.sdk import trackers

                trackers.log_table(self.name, rows, step)
        self.clear()
        return rows
