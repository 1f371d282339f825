"""Names scripts/dead_code.py must not report, each with the reason it stays (vulture reads this
file with the code: a name used here counts as used). Keep it short: dead code is removed."""
# ruff: noqa

# Lightning's Callback hooks: an override keeps its base's parameters, used or not
# (src/corral/sdk/integrations/lightning.py)
pl_module
batch_idx
# a signal handler is called with (signum, frame) (src/corral/sdk/signals.py)
frame
# the type of a node hook class, for hook authors' annotations: the protocol corral.wire.node
# publishes beside NodeHook and NodeContext
NodeHookFactory
# CLI commands: corral.cli.app imports each by its name when it is run (one module a command)
exec_
ls
# alembic calls each revision's upgrade() and downgrade() by name
downgrade
# a node hook is loaded by its "module:Class" name in the plan (providers/salad/bootstrap.py)
SaladNode
# the /events answer: issue #26's wire work has the agent build it and the controller parse it
EventsPage
