"""``corral estimate`` per stage: each stage's hours from its ``expected_runtime``, else from
its own time in earlier runs of the same spec, else unknown; their cost on the offer a launch
would take; the longest chain of ``needs`` as the run's hours when nothing else gives them."""

from __future__ import annotations

from pathlib import Path

import pytest

from corral.errors import EXIT_BAD_INPUT, BadInput
from corral.service.estimate import estimate_cost
from corral.service.stage_estimate import longest_chain, stage_estimates
from corral.spec import load_spec, spec_hash
from corral.store import Store

from .cli import run, run_json, write_spec

PIPELINE = """
    name: pipe
    resources: {gpus: "A100:1"}
    stages:
      - {name: prep, run: echo prep}
      - {name: train, run: echo train, needs: prep}
"""


def earlier_run(
    store: Store, path: str, stages: dict[str, list[tuple[str, float]]], *, spec_of: str = ""
) -> str:
    """A run of the spec at ``path`` (or of ``spec_of``'s) whose stages ended as given: per
    stage, one ``(state, seconds)`` per attempt, as the agent's ``stage.finished`` events."""
    spec = load_spec(spec_of or path, [])
    run_ = store.create_run(
        name=spec.name,
        spec=spec.model_dump(mode="json"),
        spec_hash=spec_hash(spec),
        spec_path=path,
        workdir=str(spec.workdir),
    )
    for name, ends in stages.items():
        for attempt, (state, seconds) in enumerate(ends, start=1):
            data = {"stage": name, "state": state, "exit_code": 0, "duration_s": seconds}
            store.add_event(run_.id, "stage.finished", data=data, attempt=attempt)
    return run_.id


def test_each_stage_is_priced_from_its_own_time_in_earlier_runs_of_the_spec(
    cloud, tmp_path: Path
) -> None:
    path = write_spec(tmp_path, PIPELINE)
    store = Store.open()
    earlier_run(store, path, {"prep": [("succeeded", 1800)], "train": [("succeeded", 7200)]})
    earlier_run(store, path, {"prep": [("succeeded", 3600)], "train": [("succeeded", 10800)]})
    # preempted once and resumed: the stage's time is what it ran on both machines
    earlier_run(
        store,
        path,
        {"prep": [("succeeded", 2700)], "train": [("preempted", 3600), ("succeeded", 5400)]},
    )
    # a stage that failed says nothing about how long it takes
    earlier_run(store, path, {"prep": [("succeeded", 2700)], "train": [("failed", 60)]})
    # another spec's run is not this one's history
    (tmp_path / "other").mkdir()
    other = write_spec(tmp_path / "other", PIPELINE.replace("echo train", "echo other"))
    earlier_run(store, path, {"train": [("succeeded", 99999)]}, spec_of=other)

    found = estimate_cost(path, store=store)
    prep, train = found.stages
    assert (prep.name, prep.hours, prep.hours_from, prep.runs) == ("prep", 0.75, "earlier_runs", 4)
    assert (train.name, train.needs, train.hours, train.runs) == ("train", ["prep"], 2.5, 3)
    # priced on the offer a launch would take (fake us-east A100 spot, $0.5/h)
    assert found.chosen is not None and found.chosen.price_per_hour == 0.5
    assert (prep.cost_usd, train.cost_usd) == (0.375, 1.25)
    # no --hours, no limits.max_runtime: the run's hours are the stages' chain
    assert (found.hours, found.hours_from) == (3.25, "stages")
    assert (found.stages_hours, found.stages_cost_usd) == (3.25, 1.625)
    assert found.chosen.cost_usd == 1.625


def test_the_spec_s_expected_runtime_wins_and_an_unknown_stage_leaves_the_total_unknown(
    cloud, tmp_path: Path
) -> None:
    body = PIPELINE.replace(
        "{name: prep, run: echo prep}", "{name: prep, run: echo prep, expected_runtime: 30m}"
    )
    path = write_spec(tmp_path, body)
    store = Store.open()
    earlier_run(store, path, {"prep": [("succeeded", 7200)]})
    found = estimate_cost(path, hours=4, store=store)
    prep, train = found.stages
    assert (prep.hours, prep.hours_from, prep.cost_usd) == (0.5, "spec", 0.25)
    assert (train.hours, train.hours_from, train.cost_usd) == (None, "unknown", None)
    assert (found.hours, found.hours_from) == (4.0, "--hours")
    assert found.stages_hours is None and found.stages_cost_usd is None
    with pytest.raises(BadInput, match=r"stages' times are not all known.*--hours"):
        estimate_cost(path, store=store)


def test_stages_that_need_nothing_run_at_once_so_the_chain_is_the_longest_path(
    tmp_path: Path,
) -> None:
    body = """
        name: dag
        stages:
          - {name: a, run: echo, expected_runtime: 1h}
          - {name: b, run: echo, expected_runtime: 3h}
          - {name: c, run: echo, needs: [a, b], expected_runtime: 2h}
          - {name: d, run: echo, needs: a, expected_runtime: 30m}
    """
    spec = load_spec(write_spec(tmp_path, body), [])
    stages = stage_estimates(spec, {}, 2.0)
    assert [s.cost_usd for s in stages] == [2.0, 6.0, 4.0, 1.0]
    assert longest_chain(stages) == 5.0  # b then c


def test_the_table_shows_each_stage_under_the_offers_and_json_has_them(
    cloud, tmp_path: Path
) -> None:
    path = write_spec(tmp_path, PIPELINE)
    store = Store.open()
    for _ in range(2):
        earlier_run(store, path, {"prep": [("succeeded", 1800)], "train": [("succeeded", 7200)]})
    code, out, err = run("estimate", path)
    assert code == 0, err
    assert "pipe: 2.5 h (stages)" in out  # the header line's hours
    lines = {line.split()[0]: line for line in out.splitlines() if line.strip()}
    assert (
        "0.50" in lines["prep"] and "2 earlier runs" in lines["prep"] and "$0.25" in lines["prep"]
    )
    assert "2.00" in lines["train"] and "$1.00" in lines["train"]
    assert "longest chain of needs: 2.50 h: $1.25" in out
    data = run_json("estimate", path)
    assert [(s["name"], s["hours_from"], s["runs"]) for s in data["stages"]] == [
        ("prep", "earlier_runs", 2),
        ("train", "earlier_runs", 2),
    ]
    assert (data["stages_hours"], data["stages_cost_usd"]) == (2.5, 1.25)


def test_a_bad_expected_runtime_is_a_one_line_error(cloud, tmp_path: Path) -> None:
    body = PIPELINE.replace("echo prep}", "echo prep, expected_runtime: soon}")
    code, _, err = run("estimate", write_spec(tmp_path, body), "--hours", "1")
    assert code == EXIT_BAD_INPUT
    assert "expected_runtime" in err and len(err.strip().splitlines()) == 1, err
