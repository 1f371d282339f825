"""The shared atomic write and backoff helpers (corral.files, corral.backoff)."""

from __future__ import annotations

import json
import os
import random
import stat

import pytest

from corral.backoff import backoff_delay
from corral.files import write_atomic, write_json_atomic


def test_write_atomic_replaces_whole_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "state.json"
    target.write_text("old")
    write_atomic(target, "new", mode=0o640)
    assert target.read_text() == "new"
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    write_atomic(target, b"\x00bytes", fsync=False)
    assert target.read_bytes() == b"\x00bytes"
    assert os.listdir(tmp_path) == ["state.json"]


def test_a_failed_write_keeps_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "cfg.json"
    write_json_atomic(target, {"a": 1})
    with pytest.raises(TypeError):
        write_json_atomic(target, {"a": object()})
    assert json.loads(target.read_text()) == {"a": 1}
    assert os.listdir(tmp_path) == ["cfg.json"]


def test_json_options_pass_through(tmp_path):
    target = tmp_path / "x.json"
    write_json_atomic(target, {"b": 1, "a": object}, sort_keys=True, default=str, newline=True)
    text = target.read_text()
    assert text.endswith("\n") and text.index('"a"') < text.index('"b"')


def test_backoff_doubles_up_to_the_cap_with_jitter_between_half_and_whole():
    assert [backoff_delay(n, base=1, max_delay=5, jitter=False) for n in (1, 2, 3, 4)] == [
        1.0,
        2.0,
        4.0,
        5.0,
    ]
    rng = random.Random(3)
    for n in range(1, 8):
        full = min(30.0, 0.5 * 2 ** (n - 1))
        assert full / 2 <= backoff_delay(n, base=0.5, max_delay=30, rng=rng) <= full
    a = [backoff_delay(2, base=1, max_delay=9, rng=random.Random(7)) for _ in range(2)]
    assert a[0] == a[1]  # one draw of the given rng: reproducible
