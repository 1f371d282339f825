"""cron schedules, their ticks, and a lease on the event feed

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-25

``schedules`` and ``schedule_ticks`` (unique per schedule and tick: one run per tick whatever
the number of controllers); ``event_positions.lease_owner``/``lease_expires_at``: with several
controllers on one database, one at a time consumes the feed (delivers the webhooks).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    with op.batch_alter_table("event_positions") as batch:
        batch.add_column(sa.Column("lease_owner", sa.String))
        batch.add_column(sa.Column("lease_expires_at", TS))
    op.create_table(
        "schedules",
        sa.Column("name", sa.String, nullable=False),
        sa.Column("cron", sa.String, nullable=False),
        sa.Column("timezone", sa.String, nullable=False),
        sa.Column("missed", sa.String, nullable=False),
        sa.Column("spec_hash", sa.String, nullable=False),
        sa.Column("spec_path", sa.Text, nullable=False),
        sa.Column("workdir", sa.Text, nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("updated_at", TS, nullable=False),
        sa.Column("next_at", TS, nullable=False),
        sa.Column("last_tick_at", TS),
        sa.Column("last_run_id", sa.String),
        sa.Column("fired", sa.Integer, nullable=False),
        sa.Column("skipped", sa.Integer, nullable=False),
        sa.Column("spec", sa.JSON, nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_schedules"),
    )
    op.create_index("ix_schedules_next_at", "schedules", ["next_at"])
    op.create_table(
        "schedule_ticks",
        sa.Column("schedule", sa.String, nullable=False),
        sa.Column("tick_at", TS, nullable=False),
        sa.Column("run_id", sa.String),
        sa.Column("missed", sa.Integer, nullable=False),
        sa.Column("fired_at", TS, nullable=False),
        sa.ForeignKeyConstraint(
            ["schedule"],
            ["schedules.name"],
            name="fk_schedule_ticks_schedule_schedules",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("schedule", "tick_at", name="pk_schedule_ticks"),
    )


def downgrade() -> None:
    op.drop_table("schedule_ticks")
    op.drop_index("ix_schedules_next_at", table_name="schedules")
    op.drop_table("schedules")
    with op.batch_alter_table("event_positions") as batch:
        batch.drop_column("lease_expires_at")
        batch.drop_column("lease_owner")
