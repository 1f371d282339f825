"""The typed values the service returns. Strict (``extra="forbid"``) and frozen.

``to_json()`` gives the JSON document a front door shows: the CLI prints it for ``--json``
and a server sends it as is. Field order and formats are those of the CLI's JSON output
since before the service existed (datetimes as Python ``isoformat()``, with ``+00:00``), so
scripts reading that output keep working.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal, get_type_hints

from pydantic import (
    BaseModel,
    ConfigDict,
    JsonValue,
    PlainSerializer,
    SerializerFunctionWrapHandler,
    create_model,
    model_serializer,
)

from corral.service.run_view import FIELDS as RUN_FIELDS
from corral.service.run_view import RunView
from corral.store.records import AttemptRecord, EventRecord

#: the largest offset, cursor or count a front door accepts (what the store's integers hold);
#: a larger one is refused as bad input, never a server error
MAX_OFFSET = 2**63 - 1

#: A UTC datetime, written in JSON as ``datetime.isoformat()`` (``...+00:00``), the way the
#: store's records have always been shown.
IsoDatetime = Annotated[datetime, PlainSerializer(datetime.isoformat, when_used="json")]

JsonObject = dict[str, JsonValue]


class View(BaseModel):
    """Base of every returned value."""

    #: defer_build: a model's validator is built on first use, not at import (CLI start-up)
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    def to_json(self) -> Any:
        """The JSON-ready document (plain dicts, lists, strings and numbers)."""
        return self.model_dump(mode="json")


# --- runs --------------------------------------------------------------------------------------


class AttemptView(View):
    """One attempt of a run: an attempt's columns without its private bookkeeping (the
    cached agent status and the log copy offsets)."""

    id: int
    run_id: str
    number: int
    provider: str
    offer: JsonObject
    instance_id: str | None
    endpoint: str | None
    state: str
    price_per_hour: float
    started_at: IsoDatetime | None
    running_at: IsoDatetime | None
    ended_at: IsoDatetime | None
    billed_until: IsoDatetime | None
    exit_reason: str | None
    exit_code: int | None
    cost_usd: float
    events_cursor: int

    @classmethod
    def of(cls, attempt: AttemptRecord) -> AttemptView:
        return cls(**{name: getattr(attempt, name) for name in cls.model_fields})


def _pydantic_type(hint: Any) -> Any:
    """A RunView field's type for pydantic: datetimes serialised the way RunView does."""
    if hint is datetime:
        return IsoDatetime
    if hint == (datetime | None):
        return IsoDatetime | None
    return hint


if TYPE_CHECKING:
    # What mypy sees of the model made below: a View with RunView's fields (mypy cannot
    # follow create_model); never run.
    class RunFields(View, RunView): ...

else:
    #: The fields of :class:`RunView` as a pydantic base: one list of a run's fields for both.
    RunFields = create_model(
        "RunFields",
        __base__=View,
        **{
            f.name: (_pydantic_type(hint), ...)
            for f, hint in zip(
                RUN_FIELDS, (get_type_hints(RunView)[f.name] for f in RUN_FIELDS), strict=True
            )
        },
    )


class OmitsNone(View):
    """A view whose fields named in ``omitted_when_none`` are left out of its JSON when they
    are None (keys that ``--json`` output has only printed when they had a value)."""

    omitted_when_none: ClassVar[frozenset[str]] = frozenset()

    @model_serializer(mode="wrap")
    def _omit_none(self, handler: SerializerFunctionWrapHandler) -> Any:
        data = handler(self)
        if isinstance(data, dict):
            for name in self.omitted_when_none:
                if name in data and data[name] is None:
                    del data[name]
        return data


class RunDetails(OmitsNone, RunFields):
    """One run in detail (``corral status --json``): the run, its attempts, and what its
    agent last reported (stage table, acceptance verdict, manifest, checkpoint sync).
    ``checkpoint_dir`` is left out of the JSON when the run's spec gives none, and
    ``last_checkpoint`` before the job reported one."""

    omitted_when_none = frozenset(
        {
            "checkpoint_dir",
            "last_checkpoint",
            "code",
            "services",
            "warnings",
            "checkpoint_mirror",
            "budget",
            "forecast",
            "nodes",
        }
    )

    attempts: list[AttemptView]
    stages: list[JsonObject]
    acceptance: JsonValue
    manifest: JsonValue
    checkpoint_sync: JsonValue
    logs_dir: str
    checkpoint_dir: str | None = None
    #: the newest checkpoint the job reported (step, path, stage; ``shards``: the ranks that
    #: wrote a sharded one), as its agent last said
    last_checkpoint: JsonValue = None
    #: what was shipped to a machine that does not share this one's files (the workdir's
    #: bundle, the git commit); left out of the JSON for a run on this machine
    code: JsonValue = None
    #: the run's service stages with their URLs (left out for a run without services)
    services: list[JsonObject] | None = None
    #: the mirror of ``checkpoints.path`` as its agent last said (uploaded, last_uploaded,
    #: restored, last_error, warning); left out for a run without it
    checkpoint_mirror: JsonValue = None
    #: what the run warned about (storage set, yet no checkpoint recognised), newest last;
    #: left out when none
    warnings: list[str] | None = None
    #: the money cap and where it came from (the spec, the default for a paid run, opted
    #: out): "$10.00, warning at 90 % (the default: CORRAL_DEFAULT_MAX_COST_USD)"; left out
    #: when the run has none to say
    budget: str | None = None
    #: what the run will cost in all and when its running stages end, from their progress
    #: rate (``cost_usd``, ``finish_in_s``, ``fraction``); left out while there is none
    forecast: JsonValue = None
    #: a multi-node run's machines of its current attempt, by rank (``rank``, ``instance_id``,
    #: ``provider``, ``region``, ``state``, ``kept``: from the attempt before, ``cost_usd``:
    #: this machine in this attempt); left out for a run of one node
    nodes: list[JsonObject] | None = None


class Preemption(View):
    """A machine preempted on request (``corral debug preempt --json``)."""

    run_id: str
    attempt: int
    provider: str
    instance_id: str
    key: str
    grace_s: float
    instance_state: str
    detail: str


# --- events and logs ---------------------------------------------------------------------------


class EventView(View):
    """One event of a run's history (``run.state`` transitions, agent events, ...)."""

    id: int
    run_id: str
    attempt: int | None
    ts: IsoDatetime
    type: str
    reason: str
    data: JsonObject

    @classmethod
    def of(cls, event: EventRecord) -> EventView:
        return cls(**{name: getattr(event, name) for name in cls.model_fields})


class EventPage(View):
    """Events after a cursor; ask again with ``after=cursor`` for the next ones (``cursor``
    is the last id returned, or the ``after`` asked with when there was none)."""

    run_id: str
    events: list[EventView]
    cursor: int


class LogLine(View):
    """One line of a stage log: its attempt, stage, the agent's UTC timestamp ("" if the line
    carries none) and the text."""

    attempt: int
    stage: str
    ts: str
    text: str


class LogFile(View):
    """One stage log of one attempt, as copied from the node."""

    attempt: int
    stage: str
    size: int


class LogChunk(View):
    """Bytes ``offset..next_offset`` of one stage log, decoded as UTF-8. It ends at a line
    end unless a single line is longer than the chunk; ``eof`` says the log had no more
    bytes when it was read (a live stage may write more later)."""

    run_id: str
    attempt: int
    stage: str
    offset: int
    next_offset: int
    eof: bool
    text: str


# --- secrets and webhooks ----------------------------------------------------------------------


class SecretView(View):
    """What may be shown about a secret: its name and dates, never its value."""

    name: str
    created_at: IsoDatetime
    updated_at: IsoDatetime


class SecretDeleted(View):
    name: str
    deleted: Literal[True] = True


class SecretsRotated(View):
    """Every secret re-encrypted with a new key; ``keys`` left in the key ring's ``source``."""

    reencrypted: int
    keys: int
    source: str


class SignatureValid(View):
    """A webhook request whose signature and timestamp check out."""

    valid: Literal[True] = True
    age_s: float
    bytes: int


class SignatureRejected(View):
    """A webhook request that does not check out, and why."""

    valid: Literal[False] = False
    reason: str
