"""CER/WER inputs that are not strings or sequences of strings: a ValueError saying what to
pass, never a TypeError from inside or a rate computed from the wrong thing."""

from __future__ import annotations

import pytest

from corral.sdk.metrics import cer, cer_per_sample, wer, wer_per_sample


@pytest.mark.parametrize("fn", [cer, wer, cer_per_sample, wer_per_sample])
@pytest.mark.parametrize(
    ("refs", "hyps", "message"),
    [
        (None, None, "got NoneType for the references"),
        (["a"], None, "got NoneType for the hypotheses"),
        (3, 4, "got int for the references"),
        (b"abc", b"abc", "the references are bytes; decode them to str first"),
        ({"a": 1}, {"a": 1}, "got dict for the references"),
        ({"a"}, {"a"}, "got set for the references"),  # no order: pairs would be arbitrary
    ],
)
def test_what_is_not_strings_or_sequences_is_a_clear_value_error(fn, refs, hyps, message):
    with pytest.raises(ValueError, match=message):
        fn(refs, hyps)


def test_bytes_items_name_the_sample():
    with pytest.raises(ValueError, match=r"sample 1 is not a pair of strings \(bytes, str\)"):
        cer(["a", b"b"], ["a", "b"])


def test_tuples_generators_and_numpy_arrays_of_strings_still_work():
    np = pytest.importorskip("numpy")
    assert cer(("ab",), ["ab"]) == 0.0
    assert wer((r for r in ["a b"]), (h for h in ["a c"])) == 0.5
    assert cer_per_sample(np.array(["ab", "cd"]), np.array(["ab", "ce"])) == [0.0, 0.5]
