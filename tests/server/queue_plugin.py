"""A provider whose runs wait in queues of its own (``ReportsQueue``), registered as a plugin
for the /metrics test: the local provider, with queue lengths read from the JSON file
``QUEUE_FILE`` names (a broker would be asked instead)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from corral.errors import ProviderUnavailable
from corral.providers.base import ReportsQueue
from corral.providers.local import LocalProvider

QUEUE_FILE = "CORRAL_TEST_QUEUE_FILE"


class QueuedLocal(LocalProvider, ReportsQueue):
    name = "queued"

    def queue_lengths(self) -> dict[str, int]:
        try:
            return {
                str(k): int(v)
                for k, v in json.loads(Path(os.environ[QUEUE_FILE]).read_text()).items()
            }
        except (OSError, ValueError) as e:
            raise ProviderUnavailable(f"the queue cannot be read: {type(e).__name__}")
