"""RunPod GPU type ids (``"NVIDIA A100-SXM4-80GB"``) to corral's GPU names (``"A100"``).

A job asks for a GPU model the way people name it (``A100:1``, ``RTX4090``); RunPod names
variants (memory, form factor) in long ids, sometimes with odd spacing (``"NVIDIA  RTX
A4500"``). The canonical name drops the vendor words and the variant: ``A100``, ``H100``,
``L40S``, ``RTX4090``, ``RTX3080TI``, ``RTXA6000``, ``RTX6000ADA``, ``MI300X``. The RunPod id
itself is kept in the offer's details and sent back unchanged (ids are never normalised).
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


def canonical_name(gpu_type_id: str) -> str:
    """corral's name of a RunPod GPU type (upper case, letters, digits and ``-._+``)."""
    words = [w.upper() for w in gpu_type_id.split()]
    words = [w for w in words if w not in _VENDOR]
    if not words:
        return "GPU"
    if words[0] == "RTX":
        parts = ["RTX"]
        for word in words[1:]:
            if not _RTX_WORD.match(word):
                break
            parts.append(word)
        return "".join(parts)
    first = words[0].split("-")[0]
    return first if first and not _VARIANT.match(first) else "GPU"


def matches(gpu_type_id: str, display_name: str, wanted: str | None) -> bool:
    """Whether a RunPod GPU type is the model a job asks for (None: any model)."""
    if not wanted:
        return True
    want = wanted.strip().upper()
    return want in (canonical_name(gpu_type_id), canonical_name(display_name or ""))
