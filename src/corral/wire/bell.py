"""The bell: an agent tells its controller "look at me now" in one UDP datagram.

The controller pulls (``GET /poll``); a quiet run is pulled rarely. So that a change still
reaches the controller at once, every request the controller makes to an agent names the
controller's bell in the :data:`HEADER` header (``host:port``, UDP), and the agent rings it:

* ``hello`` when it first learns the address (or the address changes: a restarted or another
  controller), so the controller knows the bell of this attempt works; an agent launched by
  a controller learns it from its environment (:data:`ENV_AGENT_BELL`) and rings once its API
  answers, so the controller looks at a machine that just came up at once;
* ``change`` when something the controller must act on happens: any event but ``progress``
  (a stage starting or ending, a preemption notice, a stop, the attempt's end, a checkpoint),
  and ``progress`` too while the controller asks for it (``want=progress`` in the header);
* ``beat`` every :data:`BEAT_S` seconds: a silent bell means a machine or an agent gone, and
  the controller goes back to pulling that run at its usual pace.

A ring is one line: ``corral-bell/1 RUN ATTEMPT KIND N MAC`` where ``N`` counts the agent's
rings and ``MAC`` is the first 32 hex digits of ``HMAC-SHA256(token, "RUN ATTEMPT KIND N")``
with the attempt's agent token: a forged or replayed ring can at most cause one extra look.
Datagrams may be lost: nothing depends on one arriving (the controller's own pull, at its
quiet interval, and the beat's silence cover a lost one).
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass

#: the request header that names the controller's bell (``host:port[;want=progress]``)
HEADER = "X-Corral-Bell"
#: the bell an agent rings from its start, before any request names one (the header's
#: value, in the agent's environment: the launching controller's), so that its coming up
#: is heard at once rather than at the controller's next look (a gang starts once its last
#: node is ready)
ENV_AGENT_BELL = "CORRAL_AGENT_BELL"
MAGIC = "corral-bell/1"
#: an agent that knows a bell rings it this often with nothing to say
BEAT_S = 10.0
#: a bell not heard for this long is taken as silent (a lost beat or two is not silence)
SILENT_AFTER_S = 2.5 * BEAT_S
KINDS = frozenset({"hello", "change", "beat"})
#: the largest ring a controller reads
MAX_RING = 512


@dataclass(frozen=True, slots=True)
class Ring:
    run_id: str
    attempt: int
    kind: str
    n: int


@dataclass(frozen=True, slots=True)
class BellAddress:
    """Where a controller's bell is, and whether it wants a ring for each progress record."""

    host: str
    port: int
    progress: bool = False

    def header(self) -> str:
        return f"{self.host}:{self.port}" + (";want=progress" if self.progress else "")


def _mac(token: str, body: str) -> str:
    return hmac.new(token.encode(), body.encode(), hashlib.sha256).hexdigest()[:32]


def encode(ring: Ring, token: str) -> bytes:
    body = f"{ring.run_id} {ring.attempt} {ring.kind} {ring.n}"
    return f"{MAGIC} {body} {_mac(token, body)}".encode()


def peek(data: bytes) -> Ring | None:
    """The ring a datagram claims to be (not yet checked: :func:`genuine`), or None for
    anything that is not a ring."""
    try:
        parts = data[:MAX_RING].decode("ascii").split(" ")
    except UnicodeDecodeError:
        return None
    if len(parts) != 6 or parts[0] != MAGIC or parts[3] not in KINDS:
        return None
    try:
        return Ring(parts[1], int(parts[2]), parts[3], int(parts[4]))
    except ValueError:
        return None


def genuine(data: bytes, ring: Ring, token: str) -> bool:
    """Whether ``data`` (a datagram :func:`peek` read as ``ring``) was signed with ``token``."""
    return hmac.compare_digest(encode(ring, token), data[:MAX_RING])


def parse_header(value: str | None) -> BellAddress | None:
    """The bell a request names (None: none, or a value that is not ``host:port``)."""
    if not value:
        return None
    where, _, options = value.strip().partition(";")
    host, sep, port = where.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        return None
    return BellAddress(host, int(port), progress="want=progress" in options)
