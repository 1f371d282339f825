"""The providers' published OpenAPI documents as a check on every exchange with a fake cloud.

A fake cloud is only worth what its contract is worth: a fake written by the hands that wrote
the client drifts to accept what the client sends. So each fake names the document its real
API publishes (``contracts/`` at the repository root, copied with their source) and every
request it is sent and every answer it gives is validated against that document with
openapi-core:

* :class:`Contract`: one document, loaded once per process; :meth:`Contract.check_request`
  and :meth:`Contract.check_response` return the violations as one line each (empty: none).
* :class:`ContractCheck`: what a fake carries: the contract, the URL prefix it applies to
  (the fake serves other things too: gateways, metadata services, logs), and the violations
  seen so far. :func:`support.fakehttp.QuietHandler` calls it for every request under the
  prefix; a request the real API would refuse is answered with the fake's own refusal (the
  provider's error shape) and recorded; an answer the fake gives that the document does not
  allow is recorded. :meth:`ContractCheck.assert_clean` (called by the fake's fixture at
  teardown) fails the test that caused either.

Answers a test asked for on purpose (an injected fault, an HTML error page) are not checked:
the fake marks them with :func:`unchecked`.
"""

from __future__ import annotations

import functools
import json
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

import yaml
from openapi_core import Config, OpenAPI
from openapi_core.testing import MockRequest, MockResponse

#: Where the published documents live (see ``contracts/README.md`` for their sources).
CONTRACTS = Path(__file__).resolve().parents[2] / "contracts"

#: The host the fakes' requests are checked as coming to (the documents' own servers are
#: replaced by this one, so the path under the fake's prefix is what is matched).
_HOST = "http://fake.invalid"


@functools.cache
def load(name: str) -> Contract:
    """The contract ``contracts/<name>``, built once per process (openapi-core takes a few
    hundred milliseconds per document)."""
    return Contract(CONTRACTS / name)


class Contract:
    """One provider's published OpenAPI document."""

    def __init__(self, path: Path):
        self.path = path
        text = path.read_text()
        doc = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
        self.title = str(doc.get("info", {}).get("title", path.name))
        base = ""
        servers = doc.get("servers") or []
        if servers:
            # "https://api.salad.com/api/public" -> "/api/public": the fake serves the same
            # paths under its own origin
            url = str(servers[0].get("url", ""))
            rest = url.split("://", 1)[1] if "://" in url else url
            base = "/" + rest.split("/", 1)[1] if "/" in rest else ""
        self.base_path = base.rstrip("/")
        doc = dict(doc)
        doc["servers"] = [{"url": _HOST + self.base_path}]
        self.api = OpenAPI.from_dict(doc, config=Config(spec_validator_cls=None))
        self._lock = threading.Lock()

    def _request(
        self, method: str, path: str, query: str, headers: Mapping[str, str], body: bytes
    ) -> MockRequest:
        args: dict[str, Any] = {}
        for k, v in parse_qsl(query, keep_blank_values=True):
            args.setdefault(k, v)
        kind = _media_type(headers.get("Content-Type") or headers.get("content-type") or "")
        return MockRequest(
            _HOST,
            method.lower(),
            path,
            args=args,
            headers={k.lower(): v for k, v in headers.items()},
            data=body or None,
            content_type=kind or "application/json",
        )

    def check_request(
        self,
        method: str,
        path: str,
        query: str = "",
        headers: Mapping[str, str] | None = None,
        body: bytes = b"",
    ) -> list[str]:
        """What in this request the published API would refuse, one line each."""
        request = self._request(method, path, query, headers or {}, body)
        with self._lock:
            errors = list(self.api.iter_request_errors(request))
        return [f"{method} {path}: request: {_describe(e)}" for e in errors]

    def check_response(
        self,
        method: str,
        path: str,
        status: int,
        body: bytes,
        content_type: str = "application/json",
        headers: Mapping[str, str] | None = None,
        query: str = "",
    ) -> list[str]:
        """What in this answer to ``method path`` the published API does not allow."""
        request = self._request(method, path, query, {}, b"")
        response = MockResponse(
            body,
            status_code=status,
            headers=dict(headers or {}),
            content_type=_media_type(content_type) or "application/json",
        )
        with self._lock:
            errors = list(self.api.iter_response_errors(request, response))
        return [f"{method} {path}: answer {status}: {_describe(e)}" for e in errors]


def _media_type(value: str) -> str:
    return value.split(";", 1)[0].strip()


def _describe(exc: BaseException) -> str:
    """One line for an openapi-core error: where in the document's schema each value failed
    when it says (never the whole value: a body can be large), else its own message."""
    schema: list[str] = []
    plain: list[str] = []
    seen: set[int] = set()
    stack: list[BaseException] = [exc]
    while stack:
        e = stack.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        inner = getattr(e, "schema_errors", None) or ()
        for err in inner:
            where = "/".join(str(p) for p in getattr(err, "absolute_path", ()) or ())
            schema.append(f"{where or '(root)'}: {getattr(err, 'message', err)}")
        if not inner:
            plain.append(str(e) or type(e).__name__)
        if e.__cause__ is not None:
            stack.append(e.__cause__)
        stack.extend(s for s in getattr(e, "errors", None) or () if isinstance(s, BaseException))
    lines = schema or plain[-1:] or [type(exc).__name__]
    return f"{type(exc).__name__}: " + "; ".join(dict.fromkeys(lines))


@dataclass
class ContractCheck:
    """A fake's contract: the document, the URL prefix it covers on the fake, the refusal the
    fake answers a non-conforming request with, and the violations seen.

    ``refuse(violations)`` returns ``(status, body)`` in the provider's own error shape (the
    real API's answer to such a request: 400 or 422 with its error body)."""

    contract: Contract
    prefix: str
    refuse: Callable[[list[str]], tuple[int, Any]]
    violations: list[str] = field(default_factory=list)
    checked: int = 0
    #: paths under the prefix that the document does not cover and the fake serves anyway,
    #: each with the reason (an assumption named in docs/providers.md)
    exempt: tuple[str, ...] = ()
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def covers(self, path: str) -> bool:
        if not path.startswith(self.prefix):
            return False
        rest = path[len(self.prefix) :]
        return not any(rest.startswith(e) for e in self.exempt)

    def api_path(self, path: str) -> str:
        """The path as the document names it (the prefix replaced by the document's base)."""
        return self.contract.base_path + path[len(self.prefix) :]

    def record(self, lines: Iterable[str]) -> list[str]:
        lines = list(lines)
        with self._lock:
            self.checked += 1
            self.violations.extend(lines)
        return lines

    def assert_clean(self) -> None:
        """Fail the test when any exchange broke the published contract."""
        with self._lock:
            seen = list(self.violations)
        if seen:
            shown = "\n  ".join(seen[:20])
            more = f"\n  ... and {len(seen) - 20} more" if len(seen) > 20 else ""
            raise AssertionError(
                f"{len(seen)} exchange(s) broke {self.contract.path.name} "
                f"({self.contract.title}):\n  {shown}{more}"
            )


def unchecked(handler: Any) -> None:
    """Mark the answer about to be sent on ``handler`` as one a test asked for (a fault): its
    shape is not checked against the contract."""
    exchange = getattr(handler, "exchange", None)
    if exchange is not None:
        exchange.checked = False


@dataclass
class Exchange:
    """The request being answered on a handler, kept for checking the answer."""

    check: ContractCheck
    method: str
    path: str
    query: str
    checked: bool = True
