"""The default checkpoint interval of an attempt, from its provider's interruption rate.

On a provider that gives no preemption notice (its ``node_profile`` says how often its
machines are interrupted) an interruption loses everything since the last complete
checkpoint: on average half an interval. So the interval the SDK aims for (``CORRAL_CHECKPOINT_INTERVAL_S``, read by
:class:`corral.sdk.interval.CheckpointTimer`) is:

* the spec's ``checkpoints.interval`` when it gives one; else
* ``min(2 * max_lost_work, sqrt(2 * save_s / rate))``: the expected loss per interruption
  (``interval / 2``) stays under ``checkpoints.max_lost_work``, and where interruptions are
  frequent the interval shrinks to the Young-Daly optimum (``save_s``: what one save costs,
  30 s by default), never below :data:`MIN_INTERVAL_S`.

The rate is the one corral **observed** on the provider (preemptions per machine-hour over its
last attempts, once they add up to :data:`MIN_OBSERVED_HOURS`), else the one the provider
**documents** (``NodeProfile.interruptions_per_hour``). No rate (a provider with a notice, or
this machine) means no default interval: the job checkpoints when it chooses.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from corral.store.records import AttemptRecord
from corral.store.store import Store

#: an interval is never shorter than this (saving more often costs more than it saves)
MIN_INTERVAL_S = 60.0
#: what one save is taken to cost when nothing better is known
DEFAULT_SAVE_S = 30.0
#: machine-hours of a provider's attempts before its observed rate replaces the documented one
MIN_OBSERVED_HOURS = 5.0
#: the attempts (newest first) the observed rate is worked out from
OBSERVED_ATTEMPTS = 200


@dataclass(frozen=True)
class Rate:
    per_hour: float
    source: str  # "observed" or "documented"


def observed_rate(attempts: list[AttemptRecord]) -> Rate | None:
    """Preemptions per machine-hour over ``attempts`` (those that ran and ended); None until
    they add up to :data:`MIN_OBSERVED_HOURS`."""
    hours = 0.0
    preempted = 0
    for a in attempts:
        if a.running_at is None or a.ended_at is None:
            continue
        hours += max(0.0, (a.ended_at - a.running_at).total_seconds()) / 3600.0
        preempted += a.exit_reason == "preempted"
    if hours < MIN_OBSERVED_HOURS:
        return None
    return Rate(preempted / hours, "observed")


def interruption_rate(store: Store, provider: str, documented: float | None) -> Rate | None:
    """The rate to plan with: observed on ``provider``, else ``documented``, else None. A
    provider that documents none (it gives a notice, or nothing preempts it) gets None."""
    if documented is None:
        return None
    observed = observed_rate(store.recent_attempts(provider, OBSERVED_ATTEMPTS))
    return observed if observed is not None else Rate(documented, "documented")


def checkpoint_interval(
    rate_per_hour: float | None,
    max_lost_work_s: float,
    *,
    save_s: float = DEFAULT_SAVE_S,
) -> float | None:
    """Seconds between checkpoints (see the module doc); None without a rate."""
    if rate_per_hour is None:
        return None
    bound = 2.0 * max_lost_work_s
    if rate_per_hour > 0:
        bound = min(bound, math.sqrt(2.0 * save_s * 3600.0 / rate_per_hour))
    return round(max(MIN_INTERVAL_S, bound), 1)
