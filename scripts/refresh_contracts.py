"""Fetch the providers' published OpenAPI documents again into ``contracts/``.

    python scripts/refresh_contracts.py [--ref main] [--only salad-cloud.yaml] [--dry-run]

Each document comes from the provider's own public repository (the table in
``contracts/README.md``); IO.net's is pruned to the container-as-a-service paths corral uses
and the schemas they reach, Discord's to the one operation a webhook calls (execute webhook),
as the copies in the repository are. The script prints, per file,
whether it changed and the paths added or removed, then writes the files (not with
``--dry-run``). Review the diff and run the provider tests before committing: a fake that
now refuses what corral sends is the point of the exercise.

Needs network access to GitHub (not available in CI or the test suite, which never call it).
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

CONTRACTS = Path(__file__).resolve().parents[1] / "contracts"
RAW = "https://raw.githubusercontent.com/{repo}/{ref}/{path}"
IONET_PREFIX = "/enterprise/v1/io-cloud/caas"


@dataclass(frozen=True)
class Source:
    file: str
    repo: str
    path: str
    prune: Callable[[dict[str, Any]], dict[str, Any]] | None = None


def _reachable(
    components: dict[str, Any], root: Any, kinds: tuple[str, ...]
) -> dict[str, set[str]]:
    """The components of ``kinds`` that ``root`` reaches through ``$ref``s, transitively."""
    keep: dict[str, set[str]] = {kind: set() for kind in kinds}
    stack: list[Any] = [root]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/components/"):
                kind, name = ref.split("/")[2:4]
                if kind in keep and name not in keep[kind] and name in components.get(kind, {}):
                    keep[kind].add(name)
                    stack.append(components[kind][name])
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return keep


def prune_paths(doc: dict[str, Any], prefix: str) -> dict[str, Any]:
    """Only the paths under ``prefix`` and the component schemas they reach (transitively)."""
    paths = {p: v for p, v in doc.get("paths", {}).items() if p.startswith(prefix)}
    schemas = doc.get("components", {}).get("schemas", {})
    keep = _reachable(doc.get("components", {}), paths, ("schemas",))["schemas"]
    out = {k: v for k, v in doc.items() if k not in ("paths", "components")}
    out["paths"] = paths
    components = dict(doc.get("components", {}))
    components["schemas"] = {k: schemas[k] for k in sorted(keep)}
    out["components"] = components
    return out


def prune_operation(
    doc: dict[str, Any], path: str, method: str, statuses: tuple[str, ...]
) -> dict[str, Any]:
    """Only ``method`` of ``path`` (its answers cut to ``statuses``) and the components it
    reaches (transitively, of every kind: schemas, headers, responses)."""
    item = doc["paths"][path]
    op = dict(item[method])
    op["responses"] = {k: v for k, v in op["responses"].items() if k in statuses}
    kept_item = {k: v for k, v in item.items() if k == "parameters"} | {method: op}
    components = doc.get("components", {})
    keep = _reachable(components, kept_item, tuple(components))
    out = {k: v for k, v in doc.items() if k not in ("paths", "components")}
    out["paths"] = {path: kept_item}
    out["components"] = {
        kind: {name: components[kind][name] for name in sorted(names)}
        for kind, names in sorted(keep.items())
        if names
    }
    if "securitySchemes" in components:
        out["components"]["securitySchemes"] = components["securitySchemes"]
    return out


SOURCES = (
    Source("salad-cloud.yaml", "SaladTechnologies/salad-cloud-docs", "api-specs/salad-cloud.yaml"),
    Source(
        "salad-cloud-imds.yaml",
        "SaladTechnologies/salad-cloud-docs",
        "api-specs/salad-cloud-imds.yaml",
    ),
    Source(
        "ionet-enterprise-caas.json",
        "ionet-official/docs",
        "openapi/full/IO_Explorer__IO_CLouds.json",
        lambda doc: prune_paths(doc, IONET_PREFIX),
    ),
    Source("runpod-v2.json", "runpod/docs", "api-reference-v2/openapi.json"),
    # the chat services a webhook can post to (notify.webhooks[].format: discord)
    Source(
        "discord-execute-webhook.json",
        "discord/discord-api-spec",
        "specs/openapi.json",
        lambda doc: prune_operation(
            doc, "/webhooks/{webhook_id}/{webhook_token}", "post", ("204",)
        ),
    ),
)


def parse(name: str, text: str) -> dict[str, Any]:
    return json.loads(text) if name.endswith(".json") else yaml.safe_load(text)


def render(name: str, doc: dict[str, Any]) -> str:
    if name.endswith(".json"):
        return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"
    return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True, width=100)


def fetch(url: str) -> str:
    with urllib.request.urlopen(url, timeout=60) as r:
        return r.read().decode()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ref", default="main", help="branch, tag or commit of every repository")
    ap.add_argument("--only", action="append", help="refresh only this file (repeatable)")
    ap.add_argument("--dry-run", action="store_true", help="report changes, write nothing")
    args = ap.parse_args(argv)
    failed = 0
    for src in SOURCES:
        if args.only and src.file not in args.only:
            continue
        url = RAW.format(repo=src.repo, ref=args.ref, path=src.path)
        try:
            doc = parse(src.path, fetch(url))
        except Exception as exc:  # a network or parse failure names the file and goes on
            print(f"{src.file}: could not fetch {url}: {exc}", file=sys.stderr)
            failed += 1
            continue
        if src.prune is not None:
            doc = src.prune(doc)
        target = CONTRACTS / src.file
        old = parse(src.file, target.read_text()) if target.exists() else {"paths": {}}
        added = sorted(set(doc.get("paths", {})) - set(old.get("paths", {})))
        removed = sorted(set(old.get("paths", {})) - set(doc.get("paths", {})))
        version = doc.get("info", {}).get("version", "?")
        same = doc == old
        print(f"{src.file}: {'unchanged' if same else 'changed'} (version {version})")
        for p in added:
            print(f"  + {p}")
        for p in removed:
            print(f"  - {p}")
        if not same and not args.dry_run:
            target.write_text(render(src.file, doc))
    if not args.dry_run:
        print("now update the commits and dates in contracts/README.md")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
