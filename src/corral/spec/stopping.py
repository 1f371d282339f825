"""How a stage is stopped: the fields a job sets when its script does not save on SIGTERM.

``stop_signal`` (default SIGTERM), ``stop_grace`` (how long before SIGKILL), ``save_signal``
and ``save_command`` (what makes the job save before the stop signal). The same fields sit on
each stage and, for the single ``run:`` form, at the top level.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BeforeValidator, Field

from corral.spec.fields import Label
from corral.wire.plan import STOP_SIGNALS

_NAMES = ", ".join(STOP_SIGNALS)


def parse_signal(value: object) -> object:
    """``SIGINT``, ``INT`` or ``sigint`` -> ``SIGINT``; SIGKILL/SIGSTOP and unknown names are
    refused (one line naming the choices)."""
    if not isinstance(value, str):
        raise ValueError(f"expected a signal name ({_NAMES})")
    name = value.strip().upper()
    name = name if name.startswith("SIG") else f"SIG{name}"
    if name in ("SIGKILL", "SIGSTOP"):
        raise ValueError(f"{name} cannot be caught, so it cannot ask a job to stop or save")
    if name not in STOP_SIGNALS:
        raise ValueError(f"{value!r} is not a signal corral sends; use one of {_NAMES}")
    return name


SignalName = Annotated[str, BeforeValidator(parse_signal), Label("signal name")]


#: The four fields, declared on ``Stage`` and on ``JobSpec`` (for the ``run:`` form) alike.
STOP_SIGNAL = Field(
    "SIGTERM",
    description="Signal that asks the stage to stop (SIGTERM, SIGINT, SIGHUP, SIGQUIT, "
    "SIGUSR1, SIGUSR2): SIGINT for a script that saves on Ctrl-C. SIGKILL follows after "
    "the grace period.",
)
STOP_GRACE = Field(
    None,
    description="Time from the stop request to SIGKILL for this stage (default: the run's "
    "grace, 30s; a cloud's preemption notice caps it).",
)
SAVE_SIGNAL = Field(
    None,
    description="Signal that makes the job save a checkpoint (e.g. SIGUSR1), sent before the "
    "stop signal; the stop signal follows half the grace later (at once if the job has "
    "exited).",
)
SAVE_COMMAND = Field(
    None,
    min_length=1,
    description="Shell command run on the node (in the workdir, with the stage's environment) "
    "when a stop or preemption notice comes, before the stop signal; it gets half the grace.",
)
