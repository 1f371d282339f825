"""This controller's leases (control.leases) over many runs: renewed in one statement, and not
read again every tick while nothing can have changed."""

from __future__ import annotations

from pathlib import Path

import pytest

from corral.control.leases import Leases
from corral.store import Store

from .standinkit import create_run


def test_a_steady_controller_asks_the_store_a_few_times_a_lease_not_every_tick(
    corral_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = Store.open()
    ids = [create_run(store, f"r{i}", "run: sleep 60\n") for i in range(1200)]
    asked: list[float] = []
    real = store.lease_runs
    monkeypatch.setattr(store, "lease_runs", lambda *a, **k: asked.append(1) or real(*a, **k))
    now = [0.0]
    leases = Leases(store, "ctl-a", 20.0, clock=lambda: now[0])
    assert leases.refresh(ids) == set(ids)  # 1,200 runs taken (one UPDATE: no id list)
    for _ in range(60):  # 30 s of ticks every 0.5 s
        now[0] += 0.5
        held = leases.refresh(ids)
        assert held == set(ids) and all(leases.holds(rid) for rid in ids[:10])
    # asked every quarter of a lease (5 s), not every tick
    assert len(asked) == 1 + 30 // 5
    new = create_run(store, "new", "run: sleep 60\n")
    now[0] += 0.5
    assert new in leases.refresh([*ids, new])  # a new run is taken at once
    assert len(asked) == 8
    # without the active runs (a tick of tests and embedders) it always asks
    leases.refresh()
    assert len(asked) == 9
