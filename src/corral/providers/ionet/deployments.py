"""IO.net deployments and their containers as the CaaS API returns them, and how they map onto
:class:`InstanceState`.

Status strings are free text in the document's answers (its enum ``CaaSResourceStatus`` only
types the list's ``status`` filter, and third-party fixtures show ``RUNNING``): they are
compared case-insensitively, and a word corral does not know never decides alone::

    deployment status          containers                               -> InstanceState
    (no such deployment)       -                                           TERMINATED
    deployment requested       -                                           PROVISIONING
    running, or a word not     one with its public URL that says
    known here (logged once)   ``running``, or whose agent answers its
                               public URL; the first seen (or none yet)    RUNNING
    running                    another container than the first seen       PREEMPTED
    running                    none (after one ran)                        PREEMPTED
    (unknown word)             none (after one ran)                        UNKNOWN
    running / (unknown)        the first seen, not running, agent silent   UNKNOWN
    running / (unknown)        none yet / not running yet                  PROVISIONING
    completed                  -                                           PREEMPTED
    failed                     -                                           FAILED
    termination requested,
    destroyed                  -                                           TERMINATED

The proof that a container runs is the agent answering through the container's public URL
(``GET /health``, the probe it answers without a token): a container status word other than
``running`` (IO.net documents none) keeps a launch PROVISIONING only while the agent is silent,
never until the boot timeout. The endpoint is shown whenever a container has a public URL, so
the controller probes the agent too.

IO.net documents no preemption (UNCONFIRMED): a container replaced by another (a new
``container_id`` or ``device_id``), or gone from a running deployment, is read as the node
having failed, and the run recovers on a new deployment from its last checkpoint. A
deployment that ``completed`` before corral ended it ran out of its prepaid hours (the
provider extends running ones): it is recovered the same way.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from corral.providers.base import InstanceState


def word(value: Any) -> str:
    return " ".join(str(value or "").split()).lower()


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="ignore")


class Deployment(_Lenient):
    id: str
    status: str = ""
    name: str | None = None
    created_at: str | None = None
    completed_percent: float | None = None
    compute_minutes_remaining: float | None = None
    hardware_name: str | None = None
    hardware_id: int | None = None
    gpus_per_container: int | None = None
    locations: list[dict[str, Any]] = Field(default_factory=list)
    container_config: dict[str, Any] = Field(default_factory=dict)

    @property
    def state(self) -> str:
        return word(self.status)

    def env(self, name: str) -> str | None:
        value = (self.container_config.get("env_variables") or {}).get(name)
        return value if isinstance(value, str) else None


class Worker(_Lenient):
    container_id: str = ""
    device_id: str = ""
    status: str = ""
    public_url: str | None = None
    created_at: str | None = None

    @property
    def state(self) -> str:
        return word(self.status)

    @property
    def identity(self) -> str:
        return f"{self.device_id}/{self.container_id}"


#: the deployment words of the document's enum (``CaaSResourceStatus``)
PROVISIONING_WORDS = frozenset({"deployment requested"})
GONE_WORDS = frozenset({"termination requested", "destroyed"})
KNOWN_WORDS = PROVISIONING_WORDS | GONE_WORDS | {"running", "completed", "failed"}


def reads_containers(dep: Deployment | None) -> bool:
    """Whether the deployment's containers say more than its word: ``running``, or a word
    corral does not know (the containers and the agent decide then)."""
    return dep is not None and (dep.state == "running" or dep.state not in KNOWN_WORDS)


def deployment_state(
    dep: Deployment | None, worker: Worker | None, *, first: str | None, alive: bool = False
) -> tuple[InstanceState, str]:
    """The deployment's :class:`InstanceState` and a one-line detail (module table).
    ``alive``: the agent answered through ``worker``'s public URL."""
    if dep is None:
        return InstanceState.TERMINATED, "no such deployment"
    state = dep.state
    if state in PROVISIONING_WORDS:
        return InstanceState.PROVISIONING, "deployment requested"
    if state in GONE_WORDS:
        return InstanceState.TERMINATED, state
    if state == "failed":
        return InstanceState.FAILED, "the deployment failed"
    if state == "completed":
        return InstanceState.PREEMPTED, "the deployment completed: its prepaid hours ran out"
    known = state == "running"
    if worker is not None and first and worker.identity != first:
        return (
            InstanceState.PREEMPTED,
            f"the container was replaced ({first} -> {worker.identity}): its node failed",
        )
    if worker is not None and worker.public_url and (worker.state == "running" or alive):
        how = "" if worker.state == "running" else f" (container {worker.state!r}, agent answers)"
        return InstanceState.RUNNING, f"running on device {worker.device_id or '?'}{how}"
    if worker is None and first:
        if not known:
            return InstanceState.UNKNOWN, f"deployment {dep.status!r}, no container"
        return InstanceState.PREEMPTED, f"the container {first} is gone: its node failed"
    if worker is not None and first:  # the same container, not running: ask again
        return InstanceState.UNKNOWN, f"container {worker.state or 'in no state'}"
    where = "" if known else f"deployment {dep.status!r}, "
    return (
        InstanceState.PROVISIONING,
        f"{where}container {worker.state if worker else 'not started'}",
    )
