"""What every reconcile step needs: the store, the providers, the clock, settings."""

from __future__ import annotations

import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from corral import paths
from corral.control.census import Census
from corral.control.notes import RunNotes
from corral.control.tokens import agent_token
from corral.errors import BadInput, ControllerError
from corral.providers.base import Provider
from corral.spec import JobSpec
from corral.store.records import RunRecord
from corral.store.store import Store

if TYPE_CHECKING:
    from corral.control.agent_client import AgentClient, AgentPool

log = logging.getLogger("corral.controller")

#: builds an agent API client from (endpoint, token)
ClientFactory = Callable[[str, str], "AgentClient"]


def interval_env(name: str, environ: Mapping[str, str] | None = None) -> float | None:
    """The environment variable ``name`` as an interval in seconds, above 0 and at most an
    hour (None: unset or empty); ControllerError naming the variable otherwise."""
    raw = (os.environ if environ is None else environ).get(name, "").strip()
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 < value <= 3600:
        raise ControllerError(f"{name}={raw!r}: expected seconds above 0 and at most 3600")
    return value


def utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass
class Settings:
    #: how often the loop reads the active runs from the store; and how soon a run is
    #: looked at again while something happens (PROVISIONING, STOPPING, a RUNNING run whose
    #: last look brought events, log bytes or a new status)
    tick_seconds: float = 0.5
    #: a quiet RUNNING run is looked at at least this often (the interval doubles from
    #: ``tick_seconds`` after each quiet look, up to this); a budget cap, a deadline, an idle
    #: limit or the provider's next check coming sooner shortens it
    poll_interval_s: float = 2.0
    #: a quiet RUNNING run whose agent rings the controller's bell (``control.bell``: any
    #: change is rung at once) is looked at at least this often (``CORRAL_QUIET_POLL_INTERVAL``);
    #: a run someone follows (``corral logs -f``, ``status --watch``) keeps ``poll_interval_s``
    quiet_poll_s: float = 30.0
    #: a run waiting for capacity tries again this often (and at once when a run of this
    #: controller ends)
    wait_retry_s: float = 2.0
    #: threads that look at PROVISIONING and RUNNING runs (agent and provider status)
    poll_workers: int = 16
    #: threads that launch, tear down and carry out requests (slow cloud calls)
    ops_workers: int = 8
    #: a gang's nodes other than its head are launched at the same time, this many provider
    #: calls at most at once (``control.gangs``: a thread each, for the look that launches them)
    gang_launch_workers: int = 16
    #: how often each provider sweeps for machines no run knows (leaks)
    sweep_interval_s: float = 300.0
    #: how often the provider is asked about a machine whose agent answers (the preemption
    #: watcher: notices and machines killed under a live agent)
    provider_poll_s: float = 5.0
    #: an agent that does not answer for this long, while its provider says the machine runs,
    #: is reported (event) but never "recovered": a slow agent is not a dead one.
    unreachable_grace_s: float = 60.0
    #: an attempt whose agent is not ready after this long is failed.
    provision_timeout_s: float = 600.0
    #: a gang (a multi-node attempt) not every node of which is ready this long after the
    #: attempt began is released, saying what was missing (``CORRAL_GANG_TIMEOUT``; never
    #: more than ``provision_timeout_s``)
    gang_timeout_s: float = 600.0
    #: a gang that lost nodes keeps its survivors and replaces the lost ones where its provider
    #: allows (``CORRAL_GANG_REPAIR=off``: the whole gang is relaunched, as its peers do)
    gang_repair: bool = True
    #: a gang's ranks ended in failure while a node's agent does not answer and its provider
    #: has no verdict yet (a machine gone without notice: the other ranks fail at once, the
    #: provider says so later): the failure waits this long for the node's verdict (a lost
    #: node makes it a preemption, recovered), then is taken as the job's
    node_verdict_s: float = 180.0
    #: while an attempt boots, its machine's console log is read this often (the first time
    #: this long after the boot was first seen) for the node's "cannot boot corral"
    #: (``control.machine_log``), which fails the run at once
    boot_log_check_s: float = 30.0
    #: after a graceful stop request, wait this long beyond the grace period before teardown.
    stop_margin_s: float = 30.0
    #: a steady run's cost is worked out (and written when it moved) at most this often; a
    #: change of the agent's status works it out at once
    cost_update_s: float = 30.0
    #: bytes of log copied per stage per tick (the rest follows on the next tick).
    log_chunk: int = 1024 * 1024
    #: an ``intent`` row younger than this may belong to a launch still in flight in another
    #: process (the CLI launches first attempts itself): it is neither relaunched nor closed.
    intent_grace_s: float = 30.0
    #: what a graceful budget stop is expected to take (checkpoint + teardown): the budget
    #: watcher stops this much early so the final cost lands on the cap, not above it.
    budget_stop_estimate_s: float = 10.0
    #: an agent whose job has ended exits (and powers its machine off, on a cloud) when no
    #: controller has called for this long: a lost controller never leaves a paid machine on.
    agent_controller_timeout_s: float = 1800.0
    #: a GPU at or above this utilisation counts as work for the idle watcher.
    idle_gpu_threshold_pct: float = 5.0
    #: with several controllers on one store, how long a controller's lease on a run lasts
    #: (renewed at half); a controller that dies loses its runs to another after this long
    lease_ttl_s: float = 20.0
    #: parsed specs kept in memory, by spec hash (the least recently used goes first)
    spec_cache_size: int = 4096
    #: each GPU (this machine's, each run's node's) is recorded in the store's GPU history at
    #: most this often (``CORRAL_GPU_HISTORY_EVERY``; None: no history) ...
    gpu_history_every_s: float | None = 60.0
    #: ... and its readings are kept this long (``CORRAL_GPU_HISTORY_KEEP``)
    gpu_history_keep_s: float = 7 * 86400.0


def _new_pool() -> AgentPool:
    # lazy on purpose (not a cycle): the agent client pulls in httpx, and the launch path of
    # the CLI never talks to an agent and should not pay for the import
    from corral.control.agent_client import AgentPool

    return AgentPool()


@dataclass
class Context:
    store: Store
    providers: dict[str, Provider]
    clock: Callable[[], datetime] = utcnow
    settings: Settings = field(default_factory=Settings)
    home: Path = field(default_factory=paths.home)
    #: builds the agent API client (default: a client of the context's one shared
    #: connection pool, httpx imported on first use)
    client_factory: ClientFactory | None = None
    #: run id -> what the controller notes of the run in memory (:mod:`corral.control.notes`;
    #: :meth:`forget` drops a finished run's)
    run_notes: dict[str, RunNotes] = field(default_factory=dict)
    #: per provider, the last seconds from a stop request to the confirmed teardown
    #: (:mod:`corral.control.cost`; read from its file on first use)
    stop_times: dict[str, list[float]] | None = None
    #: code bundles being sent to agents: the one ``corral.control.shipping.Uploads``, made on
    #: first use (typed loosely: shipping imports this module)
    uploads: Any = None
    #: the spending caps' states, shared by the workers (``corral.control.spend.CapBook``,
    #: made on first use; typed loosely: spend imports the store only)
    cap_book: Any = None
    #: run id -> (spec hash, the validated JobSpec), least recently used first (bounded:
    #: ``Settings.spec_cache_size``)
    _spec_cache: OrderedDict[str, tuple[str, JobSpec]] = field(default_factory=OrderedDict)
    _spec_lock: threading.Lock = field(default_factory=threading.Lock)
    _clients: dict[tuple[str, str], AgentClient] = field(default_factory=dict)
    #: the one connection pool every default agent client borrows (made on first use)
    pool: AgentPool | None = None
    #: run id -> what the controller holds of its current attempt's copy (the agent's event
    #: cursor, log offsets, the status last stored: ``control.sync.PollState``)
    polls: dict[str, Any] = field(default_factory=dict)
    #: secrets this process already resolved for the launch it is making (the CLI's submit
    #: resolves a spec's ``secrets:`` once and hands them to the first attempt); a name not
    #: here is resolved at launch. Empty in the controller, which resolves at every launch
    #: (a secret changed between attempts is the new one)
    secrets: dict[str, str] = field(default_factory=dict, repr=False)
    #: the controller's bell while it serves (``corral.control.bell.Bell``; typed loosely:
    #: that module imports this one); None: no bell, every run is pulled at its usual pace
    bell: Any = None
    #: one listing per provider answers the machine checks of the belled runs
    #: (``control.census``)
    census: Census = field(default_factory=Census)

    def provider(self, name: str) -> Provider:
        try:
            return self.providers[name]
        except KeyError:
            raise BadInput(f"provider {name!r} is not enabled on this controller") from None

    def spec(self, run: RunRecord) -> JobSpec:
        """The run's JobSpec, validated once per spec hash and kept (at most
        ``Settings.spec_cache_size`` runs', the least recently used out). A run listed without
        its spec (``RunRecord.spec`` None) has it read from the store only on a miss."""
        with self._spec_lock:
            cached = self._spec_cache.get(run.id)
            if cached is not None and cached[0] == run.spec_hash:
                self._spec_cache.move_to_end(run.id)
                return cached[1]
        raw = run.spec if run.spec is not None else self.store.get_run(run.id).spec
        spec = JobSpec.model_validate(raw)
        with self._spec_lock:
            self._spec_cache[run.id] = (run.spec_hash, spec)
            self._spec_cache.move_to_end(run.id)
            while len(self._spec_cache) > max(1, self.settings.spec_cache_size):
                self._spec_cache.popitem(last=False)
        return spec

    def agent(self, run_id: str, attempt: int, endpoint: str) -> AgentClient:
        key = (f"{run_id}:{attempt}", endpoint)
        client = self._clients.get(key)
        if client is None:
            token = agent_token(run_id, attempt, self.home)
            if self.client_factory is not None:
                client = self.client_factory(endpoint, token)
            else:
                with self._spec_lock:
                    if self.pool is None or self.pool.closed:
                        self.pool = _new_pool()
                    pool = self.pool
                client = pool.client(endpoint, token)
            self._clients[key] = client
        if self.bell is not None:  # the agent rings it when something happens
            ring_at = getattr(client, "bell_at", None)  # (a test's stand-in client may not)
            if ring_at is not None:
                ring_at(self.bell.header())
        return client

    def belled(self, run: RunRecord) -> bool:
        """Whether ``run``'s current attempt rings this controller's bell (so a quiet run
        needs no frequent look: a change is rung at once)."""
        return self.bell is not None and self.bell.belled(run.id, run.attempt)

    def remember_spec(self, run: RunRecord, spec: JobSpec) -> None:
        """Keep ``spec`` as ``run``'s validated JobSpec (the process that parsed it hands it
        on instead of having it validated again from the store's copy)."""
        with self._spec_lock:
            self._spec_cache[run.id] = (run.spec_hash, spec)
            self._spec_cache.move_to_end(run.id)

    def resolve_secrets(self, names: list[str]) -> dict[str, str]:
        """``{name: value}`` for ``names``: those this process already resolved
        (:attr:`secrets`), the others from the secret store or the environment (BadInput
        naming every missing one)."""
        from corral.secrets import resolve_many

        found = {n: self.secrets[n] for n in names if n in self.secrets}
        rest = [n for n in names if n not in found]
        return {**found, **resolve_many(rest)} if rest else found

    def notes(self, run_id: str) -> RunNotes:
        """What the controller notes of ``run_id`` in memory (made on first use)."""
        found = self.run_notes.get(run_id)
        if found is None:
            found = self.run_notes.setdefault(run_id, RunNotes())
        return found

    def forget(self, run_id: str) -> None:
        """Drop what is kept for a finished run (its clients are closed; the shared connection
        pool stays open for the other runs)."""
        with self._spec_lock:
            self._spec_cache.pop(run_id, None)
        self.polls.pop(run_id, None)
        # list(d) copies without letting another thread in: runs are polled concurrently
        for key in [k for k in list(self._clients) if k[0].startswith(run_id + ":")]:
            client = self._clients.pop(key, None)
            if client is not None:
                client.close()
        self.run_notes.pop(run_id, None)
        self.census.forget(run_id)

    def close(self) -> None:
        """Close every agent client and the shared connection pool (a later :meth:`agent`
        opens a new pool)."""
        for client in list(self._clients.values()):
            client.close()
        self._clients.clear()
        if self.pool is not None:
            self.pool.close()
            self.pool = None
