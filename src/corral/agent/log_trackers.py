"""The spec's trackers for a stage whose progress is read from its log, in a process of their own
(``python -m corral.agent.log_trackers``, started by
:class:`corral.agent.log_progress.BackgroundTrackers`).

It runs in the stage's environment and workdir, so the trackers are built exactly as the SDK's
``report()`` builds them in the job: from ``$CORRAL_TRACKERS``, with the stage's ``env`` and
secrets (``WANDB_MODE``, ``WANDB_API_KEY``, ``MLFLOW_TRACKING_URI``, ...), the run's id
(the same W&B and MLflow run in every attempt), the run's directory (where an offline W&B run is
written) and relative paths read from the workdir. Keeping W&B and MLflow out of the agent also
keeps their threads, imports and any crash of theirs away from it.

Standard input: one JSON object a line, ``{"step": <int>, "metrics": {<name>: <number>}}``. At
its end the trackers are finished and the process exits. Warnings (a tracker left out) go to
standard error. The signals the agent's group may get with it (a preemption's SIGTERM, a
Ctrl-C) do not end it: the agent ends the input once the stage is over, or its death does, and
the trackers finish then (the agent kills this process if they take too long). SIGTERM and
SIGUSR1 are recorded as in a job (:func:`corral.sdk.signals.install_signal_handlers`), so an
MLflow run of a preempted machine ends ``KILLED``, as the job's own would.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys

from corral.wire.env import ENV_TRACKERS


def main() -> int:
    from corral.sdk import signals

    signals.install_signal_handlers()  # SIGTERM, SIGUSR1: recorded, as in a job
    for sig in (signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    logging.basicConfig(level=logging.WARNING, format="corral trackers: %(message)s")
    try:
        specs = json.loads(os.environ.get(ENV_TRACKERS, "") or "[]")
    except ValueError as exc:
        logging.warning("%s is not valid JSON (%s); no trackers", ENV_TRACKERS, exc)
        specs = []
    from corral.sdk.trackers.factory import make_trackers

    tracker = make_trackers(specs if isinstance(specs, list) else [], strict=False)
    for line in sys.stdin:
        try:
            item = json.loads(line)
            tracker.log(dict(item["metrics"]), int(item["step"]))
        except Exception as exc:  # one bad value never ends the others
            logging.warning("not logged: %s: %s", type(exc).__name__, exc)
    tracker.finish()
    return 0


if __name__ == "__main__":
    sys.exit(main())
