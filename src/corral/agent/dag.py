"""Checks that a plan's stages form a runnable DAG before anything starts."""

from __future__ import annotations

import re

from corral.errors import BadInput
from corral.wire.plan import AgentPlan

#: Stage names become file names (logs, progress files); names starting with '_' are the
#: agent's own (``_setup``).
STAGE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")


def validate(plan: AgentPlan) -> list[str]:
    """Raise :class:`BadInput` for a plan whose stages cannot run; return a topological order."""
    names = [s.name for s in plan.stages]
    if not names:
        raise BadInput("the plan has no stages")
    for name in names:
        if not STAGE_NAME.match(name):
            raise BadInput(
                f"stage name {name!r} is invalid: use letters, digits, '_', '.', '-' "
                "and start with a letter or digit"
            )
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise BadInput(f"stage {name!r} is defined twice")
        seen.add(name)
    for stage in plan.stages:
        for need in stage.needs:
            if need not in seen:
                raise BadInput(f"stage {stage.name!r} needs unknown stage {need!r}")
            if need == stage.name:
                raise BadInput(f"stage {stage.name!r} needs itself")
    for name in plan.skip_stages:
        if name not in seen:
            raise BadInput(f"skip_stages names unknown stage {name!r}")
    needs = {s.name: list(s.needs) for s in plan.stages}
    order: list[str] = []
    done: set[str] = set()
    while len(order) < len(names):
        ready = [n for n in names if n not in done and all(d in done for d in needs[n])]
        if not ready:
            stuck = sorted(n for n in names if n not in done)
            raise BadInput(f"stages {', '.join(stuck)} can never start: their needs form a cycle")
        order.extend(ready)
        done.update(ready)
    return order
