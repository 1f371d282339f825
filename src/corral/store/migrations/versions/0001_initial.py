"""initial schema: runs, attempts, events, resources

Revision ID: 0001
Revises:
Create Date: 2026-11-21
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "runs",
        sa.Column("id", sa.String, nullable=False),
        sa.Column("name", sa.String, nullable=False),
        sa.Column("state", sa.String, nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("outcome", sa.String),
        sa.Column("requested_action", sa.String),
        sa.Column("spec_hash", sa.String, nullable=False),
        sa.Column("spec_path", sa.Text, nullable=False),
        sa.Column("workdir", sa.Text, nullable=False),
        sa.Column("provider", sa.String),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("cost_usd", sa.Float, nullable=False),
        sa.Column("exit_code", sa.Integer),
        sa.Column("failed_stage", sa.String),
        sa.Column("completed_stages", sa.JSON, nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("updated_at", TS, nullable=False),
        sa.Column("started_at", TS),
        sa.Column("finished_at", TS),
        sa.Column("lease_owner", sa.String),
        sa.Column("lease_expires_at", TS),
        sa.Column("spec", sa.JSON, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_runs"),
    )
    op.create_index("ix_runs_created_at_id", "runs", ["created_at", "id"])
    op.create_index("ix_runs_name_created_at", "runs", ["name", "created_at"])
    op.create_index("ix_runs_state", "runs", ["state"])

    op.create_table(
        "attempts",
        sa.Column("id", sa.Integer, nullable=False),
        sa.Column("run_id", sa.String, nullable=False),
        sa.Column("number", sa.Integer, nullable=False),
        sa.Column("provider", sa.String, nullable=False),
        sa.Column("offer", sa.JSON, nullable=False),
        sa.Column("instance_id", sa.String),
        sa.Column("endpoint", sa.String),
        sa.Column("state", sa.String, nullable=False),
        sa.Column("price_per_hour", sa.Float, nullable=False),
        sa.Column("started_at", TS),
        sa.Column("running_at", TS),
        sa.Column("ended_at", TS),
        sa.Column("billed_until", TS),
        sa.Column("exit_reason", sa.String),
        sa.Column("exit_code", sa.Integer),
        sa.Column("cost_usd", sa.Float, nullable=False),
        sa.Column("events_cursor", sa.Integer, nullable=False),
        sa.Column("log_offsets", sa.JSON, nullable=False),
        sa.Column("data", sa.JSON, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_attempts"),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.id"], name="fk_attempts_run_id_runs", ondelete="CASCADE"
        ),
        sa.UniqueConstraint("run_id", "number", name="uq_attempts_run_id_number"),
    )

    op.create_table(
        "events",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            nullable=False,
            autoincrement=True,
        ),
        sa.Column("run_id", sa.String, nullable=False),
        sa.Column("attempt", sa.Integer),
        sa.Column("ts", TS, nullable=False),
        sa.Column("type", sa.String, nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("data", sa.JSON, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_events"),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.id"], name="fk_events_run_id_runs", ondelete="CASCADE"
        ),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_events_run_id_id", "events", ["run_id", "id"])

    op.create_table(
        "resources",
        sa.Column("id", sa.Integer, nullable=False),
        sa.Column("run_id", sa.String, nullable=False),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("provider", sa.String, nullable=False),
        sa.Column("key", sa.String, nullable=False),
        sa.Column("state", sa.String, nullable=False),
        sa.Column("instance_id", sa.String),
        sa.Column("instance", sa.JSON),
        sa.Column("data", sa.JSON, nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("updated_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_resources"),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name="fk_resources_run_id_runs"),
        sa.UniqueConstraint("key", name="uq_resources_key"),
    )
    op.create_index("ix_resources_run_id", "resources", ["run_id"])
    op.create_index("ix_resources_state", "resources", ["state"])


def downgrade() -> None:
    op.drop_table("resources")
    op.drop_table("events")
    op.drop_table("attempts")
    op.drop_index("ix_runs_state", "runs")
    op.drop_index("ix_runs_name_created_at", "runs")
    op.drop_index("ix_runs_created_at_id", "runs")
    op.drop_table("runs")
