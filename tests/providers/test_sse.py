"""The Server-Sent Events decoder, line by line as the WHATWG standard reads a stream."""

from __future__ import annotations

from corral.providers.common.sse import SseDecoder, SseEvent


def _events(*lines: str) -> list[SseEvent]:
    decoder = SseDecoder()
    out = [e for line in lines if (e := decoder.feed(line)) is not None]
    last = decoder.flush()
    return out + ([last] if last is not None else [])


def test_data_lines_of_one_event_are_joined_and_a_blank_line_ends_it() -> None:
    assert _events("data: a", "data:b", "data", "", "data: c", "") == [
        SseEvent("a\nb\n"),
        SseEvent("c"),
    ]


def test_comments_unknown_fields_and_events_without_data_are_skipped() -> None:
    assert _events(": keep-alive", "", "retry: 10", "bogus", "event: ping", "", "data: x", "") == [
        SseEvent("x")
    ]


def test_event_type_and_id_are_kept_an_id_with_nul_is_not() -> None:
    assert _events("\ufeffevent: log", "id: 7", "data: x", "", "id: 8\0", "data: y", "") == [
        SseEvent("x", event="log", id="7"),
        SseEvent("y", id="7"),
    ]


def test_an_event_the_stream_left_unfinished_is_flushed() -> None:
    assert _events("data: done", "", "data: half") == [SseEvent("done"), SseEvent("half")]
