"""A bounded property-based fuzz of the API from its own OpenAPI document (schemathesis on
hypothesis, against the ASGI app in process): for every operation, requests that fit the
schema and requests that break it (negative mode: wrong types, missing fields, bad JSON),
and the coverage phase's boundary values and undeclared methods, with a writer's, a reader's
and no token. Every answer is validated with every check schemathesis has (``--checks
all``): no 5xx, every status, content type and header as the document lists it, invalid
data refused, valid data taken, authentication enforced. Counts are printed.

The store holds one ended run, named ``s``: each operation on a run is also fuzzed with its
ref fixed to it, so the handlers behind the lookup answer too (and their bodies are checked
against the document); every log stream of it ends at once.

Checks that cannot fire here, by design: ``use_after_free``, ``ensure_resource_availability``
and ``object_level_authorization`` follow a created resource to its later reads, which needs
the stateful phase and OpenAPI links; the API declares no links (no operation deletes, and a
run's ref is not a field of a generated request). ``missing_required_header`` has no
required header to drop (the token is a security scheme, which ``ignored_auth`` covers)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow

#: examples per operation, phase and mode: a bound, so the test stays well under two
#: minutes on a loaded machine
EXAMPLES = 4

#: ``schemathesis.toml`` for this API: the two operations whose valid requests depend on
#: more than a schema can say take a 422 as a valid request's answer. A submit's ``spec``
#: is a job spec in YAML text, checked by the spec's own rules; a bundle's bytes must hash
#: to the sha256 of its path and number ``size``. Both 422s name the field at fault.
CONFIG = """
[[operations]]
include-path = "/api/v1/runs"
include-method = "POST"
checks.positive_data_acceptance.expected-statuses = ["2xx", "401", "403", "404", "409", "422"]

[[operations]]
include-path = "/api/v1/bundles/{sha256}"
include-method = "PUT"
checks.positive_data_acceptance.expected-statuses = ["2xx", "401", "403", "404", "422"]
"""


def _all_checks() -> list[Any]:
    from schemathesis.checks import CHECKS, load_all_checks

    load_all_checks()
    return list(CHECKS.get_all())


def validate(case, label, tokens, seen, failures) -> None:  # type: ignore[no-untyped-def]
    """Send ``case`` with every token; each answer validated by every check."""
    from schemathesis.core.failures import FailureGroup

    for who, token in tokens.items():
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        try:
            res = case.call_and_validate(headers=headers, checks=_all_checks())
        except FailureGroup as group:
            for failure in group.exceptions:
                failures.append(
                    f"{case.operation.label} ({label}, {who}): {failure.title}: "
                    f"{failure.message[:300]}\n    {case.as_curl_command(headers=headers)}"
                )
            continue
        seen[(f"{res.status_code // 100}xx", who)] += 1


def cover(schema, op, tokens, seen, failures) -> None:  # type: ignore[no-untyped-def]
    """The coverage phase: each parameter's boundary and invalid values, missing and extra
    parameters, and methods the path does not declare (a 405 with ``Allow``)."""
    import schemathesis

    generation = schema.config.generation_for(operation=op, phase="coverage")
    cases = schema.iter_coverage_cases(
        op, generation_modes=list(schemathesis.GenerationMode), generation_config=generation
    )
    for case in cases:
        validate(case, "coverage", tokens, seen, failures)


def fuzz(op, mode, tokens, seen, failures, **fixed) -> None:  # type: ignore[no-untyped-def]
    """Up to :data:`EXAMPLES` generated requests for one operation (fuzzing phase);
    ``fixed``: path parameters given, not generated."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis.errors import Unsatisfiable

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        derandomize=True,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=op.as_strategy(generation_mode=mode, path_parameters=fixed or None))
    def check(case) -> None:  # type: ignore[no-untyped-def]
        validate(case, f"fuzzing, {mode.value} {fixed or ''}", tokens, seen, failures)

    try:
        check()
    except Unsatisfiable:  # an operation with nothing to break (no parameter, no body)
        if mode.value != "negative":
            raise


def test_every_answer_conforms_to_the_openapi_document(corral_home: Path) -> None:
    schemathesis = pytest.importorskip("schemathesis")
    from schemathesis.config import SchemathesisConfig

    from corral.server.app import create_app
    from corral.service.session import open_store
    from corral.service.tokens import create_token

    store = open_store()
    run = store.create_run(name="s", spec={}, spec_hash="x", spec_path="x", workdir="/")
    store.transition(run.id, "SUCCEEDED", "seeded")
    app = create_app(store)
    tokens = {
        "writer": create_token("fuzz-w").token,
        "reader": create_token("fuzz-r", read_only=True).token,
        "none": "",
    }
    config = SchemathesisConfig.from_str(CONFIG)
    schema = schemathesis.openapi.from_asgi("/openapi.json", app, config=config)
    seen: Counter[tuple[str, str]] = Counter()
    failures: list[str] = []
    try:
        operations = [result.ok() for result in schema.get_all_operations()]
        assert len(operations) >= 15
        for op in operations:
            cover(schema, op, tokens, seen, failures)
            for mode in schemathesis.GenerationMode:
                fuzz(op, mode, tokens, seen, failures)
            if "{ref}" in op.path:  # the seeded run itself: its answers' bodies are checked
                fuzz(op, schemathesis.GenerationMode.POSITIVE, tokens, seen, failures, ref="s")
    finally:
        store.close()
    total = sum(seen.values())
    print(f"\nfuzzed {len(operations)} operations with {total} conforming requests:")
    for (status, who), n in sorted(seen.items()):
        print(f"  {status} {who:<7} {n}")
    assert failures == [], f"{len(failures)} failures:\n" + "\n".join(failures[:30])
    assert seen[("2xx", "writer")] > 0 and seen[("4xx", "none")] > 0


def _document(corral_home: Path) -> dict[str, Any]:
    from fastapi.testclient import TestClient

    from corral.server.app import create_app

    with TestClient(create_app()) as client:
        doc: dict[str, Any] = client.get("/openapi.json").json()
    return doc


def test_the_document_lists_each_operations_errors_and_bounds(corral_home: Path) -> None:
    doc = _document(corral_home)
    paths = doc["paths"]
    for path, item in paths.items():
        for method, op in item.items():
            params = op.get("parameters", [])
            for p in params:  # every integer parameter is bounded both ways
                if p["schema"].get("type") == "integer" or "integer" in str(p["schema"]):
                    schema = p["schema"].get("anyOf", [p["schema"]])[0]
                    assert "minimum" in schema and "maximum" in schema, (path, method, p)
            if path == "/healthz":
                continue
            assert "401" in op["responses"], (path, method)
            for status, answer in op["responses"].items():
                if status.startswith(("4", "5")):
                    ref = answer["content"]["application/json"]["schema"]["$ref"]
                    assert ref.endswith("/ErrorBody"), (path, method, status)
    stream = paths["/api/v1/runs/{ref}/logs/stream"]["get"]["responses"]["200"]["content"]
    assert list(stream) == ["text/event-stream"]
    state = next(p for p in paths["/api/v1/runs"]["get"]["parameters"] if p["name"] == "state")
    assert "[Rr][Uu][Nn][Nn][Ii][Nn][Gg]" in str(state["schema"]), state
    bundle = paths["/api/v1/bundles/{sha256}"]["put"]["parameters"]
    assert next(p for p in bundle if p["name"] == "sha256")["schema"]["pattern"] == (
        "^[0-9a-f]{64}$"
    )


def test_a_405_names_every_method_of_the_path(corral_home: Path) -> None:
    from fastapi.testclient import TestClient

    from corral.server.app import create_app

    with TestClient(create_app()) as client:
        res = client.post("/api/v1/bundles/" + "0" * 64)
        assert res.status_code == 405
        assert res.headers["allow"] == "HEAD, PUT"
        assert res.json()["code"] == "method_not_allowed"
        assert client.delete("/api/v1/runs").headers["allow"] == "GET, POST"


def test_a_value_off_its_pattern_is_refused_naming_the_value_and_what_was_expected(
    corral_home: Path,
) -> None:
    from fastapi.testclient import TestClient

    from corral.server.app import create_app
    from corral.service.tokens import create_token

    auth = {"Authorization": f"Bearer {create_token('p').token}"}
    with TestClient(create_app()) as client:
        res = client.get("/api/v1/runs", params={"state": "napping"}, headers=auth)
        assert res.status_code == 422
        assert res.json()["message"].startswith("query.state.0: 'napping': expected a run state (")
        assert (
            client.get("/api/v1/runs", params={"state": "Running"}, headers=auth).status_code == 200
        )
        res = client.head("/api/v1/bundles/ABC", headers=auth)
        assert res.status_code == 422
        res = client.put("/api/v1/bundles/ABC", params={"size": 1}, headers=auth)
        assert (
            res.json()["message"]
            == "path.sha256: 'ABC': expected a sha256 (64 lowercase hex digits)"
        )
        res = client.post(
            "/api/v1/runs", content=b"\xff", headers={**auth, "content-type": "application/json"}
        )
        assert res.status_code == 422 and res.json()["code"] == "bad_input"
