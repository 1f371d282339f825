"""``corral logs`` prints each attempt's lines in the order the job wrote them, a progress
bar's ``\\r`` redraws included (they once had no timestamp and came before the attempt's
other lines, though the stored log is in order)."""

from __future__ import annotations

from typer.testing import CliRunner

from corral import paths
from corral.cli.app import app
from corral.spec import load_spec_text
from corral.store import Store

T1, T2, T3 = "2026-11-28T10:00:01.000Z", "2026-11-28T10:00:02.000Z", "2026-11-28T10:00:03.000Z"


def _run_with_logs(logs: dict[int, str]) -> str:
    store = Store.open()
    spec = load_spec_text("name: bars\nstages: [{name: train, run: 'true'}]\n")
    run = store.create_run(
        name="bars",
        spec=spec.model_dump(mode="json"),
        spec_hash="h",
        spec_path="corral.yaml",
        workdir="/tmp",
    )
    store.transition(run.id, "PROVISIONING", "launching", attempt=max(logs))
    for attempt, text in logs.items():
        path = paths.home() / "runs" / run.id / "logs" / f"a{attempt}" / "train.log"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return run.id


def test_logs_prints_bar_redraws_where_they_were_written_with_their_time() -> None:
    bar = "\r  0%|          | 0/20 [00:00<?, ?it/s]\r 50%|#####     | 10/20 [00:01<00:01]"
    run_id = _run_with_logs(
        {
            1: f"{T1} loading\n{T2} {bar}\r{' ' * 40}\r{{'loss': 2.5}}\n{T3} saved\n",
            2: f"{T1} resumed\n{T2} {bar}\n",
        }
    )
    result = CliRunner().invoke(app, ["logs", run_id, "--timestamps"], terminal_width=200)
    assert result.exit_code == 0, result.output
    lines = [line.split("| ", 1)[1] for line in result.output.splitlines() if "| " in line]
    assert lines == [
        f"{T1} loading",
        f"{T2}   0%|          | 0/20 [00:00<?, ?it/s]",
        f"{T2}  50%|#####     | 10/20 [00:01<00:01]",
        f"{T2} {{'loss': 2.5}}",
        f"{T3} saved",
        f"{T1} resumed",
        f"{T2}   0%|          | 0/20 [00:00<?, ?it/s]",
        f"{T2}  50%|#####     | 10/20 [00:01<00:01]",
    ]
    assert "── attempt 2 ──" in result.output
    assert result.output.index("saved") < result.output.index("── attempt 2 ──")


def test_logs_drops_the_cursor_moves_of_a_redraw_but_keeps_its_colours() -> None:
    # Rich's bar drawn for a terminal (Lightning, `progress: lightning`): cursor up, erase line
    row = "\x1b[?25l\x1b[2K\x1b[1A\x1b[2K\x1b[35mEpoch 0/2\x1b[0m 5/16 v_num: 0.000"
    run_id = _run_with_logs({1: f"{T1} {row}\r\x1b[2K\x1b[1A\n{T2} after\n"})
    result = CliRunner().invoke(app, ["logs", run_id], terminal_width=200)
    assert result.exit_code == 0, result.output
    lines = [line.split("| ", 1)[1] for line in result.output.splitlines() if "| " in line]
    assert lines == ["\x1b[35mEpoch 0/2\x1b[0m 5/16 v_num: 0.000", "after"]
