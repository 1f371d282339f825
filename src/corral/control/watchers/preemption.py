"""The preemption watcher."""

from __future__ import annotations

from datetime import datetime

from corral.control import finishing
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
    * While the agent does not answer, the provider is asked every tick: a machine it
      reports gone (preempted, terminated, failed) is the attempt lost.

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
        key = f"{run.id}:{run.attempt}:provider-polled"
        now = ctx.clock()
        last: datetime | None = ctx.memo.get(key)
        if last is not None and (now - last).total_seconds() < ctx.settings.provider_poll_s:
            return None
        ctx.memo[key] = now
        try:
            st = obs.machine()
        except ProviderError as e:
            log.info("run %s: provider status failed: %s", run.id, e.message)
            return None
        if st.state == InstanceState.PREEMPTED:
            if obs.status().terminal or ctx.memo.get(key + ":stop"):
                return None
            ctx.memo[key + ":stop"] = True
            provider = obs.resource.provider
            why = f"{provider} is preempting the machine: stopping gracefully"
            return AskStop(StopCause.PREEMPTION, why, Note("instance.preempting", why))
        if st.state in (InstanceState.TERMINATED, InstanceState.FAILED):
            return finishing.attempt_lost(ctx, run, st.state, st.detail)
        return None

    def _silent_agent(self, ctx: Context, run: RunRecord, obs: Observation) -> Step | None:
        try:
            st = obs.machine()
        except CorralError:
            return None  # the health watcher says that both are silent
        if st.state.gone:
            return finishing.attempt_lost(ctx, run, st.state, st.detail)
        return None
