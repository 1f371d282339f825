"""Attempts of the pool in Redis: what the controller enqueued, which worker claimed it, its
agent's endpoint, and how it ended.

The record ``<pool>:attempt:<launch key>`` is written before the task is sent and moves
through these states, each change an atomic Lua script::

    queued -> claimed -> running -> finished | failed
       |         \\-----------\\---> lost      (no heartbeat for lost_after_s: a lost machine)
       |         \\-----------\\---> preempted (its worker was taken away: stopped gracefully)
       \\-> cancelled                          (terminated before a worker claimed it)

**One copy, ever.** A worker runs an attempt only if its claim moves the record from
``queued`` to ``claimed``. A second delivery of the same task (a broker re-delivery after the
visibility timeout, a worker killed before it acked, a launch repeated after a controller
crash) finds the record in another state, is counted in ``<pool>:duplicates`` and dropped.
A worker whose attempt was declared lost finds so at its next heartbeat and kills its agent,
so a recovered attempt elsewhere never runs beside it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from corral.queue.keys import Keys

QUEUED, CLAIMED, RUNNING = "queued", "claimed", "running"
FINISHED, FAILED, LOST, CANCELLED = "finished", "failed", "lost", "cancelled"
#: a claim refused: the worker's host holds another node of the attempt's gang
SAME_HOST = "same_host"
#: stopped because its worker was taken away (``corral worker`` stopping, ``debug preempt``)
PREEMPTED = "preempted"
#: a worker holds the attempt (its agent may run)
HELD = (CLAIMED, RUNNING)
#: nothing runs for the attempt any more
ENDED = (FINISHED, FAILED, LOST, CANCELLED, PREEMPTED)

#: records expire this long after the attempt ended (a week); a bootstrap (it holds the
#: job's secrets) is deleted when its attempt ends in any way, lost included, and expires on
#: its own once no attempt could still need it (the ``ttl_s`` of :meth:`AttemptStore.create`)
ENDED_TTL_S = 7 * 86400

# launch: the record and the bootstrap, both or neither, unless the record exists
_CREATE = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], unpack(ARGV, 4))
redis.call('EXPIRE', KEYS[1], ARGV[1])
redis.call('SET', KEYS[2], ARGV[2], 'EX', ARGV[3])
return 1
"""

# a worker's claim; a node of a gang (the record's ``gang``: its run) is refused with
# ``same_host`` on a host that holds another node of that gang (``KEYS[3]``: host -> key of
# the node it holds; a holder whose attempt ended no longer counts). The holder's record key
# is made from ``ARGV[7]``, the pool's attempt prefix (one Redis server, never a cluster).
_CLAIM = """
local state = redis.call('HGET', KEYS[1], 'state')
if not state then return 'missing' end
if state ~= 'queued' then return state end
local gang = redis.call('HGET', KEYS[1], 'gang')
if gang and gang ~= '' then
  local other = redis.call('HGET', KEYS[3], ARGV[2])
  if other and other ~= ARGV[6] then
    local held = redis.call('HGET', ARGV[7] .. other, 'state')
    if held == 'claimed' or held == 'running' then return 'same_host' end
  end
  redis.call('HSET', KEYS[3], ARGV[2], ARGV[6])
  redis.call('EXPIRE', KEYS[3], ARGV[8])
end
redis.call('HSET', KEYS[1], 'state', 'claimed', 'worker', ARGV[1], 'host', ARGV[2],
           'claimed_at', ARGV[3], 'delivery', ARGV[5])
redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[4])
return 'ok'
"""

# heartbeat of a held attempt: refresh alive (only for the worker holding it); the answer is
# the state and the stop request ("lost" fences a worker whose attempt was given up)
_HEARTBEAT = """
local state = redis.call('HGET', KEYS[1], 'state')
if not state then return {'missing', ''} end
if redis.call('HGET', KEYS[1], 'worker') ~= ARGV[1] then return {'other', ''} end
if state == 'claimed' or state == 'running' then
  redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[2])
end
return {state, redis.call('HGET', KEYS[1], 'stop_grace') or ''}
"""

# a worker took the task off the queue (its process for the attempt is starting): noted once
_RECEIVED = """
if redis.call('HGET', KEYS[1], 'state') ~= 'queued' then return 0 end
if redis.call('HEXISTS', KEYS[1], 'received_at') == 1 then return 0 end
redis.call('HSET', KEYS[1], 'received_at', ARGV[1], 'received_by', ARGV[2])
return 1
"""

# the controller's terminate: a queued attempt is cancelled (no worker will ever run it); a
# held one is asked to stop (its task stops the agent gracefully); the state is returned
_CANCEL = """
local state = redis.call('HGET', KEYS[1], 'state')
if not state then return 'missing' end
if state == 'queued' then
  redis.call('HSET', KEYS[1], 'state', 'cancelled', 'ended_at', ARGV[1],
             'detail', 'terminated before a worker took it')
  redis.call('DEL', KEYS[2])
  return 'cancelled'
end
if (state == 'claimed' or state == 'running') and not redis.call('HGET', KEYS[1], 'stop_grace') then
  redis.call('HSET', KEYS[1], 'stop_grace', ARGV[2], 'stop_at', ARGV[1])
end
return state
"""

# its worker is taken away: the task stops the agent gracefully and the attempt ends preempted
_PREEMPT = """
local state = redis.call('HGET', KEYS[1], 'state')
if state ~= 'claimed' and state ~= 'running' then return state or 'missing' end
redis.call('HSET', KEYS[1], 'preempted', '1', 'stop_at', ARGV[1])
if not redis.call('HGET', KEYS[1], 'stop_grace') then
  redis.call('HSET', KEYS[1], 'stop_grace', ARGV[2])
end
return state
"""

# a held attempt whose alive key expired: lost (its machine is gone), and its bootstrap (the
# job's secrets) with it: nothing will read it again
_MARK_LOST = """
local state = redis.call('HGET', KEYS[1], 'state')
if state ~= 'claimed' and state ~= 'running' then return state or 'missing' end
if redis.call('EXISTS', KEYS[2]) == 1 then return state end
redis.call('HSET', KEYS[1], 'state', 'lost', 'ended_at', ARGV[1], 'detail', ARGV[2])
redis.call('DEL', KEYS[3])
return 'lost'
"""

# the leak sweep: a bootstrap whose attempt is ended or gone is deleted
_DROP_BOOT = """
local state = redis.call('HGET', KEYS[1], 'state')
if state == 'queued' or state == 'claimed' or state == 'running' then return 0 end
return redis.call('DEL', KEYS[2])
"""

# the task's end: only the holder ends its own attempt, and never a lost one
_FINISH = """
local state = redis.call('HGET', KEYS[1], 'state')
if not state then return 'missing' end
if redis.call('HGET', KEYS[1], 'worker') ~= ARGV[1] then return 'other' end
if state ~= 'claimed' and state ~= 'running' then return state end
redis.call('HSET', KEYS[1], 'state', ARGV[2], 'ended_at', ARGV[3], 'detail', ARGV[4],
           'exit_code', ARGV[5])
redis.call('DEL', KEYS[2])
return 'ok'
"""


@dataclass(frozen=True)
class PoolAttempt:
    """One attempt's record, as read from Redis."""

    key: str
    state: str
    run_id: str = ""
    attempt: int = 0
    queue: str = ""
    priority: int = 0
    task_id: str = ""
    worker: str = ""
    host: str = ""
    gpus: str = ""
    endpoint: str = ""
    detail: str = ""
    exit_code: int | None = None
    created_at: float | None = None
    #: when a worker took it off the queue (its process then starts and claims it)
    received_at: float | None = None
    claimed_at: float | None = None
    running_at: float | None = None
    ended_at: float | None = None
    stop_grace: float | None = None
    grace: float | None = None
    #: how long its worker keeps the job going without the broker (the controller's setting,
    #: written at launch, so both sides agree)
    outage_grace: float | None = None
    #: the job went over a limit of its worker (its memory) and was killed: why, in one line
    limit: str = ""
    #: its worker is being taken away (the attempt ends ``preempted``)
    preempted: bool = False
    #: a node of a gang: its run's id (no two nodes of one gang on one host) and its rank
    gang: str = ""
    rank: int | None = None
    sent: bool = False
    alive: bool = False

    @classmethod
    def parse(cls, key: str, raw: Mapping[str, str], alive: bool) -> PoolAttempt:
        def num(name: str) -> float | None:
            try:
                return float(raw[name])
            except (KeyError, ValueError):
                return None

        code = num("exit_code")
        return cls(
            key=key,
            state=raw.get("state", ""),
            run_id=raw.get("run_id", ""),
            attempt=int(num("attempt") or 0),
            queue=raw.get("queue", ""),
            priority=int(num("priority") or 0),
            task_id=raw.get("task_id", ""),
            worker=raw.get("worker", ""),
            host=raw.get("host", ""),
            gpus=raw.get("gpus", ""),
            endpoint=raw.get("endpoint", ""),
            detail=raw.get("detail", ""),
            exit_code=None if code is None else int(code),
            created_at=num("created_at"),
            received_at=num("received_at"),
            claimed_at=num("claimed_at"),
            running_at=num("running_at"),
            ended_at=num("ended_at"),
            stop_grace=num("stop_grace"),
            grace=num("grace"),
            outage_grace=num("outage_grace"),
            limit=raw.get("limit", ""),
            preempted=raw.get("preempted") == "1",
            gang=raw.get("gang", ""),
            rank=None if num("rank") is None else int(num("rank") or 0),
            sent=raw.get("sent") == "1",
            alive=alive,
        )

    @property
    def held(self) -> bool:
        return self.state in HELD


class AttemptStore:
    """The pool's attempt records in one Redis database (``redis.Redis`` with
    ``decode_responses=True``)."""

    def __init__(self, client: Any, keys: Keys, clock: Callable[[], float] = time.time):
        self.r = client
        self.keys = keys
        self.clock = clock
        self._create = client.register_script(_CREATE)
        self._claim = client.register_script(_CLAIM)
        self._heartbeat = client.register_script(_HEARTBEAT)
        self._cancel = client.register_script(_CANCEL)
        self._mark_lost = client.register_script(_MARK_LOST)
        self._preempt = client.register_script(_PREEMPT)
        self._received = client.register_script(_RECEIVED)
        self._finish = client.register_script(_FINISH)
        self._drop_boot = client.register_script(_DROP_BOOT)

    # --- the controller's side -------------------------------------------------------------

    def create(
        self, key: str, *, fields: Mapping[str, Any], bootstrap: str, ttl_s: float
    ) -> tuple[PoolAttempt, bool]:
        """Write the record (state ``queued``) and the bootstrap unless the record exists.
        The bootstrap expires after ``ttl_s`` (no attempt lives longer: the broker's
        visibility timeout), the record a week after that. Returns the record and whether it
        was created now."""
        record = {k: str(v) for k, v in fields.items()}
        record.update(state=QUEUED, created_at=repr(self.clock()), key=key)
        flat = [x for kv in record.items() for x in kv]
        created = self._create(
            keys=[self.keys.attempt(key), self.keys.boot(key)],
            args=[int(ttl_s) + ENDED_TTL_S, bootstrap, max(1, int(ttl_s)), *flat],
        )
        got = self.get(key)
        assert got is not None
        return got, bool(created)

    def mark_sent(self, key: str) -> None:
        self.r.hset(self.keys.attempt(key), "sent", "1")

    def get(self, key: str) -> PoolAttempt | None:
        pipe = self.r.pipeline()
        pipe.hgetall(self.keys.attempt(key))
        pipe.exists(self.keys.alive(key))
        raw, alive = pipe.execute()
        if not raw or "state" not in raw:
            return None
        return PoolAttempt.parse(key, raw, bool(alive))

    def cancel(self, key: str, grace_s: float) -> str:
        """Cancel a queued attempt or ask the worker holding it to stop (once). Returns the
        state it was in (``cancelled`` when it was still queued, ``missing`` if unknown)."""
        return str(
            self._cancel(
                keys=[self.keys.attempt(key), self.keys.boot(key)],
                args=[repr(self.clock()), repr(float(grace_s))],
            )
        )

    def preempt(self, key: str, grace_s: float) -> str:
        """Ask the worker holding the attempt to stop it gracefully, as a preemption (its
        machine is going away); returns the state it was in."""
        return str(
            self._preempt(
                keys=[self.keys.attempt(key)], args=[repr(self.clock()), repr(float(grace_s))]
            )
        )

    def mark_lost(self, key: str, detail: str) -> str:
        """Declare a held attempt lost if its alive key expired; returns the state now."""
        return str(
            self._mark_lost(
                keys=[self.keys.attempt(key), self.keys.alive(key), self.keys.boot(key)],
                args=[repr(self.clock()), detail],
            )
        )

    def sweep_boots(self) -> list[str]:
        """Delete every bootstrap whose attempt has ended (in any way) or whose record is
        gone: the leftovers of a worker or controller that died between the two. Returns the
        keys of the attempts whose bootstrap went."""
        prefix = self.keys.boot("")
        dropped = []
        for name in self.r.scan_iter(match=prefix + "*", count=500):
            key = name[len(prefix) :]
            if self._drop_boot(keys=[self.keys.attempt(key), name]):
                dropped.append(key)
        return dropped

    # --- the worker's side -------------------------------------------------------------------

    def received(self, key: str, worker: str) -> bool:
        """Note that ``worker`` took the attempt's task off the queue (the first time only)."""
        return bool(
            self._received(keys=[self.keys.attempt(key)], args=[repr(self.clock()), worker])
        )

    def claim(self, key: str, *, worker: str, host: str, lost_after_s: float, delivery: str) -> str:
        """``ok`` if this worker now holds the attempt; else the state that stopped it
        (``missing``, ``claimed``, ``cancelled``, ...), or ``same_host`` for a gang's node on
        a ``host`` that holds another node of its gang (the attempt stays queued)."""
        gang = self.r.hget(self.keys.attempt(key), "gang") or ""
        return str(
            self._claim(
                keys=[self.keys.attempt(key), self.keys.alive(key), self.keys.gang(gang)],
                args=[
                    worker,
                    host,
                    repr(self.clock()),
                    int(lost_after_s * 1000),
                    delivery,
                    key,
                    self.keys.attempt(""),
                    ENDED_TTL_S,
                ],
            )
        )

    def note_duplicate(self, key: str, worker: str, state: str, delivery: str) -> None:
        entry = {"key": key, "worker": worker, "state": state, "delivery": delivery}
        pipe = self.r.pipeline()
        pipe.rpush(self.keys.duplicates, json.dumps({**entry, "at": self.clock()}))
        pipe.ltrim(self.keys.duplicates, -1000, -1)
        pipe.execute()

    def duplicates(self) -> list[dict[str, Any]]:
        return [json.loads(x) for x in self.r.lrange(self.keys.duplicates, 0, -1)]

    def bootstrap(self, key: str) -> str | None:
        value = self.r.get(self.keys.boot(key))
        return None if value is None else str(value)

    def heartbeat(self, key: str, worker: str, lost_after_s: float) -> tuple[str, float | None]:
        """Refresh the attempt's alive key; returns (state, stop grace or None). A state
        other than claimed/running (``lost``, ``missing``, ``other``) means: stop now."""
        state, grace = self._heartbeat(
            keys=[self.keys.attempt(key), self.keys.alive(key)],
            args=[worker, int(lost_after_s * 1000)],
        )
        return str(state), float(grace) if grace else None

    def update(self, key: str, **fields: Any) -> None:
        self.r.hset(self.keys.attempt(key), mapping={k: str(v) for k, v in fields.items()})

    def finish(
        self, key: str, worker: str, state: str, detail: str, exit_code: int | None = None
    ) -> str:
        """End the attempt this worker holds (``finished`` or ``failed``); the bootstrap and
        its secrets go, and the record expires a week later."""
        result = str(
            self._finish(
                keys=[self.keys.attempt(key), self.keys.alive(key)],
                args=[
                    worker,
                    state,
                    repr(self.clock()),
                    detail[:500],
                    "" if exit_code is None else str(exit_code),
                ],
            )
        )
        pipe = self.r.pipeline()
        pipe.delete(self.keys.boot(key))
        pipe.expire(self.keys.attempt(key), ENDED_TTL_S)
        pipe.execute()
        return result
