"""Every number of a spec has an upper bound no real job reaches, named in the error."""

import pytest

from .helpers import load, one

BASE = "name: x\nrun: y\n"


@pytest.mark.parametrize(
    ("section", "field", "message"),
    [
        ("resources: {gpus: 65}", "resources.gpus", "at most 64 GPUs per machine, got 65"),
        (
            "resources: {gpus: 'A100:1..99999999999999999999'}",
            "resources.gpus",
            "at most 64 GPUs per machine, got 99999999999999999999",
        ),
        (
            "resources: {gpus: {min: 1, max: 1000}}",
            "resources.gpus",
            "at most 64 GPUs per machine, got 1000",
        ),
        ("resources: {cpus: 1.0e+300}", "resources.cpus", "must be at most 4096, got 1e+300"),
        (
            "resources: {memory: 100000TB}",
            "resources.memory",
            "must be at most 65536GB, got 102400000GB",
        ),
        ("resources: {disk: 2000TB}", "resources.disk", "must be at most 1048576GB, got 2048000GB"),
        (
            "resources: {max_hourly_price: 5000}",
            "resources.max_hourly_price",
            "must be at most 1000, got 5000",
        ),
        (
            "budget: {max_cost_usd: 1.0e+12}",
            "budget.max_cost_usd",
            "must be at most 1000000, got 1000000000000",
        ),
        (
            "limits: {max_runtime: 1000000d}",
            "limits.max_runtime",
            "must be at most 366d, got 1000000d",
        ),
        (
            "limits: {idle_timeout: 1.0e+300}",
            "limits.idle_timeout",
            "must be at most 366d, got 1e+300s",
        ),
        (
            "notify: {webhooks: [{url: 'https://h', progress_interval: 400d}]}",
            "notify.webhooks[0].progress_interval",
            "must be at most 366d, got 400d",
        ),
        (
            "recovery: {max_preemption_restarts: 1000000000000}",
            "recovery.max_preemption_restarts",
            "must be at most 1000, got 1000000000000",
        ),
        (
            "recovery: {max_error_restarts: 1001}",
            "recovery.max_error_restarts",
            "must be at most 1000, got 1001",
        ),
        (
            "checkpoints: {keep_last: 100000}",
            "checkpoints.keep_last",
            "must be at most 10000, got 100000",
        ),
        (
            "checkpoints: {keep_best: 10001, metric: loss}",
            "checkpoints.keep_best",
            "must be at most 10000, got 10001",
        ),
    ],
)
def test_a_number_past_its_bound_is_refused_naming_the_bound(section, field, message):
    err = one(BASE + section + "\n")
    assert (err["line"], err["field"], err["message"]) == (3, field, message)


def test_stage_gpus_past_a_machine_are_refused_naming_the_bound():
    text = "name: x\nresources: {gpus: 8}\nstages:\n  - {name: a, run: b, gpus: 65}\n"
    assert one(text)["message"] == "at most 64 GPUs per machine, got 65"
    text = "name: x\nresources: {gpus: 8}\nstages:\n  - {name: a, run: b, gpus: [0, 70]}\n"
    assert one(text)["message"] == "GPU index 70 is past the 64 GPUs a machine may have"


def test_numbers_at_their_bounds_are_accepted():
    spec = load(
        BASE
        + "resources: {gpus: 64, cpus: 4096, memory: 64TB, disk: 1024TB, max_hourly_price: 1000}\n"
        + "budget: {max_cost_usd: 1000000}\nlimits: {max_runtime: 366d, idle_timeout: 366d}\n"
        + "recovery: {max_preemption_restarts: 1000, max_error_restarts: 1000}\n"
        + "checkpoints: {keep_last: 10000, keep_best: 10000, metric: loss}\n"
    )
    assert (spec.resources.gpus.max, spec.resources.memory, spec.limits.max_runtime) == (
        64,
        65536.0,
        366 * 86400.0,
    )


def test_a_bound_applies_to_a_set_override_too():
    err = one(BASE, ["recovery.max_error_restarts=5000"])
    assert (err["file"], err["message"]) == ("--set", "must be at most 1000, got 5000")
