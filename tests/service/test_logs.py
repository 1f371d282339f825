"""Reading a run's copied stage logs: new complete lines for a follower, chunks from an
offset for a pager, and clear errors for a stage or attempt the run does not have."""

from __future__ import annotations

import pytest

from corral.errors import BadInput, NotFound
from corral.service.logs import log_files, log_tail, open_logs, read_log
from corral.store import Store

from .helpers import record_run, resolved_spec, write_log

TS = "2025-01-02T03:04:05.000Z"


def test_a_tailer_gives_complete_lines_once_in_attempt_order() -> None:
    store = Store.open()
    run_id = record_run(store)
    store.transition(run_id, "PROVISIONING", "launching", attempt=2)
    write_log(run_id, 2, "train", f"{TS} second attempt\n")
    write_log(run_id, 1, "train", f"{TS} first\n{TS} partial")
    tailer = open_logs(run_id)
    assert tailer.stage_names == ["train"]
    lines = tailer.read()
    assert [(ln.attempt, ln.stage, ln.ts, ln.text) for ln in lines] == [
        (1, "train", TS, "first"),
        (2, "train", TS, "second attempt"),
    ]
    assert tailer.read() == []  # nothing new; the partial line waits for its end
    write_log(run_id, 1, "train", " line\n")
    assert [ln.text for ln in tailer.read()] == ["partial line"]
    assert [ln.attempt for ln in open_logs(run_id, attempt=2).read()] == [2]
    assert open_logs(run_id, from_end=True).read() == []
    assert [(f.attempt, f.stage) for f in log_files(run_id)] == [(1, "train"), (2, "train")]


def test_setup_is_a_stage_of_a_spec_with_setup_commands() -> None:
    store = Store.open()
    spec = resolved_spec("name: s\nsetup: [echo hi]\nrun: echo go\n")
    run_id = record_run(store, spec=spec)
    write_log(run_id, 1, "_setup", "hi\n")
    tailer = open_logs(run_id, stages=["_setup"])
    assert tailer.stage_names == ["main", "_setup"]
    assert [(ln.stage, ln.ts, ln.text) for ln in tailer.read()] == [("_setup", "", "hi")]


def test_read_log_pages_by_offset_and_ends_chunks_at_a_line_end() -> None:
    store = Store.open()
    run_id = record_run(store)
    write_log(run_id, 1, "train", "one\ntwo\nthree\n")
    first = read_log(run_id, "train", max_bytes=6)
    assert (first.text, first.offset, first.next_offset, first.eof) == ("one\n", 0, 4, False)
    rest = read_log(run_id, "train", offset=first.next_offset)
    assert (rest.text, rest.next_offset, rest.eof) == ("two\nthree\n", 14, True)
    again = read_log(run_id, "train", offset=rest.next_offset)
    assert (again.text, again.next_offset, again.eof) == ("", 14, True)
    long_line = read_log(run_id, "train", offset=4, max_bytes=2)
    assert (long_line.text, long_line.next_offset) == ("tw", 6)  # one line longer than a chunk
    assert read_log(run_id, "train", attempt=1).attempt == 1


def test_a_log_not_copied_yet_reads_as_empty() -> None:
    run_id = record_run(Store.open())
    chunk = read_log(run_id, "train")
    assert (chunk.text, chunk.next_offset, chunk.eof) == ("", 0, True)


def test_unknown_stage_attempt_or_run_and_bad_offsets_are_one_line_errors() -> None:
    run_id = record_run(Store.open())
    with pytest.raises(NotFound, match=r"has no stage 'eval' \(stages: train\)"):
        open_logs(run_id, stages=["eval"])
    with pytest.raises(NotFound, match=r"has no attempt 3 \(attempts: 1..0\)"):
        read_log(run_id, "train", attempt=3)
    with pytest.raises(NotFound, match="'nope'"):
        open_logs("nope")
    with pytest.raises(BadInput, match="offset must be >= 0"):
        read_log(run_id, "train", offset=-1)
    with pytest.raises(BadInput, match="max_bytes must be between"):
        read_log(run_id, "train", max_bytes=0)


def test_progress_bar_redraws_keep_their_place_among_their_attempts_lines() -> None:
    """A record holds what the job wrote up to its newline, a bar's ``\\r`` redraws too: each
    redraw is a line with the record's time, where it was written (they once had no time and
    came first)."""
    store = Store.open()
    run_id = record_run(store)
    store.transition(run_id, "PROVISIONING", "launching", attempt=2)
    t1, t2, t3 = TS, "2025-01-02T03:04:06.000Z", "2025-01-02T03:04:07.000Z"
    bar = "\r 10%|#         | 1/10 [00:01<00:09]\r 20%|##        | 2/10 [00:02<00:08]"
    write_log(run_id, 2, "train", f"{t1} start\n{t2} {bar}\r{' ' * 30}\r{{'loss': 1.5}}\n")
    write_log(run_id, 2, "train", f"{t3} done\r\n{t3} \n")
    write_log(run_id, 1, "train", f"{t3} first\n")
    expected = [
        (1, t3, "first"),
        (2, t1, "start"),
        (2, t2, " 10%|#         | 1/10 [00:01<00:09]"),
        (2, t2, " 20%|##        | 2/10 [00:02<00:08]"),
        (2, t2, "{'loss': 1.5}"),
        (2, t3, "done"),
        (2, t3, ""),
    ]
    assert [(ln.attempt, ln.ts, ln.text) for ln in open_logs(run_id).read()] == expected
    tail = [(ln.attempt, ln.ts, ln.text) for ln in log_tail(run_id, lines=4)]
    assert tail == expected[3:]
