"""Character and word error rates (CER, WER), corpus-level and per sample, on top of jiwer.

Both sides are Unicode NFC-normalised first, so an ``"é"`` typed as one code point and one
written as ``"e"`` + combining accent are the same character. Then, for words, any run of
whitespace separates two words (spaces, tabs, newlines, carriage returns and other Unicode
spaces such as a no-break space, as ``str.split()`` does) and leading/trailing whitespace is
ignored; for characters (jiwer's default), the ends are stripped and every remaining character
(spaces, tabs and newlines included) counts.

Rules:

* Corpus rate = total edits (substitutions + deletions + insertions) / total reference units
  (words or characters), like jiwer: long references weigh more than short ones.
* An empty reference contributes no reference units and its hypothesis length as insertions.
  If *every* reference is empty the corpus rate is 0.0 when every hypothesis is empty too, else
  1.0 (there is nothing to divide by, and "all wrong" is the honest answer).
* Per sample, an empty reference scores 0.0 when the hypothesis is empty too, else 1.0.
* ``refs`` and ``hyps`` are either two strings (one sample) or two equally long sequences of
  strings; a length mismatch, a mixed pair, a non-string item, bytes, ``None`` or an unordered
  collection (set, dict) is a :class:`ValueError`.
  The corpus functions need at least one sample; the per-sample ones return ``[]`` for none.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["cer", "cer_per_sample", "wer", "wer_per_sample"]


@dataclass(frozen=True)
class _Counts:
    edits: int
    ref_units: int
    hyp_units: int

    def rate(self) -> float:
        if self.ref_units == 0:
            return 0.0 if self.hyp_units == 0 else 1.0
        return self.edits / self.ref_units


def _pairs(name: str, refs: str | Sequence[str], hyps: str | Sequence[str]) -> list[tuple]:
    if isinstance(refs, str) != isinstance(hyps, str):
        raise ValueError(f"{name}: pass two strings or two sequences of strings, not a mix")
    if isinstance(refs, str):
        refs, hyps = [refs], [hyps]  # type: ignore[list-item]
    for side, value in (("references", refs), ("hypotheses", hyps)):
        if isinstance(value, (bytes, bytearray)):
            raise ValueError(f"{name}: the {side} are bytes; decode them to str first")
        if isinstance(value, (dict, set, frozenset)) or not hasattr(value, "__iter__"):
            raise ValueError(
                f"{name}: pass two strings or two sequences of strings, "
                f"got {type(value).__name__} for the {side}"
            )
    refs, hyps = list(refs), list(hyps)
    if len(refs) != len(hyps):
        raise ValueError(
            f"{name}: {len(refs)} references but {len(hyps)} hypotheses (they must pair up)"
        )
    for i, (r, h) in enumerate(zip(refs, hyps, strict=True)):
        if not isinstance(r, str) or not isinstance(h, str):
            raise ValueError(
                f"{name}: sample {i} is not a pair of strings "
                f"({type(r).__name__}, {type(h).__name__})"
            )
    return [
        (unicodedata.normalize("NFC", r), unicodedata.normalize("NFC", h))
        for r, h in zip(refs, hyps, strict=True)
    ]


def _counts(pairs: list[tuple], unit: str) -> list[_Counts]:
    if not pairs:
        return []
    import jiwer

    refs = [r for r, _ in pairs]
    hyps = [h for _, h in pairs]
    if unit == "word":
        words = jiwer.Compose(
            [
                jiwer.SubstituteRegexes({r"\s+": " "}),  # any whitespace run separates words
                jiwer.Strip(),
                jiwer.ReduceToListOfListOfWords(),
            ]
        )
        out: jiwer.WordOutput | jiwer.CharacterOutput = jiwer.process_words(
            refs, hyps, reference_transform=words, hypothesis_transform=words
        )
    else:
        out = jiwer.process_characters(refs, hyps)
    counts = []
    for ref_units, hyp_units, chunks in zip(
        out.references, out.hypotheses, out.alignments, strict=True
    ):
        edits = 0
        for c in chunks:
            if c.type in ("substitute", "delete"):
                edits += c.ref_end_idx - c.ref_start_idx
            elif c.type == "insert":
                edits += c.hyp_end_idx - c.hyp_start_idx
        counts.append(_Counts(edits=edits, ref_units=len(ref_units), hyp_units=len(hyp_units)))
    return counts


def _corpus(name: str, refs, hyps, unit: str) -> float:
    pairs = _pairs(name, refs, hyps)
    if not pairs:
        raise ValueError(f"{name}: no samples to score")
    counts = _counts(pairs, unit)
    total = _Counts(
        edits=sum(c.edits for c in counts),
        ref_units=sum(c.ref_units for c in counts),
        hyp_units=sum(c.hyp_units for c in counts),
    )
    return total.rate()


def cer(refs: str | Sequence[str], hyps: str | Sequence[str]) -> float:
    """Corpus character error rate: total character edits / total reference characters."""
    return _corpus("cer", refs, hyps, "char")


def wer(refs: str | Sequence[str], hyps: str | Sequence[str]) -> float:
    """Corpus word error rate: total word edits / total reference words."""
    return _corpus("wer", refs, hyps, "word")


def cer_per_sample(refs: str | Sequence[str], hyps: str | Sequence[str]) -> list[float]:
    """Character error rate of each (reference, hypothesis) pair, in order."""
    return [c.rate() for c in _counts(_pairs("cer_per_sample", refs, hyps), "char")]


def wer_per_sample(refs: str | Sequence[str], hyps: str | Sequence[str]) -> list[float]:
    """Word error rate of each (reference, hypothesis) pair, in order."""
    return [c.rate() for c in _counts(_pairs("wer_per_sample", refs, hyps), "word")]
