"""sweeps and their trials

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-29

``sweeps``: a hyperparameter search (``corral sweep launch``): the job spec its trials start
from, the ``sweep:`` section, its state. ``sweep_trials``: one row per trial, unique per
(sweep, number): a trial is started once whatever the number of controllers, its run created
in the same transaction. What the trial reported of the metric is kept here (``intermediate``:
{step: value}), so a restarted controller rebuilds the search from the database alone.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "sweeps",
        sa.Column("name", sa.String, nullable=False),
        sa.Column("state", sa.String, nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("spec_path", sa.Text, nullable=False),
        sa.Column("owner", sa.String),
        sa.Column("best_trial", sa.Integer),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("updated_at", TS, nullable=False),
        sa.Column("finished_at", TS),
        sa.Column("sweep", sa.JSON, nullable=False),
        sa.Column("job", sa.JSON, nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_sweeps"),
    )
    op.create_table(
        "sweep_trials",
        sa.Column("sweep", sa.String, nullable=False),
        sa.Column("number", sa.Integer, nullable=False),
        sa.Column("run_id", sa.String, nullable=False),
        sa.Column("state", sa.String, nullable=False),
        sa.Column("params", sa.JSON, nullable=False),
        sa.Column("value", sa.Float),
        sa.Column("step", sa.BigInteger),
        sa.Column("intermediate", sa.JSON, nullable=False),
        sa.Column("events_cursor", sa.BigInteger, nullable=False),
        sa.Column("cost_usd", sa.Float, nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("updated_at", TS, nullable=False),
        sa.ForeignKeyConstraint(
            ["sweep"], ["sweeps.name"], name="fk_sweep_trials_sweep_sweeps", ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("sweep", "number", name="pk_sweep_trials"),
    )


def downgrade() -> None:
    op.drop_table("sweep_trials")
    op.drop_table("sweeps")
