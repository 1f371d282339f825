"""Fixtures for the object-storage tests: a moto S3 server on loopback, one bucket per test."""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from typing import Any

import pytest

#: Dummy credentials, distinctive enough to search for in events, status and errors.
ACCESS_KEY = "AKIACORRALTEST7Q3Z"
SECRET_KEY = "corral-secret-Zx81-never-printed"
SESSION_TOKEN = "corral-session-token-Qw93"


@pytest.fixture(scope="session")
def moto_endpoint():
    """``http://127.0.0.1:<port>`` of a moto S3 server running in this process."""
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@dataclass
class Bucket:
    name: str
    endpoint: str
    client: Any

    def uri(self, prefix: str = "") -> str:
        return f"s3://{self.name}/{prefix}" if prefix else f"s3://{self.name}"

    def list_keys(self, prefix: str = "") -> list[str]:
        out: list[str] = []
        for page in self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.name, Prefix=prefix
        ):
            out.extend(o["Key"] for o in page.get("Contents", []))
        return sorted(out)

    def get(self, key: str) -> bytes:
        return self.client.get_object(Bucket=self.name, Key=key)["Body"].read()

    def put(self, key: str, data: bytes) -> None:
        self.client.put_object(Bucket=self.name, Key=key, Body=data)


@pytest.fixture
def s3_env(moto_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """The environment an agent or a training script gets: dummy credentials, the endpoint."""
    for var in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    monkeypatch.setenv("AWS_SESSION_TOKEN", SESSION_TOKEN)
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    monkeypatch.setenv("CORRAL_S3_ENDPOINT_URL", moto_endpoint)
    return moto_endpoint


@pytest.fixture
def bucket(s3_env: str) -> Bucket:
    """A fresh, empty bucket on the moto server (and the env pointing at it)."""
    from corral.storage.s3_client import make_client, settings_from_env

    client = make_client(settings_from_env())
    name = f"corral-{uuid.uuid4().hex[:12]}"
    client.create_bucket(Bucket=name)
    return Bucket(name, s3_env, client)


def assert_no_secret(text: str) -> None:
    for value in (ACCESS_KEY, SECRET_KEY, SESSION_TOKEN):
        assert value not in text, f"a credential leaked: ...{text[:300]}"


@pytest.fixture
def start_agent():
    """``start_agent(plan) -> Client`` for an agent running in this process (hooks from the
    plan, as ``corral agent`` builds them)."""
    from agent.helpers import TOKEN, Client
    from corral.agent.main import Agent

    agents: list[Agent] = []

    def start(plan: Any, **kw: Any) -> Client:
        agent = Agent(plan, TOKEN, **kw)
        agents.append(agent)
        return Client(agent.start(), TOKEN, agent)

    yield start
    for agent in agents:
        agent.close(timeout=10)
