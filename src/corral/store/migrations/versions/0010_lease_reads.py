"""each controller reads the runs it holds and the free ones, not every active run

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-29

``ix_runs_leases``: the unfinished runs by ``lease_owner``, then ``created_at, id``, with
``state`` and ``requested_action``: the controller's loop reads its own runs and the free ones
(``lease_owner`` NULL) from the index alone, two ranges of it, instead of every active run
(``Store.run_heads(owner=...)``). ``lease_expires_at`` is in no index, so renewing a lease
changes no index entry (on PostgreSQL a heap-only update, with room on the page: the table's
fill factor is 80 from here on, for the pages written from now).

``controllers.took_at``: when the controller last took runs (or tried to), or first said it
lives: a controller over its share gives runs up only while another one takes them.

The unfinished runs' leases whose owner no longer has a row in ``controllers`` (deleted once
expired, its leases expired with it) are made free (``lease_owner`` NULL, the expiry kept): a
controller finds the free runs by their owner, not by reading every expiry.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

ACTIVE = "state IN ('PENDING', 'PROVISIONING', 'RECOVERING', 'RUNNING', 'STOPPING')"


def upgrade() -> None:
    op.create_index(
        "ix_runs_leases",
        "runs",
        ["lease_owner", "created_at", "id", "state", "requested_action"],
        sqlite_where=sa.text(ACTIVE),
        postgresql_where=sa.text(ACTIVE),
    )
    op.add_column("controllers", sa.Column("took_at", sa.DateTime(timezone=True)))
    op.execute(
        f"UPDATE runs SET lease_owner = NULL WHERE {ACTIVE} AND lease_owner IS NOT NULL "
        "AND lease_owner NOT IN (SELECT owner FROM controllers)"
    )
    if op.get_bind().dialect.name == "postgresql":
        op.execute("ALTER TABLE runs SET (fillfactor = 80)")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("ALTER TABLE runs RESET (fillfactor)")
    with op.batch_alter_table("controllers") as batch:
        batch.drop_column("took_at")
    op.drop_index("ix_runs_leases", table_name="runs")
