"""What the worker pool gives one multi-node job (a gang, ``docs/multinode.md``): N workers on
N distinct hosts, each node one attempt of the pool claimed by one worker.

* **Distinct hosts.** Each node's record names its gang (its run); a worker's claim of a node
  is refused while its host holds another node of that gang (``queue.attempts``: one Lua
  script), and the node goes back to its queue for a worker of another host. A gang that
  cannot get N hosts waits in the queue, never doubled up on one host; the controller's gang
  bound (``CORRAL_GANG_TIMEOUT``) gives it up.
* **The head's address** is its worker's advertised address (``corral worker --advertise``,
  the host of its agent's endpoint): known once a worker runs the head, so the other nodes are
  queued from then on (``gang_address`` is "" until then).
* **The port**: one slot of :data:`PORT_WIDTH` ports per run in ``PORT_FIRST..PORT_LAST``,
  leased in Redis for :data:`PORT_LEASE_S` and renewed at each look at the gang's head while
  it is queued or runs, so two gangs at once never share a port, even with their heads on one
  host, and a run's slot is free again soon after its gang ended; stage ``i`` meets on the
  slot's first port + ``i``. With every slot leased, the run's own slot by its id's hash (a
  clash then needs two heads on one host).
* **Survivors kept**: a worker's agent stays up once its attempt ended (until the controller
  terminates it), so a repaired gang's surviving nodes take the next attempt in place.
"""

from __future__ import annotations

import hashlib
import logging
from typing import Any, ClassVar
from urllib.parse import urlsplit

from corral.providers.base import SupportsGangs
from corral.queue.attempts import PoolAttempt
from corral.queue.keys import Keys

log = logging.getLogger(__name__)

#: the pool's rendezvous ports: slots of PORT_WIDTH ports (a stage ``i`` of the plan meets on
#: its slot's first port + ``i``), below Linux's ephemeral ports (32768 and up)
PORT_FIRST, PORT_LAST, PORT_WIDTH = 29500, 32767, 32
PORT_SLOTS = (PORT_LAST - PORT_FIRST + 1) // PORT_WIDTH
#: how long a run's port slot stays leased after the last look at its gang's head
PORT_LEASE_S = 900

# the run's slot: its own lease renewed, else the first free slot from its hash's; -1: none
_LEASE = """
local mine = redis.call('GET', KEYS[1])
if mine and redis.call('GET', ARGV[1] .. mine) == ARGV[2] then
  redis.call('EXPIRE', KEYS[1], ARGV[3])
  redis.call('EXPIRE', ARGV[1] .. mine, ARGV[3])
  return tonumber(mine)
end
local n, start = tonumber(ARGV[4]), tonumber(ARGV[5])
for i = 0, n - 1 do
  local slot = (start + i) % n
  if redis.call('SET', ARGV[1] .. slot, ARGV[2], 'NX', 'EX', ARGV[3]) then
    redis.call('SET', KEYS[1], slot, 'EX', ARGV[3])
    return slot
  end
end
return -1
"""

# the run's lease renewed, if it still holds its slot
_RENEW = """
local mine = redis.call('GET', KEYS[1])
if mine and redis.call('GET', ARGV[1] .. mine) == ARGV[2] then
  redis.call('EXPIRE', KEYS[1], ARGV[3])
  redis.call('EXPIRE', ARGV[1] .. mine, ARGV[3])
  return 1
end
return 0
"""


def home_slot(run_id: str) -> int:
    """The run's first choice of port slot (its id's hash)."""
    return int.from_bytes(hashlib.sha256(run_id.encode()).digest()[:4], "big") % PORT_SLOTS


def renew_port(client: Any, keys: Keys, run_id: str, ttl_s: float = PORT_LEASE_S) -> bool:
    """Renew the run's port lease for ``ttl_s`` (False: it holds no slot any more)."""
    args = (keys.gang_port_slot, run_id, max(1, int(ttl_s)))
    return bool(client.eval(_RENEW, 1, keys.gang_port_of(run_id), *args))


def lease_port(client: Any, keys: Keys, run_id: str, ttl_s: float = PORT_LEASE_S) -> int:
    """The first rendezvous port of the run's gangs: its slot, leased (or renewed) for
    ``ttl_s``; the slot of its hash when every slot is leased."""
    slot = int(
        client.eval(
            _LEASE,
            1,
            keys.gang_port_of(run_id),
            keys.gang_port_slot,
            run_id,
            max(1, int(ttl_s)),
            PORT_SLOTS,
            home_slot(run_id),
        )
    )
    if slot < 0:
        slot = home_slot(run_id)
        log.warning(
            "every rendezvous port slot of the pool is leased: run %s meets on slot %d's "
            "ports, which another gang may use",
            run_id,
            slot,
        )
    return PORT_FIRST + slot * PORT_WIDTH


def head_address(rec: PoolAttempt | None) -> str:
    """The address the other nodes reach the head at: its worker's advertised address (its
    agent's endpoint's host); "" until a worker runs it."""
    if rec is None or not rec.endpoint:
        return ""
    return urlsplit(rec.endpoint).hostname or ""


class PoolGangs(SupportsGangs):
    """The pool's gangs: at most as many nodes as the pool has hosts, which only a launch can
    count; 64 is the most one job may ask of it."""

    max_nodes: ClassVar[int] = 64
    gang_form: ClassVar[str] = "N workers on N distinct hosts"
    launches_gangs: ClassVar[bool] = True
    keeps_members: ClassVar[bool] = True
