"""The spending-caps watcher: caps across runs (``corral budget``)."""

from __future__ import annotations

import time

from corral.control.context import Context
from corral.control.cost import stop_estimate
from corral.control.observe import Observation
from corral.control.spend import CapBook, CapState, assess, describe, period_start
from corral.control.transitions import Note, Step
from corral.control.watchers.base import Watcher, stop
from corral.spec import JobSpec
from corral.store.records import RunRecord
from corral.store.states import RunState

#: the event given once per run and cap period when a cap's spend passes its ``warn_at``
CAP_WARNING = "budget.cap_warning"


def cap_states(ctx: Context) -> list[CapState]:
    """Every cap's state now (worked out at most once per tick for the whole controller)."""
    if ctx.cap_book is None:
        ctx.cap_book = CapBook(ctx.settings.tick_seconds)
    book: CapBook = ctx.cap_book

    def build() -> list[CapState]:
        now = ctx.clock()
        look = ctx.settings.poll_interval_s + ctx.settings.tick_seconds
        return [
            assess(
                cap,
                ctx.store.cap_spans(cap.scope, cap.subject, period_start(cap.period, now)),
                now,
                stop_s=lambda provider: stop_estimate(ctx, provider),
                next_look_s=look,
            )
            for cap in ctx.store.caps()
        ]

    return book.states(time.monotonic(), build)


def _data(state: CapState) -> dict[str, object]:
    cap = state.cap
    return {
        "by": "cap",
        "cap": {"scope": cap.scope, "subject": cap.subject, "period": state.period},
        "cap_usd": cap.amount_usd,
        "spent_usd": round(state.spent_usd, 6),
    }


class CapsWatcher(Watcher):
    """Stops a run (gracefully, reason ``budget``, a ``budget.stop`` event with ``by: cap``)
    when a spending cap that counts it must shed it (:mod:`corral.control.spend`: what is
    spent plus what the running machines' stops will cost would reach the cap; the most
    recently started runs go first); warns once per run and period (``budget.cap_warning``)
    when the cap's spend passes its ``warn_at``; and asks for the run to be looked at again
    before the cap can be reached.

    Reset rules: a monthly cap starts again at 0 on the first of each month (UTC); its
    warning is given again in the new month. A restarted controller finds the warning in the
    store's events."""

    name = "caps"
    states = frozenset({RunState.PROVISIONING, RunState.RUNNING, RunState.RECOVERING})

    def check(self, ctx: Context, run: RunRecord, spec: JobSpec, obs: Observation) -> Step | None:
        mine = [s for s in cap_states(ctx) if run.id in s.runs]
        for state in mine:
            if run.id in state.to_stop:
                ctx.cap_book.clear()  # the next run's look sees this stop's effect
                return stop("budget", run, _data(state))
        warn: CapState | None = None
        for state in mine:
            if state.reach_in_s is not None:
                obs.soon(state.reach_in_s)
            if warn is None and state.spent_usd >= state.cap.warn_at * state.cap.amount_usd:
                warn = state
        return None if warn is None else self._warning(ctx, run, warn)

    @staticmethod
    def _warning(ctx: Context, run: RunRecord, state: CapState) -> Step | None:
        key = f"{state.cap.scope}:{state.cap.subject}:{state.period}"
        notes = ctx.notes(run.id)
        if key in notes.cap_warned:
            return None
        notes.cap_warned.add(key)
        for event in ctx.store.events(run.id, types=[CAP_WARNING]):
            if (event.data or {}).get("key") == key:
                return None
        cap = state.cap
        return Note(
            CAP_WARNING,
            f"the spending cap of {describe(cap)} (${cap.amount_usd:.2f}, {state.period}) has "
            f"${state.spent_usd:.2f} spent: {state.spent_usd / cap.amount_usd:.0%}",
            data={**_data(state), "key": key, "warn_at": cap.warn_at},
        )
