"""The HTTP helper every provider API client uses (see docs/providers.md, "The HTTP helper").

:class:`ProviderHTTP` wraps an injected :class:`httpx.Client` and adds what each client would
otherwise get subtly wrong:

* a ``User-Agent: corral/<version>`` on every request (some provider CDNs reject requests
  without one) and a timeout on every request;
* a token bucket per client (``rate`` requests per second, bursts of ``burst``), which a
  ``429`` also pauses for its ``Retry-After``;
* retries with exponential backoff and jitter on connect errors, timeouts, 429 and 5xx,
  honouring ``Retry-After`` (seconds or an HTTP date). Sleeping and clocks are injected.
  **A request that is not idempotent** (POST and PATCH unless ``idempotent=True``) is only
  retried when the provider cannot have acted on it: a connect error or a 429. A timeout or a
  5xx on a create may have created a paid machine; the caller looks for it before trying again;
* HTTP statuses and provider error payloads mapped to typed errors (:func:`error_for`):
  401/403 :class:`AuthFailed`, 429 :class:`RateLimited` (with ``retry_after``), 402 or a
  quota/balance message :class:`QuotaExceeded`, 409 or a capacity message :class:`NoCapacity`,
  5xx :class:`ProviderUnavailable`, 404 :class:`ResourceNotFound` (the caller decides what a
  missing resource means; pass ``allow=(404,)`` to get the response instead);
* :meth:`ProviderHTTP.stream` for a body read as it comes (a log stream that may never end):
  one try, typed errors for a non-2xx status, the caller bounds how long it reads;
* error messages and log lines that never hold the Authorization header, an API key or a
  query string: only the method, the path, the status and the provider's message, scrubbed
  of the client's secrets and of anything shaped like a credential (:func:`scrub`).
"""

from __future__ import annotations

import json as _json
import logging
import random
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC
from email.utils import parsedate_to_datetime
from typing import Any

import httpx

from corral import __version__
from corral.backoff import backoff_delay
from corral.errors import (
    AuthFailed,
    NoCapacity,
    ProviderError,
    ProviderUnavailable,
    QuotaExceeded,
    RateLimited,
)

log = logging.getLogger(__name__)

USER_AGENT = f"corral/{__version__}"
IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE"})
_MAX_MESSAGE = 200
_MAX_ERROR_BODY = 64 * 1024


class ResourceNotFound(ProviderError):
    """The provider does not know the resource (HTTP 404, or a "not found" error payload).
    Never retried; the caller decides (``terminate``: already gone; ``status``: TERMINATED)."""

    code = "provider_not_found"


@dataclass(frozen=True)
class RetryPolicy:
    """Try at most ``max_attempts`` times. Before try ``n+1`` wait ``base_delay * 2**(n-1)``
    (at most ``max_delay``) times a random factor in [0.5, 1], or the provider's
    ``Retry-After`` when longer. A ``Retry-After`` above ``max_retry_after`` is not waited for:
    :class:`RateLimited` is raised at once with it, for the controller to come back later."""

    max_attempts: int = 5
    base_delay: float = 0.5
    max_delay: float = 20.0
    max_retry_after: float = 60.0
    #: seconds, for connect, read, write and pool each
    timeout: float = 30.0

    def delay(self, failures: int, rng: random.Random, retry_after: float | None = None) -> float:
        wait = backoff_delay(failures, base=self.base_delay, max_delay=self.max_delay, rng=rng)
        return max(wait, retry_after) if retry_after is not None else wait


class TokenBucket:
    """At most ``rate`` requests per second on average, ``burst`` at once. Thread-safe."""

    def __init__(
        self,
        rate: float,
        burst: float | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ):
        if rate <= 0:
            raise ValueError("rate must be > 0 requests per second")
        self.rate = float(rate)
        self.capacity = float(burst if burst is not None else max(1.0, rate))
        self._clock = clock
        self._sleep = sleep
        self._tokens = self.capacity
        self._last = clock()
        self._paused_until = 0.0
        self._lock = threading.Lock()

    def _refill(self, now: float) -> None:
        self._tokens = min(self.capacity, self._tokens + (now - self._last) * self.rate)
        self._last = now

    def acquire(self) -> float:
        """Take one token, sleeping until there is one. Returns the seconds slept."""
        slept = 0.0
        while True:
            with self._lock:
                now = self._clock()
                self._refill(now)
                wait = max(0.0, self._paused_until - now)
                # (a hair under one token counts: a refill's rounding must not leave the
                # caller sleeping a wait too small to move the clock)
                if wait == 0.0 and self._tokens >= 1.0 - 1e-9:
                    self._tokens = max(0.0, self._tokens - 1.0)
                    return slept
                if wait == 0.0:
                    wait = (1.0 - self._tokens) / self.rate
            self._sleep(wait)
            slept += wait

    def hold_off(self, seconds: float) -> None:
        """No request for ``seconds`` (a 429's ``Retry-After`` applies to the whole client)."""
        with self._lock:
            self._paused_until = max(self._paused_until, self._clock() + max(0.0, seconds))


# --- scrubbing and error mapping ---------------------------------------------------------------

_CREDENTIAL_PATTERNS = (
    re.compile(r"(?i)\b(bearer|basic|token)(\s+)[A-Za-z0-9._~+/=-]{4,}"),
    re.compile(
        r"(?i)([\"']?\b[\w-]*(?:api[_-]?key|apikey|token|secret|password|passwd|signature|"
        r"credential|authorization|access[_-]?key)[\w-]*[\"']?\s*[=:]\s*[\"']?)[^\s\"'&,;}]+"
    ),
)


def scrub(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with each of ``secrets`` (values of 4 characters or more) and anything shaped
    like a credential (``Bearer x``, ``api_key=x``, ``"token": "x"``) replaced by ``***``."""
    for value in sorted({s for s in secrets if s and len(s) >= 4}, key=len, reverse=True):
        text = text.replace(value, "***")
    text = _CREDENTIAL_PATTERNS[0].sub(r"\1\2***", text)
    return _CREDENTIAL_PATTERNS[1].sub(r"\1***", text)


_CAPACITY = re.compile(
    r"(?i)no longer any instances available|insufficient\s*(instance\s*)?capacity|"
    r"out of capacity|no capacity|not enough (free )?gpus?|no (gpus?|instances?|machines?|"
    r"hosts?) (are |is )?available|capacity (is )?(not available|unavailable|exhausted)"
)
_QUOTA = re.compile(
    r"(?i)quota|insufficient (balance|funds|credit)|balance (is )?too low|spending limit|"
    r"payment required|out of credits?|vcpulimitexceeded|instancelimitexceeded"
)
_NOT_FOUND = re.compile(r"(?i)\bnot found\b|does not exist|no such|unknown (pod|instance|id)")
_AUTH_CODES = frozenset({"UNAUTHENTICATED", "UNAUTHORIZED", "FORBIDDEN", "PERMISSION_DENIED"})


_HTML = re.compile(r"(?is)^\s*(<!doctype\s+html|<html[\s>]|<head[\s>]|<body[\s>])")
_HTML_TITLE = re.compile(r"(?is)<title[^>]*>(.*?)</title>|<h1[^>]*>(.*?)</h1>")
_TAGS = re.compile(r"<[^>]+>")


def html_summary(text: str) -> str | None:
    """``"an HTML error page (<title>)"`` when ``text`` is an HTML document (a gateway or a
    CDN answered instead of the API), else None: the page itself is never shown."""
    if not _HTML.match(text):
        return None
    m = _HTML_TITLE.search(text)
    title = " ".join(_TAGS.sub(" ", next(g for g in m.groups() if g)).split()) if m else ""
    return f"an HTML error page ({title[:80]})" if title else "an HTML error page"


def payload_message(body: Any) -> tuple[str, str]:
    """``(message, code)`` from a provider error payload: ``{"message"}``, ``{"error": ...}``,
    RFC 9457 problem details (``title``/``detail``), GraphQL ``{"errors": [...]}``, text, or
    an HTML page (summarised by its title, see :func:`html_summary`)."""
    if isinstance(body, (bytes, str)):
        text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
        try:
            body = _json.loads(text)
        except ValueError:
            html = html_summary(text)
            return (html if html is not None else text.strip()), ""
    if isinstance(body, list):
        parts = [payload_message(item) for item in body[:3]]
        return "; ".join(m for m, _ in parts if m), next((c for _, c in parts if c), "")
    if not isinstance(body, dict):
        return ("" if body is None else str(body)), ""
    if isinstance(body.get("errors"), list) and body["errors"]:
        msg, code = payload_message(body["errors"])
        return msg or str(body.get("detail") or body.get("title") or ""), code
    code = body.get("code") or (body.get("extensions") or {}).get("code") or ""
    for key in ("detail", "message", "error_description", "error", "title"):
        value = body.get(key)
        if isinstance(value, dict):
            return payload_message(value)
        if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            # FastAPI's validation errors: [{"loc": [...], "msg": "...", "type": "..."}]
            lines = [
                ".".join(str(x) for x in v.get("loc") or []) + f": {v.get('msg') or v}"
                for v in value[:3]
            ]
            return "; ".join(p.lstrip(": ") for p in lines), str(value[0].get("type") or code)
        if value:
            return str(value), str(code or body.get("title") or "")
    return "", str(code)


def error_for(
    provider: str,
    status: int | None,
    message: str,
    *,
    code: str = "",
    what: str = "",
    retry_after: float | None = None,
) -> ProviderError:
    """The typed error for a failed call: ``status`` is the HTTP status (None for an error
    payload in a 200, as GraphQL sends), ``message``/``code`` the provider's own (already
    scrubbed), ``what`` the call (``"POST /pods"``)."""
    text = " ".join(f"{message} {code}".split())
    short = text[:_MAX_MESSAGE] + ("..." if len(text) > _MAX_MESSAGE else "")
    where = f"{provider}: {what} " if what else f"{provider}: "
    head = f"{where}HTTP {status}" if status is not None else f"{where}error"
    line = f"{head}: {short}" if short else head
    fields: dict[str, Any] = {"provider": provider, **({"status": status} if status else {})}
    upper = code.upper()
    if status == 403 and "error code: 1010" in text.lower():
        return ProviderError(
            f"{line} (the provider's CDN rejected the client; is the User-Agent set?)",
            fields=fields,
        )
    if status == 429:
        return RateLimited(line, retry_after=retry_after, fields=fields)
    if status in (401, 403) or upper in _AUTH_CODES:
        return AuthFailed(line, fields=fields)
    if status == 402 or _QUOTA.search(text):
        return QuotaExceeded(line, fields=fields)
    if status == 409 or _CAPACITY.search(text):
        return NoCapacity(line, fields=fields)
    if (status is not None and status >= 500) or upper == "INTERNAL_SERVER_ERROR":
        err = ProviderUnavailable(line, fields=fields)
        err.retry_after = retry_after  # type: ignore[attr-defined]  # a 503 may carry one
        return err
    if status in (404, 410) or (status in (None, 400) and _NOT_FOUND.search(text)):
        return ResourceNotFound(line, fields=fields)
    if "rate limit" in text.lower() or "too many requests" in text.lower():
        return RateLimited(line, retry_after=retry_after, fields=fields)
    return ProviderError(line, fields=fields)


def read_capped(resp: httpx.Response, limit: int) -> bytes:
    """At most ``limit`` bytes of a streamed answer's body: what came before the connection
    broke, if it did (an error page or a stream's first part, never a read without end)."""
    body = b""
    try:
        for chunk in resp.iter_bytes():
            body += chunk
            if len(body) >= limit:
                break
    except httpx.HTTPError:
        pass  # what came is what there is
    return body[:limit]


def parse_retry_after(value: str | None, now: float) -> float | None:
    """``Retry-After`` in seconds from ``now`` (unix seconds); None if absent or unreadable."""
    if not value:
        return None
    text = value.strip()
    try:
        return max(0.0, float(text))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, when.timestamp() - now)


# --- the client ------------------------------------------------------------------------------


class ProviderHTTP:
    """HTTP calls to one provider API. ``provider`` names it in errors; ``base_url`` is
    prefixed to relative paths; ``token`` becomes ``Authorization: Bearer <token>``;
    ``headers`` are sent with every request; ``secrets`` are values scrubbed from every error
    (the token is always included). ``rate``/``burst``: the token bucket (None: no limit), or
    pass a shared ``bucket``. ``sleep``, ``clock`` (monotonic) and ``now`` (unix seconds, for
    HTTP-date ``Retry-After``) are injectable so tests never sleep."""

    def __init__(
        self,
        provider: str,
        base_url: str = "",
        *,
        client: httpx.Client | None = None,
        token: str | None = None,
        headers: Mapping[str, str] | None = None,
        secrets: Iterable[str] = (),
        retry: RetryPolicy | None = None,
        rate: float | None = None,
        burst: float | None = None,
        bucket: TokenBucket | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        now: Callable[[], float] = time.time,
        rng: random.Random | None = None,
    ):
        self.provider = provider
        self.base_url = base_url.rstrip("/")
        self.retry = retry or RetryPolicy()
        self._client = client or httpx.Client()
        self._owns_client = client is None
        self._headers = {"User-Agent": USER_AGENT, **dict(headers or {})}
        self._secrets = {s for s in secrets if s}
        if token:
            self._headers["Authorization"] = f"Bearer {token}"
            self._secrets.add(token)
        if bucket is None and rate is not None:
            bucket = TokenBucket(rate, burst, clock=clock, sleep=sleep)
        self.bucket = bucket
        self._sleep = sleep
        self._now = now
        self._rng = rng or random.Random()

    def close(self) -> None:
        if self._owns_client:
            self._client.close()

    def __enter__(self) -> ProviderHTTP:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def scrub(self, text: str) -> str:
        return scrub(text, self._secrets)

    def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        json: Any = None,
        content: bytes | str | None = None,
        headers: Mapping[str, str] | None = None,
        idempotent: bool | None = None,
        allow: Iterable[int] = (),
    ) -> httpx.Response:
        """Send the request (with retries) and return a 2xx response, or one whose status is
        in ``allow``; any other status raises its typed error (:func:`error_for`)."""
        method = method.upper()
        allowed = frozenset(allow)

        def check(resp: httpx.Response) -> httpx.Response:
            if resp.is_success or resp.status_code in allowed:
                return resp
            raise self._error(resp, method, path)

        return self._call(method, path, check, params, json, content, headers, idempotent)

    def get_json(self, path: str, **kw: Any) -> Any:
        return self._json(self.request("GET", path, **kw), "GET", path)

    def post_json(self, path: str, json: Any = None, **kw: Any) -> Any:
        return self._json(self.request("POST", path, json=json, **kw), "POST", path)

    def graphql(
        self,
        query: str,
        variables: Mapping[str, Any] | None = None,
        *,
        path: str = "",
        idempotent: bool = False,
    ) -> dict[str, Any]:
        """POST a GraphQL document; return ``data``. An ``errors`` list (even in a 200) raises
        its typed error. Pass ``idempotent=True`` for queries so they are retried like a GET."""
        body: dict[str, Any] = {"query": query}
        if variables:
            body["variables"] = dict(variables)

        def check(resp: httpx.Response) -> dict[str, Any]:
            if not resp.is_success:
                raise self._error(resp, "POST", path or "/graphql")
            payload = self._json(resp, "POST", path or "/graphql")
            if not isinstance(payload, dict):
                raise ProviderError(f"{self.provider}: GraphQL answer is not an object")
            if payload.get("errors"):
                msg, code = payload_message({"errors": payload["errors"]})
                raise error_for(
                    self.provider, None, self.scrub(msg), code=self.scrub(code), what="GraphQL"
                )
            return payload.get("data") or {}

        return self._call("POST", path, check, None, body, None, None, idempotent)

    @contextmanager
    def stream(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: float | httpx.Timeout | None = None,
    ) -> Iterator[httpx.Response]:
        """Send one request and hand over its response unread, for a body read as it comes
        (a log stream that may never end; the caller bounds how long it reads and the
        response is closed on leaving). Never retried. A status that is not 2xx raises its
        typed error (:func:`error_for`, from at most the first 64 KiB of the body); no answer
        at all (connect error, timeout) is :class:`ProviderUnavailable`."""
        method = method.upper()
        what = self._what(method, path)
        if self.bucket is not None:
            self.bucket.acquire()
        request = self._client.build_request(
            method,
            self._url(path),
            params=params,
            headers={**self._headers, **dict(headers or {})},
            timeout=self.retry.timeout if timeout is None else timeout,
        )
        try:
            resp = self._client.send(request, stream=True)
        except httpx.HTTPError as exc:
            raise ProviderUnavailable(f"{self.provider}: {what}: {type(exc).__name__}") from None
        try:
            if not resp.is_success:
                raise self._stream_error(resp, method, path)
            yield resp
        finally:
            resp.close()

    # --- internals ---

    def _url(self, path: str) -> str:
        if path.startswith(("http://", "https://")):
            return path
        if not path:
            return self.base_url
        return f"{self.base_url}/{path.lstrip('/')}"

    def _what(self, method: str, path: str) -> str:
        shown = httpx.URL(self._url(path)).path if path else "/"
        return f"{method} {self.scrub(shown)}"

    def _json(self, resp: httpx.Response, method: str, path: str) -> Any:
        if resp.status_code == 204 or not resp.content:
            return None
        try:
            return resp.json()
        except ValueError:
            html = html_summary(resp.text)
            raise ProviderError(
                f"{self.provider}: {self._what(method, path)} answered with "
                + (html if html is not None else "something not JSON"),
                fields={"provider": self.provider, "status": resp.status_code},
            ) from None

    def _error(
        self, resp: httpx.Response, method: str, path: str, body: bytes | None = None
    ) -> ProviderError:
        """The typed error of a failed answer (``body``: its bytes, when read already)."""
        msg, code = payload_message(resp.content if body is None else body)
        return error_for(
            self.provider,
            resp.status_code,
            self.scrub(msg),
            code=self.scrub(code),
            what=self._what(method, path),
            retry_after=parse_retry_after(resp.headers.get("Retry-After"), self._now()),
        )

    def _stream_error(self, resp: httpx.Response, method: str, path: str) -> ProviderError:
        return self._error(resp, method, path, read_capped(resp, _MAX_ERROR_BODY))

    def _call(
        self,
        method: str,
        path: str,
        check: Callable[[httpx.Response], Any],
        params: Mapping[str, Any] | None,
        json: Any,
        content: bytes | str | None,
        headers: Mapping[str, str] | None,
        idempotent: bool | None,
    ) -> Any:
        safe_to_repeat = method in IDEMPOTENT_METHODS if idempotent is None else idempotent
        policy = self.retry
        sent_headers = {**self._headers, **dict(headers or {})}
        url = self._url(path)
        what = self._what(method, path)
        for attempt in range(1, policy.max_attempts + 1):
            if self.bucket is not None:
                self.bucket.acquire()
            retry_after: float | None = None
            try:
                resp = self._client.request(
                    method,
                    url,
                    params=params,
                    json=json,
                    content=content,
                    headers=sent_headers,
                    timeout=policy.timeout,
                )
                return check(resp)
            except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as exc:
                # the request never reached the provider: always safe to send again
                err: ProviderError = ProviderUnavailable(
                    f"{self.provider}: {what}: cannot connect ({type(exc).__name__})"
                )
                repeat = True
            except httpx.TimeoutException as exc:
                err = ProviderUnavailable(f"{self.provider}: {what}: {type(exc).__name__}")
                repeat = safe_to_repeat
            except httpx.TransportError as exc:
                err = ProviderUnavailable(f"{self.provider}: {what}: {type(exc).__name__}")
                repeat = safe_to_repeat
            except RateLimited as exc:
                err, repeat, retry_after = exc, True, exc.retry_after
                if retry_after is not None and self.bucket is not None:
                    self.bucket.hold_off(retry_after)
            except ProviderUnavailable as exc:
                err, repeat = exc, safe_to_repeat
                retry_after = getattr(exc, "retry_after", None)
            if not repeat or attempt == policy.max_attempts:
                raise err
            if retry_after is not None and retry_after > policy.max_retry_after:
                raise err
            wait = policy.delay(attempt, self._rng, retry_after)
            log.info(
                "%s: %s failed (%s); try %d in %.1fs",
                self.provider,
                what,
                err.code,
                attempt + 1,
                wait,
            )
            self._sleep(wait)
        raise AssertionError("unreachable")  # pragma: no cover
