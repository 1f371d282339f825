"""webhook delivery cursors and event feed positions

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-21

``event_positions`` starts the webhook dispatcher ("webhooks") at the newest event already in
the database: webhooks fire for what happens after this migration, never for old history.
"""

from __future__ import annotations

from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    positions = op.create_table(
        "event_positions",
        sa.Column("consumer", sa.String, nullable=False),
        sa.Column("event_id", sa.BigInteger, nullable=False),
        sa.Column("updated_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("consumer", name="pk_event_positions"),
    )
    op.create_table(
        "webhook_cursors",
        sa.Column("run_id", sa.String, nullable=False),
        sa.Column("webhook", sa.Integer, autoincrement=False, nullable=False),
        sa.Column("event_id", sa.BigInteger, nullable=False),
        sa.Column("progress_ts", TS),
        sa.Column("delivered", sa.Integer, nullable=False),
        sa.Column("failed", sa.Integer, nullable=False),
        sa.Column("updated_at", TS, nullable=False),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.id"], name="fk_webhook_cursors_run_id_runs", ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("run_id", "webhook", name="pk_webhook_cursors"),
    )
    newest = op.get_bind().execute(sa.text("SELECT COALESCE(MAX(id), 0) FROM events")).scalar()
    op.bulk_insert(
        positions,
        [{"consumer": "webhooks", "event_id": int(newest or 0), "updated_at": datetime.now(UTC)}],
    )


def downgrade() -> None:
    op.drop_table("webhook_cursors")
    op.drop_table("event_positions")
