"""A node's place in its gang (a multi-node job, ``resources.nodes``): its rank and where the
head node's ranks meet.

Only the launch knows them (the head's address exists once the head is launched), so they are
launch arguments of ``corral agent``, never part of the plan, which stays one for every node:
the controller gives them to each node's agent in its environment (:meth:`GangRole.env`) and
the agent takes them out of its own environment before any job starts
(:func:`role_from_env`). A stage that runs on ``k`` nodes meets on ``master_port + its index
among the plan's stages`` on the head, so every node agrees on it without asking anyone.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping

from pydantic import BaseModel, ConfigDict, Field

from corral.errors import BadInput

#: The node's rank in its gang (0: the head).
ENV_GANG_RANK = "CORRAL_GANG_RANK"
#: The address every node reaches the head at.
ENV_GANG_MASTER_ADDR = "CORRAL_GANG_MASTER_ADDR"
#: The head's first rendezvous port (stage ``i`` meets on this + ``i``).
ENV_GANG_MASTER_PORT = "CORRAL_GANG_MASTER_PORT"
GANG_VARS = (ENV_GANG_RANK, ENV_GANG_MASTER_ADDR, ENV_GANG_MASTER_PORT)
#: the highest first port: room above it for a plan's stages
MAX_FIRST_PORT = 65535 - 256


class GangRole(BaseModel):
    """One node of a gang: its rank and the head's rendezvous address and first port."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    rank: int = Field(ge=0)
    master_addr: str = Field(min_length=1)
    master_port: int = Field(ge=1024, le=MAX_FIRST_PORT)

    def env(self) -> dict[str, str]:
        """The role as the agent's environment variables."""
        return {
            ENV_GANG_RANK: str(self.rank),
            ENV_GANG_MASTER_ADDR: self.master_addr,
            ENV_GANG_MASTER_PORT: str(self.master_port),
        }

    def stage_port(self, index: int) -> int:
        """The port the ranks of the plan's ``index``-th stage meet on."""
        return self.master_port + index


def role_from_env(environ: MutableMapping[str, str], *, pop: bool = False) -> GangRole | None:
    """The gang role given in ``environ`` (None when none of its variables is set; taken out
    of ``environ`` with ``pop``). Some of them, or a bad value: :class:`BadInput` naming it."""
    given: Mapping[str, str] = {k: environ[k] for k in GANG_VARS if k in environ}
    if pop:
        for k in GANG_VARS:
            environ.pop(k, None)
    if not given:
        return None
    missing = [k for k in GANG_VARS if not given.get(k)]
    if missing:
        raise BadInput(f"{missing[0]} is not set: a node of a gang needs {', '.join(GANG_VARS)}")
    for name in (ENV_GANG_RANK, ENV_GANG_MASTER_PORT):
        if not given[name].isdigit():
            raise BadInput(f"{name}={given[name]!r}: expected a whole number")
    port = int(given[ENV_GANG_MASTER_PORT])
    if not 1024 <= port <= MAX_FIRST_PORT:
        raise BadInput(f"{ENV_GANG_MASTER_PORT}={port}: expected 1024..{MAX_FIRST_PORT}")
    return GangRole(
        rank=int(given[ENV_GANG_RANK]),
        master_addr=given[ENV_GANG_MASTER_ADDR],
        master_port=port,
    )


class NodeAttempt(BaseModel):
    """One node's part in one attempt of its gang: the machine it ran on and how the attempt
    ended for it (the controller's books; what the manifest's ``node_attempts`` lists)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    rank: int = Field(ge=0)
    attempt: int = Field(ge=1)
    provider: str = Field(min_length=1)
    instance_id: str = Field(min_length=1)
    region: str | None = None
    zone: str | None = None
    #: ``kept`` (the machine went on into the next attempt: a repair), ``preempted`` or
    #: ``lost`` (the provider took the machine), ``released`` (terminated with its gang,
    #: which lost another node), else the attempt's exit reason; None: the attempt running
    ended: str | None = None


class GangStart(BaseModel):
    """``POST /gang/start``'s body: the gang's nodes in every attempt of the run so far, this
    one's included (``ended`` None)."""

    model_config = ConfigDict(extra="forbid")

    nodes: list[NodeAttempt] = Field(default_factory=list, max_length=50_000)
