"""The preemption watcher."""

from __future__ import annotations

from corral.control import finishing, sync
from corral.control.context import Context, log
from corral.control.observe import Observation
from corral.control.transitions import AskStop, Note, Step
from corral.control.watchers.base import Watcher
from corral.errors import CorralError, ProviderError
from corral.spec import JobSpec
from corral.store.records import RunRecord
from corral.wire.machine import InstanceState
from corral.wire.outcome import StopCause


class PreemptionWatcher(Watcher):
    """The provider is the source of truth for "preempted" and "gone".

    * While the agent answers, the provider is asked every ``Settings.provider_poll_s``:
      PREEMPTED (a notice period) -> the agent is asked for a graceful stop with cause
      ``preemption``, once, so the job checkpoints before the kill (the recovery follows when
      the agent reports its end); TERMINATED or FAILED under a live agent -> the attempt is
      lost (``wire.outcome.from_machine``: recovered or failed by the recovery rules).
    * While the agent does not answer, the provider is asked at every look: a machine it
      reports gone (preempted, terminated, failed) is the attempt lost.
    * An agent that answers for the attempt but started at another time than the one that
      answered before is not the attempt's agent: the node was replaced under it (a container
      cloud restarts a container on another machine at the same address, and the new agent
      begins the attempt again from the plan it boots with). The attempt is lost as preempted
      at once, whatever the provider says yet, and the stand-in is torn down with it.

    The run is looked at again no later than its next provider check (``Observation.soon``),
    whatever its quiet interval, so a notice is acted on within ``provider_poll_s``. A run
    whose agent rings the controller's bell (``control.bell``) is checked every
    ``quiet_poll_s`` instead: a notice the agent sees is rung at once, and a machine killed
    under it falls silent, which brings the run's next look at once. Where its provider lists
    every machine in one call (``SupportsStatusListing``), a belled run's machine comes from
    that listing instead, at every look, and a listing (taken at most every
    ``provider_poll_s`` for all the runs) that shows the machine changed makes the run due
    (``control.census``).

    Reset rules: the poll timer and the "stop asked" mark belong to one attempt (a new
    attempt starts both afresh); they live in the controller's memory, so a restarted
    controller polls at once and may ask a preempted agent to stop once more (harmless: the
    agent is already stopping).
    """

    name = "preemption"

    def check(self, ctx: Context, run: RunRecord, spec: JobSpec, obs: Observation) -> Step | None:
        if obs.resource is None:
            return None  # no machine (or its row vanished): the RUNNING handler says so
        if not obs.agent_answers():
            return self._silent_agent(ctx, run, obs)
        replaced = _replaced(ctx, run, obs)
        if replaced:
            return finishing.attempt_lost(ctx, run, InstanceState.PREEMPTED, replaced)
        notes = ctx.notes(run.id).attempt(run.attempt)
        belled = ctx.belled(run)
        # a belled run on a provider that lists its machines: the machine from the shared
        # listing at every look (the census makes the run due when a listing shows it changed)
        listed = belled and ctx.census.lists(ctx.provider(obs.resource.provider))
        if not listed:
            now = ctx.clock()
            every = ctx.settings.provider_poll_s
            if belled:  # its agent rings a notice at once, and falls silent if killed
                every = max(every, ctx.settings.quiet_poll_s)
            last = notes.provider_polled_at
            if last is not None and (now - last).total_seconds() < every:
                obs.soon(every - (now - last).total_seconds())  # the machine's next check
                return None
            notes.provider_polled_at = now
            obs.soon(every)
        try:
            st = obs.machine(listed=listed)
        except ProviderError as e:
            log.info("run %s: provider status failed: %s", run.id, e.message)
            return None
        if st.state == InstanceState.PREEMPTED:
            if obs.status().terminal or notes.preemption_stop_asked:
                return None
            notes.preemption_stop_asked = True
            provider = obs.resource.provider
            why = f"{provider} is preempting the machine: stopping gracefully"
            return AskStop(StopCause.PREEMPTION, why, Note("instance.preempting", why))
        if st.state in (InstanceState.TERMINATED, InstanceState.FAILED):
            return finishing.attempt_lost(ctx, run, st.state, st.detail, st.limit)
        return None

    def _silent_agent(self, ctx: Context, run: RunRecord, obs: Observation) -> Step | None:
        try:
            st = obs.machine()
        except CorralError:
            return None  # the health watcher says that both are silent
        if st.state.gone:
            return finishing.attempt_lost(ctx, run, st.state, st.detail, st.limit)
        return None


def _replaced(ctx: Context, run: RunRecord, obs: Observation) -> str | None:
    """Why the agent answering now is not the one that answered before for this attempt
    (another start time than the status last stored), or None."""
    stored = sync.poll_state(ctx, run).stored or {}
    before, now = stored.get("started_at"), obs.status().started_at
    if not before or not now or before == now:
        return None
    return (
        f"the node was replaced: a new agent (started {now}) answers for attempt "
        f"{run.attempt}, begun by the agent started {before}"
    )
