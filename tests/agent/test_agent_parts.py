"""Unit tests of the agent's parts that need no child process: events, log files, GPU pool,
DAG checks, progress tailing (with a fake clock)."""

from __future__ import annotations

import json
import os
import re

import pytest

from corral.agent import dag
from corral.agent.events import EventLog, read_events_file
from corral.agent.gpus import GpuPool
from corral.agent.logs import LogPump, read_chunk, utf8_boundary
from corral.agent.progress import ProgressTailer
from corral.errors import BadInput
from corral.files import write_json_atomic
from corral.wire.node import iso

from .helpers import make_plan

STAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z ")


class FakeClock:
    def __init__(self, t: float = 1000.0):
        self.t = t

    def __call__(self) -> float:
        return self.t


def test_iso_formats_utc_with_milliseconds():
    assert iso(1795795800.1234) == "2026-11-27T16:10:00.123Z"
    assert iso(0.9999) == "1970-01-01T00:00:00.999Z"


def test_write_json_atomic_replaces_file_and_leaves_no_temp(tmp_path):
    target = tmp_path / "agent.json"
    write_json_atomic(target, {"a": 1})
    write_json_atomic(target, {"a": 2})
    assert json.loads(target.read_text()) == {"a": 2}
    assert os.listdir(tmp_path) == ["agent.json"]


# --- events -------------------------------------------------------------------------------


def test_event_log_numbers_densely_and_pages_with_next(tmp_path):
    log = EventLog(tmp_path / "events.jsonl", now=FakeClock(1700000000.0))
    for i in range(5):
        log.emit("progress", stage="train", data={"step": i})
    page, nxt = log.after(0, limit=2)
    assert [e["seq"] for e in page] == [1, 2] and nxt == 2
    page, nxt = log.after(nxt, limit=10)
    assert [e["seq"] for e in page] == [3, 4, 5] and nxt == 5
    page, nxt = log.after(nxt)
    assert page == [] and nxt == 5
    assert log.after(99) == ([], 5)  # a reader ahead of the log is brought back
    first = log.after(0, 1)[0][0]
    assert first["ts"] == "2023-11-14T22:13:20.000Z" and first["data"] == {"step": 0}


def test_event_log_persists_and_continues_numbering_after_restart(tmp_path):
    path = tmp_path / "events.jsonl"
    log = EventLog(path)
    log.emit("attempt.started")
    log.emit("stage.started", stage="a")
    log.close()
    with open(path, "a") as f:
        f.write('{"seq": 3, "ty')  # a torn last line from a crash
    again = EventLog(path)
    event = again.emit("stage.finished", stage="a", data={"state": "succeeded"})
    assert event["seq"] == 3
    assert [e["seq"] for e in read_events_file(path)] == [1, 2, 3]
    again.close()


def test_event_log_rejects_unknown_event_types(tmp_path):
    log = EventLog(tmp_path / "events.jsonl")
    with pytest.raises(ValueError, match="unknown event type"):
        log.emit("stage.exploded")


# --- logs ---------------------------------------------------------------------------------


def test_log_pump_stamps_every_line_and_flushes_a_partial_last_line(tmp_path):
    r, w = os.pipe()
    os.write(w, "first\nsecond é\nno newline".encode())
    os.close(w)
    path = tmp_path / "s.log"
    LogPump(os.fdopen(r, "rb"), path, now=lambda: 0.5).start().join(5)
    lines = path.read_text().splitlines()
    assert lines == [
        "1970-01-01T00:00:00.500Z first",
        "1970-01-01T00:00:00.500Z second é",
        "1970-01-01T00:00:00.500Z no newline",
    ]


def test_log_pump_cuts_overlong_lines_without_splitting_characters(tmp_path):
    r, w = os.pipe()
    os.write(w, ("é" * 10 + "\n").encode())
    os.close(w)
    path = tmp_path / "s.log"
    LogPump(os.fdopen(r, "rb"), path, max_line=5).start().join(5)
    texts = [STAMP.sub("", line) for line in path.read_text().splitlines()]
    assert texts == ["éé", "éé", "éé", "éé", "éé"]


class _Chunks:
    """A tap that records the chunks the pump reads; the pump's clock reads the time the test
    gave the latest chunk."""

    def __init__(self, times: list[float]):
        self.times = times
        self.chunks: list[bytes] = []

    def feed(self, data: bytes) -> None:
        self.chunks.append(data)

    def close(self) -> None:
        pass

    def now(self) -> float:
        return self.times[max(0, len(self.chunks) - 1)]


def test_log_pump_writes_a_bars_redraws_waiting_for_a_newline_once_a_second_old(tmp_path):
    from support.waiting import wait_until

    writes = [b"\r 1/10", b"\r 2/10", b"\r 3/10 [a]", b"\r 4/10\n", b"done\r", b"\n"]
    tap = _Chunks([0.0, 0.5, 1.2, 2.0, 2.5, 2.6])
    r, w = os.pipe()
    path = tmp_path / "s.log"
    pump = LogPump(os.fdopen(r, "rb"), path, now=tap.now, tap=tap).start()
    for n, data in enumerate(writes, 1):
        os.write(w, data)
        wait_until(lambda n=n: len(tap.chunks) == n, 5, 0.01, f"the pump to read write {n}")
    os.close(w)
    pump.join(5)
    assert path.read_bytes().decode() == (
        f"{iso(1.2)} \r 1/10\r 2/10\r\n"  # 1.2 s after the first redraw: written
        f"{iso(2.0)}  3/10 [a]\r 4/10\n"  # the newline came within the second
        f"{iso(2.6)} done\r\n"
    )


def test_read_chunk_cuts_at_last_newline_and_never_inside_a_character(tmp_path):
    path = tmp_path / "s.log"
    content = "ab€\ncd€€\n" + "€" * 5
    path.write_bytes(content.encode())
    data, nxt = read_chunk(path, 0, limit=9)  # "ab€\ncd" + half of "€"
    assert data == "ab€\n".encode() and nxt == 6
    data, nxt = read_chunk(path, nxt, limit=7)  # no newline inside: "cd€" + 2 bytes of "€"
    assert data == "cd€".encode() and nxt == 11
    rebuilt, offset = b"", 0
    while True:
        data, offset = read_chunk(path, offset, limit=4)
        if not data:
            break
        rebuilt += data
    assert rebuilt.decode() == content


def test_read_chunk_of_missing_file_is_empty(tmp_path):
    assert read_chunk(tmp_path / "nope.log", 7) == (b"", 7)


def test_utf8_boundary_keeps_whole_characters_only():
    assert utf8_boundary("a😀".encode()[:3]) == 1
    assert utf8_boundary("a😀".encode()) == 5
    assert utf8_boundary(b"abc") == 3


# --- GPUs ---------------------------------------------------------------------------------


def test_gpu_pool_gives_counts_indices_and_all_without_sharing():
    pool = GpuPool([str(i) for i in range(4)])
    assert pool.try_acquire("a", [2, 3]) == [2, 3]
    assert pool.try_acquire("b", 2) == [0, 1]
    assert pool.try_acquire("c", 1) is None
    assert pool.try_acquire("d", "all") is None
    assert pool.try_acquire("e", 0) == []
    pool.release("a")
    assert pool.try_acquire("c", [3]) == [3]
    assert pool.physical([3]) == ["3"]
    pool.release("b")
    pool.release("c")
    assert pool.try_acquire("d", "all") == [0, 1, 2, 3]


def test_gpu_pool_names_requests_this_node_can_never_meet():
    pool = GpuPool(["0", "1"])
    assert "needs 3 GPU(s) but this node has 2" in pool.problem("train", 3)
    assert "GPU index 5" in pool.problem("train", [0, 5])
    assert pool.problem("train", [1, 1]) is not None
    assert pool.problem("train", "all") is None
    assert pool.problem("train", 2) is None


# --- DAG ----------------------------------------------------------------------------------


def test_dag_validate_orders_stages_and_rejects_bad_graphs(tmp_path):
    def plan(stages, **kw):
        return make_plan(tmp_path, stages, **kw)

    order = dag.validate(
        plan([{"name": "b", "run": "x", "needs": ["a"]}, {"name": "a", "run": "x"}])
    )
    assert order == ["a", "b"]
    cases = [
        (
            [{"name": "a", "run": "x", "needs": ["b"]}, {"name": "b", "run": "x", "needs": ["a"]}],
            "cycle",
        ),
        ([{"name": "a", "run": "x", "needs": ["zz"]}], "unknown stage 'zz'"),
        ([{"name": "a", "run": "x"}, {"name": "a", "run": "y"}], "defined twice"),
        ([{"name": "_setup", "run": "x"}], "invalid"),
        ([{"name": "../up", "run": "x"}], "invalid"),
        ([], "no stages"),
    ]
    for stages, message in cases:
        with pytest.raises(BadInput, match=re.escape(message)):
            dag.validate(plan(stages))
    with pytest.raises(BadInput, match="skip_stages names unknown stage 'b'"):
        dag.validate(plan([{"name": "a", "run": "x"}], skip_stages=["b"]))


# --- progress -----------------------------------------------------------------------------


def _append(path, *records, raw: str = ""):
    with open(path, "a") as f:
        for record in records:
            f.write(json.dumps(record) + "\n")
        f.write(raw)


def test_progress_tailer_keeps_latest_and_rate_limits_progress_events(tmp_path):
    clock = FakeClock()
    events = EventLog(tmp_path / "events.jsonl")
    tailer = ProgressTailer(tmp_path, events, interval=10.0, clock=clock)
    path = tailer.path_for("train")
    _append(path, {"ts": 1.0, "kind": "progress", "step": 1, "total": 4, "loss": 2.5})
    tailer.poll(["train"])
    _append(path, {"ts": 2.0, "kind": "progress", "step": 2, "total": 4, "loss": 2.0})
    clock.t += 9.9
    tailer.poll(["train"])
    assert [e["data"]["step"] for e in events.after(0)[0]] == [1]
    clock.t += 0.1
    _append(path, {"ts": 3.0, "kind": "progress", "step": 3, "total": 4, "epoch": 1})
    tailer.poll(["train"])
    progress = [e["data"] for e in events.after(0)[0]]
    assert [p["step"] for p in progress] == [1, 3]
    assert progress[1] == {"step": 3, "total": 4, "percent": 75.0, "loss": None, "metrics": {},
                           "steps_per_s": 1.0, "eta_s": 1.0}  # fmt: skip
    latest = tailer.latest("train")
    assert latest["step"] == 3 and latest["percent"] == 75.0 and latest["epoch"] == 1


def test_progress_tailer_waits_for_a_partial_line_and_skips_garbage(tmp_path):
    events = EventLog(tmp_path / "events.jsonl")
    tailer = ProgressTailer(tmp_path, events, clock=FakeClock())
    path = tailer.path_for("train")
    line = json.dumps({"ts": 5.0, "kind": "progress", "step": 7, "total": None})
    _append(path, raw="not json\n[1, 2]\n" + line[:10])
    tailer.poll(["train"])
    assert tailer.latest("train") is None
    _append(path, raw=line[10:] + "\n")
    tailer.poll(["train"])
    assert tailer.latest("train")["step"] == 7
    assert tailer.latest("train")["percent"] is None


def test_progress_tailer_turns_checkpoints_into_events_and_merges_metrics(tmp_path):
    events = EventLog(tmp_path / "events.jsonl")
    tailer = ProgressTailer(tmp_path, events, clock=FakeClock())
    path = tailer.path_for("train")
    _append(
        path,
        {"ts": 1.0, "kind": "progress", "step": 10, "total": 100, "metrics": {"lr": 0.1}},
        {"ts": 2.0, "kind": "metrics", "step": 10, "metrics": {"cer": 0.2}},
        {
            "ts": 3.0,
            "kind": "checkpoint",
            "step": 10,
            "path": "/ck/ckpt-10",
            "metrics": {"cer": 0.2},
        },
    )
    tailer.poll(["train"])
    assert tailer.latest("train")["metrics"] == {"lr": 0.1, "cer": 0.2}
    assert tailer.last_checkpoint() == {
        "stage": "train",
        "step": 10,
        "path": "/ck/ckpt-10",
        "ts": 3.0,
    }
    saved = [e for e in events.after(0)[0] if e["type"] == "checkpoint.saved"]
    assert saved[0]["stage"] == "train"
    assert saved[0]["data"] == {"step": 10, "path": "/ck/ckpt-10", "metrics": {"cer": 0.2}}


def test_progress_tailer_starts_over_when_the_file_is_truncated(tmp_path):
    events = EventLog(tmp_path / "events.jsonl")
    tailer = ProgressTailer(tmp_path, events, clock=FakeClock())
    path = tailer.path_for("train")
    _append(path, {"ts": 1.0, "kind": "progress", "step": 100, "total": 100})
    tailer.poll(["train"])
    path.write_text(json.dumps({"ts": 2.0, "kind": "progress", "step": 1, "total": 100}) + "\n")
    tailer.poll(["train"])
    assert tailer.latest("train")["step"] == 1


def test_log_pump_on_a_closed_pipe_writes_nothing(tmp_path):
    r, w = os.pipe()
    os.close(w)
    path = tmp_path / "s.log"
    LogPump(os.fdopen(r, "rb"), path).start().join(5)
    assert path.read_bytes() == b""
