"""The machine's last words: when an attempt ends before its agent ever served (the provision
timeout, a machine gone while it booted), no stage log was copied, and the provider may drop
the machine's console log with the machine (some keep a machine's log only while the
machine exists). The controller keeps the log's tail beside the run's files
(``paths.kept_machine_log``) before the teardown, masked like every log it copies, so that
``corral logs`` can show why the agent never came up after the run has ended.

A machine that cannot boot corral at all (no usable runtime, a runtime it cannot fetch or
unpack) says why once in its log and ends with :data:`CANNOT_BOOT` (the node bootstrap's exit
78): :func:`cannot_boot` reads that reason back, for the attempt's failure. While an attempt
boots, :func:`boot_failure` looks at the log every ``Settings.boot_log_check_s`` (a container
cloud restarts a container that exits, and a machine that said it cannot boot would otherwise
sit until the provision timeout); a machine gone before its agent served is read once more.
Either way the run fails with that reason (:func:`failed`), never relaunched: the same image
would fail the same way on the next machine.
"""

from __future__ import annotations

from corral import paths
from corral.control.context import Context, log
from corral.control.resources import instance_of
from corral.control.transitions import Transition, finish
from corral.errors import CorralError
from corral.files import write_atomic
from corral.providers.base import SupportsLogs
from corral.secrets.redact import redactor_for
from corral.store.records import ResourceRecord, RunRecord
from corral.store.states import RunState

#: lines of the console log kept
KEEP_LINES = 200
#: the node bootstrap's last line when the machine cannot boot corral (after its reason)
CANNOT_BOOT = "corral: this machine cannot boot corral (exit 78)"
_SAID = "corral bootstrap: "


def cannot_boot(text: str) -> str | None:
    """Why the machine cannot boot corral, from its log (None if it does not say so): the
    bootstrap's line just before its :data:`CANNOT_BOOT` marker."""
    lines = [line.strip() for line in text.splitlines()]
    for i in range(len(lines) - 1, 0, -1):
        if lines[i].endswith(CANNOT_BOOT) and _SAID in lines[i - 1]:
            return lines[i - 1].split(_SAID, 1)[1].strip() or None
    return None


def failed(why: str) -> Transition:
    """The run fails, saying why its machine cannot boot (no relaunch can help)."""
    return finish(RunState.FAILED, f"the machine cannot boot corral: {why}", graceful=False)


def boot_failure(ctx: Context, run: RunRecord, resource: ResourceRecord | None) -> str | None:
    """Why the booting machine of ``resource`` cannot boot corral, if its console log says so
    (read every ``Settings.boot_log_check_s``, the first time that long after the controller
    first saw it boot: a log stream may take seconds to read (a container cloud's follows the
    container for a while), which a machine that boots in time never waits for; the log is
    kept when it says so)."""
    notes = ctx.notes(run.id).attempt(run.attempt)
    now = ctx.clock()
    last = notes.boot_log_read_at
    if last is None or (now - last).total_seconds() < ctx.settings.boot_log_check_s:
        notes.boot_log_read_at = last or now
        return None
    notes.boot_log_read_at = now
    text = _read(ctx, run, resource)
    why = cannot_boot(text or "")
    if why is not None and resource is not None and text is not None:
        _save(ctx, run, resource, text)
    return why


def _read(ctx: Context, run: RunRecord, resource: ResourceRecord | None) -> str | None:
    """The tail of the console log of ``resource``'s machine; None without one. Never raises."""
    instance = instance_of(resource)
    if resource is None or instance is None:
        return None
    provider = ctx.provider(resource.provider)
    if not isinstance(provider, SupportsLogs):
        return None
    try:
        text = provider.logs(instance, tail=KEEP_LINES)
    except CorralError as e:
        log.info("run %s: the machine's console log could not be read: %s", run.id, e.message)
        return None
    return text if text.strip() else None


def _save(ctx: Context, run: RunRecord, resource: ResourceRecord, text: str) -> str:
    path = paths.kept_machine_log(run.id, resource.attempt)
    path.parent.mkdir(parents=True, exist_ok=True)
    kept = redactor_for(ctx.spec(run).secrets).redact(text)
    write_atomic(path, kept, fsync=False)
    return kept


def keep(ctx: Context, run: RunRecord, resource: ResourceRecord | None) -> str | None:
    """Save the tail of the console log of ``resource``'s machine, if its provider keeps one
    and it says anything; the text kept (masked), None if none. Never raises: a log that
    cannot be read is noted in the controller's log and the attempt ends as it would have."""
    text = _read(ctx, run, resource)
    if text is None or resource is None:
        return None
    return _save(ctx, run, resource, text)
