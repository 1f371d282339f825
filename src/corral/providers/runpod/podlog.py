"""A pod's log from REST v2's ``GET /v2/pods/{id}/logs``: Server-Sent Events whose data is
``{"source": "container", "line": "...", "ts": "..."}`` (``shared/providers/runpod.md`` §5).

RunPod keeps no log of its own to page through: the endpoint streams what the pod's container
prints, and follows it. :func:`read_pod_log` reads it for a bounded time and hangs up, keeping
the last ``tail`` lines. What the contract leaves open (UNCONFIRMED) is read defensively:

* the stream may never end: reading stops ``seconds`` after the request was sent (or when the
  stream has been silent that long), whatever comes, even bytes that never end a line;
* keep-alive comments and events without a ``line`` are skipped; a data line that is not
  JSON is shown as it came; a ``line`` holding several lines counts as several; a source
  other than ``container`` (``system``, say) is shown in brackets before the line; a
  ``ts`` string is shown before it;
* an answer that is not an event stream: an HTML page (a gateway's) is a
  :class:`~corral.errors.ProviderError` naming its title, JSON is read for log entries (a
  list of them, or one wrapped in an object), plain text line by line;
* a stream cut off midway gives what came before the cut;
* very long lines are cut at :data:`MAX_LINE` characters (a line of the stream itself, its
  JSON and all, at :data:`MAX_PENDING`).

Error statuses are the HTTP helper's typed errors (a 404 is the caller's business: a pod
that has logged nothing yet, or no pod). The account's API key is masked in every line, and so
is anything shaped like a RunPod API key (``rpa_`` and at least 16 letters or digits): the
pod-scoped key RunPod puts in every pod's environment as ``RUNPOD_API_KEY`` is one corral
never sees.
"""

from __future__ import annotations

import json
import re
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import httpx

from corral.errors import ProviderError
from corral.providers.common.sse import SseDecoder, SseEvent
from corral.providers.http import ProviderHTTP, html_summary, read_capped

#: characters of one log line shown at most (the rest is cut)
MAX_LINE = 4096
#: a RunPod API key, the account's or a pod's (keys begin ``rpa_``)
_API_KEY_SHAPE = re.compile(r"\brpa_[A-Za-z0-9]{16,}")
#: characters of one line of the stream kept at most (a data line: its JSON and all)
MAX_PENDING = 4 * MAX_LINE
#: bytes of an answer that is not an event stream read at most
MAX_BODY = 1024 * 1024
_MASK = "***"
_EOL = re.compile(r"\r\n|\r|\n")
_Mask = Callable[[str], str]


def read_pod_log(
    http: ProviderHTTP,
    path: str,
    *,
    tail: int,
    seconds: float,
    secrets: Iterable[str] = (),
    clock: Callable[[], float] = time.monotonic,
) -> list[str]:
    """The last ``tail`` lines of the log stream at ``path``, read for about ``seconds`` (at
    most twice that: a read already waiting when the time is up may wait ``seconds``)."""
    keep: deque[str] = deque(maxlen=max(0, tail))
    masks = sorted({s for s in secrets if s and len(s) >= 4}, key=len, reverse=True)

    def mask(text: str) -> str:
        for value in masks:
            text = text.replace(value, _MASK)
        return _API_KEY_SHAPE.sub(_MASK, text)  # the pod's own key, which corral never knows

    deadline = clock() + seconds
    timeout = httpx.Timeout(seconds, connect=min(seconds, 10.0))
    headers = {"Accept": "text/event-stream", "Cache-Control": "no-cache"}
    with http.stream("GET", path, headers=headers, timeout=timeout) as resp:
        kind = resp.headers.get("Content-Type", "").split(";")[0].strip().lower()
        if kind in ("text/event-stream", ""):
            lines = _from_events(resp, deadline, clock, mask)
        else:
            lines = _from_body(resp, kind, path, http.provider, mask)
        for line in lines:
            keep.append(mask(line))  # again: JSON may have spelt a value otherwise
    return list(keep)


def _stream_lines(
    resp: httpx.Response, deadline: float, clock: Callable[[], float], mask: _Mask
) -> Iterator[str]:
    """The stream's lines (``\n``, ``\r\n`` or ``\r`` ends one, nothing else does), until the
    deadline: checked at every chunk, so a stream that trickles bytes and never a line end
    stops too. A line longer than :data:`MAX_PENDING` characters keeps only its beginning.
    Secrets are masked (``mask``) before any cut, so none is cut in two."""
    pending, overflow, after_cr = "", False, False
    for chunk in resp.iter_text():
        if not chunk:
            continue
        if after_cr and chunk.startswith("\n"):
            chunk = chunk[1:]  # the \n of a \r\n cut between two chunks
        after_cr = chunk.endswith("\r")
        text, start = pending + chunk, 0
        for end in _EOL.finditer(text):
            line, start = text[start : end.start()], end.end()
            if overflow:  # the rest of a line already cut
                overflow = False
                continue
            yield mask(line)[:MAX_PENDING]
        pending = text[start:]
        if overflow:
            pending = ""  # still inside the line cut: what came of it is dropped
        elif len(pending) > MAX_PENDING:
            yield mask(pending)[:MAX_PENDING]
            pending, overflow = "", True
        if clock() >= deadline:
            return
    if pending:
        yield mask(pending)


def _from_events(
    resp: httpx.Response, deadline: float, clock: Callable[[], float], mask: _Mask
) -> Iterator[str]:
    decoder = SseDecoder()
    try:
        for raw in _stream_lines(resp, deadline, clock, mask):
            event = decoder.feed(raw)
            if event is not None:
                yield from _event_lines(event)
    except httpx.TimeoutException:
        pass  # silent longer than the time given: what came is what there is
    except httpx.HTTPError:
        pass  # cut off (the pod went away, a proxy hung up): keep what came
    last = decoder.flush()
    if last is not None:
        yield from _event_lines(last)


def _event_lines(event: SseEvent) -> Iterator[str]:
    try:
        entry: Any = json.loads(event.data)
    except ValueError:
        entry = event.data  # not JSON: shown as it came
    yield from _entry_lines(entry)


def _entry_lines(entry: Any) -> Iterator[str]:
    """The lines of one log entry: ``{"source", "line", "ts"}``, or a bare string."""
    prefix = ""
    if isinstance(entry, dict):
        text = entry.get("line")
        if text is None:
            text = entry.get("message")
        if not isinstance(text, str):
            return  # a heartbeat or something else that holds no log line
        source, ts = entry.get("source"), entry.get("ts")
        if isinstance(source, str) and source and source != "container":
            prefix = f"[{source}] "
        if isinstance(ts, str) and ts:
            prefix = f"{ts} {prefix}"
    elif isinstance(entry, str):
        text = entry
    else:
        return
    for line in text.splitlines() or [""]:
        line = prefix + line
        yield line if len(line) <= MAX_LINE else line[:MAX_LINE] + " [cut]"


def _from_body(
    resp: httpx.Response, kind: str, path: str, provider: str, mask: _Mask
) -> Iterator[str]:
    """An answer that is not an event stream (UNCONFIRMED that there is such): JSON entries
    or plain text; an HTML page is an error."""
    text = mask(read_capped(resp, MAX_BODY).decode("utf-8", "replace"))
    if not text.strip():
        return
    page = html_summary(text)
    if page is not None or kind == "text/html":
        raise ProviderError(
            f"{provider}: GET {path} answered with {page or 'an HTML page'}, not a log stream",
            fields={"provider": provider, "status": resp.status_code},
        )
    try:
        entries: Any = json.loads(text)
    except ValueError:
        yield from _entry_lines(text)
        return
    if isinstance(entries, dict):  # {"logs": [...]} or {"lines": [...]}: the first list
        entries = next((v for v in entries.values() if isinstance(v, list)), [entries])
    for entry in entries if isinstance(entries, list) else [entries]:
        yield from _entry_lines(entry)
