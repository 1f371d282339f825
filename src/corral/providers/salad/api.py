"""SaladCloud's public API (``shared/providers/salad.md``): container groups, their instances
and system logs, and GPU classes.

Calls go through :class:`~corral.providers.http.ProviderHTTP` (retries honouring
``Retry-After`` when one is sent, typed errors, ProblemDetails and HTML error pages read, no
key in any message) with the key in the ``Salad-Api-Key`` header, and take their tokens from
the bucket this process shares for the key (:func:`~corral.providers.common.limits.shared_bucket`):
every run a controller watches stays inside SaladCloud's 240 requests a minute together.
Creates are never retried on a timeout or a 5xx: the provider looks the group up by name.
"""

from __future__ import annotations

import logging
import random
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx

from corral.errors import (
    AuthFailed,
    Conflict,
    NotFound,
    ProviderError,
    QuotaExceeded,
)
from corral.providers.common.limits import shared_bucket
from corral.providers.common.listing_cache import Whole
from corral.providers.http import ProviderHTTP, ResourceNotFound, RetryPolicy, TokenBucket
from corral.providers.salad.groups import ContainerGroup, SaladInstance
from corral.providers.salad.settings import SaladSettings

PROVIDER = "salad"
#: container groups asked for per page of the list (the most one answer holds)
PAGE_SIZE = 100
#: pages read at most for one listing (50,000 groups)
MAX_PAGES = 500
_NAME = re.compile(r"^[a-z][a-z0-9-]{0,61}[a-z0-9]$")
_QUOTA = re.compile(r"(?i)quota|limit reached|exceed")
log = logging.getLogger("corral.providers.salad")


#: what a 409 means on each call that changes something. SaladCloud's document lists no 409
#: on any endpoint (it falls under ``default``) and SaladCloud never refuses a create for want
#: of nodes (it keeps allocating), so a 409 is never "no capacity": it is a conflict with the
#: resource's state, named per call (docs/providers.md, "Assumptions no published contract
#: settles").
CONFLICTS = {
    "create": "a container group of that name exists",
    "start": "the container group cannot be started in its present state",
    "stop": "the container group cannot be stopped in its present state",
    "delete": "the container group cannot be deleted yet (a change is under way)",
    "reallocate": "the instance cannot be reallocated in its present state",
}


@contextmanager
def _conflict(meaning: str) -> Iterator[None]:
    """Read a 409 of the call inside as :class:`Conflict` saying ``meaning``, whatever the
    HTTP helper made of it (it reads every 409 as :class:`NoCapacity`)."""
    try:
        yield
    except ProviderError as exc:
        if exc.fields.get("status") != 409:
            raise
        raise Conflict(f"{exc.message} ({meaning})", fields=exc.fields) from None


def check_name(value: str) -> str:
    """A container group name safe in a URL path; anything else is NotFound."""
    if not isinstance(value, str) or not _NAME.match(value):
        raise NotFound(f"salad: {value!r} is not a container group name")
    return value


class SaladAPI:
    def __init__(
        self,
        api_key: str,
        settings: SaladSettings,
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
        self._client = client or httpx.Client()
        self._owns_client = client is None
        if bucket is None:
            bucket = shared_bucket(
                PROVIDER,
                api_key,
                settings.requests_per_minute,
                settings.burst,
                clock=clock,
                sleep=sleep,
            )
        self.bucket = bucket
        self.http = ProviderHTTP(
            PROVIDER,
            settings.api_url,
            client=self._client,
            headers={"Salad-Api-Key": api_key},
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

    # --- paths ------------------------------------------------------------------------------

    def _org(self) -> str:
        return f"/organizations/{self.settings.where()[0]}"

    def _groups(self) -> str:
        org, project = self.settings.where()
        return f"/organizations/{org}/projects/{project}/containers"

    def _group(self, name: str) -> str:
        return f"{self._groups()}/{check_name(name)}"

    # --- GPU classes ------------------------------------------------------------------------

    def gpu_classes(self) -> list[dict[str, Any]]:
        body = self.http.get_json(f"{self._org()}/gpu-classes")
        items = body.get("items") if isinstance(body, dict) else None
        if not isinstance(items, list):
            raise ProviderError("salad: GET gpu-classes did not answer with a list of items")
        return [c for c in items if isinstance(c, dict) and c.get("id") and c.get("name")]

    # --- container groups -------------------------------------------------------------------

    def list_groups(self) -> dict[str, ContainerGroup]:
        """Every group of the project by name, page by page (``page``, ``page_size``
        :data:`PAGE_SIZE`: one answer holds at most 100); a :class:`Whole` when the first
        answer held them all (a short first page: one answer, so nothing made or deleted
        between pages can have shifted one out of sight). It stops at a short page, or at a page that brings no group not
        seen yet (an API that ignores ``page`` answers the first page again), or after
        :data:`MAX_PAGES`."""
        groups: dict[str, ContainerGroup] = {}
        whole = False
        for page in range(1, MAX_PAGES + 1):
            body = self.http.get_json(self._groups(), params={"page": page, "page_size": PAGE_SIZE})
            items = body.get("items") if isinstance(body, dict) else None
            if not isinstance(items, list):
                raise ProviderError("salad: GET containers did not answer with a list of items")
            listed = [
                ContainerGroup.model_validate(g)
                for g in items
                if isinstance(g, dict) and g.get("name")
            ]
            new = [g for g in listed if g.name not in groups]
            groups.update((g.name, g) for g in new)
            whole = page == 1 and len(items) < PAGE_SIZE and len(listed) == len(items)
            if len(items) < PAGE_SIZE or not new:
                break
        else:
            log.warning("salad: the project lists more than %d pages of groups", MAX_PAGES)
        return Whole(groups) if whole else groups

    def get_group(self, name: str) -> ContainerGroup | None:
        """The group, or None if SaladCloud does not know it."""
        try:
            body = self.http.get_json(self._group(name))
        except (ResourceNotFound, NotFound):
            return None
        if not isinstance(body, dict) or not body.get("name"):
            raise ProviderError(f"salad: GET container group {name} answered without a group")
        return ContainerGroup.model_validate(body)

    def create_group(self, body: dict[str, Any]) -> ContainerGroup:
        try:
            with _conflict(CONFLICTS["create"]):
                answer = self.http.post_json(self._groups(), json=body)
        except AuthFailed as exc:  # SaladCloud answers 403 to a create beyond a quota
            if _QUOTA.search(exc.message):
                raise QuotaExceeded(exc.message, fields=exc.fields) from None
            raise
        if not isinstance(answer, dict) or not answer.get("name"):
            raise ProviderError("salad: creating a container group answered without a group")
        return ContainerGroup.model_validate(answer)

    def start_group(self, name: str) -> None:
        with _conflict(CONFLICTS["start"]):
            self.http.request("POST", f"{self._group(name)}/start", idempotent=True)

    def stop_group(self, name: str) -> None:
        with _conflict(CONFLICTS["stop"]):
            self.http.request("POST", f"{self._group(name)}/stop", idempotent=True)

    def delete_group(self, name: str) -> bool:
        """Delete the group; False if SaladCloud did not know it; :class:`Conflict` if it
        cannot be deleted yet."""
        try:
            with _conflict(CONFLICTS["delete"]):
                self.http.request("DELETE", self._group(name))
        except (ResourceNotFound, NotFound):
            return False
        return True

    def instances(self, name: str) -> list[SaladInstance] | None:
        """The group's instances; None if the group does not exist."""
        try:
            body = self.http.get_json(f"{self._group(name)}/instances")
        except (ResourceNotFound, NotFound):
            return None
        items = body.get("instances") if isinstance(body, dict) else None
        if not isinstance(items, list):
            raise ProviderError(f"salad: GET instances of {name} answered without a list")
        return [SaladInstance.model_validate(i) for i in items if isinstance(i, dict)]

    def reallocate(self, name: str, instance_id: str) -> None:
        """Move the instance to another node (SaladCloud kills it and allocates anew)."""
        if not re.match(r"^[A-Za-z0-9-]{1,64}$", instance_id or ""):
            raise NotFound(f"salad: {instance_id!r} is not an instance id")
        with _conflict(CONFLICTS["reallocate"]):
            self.http.request(
                "POST", f"{self._group(name)}/instances/{instance_id}/reallocate", idempotent=True
            )

    def log_entries(self, query: str, start: str, end: str, page_size: int = 100) -> list[dict]:
        """Container log lines matching ``query`` between ``start`` and ``end`` (RFC 3339),
        newest first (``POST …/log-entries``)."""
        body = {
            "start_time": start,
            "end_time": end,
            "query": query,
            "page_size": page_size,
            "sort_order": "desc",
        }
        answer = self.http.post_json(f"{self._org()}/log-entries", json=body, idempotent=True)
        items = answer.get("items") if isinstance(answer, dict) else None
        return [i for i in items or [] if isinstance(i, dict)]
