"""``corral pool scale N`` and ``corral pool restart`` against real Redis and a real
``corral worker``: scaling up starts workers that answer in the pool, scaling down stops the
idle ones warm, a restart goes one worker at a time and each answers again with a new
process; bad input is one line. The board's choices (idle workers first) on their own."""

from __future__ import annotations

import json
import signal
from dataclasses import dataclass, field
from pathlib import Path

from typer.testing import CliRunner

from corral.cli.app import app
from corral.queue.board import Board
from corral.queue.config import SlotConfig
from corral.queue.control import Request, read_state, send
from corral.queue.registry import WorkerInfo
from support.pool import Workers, scratch_pool
from support.waiting import wait_until


def _pool(*args: str, home: Path, settings) -> object:
    return CliRunner().invoke(
        app,
        [
            "pool",
            *args,
            "--home",
            str(home),
            "--broker",
            settings.broker_url,
            "--pool",
            settings.name,
        ],
    )


def _live(workers: Workers) -> dict[str, int]:
    return {w.name: w.pid for w in workers.workers()}


def test_scale_up_and_down_and_a_rolling_restart(tmp_path: Path) -> None:
    with scratch_pool() as settings:
        workers = Workers(settings, tmp_path, fake_gpus="L40S:4")
        try:
            workers.start("box", "0,1,2,3", "--workers", "1", wait=False)
            workers.wait_registered({"box-gpu0"}, "box")
            home = tmp_path / "box" / "worker"
            assert set(_live(workers)) == {"box-gpu0"}

            out = _pool("scale", "4", "--json", home=home, settings=settings)
            assert out.exit_code == 0, out.output
            view = json.loads(out.stdout)
            names = {f"box-gpu{i}" for i in range(4)}
            assert set(view["answering"]) == names and view["stopping"] == []
            live = _live(workers)
            assert set(live) == names
            state = read_state(home)
            assert state is not None
            assert {w.name: w.pid for w in state.workers} == live  # the pids that answer

            out = _pool("scale", "2", home=home, settings=settings)
            assert out.exit_code == 0, out.output
            assert "2 of 2 workers answer" in out.stdout
            # the two stopped (warm: idle, so at once) leave the pool
            wait_until(lambda: set(_live(workers)) == {"box-gpu0", "box-gpu1"}, 30, 0.1)

            def exited() -> bool:
                state = read_state(home)
                return state is not None and all(w.pid is None for w in state.workers[2:])

            wait_until(exited, 30, 0.1, "the scaled-down workers' processes to exit")

            before = _live(workers)
            out = _pool("restart", "--json", home=home, settings=settings)
            assert out.exit_code == 0, out.output
            assert sorted(json.loads(out.stdout)["restarted"]) == ["box-gpu0", "box-gpu1"]
            after = _live(workers)
            assert set(after) == set(before)
            assert all(after[n] != before[n] for n in before), (before, after)
            # one at a time: each answered again before the next was asked to stop
            said = [
                line.split("worker ", 1)[1]
                for line in (tmp_path / "box" / "worker.out").read_text().splitlines()
                if ": restart" in line
            ]
            assert len(said) == 4 and [s.split(":")[1].strip()[:9] for s in said] == [
                "restartin",
                "restarted",
                "restartin",
                "restarted",
            ], said

            # the restarted worker's own log on this box, through `corral pool logs`
            out = CliRunner().invoke(
                app, ["pool", "logs", "box-gpu1", "-n", "400", "--home", str(home)]
            )
            assert out.exit_code == 0, out.output
            assert out.stdout.count("@") and out.stdout.count(" ready.") == 2  # started twice

            out = _pool("scale", "9", home=home, settings=settings)
            assert out.exit_code != 0
            assert "scale 9: this box has 4 workers" in out.output
            assert len(out.output.strip().splitlines()) == 1
            out = _pool("restart", "box-gpu7", home=home, settings=settings)
            assert out.exit_code != 0 and "no worker box-gpu7" in out.output
            assert len(out.output.strip().splitlines()) == 1
        finally:
            workers.stop_all()


def test_no_worker_on_this_box_is_one_line(tmp_path: Path) -> None:
    with scratch_pool() as settings:
        out = _pool("scale", "2", home=tmp_path / "nowhere", settings=settings)
        assert out.exit_code != 0 and "no `corral worker` runs on this box" in out.output
        assert len(out.output.strip().splitlines()) == 1


@dataclass
class _Slot:
    config: SlotConfig
    active: bool = True
    restarting: bool = False
    start_at: float = 0.0
    pid: int | None = 100
    signals: list[int] = field(default_factory=list)

    def signal(self, sig: int) -> None:
        self.signals.append(sig)


def _slots(n: int) -> list[_Slot]:
    return [
        _Slot(
            SlotConfig(
                name=f"b-gpu{i}",
                host="b",
                bind_host="127.0.0.1",
                advertise_host="127.0.0.1",
                gpus=[str(i)],
                gpu_type="L40S",
                queue="q",
                home="/tmp",
                cpus=1,
                memory_gb=1.0,
            ),
            pid=100 + i,
        )
        for i in range(n)
    ]


def _info(name: str, pid: int, busy: bool) -> WorkerInfo:
    return WorkerInfo(
        name=name,
        host="b",
        pid=pid,
        queue="q",
        gpu_type="L40S",
        gpus=["0"],
        cpus=1,
        memory_gb=1.0,
        started_at=0.0,
        key="k" if busy else "",
    )


def test_scaling_down_stops_idle_workers_first_and_restarts_busy_ones_last(
    tmp_path: Path,
) -> None:
    slots = _slots(4)
    pool = [_info(s.config.name, s.pid or 0, busy=s.config.name == "b-gpu3") for s in slots]
    board = Board(tmp_path, slots, "p", lambda: pool, lambda _line: None, pid=1)
    send(tmp_path, Request.scale(2))
    board.step(stopping=False)
    # b-gpu3 runs an attempt: the idle ones go first, the last of the box's order first
    assert [s.config.name for s in slots if not s.active] == ["b-gpu1", "b-gpu2"]
    assert slots[1].signals == [signal.SIGTERM] and slots[3].signals == []

    for s in slots:
        s.active = True
    send(tmp_path, Request.rolling([]))
    board.step(stopping=False)
    assert board.current is not None and board.current.config.name == "b-gpu0"
    assert board.state.restart_left[-1] == "b-gpu3"  # the busy one last
    send(tmp_path, Request.scale(7))
    board.step(stopping=False)
    refused = list(board.state.refused.values())
    assert refused == ["scale 7: this box has 4 workers (one per GPU it serves)"]
