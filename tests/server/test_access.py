"""Access to the API: every endpoint but /healthz refuses a missing, wrong or revoked token
(401); a read-only token reads and is refused every write (403); tokens are stored only as
digests; CORS is off unless origins are given."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from corral.cli.app import app as cli
from corral.server.app import create_app
from corral.service.tokens import revoke_token
from server.conftest import Api, serve

#: documentation and the health check: everything else needs a token
OPEN = {"/healthz", "/docs", "/docs/oauth2-redirect", "/redoc", "/openapi.json"}
#: a bundle's name in the paths below
SHA = "0" * 64


def endpoints(api: Api) -> list[tuple[str, str]]:
    """(method, path) of every API endpoint, from the server's own OpenAPI document."""
    doc = httpx.get(f"{api.url}/openapi.json").json()
    return [
        (method.upper(), path.replace("{ref}", "some-run").replace("{sha256}", SHA))
        for path, ops in doc["paths"].items()
        if path not in OPEN
        for method in ops
    ]


def test_the_openapi_document_lists_every_endpoint_of_the_slice(api: Api) -> None:
    assert sorted(endpoints(api)) == sorted(
        [
            ("POST", "/api/v1/runs"),
            ("GET", "/api/v1/runs"),
            ("GET", "/api/v1/runs/some-run"),
            ("GET", "/api/v1/runs/some-run/events"),
            ("GET", "/api/v1/runs/some-run/logs"),
            ("GET", "/api/v1/runs/some-run/logs/stream"),
            ("POST", "/api/v1/runs/some-run/stop"),
            ("POST", "/api/v1/runs/some-run/cancel"),
            ("GET", "/api/v1/secrets"),
            ("GET", "/api/v1/budget"),
            ("POST", "/api/v1/budget"),
            ("GET", "/api/v1/sweeps"),
            ("GET", "/api/v1/sweeps/{name}"),
            ("DELETE", "/api/v1/budget/team"),
            ("DELETE", "/api/v1/budget/{scope}/{subject}"),
            ("GET", "/api/v1/monitoring/gpu"),
            ("GET", "/api/v1/monitoring/gpu/history"),
            ("GET", "/metrics"),
            ("GET", "/api/v1/runs/some-run/artifacts"),
            ("GET", "/api/v1/runs/some-run/artifacts/{path}"),
            ("GET", "/api/v1/runs/some-run/results.tar.gz"),
            ("GET", "/api/v1/runs/some-run/charts"),
            ("GET", "/api/v1/runs/some-run/timeline"),
            ("HEAD", f"/api/v1/bundles/{SHA}"),
            ("PUT", f"/api/v1/bundles/{SHA}"),
        ]
    )


@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Bearer corral_wrong"}, {"Authorization": "Basic dXNlcjpwdw=="}],
    ids=["missing", "wrong", "not-bearer"],
)
def test_every_endpoint_refuses_a_missing_or_wrong_token(api: Api, headers: dict) -> None:
    for method, path in endpoints(api):
        res = httpx.request(method, api.url + path, headers=headers, json={"spec": "x"})
        assert res.status_code == 401, (method, path, res.text)
        assert res.headers["WWW-Authenticate"] == "Bearer"
        if method != "HEAD":  # an answer to HEAD has no body
            assert res.json()["code"] == "unauthorized"


def test_a_revoked_token_is_refused(api: Api) -> None:
    with api.client(api.token) as c:
        assert c.get("/api/v1/runs").status_code == 200
        revoke_token("test-writer")
        assert c.get("/api/v1/runs").status_code == 401


def test_a_read_only_token_reads_and_is_refused_every_write(api: Api) -> None:
    with api.client(api.read_only_token) as c:
        assert c.get("/api/v1/runs").status_code == 200
        assert c.get("/api/v1/secrets").status_code == 200
        writes = [
            (m, p.replace("{scope}/{subject}", "user/bob"))
            for m, p in endpoints(api)
            if m in ("POST", "PUT", "HEAD", "DELETE")
        ]
        assert len(writes) == 8  # HEAD of a bundle: only before an upload
        for method, path in writes:
            res = c.request(method, path, json={"spec": "name: x\nrun: echo\n"})
            assert res.status_code == 403, (method, path, res.text)
            if method != "HEAD":
                assert res.json()["code"] == "forbidden"
        assert c.get("/api/v1/runs").json()["runs"] == []


def test_tokens_are_stored_hashed_in_a_private_file(corral_home: Path) -> None:
    runner = CliRunner()
    made = runner.invoke(cli, ["token", "create", "laptop"])
    assert made.exit_code == 0, made.output
    token = made.stdout.strip().splitlines()[-1]
    assert token.startswith("corral_") and len(token) > 40
    # the store exists too (a listed run would be in it), and holds nothing of the token
    assert runner.invoke(cli, ["ls"]).exit_code == 0
    for path in corral_home.rglob("*"):
        if path.is_file():
            assert token.encode() not in path.read_bytes(), path
    tokens_file = corral_home / "api-tokens.json"
    assert stat.S_IMODE(os.stat(tokens_file).st_mode) == 0o600
    listed = runner.invoke(cli, ["token", "list"])
    assert "laptop" in listed.stdout and token not in listed.stdout
    assert runner.invoke(cli, ["token", "create", "laptop"]).exit_code == 4  # exists
    assert runner.invoke(cli, ["token", "revoke", "laptop"]).exit_code == 0
    assert runner.invoke(cli, ["token", "revoke", "laptop"]).exit_code == 3
    assert runner.invoke(cli, ["token", "create", "Bad Name"]).exit_code == 2


def test_cors_is_off_unless_origins_are_given(api: Api) -> None:
    origin = {"Origin": "https://dash.example", "Access-Control-Request-Method": "GET"}
    off = httpx.options(f"{api.url}/api/v1/runs", headers=origin)
    assert "access-control-allow-origin" not in off.headers
    for url in serve(create_app(cors_origins=["https://dash.example"])):
        on = httpx.options(f"{url}/api/v1/runs", headers=origin)
        assert on.headers["access-control-allow-origin"] == "https://dash.example"
