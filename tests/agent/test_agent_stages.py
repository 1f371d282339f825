"""The agent running real stage processes: DAG order, GPU partitions, failure propagation,
setup, preemption, skips and the stage environment."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import psutil

from .helpers import TOKEN, make_plan

STAMPS = "date +%s.%N > {n}.start; sleep {s}; date +%s.%N > {n}.end"


def stamped(name: str, seconds: float = 0.3, **fields) -> dict:
    return {"name": name, "run": STAMPS.format(n=name, s=seconds), **fields}


def times(work: Path, name: str) -> tuple[float, float]:
    return float((work / f"{name}.start").read_text()), float((work / f"{name}.end").read_text())


def test_stages_start_after_their_needs_and_independent_stages_overlap(tmp_path, start_agent):
    plan = make_plan(
        tmp_path,
        [
            stamped("prep", 0.1),
            stamped("left", 0.4, needs=["prep"]),
            stamped("right", 0.4, needs=["prep"]),
            stamped("report", 0.0, needs=["left", "right"]),
        ],
    )
    client = start_agent(plan)
    status = client.wait_finished()
    assert status["phase"] == "succeeded"
    assert {s["name"]: s["state"] for s in status["stages"]} == dict.fromkeys(
        ["prep", "left", "right", "report"], "succeeded"
    )
    work = Path(plan.workdir)
    prep, left, right, report = (times(work, n) for n in ("prep", "left", "right", "report"))
    assert left[0] >= prep[1] and right[0] >= prep[1]
    assert left[0] < right[1] and right[0] < left[1]  # the two branches ran at the same time
    assert report[0] >= max(left[1], right[1])
    types = [e["type"] for e in client.events()]
    assert types[0] == "attempt.started" and types[-1] == "attempt.finished"
    assert types.count("stage.started") == 4 and types.count("stage.finished") == 4


def test_declared_gpus_are_partitioned_between_stages(tmp_path, start_agent):
    record = 'echo "$CUDA_VISIBLE_DEVICES $CORRAL_NUM_GPUS" > $CORRAL_STAGE.gpus; sleep {s}'
    plan = make_plan(
        tmp_path,
        [
            {"name": "detection", "run": record.format(s=0.2), "gpus": [0, 1, 2, 3]},
            {"name": "recognition", "run": record.format(s=0.6), "gpus": [4, 5, 6, 7]},
            {"name": "lm", "run": record.format(s=0), "gpus": 0},
            {"name": "evaluate", "run": record.format(s=0), "gpus": 1, "needs": ["detection"]},
        ],
        devices=[str(i) for i in range(8)],
    )
    client = start_agent(plan)
    status = client.wait_finished()
    assert status["phase"] == "succeeded"
    work = Path(plan.workdir)
    seen = {
        n: (work / f"{n}.gpus").read_text().split()
        for n in ("detection", "recognition", "evaluate")
    }
    assert seen["detection"] == ["0,1,2,3", "4"]
    assert seen["recognition"] == ["4,5,6,7", "4"]
    assert (work / "lm.gpus").read_text() == " 0\n"  # CUDA_VISIBLE_DEVICES is empty
    assert seen["evaluate"] == ["0", "1"]  # the lowest free GPU once detection is done
    assert client.stage(status, "evaluate")["gpus"] == ["0"]


def test_count_based_stages_never_share_a_gpu(tmp_path, start_agent):
    run = 'echo "$CUDA_VISIBLE_DEVICES" > $CORRAL_STAGE.gpus; ' + STAMPS.format(
        n="$CORRAL_STAGE", s=0.3
    )
    stages = [{"name": f"s{i}", "run": run, "gpus": 1} for i in range(4)]
    stages.append({"name": "wide", "run": run, "gpus": "all"})
    plan = make_plan(tmp_path, stages, devices=["7", "8", "9"])
    client = start_agent(plan)
    status = client.wait_finished()
    assert status["phase"] == "succeeded"
    work = Path(plan.workdir)
    held = {
        s["name"]: (
            set((work / f"{s['name']}.gpus").read_text().split()[0].split(",")),
            times(work, s["name"]),
        )
        for s in stages
    }
    assert held["wide"][0] == {"7", "8", "9"}
    names = sorted(held)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            (gpus_a, (start_a, end_a)), (gpus_b, (start_b, end_b)) = held[a], held[b]
            overlap = start_a < end_b and start_b < end_a
            assert not (overlap and gpus_a & gpus_b), (a, b, held[a], held[b])
    waiting = {e["stage"] for e in client.events() if e["type"] == "stage.waiting"}
    assert len(waiting) >= 2  # three GPUs for four single-GPU stages and one 'all'


def test_a_failing_stage_stops_its_siblings_and_fails_the_attempt(tmp_path, start_agent):
    plan = make_plan(
        tmp_path,
        [
            {"name": "bad", "run": "sleep 0.3; exit 3"},
            {"name": "stubborn", "run": "trap '' TERM; sleep 30"},
            {"name": "polite", "run": "trap 'echo got TERM; exit 143' TERM; sleep 30 & wait"},
            {"name": "later", "run": "touch later.ran", "needs": ["bad"]},
        ],
        grace_seconds=0.5,
    )
    client = start_agent(plan)
    status = client.wait_finished(timeout=10)
    assert status["phase"] == "failed"
    assert (status["failed_stage"], status["exit_code"]) == ("bad", 3)
    assert status["reason"] == "stage 'bad' exited with code 3"
    states = {s["name"]: (s["state"], s["exit_code"]) for s in status["stages"]}
    assert states == {
        "bad": ("failed", 3),
        "stubborn": ("stopped", 137),  # ignored SIGTERM: SIGKILL after the grace period
        "polite": ("stopped", 143),
        "later": ("cancelled", None),
    }
    assert not (Path(plan.workdir) / "later.ran").exists()
    assert "got TERM" in (Path(plan.state_dir) / "logs" / "polite.log").read_text()
    finished = {e["stage"]: e for e in client.events() if e["type"] == "stage.finished"}
    assert finished["stubborn"]["data"]["duration_s"] >= 0.3 + 0.5 - 0.05
    for s in status["stages"]:
        if s["pid"]:
            assert not psutil.pid_exists(s["pid"]) or psutil.Process(s["pid"]).status() == "zombie"


def test_a_failing_setup_command_fails_the_attempt_before_any_stage(tmp_path, start_agent):
    plan = make_plan(
        tmp_path,
        [{"name": "train", "run": "touch train.ran"}],
        setup=["echo one", "echo two && exit 4", "echo never"],
    )
    client = start_agent(plan)
    status = client.wait_finished()
    assert (status["phase"], status["failed_stage"], status["exit_code"]) == ("failed", "_setup", 4)
    assert client.stage(status, "train")["state"] == "cancelled"
    assert not (Path(plan.workdir) / "train.ran").exists()
    log = (Path(plan.state_dir) / "logs" / "_setup.log").read_text()
    assert "one" in log and "two" in log and "never" not in log
    setup = [e for e in client.events() if e["type"].startswith("setup.")]
    assert [e["type"] for e in setup] == ["setup.started", "setup.finished"]
    assert setup[1]["data"]["exit_code"] == 4


def test_setup_runs_in_order_in_the_workdir_before_stages(tmp_path, start_agent):
    plan = make_plan(
        tmp_path,
        [{"name": "train", "run": "cat order > seen"}],
        setup=["echo 1 > order", "echo 2 >> order"],
    )
    client = start_agent(plan)
    assert client.wait_finished()["phase"] == "succeeded"
    assert (Path(plan.workdir) / "seen").read_text() == "1\n2\n"


def test_exit_75_ends_the_attempt_preempted(tmp_path, start_agent):
    plan = make_plan(
        tmp_path,
        [{"name": "train", "run": "sleep 0.2; exit 75"}, {"name": "watch", "run": "sleep 30"}],
    )
    client = start_agent(plan)
    status = client.wait_finished(timeout=10)
    assert (status["phase"], status["failed_stage"], status["exit_code"]) == (
        "preempted",
        "train",
        75,
    )
    assert client.stage(status, "train")["state"] == "preempted"
    assert client.stage(status, "watch")["state"] == "stopped"


def test_skipped_stages_are_not_run_and_count_as_done(tmp_path, start_agent):
    plan = make_plan(
        tmp_path,
        [
            {"name": "prep", "run": "touch prep.ran"},
            {"name": "train", "run": "touch train.ran", "needs": ["prep"]},
        ],
        skip_stages=["prep"],
    )
    client = start_agent(plan)
    status = client.wait_finished()
    assert status["phase"] == "succeeded"
    assert client.stage(status, "prep")["state"] == "skipped"
    work = Path(plan.workdir)
    assert (work / "train.ran").exists() and not (work / "prep.ran").exists()
    assert [e["stage"] for e in client.events() if e["type"] == "stage.skipped"] == ["prep"]


def test_a_request_no_node_can_meet_fails_the_attempt_at_once(tmp_path, start_agent):
    plan = make_plan(tmp_path, [{"name": "train", "run": "touch ran", "gpus": 4}], devices=["0"])
    client = start_agent(plan)
    status = client.wait_finished()
    assert (status["phase"], status["failed_stage"]) == ("failed", "train")
    assert "needs 4 GPU(s) but this node has 1" in status["reason"]
    assert not (Path(plan.workdir) / "ran").exists()


def test_stage_environment_has_corral_variables_and_not_the_token(tmp_path, start_agent):
    plan = make_plan(
        tmp_path,
        [{"name": "train", "run": "env -0 > env.bin", "gpus": 2, "env": {"STAGE_ONLY": "s"}}],
        run_id="run-42",
        attempt=3,
        devices=["5", "6"],
        env={"PLAN_VAR": "p", "CORRAL_RUN_ID": "user-cannot-override"},
        grace_seconds=12.5,
        hourly_price=1.25,
        cost_offset_usd=3.5,
        budget_usd=20.0,
    )
    environ = {"PATH": os.environ["PATH"], "CORRAL_AGENT_TOKEN": TOKEN, "FROM_NODE": "n"}
    client = start_agent(plan, environ=environ)
    assert client.wait_finished()["phase"] == "succeeded"
    raw = (Path(plan.workdir) / "env.bin").read_bytes().split(b"\0")
    env = dict(item.decode().split("=", 1) for item in raw if item)
    state = Path(plan.state_dir)
    assert {k: v for k, v in env.items() if k.startswith("CORRAL_")} == {
        "CORRAL_RUN_ID": "run-42",
        "CORRAL_ATTEMPT": "3",
        "CORRAL_STAGE": "train",
        "CORRAL_CHECKPOINT_DIR": plan.checkpoint_dir,
        "CORRAL_NUM_GPUS": "2",
        "CORRAL_GRACE_SECONDS": "12.5",
        "CORRAL_HOURLY_PRICE": "1.25",
        "CORRAL_COST_OFFSET_USD": "3.5",
        "CORRAL_BUDGET_USD": "20.0",
        "CORRAL_PROGRESS_FILE": str(state / "progress" / "train.jsonl"),
        # the plan's checkpoint policy (its defaults here), as the SDK reads it
        "CORRAL_CHECKPOINT_KEEP_LAST": "3",
        "CORRAL_CHECKPOINT_KEEP_BEST": "0",
        "CORRAL_CHECKPOINT_MODE": "min",
        # where its ranks meet: one node, this one, on a free port of it
        "CORRAL_NUM_NODES": "1",
        "CORRAL_NODE_RANK": "0",
        "CORRAL_MASTER_ADDR": "127.0.0.1",
        "CORRAL_MASTER_PORT": env["MASTER_PORT"],
    }
    assert int(env["MASTER_PORT"]) > 0 and env["PET_MASTER_PORT"] == env["MASTER_PORT"]
    assert env["CUDA_VISIBLE_DEVICES"] == "5,6"
    assert (env["PYTHONUNBUFFERED"], env["PLAN_VAR"], env["STAGE_ONLY"], env["FROM_NODE"]) == (
        "1",
        "p",
        "s",
        "n",
    )
    assert Path(plan.checkpoint_dir).is_dir()
    assert os.path.realpath(env["PWD"]) == os.path.realpath(plan.workdir)
    assert TOKEN not in (Path(plan.workdir) / "env.bin").read_text()


def test_children_json_lists_each_running_stage_process_group(tmp_path, start_agent):
    plan = make_plan(tmp_path, [{"name": "a", "run": "sleep 30"}, {"name": "b", "run": "sleep 30"}])
    client = start_agent(plan)
    status = client.wait_until(lambda s: all(st["state"] == "running" for st in s["stages"]))
    children = json.loads((Path(plan.state_dir) / "children.json").read_text())
    assert sorted(c["stage"] for c in children) == ["a", "b"]
    for child in children:
        pid = client.stage(status, child["stage"])["pid"]
        assert child["pgid"] == pid == os.getpgid(pid)
        assert child["pgid"] != os.getpgid(0)
        assert child["create_time"] == psutil.Process(pid).create_time()
    client.post("/stop")
    assert client.wait_finished(timeout=10)["phase"] == "stopped"
    assert json.loads((Path(plan.state_dir) / "children.json").read_text()) == []


def test_what_a_stage_leaves_running_is_stopped_when_it_exits(tmp_path, start_agent):
    plan = make_plan(tmp_path, [{"name": "train", "run": "sleep 30 & echo $! > bg.pid"}])
    client = start_agent(plan)
    status = client.wait_finished(timeout=10)
    assert client.stage(status, "train")["state"] == "succeeded"
    leftover = int((Path(plan.workdir) / "bg.pid").read_text())
    assert not psutil.pid_exists(leftover) or psutil.Process(leftover).status() == "zombie"


def test_a_stage_that_cannot_be_started_fails_with_127(tmp_path, start_agent):
    plan = make_plan(tmp_path, [{"name": "train", "run": "true"}], workdir=str(tmp_path / "gone"))
    client = start_agent(plan)
    status = client.wait_finished()
    assert (status["phase"], status["failed_stage"], status["exit_code"]) == (
        "failed",
        "train",
        127,
    )
    log = (Path(plan.state_dir) / "logs" / "train.log").read_text()
    assert "corral: could not start: No such file or directory" in log
    assert status["reason"] == "stage 'train' could not start: No such file or directory"


def test_a_bare_python_in_a_stage_is_the_interpreter_running_corral(tmp_path, start_agent):
    plan = make_plan(tmp_path, [{"name": "which", "run": "command -v python > which.txt"}])
    client = start_agent(plan, environ={"PATH": "/usr/bin:/bin"})
    assert client.wait_finished()["phase"] == "succeeded"
    found = (Path(plan.workdir) / "which.txt").read_text().strip()
    assert os.path.dirname(found) == os.path.dirname(sys.executable)


def test_the_jobs_secret_values_are_masked_in_the_stage_logs(tmp_path, start_agent):
    plan = make_plan(tmp_path, [{"name": "leak", "run": 'echo "token is $HF_TOKEN; short $PIN"'}])
    env = {
        **os.environ,
        "HF_TOKEN": "hf_s3cr3t_value_123",
        "PIN": "1234",
        "CORRAL_SECRET_NAMES": "HF_TOKEN,PIN",
    }
    client = start_agent(plan, environ=env)
    assert client.wait_finished()["phase"] == "succeeded"
    text = (Path(plan.state_dir) / "logs" / "leak.log").read_text()
    assert "token is ***;" in text and "hf_s3cr3t" not in text
    assert "short 1234" in text  # under 6 characters: not masked (documented)


def test_the_attempt_finished_event_is_recorded_before_the_phase_turns_terminal(tmp_path):
    """Whoever sees the attempt ended in GET /status finds its attempt.finished event in
    GET /events too (a reader in between saw a terminal phase and no event)."""
    from corral.agent.main import Agent

    agent = Agent(make_plan(tmp_path, [{"name": "s", "run": "exit 3"}]), TOKEN, hooks=[])
    seen: list[str] = []
    emit = agent.events.emit

    def recording(type: str, *args, **kw):
        if type == "attempt.finished":
            seen.append(agent.runner.phase.value)
        return emit(type, *args, **kw)

    agent.events.emit = recording  # type: ignore[method-assign]
    agent.start()
    try:
        assert agent.wait(20)
    finally:
        agent.close(timeout=10)
    assert seen and seen[0] not in ("succeeded", "failed", "preempted", "stopped")
    assert agent.runner.phase.value == "failed"
