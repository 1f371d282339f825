"""A gang's nodes other than its head are launched at the same time (``control.gangs``): with
a provider whose every launch takes a second, a gang of four is launched in about two seconds
(the head, then its three other nodes together), not four; every node's intent is recorded
before any of their calls, so a process that dies among them leaves intents only, and the
next look launches each again on its own key, never a second machine."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest

from corral.control import gangs
from corral.control.bell import BELL_FILE, Bell, publish, published
from corral.control.context import Context, Settings
from corral.control.controller import Controller, start_attempt
from corral.control.gangs import member_key
from corral.control.lock import ControllerLock
from corral.providers.base import Bootstrap, Instance, Offer
from corral.providers.fake.provider import FakeProvider
from corral.store import Store
from corral.wire.bell import ENV_AGENT_BELL
from support.waiting import wait_until

from .helpers import submit, write_spec

#: how long each launch call takes (the provider's API answering)
CALL_S = 1.0

CLOUD = {
    "offers": [
        {"id": "cpu", "region": "r1", "gpu_count": 0, "cpus": 2, "memory_gb": 4,
         "on_demand_price": 1.0, "capacity": 8},
    ],
    "launch_delay_s": 600,  # no machine boots here: only the launches are looked at
}  # fmt: skip


class Died(BaseException):
    """The launching process dies in the middle of a provider call (not a provider error)."""


class SlowCloud(FakeProvider):
    """The simulated cloud behind an API whose launch call takes :data:`CALL_S`; records each
    call's (key, start, end), and dies in the call for ``dies_on`` (once)."""

    def __init__(self, home: Path) -> None:
        super().__init__(CLOUD, home=home, timers=False)
        self.calls: list[tuple[str, float, float]] = []
        self.bootstraps: dict[str, Bootstrap] = {}
        self.dies_on: str | None = None
        self._lock = threading.Lock()

    def launch(self, offer: Offer, bootstrap: Bootstrap, key: str) -> Instance:
        began = time.monotonic()
        time.sleep(CALL_S)
        if key == self.dies_on:
            self.dies_on = None
            raise Died(key)
        instance = super().launch(offer, bootstrap, key)
        with self._lock:
            self.calls.append((key, began, time.monotonic()))
            self.bootstraps[key] = bootstrap
        return instance


def _gang(tmp_path: Path, nodes: int) -> tuple[Context, SlowCloud, str]:
    spec = write_spec(
        tmp_path,
        f"""
        name: gang
        resources: {{nodes: {nodes}, providers: [fake]}}
        run: "true"
        """,
    )
    run_id = submit(spec)
    cloud = SlowCloud(tmp_path / "cloud")
    # intent_grace_s=0: a look plays the part of a controller restarted long after a crash
    ctx = Context(
        store=Store.open(), providers={"fake": cloud}, settings=Settings(intent_grace_s=0)
    )
    return ctx, cloud, run_id


def _machines(cloud: SlowCloud) -> list[str]:
    return sorted(r.key for r in cloud.layout.records())


def test_a_gang_s_other_nodes_are_launched_together_once_its_head_has_an_address(
    tmp_path: Path,
) -> None:
    ctx, cloud, run_id = _gang(tmp_path, 4)
    began = time.monotonic()
    start_attempt(ctx, ctx.store.get_run(run_id))
    took = time.monotonic() - began
    head = f"{run_id}-a1"
    members = [member_key(head, k) for k in (1, 2, 3)]
    assert cloud.calls[0][0] == head
    assert sorted(c[0] for c in cloud.calls[1:]) == members
    # every member's call began before any of them ended, and after the head's had
    starts = [c[1] for c in cloud.calls[1:]]
    ends = [c[2] for c in cloud.calls[1:]]
    assert max(starts) < min(ends), cloud.calls
    assert min(starts) >= cloud.calls[0][2]
    assert took < 4 * CALL_S, took  # one after another: 4 calls and more
    rows = {r.data["rank"]: r for r in ctx.store.resources(run_id=run_id)}
    assert sorted(rows) == [0, 1, 2, 3]
    assert all(r.state == "active" and r.instance_id for r in rows.values())
    assert [rows[k].key for k in (1, 2, 3)] == members
    launched = ctx.store.events(run_id, types=["instance.launched"])
    assert sorted(e.data["node"] for e in launched) == [0, 1, 2, 3]
    assert ctx.store.get_run(run_id).state == "PROVISIONING"
    assert _machines(cloud) == sorted([head, *members])


@pytest.mark.parametrize("dies", [1, 3])
def test_a_process_dying_among_the_launches_leaves_intents_launched_again_on_their_keys(
    tmp_path: Path, dies: int
) -> None:
    ctx, cloud, run_id = _gang(tmp_path, 4)
    head = f"{run_id}-a1"
    members = [member_key(head, k) for k in (1, 2, 3)]
    cloud.dies_on = members[dies - 1]
    with pytest.raises(Died):
        start_attempt(ctx, ctx.store.get_run(run_id))
    # every member's intent was written before the calls: the one that died is still one,
    # its siblings launched meanwhile (their calls were already out)
    rows = {r.key: r for r in ctx.store.resources(run_id=run_id)}
    assert sorted(rows) == sorted([head, *members])
    assert rows[members[dies - 1]].state == "intent"
    assert all(rows[k].state == "active" for k in members if k != members[dies - 1])
    assert _machines(cloud) == sorted(k for k in [head, *members] if k != members[dies - 1])
    # a lost answer on a sibling too: launched, but the process died before recording it
    other = members[dies % 3]
    first = rows[other].instance_id
    ctx.store.update_resource(other, state="intent")
    cloud.calls.clear()
    Controller(ctx).tick()  # the next look (a restarted controller)
    assert sorted(c[0] for c in cloud.calls) == sorted([members[dies - 1], other])
    rows = {r.key: r for r in ctx.store.resources(run_id=run_id)}
    assert all(rows[k].state == "active" for k in [head, *members])
    assert rows[other].instance_id == first  # the same machine, adopted on its key
    assert _machines(cloud) == sorted([head, *members])  # four machines, none twice
    assert ctx.store.get_run(run_id).state == "PROVISIONING"


class MeetingCloud(SlowCloud):
    """A :class:`SlowCloud` whose gang address is given to two launchers at once: each has
    read the gang's rows (no node but the head yet) before either writes an intent."""

    def __init__(self, home: Path) -> None:
        super().__init__(home)
        self.meet = threading.Barrier(2, timeout=20)

    def gang_address(self, head: Instance) -> str:
        self.meet.wait()
        return super().gang_address(head)


def test_a_cli_and_a_controller_launching_a_gang_s_nodes_at_once_launch_each_node_once(
    tmp_path: Path,
) -> None:
    """``corral launch`` launches the first attempt (the head, then its other nodes) while a
    running controller's gang watcher finds the head launched and its other nodes without a
    row: one provider call and one ``instance.launched`` per node, whoever makes it."""
    _, _, run_id = _gang(tmp_path, 4)
    cloud = MeetingCloud(tmp_path / "cloud2")
    cli = Context(store=Store.open(), providers={"fake": cloud})
    controller = Context(store=Store.open(), providers={"fake": cloud})
    failed: list[BaseException] = []

    def launch() -> None:
        try:
            start_attempt(cli, cli.store.get_run(run_id))
        except BaseException as e:  # reported below
            failed.append(e)

    first = threading.Thread(target=launch)
    first.start()
    head = f"{run_id}-a1"
    wait_until(
        lambda: any(r.state == "active" for r in controller.store.resources(run_id=run_id)),
        30,
        0.01,
        "the head launched",
    )
    assert gangs.launch_members(controller, controller.store.get_run(run_id), 1) is None
    first.join(30)
    assert not failed, failed
    members = [member_key(head, k) for k in (1, 2, 3)]
    assert sorted(c[0] for c in cloud.calls) == sorted([head, *members]), cloud.calls
    launched = controller.store.events(run_id, types=["instance.launched"])
    assert sorted(e.data["node"] for e in launched) == [0, 1, 2, 3]
    rows = {r.key: r for r in controller.store.resources(run_id=run_id)}
    assert sorted(rows) == sorted([head, *members])
    assert all(r.state == "active" for r in rows.values())


def test_every_node_a_controller_launches_is_told_its_bell(tmp_path: Path) -> None:
    """Each node's agent rings the launching controller's bell once it is up
    (``CORRAL_AGENT_BELL``), so the gang's last node ready is heard at once."""
    ctx, cloud, run_id = _gang(tmp_path, 3)
    ctx.bell = Bell(tmp_path, lambda _: None).start()
    try:
        start_attempt(ctx, ctx.store.get_run(run_id))
        assert len(cloud.bootstraps) == 3
        for boot in cloud.bootstraps.values():
            assert boot.env[ENV_AGENT_BELL] == ctx.bell.header()
            assert ENV_AGENT_BELL not in boot.env.get("CORRAL_SECRET_NAMES", "")
    finally:
        ctx.bell.close()


def test_a_launch_by_another_process_names_the_bell_of_the_controller_serving_the_home(
    tmp_path: Path,
) -> None:
    """``corral launch`` launches the whole gang itself (no bell of its own): its agents ring
    the bell of the controller that serves the home (``controller.bell.json``), and no bell
    that a controller gone left behind."""
    ctx, cloud, run_id = _gang(tmp_path, 2)
    assert ctx.bell is None
    publish(ctx.home, "127.0.0.1:5000")
    assert published(ctx.home) is None  # no controller holds the home's lock: nobody's bell
    lock = ControllerLock(ctx.home)
    assert lock.acquire()  # this process serves the home, as the controller would
    try:
        assert published(ctx.home) == "127.0.0.1:5000"
        gone = {"pid": os.getpid() + 1, "bell": "127.0.0.1:4999"}  # another controller's
        (ctx.home / BELL_FILE).write_text(json.dumps(gone))
        assert published(ctx.home) is None
        publish(ctx.home, "127.0.0.1:5000")
        start_attempt(ctx, ctx.store.get_run(run_id))
    finally:
        lock.release()
    assert len(cloud.bootstraps) == 2
    assert all(b.env[ENV_AGENT_BELL] == "127.0.0.1:5000" for b in cloud.bootstraps.values())
    assert published(ctx.home) is None  # released: nobody's
    (ctx.home / BELL_FILE).write_text("not json")
    assert published(ctx.home) is None
