"""HTTP client for the agent API (see docs/agent.md). The controller polls; the agent never
calls the controller, so one exposed port is all a node needs.

A controller calls every agent through one :class:`AgentPool` (one ``httpx.Client``, one
connection pool): an :class:`AgentClient` is then an endpoint and a token, a few hundred bytes,
and closing it leaves the pool alone.
"""

from __future__ import annotations

from typing import Any

import httpx
from pydantic import ValidationError

from corral.errors import AgentError, AgentUnreachable
from corral.wire import check_version
from corral.wire.outcome import StopCause
from corral.wire.status import AgentStatus

#: seconds an agent has to answer one request
DEFAULT_TIMEOUT = 5.0
#: idle connections the shared pool keeps open (one per agent polled recently, up to this)
KEEPALIVE_CONNECTIONS = 256


class AgentClient:
    """The API of one agent. With ``client`` (a shared pool) it borrows that client and
    :meth:`close` leaves it open; without one it opens its own and closes it."""

    __slots__ = ("_client", "_headers", "_owns_client", "_timeout", "endpoint")

    def __init__(
        self,
        endpoint: str,
        token: str,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        client: httpx.Client | None = None,
    ):
        self.endpoint = endpoint.rstrip("/")
        self._headers = {"Authorization": f"Bearer {token}", "User-Agent": "corral-controller"}
        self._timeout = timeout
        self._client = client or httpx.Client(timeout=timeout)
        self._owns_client = client is None

    def close(self) -> None:
        """Close the client's own connection pool; a shared one stays open."""
        if self._owns_client:
            self._client.close()

    def _request(
        self, method: str, path: str, *, unavailable_ok: bool = False, **kw: Any
    ) -> dict[str, Any]:
        """The JSON answer to one call. A 503 is an answer only where ``unavailable_ok``
        (``/ready`` while the agent starts); elsewhere it is AgentUnreachable (a proxy or a
        load balancer in front of the agent says so, not the agent)."""
        url = self.endpoint + path
        try:
            resp = self._client.request(
                method, url, headers=self._headers, timeout=self._timeout, **kw
            )
        except httpx.TimeoutException as e:
            raise AgentUnreachable(f"agent at {self.endpoint} timed out on {path}") from e
        except httpx.HTTPError as e:
            raise AgentUnreachable(
                f"agent at {self.endpoint} unreachable: {type(e).__name__}"
            ) from e
        if resp.status_code == 401:
            raise AgentError(f"agent at {self.endpoint} rejected the controller's token")
        if resp.status_code == 503 and not unavailable_ok:
            raise AgentUnreachable(f"agent at {self.endpoint} unavailable (503) on {path}")
        if resp.status_code >= 400 and resp.status_code != 503:
            raise AgentError(f"agent at {self.endpoint} answered {resp.status_code} on {path}")
        try:
            body = resp.json()
        except ValueError as e:
            raise AgentError(f"agent at {self.endpoint} sent a non-JSON answer on {path}") from e
        if resp.status_code == 503:
            body.setdefault("ready", False)
        return body

    def health(self) -> dict[str, Any]:
        return self._request("GET", "/health")

    def ready(self) -> bool:
        """Whether the agent serves its attempt. An agent of another wire version raises
        :class:`~corral.errors.WireVersionMismatch` naming both versions."""
        body = self._request("GET", "/ready", unavailable_ok=True)
        ready = bool(body.get("ready"))
        # an agent says its version with either answer; a 503 without one is not known to
        # come from the agent at all (a proxy's): not ready yet, no verdict on the version
        if ready or "wire_version" in body:
            check_version(body.get("wire_version"), who=f"agent at {self.endpoint}")
        return ready

    def status(self) -> AgentStatus:
        body = self._request("GET", "/status")
        check_version(body.get("wire_version"), who=f"agent at {self.endpoint}")
        try:
            return AgentStatus.model_validate(body)
        except ValidationError as e:
            first = e.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "status"
            raise AgentError(
                f"agent at {self.endpoint} sent a malformed status ({where}: {first['msg']})"
            ) from None

    def events(self, after: int = 0) -> dict[str, Any]:
        return self._request("GET", "/events", params={"after": after})

    def log_sizes(self) -> dict[str, int]:
        return dict(self._request("GET", "/logs").get("stages", {}))

    def logs(self, stage: str, offset: int = 0, limit: int = 256 * 1024) -> dict[str, Any]:
        return self._request(
            "GET", "/logs", params={"stage": stage, "offset": offset, "limit": limit}
        )

    def stop(self, cause: StopCause = StopCause.USER, reason: str = "") -> dict[str, Any]:
        """Ask for a graceful stop, saying why (the attempt's outcome carries ``cause``)."""
        body: dict[str, Any] = {"cause": cause.value}
        if reason:
            body["reason"] = reason
        return self._request("POST", "/stop", json=body)


class AgentPool:
    """One ``httpx.Client`` (one connection pool) shared by the clients of every agent a
    controller polls. :meth:`close` closes it; the clients it made are unusable afterwards."""

    def __init__(self, http: httpx.Client | None = None, *, timeout: float = DEFAULT_TIMEOUT):
        self._timeout = timeout
        self._http = http or httpx.Client(
            timeout=timeout,
            limits=httpx.Limits(
                max_connections=None, max_keepalive_connections=KEEPALIVE_CONNECTIONS
            ),
        )

    def client(self, endpoint: str, token: str) -> AgentClient:
        """A client of the agent at ``endpoint`` that borrows the pool."""
        return AgentClient(endpoint, token, timeout=self._timeout, client=self._http)

    @property
    def closed(self) -> bool:
        return self._http.is_closed

    def close(self) -> None:
        self._http.close()
