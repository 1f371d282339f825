"""The health watcher."""

from __future__ import annotations

from corral.control import machine_log, transitions
from corral.control.context import Context, log
from corral.control.observe import Observation
from corral.control.transitions import Note, Step
from corral.control.watchers.base import Watcher
from corral.errors import CorralError, WireVersionMismatch
from corral.spec import JobSpec
from corral.store.records import RunRecord
from corral.store.states import RunState


class HealthWatcher(Watcher):
    """Whether the attempt's agent is there.

    * PROVISIONING: an attempt whose agent is not ready ``Settings.provision_timeout_s``
      after the attempt started (its machine not gone) fails the run.
    * RUNNING: an agent that does not answer while the provider says the machine runs is
      noted (``agent.unreachable``) once it has been silent for
      ``Settings.unreachable_grace_s``, and never "recovered": a slow agent is not a dead one
      (a machine the provider calls gone is the preemption watcher's).

    Reset rules: the provision timer is the attempt's ``started_at`` (a relaunch of the
    attempt restarts it). The silence timer starts at the first unanswered tick and resets
    when the agent answers again (with an ``agent.reachable`` event) and for each new attempt;
    a new silence is noted again.
    It lives in the controller's memory: a restarted controller starts it afresh.
    """

    name = "health"
    states = frozenset({RunState.PROVISIONING, RunState.RUNNING})

    def check(self, ctx: Context, run: RunRecord, spec: JobSpec, obs: Observation) -> Step | None:
        if obs.resource is None:
            return None
        if run.state == RunState.PROVISIONING:
            return self._provision_timeout(ctx, run, obs)
        return self._silence(ctx, run, obs)

    def _provision_timeout(self, ctx: Context, run: RunRecord, obs: Observation) -> Step | None:
        attempt = ctx.store.get_attempt(run.id, run.attempt)
        if attempt.started_at is None:
            return None
        waited = (ctx.clock() - attempt.started_at).total_seconds()
        if waited <= ctx.settings.provision_timeout_s:
            return None
        try:
            st = obs.machine()
            if st.state.gone or obs.ready():
                return None  # the PROVISIONING handler moves it on
        except WireVersionMismatch:
            return None  # the PROVISIONING handler fails it, saying why
        except CorralError as e:
            log.warning("run %s: provider status failed: %s", run.id, e.message)
            return None
        said = machine_log.keep(ctx, run, obs.resource)  # its last words, before the teardown
        why = machine_log.cannot_boot(said or "")
        if why is not None:  # said once on its console: no retry of that image can help
            return machine_log.failed(why)
        return transitions.finish(
            RunState.FAILED,
            f"the agent did not become ready within {ctx.settings.provision_timeout_s:.0f}s "
            f"({st.detail or st.state.value})",
            graceful=False,
        )

    def _silence(self, ctx: Context, run: RunRecord, obs: Observation) -> Step | None:
        notes = ctx.notes(run.id).attempt(run.attempt)
        if obs.agent_answers():
            was_silent = notes.unreachable_since is not None
            notes.unreachable_since, notes.unreachable_noted = None, False
            return Note("agent.reachable", "agent answers again") if was_silent else None
        try:
            st = obs.machine()
        except CorralError as e:
            log.warning("run %s: agent and provider both unreachable: %s", run.id, e.message)
            return None
        if st.state.gone:
            return None  # the preemption watcher ends the attempt
        if notes.unreachable_since is None:
            notes.unreachable_since = ctx.clock()
        silent = (ctx.clock() - notes.unreachable_since).total_seconds()
        if silent <= ctx.settings.unreachable_grace_s or notes.unreachable_noted:
            return None
        notes.unreachable_noted = True
        provider = obs.resource.provider if obs.resource else run.provider
        return Note(
            "agent.unreachable",
            f"agent has not answered for {ctx.settings.unreachable_grace_s:.0f}s "
            f"but {provider} reports the machine {st.state.value}: waiting",
        )
