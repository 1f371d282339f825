"""A bounded property-based fuzz of the API from its own OpenAPI document (schemathesis on
hypothesis, against the ASGI app in process): for every operation, requests that fit the
schema and requests that break it (negative mode: wrong types, missing fields, bad JSON),
with a writer's, a reader's and no token. No answer may be a 5xx. Counts are printed.

The store holds one ended run, so a generated ref that happens to name it (a prefix) reaches
the handlers behind the lookup too; every log stream of it ends at once."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

#: examples per operation and mode: a bound, so the test stays well under a minute
EXAMPLES = 12


def fuzz(op, mode, tokens, seen, failures) -> None:  # type: ignore[no-untyped-def]
    """Up to :data:`EXAMPLES` generated requests for one operation, each with every token."""
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
    @given(case=op.as_strategy(generation_mode=mode))
    def check(case) -> None:  # type: ignore[no-untyped-def]
        for who, token in tokens.items():
            headers = {"Authorization": f"Bearer {token}"} if token else {}
            res = case.call(headers=headers)
            seen[(f"{res.status_code // 100}xx", who)] += 1
            if res.status_code >= 500:
                failures.append(
                    f"{op.method.upper()} {case.formatted_path} ({mode.value}, {who}): "
                    f"{res.status_code} {res.text[:200]}"
                )

    try:
        check()
    except Unsatisfiable:  # an operation with nothing to break (no parameter, no body)
        if mode.value != "negative":
            raise


def test_no_request_gets_a_5xx(corral_home: Path) -> None:
    schemathesis = pytest.importorskip("schemathesis")

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
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    seen: Counter[tuple[str, int]] = Counter()
    failures: list[str] = []
    try:
        operations = [result.ok() for result in schema.get_all_operations()]
        assert len(operations) >= 15
        for op in operations:
            for mode in schemathesis.GenerationMode:
                fuzz(op, mode, tokens, seen, failures)
    finally:
        store.close()
    total = sum(seen.values())
    print(f"\nfuzzed {len(operations)} operations with {total} requests:")
    for (status, who), n in sorted(seen.items()):
        print(f"  {status} {who:<7} {n}")
    assert failures == [], "\n".join(failures[:20])
    assert seen[("2xx", "writer")] > 0 and seen[("4xx", "none")] > 0
