"""``GET /poll``: one request that carries what the controller copies from an agent on each
look at a run - the status, the events after its cursor and the new bytes of every stage log.

The request names where the controller stands::

    GET /poll?events_after=N&logs=<stage>:<offset>,<stage>:<offset>&log_limit=L

``logs`` lists the byte offset the controller holds for each stage log (a stage it does not
list is read from 0; names are percent-encoded like any query value); ``log_limit`` caps the
log bytes of the answer, all stages together. The answer (:class:`PollAnswer`) holds the
status (what ``GET /status`` answers), a page of events (what ``GET /events`` answers) and,
for each stage with new bytes, a chunk (what ``GET /logs?stage=`` answers). ``more`` says
that the agent holds more than fitted: the controller asks again at once.

Every agent serves ``/poll`` (:data:`POLL_VERSION` is what its ``/health`` lists under
``features``). The agent builds :class:`PollAnswer` and the controller validates it, once
per answer; as for the status, an unknown key is refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import quote, unquote

from pydantic import BaseModel, ConfigDict, Field

from corral.wire.events import AgentEvent
from corral.wire.status import AgentStatus

#: the feature name (and version) an agent that serves ``/poll`` lists in ``/health``
POLL_FEATURE = "poll"
POLL_VERSION = 1
#: log bytes one answer carries by default, all stages together
DEFAULT_LOG_LIMIT = 256 * 1024
#: events one answer carries at most
MAX_POLL_EVENTS = 1000


class LogChunk(BaseModel):
    """New bytes of one stage log: ``data`` is the file from ``offset`` to ``next_offset``
    (whole lines; UTF-8), ``eof``: the stage is over and nothing follows."""

    # built on first use: an agent starting its stages needs none of the poll models
    model_config = ConfigDict(extra="forbid", defer_build=True)

    offset: int = Field(ge=0)
    next_offset: int = Field(ge=0)
    data: str = ""
    eof: bool = False


class StageLogChunk(LogChunk):
    """``GET /logs?stage=S``: one chunk of one stage log, naming the stage."""

    stage: str


class LogSizes(BaseModel):
    """``GET /logs``: every stage log's size in bytes."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    stages: dict[str, int] = Field(default_factory=dict)


class PollAnswer(BaseModel):
    """The answer to ``GET /poll``."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    wire_version: int | None = None
    status: AgentStatus
    #: events after the request's ``events_after``, oldest first
    events: list[AgentEvent] = Field(default_factory=list)
    #: the ``events_after`` of the next request
    events_next: int = Field(0, ge=0)
    #: stage name -> its new bytes (stages without new bytes are left out)
    logs: dict[str, LogChunk] = Field(default_factory=dict)
    #: every stage log's size in bytes (what is left to copy, with the offsets)
    log_sizes: dict[str, int] = Field(default_factory=dict)
    #: the agent holds more events or log bytes than this answer carried
    more: bool = False


def encode_offsets(offsets: Mapping[str, int]) -> str:
    """The ``logs`` query value for ``{stage: offset}`` (stages at 0 may be left out)."""
    return ",".join(f"{quote(name, safe='')}:{int(off)}" for name, off in offsets.items())


def decode_offsets(raw: str) -> dict[str, int]:
    """``{stage: offset}`` from a ``logs`` query value; ValueError naming what is wrong."""
    out: dict[str, int] = {}
    for item in raw.split(","):
        if not item:
            continue
        name, sep, off = item.rpartition(":")
        if not sep or not name:
            raise ValueError(f"logs: {item[:40]!r} is not <stage>:<offset>")
        if not (off.isascii() and off.isdigit()) or len(off) > 18:
            raise ValueError(f"logs: the offset of {unquote(name)[:40]!r} is not a whole number")
        out[unquote(name)] = int(off)
    return out
