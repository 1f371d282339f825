"""Retry edge cases found in review: ``on=`` as a list, async and generator functions, and
the note on the error that is finally raised. No test sleeps for real."""

from __future__ import annotations

import pytest

from corral.sdk import retry


def failing(exc: BaseException, times: int):
    calls = []

    def fn() -> str:
        calls.append(1)
        if len(calls) <= times:
            raise exc
        return "ok"

    return fn, calls


def test_on_and_not_on_may_be_lists():
    sleeps: list[float] = []
    fn, calls = failing(TimeoutError("slow"), 2)
    wrapped = retry(on=[OSError, TimeoutError], not_on=[], sleep=sleeps.append, jitter=False)(fn)
    assert wrapped() == "ok" and len(calls) == 3 and len(sleeps) == 2
    fn, calls = failing(ConnectionResetError("reset"), 5)
    wrapped = retry(on=[OSError], not_on=[ConnectionResetError], sleep=sleeps.append)(fn)
    with pytest.raises(ConnectionResetError):
        wrapped()
    assert len(calls) == 1


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"on": "OSError"}, r"on= takes exception classes .* got 'OSError'"),
        ({"on": [OSError, 3]}, r"on= takes exception classes .* got 3"),
        ({"on": int}, r"on= takes exception classes .* got <class 'int'>"),
        ({"not_on": [None]}, r"not_on= takes exception classes .* got None"),
    ],
)
def test_a_bad_on_is_a_clear_error_when_decorating(kwargs, message):
    with pytest.raises(TypeError, match=message):
        retry(**kwargs)


def test_async_and_generator_functions_are_refused_not_silently_unretried():
    async def fetch() -> None: ...

    def shards():
        yield 1

    with pytest.raises(TypeError, match="fetch is async"):
        retry(fetch)
    with pytest.raises(TypeError, match="shards is a generator function"):
        retry(attempts=2)(shards)


def test_the_last_error_is_the_original_with_a_note_of_the_attempts():
    original = ConnectionError("refused")
    fn, calls = failing(original, 10)
    wrapped = retry(attempts=3, sleep=lambda _s: None)(fn)
    with pytest.raises(ConnectionError) as info:
        wrapped()
    assert info.value is original and len(calls) == 3
    notes = info.value.__notes__
    assert len(notes) == 1 and notes[0].startswith("corral.sdk.retry: ")
    assert notes[0].endswith(".fn failed 3 times; this is the last error")


def test_an_error_raised_at_once_gets_no_note():
    fn, calls = failing(ValueError("bad"), 1)
    with pytest.raises(ValueError) as info:
        retry(sleep=lambda _s: None)(fn)()
    assert len(calls) == 1 and not getattr(info.value, "__notes__", None)
