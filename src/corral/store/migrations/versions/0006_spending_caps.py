"""who launched each run, and spending caps across runs

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-29

``run_owners``: per run, who launched it (the API token's name on a team server, the login
name on a single user's machine) and its spec's ``project`` label; a table of its own so the
``runs`` rows keep their spec last (see ``records.RunRecord``). Runs launched before have no
row: only a team-wide cap counts them.

``spending_caps``: dollars per user, per project or for the whole team (``scope``,
``subject``: '' for the team), per calendar month (UTC) or in all (``period``).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "run_owners",
        sa.Column("run_id", sa.String, nullable=False),
        sa.Column("owner", sa.String),
        sa.Column("project", sa.String),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.id"], name="fk_run_owners_run_id_runs", ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("run_id", name="pk_run_owners"),
    )
    op.create_index("ix_run_owners_owner", "run_owners", ["owner"])
    op.create_index("ix_run_owners_project", "run_owners", ["project"])
    op.create_table(
        "spending_caps",
        sa.Column("scope", sa.String, nullable=False),
        sa.Column("subject", sa.String, nullable=False),
        sa.Column("period", sa.String, nullable=False),
        sa.Column("amount_usd", sa.Float, nullable=False),
        sa.Column("warn_at", sa.Float, nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("updated_at", TS, nullable=False),
        sa.Column("set_by", sa.String),
        sa.PrimaryKeyConstraint("scope", "subject", name="pk_spending_caps"),
    )


def downgrade() -> None:
    op.drop_table("spending_caps")
    op.drop_index("ix_run_owners_project", table_name="run_owners")
    op.drop_index("ix_run_owners_owner", table_name="run_owners")
    op.drop_table("run_owners")
