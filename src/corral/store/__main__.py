"""Schema tools for developers and operators.

python -m corral.store current [--url URL]    # the database's schema revision
python -m corral.store upgrade [--url URL]    # migrate to head (Store.open also does it)
python -m corral.store revision -m MESSAGE    # autogenerate a migration from schema.py
"""

from __future__ import annotations

import argparse

from corral.store.db import Database
from corral.store.migrate import autogenerate, current_revisions, ensure_schema
from corral.store.urls import parse_url


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m corral.store")
    sub = parser.add_subparsers(dest="cmd", required=True)
    for name in ("current", "upgrade"):
        p = sub.add_parser(name)
        p.add_argument("--url", default=None, help="database URL (default: as corral uses)")
    rev = sub.add_parser("revision", help="autogenerate a migration from schema.py")
    rev.add_argument("-m", "--message", required=True)
    args = parser.parse_args(argv)
    if args.cmd == "revision":
        autogenerate(args.message)
        return
    db = Database(parse_url(args.url))
    try:
        if args.cmd == "upgrade":
            ensure_schema(db)
        print(f"{db.url.masked}: {', '.join(sorted(current_revisions(db))) or '(empty)'}")
    finally:
        db.close()


if __name__ == "__main__":
    main()
