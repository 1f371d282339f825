"""Review of the progress file -> agent path: non-finite losses, bursts larger than one read,
records that break the handler, a replaced file, metrics that a progress record dropped."""

from __future__ import annotations

import json
import os
import sys
import time

from corral.agent.events import EventLog
from corral.agent.progress import ProgressTailer
from corral.sdk import progress_file
from support.waiting import wait_until

from .helpers import make_plan


class FakeClock:
    def __init__(self, t: float = 1000.0):
        self.t = t

    def __call__(self) -> float:
        return self.t


def _tailer(tmp_path, **kw):
    events = EventLog(tmp_path / "events.jsonl")
    return ProgressTailer(tmp_path / "progress", events, clock=FakeClock(), **kw), events


def _append(path, *records):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        for record in records:
            f.write(json.dumps(record) + "\n")


def test_a_diverged_loss_is_shown_as_nan_not_as_no_loss(tmp_path):
    tailer, events = _tailer(tmp_path)
    path = tailer.path_for("train")
    progress_file.emit(
        "progress",
        file=str(path),
        step=1,
        total=10,
        loss=float("nan"),
        metrics={"grad_norm": float("inf"), "lr": 0.1},
    )
    tailer.poll(["train"])
    latest = tailer.latest("train")
    assert latest["loss"] == "nan"
    assert latest["metrics"] == {"grad_norm": "inf", "lr": 0.1}
    progress_file.emit("progress", file=str(path), step=2, total=10, loss=float("-inf"))
    tailer.poll(["train"])
    assert tailer.latest("train")["loss"] == "-inf"
    progress_file.emit("progress", file=str(path), step=3, total=10)  # no loss at all
    tailer.poll(["train"])
    assert tailer.latest("train")["loss"] is None
    # the progress event (and its webhook) says "nan" too, and the controller describes it
    (first,) = [e for e in events.after(0)[0] if e["type"] == "progress"]
    assert first["data"]["loss"] == "nan" and first["data"]["metrics"]["grad_norm"] == "inf"
    from corral.control.sync import _describe
    from corral.wire.events import AgentEvent

    assert _describe(AgentEvent.model_validate(first)).endswith("loss nan")


def test_the_last_poll_reads_everything_the_stage_wrote_not_one_mebibyte(tmp_path):
    tailer, _ = _tailer(tmp_path)
    path = tailer.path_for("train")
    big = {"blob": "x" * 4000}
    _append(path, *({"ts": 1.0, "kind": "metrics", "step": i, "metrics": big} for i in range(600)))
    _append(
        path,
        {"ts": 2.0, "kind": "progress", "step": 600, "total": 600},
        {"ts": 3.0, "kind": "checkpoint", "step": 600, "path": "/ck/ckpt-600", "metrics": {}},
    )
    assert path.stat().st_size > 2 * 1024 * 1024
    tailer.poll(["train"])  # what the runner does once when the stage exits
    assert tailer.latest("train")["step"] == 600
    assert tailer.last_checkpoint()["path"] == "/ck/ckpt-600"


def test_a_record_that_breaks_the_handler_is_skipped_and_the_rest_is_read(tmp_path):
    tailer, _ = _tailer(tmp_path)
    path = tailer.path_for("train")
    path.parent.mkdir(parents=True)
    with open(path, "a") as f:  # an integer too large for a float: 100.0 * step overflows
        f.write('{"ts": 1, "kind": "progress", "step": 1' + "0" * 400 + ', "total": 3}\n')
    _append(path, {"ts": 2.0, "kind": "progress", "step": 2, "total": 4})
    tailer.poll(["train"])
    assert tailer.latest("train")["step"] == 2


def test_the_background_poller_survives_a_bad_record(tmp_path):
    tailer, _ = _tailer(tmp_path)
    path = tailer.path_for("train")
    path.parent.mkdir(parents=True)
    with open(path, "a") as f:
        f.write('{"ts": 1, "kind": "progress", "step": 1' + "0" * 400 + ', "total": 3}\n')
    tailer.start(lambda: ["train"], every=0.02)
    try:
        time.sleep(0.2)
        _append(path, {"ts": 2.0, "kind": "progress", "step": 5, "total": 10})
        wait_until(
            lambda: (tailer.latest("train") or {}).get("step") == 5,
            5,
            0.02,
            "the poller to read step 5 (it stopped?)",
        )
    finally:
        tailer.close()


def test_a_file_replaced_by_a_larger_one_is_read_from_its_start(tmp_path):
    tailer, _ = _tailer(tmp_path)
    path = tailer.path_for("train")
    _append(path, *({"ts": 1.0, "kind": "progress", "step": i, "total": 9} for i in range(3)))
    tailer.poll(["train"])
    fresh = path.with_name("fresh")
    _append(
        fresh,
        {"ts": 5.0, "kind": "checkpoint", "step": 1, "path": "/ck/new-1", "metrics": {}},
        *(
            {"ts": 6.0, "kind": "progress", "step": i, "total": 9, "metrics": {"n": i}}
            for i in range(1, 8)
        ),
    )
    os.replace(fresh, path)  # e.g. a new run of the stage that rewrote the file
    tailer.poll(["train"])
    assert tailer.last_checkpoint()["path"] == "/ck/new-1"
    assert tailer.latest("train")["step"] == 7


def test_metrics_logged_between_reports_stay_in_status(tmp_path):
    tailer, _ = _tailer(tmp_path)
    path = tailer.path_for("train")
    _append(
        path,
        {"ts": 1.0, "kind": "progress", "step": 10, "total": 100, "metrics": {"lr": 0.1}},
        {"ts": 2.0, "kind": "metrics", "step": 10, "metrics": {"val_cer": 0.2, "cost_usd": 1.5}},
        {"ts": 3.0, "kind": "progress", "step": 11, "total": 100, "metrics": {"lr": 0.09}},
    )
    tailer.poll(["train"])
    latest = tailer.latest("train")
    assert latest["step"] == 11
    assert latest["metrics"] == {"lr": 0.09, "val_cer": 0.2, "cost_usd": 1.5}


def test_metrics_in_status_are_capped_to_the_most_recent_keys(tmp_path):
    from corral.agent import progress as progress_mod

    tailer, _ = _tailer(tmp_path)
    path = tailer.path_for("train")
    n = progress_mod.MAX_METRICS + 50
    _append(
        path,
        *(
            {"ts": 1.0, "kind": "metrics", "step": i, "metrics": {f"sample/{i}": i}}
            for i in range(n)
        ),
    )
    _append(path, {"ts": 2.0, "kind": "progress", "step": n, "metrics": {"lr": 0.1}})
    tailer.poll(["train"])
    metrics = tailer.latest("train")["metrics"]
    assert len(metrics) == progress_mod.MAX_METRICS
    assert metrics["lr"] == 0.1 and f"sample/{n - 1}" in metrics and "sample/0" not in metrics


def test_a_line_that_never_ends_does_not_grow_without_bound(tmp_path, monkeypatch):
    from corral.agent import progress as progress_mod

    monkeypatch.setattr(progress_mod, "MAX_LINE", 64 * 1024)
    tailer, _ = _tailer(tmp_path)
    path = tailer.path_for("train")
    path.parent.mkdir(parents=True)
    with open(path, "ab") as f:
        f.write(b"\0" * (200 * 1024))  # no newline: garbage, or a record far too large
    tailer.poll(["train"])
    assert len(tailer._partial.get("train", b"")) <= 64 * 1024
    with open(path, "ab") as f:
        f.write(b"\n")
    _append(path, {"ts": 2.0, "kind": "progress", "step": 3, "total": 4})
    tailer.poll(["train"])
    assert tailer.latest("train")["step"] == 3


def test_status_and_events_of_a_diverged_run_over_http(tmp_path, start_agent):
    script = (
        "from corral.sdk import report\n"
        "report(1, total=4, loss=2.0)\n"
        "report(2, total=4, loss=float('nan'), grad_norm=float('inf'))\n"
    )
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "train.py").write_text(script)
    plan = make_plan(tmp_path, [{"name": "train", "run": f"{sys.executable} train.py"}])
    client = start_agent(plan)
    status = client.wait_finished(timeout=30)
    progress = client.stage(status, "train")["progress"]
    assert progress["step"] == 2 and progress["loss"] == "nan"
    assert progress["metrics"]["grad_norm"] == "inf"
    raw = client.request("GET", "/status", raw=True)[1]
    assert "NaN" not in raw and "Infinity" not in raw  # strict JSON


def test_a_stage_that_writes_a_burst_then_exits_has_its_last_checkpoint_in_status(
    tmp_path, start_agent
):
    script = (
        "from corral.sdk.progress_file import emit\n"
        "for step in range(800):\n"
        "    emit('metrics', step=step, metrics={'blob': 'x' * 4000})\n"
        "emit('progress', step=800, total=800, loss=0.5)\n"
        "emit('checkpoint', step=800, path='/ck/ckpt-800', metrics={})\n"
    )
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "train.py").write_text(script)
    plan = make_plan(tmp_path, [{"name": "train", "run": f"{sys.executable} train.py"}])
    client = start_agent(plan)
    status = client.wait_finished(timeout=30)
    assert client.stage(status, "train")["progress"]["step"] == 800
    assert status["last_checkpoint"]["path"] == "/ck/ckpt-800"
    types = [e["type"] for e in client.events()]
    assert types.index("checkpoint.saved") < types.index("stage.finished")


def test_an_agent_restarted_on_its_state_dir_does_not_replay_old_records(tmp_path, start_agent):
    old = tmp_path / "state" / "progress" / "train.jsonl"
    _append(
        old,
        {"ts": 1.0, "kind": "progress", "step": 90, "total": 100, "loss": 0.1},
        {"ts": 2.0, "kind": "checkpoint", "step": 90, "path": "/ck/old-90", "metrics": {}},
    )
    script = "from corral.sdk import report\nreport(1, total=100, loss=3.0)\n"
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "train.py").write_text(script)
    plan = make_plan(tmp_path, [{"name": "train", "run": f"{sys.executable} train.py"}])
    client = start_agent(plan)
    status = client.wait_finished(timeout=30)
    assert client.stage(status, "train")["progress"]["step"] == 1
    assert status["last_checkpoint"] is None
    assert not [e for e in client.events() if e["type"] == "checkpoint.saved"]


def test_a_record_appended_to_a_torn_line_is_still_read(tmp_path):
    tailer, _ = _tailer(tmp_path)
    path = tailer.path_for("train")
    path.parent.mkdir(parents=True)
    with open(path, "a") as f:
        f.write('{"ts":1.0,"kind":"progress","st')  # the writer was killed here
    progress_file.emit("checkpoint", file=str(path), step=4, path="/ck/ckpt-4", metrics={})
    tailer.poll(["train"])
    assert tailer.last_checkpoint()["path"] == "/ck/ckpt-4"


def test_the_eta_comes_from_the_rate_of_the_recent_progress_records(tmp_path):
    tailer, events = _tailer(tmp_path, interval=0.0)
    path = tailer.path_for("train")
    # 10 steps per 5 s (2 steps/s) for a while, then 1 step per 2 s (0.5 steps/s)
    records = [{"ts": 1000.0 + 5 * i, "kind": "progress", "step": 10 * i, "total": 1000}
               for i in range(1, 41)]  # fmt: skip
    _append(path, *records)
    tailer.poll(["train"])
    latest = tailer.latest("train")
    assert latest["steps_per_s"] == 2.0
    assert latest["eta_s"] == (1000 - 400) / 2.0
    last = records[-1]["ts"]
    slow = [{"ts": last + 2 * i, "kind": "progress", "step": 400 + i, "total": 1000}
            for i in range(1, 121)]  # fmt: skip
    _append(path, *slow)
    tailer.poll(["train"])
    latest = tailer.latest("train")
    # the window holds only the slow records now: 0.5 steps/s
    assert latest["steps_per_s"] == 0.5
    assert latest["eta_s"] == (1000 - 520) / 0.5
    progress = [e for e in events.after(0)[0] if e["type"] == "progress"]
    assert progress[-1]["data"]["eta_s"] == latest["eta_s"]
    assert progress[-1]["data"]["steps_per_s"] == 0.5


def test_no_eta_without_a_total_or_a_rate_and_a_resume_starts_the_window_again(tmp_path):
    tailer, _ = _tailer(tmp_path)
    path = tailer.path_for("train")
    _append(path, {"ts": 1000.0, "kind": "progress", "step": 10, "total": 100})
    tailer.poll(["train"])
    assert tailer.latest("train")["eta_s"] is None  # one record: no rate yet
    assert tailer.latest("train")["steps_per_s"] is None
    _append(path, {"ts": 1010.0, "kind": "progress", "step": 20})  # no total
    tailer.poll(["train"])
    assert tailer.latest("train")["steps_per_s"] == 1.0
    assert tailer.latest("train")["eta_s"] is None
    # a resumed attempt reports step 15 again: the rate of the old attempt is not used
    _append(path, {"ts": 1100.0, "kind": "progress", "step": 15, "total": 100})
    tailer.poll(["train"])
    assert tailer.latest("train")["eta_s"] is None
    _append(path, {"ts": 1104.0, "kind": "progress", "step": 17, "total": 100})
    tailer.poll(["train"])
    assert tailer.latest("train")["eta_s"] == (100 - 17) / 0.5
    _append(path, {"ts": 1110.0, "kind": "progress", "step": 100, "total": 100})
    tailer.poll(["train"])
    assert tailer.latest("train")["eta_s"] == 0.0


def test_the_progress_event_text_carries_the_eta():
    from corral.control.sync import _describe
    from corral.wire.events import AgentEvent

    event = AgentEvent(seq=1, ts="2026-01-01T00:00:00Z", type="progress", stage="train",
                       data={"step": 1200, "total": 5000, "percent": 24.0, "loss": 1.873,
                             "eta_s": 2533.5})  # fmt: skip
    assert _describe(event) == "train: step 1200/5000 (24%) ETA 0h42m13s loss 1.873"
    event.data["eta_s"] = None
    assert _describe(event) == "train: step 1200/5000 (24%) loss 1.873"


def test_a_sharded_checkpoint_record_carries_its_rank_count(tmp_path):
    tailer, events = _tailer(tmp_path)
    path = tailer.path_for("train")
    _append(path, {"ts": 1.0, "kind": "checkpoint", "step": 4, "path": "/ck/ckpt-4",
                   "metrics": {}, "shards": 8},
            {"ts": 2.0, "kind": "checkpoint", "step": 5, "path": "/ck/ckpt-5", "metrics": {}})  # fmt: skip
    tailer.poll(["train"])
    saved = [e["data"] for e in events.after(0)[0] if e["type"] == "checkpoint.saved"]
    assert saved[0]["shards"] == 8 and "shards" not in saved[1]
    assert tailer.last_checkpoint() == {"stage": "train", "step": 5, "path": "/ck/ckpt-5",
                                        "ts": 2.0}  # fmt: skip


def test_every_validation_value_reaches_an_event_though_progress_events_are_throttled(tmp_path):
    clock = FakeClock()
    tailer, events = _tailer(tmp_path, interval=10.0)
    tailer._clock = clock
    path = tailer.path_for("train")
    for step in range(1, 13):  # loss every step, a validation every 4th, one event per 10 s
        metrics = {"lr": 0.1} | ({"val_acc": step / 100} if step % 4 == 0 else {})
        _append(path, {"ts": float(step), "kind": "progress", "step": step, "loss": 1.0,
                       "metrics": metrics})  # fmt: skip
        if step == 6:  # an evaluation's own record (what trackers.log writes)
            _append(
                path,
                {"ts": 6.5, "kind": "metrics", "step": 6, "metrics": {"eval_f1": 0.5, "epoch": 1}},
            )
        tailer.poll(["train"])
        clock.t += 1.0
    tailer.flush("train")  # the stage ended: what waits goes out
    tailer.flush("train")  # nothing left: no more event
    _append(path, {"ts": 13.0, "kind": "progress", "step": 13, "loss": 1.0, "metrics": {"lr": 0.1}})
    tailer.poll(["train"])
    tailer.flush("train")  # a training metric (reported every step) waits for no event
    progress = [e["data"] for e in events.after(0)[0] if e["type"] == "progress"]
    assert [p["step"] for p in progress] == [1, 11, 12]
    assert progress[1]["points"] == [[4, {"val_acc": 0.04}], [6, {"eval_f1": 0.5}],
                                     [8, {"val_acc": 0.08}]]  # fmt: skip
    assert progress[2]["points"] == [[12, {"val_acc": 0.12}]] and progress[2]["loss"] == 1.0
    assert "points" not in progress[0]
