"""AMIs a machine of corral's said cannot run corral, kept across controller restarts
(``CORRAL_HOME/aws/unusable-images.json``: ``{"<region> <ami>": "<why>"}``).

A machine whose image is unusable (python older than 3.11) says so on its console and powers
off; the provider then refuses to launch that AMI in that region. The refusal is written here,
so a restarted controller (or another one sharing the CORRAL_HOME) refuses it too instead of
booting the same failure once more. A new AMI (another ``CORRAL_AWS_IMAGE_ID``, or the SSM
parameter moving to a newer image) is a new key; deleting the file forgets every refusal.
Changes are made under an exclusive lock and written atomically; an unreadable file counts as
empty (the next failing boot writes it again).
"""

from __future__ import annotations

import fcntl
import json
from pathlib import Path

from corral.files import write_atomic

FILE = "unusable-images.json"


class ImageRefusals:
    def __init__(self, root: Path):
        self.root = Path(root)
        self.path = self.root / FILE

    def _read(self) -> dict[str, str]:
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        if not isinstance(data, dict):
            return {}
        return {str(k): str(v) for k, v in data.items() if isinstance(v, str)}

    def get(self, region: str, image_id: str) -> str | None:
        """Why ``image_id`` cannot run corral in ``region`` (None: not refused)."""
        return self._read().get(f"{region} {image_id}")

    def refuse(self, region: str, image_id: str, why: str) -> None:
        """Remember that ``image_id`` cannot run corral in ``region``, and why."""
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / "images.lock", "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            data = self._read()
            key = f"{region} {image_id}"
            if data.get(key) != why:
                data[key] = why
                write_atomic(self.path, json.dumps(data, sort_keys=True, indent=1), mode=0o644)
