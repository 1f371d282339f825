"""The live machine of a run, as the service reaches it: the current attempt's agent (its
endpoint and the token derived for it), and the run's audit events for what a user does
there (``exec.*``, ``artifacts.downloaded``): who, what, the outcome; never a secret value."""

from __future__ import annotations

import getpass
from collections.abc import Iterable
from typing import Any

from corral.control.agent_client import AgentClient
from corral.control.tokens import agent_token
from corral.errors import Conflict, NotFound
from corral.secrets.redact import Redactor, redactor_for
from corral.store import RunRecord, Store


def default_actor() -> str:
    """Who acts, when the caller does not say: the local user."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"


def run_redactor(run: RunRecord) -> Redactor:
    """Every secret value the run's spec names (and any other in play), masked."""
    names = (run.spec or {}).get("secrets") or []
    return redactor_for(n for n in names if isinstance(n, str))


def live_agent(
    store: Store,
    run: RunRecord,
    *,
    timeout: float = 30.0,
    ended_ok: bool = False,
    node: int | None = None,
) -> AgentClient:
    """A client of the agent of the run's current attempt (``node``: of that node of a
    multi-node run; None or 0: the head). Conflict when the run is over, its machine has no
    agent address yet, or (unless ``ended_ok``) its attempt has ended; NotFound for a node
    the run does not have."""
    if run.terminal:
        raise Conflict(f"run {run.id} is {run.state}: its machine is gone")
    attempts = [a for a in store.attempts(run.id) if a.number == run.attempt]
    attempt = attempts[0] if attempts else None
    if attempt is None or not attempt.endpoint or (attempt.ended_at and not ended_ok):
        raise Conflict(
            f"run {run.id} ({run.state}, attempt {run.attempt}) has no machine with a "
            "running agent right now"
        )
    endpoint = attempt.endpoint if not node else _node_endpoint(store, run, node)
    return AgentClient(endpoint, agent_token(run.id, attempt.number), timeout=timeout)


def check_node(run: RunRecord, node: int) -> None:
    """NotFound unless the run's gang has node ``node`` (``resources.nodes`` of its spec)."""
    nodes = int(((run.spec or {}).get("resources") or {}).get("nodes") or 1)
    if not 0 <= node < nodes:
        raise NotFound(f"run {run.id} has no node {node} (nodes: 0..{nodes - 1})")


def _node_endpoint(store: Store, run: RunRecord, node: int) -> str:
    """The agent address of node ``node`` of the run's current attempt's gang."""
    check_node(run, node)
    for row in store.resources(run_id=run.id, open_only=True):
        if row.attempt == run.attempt and row.data.get("rank") == node and row.instance:
            endpoint = row.instance.get("endpoint")
            if isinstance(endpoint, str) and endpoint:
                return endpoint
    raise Conflict(f"run {run.id}: node {node} has no machine with a running agent right now")


def audit(
    store: Store,
    run: RunRecord,
    type: str,
    reason: str,
    data: dict[str, Any],
    redactor: Redactor,
    attempt: int | None = None,
) -> None:
    """One audit event in the run's history, masked."""
    store.add_event(
        run.id,
        type,
        redactor.redact(reason),
        data=redactor.redact_data(data),
        attempt=attempt if attempt is not None else run.attempt,
    )


def command_text(argv: Iterable[str]) -> str:
    import shlex

    return shlex.join(list(argv))
