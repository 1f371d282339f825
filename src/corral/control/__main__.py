"""``python -m corral.control``: the controller process (the CLI starts it in the background)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="corral-controller")
    parser.add_argument(
        "--idle-exit",
        type=float,
        default=None,
        help="exit after this many seconds with no active run",
    )
    parser.add_argument("--tick", type=float, default=None, help="seconds between ticks")
    parser.add_argument(
        "--poll-interval",
        type=float,
        default=None,
        help="seconds between two looks at a quiet running run",
    )
    parser.add_argument("--log-file", type=Path, default=None)
    args = parser.parse_args(argv)
    # lazy on purpose (not a cycle): --help answers without loading the controller
    from corral.startup import skip_pydantic_plugins

    skip_pydantic_plugins()  # before the controller's models are built
    from corral.control.daemon import run_foreground
    from corral.errors import Conflict

    try:
        return run_foreground(
            idle_exit_s=args.idle_exit,
            tick_seconds=args.tick,
            poll_interval_s=args.poll_interval,
            log_to=args.log_file,
        )
    except Conflict as e:  # lost the race to another controller: nothing to do
        print(e.message, file=sys.stderr)
        return 0


if __name__ == "__main__":
    sys.exit(main())
