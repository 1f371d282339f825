"""corral's database: runs, attempts, events and the resource intent log.

SQLite under ``CORRAL_HOME`` by default, PostgreSQL when ``CORRAL_DATABASE_URL`` says so. See
``docs/store.md``. Importing this package loads neither SQLAlchemy nor alembic.
"""

from __future__ import annotations

from corral.store.migrate import HEAD
from corral.store.records import AttemptRecord, EventRecord, ResourceRecord, RunRecord
from corral.store.states import (
    ACTIONS,
    ACTIVE_STATES,
    OPEN_RESOURCE_STATES,
    RESOURCE_STATES,
    RUN_STATES,
    TERMINAL_STATES,
    Action,
    ResourceState,
    RunState,
)
from corral.store.store import Store

__all__ = [
    "ACTIONS",
    "ACTIVE_STATES",
    "HEAD",
    "OPEN_RESOURCE_STATES",
    "RESOURCE_STATES",
    "RUN_STATES",
    "TERMINAL_STATES",
    "Action",
    "AttemptRecord",
    "EventRecord",
    "ResourceRecord",
    "ResourceState",
    "RunRecord",
    "RunState",
    "Store",
]
