"""Modules of src/ longer than the house aims for (STYLE.md: under 500 lines), printed as a
warning; scripts/test.sh runs it. It never fails: split such a module when you next change it.

Usage: python scripts/module_sizes.py [--root DIR] [--limit LINES]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

LIMIT = 500


def oversized(root: Path, limit: int = LIMIT) -> list[tuple[int, Path]]:
    """(lines, path relative to ``root``) of each module under ``root/src`` over ``limit``
    lines, longest first."""
    found = []
    for path in sorted((root / "src").rglob("*.py")):
        with path.open("rb") as handle:
            lines = sum(1 for _ in handle)
        if lines > limit:
            found.append((lines, path.relative_to(root)))
    return sorted(found, key=lambda item: (-item[0], item[1]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent)
    parser.add_argument("--limit", type=int, default=LIMIT, help="lines (default 500)")
    args = parser.parse_args(argv)
    found = oversized(args.root, args.limit)
    if found:
        print(f"warning: {len(found)} modules over {args.limit} lines (split them when next changed):")
        for lines, path in found:
            print(f"  {lines:5d} {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
