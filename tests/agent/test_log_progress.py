"""Progress read from a stage's log (its ``progress`` preset or regex): each tool's real log
lines go through the pump's tap into the SDK's progress records, and from there into what
``/status`` shows and the ``progress`` events (the path of ``corral.sdk.report()``)."""

from __future__ import annotations

import json
import math
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from corral.agent.events import EventLog
from corral.agent.log_presets import make_parser, number
from corral.agent.log_progress import BackgroundTrackers, LogProgress, stage_trackers
from corral.agent.progress import ProgressTailer
from corral.sdk.trackers.base import Tracker
from support.waiting import wait_until


class FakeClock:
    def __init__(self, t: float = 1000.0):
        self.t = t

    def __call__(self) -> float:
        return self.t


class Recorder(Tracker):
    def __init__(self):
        self.logged: list[tuple[dict, int]] = []
        self.tables: list[tuple[str, int]] = []
        self.finished = False

    def log(self, metrics, step):
        self.logged.append((dict(metrics), step))

    def log_table(self, name, rows, step):
        self.tables.append((name, step))

    def finish(self):
        self.finished = True


def _read(tmp_path, progress: str, output: str | bytes, *, chunk: int = 7, **kw):
    """Feed ``output`` in small chunks (cut anywhere), close, and poll the tailer once."""
    events = EventLog(tmp_path / "events.jsonl")
    clock = FakeClock()
    tailer = ProgressTailer(tmp_path / "progress", events, interval=0.0, clock=clock)
    tap = LogProgress(progress, str(tailer.path_for("train")), clock=clock, **kw)
    data = output.encode() if isinstance(output, str) else output
    for i in range(0, len(data), chunk):
        tap.feed(data[i : i + chunk])
    tap.close()
    tailer.poll(["train"])
    progress = [e["data"] for e in events.after(0)[0] if e["type"] == "progress"]
    return tailer.latest("train"), progress


def _records(tmp_path) -> list[dict]:
    path = tmp_path / "progress" / "train.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


#: Output captured from the real tools at their current versions (tool_output/README.md says
#: how each was made): the tests below read them as the agent's log tap reads a stage's log.
CAPTURED = Path(__file__).parent / "tool_output"


def _captured(name: str) -> bytes:
    return (CAPTURED / name).read_bytes()


def test_hf_trainer_5_bar_gives_the_step_and_its_printed_dicts_the_loss_and_metrics(tmp_path):
    # transformers 5.24: the Trainer's bar, quoted numbers in its dicts, evaluation bars and
    # "Writing model shards" bars between, and first the tokenisation's described bar
    output = _captured("transformers-5.24.0-trainer.log")
    assert b"Running tokenizer on dataset: 100%" in output and b"| 184/184 [" in output
    latest, events = _read(tmp_path, "hf", output)
    assert (latest["step"], latest["total"], latest["percent"]) == (30, 30, 100.0)
    assert latest["loss"] == 3.892 and latest["epoch"] == 0.6522
    assert latest["metrics"]["eval_loss"] == 3.888 and latest["metrics"]["learning_rate"] == 5e-05
    assert latest["metrics"]["train_loss"] == 3.9
    first_loss = next(e for e in events if e["loss"] is not None)
    assert (first_loss["step"], first_loss["loss"]) == (5, 3.903)
    # neither the tokenisation's bar (184) nor evaluation's (4) nor the shards' (1) is taken
    records = [r for r in _records(tmp_path) if r["kind"] == "progress"]
    assert {r["total"] for r in records} == {30}
    # each dict at the step it was logged at (every 5), though the bar drawn before the one of
    # step 10 still showed 5: tqdm redraws at most every 0.1 s, and write() redraws after it
    assert [r["step"] for r in records if "grad_norm" in r["metrics"]] == [5, 10, 15, 20, 25, 30]
    assert [r["step"] for r in records if "eval_loss" in r["metrics"]] == [15, 30]


def test_hf_dicts_without_a_bar_come_as_they_are_and_a_held_one_at_the_end(tmp_path):
    # disable_tqdm=True: no bar, the dicts alone
    latest, _ = _read(tmp_path, "hf", "{'loss': '2.5', 'epoch': '0.1'}\n")
    assert latest["step"] is None and latest["metrics"] == {"loss": 2.5}
    # the output ends after a dict, before the bar's redraw: the dict at the last step read
    (tmp_path / "end").mkdir()
    output = "\r 40%|####      | 4/10 [00:01<00:01]\r          \r{'loss': '1.5'}\n"
    latest, _ = _read(tmp_path / "end", "hf", output)
    assert (latest["step"], latest["loss"]) == (4, 1.5)


@pytest.mark.parametrize(
    "bar",
    [
        "Map: 100%|██████████| 1840/1840 [00:00<00:00, 35012.50 examples/s]",
        "Running tokenizer on dataset:  40%|████      | 736/1840 [00:01<00:02, 520.1 examples/s]",
        "Loading checkpoint shards: 100%|██████████| 2/2 [00:03<00:00,  1.52s/it]",
    ],
)
def test_hf_a_described_bar_before_the_trainers_is_not_the_training(tmp_path, bar):
    """The bug of issue 25: the first bar of run_clm.py is datasets' (1840/1840 = 100 % for the
    whole run); only the Trainer's bar, which has no description, counts."""
    output = f"\r{bar}\n\r  1%|          | 3/300 [00:01<01:39,  3.00it/s]\n"
    latest, _ = _read(tmp_path, "hf", output)
    assert (latest["step"], latest["total"]) == (3, 300)
    (tmp_path / "alone").mkdir()
    latest, _ = _read(tmp_path / "alone", "hf", f"\r{bar}\n")
    assert latest is None


def test_a_bar_alone_keeps_the_last_loss_and_is_written_at_most_once_a_second(tmp_path):
    clock = FakeClock()
    path = tmp_path / "train.jsonl"
    tap = LogProgress("hf", str(path), clock=clock)
    tap.feed(b"{'loss': 1.5, 'epoch': 0.1}\n")
    for n in range(1, 50):  # 49 redraws within the same second
        tap.feed(f"\r {n}/100 [00:01<00:02, 9.9it/s]".encode())
    records = [json.loads(line) for line in path.read_text().splitlines()]
    # the dict before any step is a metrics record; then the first bar, nothing more this second
    assert [r["kind"] for r in records] == ["metrics", "progress"]
    clock.t += 1.5
    tap.feed(b"\r 50/100 [00:05<00:05, 9.9it/s]")
    tap.feed(b"\r 51/100 [00:05<00:05, 9.9it/s]")
    tap.close()  # the held position is written at the end
    records = [json.loads(line) for line in path.read_text().splitlines()]
    # a redraw is whole once the next one begins: 49 (held, due a second later), then the
    # last one at the end
    assert [r.get("step") for r in records if r["kind"] == "progress"] == [1, 49, 51]
    assert all(r["loss"] == 1.5 for r in records if r["kind"] == "progress")
    assert all(r["epoch"] == 0.1 for r in records if r["kind"] == "progress")


def test_nanogpt_iterations_evals_and_max_iters(tmp_path):
    log = (
        "Overriding config with config/train_shakespeare_char.py:\n"
        "Overriding: max_iters = 200\n"
        "tokens per iteration will be: 8,192\n"
        "step 0: train loss 4.2874, val loss 4.2823\n"
        "iter 0: loss 4.2649, time 12345.67ms, mfu -100.00%\n"
        "iter 10: loss 3.1234, time 45.67ms, mfu 1.23%\n"
        "iter 20: loss 2.9876, time 44.01ms, mfu 1.25%\n"
    )
    latest, events = _read(tmp_path, "nanogpt", log)
    assert (latest["step"], latest["total"], latest["loss"]) == (20, 200, 2.9876)
    assert latest["metrics"]["mfu"] == 1.25 and latest["metrics"]["time_ms"] == 44.01
    assert latest["metrics"]["val_loss"] == 4.2823
    assert events[0]["step"] == 0 and events[0]["metrics"] == {
        "train_loss": 4.2874,
        "val_loss": 4.2823,
    }


def test_lightning_2_6_rich_bar_drawn_for_a_terminal_gives_batches_and_loss(tmp_path):
    # the agent runs a `progress: lightning` stage with TTY_COMPATIBLE=1 and COLUMNS=200
    latest, _ = _read(tmp_path, "lightning", _captured("lightning-2.6.6-rich.log"))
    assert (latest["step"], latest["total"], latest["epoch"]) == (32, 32, 1)
    assert latest["loss"] == 35.842 and latest["metrics"] == {"val_loss": 67.569}
    steps = [r["step"] for r in _records(tmp_path) if r["kind"] == "progress"]
    assert len(set(steps)) > 4 and steps == sorted(steps)  # read batch by batch, not at the end


def test_lightning_2_6_rich_bar_wrapped_on_a_narrow_console_keeps_its_values(tmp_path):
    # 80 columns: the bar's values wrap onto the lines below it, a value apart from its name
    latest, _ = _read(tmp_path, "lightning", _captured("lightning-2.6.6-rich-80-columns.log"))
    assert (latest["step"], latest["total"]) == (32, 32)
    assert latest["loss"] == 35.842 and latest["metrics"] == {"val_loss": 67.569}


def test_lightning_2_6_tqdm_bar_counts_batches_over_epochs_with_the_postfix_metrics(tmp_path):
    latest, _ = _read(tmp_path, "lightning", _captured("lightning-2.6.6-tqdm.log"))
    assert (latest["step"], latest["epoch"], latest["loss"]) == (32, 1, 35.8)
    assert latest["metrics"] == {"val_loss": 67.6}  # v_num is not a metric
    assert latest["total"] is None  # the tqdm bar does not say how many epochs


LIGHTNING_1 = (  # Lightning 1.x's tqdm bar: the postfix with the loss first
    "Epoch 0:  45%|████▌     | 45/100 [00:01<00:02, 25.00it/s, loss=0.723, v_num=0]\r"
    "Epoch 0: 100%|██████████| 100/100 [00:04<00:00, 25.00it/s, loss=0.5, v_num=0]\n"
    "Validation DataLoader 0:  50%|█████     | 5/10 [00:00<00:00, 50.00it/s]\r"
    "Epoch 1:  10%|█         | 10/100 [00:00<00:03, 25.00it/s, loss=4.1e-05, v_num=0, "
    "val_loss=nan]\r"
)


def test_lightning_1_bar_and_numbers_in_any_notation(tmp_path):
    latest, _ = _read(tmp_path, "lightning", LIGHTNING_1)
    assert (latest["step"], latest["epoch"], latest["loss"]) == (110, 1, 4.1e-05)
    assert str(latest["metrics"]["val_loss"]) == "nan"


def test_lightning_bar_with_the_last_epoch_gives_the_total(tmp_path):
    bar = "Epoch 2/9:  50%|█████     | 50/100 [00:02<00:02, 25.00it/s, v_num=3, loss=0.2]\n"
    latest, _ = _read(tmp_path, "lightning", bar)
    assert (latest["step"], latest["total"], latest["percent"]) == (250, 1000, 25.0)
    bar = "Epoch 2/-2  ━━━━━━╺━━━━━ 50/100 0:00:02 • 0:00:02 25.00it/s v_num: 3.000 loss: 0.2\n"
    (tmp_path / "steps").mkdir()
    latest, _ = _read(tmp_path / "steps", "lightning", bar)  # max_steps and no max_epochs
    assert (latest["step"], latest["total"]) == (250, None)


def test_ultralytics_8_4_yolo_train_gives_batches_not_epochs(tmp_path):
    # Ultralytics 8.4's own bar ("64: 50% ━━━━━━────── 2/4 5.5it/s 0.5s<0.5s", no [...])
    latest, _ = _read(tmp_path, "ultralytics", _captured("ultralytics-8.4.190-yolo-train.log"))
    assert (latest["step"], latest["total"], latest["epoch"]) == (12, 12, 3)
    assert latest["loss"] == pytest.approx(0.05037 + 0.3293 + 0.02959)
    assert latest["metrics"]["box_mAP50-95"] == 0 and latest["metrics"]["dfl_loss"] == 0.02959
    steps = [r["step"] for r in _records(tmp_path) if r["kind"] == "progress"]
    assert steps[0] == 0 and {2, 5, 7, 10} <= set(steps)  # batches, not epochs


def test_ultralytics_8_4_values_in_any_notation(tmp_path):
    latest, _ = _read(tmp_path, "ultralytics", _captured("ultralytics-8.4.190-small-losses.log"))
    assert (latest["step"], latest["total"], latest["epoch"]) == (12, 12, 2)
    assert latest["loss"] == pytest.approx(2.0015)
    assert latest["metrics"]["cls_loss"] == 0.0015 and latest["metrics"]["box_mAP50"] == 5.3e-05
    assert latest["metrics"]["box_P"] == 0.671
    assert any(r["metrics"].get("cls_loss") == 6.39e-05 for r in _records(tmp_path))


def test_ultralytics_a_row_read_before_its_bar_says_no_step_in_epochs(tmp_path):
    # the first row after a resume at epoch 4, read before its bar was written: no step that
    # would read as epoch 4 against a checkpoint saved at batch 24; then the bar gives it
    header = "      Epoch    GPU_mem   box_loss   cls_loss   dfl_loss  Instances       Size\n"
    cut = "        4/6         0G    0.05037     0.3293    0.02959          4         64:\n"
    bar = "        4/6         0G    0.05037     0.3293    0.02959          4         64: 25% ━━━─── 2/8 2.1it/s\n"
    latest, _ = _read(tmp_path, "ultralytics", header + cut + bar + cut)
    steps = [r.get("step") for r in _records(tmp_path) if r["kind"] == "progress"]
    assert steps and all(step is None or step >= 24 for step in steps), steps
    assert (latest["step"], latest["total"]) in ((26, 48), (24, 48))


ULTRALYTICS_8_3 = (  # Ultralytics 8.3 and before: tqdm's bar
    "      Epoch    GPU_mem   box_loss   cls_loss   dfl_loss  Instances       Size\n"
    "        1/3      2.1G      1.234      2.345      1.456         12        640:  50%|█████"
    "     | 4/8 [00:01<00:01,  3.10it/s]\r"
    "        1/3      2.1G      1.200      2.300      1.400         12        640: 100%|█████"
    "█████| 8/8 [00:02<00:00,  3.10it/s]\n"
    "                 Class     Images  Instances      Box(P          R      mAP50  mAP50-95):"
    " 100%|██████████| 1/1 [00:00<00:00,  5.00it/s]\n"
    "                   all         16        120      0.671      0.552      0.613      0.451\n"
    "\n      Epoch    GPU_mem   box_loss   cls_loss   dfl_loss  Instances       Size\n"
    "        2/3        0G      1.100      2.000      1.300          9        640:  25%|██▌  "
    "     | 2/8 [00:00<00:01,  3.10it/s]\r"
)


def test_ultralytics_8_3_epoch_rows_and_the_validation_row(tmp_path):
    latest, events = _read(tmp_path, "ultralytics", ULTRALYTICS_8_3)
    assert (latest["step"], latest["total"], latest["epoch"]) == (10, 24, 2)
    assert latest["loss"] == pytest.approx(4.4)
    assert latest["metrics"]["box_loss"] == 1.1 and latest["metrics"]["box_mAP50-95"] == 0.451
    assert latest["metrics"]["box_P"] == 0.671
    assert events[0]["step"] == 4 and events[0]["loss"] == pytest.approx(5.035)


TORCHTITAN = (
    "[rank0]:[titan] 2025-03-01 10:00:00,000 - root - INFO - Training starts at step 1, with "
    "local batch size 8, global batch size 8, sequence length 2048, total steps 10 (warmup 2)\n"
    "[rank0]:[titan] 2025-03-01 10:00:05,000 - root - INFO - \x1b[31mstep:  1  \x1b[32mloss: "
    "12.2345  \x1b[38;2;180;60;0mgrad_norm:  3.1000  \x1b[33mmemory: 37.89GiB(39.89%)  "
    "\x1b[34mtps: 1,234  \x1b[36mtflops: 12.34  \x1b[35mmfu: 1.23%\x1b[39m\n"
    "[rank0]:[titan] 2025-03-01 10:00:06,000 - root - INFO - \x1b[31mstep:  2  \x1b[32mloss: "
    " 9.8765  \x1b[33mmemory: 37.89GiB(39.89%)  \x1b[34mtps: 2,345  \x1b[36mtflops: 23.45  "
    "\x1b[35mmfu: 2.34%\x1b[39m\n"
    "[rank0]:[titan] 2025-03-01 10:00:07,000 - root - INFO - \x1b[33mvalidate step: 2  "
    "\x1b[32mloss: 9.9\x1b[39m\n"
)


def test_torchtitan_step_lines_with_colours_and_the_total(tmp_path):
    latest, _ = _read(tmp_path, "torchtitan", TORCHTITAN)
    assert (latest["step"], latest["total"], latest["loss"]) == (2, 10, 9.8765)
    metrics = latest["metrics"]
    assert metrics["tps"] == 2345 and metrics["memory"] == 37.89 and metrics["mfu"] == 2.34
    assert metrics["grad_norm"] == 3.1 and metrics["val_loss"] == 9.9


NANOCHAT = (
    "step 00100/01000 (10.00%) | loss: 3.123456 | grad norm: 0.8123 | lrm: 1.00 | dt: 123.45ms"
    " | tok/sec: 123,456 | mfu: 12.34 | total time: 1.23m\n"
    "Step 00100 | Validation bpb: 1.2345\n"
    "step 00101/01000 (10.10%) | loss: 3.100000 | lrm: 1.00 | dt: 120.00ms | tok/sec: 124,000"
    " | mfu: 12.40 | total time: 1.25m\n"
)


def test_nanochat_step_lines_and_validation_bpb(tmp_path):
    latest, _ = _read(tmp_path, "nanochat", NANOCHAT)
    assert (latest["step"], latest["total"], latest["loss"]) == (101, 1000, 3.1)
    metrics = latest["metrics"]
    assert metrics["tok/sec"] == 124000 and metrics["dt"] == 120.0
    assert metrics["grad_norm"] == 0.8123 and metrics["val_bpb"] == 1.2345


def test_a_custom_regex_names_step_total_loss_and_metrics(tmp_path):
    pattern = r"Step (?P<step>\d+)/(?P<total>\d+).*?loss=(?P<loss>\S+?),.*?acc=(?P<acc>[\d.]+)"
    log = "hello\nStep 5/50 loss=0.9, acc=0.41\nStep 6/50 loss=nan, acc=0.40\n"
    latest, events = _read(tmp_path, pattern, log)
    assert (latest["step"], latest["total"], latest["percent"]) == (6, 50, 12.0)
    assert latest["loss"] == "nan" and latest["metrics"] == {"acc": 0.4}
    assert events[0] == {
        "step": 5,
        "total": 50,
        "percent": 10.0,
        "loss": 0.9,
        "metrics": {"acc": 0.41},
        "steps_per_s": None,
        "eta_s": None,
    }


def test_secrets_never_reach_the_records(tmp_path):
    pattern = r"step (?P<step>\d+) (?P<tok>\S+)=(?P<value>[\d.]+)"
    _read(tmp_path, pattern, "step 1 key=s3cr3t 2.5\nstep 2 tok=1.5\n", mask=[b"s3cr3t"])
    assert "s3cr3t" not in (tmp_path / "progress" / "train.jsonl").read_text()


def test_values_go_to_the_trackers_and_bars_do_not(tmp_path):
    recorder = Recorder()
    tap = LogProgress("hf", str(tmp_path / "p.jsonl"), clock=FakeClock(), trackers=recorder)
    tap.feed(b"\r 3/10 [00:01<00:02, 3it/s]\r 4/10 [00:01<00:02, 3it/s]")
    tap.feed(b"\r{'loss': 0.5, 'learning_rate': 0.001, 'epoch': 0.4}\n")
    tap.close()
    assert recorder.logged == [({"learning_rate": 0.001, "loss": 0.5, "epoch": 0.4}, 4)]
    assert recorder.tables == []  # a log line never makes a table
    assert recorder.finished


def test_stage_trackers_come_from_the_stage_environment(tmp_path):
    assert stage_trackers({}, str(tmp_path)) is None
    env = {"CORRAL_TRACKERS": json.dumps([{"type": "jsonl", "path": "metrics.jsonl"}])}
    trackers = stage_trackers(env, str(tmp_path))
    assert trackers is not None
    trackers.log({"loss": 0.5}, 3)
    trackers.finish()
    assert trackers.wait(30)
    (record,) = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert record["step"] == 3 and record["metrics"] == {"loss": 0.5}
    # the spec's jsonl tracker has no path: it writes to the stage's progress file, as in the job
    progress = tmp_path / "progress" / "train.jsonl"
    env = {"CORRAL_TRACKERS": '[{"type": "jsonl"}]', "CORRAL_PROGRESS_FILE": str(progress)}
    trackers = stage_trackers(env, str(tmp_path))
    trackers.log({"acc": 0.9}, 4)
    trackers.finish()
    assert trackers.wait(30)
    (record,) = [json.loads(x) for x in progress.read_text().splitlines()]
    assert (record["kind"], record["step"], record["metrics"]) == ("metrics", 4, {"acc": 0.9})


def test_the_end_of_an_over_long_line_is_not_read_as_a_line(tmp_path):
    pattern = r"Step (?P<step>\d+)"
    log = "x" * 70_000 + "Step 9\nStep 2\n"
    latest, _ = _read(tmp_path, pattern, log, chunk=4096)
    assert latest["step"] == 2
    assert [r["step"] for r in _records(tmp_path)] == [2]


def test_trackers_are_started_by_the_first_values_only(tmp_path):
    start = [sys.executable, "-c", "import sys; open('started', 'w').write(sys.stdin.read())"]
    trackers = BackgroundTrackers({}, str(tmp_path), command=start)
    trackers.finish()
    assert trackers.wait(10)
    assert not (tmp_path / "started").exists()
    trackers = BackgroundTrackers({}, str(tmp_path), command=start)
    trackers.log({"loss": float("nan")}, 7)
    trackers.finish()
    assert trackers.wait(10)
    # one JSON line a value; a diverged loss travels as NaN (which Python's json reads back)
    assert (tmp_path / "started").read_text() == '{"step": 7, "metrics": {"loss": NaN}}\n'


def test_the_trackers_outlive_a_sigterm_to_the_agents_group_and_end_with_their_input(tmp_path):
    """A preemption may SIGTERM the agent's whole group: the trackers' process goes on until
    the agent ends its input, so nothing logged before is lost."""
    env = {"CORRAL_TRACKERS": json.dumps([{"type": "jsonl", "path": "metrics.jsonl"}])}
    trackers = stage_trackers(env, str(tmp_path))
    assert trackers is not None
    trackers.log({"loss": 0.5}, 1)
    wait_until(lambda: (tmp_path / "metrics.jsonl").exists(), 30, message="the first value")
    proc = trackers._proc
    assert proc is not None
    os.kill(proc.pid, signal.SIGTERM)
    trackers.log({"loss": 0.25}, 2)
    trackers.finish()
    assert trackers.wait(30) and proc.returncode == 0
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(x)["step"] for x in lines] == [1, 2]


@pytest.mark.slow
def test_an_mlflow_run_fed_from_the_log_of_a_preempted_machine_ends_killed(tmp_path):
    """As the job's own MLflow run does (the SDK's SIGTERM handler): KILLED, not FINISHED; the
    next attempt sets it RUNNING again."""
    pytest.importorskip("mlflow")
    from mlflow import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    # the jsonl tracker after MLflow says when a value has been through both (in their order)
    specs = [{"type": "mlflow", "tracking_uri": uri}, {"type": "jsonl", "path": "seen.jsonl"}]
    env = {"CORRAL_TRACKERS": json.dumps(specs), "CORRAL_RUN_ID": "r-1"}
    trackers = stage_trackers(env, str(tmp_path))
    assert trackers is not None
    trackers.log({"loss": 0.5}, 1)
    wait_until((tmp_path / "seen.jsonl").exists, 60, 0.1, "the first value through MLflow")
    assert trackers._proc is not None
    os.kill(trackers._proc.pid, signal.SIGTERM)  # the machine's preemption reaches the group
    trackers.log({"loss": 0.25}, 2)
    trackers.finish()
    assert trackers.wait(60)
    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("corral")
    assert experiment is not None
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.status == "KILLED"
    history = client.get_metric_history(run.info.run_id, "loss")
    assert sorted((m.step, m.value) for m in history) == [(1, 0.5), (2, 0.25)]


def test_trackers_that_do_not_finish_in_time_are_killed(tmp_path):
    trackers = BackgroundTrackers(
        {}, str(tmp_path), command=[sys.executable, "-c", "import time; time.sleep(60)"]
    )
    trackers.log({"loss": 1.0}, 1)
    trackers.finish()
    began = time.monotonic()
    assert not trackers.wait(0.5)
    assert time.monotonic() - began < 5


def test_a_line_that_breaks_nothing_and_a_huge_line_are_skipped(tmp_path):
    log = "{'loss': [1, 2]}\n" + "x" * 200_000 + "\nStep 1/2 loss=0.1, acc=0.2\n"
    latest, _ = _read(tmp_path, "hf", log, chunk=4096)
    assert latest is None
    pattern = r"Step (?P<step>\d+)/(?P<total>\d+).*?loss=(?P<loss>\S+?),.*?acc=(?P<acc>[\d.]+)"
    latest, _ = _read(tmp_path, pattern, log, chunk=4096)
    assert latest["step"] == 1


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1,234", 1234),
        ("37.89GiB(39.89%)", 37.89),
        ("'5e-05'", 5e-05),
        ("-100.00%", -100.0),
        ("6.39e-05", 6.39e-05),
        ("1.2E+3", 1200.0),
        ("inf", math.inf),
    ],
)
def test_numbers_with_units_and_separators(text, value):
    assert number(text) == value


def test_nan_is_a_number():
    assert math.isnan(number("nan"))


def test_every_preset_has_a_parser():
    from corral.wire.progress_patterns import PRESETS

    for name in PRESETS:
        assert make_parser(name).parse("nothing to see here") is None


def test_a_real_agent_reads_a_stage_log_and_runs_a_stage_whose_pattern_is_unusable(
    tmp_path, start_agent
):
    from .helpers import make_plan

    lines = "; ".join(f"echo 'Step {i}/4 loss={1.0 / (i + 1):.3f}, acc=0.{i}'" for i in range(5))
    pattern = r"Step (?P<step>\d+)/(?P<total>\d+) loss=(?P<loss>\S+?), acc=(?P<acc>[\d.]+)"
    plan = make_plan(
        tmp_path,
        [
            {"name": "train", "run": lines, "progress": pattern},
            {"name": "other", "run": "echo hello", "progress": "(unclosed"},
        ],
    )
    client = start_agent(plan)
    status = client.wait_finished()
    assert status["phase"] == "succeeded"
    stages = {s["name"]: s for s in status["stages"]}
    progress = stages["train"]["progress"]
    assert (progress["step"], progress["total"], progress["loss"]) == (4, 4, 0.2)
    assert progress["metrics"] == {"acc": 0.4}
    assert stages["other"]["progress"] is None
    log = (Path(plan.state_dir) / "logs" / "other.log").read_text()
    assert "corral: progress pattern not used: not a preset" in log and "hello" in log


def test_a_stage_whose_pattern_reads_nothing_in_its_log_says_so_in_its_status(
    tmp_path, start_agent
):
    from .helpers import make_plan

    plan = make_plan(
        tmp_path,
        [
            {
                "name": "quiet",
                "run": "echo GPU available: False; echo done",
                "progress": "lightning",
            },
            {"name": "custom", "run": "echo hello", "progress": r"Step (?P<step>\d+)"},
            {"name": "steps", "run": "echo 'iter 7: loss 2.5, time 1.0ms'", "progress": "nanogpt"},
        ],
    )
    status = start_agent(plan).wait_finished()
    stages = {s["name"]: s for s in status["stages"]}
    assert stages["quiet"]["progress_unread"] == {"pattern": "lightning", "lines": 2}
    assert stages["custom"]["progress_unread"] == {"pattern": "regex", "lines": 1}
    assert "progress_unread" not in stages["steps"]
    assert stages["steps"]["progress"]["step"] == 7
