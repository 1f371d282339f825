"""HighLossLogger inputs found in review: a ``(batch, 1)`` loss column, and losses that are
not numbers (a ValueError naming the sample, not a bare TypeError from ``float``)."""

from __future__ import annotations

import pytest

from corral.sdk.high_loss import HighLossLogger


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
