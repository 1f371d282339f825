"""A stage's ``progress`` pattern: how the agent reads progress from the stage's log lines.

The value travels in the plan as written in the spec: a preset name (one of :data:`PRESETS`,
for a tool whose log format the agent knows) or a regular expression with named groups
(``step``, ``total``, ``loss``; any other name is a metric). The spec checks it with
:func:`progress_problem`; the agent builds its line parser from it.
"""

from __future__ import annotations

import re

#: Preset name -> what it reads (the docs and the error message list these).
PRESETS: dict[str, str] = {
    "hf": "HF Trainer: its tqdm bar (step/total; datasets' and other described bars are left "
    "out) and the printed log dicts (loss, metrics)",
    "nanogpt": "nanoGPT: 'iter N: loss L, time Tms, mfu M%' and 'step N: train loss ..., val "
    "loss ...'",
    "lightning": "PyTorch Lightning's progress bar, Rich ('Epoch E/L  ━━╸━━ n/N ... loss: ...') "
    "or tqdm ('Epoch E: ...| n/N [..., loss=..., ...]')",
    "ultralytics": "Ultralytics: the epoch table rows ('1/100  2.1G  1.234 ... 640: 45% ━━╸── "
    "8/18 ...') and validation's 'all' row",
    "torchtitan": "torchtitan: 'step: N  loss: L  memory: ...  tps: ...'",
    "nanochat": "nanochat: 'step 00100/01000 (10.00%) | loss: L | ...'",
}

#: Preset name -> the environment its stage gets (unless the spec sets these variables):
#: Lightning draws its default bar with Rich, which draws nothing on a non-terminal (the
#: stage's log) until the run ends; ``TTY_COMPATIBLE=1`` makes Rich draw it as it goes (with
#: cursor codes, which the log reader drops), and a wide ``COLUMNS`` keeps the bar's values on
#: its row.
PRESET_ENV: dict[str, dict[str, str]] = {
    "lightning": {"TTY_COMPATIBLE": "1", "COLUMNS": "200"},
}

#: Named groups of a custom pattern that are not metrics.
KNOWN_GROUPS = ("step", "total", "loss", "epoch")

#: Longest pattern accepted (a pattern is matched against every log line).
MAX_PATTERN = 1000


def compile_custom(pattern: str) -> re.Pattern[str]:
    """The compiled custom pattern; ValueError (one line) when it cannot serve."""
    if len(pattern) > MAX_PATTERN:
        raise ValueError(f"a pattern longer than {MAX_PATTERN} characters")
    try:
        compiled = re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"not a preset ({', '.join(PRESETS)}) nor a valid regex: {exc}") from None
    if not compiled.groupindex:
        raise ValueError(
            f"not a preset ({', '.join(PRESETS)}); a regex needs named groups such as "
            "(?P<step>\\d+) and (?P<loss>[\\d.]+)"
        )
    return compiled


def progress_problem(value: str) -> str | None:
    """Why ``value`` is not a usable ``progress`` pattern, or None when it is."""
    if value in PRESETS:
        return None
    try:
        compile_custom(value)
    except ValueError as exc:
        return str(exc)
    return None
