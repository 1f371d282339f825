"""Which checkpoints to keep: a pure function, so the rule is easy to test and to reason about.

The rule, for complete checkpoints given as ``(step, metrics)``:

1. the newest ``keep_last`` steps are kept;
2. the best ``keep_best`` steps by ``metrics[metric]`` are kept (lowest for ``mode="min"``,
   highest for ``mode="max"``); a step whose metrics lack ``metric``, or hold a value that is not
   a finite real number (``None``, NaN, inf, a string, a bool), is never a "best" candidate;
3. among equal metric values the newer step counts as better (a later checkpoint has seen more
   training), so ties resolve the same way on every run;
4. the newest step is always kept, even with ``keep_last=0``;
5. the ``protected`` steps are kept: the Checkpointer passes the step it has just written, so
   a run that resumed from an older checkpoint and saves step 6 while ``ckpt-10`` exists never
   deletes the checkpoint it has just made durable (and reported).

The result is the union of (1), (2), (4) and (5) (only steps in ``checkpoints``); everything
else may be deleted.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from corral.errors import BadInput
from corral.wire.env import ENV_CKPT_KEEP_BEST, ENV_CKPT_KEEP_LAST, ENV_CKPT_METRIC, ENV_CKPT_MODE

_ENV = {
    "keep_last": ENV_CKPT_KEEP_LAST,
    "keep_best": ENV_CKPT_KEEP_BEST,
    "metric": ENV_CKPT_METRIC,
    "mode": ENV_CKPT_MODE,
}


def metric_value(metrics: Mapping[str, Any] | None, metric: str | None) -> float | None:
    """``metrics[metric]`` as a float when it is a finite real number, else None."""
    if metric is None or not metrics or metric not in metrics:
        return None
    value = metrics[metric]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        item = getattr(value, "item", None)
        if not callable(item):  # numpy / torch scalars have item()
            return None
        try:
            value = item()
        except (TypeError, ValueError, RuntimeError):
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return None
    value = float(value)
    return value if math.isfinite(value) else None


def validate_policy(keep_last: int, keep_best: int, metric: str | None, mode: str) -> None:
    """Raise :class:`~corral.errors.BadInput` for a policy that makes no sense."""
    if isinstance(keep_last, bool) or not isinstance(keep_last, int) or keep_last < 0:
        raise BadInput(f"keep_last must be an integer >= 0, got {keep_last!r}")
    if isinstance(keep_best, bool) or not isinstance(keep_best, int) or keep_best < 0:
        raise BadInput(f"keep_best must be an integer >= 0, got {keep_best!r}")
    if mode not in ("min", "max"):
        raise BadInput(f"mode must be 'min' or 'max', got {mode!r}")
    if keep_best > 0 and not metric:
        raise BadInput("keep_best > 0 needs a metric to rank checkpoints by")


def retention_policy(
    keep_last: int | None = None,
    keep_best: int | None = None,
    metric: str | None = None,
    mode: str | None = None,
    *,
    fallback: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The retention policy as ``{"keep_last", "keep_best", "metric", "mode"}``, each part from
    the first that gives it: the argument; the job spec's ``checkpoints`` section, which the
    agent passes as ``CORRAL_CHECKPOINT_KEEP_LAST/_KEEP_BEST/_METRIC/_MODE``; ``fallback`` (a
    script's own choice for runs without corral); then 3, 0, None, ``"min"``. Validated.

    ``Checkpointer`` and the HF ``CorralCallback`` use it for arguments left out; a script that
    wants its own defaults below the spec's passes ``Checkpointer(**retention_policy(
    fallback={"keep_last": 2, "keep_best": 1, "metric": "val_loss"}))``."""
    env = os.environ if environ is None else environ
    given = {"keep_last": keep_last, "keep_best": keep_best, "metric": metric, "mode": mode}
    unknown = sorted(set(fallback or {}) - set(given))
    if unknown:
        raise BadInput(f"retention fallback has unknown keys: {', '.join(unknown)}")
    builtin = {"keep_last": 3, "keep_best": 0, "metric": None, "mode": "min"}
    policy: dict[str, Any] = {}
    for key, value in given.items():
        if value is None:
            raw = env.get(_ENV[key]) or None
            if raw is not None and key in ("keep_last", "keep_best"):
                try:
                    value = int(raw)
                except ValueError:
                    raise BadInput(f"{_ENV[key]}={raw!r} is not an integer") from None
            else:
                value = raw
        if value is None:
            value = (fallback or {}).get(key, builtin[key])
        policy[key] = value
    validate_policy(policy["keep_last"], policy["keep_best"], policy["metric"], policy["mode"])
    return policy


def rank_best(
    checkpoints: Sequence[tuple[int, Mapping[str, Any]]], metric: str | None, mode: str
) -> list[int]:
    """Steps that have the metric, best first (ties: newer step first; a repeated step counts
    once, with its last metrics)."""
    scored = []
    for step, metrics in dict(checkpoints).items():
        value = metric_value(metrics, metric)
        if value is not None:
            scored.append((value if mode == "min" else -value, -step))
    scored.sort()
    return [-neg_step for _, neg_step in scored]


def select_to_keep(
    checkpoints: list[tuple[int, dict]],
    keep_last: int,
    keep_best: int,
    metric: str | None,
    mode: str,
    *,
    protected: Iterable[int] = (),
) -> set[int]:
    """The steps to keep among ``checkpoints`` (see the module docstring for the rule);
    ``protected`` steps (e.g. the one just written) are kept whatever the policy says."""
    validate_policy(keep_last, keep_best, metric, mode)
    if not checkpoints:
        return set()
    steps = {step for step, _ in checkpoints}
    newest_first = sorted(steps, reverse=True)
    keep = set(newest_first[: max(keep_last, 1)])
    if keep_best:
        keep.update(rank_best(checkpoints, metric, mode)[:keep_best])
    keep.update(steps.intersection(protected))
    return keep
