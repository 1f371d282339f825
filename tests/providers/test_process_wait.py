"""Waiting for a machine's processes to go (providers.common.process.wait_gone)."""

from __future__ import annotations

from corral.providers.common import process


def test_a_group_that_goes_at_once_is_seen_gone_at_once_and_a_slow_one_costs_few_looks(
    monkeypatch,
):
    group = process.Group(4242, 0.0, "agent")
    looks = {"n": 0}
    now = {"t": 0.0}
    slept: list[float] = []

    def live(groups, since):
        looks["n"] += 1
        return groups if now["t"] < 1.0 else []  # gone one second in

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        now["t"] += seconds

    monkeypatch.setattr(process, "live", live)
    left = process.wait_gone([group], 0.0, 5.0, clock=lambda: now["t"], sleep=sleep)
    assert left == []
    assert slept[:4] == [0.005, 0.01, 0.02, 0.04]  # the first look comes after 5 ms
    assert max(slept) == 0.05 and len(slept) < 30  # then every 50 ms at most
    assert 1.0 <= now["t"] <= 1.05
