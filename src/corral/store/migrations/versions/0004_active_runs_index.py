"""a partial index of the unfinished runs, newest first

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-26

``ix_runs_active`` on ``runs (created_at, id)`` where the run is unfinished: listing the
newest active runs reads a page of it instead of sorting every waiting run (``corral ls``
with thousands of queued runs). The condition is ``states.ACTIVE_RUNS_SQL`` as it was then,
spelled out here so that this revision never changes.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

ACTIVE = "state IN ('PENDING', 'PROVISIONING', 'RECOVERING', 'RUNNING', 'STOPPING')"


def upgrade() -> None:
    op.create_index(
        "ix_runs_active",
        "runs",
        ["created_at", "id"],
        sqlite_where=sa.text(ACTIVE),
        postgresql_where=sa.text(ACTIVE),
    )


def downgrade() -> None:
    op.drop_index("ix_runs_active", table_name="runs")
