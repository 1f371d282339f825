"""Cron schedules: on each tick of the controller, start the runs whose time has come.

For a schedule whose ``next_at`` has passed, the ticks due are ``next_at`` and every later one
up to now. The latest is started if it is on time (at most ``ON_TIME_S`` late); the ticks
before it, and the latest too when it is late (everything was down), follow the schedule's
policy: ``skip`` starts nothing for them, ``run-once`` starts one run for all of them. The
store acts on a tick once however many controllers try (``Store.fire_schedule``: a unique row
per schedule and tick, and a compare-and-set on ``next_at``).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from datetime import datetime

from corral.control.context import Context, log
from corral.spec.schedule import MAX_TICKS, ON_TIME_S, ticks
from corral.store.records import ScheduleRecord


@dataclass(frozen=True)
class Firing:
    """What to do about a schedule now."""

    tick_at: datetime
    start_run: bool
    next_at: datetime
    #: ticks passed over without a run (not counting ``tick_at``)
    missed: int


def decide(schedule: ScheduleRecord, now: datetime) -> Firing:
    due = [schedule.next_at]
    later = ticks(schedule.cron, schedule.timezone, schedule.next_at)
    for tick in itertools.islice(later, MAX_TICKS):
        if tick > now:
            next_at = tick
            break
        due.append(tick)
    else:  # more ticks than we look at: start over from now
        next_at = next(ticks(schedule.cron, schedule.timezone, now))
    latest = due[-1]
    on_time = (now - latest).total_seconds() <= ON_TIME_S
    return Firing(
        tick_at=latest,
        start_run=on_time or schedule.missed == "run-once",
        next_at=next_at,
        missed=len(due) - 1,
    )


def fire_due(ctx: Context) -> int:
    """Act on every schedule that is due; returns how many runs were started here."""
    now = ctx.clock()
    started = 0
    for schedule in ctx.store.due_schedules(now):
        try:
            firing = decide(schedule, now)
            tick = ctx.store.fire_schedule(
                schedule.name,
                expect_next=schedule.next_at,
                next_at=firing.next_at,
                tick_at=firing.tick_at,
                start_run=firing.start_run,
                missed=firing.missed,
            )
        except Exception as e:  # one schedule's trouble never stops the others
            log.error("schedule %s: firing failed: %s", schedule.name, e)
            continue
        if tick is None:
            continue  # another controller acted on this tick
        if tick.run_id:
            started += 1
            log.info("schedule %s: started %s for %s", schedule.name, tick.run_id, tick.tick_at)
        else:
            log.info("schedule %s: skipped the tick at %s (missed)", schedule.name, tick.tick_at)
    return started
