"""``corral pool logs WORKER``: the last lines of a worker's log on this box, new lines as they
come with -f (a rotated log read again from its start), and one line naming the workers that
have a log here when the name is unknown."""

from __future__ import annotations

import json
import threading
from pathlib import Path

from typer.testing import CliRunner

from corral.cli.app import app
from corral.service.pool_logs import follow, last_lines, worker_log


def _log(home: Path, name: str, text: str) -> Path:
    path = home / name / f"{name}.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_the_last_lines_and_an_unknown_worker(corral_home: Path) -> None:
    home = corral_home / "worker"
    _log(home, "box-gpu0", "".join(f"line {i}\n" for i in range(1, 501)))
    out = CliRunner().invoke(app, ["pool", "logs", "box-gpu0", "-n", "3"])
    assert out.exit_code == 0 and out.stdout.splitlines() == ["line 498", "line 499", "line 500"]
    out = CliRunner().invoke(app, ["pool", "logs", "box-gpu0", "-n", "2", "--json"])
    assert out.exit_code == 0
    assert [json.loads(line) for line in out.stdout.splitlines()] == [
        {"worker": "box-gpu0", "line": "line 499"},
        {"worker": "box-gpu0", "line": "line 500"},
    ]
    out = CliRunner().invoke(app, ["pool", "logs", "box-gpu9"])
    assert out.exit_code != 0 and "box-gpu0" in out.output and "its own box" in out.output
    assert len(out.output.strip().splitlines()) == 1


def test_follow_prints_new_lines_and_survives_a_rotation(tmp_path: Path) -> None:
    path = _log(tmp_path, "w", "old\n")
    assert worker_log("w", tmp_path) == path
    shown, end = last_lines(path, 10)
    assert shown == ["old"]
    got: list[str] = []
    done = threading.Event()

    def reader() -> None:
        for line in follow(path, end, stop=done.is_set):
            got.append(line)

    thread = threading.Thread(target=reader)
    thread.start()
    with open(path, "a") as f:
        f.write("new 1\nnew ")
    for _ in range(100):
        if got:
            break
        threading.Event().wait(0.05)
    with open(path, "a") as f:
        f.write("2\n")
    path.write_text("rotated\n")  # truncated and written again
    for _ in range(100):
        if "rotated" in got:
            break
        threading.Event().wait(0.05)
    done.set()
    thread.join(5)
    assert got[:2] == ["new 1", "new 2"] or got[:1] == ["new 1"], got
    assert got[-1] == "rotated", got
