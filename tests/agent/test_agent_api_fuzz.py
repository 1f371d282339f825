"""A property-based fuzz of the agent's HTTP API over a real socket: methods, paths, query
strings, headers, bodies, ``Content-Length`` values and tokens. Every request gets a JSON
answer with the right status within a time bound, never a 5xx, never the token.

Bounded (``MAX_EXAMPLES`` requests, a deadline each; ``BODY_TIMEOUT`` lowered so that bodies
that never arrive cost little); prints one line of counts."""

from __future__ import annotations

import string
from collections import Counter
from dataclasses import dataclass
from urllib.parse import quote, urlencode, urlsplit

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from corral.agent import server

from .helpers import TOKEN, make_plan
from .rawhttp import NoAnswer, exchange, request_bytes

MAX_EXAMPLES = 200
BODY_TIMEOUT = 0.3
ANSWER_BOUND = 2.0  # seconds for any answer (BODY_TIMEOUT included)

KNOWN_PATHS = ["/health", "/ready", "/status", "/events", "/logs", "/stop", "/"]
KNOWN_PATHS += ["/artifacts/results.tar.gz", "/artifacts/../etc.tar.gz", "/artifacts/"]
METHODS = ["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "HEAD", "CONNECT"]
#: headers the fuzz sets on purpose, never at random
CONTROLLED = {"authorization", "content-length", "transfer-encoding", "expect", "connection"}
PRINTABLE = "".join(c for c in string.printable if not c.isspace())


@dataclass(frozen=True)
class Fuzzed:
    method: str
    target: str
    token: str | None
    headers: dict[str, str]
    body: bytes
    length: str | None  # the Content-Length header as sent (None: none)

    def length_kind(self) -> str:
        """``none``, ``bad`` (not a length the agent reads), ``short`` (more than the body
        sent) or ``ok``."""
        if self.length is None:
            return "none"
        raw = self.length.strip()
        if not (raw.isascii() and raw.isdigit()) or int(raw) > server.MAX_BODY:
            return "bad"
        return "short" if int(raw) > len(self.body) else "ok"


methods = st.one_of(
    st.sampled_from(METHODS), st.text(string.ascii_uppercase, min_size=1, max_size=12)
)
paths = st.one_of(
    st.sampled_from(KNOWN_PATHS),
    st.text(PRINTABLE, max_size=40).map(lambda p: "/" + p),
    st.text(max_size=20).map(lambda p: "/" + quote(p)),
)
query_values = st.one_of(
    st.integers(-(2**70), 2**70).map(str),
    st.text(max_size=12),
    st.sampled_from(["", "train", "main", "setup", "1e3", "0x10", "٣"]),
)
queries = st.dictionaries(
    st.sampled_from(["after", "limit", "stage", "offset", "x", ""]), query_values, max_size=4
)
tokens = st.sampled_from(["valid"] * 6 + ["odd", "random"]).flatmap(
    lambda kind: {
        "valid": st.sampled_from([TOKEN, f" {TOKEN} "]),
        "odd": st.sampled_from([None, "", "wrong", TOKEN + "x", TOKEN[:-1]]),
        "random": st.text(PRINTABLE, max_size=30),
    }[kind]
)
header_names = st.text(string.ascii_letters + "-", min_size=1, max_size=20).filter(
    lambda n: n.lower() not in CONTROLLED
)
headers = st.dictionaries(header_names, st.text(PRINTABLE + " ", max_size=60), max_size=5)
bodies = st.one_of(
    st.just(b""),
    st.binary(max_size=300),
    st.sampled_from([b"{}", b'{"cause": "budget"}', b'{"cause": 5, "reason": []}', b"[1]"]),
    st.dictionaries(st.text(max_size=8), st.text(max_size=20), max_size=3).map(
        lambda d: repr(d).replace("'", '"').encode()
    ),
)


@st.composite
def requests(draw: st.DrawFn) -> Fuzzed:
    body = draw(bodies)
    kind = draw(st.sampled_from(["exact"] * 5 + ["none"] * 2 + ["short", "huge", "junk"]))
    length = draw(
        {
            "exact": st.just(str(len(body))),
            "none": st.none(),
            "short": st.integers(len(body) + 1, len(body) + 5000).map(str),  # never all sent
            "huge": st.integers(server.MAX_BODY + 1, 2**80).map(str),
            "junk": st.sampled_from(["-1", "abc", " ", "1.5", "0x10", "+5", "٣"]),
        }[kind]
    )
    if length is None:
        body = b""  # without a length the rest would be the next request, not a body
    query = draw(queries)
    target = draw(paths) + ("?" + urlencode(query) if query else "")
    return Fuzzed(draw(methods), target, draw(tokens), draw(headers), body, length)


def expected(req: Fuzzed, authorized: bool) -> set[int]:
    """The statuses the agent may answer (docs/agent.md, "HTTP API")."""
    kind = req.length_kind()
    if kind == "bad":
        return {400}
    path = urlsplit(req.target).path
    probe = path in ("/health", "/ready") and req.method in ("GET", "HEAD")
    if req.method not in ("GET", "POST") and not probe:
        return {405}
    if probe and not authorized:
        return {200, 503}  # a platform's probe: no token needed, no body read
    if not authorized:
        return {401}
    if kind == "short":
        return {400}
    return {200, 202, 400, 404, 405, 503}


def _authorized(token: str | None) -> bool:
    return token is not None and token.strip() == TOKEN


@pytest.mark.timeout(120)
def test_any_request_gets_a_json_answer_with_the_right_status_in_time(
    tmp_path, start_agent, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(server, "BODY_TIMEOUT", BODY_TIMEOUT)
    client = start_agent(make_plan(tmp_path, [{"name": "train", "run": "sleep 60"}]))
    port = int(client.url.rsplit(":", 1)[1])
    counts: Counter[str] = Counter()

    @settings(
        max_examples=MAX_EXAMPLES,
        deadline=(ANSWER_BOUND + 1) * 1000,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        database=None,
    )
    @given(requests())
    def one(req: Fuzzed) -> None:
        counts["inputs"] += 1
        raw = request_bytes(
            req.method,
            req.target,
            token=req.token,
            headers=req.headers,
            body=req.body,
            content_length=req.length,
        )
        try:
            answer = exchange(port, raw, timeout=ANSWER_BOUND, head_only=req.method == "HEAD")
        except NoAnswer:
            counts["hangs"] += 1
            raise
        counts[f"{answer.status}"] += 1
        if answer.status >= 500 and answer.status != 503:
            counts["5xx"] += 1
        if b"Traceback" in answer.body or b"internal error" in answer.body:
            counts["tracebacks"] += 1
        assert answer.status < 500 or answer.status == 503, (req, answer)
        assert answer.seconds < ANSWER_BOUND, (req, answer.seconds)
        assert answer.status in expected(req, _authorized(req.token)), (req, answer)
        assert answer.headers.get("content-type") == "application/json", (req, answer)
        if req.method != "HEAD":
            body = answer.json()
            assert isinstance(body, dict), (req, body)
            if answer.status >= 400 and answer.status != 503:
                assert isinstance(body.get("error"), str) and "\n" not in body["error"]
        assert TOKEN.encode() not in answer.body

    try:
        one()
    finally:
        # a handler that raised past _dispatch prints its traceback (socketserver.handle_error)
        counts["tracebacks"] += capsys.readouterr().err.count("Traceback")
        statuses = " ".join(f"{k}:{v}" for k, v in sorted(counts.items()) if k.isdigit())
        print(
            f"agent API fuzz: {counts['inputs']} inputs, {counts['5xx']} 5xx, "
            f"{counts['hangs']} hangs, {counts['tracebacks']} tracebacks; statuses {statuses}"
        )
    assert counts["tracebacks"] == 0
    assert client.get("/health")["ok"] is True  # still serving
