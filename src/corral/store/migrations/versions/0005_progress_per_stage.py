"""progress webhooks throttled per stage

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-28

``webhook_cursors.progress_stages``: per stage of the run, the event time of the last
progress event that went out to the webhook, so each parallel stage has its own
``progress_interval`` and the throttle survives a restart (``progress_ts`` stays: the newest
of them). NULL for cursors written before: their stages start unthrottled.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("webhook_cursors") as batch:
        batch.add_column(sa.Column("progress_stages", sa.JSON))


def downgrade() -> None:
    with op.batch_alter_table("webhook_cursors") as batch:
        batch.drop_column("progress_stages")
