"""support/openapi_contract and its hook in support/fakehttp, on a real loopback server with
SaladCloud's published document: a request the real API would refuse is refused and recorded,
an answer the document does not allow is recorded, a fault a test asked for is not checked,
and a keep-alive connection goes on after a checked request."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from support import fakehttp
from support.openapi_contract import ContractCheck, load, unchecked

ORG, PROJECT = "acme", "default"
GROUPS = f"/api/public/organizations/{ORG}/projects/{PROJECT}/containers"
KEY = {"Salad-Api-Key": "salad_test_key"}


def _group(name: str) -> dict[str, Any]:
    """A container group as SaladCloud's document describes one (every required field)."""
    return {
        "id": "3e9b2f1c-7a5d-4b8e-9c2f-1a2b3c4d5e6f",
        "name": name,
        "display_name": name,
        "organization_name": ORG,
        "project_name": PROJECT,
        "container": {
            "image": "python:3.11",
            "resources": {"cpu": 2, "memory": 4096, "gpu_classes": []},
            "command": [],
            "size": 0,
            "hash": "sha256:" + "ab" * 32,
            "environment_variables": {},
            "image_caching": True,
        },
        "autostart_policy": True,
        "restart_policy": "never",
        "replicas": 1,
        "current_state": {
            "status": "running",
            "description": "",
            "start_time": "2026-11-28T00:00:00Z",
            "finish_time": "2026-11-28T00:00:00Z",
            "instance_status_counts": {
                "allocating_count": 0,
                "creating_count": 0,
                "running_count": 1,
                "stopping_count": 0,
            },
        },
        "country_codes": ["us"],
        "priority": "high",
        "pending_change": False,
        "version": 1,
        "create_time": "2026-11-28T00:00:00Z",
        "update_time": "2026-11-28T00:00:00Z",
        "scheduled-scaling-enabled": False,
        "scaling-actions": [],
    }


class _Fake:
    """Answers GET of a group with ``answer`` (or an injected 503 when ``fault``) and records
    the body of every POST it reads."""

    def __init__(self) -> None:
        self.contract = ContractCheck(
            load("salad-cloud.yaml"),
            "/api/public",
            lambda v: (400, {"type": "about:blank", "title": "Bad Request", "detail": v[0]}),
        )
        self.answer: Any = _group("corral-ok")
        self.fault = False
        self.posted: list[bytes] = []

    def handle(self, h: fakehttp.QuietHandler) -> None:
        length = int(h.headers.get("Content-Length") or 0)
        raw = h.rfile.read(length) if length else b""
        if h.command == "POST":
            self.posted.append(raw)
            return fakehttp.send(h, 201, _group("corral-new"), content_type="with-body")
        if self.fault:
            unchecked(h)
            return fakehttp.send(
                h, 503, b"<html>down</html>", "text/html", content_type="with-body"
            )
        fakehttp.send(h, 200, self.answer, content_type="with-body")


@pytest.fixture
def fake() -> Iterator[tuple[_Fake, httpx.Client]]:
    f = _Fake()
    server = fakehttp.start_server(f)
    with httpx.Client(base_url=f"http://127.0.0.1:{server.server_port}", headers=KEY) as c:
        yield f, c
    server.shutdown()
    server.server_close()


def _create(name: str, **container: Any) -> dict[str, Any]:
    return {
        "name": name,
        "container": {
            "image": "python:3.11",
            "resources": {"cpu": 2, "memory": 4096},
            **container,
        },
        "autostart_policy": True,
        "restart_policy": "never",
        "replicas": 1,
    }


def test_a_conforming_exchange_reaches_the_fake_and_leaves_no_violation(fake) -> None:
    f, c = fake
    r = c.post(GROUPS, json=_create("corral-a"))
    assert r.status_code == 201
    assert json.loads(f.posted[0])["name"] == "corral-a"  # the fake read the body itself
    assert c.get(f"{GROUPS}/corral-ok").status_code == 200  # same keep-alive connection
    f.contract.assert_clean()
    assert f.contract.checked == 4  # two requests, two answers


def test_a_request_the_real_api_refuses_gets_the_refusal_and_fails_the_test(fake) -> None:
    f, c = fake
    r = c.post(GROUPS, json=_create("corral-b", environment_variables={"BOOT": "line1\nline2"}))
    assert r.status_code == 400
    assert "environment_variables/BOOT" in r.json()["detail"]
    assert f.posted == []  # never reached the fake
    with pytest.raises(AssertionError, match=r"1 exchange\(s\) broke salad-cloud.yaml"):
        f.contract.assert_clean()


def test_a_request_without_the_key_the_document_requires_is_refused(fake) -> None:
    f, c = fake
    del c.headers["Salad-Api-Key"]
    r = c.get(f"{GROUPS}/corral-ok")
    assert r.status_code == 400
    assert any("ApiKeyAuth" in v for v in f.contract.violations)


def test_an_answer_missing_a_required_field_is_a_violation(fake) -> None:
    f, c = fake
    answer = _group("corral-ok")
    del answer["priority"]
    f.answer = answer
    assert c.get(f"{GROUPS}/corral-ok").status_code == 200
    assert len(f.contract.violations) == 1
    assert "'priority' is a required property" in f.contract.violations[0]


def test_a_fault_the_test_asked_for_is_not_checked(fake) -> None:
    f, c = fake
    f.fault = True
    assert c.get(f"{GROUPS}/corral-ok").status_code == 503
    f.contract.assert_clean()


def test_a_path_the_document_does_not_have_is_a_violation(fake) -> None:
    f, c = fake
    r = c.get(f"/api/public/organizations/{ORG}/projects/{PROJECT}/nonsense")
    assert r.status_code == 400
    assert "PathNotFound" in f.contract.violations[0]
