"""Which reported metrics are validation ones, by name: the rule the run's page draws its
validation chart by and the agent keeps every reported value of (``agent.progress``), so
the two cannot disagree."""

from __future__ import annotations

#: metric name prefixes (any case) that make a metric a validation one: ``val_loss``,
#: ``eval_wer``, ``validation/acc``, ``test_f1``
VALIDATION_PREFIXES = ("val", "eval", "test")


def is_validation(name: str) -> bool:
    """Whether the metric ``name`` is a validation metric."""
    low = name.lower()
    return any(low.startswith(p) for p in VALIDATION_PREFIXES)
