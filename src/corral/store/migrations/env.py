"""alembic environment for corral's store, configured in code (no alembic.ini).

The caller (``corral.store.migrate``) passes an open connection inside a transaction through
``config.attributes["connection"]``; the whole upgrade runs in that transaction.
"""

from __future__ import annotations

from alembic import context

from corral.store.schema import metadata

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("run migrations through corral.store.migrate (it passes a connection)")

context.configure(
    connection=connection,
    target_metadata=metadata,
    render_as_batch=connection.dialect.name == "sqlite",  # SQLite cannot ALTER most things
    compare_type=True,
)
with context.begin_transaction():
    context.run_migrations()
