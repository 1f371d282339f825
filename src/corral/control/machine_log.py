"""The machine's last words: when an attempt ends before its agent ever served (the provision
timeout, a machine gone while it booted), no stage log was copied, and the provider may drop
the machine's console log with the machine (RunPod keeps a pod's log only while the pod
exists). The controller keeps the log's tail beside the run's files
(``paths.kept_machine_log``) before the teardown, masked like every log it copies, so that
``corral logs`` can show why the agent never came up after the run has ended.
"""

from __future__ import annotations

from corral import paths
from corral.control.context import Context, log
from corral.control.resources import instance_of
from corral.errors import CorralError
from corral.files import write_atomic
from corral.providers.base import SupportsLogs
from corral.secrets.redact import redactor_for
from corral.store.records import ResourceRecord, RunRecord

#: lines of the console log kept
KEEP_LINES = 200


def keep(ctx: Context, run: RunRecord, resource: ResourceRecord | None) -> bool:
    """Save the tail of the console log of ``resource``'s machine, if its provider keeps one
    and it says anything; whether a log was kept. Never raises: a log that cannot be read is
    noted in the controller's log and the attempt ends as it would have."""
    instance = instance_of(resource)
    if resource is None or instance is None:
        return False
    provider = ctx.provider(resource.provider)
    if not isinstance(provider, SupportsLogs):
        return False
    try:
        text = provider.logs(instance, tail=KEEP_LINES)
    except CorralError as e:
        log.info("run %s: the machine's console log could not be kept: %s", run.id, e.message)
        return False
    if not text.strip():
        return False
    path = paths.kept_machine_log(run.id, resource.attempt)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, redactor_for(ctx.spec(run).secrets).redact(text), fsync=False)
    return True
