"""IO.net's enterprise CaaS API (``shared/providers/ionet.md``): hardware, availability and
price estimates, deployments, their containers and logs.

Calls go through :class:`~corral.providers.http.ProviderHTTP` with the key in ``x-api-key``
(never ``Authorization``), FastAPI error bodies (``{"detail": "..."}`` or a list of
validation errors) and plain-text or HTML errors read, and one token bucket per key shared by
every run of the process. Most reads are wrapped in ``{"data": ...}``; mutations answer flat
``{"status", "deployment_id"}``. Deploys are never retried on a timeout or a 5xx: the
provider looks the deployment up by name.

A 409 is read per endpoint (the document declares none; IO.net's reference page says a
deployment's name must be unique), never as "no capacity": on ``POST /deploy`` the name is
taken (:class:`NameTaken`: the provider adopts the deployment of that name), on ``DELETE`` the
deployment is already ending (accepted), on ``/extend`` it cannot be extended now, on a read
it is a plain :class:`ProviderError`.
"""

from __future__ import annotations

import json
import random
import re
import time
import uuid
from collections.abc import Callable
from typing import Any

import httpx

from corral.errors import Conflict, NotFound, ProviderError
from corral.providers.common.limits import shared_bucket
from corral.providers.common.listing_cache import Whole
from corral.providers.http import (
    ProviderHTTP,
    ResourceNotFound,
    RetryPolicy,
    TokenBucket,
    error_for,
    payload_message,
)
from corral.providers.ionet.deployments import Deployment, Worker
from corral.providers.ionet.settings import IonetSettings

PROVIDER = "ionet"
#: a container id (the document gives it no format)
_ID = re.compile(r"^[A-Za-z0-9-]{1,64}$")
PAGE_SIZE = 100
#: how long the agent's liveness probe through a public URL may take
AGENT_PROBE_TIMEOUT_S = 5.0


def check_id(value: str, what: str = "deployment") -> str:
    """``value`` if it can be a ``what`` id, else :class:`NotFound` (never sent: the API
    answers 422 for a deployment id that is not a UUID, the document's format)."""
    if what == "deployment":
        try:
            if isinstance(value, str) and str(uuid.UUID(value)) == value.lower():
                return value
        except ValueError:
            pass
        raise NotFound(f"ionet: {value!r} is not a deployment id")
    if not isinstance(value, str) or not _ID.match(value):
        raise NotFound(f"ionet: {value!r} is not a {what} id")
    return value


class NameTaken(Conflict):
    """``POST /deploy`` answered 409: a deployment of that name exists (names are unique)."""

    code = "ionet_name_taken"


def _data(body: Any, what: str) -> Any:
    if not isinstance(body, dict) or "data" not in body:
        raise ProviderError(f"ionet: {what} answered without data")
    return body["data"]


class IonetAPI:
    def __init__(
        self,
        api_key: str,
        settings: IonetSettings,
        *,
        client: httpx.Client | None = None,
        retry: RetryPolicy | None = None,
        bucket: TokenBucket | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        now: Callable[[], float] = time.time,
        rng: random.Random | None = None,
    ):
        self.settings = settings
        self._key = api_key
        self._client = client or httpx.Client()
        self._owns_client = client is None
        if bucket is None and settings.rate_per_s is not None:
            per_min = settings.rate_per_s * 60
            burst = max(1, int(settings.rate_per_s * 2))
            bucket = shared_bucket(PROVIDER, api_key, per_min, burst, clock=clock, sleep=sleep)
        self.bucket = bucket
        self.http = ProviderHTTP(
            PROVIDER,
            settings.api_url,
            client=self._client,
            headers={"x-api-key": api_key},
            secrets=[api_key],
            retry=retry,
            bucket=bucket,
            sleep=sleep,
            clock=clock,
            now=now,
            rng=rng,
        )

    def close(self) -> None:
        if self._owns_client:
            self._client.close()

    def _json(self, method: str, path: str, **kw: Any) -> tuple[Any, str | None]:
        """``(body, None)`` of a call's answer, or ``(None, message)`` when it answered 409
        (scrubbed; the caller says what a 409 means there). Other failures raise their typed
        error (:func:`~corral.providers.http.error_for`)."""
        resp = self.http.request(method, path, allow=(409,), **kw)
        if resp.status_code == 409:
            msg, _ = payload_message(resp.content)
            return None, self.http.scrub(msg)[:200] or "Conflict"
        return self.http._json(resp, method, path), None

    def get_json(self, path: str, **kw: Any) -> Any:
        """A read; a 409 there is a plain :class:`ProviderError` (it says nothing of
        capacity)."""
        body, conflict = self._json("GET", path, **kw)
        if conflict is not None:
            raise ProviderError(f"ionet: GET {path.split('?')[0]} HTTP 409: {conflict}")
        return body

    # --- hardware and prices ----------------------------------------------------------------

    def hardware(self) -> list[dict[str, Any]]:
        data = _data(self.get_json("/hardware/max-gpus-per-container"), "hardware")
        items = data.get("hardware") if isinstance(data, dict) else None
        return [h for h in items or [] if isinstance(h, dict) and h.get("hardware_id") is not None]

    def available_replicas(self, hardware_id: int, gpus: int) -> list[dict[str, Any]]:
        params = {"hardware_id": hardware_id, "hardware_qty": gpus}
        data = _data(self.get_json("/available-replicas", params=params), "replicas")
        return [loc for loc in data or [] if isinstance(loc, dict) and loc.get("id") is not None]

    def price(self, hardware_id: int, location_id: int, gpus: int, hours: int) -> float | None:
        """USD per hour of one container (the estimate's total over ``hours``)."""
        params = {
            "location_ids": json.dumps([location_id]),
            "hardware_id": hardware_id,
            "duration_hours": hours,
            "gpus_per_container": gpus,
            "replica_count": 1,
        }
        data = _data(self.get_json("/price", params=params), "price")
        total = data.get("total_cost_usdc") if isinstance(data, dict) else None
        if isinstance(total, bool) or not isinstance(total, int | float) or total < 0:
            return None
        return float(total) / hours

    # --- deployments ------------------------------------------------------------------------

    def deployments(self) -> dict[str, Deployment]:
        """Every deployment of the account by id (all pages); a :class:`Whole` when the
        pages are known to hold them all: every page said the same ``total`` and that many
        distinct ones were read. (IO.net keeps an ended deployment in the list, as
        ``destroyed``, so a page never loses one to a deletion; a deploy between pages
        changes ``total`` or repeats one on the next page, and the listing is then partial.)"""
        out: dict[str, Deployment] = {}
        totals: set[object] = set()
        page = 0
        while True:
            params = {"page": page, "page_size": PAGE_SIZE}
            data = _data(self.get_json("/deployments", params=params), "deployments")
            items = data.get("deployments") if isinstance(data, dict) else None
            if not isinstance(items, list):
                raise ProviderError("ionet: GET /deployments answered without a list")
            for d in items:
                if isinstance(d, dict) and d.get("id"):
                    dep = Deployment.model_validate(d)
                    out.setdefault(dep.id, dep)
            given = data.get("total")
            totals.add(given)
            total = given if isinstance(given, int) else len(out)
            if not items or len(out) >= total or page > 1000:
                whole = len(totals) == 1 and isinstance(given, int) and len(out) == given
                return Whole(out) if whole else out
            page += 1

    def deployment(self, deployment_id: str) -> Deployment | None:
        try:
            body = self.get_json(f"/deployment/{check_id(deployment_id)}")
        except (ResourceNotFound, NotFound):
            return None
        data = _data(body, "deployment details")
        return Deployment.model_validate(data) if isinstance(data, dict) else None

    def deploy(self, body: dict[str, Any]) -> str:
        """The new deployment's id; :class:`NameTaken` when one of that name exists."""
        answer, conflict = self._json("POST", "/deploy", json=body)
        if conflict is not None:
            raise NameTaken(
                f"ionet: POST /deploy HTTP 409: a deployment named "
                f"{body.get('resource_private_name')!r} exists: {conflict}"
            )
        dep_id = answer.get("deployment_id") if isinstance(answer, dict) else None
        if not isinstance(dep_id, str) or not dep_id:
            raise ProviderError("ionet: POST /deploy answered without a deployment_id")
        return dep_id

    def extend(self, deployment_id: str, hours: int) -> None:
        """Buy ``hours`` more; a 409 (the deployment cannot be extended now) is a
        :class:`ProviderError` saying so."""
        path = f"/deployment/{check_id(deployment_id)}/extend"
        _, conflict = self._json("POST", path, json={"duration_hours": hours})
        if conflict is not None:
            raise ProviderError(
                f"ionet: deployment {deployment_id} cannot be extended now (HTTP 409: {conflict})"
            )

    def delete(self, deployment_id: str) -> bool:
        """Terminate the deployment; False if IO.net did not know it. A 409 (it is already
        being terminated) is accepted: the caller reads its state again."""
        try:
            self._json("DELETE", f"/deployment/{check_id(deployment_id)}")
        except (ResourceNotFound, NotFound):
            return False
        return True

    def containers(self, deployment_id: str) -> list[Worker] | None:
        try:
            body = self.get_json(
                f"/deployment/{check_id(deployment_id)}/containers",
                params={"page": 0, "page_size": 20},
            )
        except (ResourceNotFound, NotFound):
            return None
        data = _data(body, "containers")
        items = data.get("workers") if isinstance(data, dict) else None
        return [Worker.model_validate(w) for w in items or [] if isinstance(w, dict)]

    def agent_answers(self, public_url: str, *, timeout: float = AGENT_PROBE_TIMEOUT_S) -> bool:
        """Whether corral's agent answers its liveness probe (``GET /health``: ``{"ok": true}``,
        no token) through a container's public URL: the proof the container runs. The API key
        is never sent there (the URL is the container's, not IO.net's API)."""
        if not public_url.startswith(("http://", "https://")):
            return False
        try:
            resp = self._client.get(
                public_url.rstrip("/") + "/health",
                headers={"User-Agent": f"corral/{_version()}"},
                timeout=timeout,
            )
            body = resp.json() if resp.status_code == 200 else None
        except (httpx.HTTPError, ValueError):
            return False
        return isinstance(body, dict) and body.get("ok") is True

    def log_lines(self, deployment_id: str, container_id: str, *, seconds: float) -> list[str]:
        """The lines a container's log stream sends within ``seconds`` (it is a stream that
        may never end: read, then hang up)."""
        url = self.http._url(
            f"/deployment/{check_id(deployment_id)}/log/{check_id(container_id, 'container')}"
        )
        if self.bucket is not None:
            self.bucket.acquire()
        lines: list[str] = []
        deadline = time.monotonic() + seconds
        headers = {"x-api-key": self._key, "User-Agent": f"corral/{_version()}"}
        try:
            with self._client.stream(
                "GET", url, params={"stream": "stdout"}, headers=headers, timeout=seconds
            ) as resp:
                if not resp.is_success:
                    resp.read()
                    msg, code = payload_message(resp.content)
                    if resp.status_code == 409:  # says nothing of capacity
                        raise ProviderError(f"ionet: GET /log HTTP 409: {self.http.scrub(msg)}")
                    raise error_for(
                        PROVIDER,
                        resp.status_code,
                        self.http.scrub(msg),
                        code=self.http.scrub(code),
                        what="GET /log",
                    )
                for line in resp.iter_lines():
                    if line.startswith("data:"):  # server-sent events
                        line = line[5:].removeprefix(" ")
                    if line:
                        lines.append(line)
                    if time.monotonic() > deadline:
                        break
        except httpx.TimeoutException:
            pass  # the stream stayed open: what came is what there is
        except httpx.HTTPError as exc:
            raise ProviderError(f"ionet: GET /log: {type(exc).__name__}") from None
        return lines


def _version() -> str:
    from corral import __version__

    return __version__
