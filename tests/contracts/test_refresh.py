"""scripts/refresh_contracts.py, offline: its pruning of IO.net's document (the only part that
is ours rather than the provider's) keeps every corral path and leaves a document whose every
reference resolves; and every document in contracts/ loads as the fakes load it."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
from openapi_core import Config, OpenAPI

from support.openapi_contract import CONTRACTS, load

ROOT = Path(__file__).resolve().parents[2]


def _script():
    spec = importlib.util.spec_from_file_location("refresh", ROOT / "scripts/refresh_contracts.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_pruning_keeps_the_caas_paths_and_only_the_schemas_they_reach() -> None:
    refresh = _script()
    doc = json.loads((CONTRACTS / "ionet-enterprise-caas.json").read_text())
    doc["paths"]["/enterprise/v1/io-cloud/vmaas/deploy"] = {"get": {"responses": {}}}
    pruned = refresh.prune_paths(doc, refresh.IONET_PREFIX)
    assert all(p.startswith(refresh.IONET_PREFIX) for p in pruned["paths"])
    assert set(pruned["paths"]) == set(doc["paths"]) - {"/enterprise/v1/io-cloud/vmaas/deploy"}
    assert "HTTPValidationError" in pruned["components"]["schemas"]
    assert len(pruned["components"]["schemas"]) < len(doc["components"]["schemas"])
    OpenAPI.from_dict(pruned, config=Config())  # every $ref left resolves: the spec validates


@pytest.mark.parametrize("name", sorted(p.name for p in CONTRACTS.glob("*.*") if p.suffix != ".md"))
def test_every_vendored_document_loads(name: str) -> None:
    contract = load(name)
    assert contract.api is not None


def test_the_readme_names_a_source_for_every_document() -> None:
    readme = (CONTRACTS / "README.md").read_text()
    for p in CONTRACTS.iterdir():
        if p.suffix != ".md":
            assert f"`{p.name}`" in readme, p.name
