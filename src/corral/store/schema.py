"""The tables as SQLAlchemy metadata: what alembic autogenerates new migrations against.

Imported by the migration environment and by tests only, never on the store's hot path (the
queries use the column lists in ``records.py``; a test checks both agree, and another checks
that the migrations at head produce exactly this schema).
"""

from __future__ import annotations

import sqlalchemy as sa

from corral.store.states import ACTIVE_RUNS_SQL

metadata = sa.MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)

TS = sa.DateTime(timezone=True)
#: 64-bit ids on PostgreSQL; on SQLite an INTEGER PRIMARY KEY (the rowid) is already 64-bit.
BIGID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")

runs = sa.Table(
    "runs",
    metadata,
    sa.Column("id", sa.String, primary_key=True),
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
    sa.Index(None, "created_at", "id"),  # list_runs: newest first
    sa.Index(None, "name", "created_at"),
    sa.Index(None, "state"),
    # the unfinished runs, newest first (`corral ls`, the controller's reads), however long
    # the history and however many runs wait; with their state and requested action, all
    # the controller's loop reads of them every tick (``Store.run_heads``: the index alone)
    sa.Index(
        "ix_runs_active",
        "created_at",
        "id",
        "state",
        "requested_action",
        sqlite_where=sa.text(ACTIVE_RUNS_SQL),
        postgresql_where=sa.text(ACTIVE_RUNS_SQL),
    ),
    # the same runs by their lease holder: a controller sharing the store reads its own and
    # the free ones (``lease_owner`` NULL) each tick from two ranges of it (revision 0010);
    # ``lease_expires_at`` is in no index, so a renewal changes no index entry
    sa.Index(
        "ix_runs_leases",
        "lease_owner",
        "created_at",
        "id",
        "state",
        "requested_action",
        sqlite_where=sa.text(ACTIVE_RUNS_SQL),
        postgresql_where=sa.text(ACTIVE_RUNS_SQL),
    ),
)

attempts = sa.Table(
    "attempts",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("run_id", sa.String, sa.ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
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
    sa.UniqueConstraint("run_id", "number"),
)

events = sa.Table(
    "events",
    metadata,
    sa.Column("id", BIGID, primary_key=True, autoincrement=True),
    sa.Column("run_id", sa.String, sa.ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
    sa.Column("attempt", sa.Integer),
    sa.Column("ts", TS, nullable=False),
    sa.Column("type", sa.String, nullable=False),
    sa.Column("reason", sa.Text, nullable=False),
    sa.Column("data", sa.JSON, nullable=False),
    sa.Index(None, "run_id", "id"),
    sqlite_autoincrement=True,  # never reuse an id: readers page with after_id
)

# No ON DELETE CASCADE here: this is the log that prevents orphaned paid instances, and a
# run must not be deletable while one of its resources is not confirmed gone.
resources = sa.Table(
    "resources",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("run_id", sa.String, sa.ForeignKey("runs.id"), nullable=False),
    sa.Column("attempt", sa.Integer, nullable=False),
    sa.Column("provider", sa.String, nullable=False),
    sa.Column("key", sa.String, nullable=False),
    sa.Column("state", sa.String, nullable=False),
    sa.Column("instance_id", sa.String),
    sa.Column("instance", sa.JSON),
    sa.Column("data", sa.JSON, nullable=False),
    sa.Column("created_at", TS, nullable=False),
    sa.Column("updated_at", TS, nullable=False),
    sa.UniqueConstraint("key"),
    sa.Index(None, "run_id"),
    sa.Index(None, "state"),
)

# Webhook delivery progress, per (run, webhook): all events of the run up to ``event_id`` were
# delivered or given up on. ``webhook`` is the index in the run's ``notify.webhooks`` (a run's
# spec never changes). ``progress_ts``: the event time of the last progress event that went
# out; ``progress_stages``: that time per stage ({stage: ISO time}), so progress throttling
# (per stage) survives a restart.
webhook_cursors = sa.Table(
    "webhook_cursors",
    metadata,
    sa.Column(
        "run_id",
        sa.String,
        sa.ForeignKey("runs.id", ondelete="CASCADE"),
        primary_key=True,
    ),
    sa.Column("webhook", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("event_id", sa.BigInteger, nullable=False),
    sa.Column("progress_ts", TS),
    sa.Column("progress_stages", sa.JSON),
    sa.Column("delivered", sa.Integer, nullable=False),
    sa.Column("failed", sa.Integer, nullable=False),
    sa.Column("updated_at", TS, nullable=False),
)

# How far a consumer of the global event feed (the webhook dispatcher: "webhooks") has
# looked: every event up to ``event_id`` has been handled, so a restart scans from there.
event_positions = sa.Table(
    "event_positions",
    metadata,
    sa.Column("consumer", sa.String, primary_key=True),
    sa.Column("event_id", sa.BigInteger, nullable=False),
    sa.Column("updated_at", TS, nullable=False),
    # with several controllers on one database, one of them consumes the feed at a time: the
    # one whose lease this is (until ``lease_expires_at``)
    sa.Column("lease_owner", sa.String),
    sa.Column("lease_expires_at", TS),
)

# Cron schedules (``corral schedule add``): the resolved spec, and ``next_at``, the next tick
# due; a controller moves it forward with a compare-and-set.
schedules = sa.Table(
    "schedules",
    metadata,
    sa.Column("name", sa.String, primary_key=True),
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
    sa.Index(None, "next_at"),
)

# One row per tick a schedule acted on: the unique key is what makes a tick start one run
# whatever the number of controllers. ``run_id`` is NULL for ticks skipped by the policy.
schedule_ticks = sa.Table(
    "schedule_ticks",
    metadata,
    sa.Column(
        "schedule",
        sa.String,
        sa.ForeignKey("schedules.name", ondelete="CASCADE"),
        primary_key=True,
    ),
    sa.Column("tick_at", TS, primary_key=True),
    sa.Column("run_id", sa.String),
    sa.Column("missed", sa.Integer, nullable=False),
    sa.Column("fired_at", TS, nullable=False),
)

# Who launched a run (the API token's name on a team server, the login name locally) and its
# spec's ``project`` label: what per-user and per-project spending caps count. A table of its
# own, so a ``runs`` row keeps its (large) spec last.
run_owners = sa.Table(
    "run_owners",
    metadata,
    sa.Column("run_id", sa.String, sa.ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True),
    sa.Column("owner", sa.String),
    sa.Column("project", sa.String),
    sa.Index(None, "owner"),
    sa.Index(None, "project"),
)

# Spending caps across runs (``corral budget``): dollars per user, per project or for the whole
# team (``subject`` ''), per calendar month (UTC) or in all (``period``).
spending_caps = sa.Table(
    "spending_caps",
    metadata,
    sa.Column("scope", sa.String, primary_key=True),
    sa.Column("subject", sa.String, primary_key=True),
    sa.Column("period", sa.String, nullable=False),
    sa.Column("amount_usd", sa.Float, nullable=False),
    sa.Column("warn_at", sa.Float, nullable=False),
    sa.Column("created_at", TS, nullable=False),
    sa.Column("updated_at", TS, nullable=False),
    sa.Column("set_by", sa.String),
)

# Hyperparameter sweeps (``corral sweep``): the job spec the trials start from and the
# ``sweep:`` section; states RUNNING, STOPPING, FINISHED, STOPPED.
sweeps = sa.Table(
    "sweeps",
    metadata,
    sa.Column("name", sa.String, primary_key=True),
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
)

# One row per trial of a sweep, unique per (sweep, number): created with its run, in one
# transaction. ``intermediate``: the metric per step as reported; ``events_cursor``: the run's
# events read so far.
sweep_trials = sa.Table(
    "sweep_trials",
    metadata,
    sa.Column(
        "sweep", sa.String, sa.ForeignKey("sweeps.name", ondelete="CASCADE"), primary_key=True
    ),
    sa.Column("number", sa.Integer, primary_key=True, autoincrement=False),
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
)

# GPU readings kept as a time series (``store/gpu_history.py``): one row per GPU of one place
# (this controller's machine: ``kind`` host, ``source`` its host name, ``attempt`` 0; or a
# run's node: ``kind`` node, ``source`` the run's id, ``attempt`` its number) ...
gpu_series = sa.Table(
    "gpu_series",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("kind", sa.String, nullable=False),
    sa.Column("source", sa.String, nullable=False),
    sa.Column("attempt", sa.Integer, nullable=False),
    sa.Column("gpu", sa.SmallInteger, nullable=False),
    sa.Column("uuid", sa.String, nullable=False),
    sa.Column("name", sa.String, nullable=False),
    sa.Column("memory_total_mb", sa.Integer),
    sa.UniqueConstraint("kind", "source", "attempt", "gpu"),
)

# ... and one small row per reading of it, keyed by (series, unix second): utilisation %,
# memory used (MB), temperature (°C). No rowid on SQLite: the rows live in the key's b-tree.
gpu_readings = sa.Table(
    "gpu_readings",
    metadata,
    sa.Column(
        "series",
        sa.Integer,
        sa.ForeignKey("gpu_series.id", ondelete="CASCADE"),
        primary_key=True,
        autoincrement=False,
    ),
    sa.Column(
        "t",
        sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
        primary_key=True,
        autoincrement=False,
    ),
    sa.Column("util", sa.SmallInteger),
    sa.Column("mem_mb", sa.Integer),
    sa.Column("temp_c", sa.SmallInteger),
    sqlite_with_rowid=False,
)

# The controllers sharing the store, each while it lives (renewed with its leases): how many
# there are is what each one's fair share of the active runs is reckoned from.
controllers = sa.Table(
    "controllers",
    metadata,
    sa.Column("owner", sa.String, primary_key=True),
    sa.Column("expires_at", TS, nullable=False),
    # when it last took runs (or tried to), or first said it lives (revision 0010)
    sa.Column("took_at", TS),
)
