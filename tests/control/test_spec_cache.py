"""The controller reads a run's spec from the store once (then by spec hash from memory, at
most ``Settings.spec_cache_size`` runs' specs kept): a look at a run reads no spec."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from corral.control.context import Settings
from corral.control.controller import Controller
from corral.store import Store

from .unitkit import rig


def test_ticks_read_each_spec_once_and_the_cache_is_bounded(tmp_path: Path, monkeypatch) -> None:
    r = rig(tmp_path)
    reads: list[str] = []
    real = Store.get_run

    def counted(self: Store, ref: str, *, with_spec: bool = True) -> object:
        if with_spec:
            reads.append(ref)
        return real(self, ref, with_spec=with_spec)

    monkeypatch.setattr(Store, "get_run", counted)
    controller = Controller(r.ctx)
    for _ in range(5):
        r.clock.advance(1)
        controller.tick()
    assert reads.count(r.run_id) == 1  # the first look; then from memory
    assert r.ctx.spec(r.run()).name == "unit"

    r.ctx.settings = Settings(spec_cache_size=2)
    others = []
    for i in range(3):
        (tmp_path / f"o{i}").mkdir()
        others.append(rig(tmp_path / f"o{i}"))
    for o in others:
        r.ctx.spec(r.store.get_run(o.run_id, with_spec=False))
    assert len(r.ctx._spec_cache) == 2 and r.run_id not in r.ctx._spec_cache


def test_a_new_spec_hash_is_parsed_again(tmp_path: Path) -> None:
    r = rig(tmp_path)
    run = r.run()
    first = r.ctx.spec(run)
    assert r.ctx.spec(run) is first
    moved = dataclasses.replace(run, spec_hash="another")
    assert r.ctx.spec(moved) is not first and r.ctx.spec(moved) == first
