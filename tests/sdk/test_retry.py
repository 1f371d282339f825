from __future__ import annotations

import logging
import random
import subprocess
import sys

import pytest

from corral.sdk import retry
from corral.sdk.retrying import backoff_delay


class Flaky:
    def __init__(self, failures: int, exc: BaseException = OSError("disk hiccup")):
        self.failures = failures
        self.exc = exc
        self.calls = 0

    def __call__(self, value: int) -> int:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.exc
        return value * 2


def test_retries_transient_errors_with_exponential_backoff_without_sleeping():
    sleeps: list[float] = []
    flaky = Flaky(failures=3)
    fn = retry(attempts=5, base=0.5, jitter=False, sleep=sleeps.append)(flaky)
    assert fn(21) == 42
    assert flaky.calls == 4
    assert sleeps == [0.5, 1.0, 2.0]


def test_gives_up_after_attempts_and_raises_the_last_error():
    sleeps: list[float] = []
    flaky = Flaky(failures=10, exc=ConnectionError("refused"))
    fn = retry(attempts=3, jitter=False, sleep=sleeps.append)(flaky)
    with pytest.raises(ConnectionError, match="refused"):
        fn(1)
    assert flaky.calls == 3
    assert len(sleeps) == 2


def test_other_errors_are_not_retried():
    sleeps: list[float] = []
    flaky = Flaky(failures=1, exc=ValueError("bad input"))
    fn = retry(sleep=sleeps.append)(flaky)
    with pytest.raises(ValueError):
        fn(1)
    assert flaky.calls == 1 and sleeps == []


def test_the_delay_is_capped_at_max_delay():
    sleeps: list[float] = []
    fn = retry(attempts=8, base=1, max_delay=10, jitter=False, sleep=sleeps.append)(
        Flaky(failures=7)
    )
    fn(1)
    assert sleeps == [1, 2, 4, 8, 10, 10, 10]


def test_jitter_draws_each_delay_from_the_upper_half_of_the_backoff():
    sleeps: list[float] = []
    fn = retry(attempts=6, base=1, jitter=True, sleep=sleeps.append, rng=random.Random(3))(
        Flaky(failures=5)
    )
    fn(1)
    expected = [1, 2, 4, 8, 16]
    assert all(d / 2 <= s <= d for s, d in zip(sleeps, expected, strict=True))
    assert sleeps != expected


def test_only_the_given_exception_types_are_retried():
    sleeps: list[float] = []
    flaky = Flaky(failures=2, exc=KeyError("x"))
    fn = retry(on=KeyError, jitter=False, sleep=sleeps.append)(flaky)
    assert fn(2) == 4
    assert sleeps == [0.5, 1.0]


def test_each_retry_is_logged(caplog):
    caplog.set_level(logging.WARNING, logger="corral.sdk.retry")
    fn = retry(attempts=4, jitter=False, sleep=lambda s: None)(Flaky(failures=2))
    fn(1)
    messages = [r.getMessage() for r in caplog.records if r.name == "corral.sdk.retry"]
    assert len(messages) == 2
    assert "attempt 1/4" in messages[0] and "OSError" in messages[0]
    assert "retrying in 1.00s" in messages[1]


def test_works_as_a_bare_decorator_and_keeps_the_name():
    @retry
    def load() -> str:
        return "ok"

    assert load() == "ok" and load.__name__ == "load"


def test_backoff_delay_grows_exponentially():
    assert [backoff_delay(n, base=0.5, max_delay=30, jitter=False) for n in (1, 2, 3)] == [
        0.5,
        1.0,
        2.0,
    ]


def test_bad_arguments_are_value_errors():
    with pytest.raises(ValueError):
        retry(attempts=0)


def test_decorator_from_the_package_works_after_the_module_was_imported_by_name():
    code = (
        "import corral.sdk.retrying, corral.sdk.preflight_checks\n"
        "from corral.sdk import retry, preflight\n"
        "@retry(attempts=2, sleep=lambda s: None)\n"
        "def f():\n"
        "    return 5\n"
        "assert f() == 5\n"
        "r = preflight(show=False)\n"
        "assert r.ok and r.checks == []\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


@pytest.mark.parametrize(
    "exc",
    [
        FileNotFoundError(2, "No such file", "data/x"),
        PermissionError(13, "Permission denied", "data/x"),
        IsADirectoryError(21, "Is a directory", "data"),
        NotADirectoryError(20, "Not a directory", "data/x/y"),
    ],
)
def test_oserrors_that_are_not_transient_are_not_retried_by_default(exc):
    sleeps: list[float] = []
    flaky = Flaky(failures=1, exc=exc)
    with pytest.raises(type(exc)):
        retry(sleep=sleeps.append)(flaky)(1)
    assert flaky.calls == 1 and sleeps == []


def test_a_not_transient_error_named_in_on_is_retried_and_not_on_can_be_set():
    sleeps: list[float] = []
    waiting = Flaky(failures=2, exc=FileNotFoundError(2, "not yet", "done.flag"))
    assert retry(on=FileNotFoundError, jitter=False, sleep=sleeps.append)(waiting)(2) == 4
    assert waiting.calls == 3
    flaky = Flaky(failures=1, exc=PermissionError(13, "denied"))
    assert retry(not_on=(), sleep=sleeps.append)(flaky)(1) == 2  # nothing excluded
    refused = Flaky(failures=1, exc=ConnectionRefusedError("refused"))
    with pytest.raises(ConnectionRefusedError):
        retry(not_on=ConnectionRefusedError, sleep=sleeps.append)(refused)(1)


# Retry edge cases found in review: ``on=`` as a list, async and generator functions, and the note
# on the error that is finally raised. No test sleeps for real.


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
