"""On-disk state of the fake provider, under ``<CORRAL_HOME>/fake/``, so a restarted controller
(or another CLI) sees the same instances and the same market.

::

    fake/lock                             fcntl.flock: every state change holds it
    fake/market.json                      {"launches": N}: the next launch index
    fake/instances/<key>/instance.json    FakeRecord (written atomically)
    fake/instances/<key>/bootstrap.json   the bootstrap while the machine "boots" (mode 0600,
                                          deleted once the agent started or the machine died)
    fake/instances/<key>/machine/         the machine: its agent host (agent, logs) and its disk
    fake/instances/<key>/timer.out        output of the instance's timer (wall clock only)
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from corral.errors import BadInput
from corral.files import write_atomic
from corral.fslock import exclusive
from corral.providers.base import Bootstrap
from corral.providers.common.files import check_key, read_json

INSTANCE_FILE = "instance.json"
BOOTSTRAP_FILE = "bootstrap.json"
MACHINE_DIR = "machine"
TIMER_OUT = "timer.out"

#: provisioning: booting until ready_at; running: the agent was started; preempting: notice
#: given (agent SIGTERMed), killed at kill_at; preempted: killed; failed: could not boot.
FakeState = Literal["provisioning", "running", "preempting", "preempted", "failed", "terminated"]


class FakeRecord(BaseModel):
    """One instance of the fake cloud. Times are seconds of the provider's clock."""

    model_config = ConfigDict(extra="forbid")

    key: str
    instance_id: str
    launch_index: int = Field(ge=0)
    entry: str = Field(description="Catalog entry id (capacity is counted per entry).")
    offer: dict[str, Any]
    spot: bool
    run_id: str = ""
    gpu_type: str | None = None
    gpu_count: int = 0
    state: FakeState = "provisioning"
    detail: str = ""
    launched_at: float
    ready_at: float
    preempt_at: float | None = None
    preempt_cause: str = ""
    notice_s: float = 0.0
    noticed_at: float | None = None
    kill_at: float | None = None
    ended_at: float | None = None
    terminate_requested_at: float | None = None
    booted: bool = False
    ephemeral_disk: bool = False
    #: the cloud's ``keep_gone_disks`` at launch: whichever process applies the reclaim (the
    #: timer's provider knows no catalog) keeps the disk as the cloud said
    keep_gone: bool = False

    @property
    def holds_capacity(self) -> bool:
        """Until it is terminated, an instance keeps its machine (preempted ones too)."""
        return self.state != "terminated"


class Layout:
    """Paths of the fake provider's files under ``home``."""

    def __init__(self, home: Path):
        self.root = Path(home) / "fake"
        self.instances = self.root / "instances"
        self.lock_path = self.root / "lock"
        self.market_path = self.root / "market.json"

    def dir(self, key: str) -> Path:
        return self.instances / check_key(key)

    def machine_home(self, key: str) -> Path:
        return self.dir(key) / MACHINE_DIR

    def lock(self) -> contextlib.AbstractContextManager[None]:
        """Exclusive lock shared by every process using this home."""
        self.instances.mkdir(parents=True, exist_ok=True)
        return exclusive(self.lock_path)

    # --- records ----------------------------------------------------------------------------

    def read(self, key: str) -> FakeRecord | None:
        data = read_json(self.dir(key) / INSTANCE_FILE)
        if data is None:
            return None
        try:
            return FakeRecord.model_validate(data)
        except ValidationError:
            return None  # not ours, or from an incompatible version

    def write(self, rec: FakeRecord) -> None:
        d = self.dir(rec.key)
        d.mkdir(mode=0o700, parents=True, exist_ok=True)
        write_atomic(d / INSTANCE_FILE, rec.model_dump_json(indent=2), mode=0o644)

    def records(self) -> list[FakeRecord]:
        if not self.instances.is_dir():
            return []
        out = []
        for d in sorted(self.instances.iterdir()):
            if not d.is_dir():
                continue
            try:
                rec = self.read(d.name)
            except BadInput:  # a directory no launch key could have made
                continue
            if rec is not None:
                out.append(rec)
        return out

    def next_launch_index(self) -> int:
        """Take the next launch index (lock held by the caller)."""
        data = read_json(self.market_path)
        n = data.get("launches", 0) if isinstance(data, dict) else 0
        n = n if isinstance(n, int) and n >= 0 else 0
        self.root.mkdir(parents=True, exist_ok=True)
        write_atomic(self.market_path, f'{{"launches": {n + 1}}}\n', mode=0o644)
        return n

    # --- the pending bootstrap (like a cloud's user-data until the machine boots) -----------

    def save_bootstrap(self, key: str, bootstrap: Bootstrap) -> None:
        d = self.dir(key)
        d.mkdir(mode=0o700, parents=True, exist_ok=True)
        write_atomic(d / BOOTSTRAP_FILE, bootstrap.model_dump_json(), mode=0o600)

    def load_bootstrap(self, key: str) -> Bootstrap | None:
        data = read_json(self.dir(key) / BOOTSTRAP_FILE)
        if not isinstance(data, dict):
            return None
        try:
            return Bootstrap.model_validate(data)
        except ValidationError:
            return None

    def has_bootstrap(self, key: str) -> bool:
        return (self.dir(key) / BOOTSTRAP_FILE).is_file()

    def drop_bootstrap(self, key: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            (self.dir(key) / BOOTSTRAP_FILE).unlink()


def next_event(rec: FakeRecord, now: float, *, can_boot: bool = True) -> float | None:
    """Clock time of the next thing the market does to ``rec`` (maybe already past), or None if
    nothing more is scheduled. A machine whose bootstrap is lost (``can_boot`` False: a launch
    interrupted before it was saved) does not boot until launched again with its key."""
    if rec.state == "provisioning" and (can_boot or now < rec.ready_at):
        return min(t for t in (rec.ready_at, rec.preempt_at) if t is not None)
    if rec.state in ("provisioning", "running"):
        return rec.preempt_at
    if rec.state == "preempting":
        return rec.kill_at
    return None
