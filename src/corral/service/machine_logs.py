"""The machine's own console log, kept by its provider (``SupportsLogs``): what ``corral logs``
shows when the agent never came up (an image without python or corral, a crash before the
agent served), so that no stage log was ever copied. Secret values in play are masked, as in
every other log corral shows."""

from __future__ import annotations

from dataclasses import dataclass

from corral import paths
from corral.errors import NotFound, UnsupportedCapability
from corral.providers.base import Instance, SupportsLogs
from corral.providers.registry import get_provider
from corral.secrets.redact import current_redactor
from corral.service._store import using
from corral.store import Store


@dataclass(frozen=True)
class MachineLog:
    run_id: str
    attempt: int
    provider: str
    instance_id: str
    text: str
    #: the copy the controller kept when the attempt ended before its agent served (the
    #: machine, and the provider's log of it, may be gone)
    kept: bool = False


def machine_log(
    ref: str, *, attempt: int | None = None, tail: int = 200, store: Store | None = None
) -> MachineLog:
    """The last ``tail`` lines of the console log of the machine of ``attempt`` (default: the
    last machine launched for the run). NotFound without a launched machine; UnsupportedCapability (with the
    provider's reason) when the provider keeps no logs; the provider's error if it cannot."""
    with using(store) as st:
        run = st.get_run(ref)
        rows = [
            r
            for r in st.resources(run_id=run.id)
            if r.instance and (attempt is None or r.attempt == attempt)
        ]
    if not rows:
        which = f"attempt {attempt}" if attempt is not None else "any attempt"
        raise NotFound(f"run {run.id} has no launched machine for {which}")
    res = rows[-1]
    number = res.attempt
    instance = Instance.model_validate(res.instance)
    kept = paths.kept_machine_log(run.id, number)

    def found(text: str, *, from_copy: bool = False) -> MachineLog:
        if from_copy and tail > 0:
            text = "\n".join(text.splitlines()[-tail:])
        return MachineLog(
            run_id=run.id,
            attempt=number,
            provider=res.provider,
            instance_id=instance.instance_id,
            text=current_redactor().redact(text),
            kept=from_copy,
        )

    if not res.open and kept.is_file():  # the machine is gone: what was kept of its log
        return found(kept.read_text(errors="replace"), from_copy=True)
    provider = get_provider(res.provider)
    if not isinstance(provider, SupportsLogs):
        reason = type(provider).unsupported.get(
            SupportsLogs.__name__, "it keeps no console log of its machines"
        )
        raise UnsupportedCapability(provider.name, "machine logs", reason)
    try:
        text = provider.logs(instance, tail=tail)
    except NotFound:
        if kept.is_file():
            return found(kept.read_text(errors="replace"), from_copy=True)
        raise
    finally:
        close = getattr(provider, "close", None)
        if callable(close):
            close()
    return found(text)
