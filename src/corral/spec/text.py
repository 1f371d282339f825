"""Text a spec may hold: where input that was not UTF-8 shows up, and how to name it.

Python keeps a byte that is not UTF-8 (on the command line, in a file name) as a lone
surrogate (``'\\udcff'`` for 0xff). Such a character can be neither encoded nor handed to
the YAML parser, pydantic, a shell or a terminal, so it is found and named before any of them
sees it.
"""

from __future__ import annotations

import re

_SURROGATE = re.compile("[\ud800-\udfff]")


def undecodable(text: str) -> int | None:
    """The index of the first character of ``text`` that is not Unicode text, else None."""
    match = _SURROGATE.search(text)
    return match.start() if match else None


def as_typed(text: str) -> str:
    """``text`` as it was typed, each undecodable byte written ``\\xff``."""
    try:
        raw = text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a surrogate no undecodable byte gives (text from an API)
        return text.encode("ascii", "backslashreplace").decode("ascii")
    return raw.decode("utf-8", "backslashreplace")


def nul_problem(text: str, holder: str) -> str | None:
    """Why ``text`` cannot be passed on if it holds a NUL byte (no shell command, argument or
    environment variable can: the C strings they travel in end at the first one), else None.
    The text itself is not shown: it may be a secret."""
    index = text.find("\x00")
    if index < 0:
        return None
    return f"holds a NUL byte (\\0) at position {index}: {holder} cannot hold one"
