"""Attempt hooks: work the agent does around the stages, besides running them.

The protocol a hook implements, and what it may ask of the runner, is the wire's
(:mod:`corral.wire.node`): the agent's own hooks (checkpoint sync, artifacts) and the node hooks
a provider names in the plan (``plan.node_hooks``, ``"module:Class"`` references to code in the
provider's folder) are the same kind of object. This module only decides which hooks an
attempt gets, and loads the provider's by reference: the agent never imports a provider.
"""

from __future__ import annotations

import importlib

from corral.agent.artifacts import ArtifactsHook
from corral.errors import BadInput
from corral.wire.node import NodeContext, NodeHook

#: The hook protocol under its historical name (see :class:`corral.wire.node.NodeHook`).
AttemptHook = NodeHook


def load_node_hook(reference: str, context: NodeContext) -> NodeHook:
    """Import ``"module:Class"`` and build the hook with ``context``. A reference that does
    not import, or does not name a hook class, is :class:`BadInput` (the agent does not start)."""
    module_name, _, attr = reference.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise BadInput(f"node hook {reference!r} cannot be imported: {exc}") from None
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise BadInput(f"node hook {reference!r}: {module_name} has no {attr!r}")
    hook = factory(context)
    if not isinstance(hook, NodeHook):
        raise BadInput(f"node hook {reference!r} does not implement corral.wire.node.NodeHook")
    return hook


def build_hooks(context: NodeContext) -> list[NodeHook]:
    """The hooks of one attempt, in the order the runner calls them: the plan's node hooks
    first (a notice poller watches from agent start-up on, setup included), then checkpoint
    sync if the plan mirrors checkpoints, the mirror of ``checkpoints.path`` if it names any,
    then artifacts (always: every attempt ends with a
    manifest - stage timings, cost, git commit - even with nothing to upload; a gang's node
    other than the head keeps its manifest on the node: the run's storage is the head's)."""
    plan = context.plan
    hooks = [load_node_hook(ref, context) for ref in plan.node_hooks]
    if plan.checkpoint_storage:
        # imported only when the plan mirrors checkpoints: it pulls in the storage clients,
        # which most attempts do not need at start-up (no import cycle: it imports no agent
        # module that imports this one)
        from corral.agent.checkpoint_sync import CheckpointSync

        hooks.append(
            CheckpointSync(
                plan,
                context.events,
                environ=context.environ,
                checkpoint_dir=context.checkpoint_dir,
            )
        )
    if plan.checkpoint_paths:
        from corral.agent.path_mirror import PathMirror

        hooks.append(PathMirror(plan, context.events, environ=context.environ))
    if context.node_rank > 0:  # a gang's other node: its manifest stays on the node, and
        # the run's artifact storage (its manifest, its files) is the head's alone
        plan = plan.model_copy(
            update={"artifacts": plan.artifacts.model_copy(update={"storage": None})}
        )
    hooks.append(ArtifactsHook(plan, context.events, state_dir=context.state_dir))
    return hooks
