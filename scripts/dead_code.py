"""Dead code in src/, found at high confidence (vulture); scripts/test.sh runs it.

Two kinds are reported, and the script exits 1 naming each:
- what vulture is sure of (100 %): an unused import, variable or argument, code after a
  ``return`` or ``raise``;
- a module-level function or class that nothing names in src/, tests/, benchmarks/, examples/
  or scripts/. A decorated one is registered by its decorator and a method may be called by a
  framework (a hook, a validator, an override), so neither is reported.

A name that must stay goes in scripts/dead_code_whitelist.py with the reason it stays.
Usage: python scripts/dead_code.py [--root DIR]
"""

from __future__ import annotations

import argparse
import ast
import functools
import sys
from pathlib import Path

from vulture import Vulture

SCANNED = ("src", "tests", "benchmarks", "examples", "scripts")


@functools.cache
def _module_body(path: Path) -> dict[tuple[str, int], ast.stmt]:
    tree = ast.parse(path.read_text(), filename=str(path))
    return {
        (node.name, node.lineno): node
        for node in tree.body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
    }


def _plain_top_level(path: Path, name: str, line: int) -> bool:
    """Whether ``name`` at ``line`` is a module-level def or class without decorators."""
    node = _module_body(path).get((name, line))
    if node is None or (name.startswith("__") and name.endswith("__")):
        return False
    return not getattr(node, "decorator_list", None)


def dead_code(root: Path) -> list[str]:
    """The report lines of the dead code under ``root/src``, in vulture's order."""
    vulture = Vulture()
    vulture.scavenge([str(root / part) for part in SCANNED if (root / part).is_dir()])
    product = (root / "src").resolve()
    found = []
    for item in vulture.get_unused_code(min_confidence=60):
        path = Path(item.filename).resolve()
        if not path.is_relative_to(product):
            continue
        if item.confidence >= 100 or (
            item.typ in ("function", "class") and _plain_top_level(path, item.name, item.first_lineno)
        ):
            found.append(f"{path.relative_to(root.resolve())}:{item.first_lineno}: {item.message}")
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent)
    args = parser.parse_args(argv)
    found = dead_code(args.root)
    for line in found:
        print(line)
    if found:
        print(
            f"dead code: {len(found)} found (remove it, or name it in "
            "scripts/dead_code_whitelist.py with the reason it stays)",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
