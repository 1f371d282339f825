"""A gang repaired around its kept head (``control.gangs``): the head's agent, a real agent
process on loopback, takes the next attempt through ``POST /attempt`` while the controller
loses the answer (the agent took it, the controller's call timed out). The controller asks
again until the node serves the attempt, and then it is handed over: noted, said once
(``gang.handed_over``) however many looks or controllers saw it, and no token in what the
controller logged. A kept node other than the head counts as one of the gang's ready nodes
only once handed. The kept head's two attempts are stored apart: each its own events, once,
and its own stage log output."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from corral.control import gangs, launch_node, sync, transitions
from corral.control.agent_client import AgentClient, LeanTransport, TransportError
from corral.control.context import Context, Settings
from corral.control.controller import start_attempt
from corral.control.observe import Observation
from corral.control.resources import rank_of
from corral.control.tokens import agent_token
from corral.control.transitions import Transition
from corral.control.watchers.gang import GangWatcher
from corral.errors import AgentError, WireVersionMismatch
from corral.providers.base import NodeProfile, Offer
from corral.providers.fake.provider import FakeProvider
from corral.store import Store
from corral.store.records import RunRecord
from corral.store.states import RunState
from corral.wire import WIRE_VERSION
from support.waiting import wait_until

from .helpers import submit, write_spec

CLOUD = {
    "offers": [
        {"id": "cpu", "region": "r1", "gpu_count": 0, "cpus": 2, "memory_gb": 4,
         "on_demand_price": 1.0, "capacity": 8},
    ],
    "launch_delay_s": 600,  # no machine boots: the head's agent is the test's own process
}  # fmt: skip


class InPlaceCloud(FakeProvider):
    """The simulated cloud, its nodes running the job in place (no code shipped): the head's
    agent is a process the test starts with the plan the controller built."""

    def node_profile(self, offer: Offer, run_id: str) -> NodeProfile:
        return NodeProfile()


class LosesAnAnswer:
    """The controller's connections to the agents, which lose the answer to the first
    ``POST /attempt``: the request reaches the agent and is acted on, the caller times out."""

    def __init__(self) -> None:
        self.inner = LeanTransport()
        self.lost: list[int] = []  # the status of each answer lost

    def request(
        self,
        method: str,
        url: str,
        headers: dict[str, str],
        timeout: float,
        params: dict[str, Any] | None = None,
        body: Any = None,
        content: bytes | None = None,
    ) -> tuple[int, bytes]:
        status, data = self.inner.request(method, url, headers, timeout, params, body, content)
        if method == "POST" and url.endswith("/attempt") and not self.lost:
            self.lost.append(status)
            raise TransportError("timed out", timeout=True)
        return status, data

    def close(self) -> None:
        self.inner.close()

    @property
    def is_closed(self) -> bool:
        return self.inner.is_closed


def _context(cloud: InPlaceCloud, transport: LosesAnAnswer) -> Context:
    return Context(
        store=Store.open(),
        providers={"fake": cloud},
        settings=Settings(intent_grace_s=0),
        client_factory=lambda endpoint, token: AgentClient(endpoint, token, client=transport),
    )


def _head_agent(ctx: Context, run: RunRecord, tmp_path: Path) -> tuple[subprocess.Popen, str]:
    """The head's agent for attempt 1, on loopback, with the plan and token the controller
    gives it; its URL once it serves."""
    (head,) = [r for r in ctx.store.resources(run_id=run.id) if rank_of(r) == 0]
    offer = Offer.model_validate(head.data["offer"])
    role = gangs.head_role(ctx, run, offer)
    assert role is not None
    boot = launch_node.bootstrap(ctx, run, 1, offer, role)
    plan = tmp_path / "plan.json"
    boot.plan.dump(plan)
    state = tmp_path / "node0"
    proc = subprocess.Popen(
        [sys.executable, "-m", "corral.agent", "--plan", str(plan), "--state-dir", str(state)],
        env={
            **os.environ,
            "CORRAL_AGENT_TOKEN": boot.token,
            "CORRAL_GANG_RANK": "0",
            "CORRAL_GANG_MASTER_ADDR": "127.0.0.1",
            "CORRAL_GANG_MASTER_PORT": str(role.master_port),
        },
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    info = state / "agent.json"
    wait_until(info.exists, 20, 0.02, "the head's agent.json")
    return proc, str(json.loads(info.read_text())["url"])


def _serves(url: str, token: str) -> bool:
    """Whether the agent at ``url`` takes ``token`` (asked on a connection of its own)."""
    try:
        answer = httpx.get(url + "/status", headers={"Authorization": f"Bearer {token}"})
    except httpx.HTTPError:
        return False
    return answer.status_code == 200


def _looks(ctx: Context, run_id: str, until: float = 20.0) -> int:
    """Look at the gang as the gang watcher does until node 0 is handed; the looks taken."""
    deadline = time.monotonic() + until
    looks = 0
    while 0 not in ctx.notes(run_id).attempt(2).handed:
        assert time.monotonic() < deadline, "node 0 was never handed attempt 2"
        looks += 1
        gangs.launch_members(ctx, ctx.store.get_run(run_id), 2)
        time.sleep(0.1)
    return looks


def test_a_kept_head_whose_hand_over_answer_was_lost_is_handed_once_it_serves(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="corral")
    spec = write_spec(
        tmp_path,
        """
        name: gang
        resources: {nodes: 2, providers: [fake]}
        run: "true"
        """,
    )
    run_id = submit(spec)
    cloud = InPlaceCloud(CLOUD, home=tmp_path / "cloud", timers=False)
    transport = LosesAnAnswer()
    ctx = _context(cloud, transport)
    start_attempt(ctx, ctx.store.get_run(run_id))  # attempt 1: two machines, none booting
    run = ctx.store.get_run(run_id)
    proc, url = _head_agent(ctx, run, tmp_path)
    try:
        head = next(r for r in ctx.store.resources(run_id=run_id) if rank_of(r) == 0)
        assert head.instance is not None
        ctx.store.update_resource(head.key, instance={**head.instance, "endpoint": url})
        old = ctx.agent(run_id, 1, url)
        old.start_gang()  # its stage runs and ends: attempt 1 is over on the head
        wait_until(lambda: old.status().terminal, 20, 0.05, "attempt 1's end on the head")
        # node 1 lost: the gang is repaired around the head (the controller's RECOVERING)
        run = transitions.apply(ctx, run, Transition(RunState.RECOVERING, "node 1 lost"))
        assert run is not None
        kept = [r for r in ctx.store.resources(run_id=run_id) if r.key == head.key]
        gangs.repair(ctx, run, kept)
        assert transport.lost == [202], "the head took the hand-over; its answer was lost"
        token = agent_token(run_id, 2, ctx.home)
        wait_until(lambda: _serves(url, token), 20, 0.05, "attempt 2 on the head's address")
        # the controller's connection kept from before the switch (the hand-over's) is the
        # first its next call takes: the ended attempt's agent must not answer it (a probe's
        # bare answer there read as "another wire version" failed the run)
        assert ctx.agent(run_id, 2, url).ready() is True
        with pytest.raises(AgentError) as refused:  # the ended attempt's token: refused
            ctx.agent(run_id, 1, url).ready()
        assert not isinstance(refused.value, WireVersionMismatch)
        assert "rejected the controller's token" in str(refused.value)
        _looks(ctx, run_id)
        said = ctx.store.events(run_id, types=["gang.handed_over"])
        assert [(e.attempt, e.data["node"]) for e in said] == [(2, 0)], said
        status = ctx.agent(run_id, 2, url).status()
        assert (status.run_id, status.attempt) == (run_id, 2)
        # a controller restarted since (its notes gone) finds it handed, says it no more
        again = _context(cloud, transport)
        assert _looks(again, run_id) == 1
        assert len(ctx.store.events(run_id, types=["gang.handed_over"])) == 1
        assert proc.poll() is None  # one agent process throughout
    finally:
        proc.kill()
        proc.communicate()
    tokens = [agent_token(run_id, n, ctx.home) for n in (1, 2)]
    assert not [t for t in tokens if t in caplog.text]


class KeptMember:
    """A kept node 1's agent and a new head's, behind the controller's client (no process):
    node 1's first hand-over is refused (its ended attempt was still stopping), the second
    taken - its answer given or lost - and from then node 1 serves attempt 2 at once."""

    def __init__(self, run_id: str, home: Path, lose: bool) -> None:
        self.run_id = run_id
        self.tokens = {n: f"Bearer {agent_token(run_id, n, home)}" for n in (1, 2)}
        self.lose = lose
        self.asked = 0
        self.switched = False

    def answer(self, request: httpx.Request) -> httpx.Response:
        said = request.headers["Authorization"]
        node1 = request.url.host == "node1.test"
        if node1 and request.url.path == "/attempt" and said == self.tokens[1]:
            self.asked += 1
            if self.asked == 1:
                return httpx.Response(409, json={"error": "this attempt still runs: stop it first"})
            self.switched = True
            if self.lose:
                raise httpx.ReadTimeout("the answer was lost", request=request)
            return httpx.Response(202, json={"attempt": 2})
        if said != self.tokens[2] or (node1 and not self.switched):
            return httpx.Response(401, json={"error": "unauthorized"})
        if request.url.path == "/ready":
            return httpx.Response(200, json={"ready": True, "wire_version": WIRE_VERSION})
        if request.url.path == "/status":
            body = {"wire_version": WIRE_VERSION, "run_id": self.run_id, "attempt": 2}
            return httpx.Response(200, json={**body, "phase": "running"})
        return httpx.Response(404, json={"error": "not found"})


@pytest.mark.parametrize("lose", [True, False], ids=["answer-lost", "answer-given"])
def test_a_kept_member_counts_as_ready_only_once_handed_and_said_so(
    tmp_path: Path, lose: bool
) -> None:
    """The head lost, node 1 kept: node 1 is never one of the gang's ready nodes before the
    controller has seen it take attempt 2 (its agent answering for it with its token), so the
    gang never starts without ``gang.handed_over`` said, whether the hand-over's answer came
    back or was lost, and however soon the node switched."""
    spec_path = write_spec(
        tmp_path,
        """
        name: gang
        resources: {nodes: 2, providers: [fake]}
        run: "true"
        """,
    )
    run_id = submit(spec_path)
    cloud = InPlaceCloud(CLOUD, home=tmp_path / "cloud", timers=False)
    agents = KeptMember(run_id, Path(os.environ["CORRAL_HOME"]), lose)
    http = httpx.Client(transport=httpx.MockTransport(agents.answer))
    ctx = Context(
        store=Store.open(),
        providers={"fake": cloud},
        settings=Settings(intent_grace_s=0),
        client_factory=lambda endpoint, token: AgentClient(endpoint, token, client=http),
    )
    start_attempt(ctx, ctx.store.get_run(run_id))
    rows = {rank_of(r): r for r in ctx.store.resources(run_id=run_id)}
    member = rows[1]
    assert member.instance is not None
    ctx.store.update_resource(
        member.key, instance={**member.instance, "endpoint": "http://node1.test:9000"}
    )
    run = transitions.apply(
        ctx, ctx.store.get_run(run_id), Transition(RunState.RECOVERING, "node 0 lost")
    )
    assert run is not None
    kept = [r for r in ctx.store.resources(run_id=run_id) if r.key == member.key]
    gangs.repair(ctx, run, kept)  # node 1 refuses: its ended attempt still stops
    assert agents.asked == 1 and not agents.switched
    head = next(r for r in ctx.store.resources(run_id=run_id) if r.attempt == 2 and rank_of(r) == 0)
    assert head.instance is not None
    ctx.store.update_resource(
        head.key, instance={**head.instance, "endpoint": "http://node0.test:9000"}
    )
    run = ctx.store.get_run(run_id)
    assert run.state == "PROVISIONING" and run.attempt == 2
    watcher = GangWatcher()
    for _ in range(5):
        obs = Observation(ctx, ctx.store.get_run(run_id))
        assert watcher.check(ctx, obs.run, ctx.spec(obs.run), obs) is None
        said = ctx.store.events(run_id, types=["gang.handed_over"])
        if obs.gang_ready:
            break
        assert not said or agents.switched
    assert obs.gang_ready, "the gang never formed"
    assert agents.asked == 2 and agents.switched
    assert [(e.attempt, e.data["node"]) for e in said] == [(2, 1)], said


def _copy_all(ctx: Context, run: RunRecord, client: AgentClient) -> None:
    """Copy the agent's events and stage logs of ``run``'s current attempt into the store and
    the log copies, as the controller's looks do, until the agent holds nothing more."""
    for _ in range(20):
        if not sync.pull(ctx, run, client).more:
            return
    raise AssertionError("the agent always held more")


def test_a_kept_head_s_next_attempt_brings_its_own_events_and_logs_only(tmp_path: Path) -> None:
    """The head kept through a repair runs attempt 2 on the machine (and the state folder)
    that ran attempt 1. What the controller copies of attempt 2 from its cursor's start is
    attempt 2's alone: attempt 1's events are stored once, under attempt 1, and attempt 2's
    stage log (what ``corral logs`` shows for it) does not begin with attempt 1's output."""
    spec = write_spec(
        tmp_path,
        """
        name: gang
        resources: {nodes: 2, providers: [fake]}
        run: "echo said by attempt $CORRAL_ATTEMPT"
        """,
    )
    run_id = submit(spec)
    cloud = InPlaceCloud(CLOUD, home=tmp_path / "cloud", timers=False)
    ctx = _context(cloud, LosesAnAnswer())
    start_attempt(ctx, ctx.store.get_run(run_id))
    run = ctx.store.get_run(run_id)
    proc, url = _head_agent(ctx, run, tmp_path)
    try:
        head = next(r for r in ctx.store.resources(run_id=run_id) if rank_of(r) == 0)
        assert head.instance is not None
        ctx.store.update_resource(head.key, instance={**head.instance, "endpoint": url})
        old = ctx.agent(run_id, 1, url)
        old.start_gang()
        wait_until(lambda: old.status().terminal, 20, 0.05, "attempt 1's end on the head")
        _copy_all(ctx, run, old)  # everything of attempt 1 copied, as before a recovery
        run = transitions.apply(ctx, run, Transition(RunState.RECOVERING, "node 1 lost"))
        assert run is not None
        kept = [r for r in ctx.store.resources(run_id=run_id) if r.key == head.key]
        gangs.repair(ctx, run, kept)
        _looks(ctx, run_id)
        run = ctx.store.get_run(run_id)
        new = ctx.agent(run_id, 2, url)
        new.start_gang()
        wait_until(lambda: new.status().terminal, 20, 0.05, "attempt 2's end on the head")
        _copy_all(ctx, run, new)
    finally:
        proc.kill()
        proc.communicate()
    agent_events = [e for e in ctx.store.events(run_id) if "agent_seq" in e.data]
    for number in (1, 2):
        mine = [e for e in agent_events if e.attempt == number]
        types = [e.type for e in mine]
        assert types.count("attempt.started") == 1, (number, types)
        assert types.count("attempt.finished") == 1, (number, types)
        assert types[0] == "attempt.started", (number, types)
        seqs = [e.data["agent_seq"] for e in mine]
        assert seqs == sorted(set(seqs)), (number, seqs)  # each of its events once
    logs = sorted(sync.logs_dir(run_id, 2).glob("*.log"))
    assert logs, "attempt 2 copied no stage log"
    said = "".join(p.read_text() for p in logs)
    assert "said by attempt 2" in said, said
    assert "said by attempt 1" not in said, said
    first = "".join(p.read_text() for p in sorted(sync.logs_dir(run_id, 1).glob("*.log")))
    assert "said by attempt 1" in first and "said by attempt 2" not in first, first
