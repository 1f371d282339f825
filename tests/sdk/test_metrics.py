from __future__ import annotations

import unicodedata

import jiwer
import pytest

from corral.sdk import cer, cer_per_sample, wer, wer_per_sample

NFC_CAFE = unicodedata.normalize("NFC", "café")
NFD_CAFE = unicodedata.normalize("NFD", "café")


def test_cer_counts_one_substitution_over_reference_length():
    assert cer("abc", "abd") == pytest.approx(1 / 3)


def test_wer_is_total_edits_over_total_reference_words():
    refs = ["the cat sat", "on the mat"]
    hyps = ["the cat sit", "on mat"]  # 1 substitution + 1 deletion over 6 words
    assert wer(refs, hyps) == pytest.approx(2 / 6)
    assert wer_per_sample(refs, hyps) == pytest.approx([1 / 3, 1 / 3])


def test_corpus_rate_weights_long_references_more_than_the_mean_of_samples():
    refs, hyps = ["a", "b c d e"], ["x", "b c d e"]
    assert wer(refs, hyps) == pytest.approx(1 / 5)
    assert wer_per_sample(refs, hyps) == pytest.approx([1.0, 0.0])


def test_insertions_can_push_the_rate_above_one():
    assert wer("a", "a b c") == pytest.approx(2.0)
    assert cer("ab", "abcd") == pytest.approx(1.0)


def test_cer_counts_spaces_as_characters():
    assert cer("a b", "ab") == pytest.approx(1 / 3)


def test_matches_jiwer_on_references_without_empties():
    refs = ["hello world foo", "one two three four", "x"]
    hyps = ["hello word", "one too three four five", "y z"]
    assert wer(refs, hyps) == pytest.approx(jiwer.wer(refs, hyps))
    assert cer(refs, hyps) == pytest.approx(jiwer.cer(refs, hyps))


def test_nfc_and_nfd_forms_of_the_same_text_are_equal():
    assert NFC_CAFE != NFD_CAFE and len(NFD_CAFE) == 5
    assert cer(NFC_CAFE, NFD_CAFE) == 0.0
    assert wer([f"un {NFD_CAFE} noir"], [f"un {NFC_CAFE} noir"]) == 0.0
    assert cer_per_sample([NFD_CAFE], [NFC_CAFE]) == [0.0]


def test_a_decomposed_accent_counts_as_one_character_after_normalisation():
    # "résumé" has 6 characters once composed; two accents dropped = 2 substitutions.
    assert cer(unicodedata.normalize("NFD", "résumé"), "resume") == pytest.approx(2 / 6)


def test_empty_reference_adds_its_hypothesis_as_insertions_in_the_corpus_rate():
    assert wer(["", "a b"], ["x y", "a b"]) == pytest.approx(2 / 2)
    assert cer(["", "abcd"], ["", "abcd"]) == 0.0


def test_all_empty_references_score_zero_if_hypotheses_empty_else_one():
    assert cer([""], [""]) == 0.0
    assert wer(["", ""], ["", "word"]) == 1.0


def test_per_sample_empty_reference_scores_zero_or_one():
    assert cer_per_sample(["", "", "ab"], ["", "x", "ab"]) == [0.0, 1.0, 0.0]
    assert wer_per_sample(["", ""], ["  ", "a b c"]) == [0.0, 1.0]


def test_length_mismatch_is_a_clear_value_error():
    with pytest.raises(ValueError, match="2 references but 1 hypotheses"):
        wer(["a", "b"], ["a"])
    with pytest.raises(ValueError, match="cer_per_sample: 1 references but 3"):
        cer_per_sample(["a"], ["a", "b", "c"])


def test_mixing_a_string_and_a_list_is_a_value_error():
    with pytest.raises(ValueError, match="not a mix"):
        cer("abc", ["abc"])


def test_non_string_items_are_a_value_error():
    with pytest.raises(ValueError, match="sample 1 is not a pair of strings"):
        wer(["a", None], ["a", "b"])  # type: ignore[list-item]


def test_no_samples_is_an_error_for_corpus_and_empty_for_per_sample():
    with pytest.raises(ValueError, match="no samples"):
        cer([], [])
    assert wer_per_sample([], []) == []


def test_tuples_and_single_pairs_are_accepted():
    assert wer(("a b",), ("a c",)) == pytest.approx(0.5)
    assert wer_per_sample("a b", "a b") == [0.0]


def test_tabs_newlines_and_other_whitespace_separate_words():
    ref = "the cat\tsat\non the\r\nmat"
    assert wer(ref, "the cat sat on the mat") == 0.0
    assert wer(" the\u00a0cat  \t", "the cat") == 0.0  # no-break space, trailing tab
    assert wer_per_sample(["a\tb c"], ["a b"]) == [pytest.approx(1 / 3)]  # 3 words, 1 deleted
    assert wer(["a\nb", "c"], ["a b", "d"]) == pytest.approx(1 / 3)
    assert cer("a\tb", "a b") == pytest.approx(1 / 3)  # characters: a tab is a character


# CER/WER inputs that are not strings or sequences of strings: a ValueError saying what to pass,
# never a TypeError from inside or a rate computed from the wrong thing.


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
