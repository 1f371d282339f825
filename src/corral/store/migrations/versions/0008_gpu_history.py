"""GPU readings kept as a time series

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-29

``gpu_series``: one row per GPU of one place: this controller's machine (``kind`` host,
``source`` its host name, ``attempt`` 0) or a run's node (``kind`` node, ``source`` the run's
id, ``attempt`` its number), with what does not change from reading to reading (the GPU's
index, uuid, model name and memory size). ``gpu_readings``: one small row per reading, keyed
by (series, unix second): utilisation (%), memory used (MB) and temperature (°C) as integers.
On SQLite the readings table has no rowid (its rows live in the primary key's b-tree: no second
copy of the key), so a day of readings at one a minute costs tens of KB per GPU.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

#: unix seconds: 64-bit on PostgreSQL; SQLite's integers take the bytes they need anyway
SECONDS = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "gpu_series",
        sa.Column("id", sa.Integer, nullable=False),
        sa.Column("kind", sa.String, nullable=False),
        sa.Column("source", sa.String, nullable=False),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("gpu", sa.SmallInteger, nullable=False),
        sa.Column("uuid", sa.String, nullable=False),
        sa.Column("name", sa.String, nullable=False),
        sa.Column("memory_total_mb", sa.Integer),
        sa.PrimaryKeyConstraint("id", name="pk_gpu_series"),
        sa.UniqueConstraint(
            "kind", "source", "attempt", "gpu", name="uq_gpu_series_kind_source_attempt_gpu"
        ),
    )
    op.create_table(
        "gpu_readings",
        sa.Column("series", sa.Integer, nullable=False),
        sa.Column("t", SECONDS, nullable=False),
        sa.Column("util", sa.SmallInteger),
        sa.Column("mem_mb", sa.Integer),
        sa.Column("temp_c", sa.SmallInteger),
        sa.ForeignKeyConstraint(
            ["series"],
            ["gpu_series.id"],
            name="fk_gpu_readings_series_gpu_series",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("series", "t", name="pk_gpu_readings"),
        sqlite_with_rowid=False,
    )


def downgrade() -> None:
    op.drop_table("gpu_readings")
    op.drop_table("gpu_series")
