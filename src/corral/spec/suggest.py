"""Suggestions ("did you mean ...?") for typos in keys, names and values."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def closest(word: object, candidates: Iterable[object]) -> str | None:
    """The candidate closest to ``word``, or None if nothing is close enough (candidates that
    are not strings are passed over)."""
    pool = [c for c in candidates if isinstance(c, str)]
    text = str(word)
    # Case-only differences are the most likely typo: check them first.
    for cand in pool:
        if cand.lower() == text.lower():
            return cand
    found = difflib.get_close_matches(text, pool, n=1, cutoff=0.6)
    return found[0] if found else None


def did_you_mean(word: object, candidates: Iterable[object]) -> str:
    """``" (did you mean 'x'?)"`` or ``""`` when no candidate is close."""
    best = closest(word, candidates)
    return f" (did you mean '{best}'?)" if best is not None else ""
