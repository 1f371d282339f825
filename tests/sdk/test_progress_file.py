"""Review of the SDK's progress file writer: non-finite numbers, values that cannot be turned
into JSON, records from several processes at once."""

from __future__ import annotations

import json
import multiprocessing
import sys

from corral.sdk import progress_file
from corral.sdk.trackers.jsonl import JsonlTracker


def _records(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_non_finite_numbers_are_strings_distinct_from_no_value(tmp_path):
    path = tmp_path / "p.jsonl"
    tracker = JsonlTracker(path)
    tracker.progress(1, total=9, loss=float("nan"), metrics={"a": float("inf"), "b": None})
    tracker.progress(2, total=9, loss=float("-inf"))
    tracker.progress(3, total=9)
    first, second, third = _records(path)
    assert first["loss"] == "nan" and first["metrics"] == {"a": "inf", "b": None}
    assert second["loss"] == "-inf"
    assert "loss" not in third
    for line in path.read_text().splitlines():  # strict JSON: no NaN / Infinity tokens
        json.loads(line, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))


def test_non_finite_numpy_scalars_are_strings_too(tmp_path):
    import pytest

    np = pytest.importorskip("numpy")
    path = tmp_path / "p.jsonl"
    progress_file.emit("metrics", file=str(path), step=1, metrics={"x": np.float32("nan")})
    assert _records(path)[0]["metrics"] == {"x": "nan"}


class _Unprintable:
    def __str__(self):
        raise RuntimeError("no text for you")

    __repr__ = __str__


class _SelfItem:
    def item(self):
        return self


def test_a_value_that_cannot_be_written_never_raises_into_the_loop(tmp_path):
    path = tmp_path / "p.jsonl"
    assert progress_file.emit("metrics", file=str(path), step=1, metrics={"a": _Unprintable()})
    assert progress_file.emit("metrics", file=str(path), step=2, metrics={"b": _SelfItem()})
    assert progress_file.emit("metrics", file=str(path), step=3, metrics={_Unprintable(): 1})
    a, b, c = _records(path)
    assert a["step"] == 1 and isinstance(a["metrics"]["a"], str)
    assert b["step"] == 2 and isinstance(b["metrics"]["b"], str)
    assert c["step"] == 3


def test_unicode_and_lone_surrogates_are_written(tmp_path):
    path = tmp_path / "p.jsonl"
    assert progress_file.emit(
        "metrics", file=str(path), step=1, metrics={"wer_é": 0.5, "k": "\udcff"}
    )
    (rec,) = _records(path)
    assert rec["metrics"]["wer_é"] == 0.5


def _writer(path: str, rank: int) -> None:
    for i in range(100):
        metrics = {f"k{j}": "x" * 40 for j in range(300)}  # ~15 KB a line
        progress_file.emit("metrics", file=path, step=i, rank=rank, metrics=metrics)


def test_several_processes_appending_keep_every_line_whole(tmp_path):
    path = tmp_path / "p.jsonl"
    ctx = multiprocessing.get_context("spawn" if sys.platform == "darwin" else "fork")
    procs = [ctx.Process(target=_writer, args=(str(path), r)) for r in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    records = _records(path)
    assert len(records) == 400
