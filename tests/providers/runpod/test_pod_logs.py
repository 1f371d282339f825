"""A pod's log from REST v2's Server-Sent Events stream (``GET /v2/pods/{id}/logs``), read from
the fake server's pods, whose "containers" really print: the last lines, a stream that never
ends read for a bounded time, and what the contract leaves open (keep-alive comments, data
that is not JSON, other sources, a cut stream, 404 before the container starts, answers that
are not event streams, HTML error pages)."""

from __future__ import annotations

import re
import time
import uuid

import pytest

from corral.errors import AuthFailed, NotFound, ProviderError, ProviderUnavailable, RateLimited
from corral.providers.base import Instance, SupportsLogs
from corral.providers.runpod import RunPodProvider
from support.waiting import wait_until

from ..contract import new_key
from .fake_server import API_KEY, FakeRunPod
from .helpers import bootstrap, offer

_TS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ ")


def _pod(provider: RunPodProvider, fake: FakeRunPod, script: str, *, started: bool = True):
    """A pod whose container runs ``script`` (the fake's pods run their start command here)."""
    pod = fake.cloud.create(
        name=f"corral-logs-{uuid.uuid4().hex[:8]}",
        image="x",
        gpu_ids=["NVIDIA L40S"],
        count=1,
        cloud="SECURE",
        interruptible=False,
        env={},
        ports=[],
        argv=["bash", "-c", script],
    )
    if started:
        wait_until(fake.cloud.log_path(pod.id).exists, message="the container to start")
    inst = Instance(
        provider="runpod", instance_id=pod.id, key="k", offer=offer(provider, spot=False)
    )
    return pod, inst


def _text(lines: str) -> list[str]:
    """The lines without the timestamps RunPod sends with each."""
    return [_TS.sub("", line) for line in lines.splitlines()]


def _printed(fake: FakeRunPod, pod_id: str, text: str) -> bool:
    path = fake.cloud.log_path(pod_id)
    return path.exists() and text in path.read_text()


def test_runpod_keeps_pod_logs() -> None:
    assert issubclass(RunPodProvider, SupportsLogs)
    assert "SupportsLogs" not in RunPodProvider.unsupported


def test_the_last_lines_of_a_stream_that_never_ends_come_back_in_bounded_time(make_provider, fake):
    p = make_provider(log_read_s=1.0)
    fake.logs.keepalive_s = 0.1  # keep-alives all along: the stream is never silent
    pod, inst = _pod(p, fake, 'for i in $(seq 1 300); do echo "line $i"; done; sleep 60')
    wait_until(lambda: _printed(fake, pod.id, "line 300\n"), message="the container's output")
    started = time.monotonic()
    text = p.logs(inst, tail=5)
    took = time.monotonic() - started
    assert _text(text) == [f"line {i}" for i in range(296, 301)]
    assert all(_TS.match(line) for line in text.splitlines())  # RunPod's ts, shown first
    assert took < 2.5, took  # the fake holds the stream open for 30 s
    assert fake.routes("GET /v2/pods/") == [f"GET /v2/pods/{pod.id}/logs"]


def test_a_silent_stream_is_read_for_log_read_s_at_most(make_provider, fake):
    p = make_provider(log_read_s=0.8)
    fake.logs.keepalive_s = 60.0  # nothing at all after the first lines
    pod, inst = _pod(p, fake, "echo only; sleep 60")
    wait_until(lambda: _printed(fake, pod.id, "only\n"), message="the container's output")
    started = time.monotonic()
    assert _text(p.logs(inst)) == ["only"]
    assert time.monotonic() - started < 2.0


def test_a_stream_that_sends_all_along_but_never_ends_a_line_is_read_in_bounded_time(
    make_provider, fake
):
    p = make_provider(log_read_s=1.0)
    fake.logs.drip = b"x"
    pod, inst = _pod(p, fake, "echo printed; sleep 60")
    wait_until(lambda: _printed(fake, pod.id, "printed\n"), message="the container's output")
    started = time.monotonic()
    assert _text(p.logs(inst)) == ["printed"]  # the unfinished line is no event
    assert time.monotonic() - started < 2.5


def test_lines_printed_while_the_stream_is_read_are_followed(make_provider, fake):
    p = make_provider(log_read_s=3.0)
    pod, inst = _pod(p, fake, "echo first; sleep 1; echo second; sleep 60")
    wait_until(lambda: _printed(fake, pod.id, "first\n"), message="the first line")
    assert _text(p.logs(inst)) == ["first", "second"]


@pytest.mark.parametrize("newline", [b"\n", b"\r\n", b"\r"], ids=["lf", "crlf", "cr"])
def test_every_line_end_the_standard_allows_is_read(make_provider, fake, newline):
    p = make_provider(log_read_s=0.5)
    fake.logs.newline = newline
    pod, inst = _pod(p, fake, "echo a; echo b; sleep 60")
    wait_until(lambda: _printed(fake, pod.id, "b\n"), message="the container's output")
    assert _text(p.logs(inst)) == ["a", "b"]


def test_what_the_contract_leaves_open_is_read_defensively(make_provider, fake):
    p = make_provider(log_read_s=2.0)
    fake.logs.noise = [
        b": a comment between events\n\n",
        b"data: not json at all\n\n",
        b"event: ping\ndata: {}\n\n",  # no line: a heartbeat
        b'data: {"source": "system", "line": "pulling image", "ts": "2026-11-26T00:00:00Z"}\n\n',
        b'data: {"source": "container",\ndata:  "line": "over two data lines"}\n\n',
        b'data: {"line": "one\\ntwo"}\n\n',
        b'id: 7\nretry: 1000\nbogus field\ndata:{"line":"no space after the colon"}\n\n',
        b'data: "a bare string"\n\n',
        b"data: [1, 2]\n\n",  # JSON, but no log entry
        b'data: {"line": "' + b"x" * 5000 + b'"}\n\n',
        b'data: {"line": "' + b"y" * 20000 + b'"}\n\n',  # past what a line may hold
        b"data: after the long one\r\n\r\n",
        b'data: {"line": "the stream is cut before this event ends"}\n',
    ]
    fake.logs.cut = True  # and the connection drops there, mid-stream
    pod, inst = _pod(p, fake, "echo printed; sleep 60")
    wait_until(lambda: _printed(fake, pod.id, "printed\n"), message="the container's output")
    started = time.monotonic()
    lines = _text(p.logs(inst))
    assert time.monotonic() - started < 1.5  # the cut ends the read: no waiting for more
    assert lines == [
        "printed",
        "not json at all",
        "[system] pulling image",
        "over two data lines",
        "one",
        "two",
        "no space after the colon",
        "a bare string",
        "x" * 4096 + " [cut]",
        '{"line": "' + "y" * 4086 + " [cut]",  # the JSON cut: shown as it came, cut again
        "after the long one",
        "the stream is cut before this event ends",
    ]


def test_the_api_keys_a_pod_prints_are_masked(make_provider, fake):
    """The pod's own key (RunPod's RUNPOD_API_KEY in the pod, which corral never knows) and the
    account's."""
    p = make_provider(log_read_s=0.5)
    pod, inst = _pod(p, fake, f'echo "my key is $RUNPOD_API_KEY, and {API_KEY}"; sleep 60')
    pod_key = fake.pod_key(pod.id)
    wait_until(lambda: _printed(fake, pod.id, pod_key), message="the container's output")
    text = p.logs(inst)
    assert _text(text) == ["my key is ***, and ***"]
    assert API_KEY not in text and pod_key not in text


@pytest.mark.parametrize("before_start", ["404", "empty stream"])
def test_a_pod_whose_container_has_not_started_has_no_log_yet(make_provider, fake, before_start):
    p = make_provider(log_read_s=0.5)
    fake.cloud.boot_delay = 60.0
    fake.rest.log_404_before_start = before_start == "404"
    _, inst = _pod(p, fake, "echo never", started=False)
    assert p.logs(inst) == ""
    status = 404 if before_start == "404" else 200
    assert [s.status for s in fake.seen if s.route.endswith("/logs")] == [status]


def test_a_terminated_pod_has_no_log_any_more(make_provider, fake):
    p = make_provider(log_read_s=0.5)
    pod, inst = _pod(p, fake, "echo bye; sleep 60")
    fake.cloud.delete(pod.id)
    with pytest.raises(NotFound, match="keeps a pod's log only while the pod exists"):
        p.logs(inst)


HTML = b"<!DOCTYPE html><html><head><title>502 Bad Gateway</title></head><body>cf</body></html>"


@pytest.mark.parametrize(
    ("status", "body", "error", "message"),
    [
        (502, HTML, ProviderUnavailable, r"HTTP 502: an HTML error page \(502 Bad Gateway\)"),
        (401, None, AuthFailed, "HTTP 401"),
        (429, None, RateLimited, "rate limit exceeded"),
        (200, HTML, ProviderError, r"answered with an HTML error page \(502 Bad Gateway\)"),
    ],
    ids=["html-502", "401", "429", "html-200"],
)
def test_errors_are_typed_one_liners(make_provider, fake, status, body, error, message):
    # (an error answers at once: the bound only keeps a loaded machine's slow answer from
    # being read as a timeout, as 0.5 s once was in CI)
    p = make_provider(log_read_s=5.0)
    _, inst = _pod(p, fake, "sleep 60")
    fake.fail("GET /v2/pods/*/logs", status, body=body, retry_after=1 if status == 429 else None)
    with pytest.raises(error, match=message) as caught:
        p.logs(inst)
    shown = str(caught.value)
    assert "\n" not in shown and "<html" not in shown.lower() and API_KEY not in shown
    assert len(fake.routes("GET /v2/pods/")) == 1  # a log read is never retried


def test_an_answer_that_is_json_not_a_stream_is_read_for_entries(make_provider, fake):
    p = make_provider(log_read_s=0.5)
    _, inst = _pod(p, fake, "sleep 60")
    entries = {"logs": [{"source": "container", "line": "from json"}, {"line": "too"}]}
    fake.fail("GET /v2/pods/*/logs", 200, body=entries)
    assert p.logs(inst) == "from json\ntoo"


def test_a_launched_pods_log_is_what_corrals_bootstrap_and_agent_printed(
    make_provider, fake, tmp_path
):
    p = make_provider(log_read_s=1.0)
    key = new_key()
    inst = p.launch(offer(p, spot=False), bootstrap(tmp_path / "work", key), key)

    def served() -> str | None:
        text = p.logs(inst, tail=50)
        return text if "corral agent: serving on http://" in text else None

    text = wait_until(served, timeout=30, message="the agent's first line in the pod's log")
    printed = fake.cloud.log_path(inst.instance_id).read_text().splitlines()
    assert _text(text) == printed[-50:]  # what the container printed, as it printed it
    p.terminate(inst)
