"""The controller's cache and a run's storage keep only the newest few (runtime.KEEP) of corral's
runtimes per arch: a new corral version or dependency packs a new 45 MB runtime, and the old ones
would pile up in both."""

from __future__ import annotations

import json
import os
from pathlib import Path

from corral.bundle.remote import open_storage
from corral.providers.common import runtime


def _cached(cache: Path, name: str, arch: str, mtime: int) -> Path:
    folder = cache / name
    folder.mkdir(parents=True)
    archive = folder / f"corral-runtime-0.1.0-{arch}.tar.gz"
    archive.write_bytes(b"x")
    (folder / "sha256").write_text("0" * 64)
    os.utime(archive, (mtime, mtime))
    return folder


def test_the_cache_keeps_the_newest_runtimes_of_each_arch(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    x86 = [_cached(cache, f"x{i}", "x86_64", 1000 + i) for i in range(5)]
    arm = [_cached(cache, f"a{i}", "aarch64", 500 + i) for i in range(2)]
    gone = runtime.prune_cache(cache, "x86_64")
    assert sorted(gone) == x86[:2]  # the two oldest
    assert [f for f in x86 if f.exists()] == x86[2:]
    assert all(f.exists() for f in arm)  # another arch: its own count
    os.utime(x86[2] / "corral-runtime-0.1.0-x86_64.tar.gz")  # used again: the newest now
    _cached(cache, "x9", "x86_64", 2000)
    runtime.prune_cache(cache, "x86_64")
    assert sorted(p.name for p in cache.iterdir()) == ["a0", "a1", "x2", "x4", "x9"]  # not x3


def test_the_storage_keeps_the_newest_runtimes_it_shipped(tmp_path: Path) -> None:
    base = tmp_path / "bucket" / "_corral" / "runtimes"
    storage, folder = open_storage(f"file://{base}", {})
    stranger = base / "from-a-controller-without-index"
    stranger.mkdir(parents=True)
    for n in range(5):
        (base / f"rt{n}").mkdir()
        (base / f"rt{n}" / "corral-runtime.tar.gz").write_bytes(b"x")
        runtime.prune_storage(storage, folder, f"rt{n}", "x86_64")
    (base / "arm0").mkdir()
    runtime.prune_storage(storage, folder, "arm0", "aarch64")
    assert sorted(p.name for p in base.iterdir()) == [
        "arm0",
        "from-a-controller-without-index",  # not in the index: never deleted
        "index.json",
        "rt2",
        "rt3",
        "rt4",
    ]
    index = json.loads((base / "index.json").read_text())
    assert index == [
        {"id": "rt2", "arch": "x86_64"},
        {"id": "rt3", "arch": "x86_64"},
        {"id": "rt4", "arch": "x86_64"},
        {"id": "arm0", "arch": "aarch64"},
    ]
    # shipped again (it was pruned and a launch needed it): the newest, nothing else lost
    gone = runtime.prune_storage(storage, folder, "rt2", "x86_64")
    assert gone == [] and json.loads((base / "index.json").read_text())[-1]["id"] == "rt2"
    (base / "index.json").write_text("not json")  # a broken index: started afresh
    assert runtime.prune_storage(storage, folder, "rt5", "x86_64") == []
