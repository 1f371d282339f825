"""One reader for many followers of a run's logs: history then new lines, each once and in
order (also while lines are being written as followers join), stage filters, from_end, the
end after the last lines, the reader gone when its last follower leaves, a follower too slow
dropped."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from corral import paths
from corral.service import log_hub
from corral.service.log_hub import LogHub, Subscription
from corral.store import Store
from support.waiting import wait_until


@pytest.fixture
def store(corral_home: Path):
    s = Store.open()
    yield s
    s.close()


def new_run(store: Store) -> str:
    spec = {"name": "r", "stages": [{"name": "train"}, {"name": "eval"}]}
    return store.create_run(name="r", spec=spec, spec_hash="x", spec_path="x", workdir="/").id


def write(run_id: str, stage: str, *texts: str, attempt: int = 1) -> None:
    d = paths.home() / "runs" / run_id / "logs" / f"a{attempt}"
    d.mkdir(parents=True, exist_ok=True)
    with open(d / f"{stage}.log", "a") as f:
        for text in texts:
            ns = time.time_ns()  # one clock reading: the agent's stamp, with nanoseconds
            stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ns // 10**9))
            f.write(f"{stamp}.{ns % 10**9:09d}Z {text}\n")


class Follower:
    def __init__(self, hub: LogHub, run_id: str, **kw: object):
        self.woken = threading.Event()
        self.texts: list[str] = []
        self.end = None
        self.sub: Subscription = hub.subscribe(run_id, notify=self.woken.set, **kw)  # type: ignore[arg-type]

    def take(self) -> None:
        lines, end = self.sub.drain()
        self.texts += [line.text for line in lines]
        self.end = end or self.end


def test_followers_share_one_reader_and_each_gets_every_line_once(store: Store) -> None:
    hub = LogHub(store, poll_s=0.02)
    rid = new_run(store)
    write(rid, "train", "t1", "t2")
    a = Follower(hub, rid)
    a.take()
    assert a.texts == ["t1", "t2"]
    write(rid, "train", "t3")
    write(rid, "eval", "e1")
    wait_until(lambda: (a.take(), len(a.texts) == 4)[1], 10, 0.01, "a's new lines")
    assert a.texts == ["t1", "t2", "t3", "e1"]

    b = Follower(hub, rid, from_end=True)
    c = Follower(hub, rid, stages=["eval"])
    assert hub.following() == {rid: 3}
    c.take()
    assert c.texts == ["e1"]
    write(rid, "train", "t4")
    write(rid, "eval", "e2")
    store.transition(rid, "SUCCEEDED", "done")
    for f in (a, b, c):
        wait_until(lambda f=f: (f.take(), f.end is not None)[1], 10, 0.01, "the end")
    assert a.texts == ["t1", "t2", "t3", "e1", "t4", "e2"]
    assert b.texts == ["t4", "e2"] and c.texts == ["e1", "e2"]
    assert a.end.state == "SUCCEEDED"
    wait_until(lambda: hub.following() == {}, 10, 0.01, "the reader to stop")


def test_no_line_is_lost_or_doubled_while_lines_are_written_as_followers_join(
    store: Store,
) -> None:
    hub = LogHub(store, poll_s=0.005)
    rid = new_run(store)
    total = 1500
    written = threading.Event()

    def writer() -> None:
        for i in range(total):
            write(rid, "train", f"line {i}")
            if i % 50 == 0:
                time.sleep(0.002)
        written.set()

    t = threading.Thread(target=writer)
    t.start()
    followers = []
    for _ in range(8):
        followers.append(Follower(hub, rid))
        time.sleep(0.01)
    written.wait(30)
    t.join()
    time.sleep(0.05)
    store.transition(rid, "SUCCEEDED", "done")
    expected = [f"line {i}" for i in range(total)]
    for f in followers:
        wait_until(lambda f=f: (f.take(), f.end is not None)[1], 20, 0.01, "the end")
        assert f.texts == expected


def test_the_reader_stops_with_its_last_follower_and_a_slow_follower_is_dropped(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    hub = LogHub(store, poll_s=0.01)
    rid = new_run(store)
    first = Follower(hub, rid)
    first.sub.close()
    wait_until(lambda: hub.following() == {}, 10, 0.01, "the reader to stop")

    monkeypatch.setattr(log_hub, "MAX_PENDING", 5)
    slow = Follower(hub, rid)
    fast = Follower(hub, rid)
    for i in range(4):
        write(rid, "train", f"l{i}", f"m{i}")
        want = 2 * (i + 1)
        wait_until(lambda n=want: (fast.take(), len(fast.texts) == n)[1], 10, 0.01, "fast")
    assert slow.sub.overflowed and slow.woken.is_set()
    assert hub.following() == {rid: 1}
    fast.sub.close()
    with pytest.raises(Exception, match="no run matches"):
        hub.subscribe("nope", notify=lambda: None)
