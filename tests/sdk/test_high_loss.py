from __future__ import annotations

import json
import math

import numpy as np
import pytest

from corral.sdk import HighLossLogger

from .recording import RecordingTracker


def test_keeps_the_n_highest_losses_across_batches_worst_first():
    hl = HighLossLogger(n=3)
    hl.add(["a", "b", "c"], [0.1, 0.9, 0.3])
    hl.add(["d", "e"], [0.5, 0.05])
    hl.add(["f"], [2.0])
    assert [(r["id"], r["loss"]) for r in hl.worst()] == [("f", 2.0), ("b", 0.9), ("d", 0.5)]
    assert len(hl) == 3


def test_keeps_inputs_and_outputs_of_the_kept_samples():
    hl = HighLossLogger(n=1)
    hl.add([1, 2], [0.2, 0.7], inputs=["in1", "in2"], outputs=["out1", "out2"])
    assert hl.worst() == [{"id": 2, "loss": 0.7, "input": "in2", "output": "out2"}]


def test_nan_loss_ranks_above_every_number():
    hl = HighLossLogger(n=2)
    hl.add(["x", "y", "z"], [5.0, math.nan, 1.0])
    worst = hl.worst()
    assert worst[0]["id"] == "y" and math.isnan(worst[0]["loss"])
    assert worst[1]["id"] == "x"


def test_ties_keep_the_sample_added_first():
    hl = HighLossLogger(n=2)
    hl.add(["a", "b", "c"], [1.0, 1.0, 1.0])
    assert [r["id"] for r in hl.worst()] == ["a", "b"]


def test_accepts_numpy_arrays_and_torch_tensors():
    torch = pytest.importorskip("torch")
    hl = HighLossLogger(n=2)
    hl.add(np.array([7, 8]), np.array([0.5, 0.25], dtype=np.float32))
    hl.add(torch.tensor([9]), torch.tensor([3.0], requires_grad=True))
    assert [(r["id"], r["loss"]) for r in hl.worst()] == [(9, 3.0), (7, 0.5)]


def test_mismatched_lengths_are_a_value_error():
    hl = HighLossLogger()
    with pytest.raises(ValueError, match="3 ids but 2 losses"):
        hl.add([1, 2, 3], [0.1, 0.2])
    with pytest.raises(ValueError, match="2 ids but 1 inputs"):
        hl.add([1, 2], [0.1, 0.2], inputs=["only one"])


def test_flush_sends_a_table_to_the_tracker_and_clears():
    tracker = RecordingTracker()
    hl = HighLossLogger(n=2, tracker=tracker, name="val/worst")
    hl.add(["a", "b", "c"], [0.3, 0.2, 0.1])
    rows = hl.flush(step=40)
    assert tracker.tables == [("val/worst", rows, 40)]
    assert [r["id"] for r in rows] == ["a", "b"]
    assert hl.worst() == [] and hl.flush(step=41) == []
    assert len(tracker.tables) == 1  # nothing sent for an empty flush


def test_flush_without_a_tracker_writes_a_table_record_to_the_progress_file(tmp_path, monkeypatch):
    progress = tmp_path / "progress.jsonl"
    monkeypatch.setenv("CORRAL_PROGRESS_FILE", str(progress))
    hl = HighLossLogger(n=5)
    hl.add(["s1"], [1.5], inputs=["hello"])
    hl.flush(step=7)
    records = [json.loads(line) for line in progress.read_text().splitlines()]
    assert records[-1]["kind"] == "table"
    assert records[-1]["name"] == "high_loss"
    assert records[-1]["step"] == 7
    assert records[-1]["rows"] == [{"id": "s1", "loss": 1.5, "input": "hello"}]


def test_n_must_be_positive():
    with pytest.raises(ValueError):
        HighLossLogger(n=0)


def test_nan_ranks_above_plus_infinity_whatever_the_order_added():
    for order in ([math.inf, math.nan], [math.nan, math.inf]):
        hl = HighLossLogger(n=1)
        hl.add(["first", "second"], order)
        assert [math.isnan(r["loss"]) for r in hl.worst()] == [True]
    hl = HighLossLogger(n=4)
    hl.add(["fin", "ninf", "inf", "nan", "nan2"], [3.0, -math.inf, math.inf, math.nan, math.nan])
    assert [r["id"] for r in hl.worst()] == ["nan", "nan2", "inf", "fin"]


# HighLossLogger inputs found in review: a ``(batch, 1)`` loss column, and losses that are not
# numbers (a ValueError naming the sample, not a bare TypeError from ``float``).


def test_a_batch_by_one_loss_column_counts_as_one_loss_per_sample():
    worst = HighLossLogger(n=2)
    worst.add(["a", "b", "c"], [[0.5], [2.0], [1.0]])
    assert [(r["id"], r["loss"]) for r in worst.worst()] == [("b", 2.0), ("c", 1.0)]


def test_a_torch_keepdim_loss_column_works():
    torch = pytest.importorskip("torch")
    worst = HighLossLogger(n=1)
    worst.add(torch.tensor([1, 2]), torch.tensor([[0.25], [0.75]], requires_grad=True))
    assert worst.worst() == [{"id": 2, "loss": 0.75}]


@pytest.mark.parametrize(
    ("losses", "message"),
    [
        ([None, 1.0], r"loss 0 is not a number: None"),
        ([1.0, "high"], r"loss 1 is not a number: 'high'"),
        ([[1.0, 2.0], [3.0, 4.0]], r"loss 0 is not a number: \[1.0, 2.0\]"),
    ],
)
def test_losses_that_are_not_numbers_are_a_clear_value_error(losses, message):
    with pytest.raises(ValueError, match=message):
        HighLossLogger(n=2).add(["a", "b"], losses)
