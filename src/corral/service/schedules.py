"""Cron schedules: ``corral schedule add FILE`` / ``ls`` / ``rm NAME``.

A schedule keeps the resolved spec (as ``corral launch`` would run it) and the next tick; the
controller starts one run per tick (``control/scheduling.py``). Ticks need a controller: the
one started here stays while schedules exist, and a team runs one under systemd.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

from corral.errors import BadInput
from corral.service._store import using
from corral.service.controller import ensure_controller
from corral.service.views import IsoDatetime, View
from corral.spec import load_spec, spec_hash
from corral.spec.schedule import Schedule
from corral.store import Store
from corral.store.records import ScheduleRecord


class ScheduleView(View):
    """A schedule as ``corral schedule ls --json`` shows it."""

    name: str
    cron: str
    timezone: str
    missed: str
    spec_path: str
    workdir: str
    created_at: IsoDatetime
    next_at: IsoDatetime
    last_tick_at: IsoDatetime | None
    last_run_id: str | None
    fired: int
    skipped: int

    @classmethod
    def of(cls, r: ScheduleRecord) -> ScheduleView:
        return cls(
            name=r.name,
            cron=r.cron,
            timezone=r.timezone,
            missed=r.missed,
            spec_path=r.spec_path,
            workdir=r.workdir,
            created_at=r.created_at,
            next_at=r.next_at,
            last_tick_at=r.last_tick_at,
            last_run_id=r.last_run_id,
            fired=r.fired,
            skipped=r.skipped,
        )


def add_schedule(
    path: str | Path,
    *,
    overrides: Sequence[str] = (),
    name: str | None = None,
    replace: bool = False,
    now: datetime | None = None,
    store: Store | None = None,
    start_controller: bool = True,
) -> ScheduleView:
    """Register the spec at ``path`` (with ``overrides``) under ``name`` (default: the job's
    name) to start on its ``schedule:``. BadInput when the spec has no schedule or its workdir
    is missing; Conflict when the name is taken (unless ``replace``)."""
    from datetime import UTC

    spec = load_spec(path, list(overrides))
    if spec.schedule is None:
        raise BadInput(
            f'{path}: the spec has no schedule: add e.g. `schedule: {{cron: "0 2 * * *"}}`'
        )
    if not Path(spec.workdir).is_dir():
        raise BadInput(f"{path}: workdir {spec.workdir} does not exist or is not a directory")
    sched: Schedule = spec.schedule
    label = name or spec.name
    moment = now or datetime.now(UTC)
    with using(store) as st:
        record = st.add_schedule(
            name=label,
            cron=sched.cron,
            timezone=sched.timezone,
            missed=sched.missed,
            spec=spec.model_dump(mode="json"),
            spec_hash=spec_hash(spec),
            spec_path=str(Path(path).resolve()),
            workdir=str(spec.workdir),
            next_at=sched.next_after(moment),
            replace=replace,
        )
    if start_controller:
        ensure_controller(wait_s=0)
    return ScheduleView.of(record)


def list_schedules(store: Store | None = None) -> list[ScheduleView]:
    with using(store) as st:
        return [ScheduleView.of(r) for r in st.schedules()]


def remove_schedule(name: str, store: Store | None = None) -> ScheduleView:
    """Delete the schedule ``name`` (the runs it started stay); NotFound if there is none."""
    with using(store) as st:
        return ScheduleView.of(st.remove_schedule(name))
