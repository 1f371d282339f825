"""Cloud GPU names (``"NVIDIA A100-SXM4-80GB"``, ``"RTX 3090 (24 GB)"``) to corral's GPU
names (``"A100"``, ``"RTX3090"``).

A job asks for a GPU model the way people name it (``A100:1``, ``RTX4090``); clouds name
variants (memory, form factor) in long strings. The canonical name drops the vendor words,
anything in parentheses and the variant: ``A100``, ``H100``, ``L40S``, ``RTX4090``,
``RTX3080TI``, ``RTXA6000``, ``RTX6000ADA``, ``MI300X``. The cloud's own id is kept in an
offer's details and sent back unchanged.
"""

from __future__ import annotations

import re

_VENDOR = {"NVIDIA", "GEFORCE", "TESLA", "AMD", "INSTINCT", "QUADRO"}
#: words that name a variant of the model, not the model
_VARIANT = re.compile(
    r"^(\d+GB|PCIE|SXM\d*|HBM\d*E?|NVL|OAM|GENERATION|WORKSTATION|EDITION|SERVER|BLACKWELL|MAX-Q)$"
)
#: words that belong to an RTX model's name
_RTX_WORD = re.compile(r"^(\d{3,4}|A\d{3,4}|TI|SUPER|ADA|SFF|PRO)$")
#: a count in front of the model ("8x H100")
_COUNT = re.compile(r"^\d+X$")
_PARENS = re.compile(r"\([^)]*\)|\[[^]]*\]")


def canonical_name(name: str) -> str:
    """corral's name of a cloud's GPU name (upper case, letters, digits and ``-._+``)."""
    words = [w.upper() for w in _PARENS.sub(" ", name).split()]
    words = [w for w in words if w not in _VENDOR and not _COUNT.match(w)]
    if not words:
        return "GPU"
    if words[0] == "RTX":
        parts = ["RTX"]
        for word in words[1:]:
            if _VARIANT.match(word):  # "RTX PRO Server 6000" (AWS's name) is an RTXPRO6000
                continue
            if not _RTX_WORD.match(word):
                break
            parts.append(word)
        return "".join(parts)
    first = words[0].split("-")[0]
    return first if first and not _VARIANT.match(first) else "GPU"


def matches(names: list[str], wanted: str | None) -> bool:
    """Whether a GPU known by any of ``names`` is the model a job asks for (None: any)."""
    if not wanted:
        return True
    want = wanted.strip().upper()
    return any(want == canonical_name(n) for n in names if n)
