"""Server-Sent Events (``text/event-stream``) decoded line by line, as the WHATWG HTML
standard says a client does ("Interpreting an event stream").

:class:`SseDecoder` is fed the stream's lines (without their line ends: ``\\n``, ``\\r\\n`` and
``\\r`` all end a line; httpx's ``iter_lines`` splits on each) and returns each event when the
blank line that ends it arrives:

* ``:...`` is a comment (a keep-alive): ignored;
* ``field: value`` (one space after the colon dropped), ``field:value`` and ``field`` alone
  (an empty value); ``data`` lines of one event are joined with ``\\n``; ``event`` sets the
  event's type (default ``message``); ``id`` is kept (one holding NUL is ignored);
  ``retry`` and unknown fields are ignored;
* an event without data is not dispatched; a byte-order mark before the first line is dropped.

:meth:`SseDecoder.flush` returns an event the stream left unfinished (no blank line after it
before the stream ended or the reader hung up): the standard drops it, a log reader keeps it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SseEvent:
    data: str
    event: str = "message"
    id: str | None = None


class SseDecoder:
    def __init__(self) -> None:
        self._data: list[str] = []
        self._event = ""
        self._id: str | None = None
        self._first = True

    def feed(self, line: str) -> SseEvent | None:
        """One line of the stream; the event it ends, if any."""
        if self._first:
            self._first = False
            line = line.removeprefix("\ufeff")
        if line == "":
            return self._dispatch()
        if line.startswith(":"):
            return None
        field, colon, value = line.partition(":")
        if colon:
            value = value.removeprefix(" ")
        if field == "data":
            self._data.append(value)
        elif field == "event":
            self._event = value
        elif field == "id" and "\0" not in value:
            self._id = value
        return None

    def flush(self) -> SseEvent | None:
        """The event under way when the stream stopped, if it has data."""
        return self._dispatch()

    def _dispatch(self) -> SseEvent | None:
        data, event = self._data, self._event
        self._data, self._event = [], ""
        if not data:
            return None
        return SseEvent(data="\n".join(data), event=event or "message", id=self._id)
