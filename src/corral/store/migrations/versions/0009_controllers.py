"""the controllers sharing a store; the unfinished runs' index covers the loop's read

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-29

``controllers``: one row per controller sharing the store (its lease owner id) and when its
presence expires, renewed with its leases: each controller takes at most its fair share of the
active runs (their number over the live controllers'), so K controllers hold about 1/K each.

``ix_runs_active`` (the unfinished runs by ``created_at, id``) also holds ``state`` and
``requested_action``: what the controller's loop reads of every active run each tick
(``Store.run_heads``) comes from the index alone, in its order (at 10,000 runs SQLite read
every table row and sorted them). The condition is the one of revision 0004.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


ACTIVE = "state IN ('PENDING', 'PROVISIONING', 'RECOVERING', 'RUNNING', 'STOPPING')"


def upgrade() -> None:
    op.drop_index("ix_runs_active", table_name="runs")
    op.create_index(
        "ix_runs_active",
        "runs",
        ["created_at", "id", "state", "requested_action"],
        sqlite_where=sa.text(ACTIVE),
        postgresql_where=sa.text(ACTIVE),
    )
    op.create_table(
        "controllers",
        sa.Column("owner", sa.String, nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("owner", name="pk_controllers"),
    )


def downgrade() -> None:
    op.drop_table("controllers")
    op.drop_index("ix_runs_active", table_name="runs")
    op.create_index(
        "ix_runs_active",
        "runs",
        ["created_at", "id"],
        sqlite_where=sa.text(ACTIVE),
        postgresql_where=sa.text(ACTIVE),
    )
