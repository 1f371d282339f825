"""The market's timer for one instance, on the wall clock.

A real cloud boots, warns and reclaims a machine on its own schedule, whether or not anybody
asks. The fake provider moves its simulation when it is called, and the controller does not
call ``status`` while the agent answers; so, on the wall clock, the provider starts one small
detached process per instance with something scheduled (boot, preemption notice, kill) that
sleeps until the next event and then calls the provider, which applies it. The process exits
when nothing more is scheduled or the instance is gone. With an injected clock no timer is
started: the test moves time and calls the provider itself.

    python -m corral.providers.fake.timer --home HOME --key KEY --instance-id ID
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from corral.providers.fake.state import Layout, next_event

#: Longest sleep between two looks at the record (a terminate is noticed within this).
POLL_S = 1.0


def run(home: Path, key: str, instance_id: str, python: str = sys.executable) -> int:
    from corral.providers.fake.provider import FakeProvider

    layout = Layout(home)
    provider: FakeProvider | None = None
    while True:
        rec = layout.read(key)
        if rec is None or rec.instance_id != instance_id:
            return 0
        now = time.time()
        due = next_event(rec, now, can_boot=layout.has_bootstrap(key))
        if due is None:
            return 0
        wait = due - now
        if wait > 0:
            time.sleep(min(wait, POLL_S))
            continue
        if provider is None:  # the catalog does not matter: the record holds what is needed
            provider = FakeProvider({}, home=home, python=python, timers=False)
        instance = provider.find(key)
        if instance is None or instance.instance_id != instance_id:
            return 0
        provider.status(instance)  # applies every event due by now
        if layout.read(key) == rec:  # nothing could be applied: do not spin
            time.sleep(POLL_S)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m corral.providers.fake.timer")
    parser.add_argument("--home", required=True, type=Path)
    parser.add_argument("--key", required=True)
    parser.add_argument("--instance-id", required=True)
    parser.add_argument("--python", default=sys.executable)
    args = parser.parse_args(argv)
    return run(args.home, args.key, args.instance_id, args.python)


if __name__ == "__main__":
    sys.exit(main())
