"""The provider HTTP helper against httpx.MockTransport: no network, no real sleeping."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime
from email.utils import format_datetime

import httpx
import pytest

from corral import __version__
from corral.errors import (
    AuthFailed,
    NoCapacity,
    ProviderError,
    ProviderUnavailable,
    QuotaExceeded,
    RateLimited,
)
from corral.providers.http import (
    USER_AGENT,
    ProviderHTTP,
    ResourceNotFound,
    RetryPolicy,
    TokenBucket,
    error_for,
    parse_retry_after,
    payload_message,
    scrub,
)

KEY = "rpa_SECRETKEY0123456789"
NOW = 1_800_000_000.0


class FakeTime:
    """A monotonic clock that only moves when someone sleeps."""

    def __init__(self) -> None:
        self.t = 100.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.t += seconds


def make(handler, *, retry: RetryPolicy | None = None, rate: float | None = None, **kw):
    fake = FakeTime()
    http = ProviderHTTP(
        "runpod",
        "https://rest.example.test/v1",
        client=httpx.Client(transport=httpx.MockTransport(handler)),
        token=KEY,
        retry=retry or RetryPolicy(max_attempts=4, base_delay=1.0, max_delay=8.0),
        rate=rate,
        sleep=fake.sleep,
        clock=fake.clock,
        now=lambda: NOW,
        rng=random.Random(1),
        **kw,
    )
    return http, fake


def answers(*responses):
    """A handler giving ``responses`` in order (an exception instance is raised), recording
    every request it saw."""
    seen: list[httpx.Request] = []
    queue = list(responses)

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        item = queue.pop(0) if len(queue) > 1 else queue[0]
        if isinstance(item, Exception):
            raise item
        return item

    return handler, seen


def test_every_request_sends_corral_user_agent_and_bearer_token():
    handler, seen = answers(httpx.Response(200, json={"id": "p1"}))
    http, _ = make(handler)
    assert http.get_json("/pods/p1") == {"id": "p1"}
    assert seen[0].headers["User-Agent"] == f"corral/{__version__}" == USER_AGENT
    assert seen[0].headers["Authorization"] == f"Bearer {KEY}"
    assert str(seen[0].url) == "https://rest.example.test/v1/pods/p1"


def test_request_timeout_comes_from_the_policy():
    handler, seen = answers(httpx.Response(200, json={}))
    http, _ = make(handler, retry=RetryPolicy(timeout=7.5))
    http.get_json("/pods")
    assert seen[0].extensions["timeout"] == {"connect": 7.5, "read": 7.5, "write": 7.5, "pool": 7.5}


def test_get_retries_5xx_with_exponential_backoff_then_succeeds():
    handler, seen = answers(
        httpx.Response(503), httpx.Response(502), httpx.Response(200, json=[{"id": "a"}])
    )
    http, fake = make(handler)
    assert http.get_json("/pods") == [{"id": "a"}]
    assert len(seen) == 3
    # base 1 s then 2 s, each times a jitter factor in [0.5, 1]
    assert 0.5 <= fake.sleeps[0] <= 1.0 and 1.0 <= fake.sleeps[1] <= 2.0


def test_backoff_is_capped_at_max_delay():
    policy = RetryPolicy(base_delay=1.0, max_delay=8.0)
    rng = random.Random(0)
    assert all(policy.delay(n, rng) <= 8.0 for n in range(1, 30))
    assert policy.delay(10, random.Random(0)) >= 4.0


def test_get_gives_up_after_max_attempts_with_provider_unavailable():
    handler, seen = answers(httpx.Response(500, json={"message": "boom"}))
    http, fake = make(handler)
    with pytest.raises(ProviderUnavailable, match=r"runpod: GET /v1/pods HTTP 500: boom"):
        http.get_json("/pods")
    assert len(seen) == 4 and len(fake.sleeps) == 3


def test_connect_errors_are_retried_even_for_a_create():
    handler, seen = answers(httpx.ConnectError("refused"), httpx.Response(201, json={"id": "new"}))
    http, _ = make(handler)
    assert http.post_json("/pods", {"name": "job"}) == {"id": "new"}
    assert len(seen) == 2


def test_read_timeout_on_a_create_is_not_retried_it_may_have_created_a_machine():
    handler, seen = answers(httpx.ReadTimeout("slow"), httpx.Response(201, json={"id": "x"}))
    http, fake = make(handler)
    with pytest.raises(ProviderUnavailable, match="ReadTimeout"):
        http.post_json("/pods", {"name": "job"})
    assert len(seen) == 1 and fake.sleeps == []


def test_5xx_on_a_create_is_not_retried_but_a_429_is():
    handler, seen = answers(httpx.Response(500, json={"message": "oops"}))
    http, _ = make(handler)
    with pytest.raises(ProviderUnavailable):
        http.post_json("/pods", {"name": "job"})
    assert len(seen) == 1

    handler, seen = answers(
        httpx.Response(429, headers={"Retry-After": "3"}), httpx.Response(201, json={"id": "y"})
    )
    http, fake = make(handler)
    assert http.post_json("/pods", {"name": "job"}) == {"id": "y"}
    assert len(seen) == 2 and fake.sleeps[-1] >= 3.0


def test_read_timeout_on_a_get_is_retried():
    handler, seen = answers(httpx.ReadTimeout("slow"), httpx.Response(200, json={"ok": 1}))
    http, _ = make(handler)
    assert http.get_json("/pods/a") == {"ok": 1}
    assert len(seen) == 2


def test_post_marked_idempotent_is_retried_on_5xx():
    handler, seen = answers(httpx.Response(502), httpx.Response(200, json={"data": {"a": 1}}))
    http, _ = make(handler)
    assert http.graphql("query { a }", idempotent=True) == {"a": 1}
    assert len(seen) == 2


def test_retry_after_in_seconds_is_waited_for():
    handler, _ = answers(
        httpx.Response(429, headers={"Retry-After": "12"}), httpx.Response(200, json={})
    )
    http, fake = make(handler)
    http.get_json("/pods")
    assert fake.sleeps == [12.0]


def test_retry_after_as_http_date_is_waited_for():
    when = format_datetime(datetime.fromtimestamp(NOW + 20, tz=UTC), usegmt=True)
    handler, _ = answers(
        httpx.Response(503, headers={"Retry-After": when}), httpx.Response(200, json={})
    )
    http, fake = make(handler)
    http.get_json("/pods")
    assert fake.sleeps == [pytest.approx(20.0)]


def test_retry_after_longer_than_the_policy_allows_raises_rate_limited_at_once():
    handler, seen = answers(httpx.Response(429, headers={"Retry-After": "3600"}))
    http, fake = make(handler)
    with pytest.raises(RateLimited) as info:
        http.get_json("/pods")
    assert info.value.retry_after == 3600.0
    assert len(seen) == 1 and fake.sleeps == []


def test_persistent_429_ends_in_rate_limited_with_retry_after():
    handler, seen = answers(httpx.Response(429, headers={"Retry-After": "2"}))
    http, _ = make(handler)
    with pytest.raises(RateLimited) as info:
        http.get_json("/pods")
    assert info.value.retry_after == 2.0 and len(seen) == 4


def test_parse_retry_after_reads_seconds_dates_and_rejects_garbage():
    assert parse_retry_after("5", NOW) == 5.0
    assert parse_retry_after(" 1.5 ", NOW) == 1.5
    past = format_datetime(datetime.fromtimestamp(NOW - 100, tz=UTC), usegmt=True)
    assert parse_retry_after(past, NOW) == 0.0
    assert parse_retry_after("soon", NOW) is None
    assert parse_retry_after(None, NOW) is None


def test_token_bucket_spaces_requests_beyond_the_burst():
    handler, seen = answers(httpx.Response(200, json={}))
    http, fake = make(handler, rate=2.0, burst=2)
    for _ in range(6):
        http.get_json("/pods")
    assert len(seen) == 6
    # two at once, then one every 0.5 s
    assert sum(fake.sleeps) == pytest.approx(2.0)


def test_token_bucket_refills_with_time_and_never_exceeds_its_burst():
    fake = FakeTime()
    bucket = TokenBucket(1.0, 3, clock=fake.clock, sleep=fake.sleep)
    fake.t += 100  # a long idle time still allows only `burst` at once
    assert [bucket.acquire() for _ in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.acquire() == pytest.approx(1.0)


def test_a_429_holds_off_every_request_of_the_client():
    fake = FakeTime()
    bucket = TokenBucket(100.0, 100, clock=fake.clock, sleep=fake.sleep)
    bucket.hold_off(5.0)
    assert bucket.acquire() == pytest.approx(5.0)
    assert bucket.acquire() == 0.0


@pytest.mark.parametrize(
    ("status", "body", "expected"),
    [
        (401, {"message": "invalid api key"}, AuthFailed),
        (403, {"title": "Forbidden", "detail": "pool not accessible"}, AuthFailed),
        (402, {"detail": "insufficient balance"}, QuotaExceeded),
        (400, {"message": "You have exceeded your GPU quota"}, QuotaExceeded),
        (409, {"detail": "conflict"}, NoCapacity),
        (
            400,
            {
                "message": "There are no longer any instances available with the requested "
                "specifications. Please refresh and try again."
            },
            NoCapacity,
        ),
        (500, "Server.InsufficientInstanceCapacity: insufficient capacity", NoCapacity),
        (503, "<html>bad gateway</html>", ProviderUnavailable),
        (404, {"title": "Not Found", "status": 404, "detail": "pod not found"}, ResourceNotFound),
        (
            422,
            {"title": "Unprocessable", "errors": ["$: additional properties 'x'"]},
            ProviderError,
        ),
    ],
)
def test_statuses_and_payloads_map_to_typed_errors(status, body, expected):
    content = json.dumps(body).encode() if isinstance(body, dict) else body.encode()
    handler, _ = answers(httpx.Response(status, content=content))
    http, _ = make(handler, retry=RetryPolicy(max_attempts=1))
    with pytest.raises(expected) as info:
        http.request("DELETE", "/pods/p1")
    assert type(info.value) is expected
    assert info.value.fields["status"] == status


def test_cdn_1010_rejection_is_not_reported_as_bad_credentials():
    handler, _ = answers(httpx.Response(403, text="error code: 1010"))
    http, _ = make(handler, retry=RetryPolicy(max_attempts=1))
    with pytest.raises(ProviderError, match="User-Agent") as info:
        http.get_json("/pods")
    assert not isinstance(info.value, AuthFailed)


def test_allowed_status_is_returned_for_the_caller_to_decide():
    handler, _ = answers(httpx.Response(404, json={"message": "pod not found"}))
    http, _ = make(handler)
    assert http.request("GET", "/pods/gone", allow=(404,)).status_code == 404


def test_graphql_errors_in_a_200_raise_typed_errors():
    cases = [
        ({"message": "pod not found to terminate"}, ResourceNotFound),
        ({"message": "x", "extensions": {"code": "UNAUTHENTICATED"}}, AuthFailed),
        (
            {"message": "Something broke", "extensions": {"code": "INTERNAL_SERVER_ERROR"}},
            ProviderUnavailable,
        ),
        ({"message": "There are no longer any instances available"}, NoCapacity),
    ]
    for error, expected in cases:
        handler, seen = answers(httpx.Response(200, json={"errors": [error], "data": None}))
        http, _ = make(handler)
        with pytest.raises(expected):
            http.graphql('mutation { podTerminate(input: {podId: "x"}) }', path="/graphql")
        assert len(seen) == 1  # a mutation is not repeated


def test_graphql_returns_data_and_sends_variables():
    handler, seen = answers(httpx.Response(200, json={"data": {"pod": {"id": "p"}}}))
    http, _ = make(handler)
    assert http.graphql("query($id: String)", {"id": "p"}, path="/graphql") == {"pod": {"id": "p"}}
    assert json.loads(seen[0].content) == {"query": "query($id: String)", "variables": {"id": "p"}}


def test_errors_never_contain_the_key_the_auth_header_or_query_secrets():
    echo = f"bad request Authorization: Bearer {KEY} api_key={KEY}&x=1 other=ghp_tok1234"
    handler, _ = answers(httpx.Response(400, json={"message": echo, "token": "zzzzzz"}))
    http, _ = make(handler, secrets=["ghp_tok1234"])
    with pytest.raises(ProviderError) as info:
        http.request("GET", "/pods?api_key=QUERYSECRET99", params={"token": "PARAMSECRET99"})
    text = str(info.value) + json.dumps(info.value.to_dict())
    for secret in (KEY, "QUERYSECRET99", "PARAMSECRET99", "ghp_tok1234"):
        assert secret not in text
    assert "GET /v1/pods" in text


def test_transport_errors_say_what_failed_without_the_url_query():
    handler, _ = answers(httpx.ConnectError("refused"))
    http, _ = make(handler)
    with pytest.raises(ProviderUnavailable) as info:
        http.get_json("/pods?api_key=QUERYSECRET99")
    assert "QUERYSECRET99" not in str(info.value) and "cannot connect" in str(info.value)
    assert info.value.__cause__ is None and info.value.__context__ is None


def test_retry_log_lines_hold_no_secret(caplog):
    handler, _ = answers(httpx.Response(503), httpx.Response(200, json={}))
    http, _ = make(handler)
    with caplog.at_level("DEBUG", logger="corral.providers.http"):
        http.get_json("/pods?api_key=QUERYSECRET99")
    assert caplog.records and all(
        "QUERYSECRET99" not in r.getMessage() and KEY not in r.getMessage() for r in caplog.records
    )


def test_scrub_removes_known_values_and_credential_shapes():
    text = 'Bearer abc.def-123 "api_key": "k-9999" password=hunter22 see VALUE1234'
    out = scrub(text, ["VALUE1234"])
    assert "abc.def-123" not in out and "k-9999" not in out and "hunter22" not in out
    assert "VALUE1234" not in out and out.count("***") == 4


def test_payload_message_reads_common_error_shapes():
    assert payload_message(b'{"message": "m1"}') == ("m1", "")
    assert payload_message({"title": "Bad", "detail": "d", "status": 400}) == ("d", "Bad")
    assert payload_message({"errors": [{"message": "g", "extensions": {"code": "C"}}]}) == (
        "g",
        "C",
    )
    assert payload_message({"error": {"message": "nested", "code": "E1"}}) == ("nested", "E1")
    assert payload_message(b"plain text") == ("plain text", "")
    fastapi = {
        "detail": [{"loc": ["body", "traffic_port"], "msg": "Field required", "type": "missing"}]
    }
    assert payload_message(fastapi) == ("body.traffic_port: Field required", "missing")


def test_error_for_keeps_messages_to_one_short_line():
    err = error_for("aws", 500, "line one\nline two " + "x" * 500, what="GET /")
    assert "\n" not in str(err) and len(str(err)) < 300


def test_client_created_by_the_helper_is_closed_with_it_and_injected_one_is_not():
    client = httpx.Client(transport=httpx.MockTransport(lambda r: httpx.Response(200)))
    with ProviderHTTP("x", client=client):
        pass
    assert not client.is_closed
    own = ProviderHTTP("x")
    own.close()
    assert own._client.is_closed


HTML_502 = (
    b"<!DOCTYPE html>\n<html><head><title>502 Bad Gateway</title>"
    b"<style>body{}</style></head><body><h1>Bad Gateway</h1><p>"
    + b"x" * 3000
    + b"</p></body></html>"
)


def test_an_html_error_page_is_summarised_by_its_title_never_shown():
    assert payload_message(HTML_502) == ("an HTML error page (502 Bad Gateway)", "")
    assert payload_message(b"<html><body><h1>Oops</h1></body></html>")[0] == (
        "an HTML error page (Oops)"
    )
    handler, _ = answers(
        httpx.Response(502, content=HTML_502, headers={"Content-Type": "text/html"})
    )
    http, _ = make(handler, retry=RetryPolicy(max_attempts=1))
    with pytest.raises(ProviderUnavailable) as info:
        http.get_json("/pods")
    text = str(info.value)
    assert text == "runpod: GET /v1/pods HTTP 502: an HTML error page (502 Bad Gateway)"
    # an HTML page in a 200 where JSON was expected: a clear error too
    handler, _ = answers(httpx.Response(200, content=HTML_502))
    http, _ = make(handler)
    with pytest.raises(ProviderError, match="answered with an HTML error page"):
        http.get_json("/pods")
