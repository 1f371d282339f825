"""Retention and resume-point choice of the HF callback on checkpoint dirs made by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from corral.errors import BadInput

pytest.importorskip("transformers")

from corral.sdk.integrations.hf import (
    CorralCallback,
    complete_checkpoints,
    last_complete_checkpoint,
)


def make_checkpoint(out: Path, step: int, eval_loss: float | None = None, complete=True) -> Path:
    path = out / f"checkpoint-{step}"
    path.mkdir(parents=True)
    (path / "model.safetensors").write_bytes(b"weights")
    if complete:
        history = [{"step": step, "loss": 1.0}]
        if eval_loss is not None:
            history.append({"step": step, "eval_loss": eval_loss})
        (path / "trainer_state.json").write_text(json.dumps({"log_history": history}))
    return path


def names(out: Path) -> list[str]:
    return sorted((p.name for p in out.iterdir()), key=lambda n: int(n.split("-")[1]))


def test_keeps_the_newest_and_the_best_by_metric_and_deletes_the_rest(tmp_path):
    tmp_path = tmp_path / "out"
    tmp_path.mkdir()
    for step, loss in [(10, 0.9), (20, 0.3), (30, 0.5), (40, 0.6), (50, 0.7)]:
        make_checkpoint(tmp_path, step, loss)
    callback = CorralCallback(keep_last=2, keep_best=1, metric="eval_loss")
    deleted = callback.apply_retention(tmp_path)
    assert names(tmp_path) == ["checkpoint-20", "checkpoint-40", "checkpoint-50"]
    assert sorted(p.name for p in deleted) == ["checkpoint-10", "checkpoint-30"]


def test_steps_sort_as_integers(tmp_path):
    tmp_path = tmp_path / "out"
    tmp_path.mkdir()
    for step in (9, 10, 100):
        make_checkpoint(tmp_path, step)
    CorralCallback(keep_last=1).apply_retention(tmp_path)
    assert names(tmp_path) == ["checkpoint-100"]


def test_the_trainers_best_checkpoint_is_kept(tmp_path):
    tmp_path = tmp_path / "out"
    tmp_path.mkdir()
    for step in (1, 2, 3):
        make_checkpoint(tmp_path, step)
    CorralCallback(keep_last=1).apply_retention(tmp_path, best=str(tmp_path / "checkpoint-1"))
    assert names(tmp_path) == ["checkpoint-1", "checkpoint-3"]


def test_incomplete_checkpoints_are_deleted_and_never_resumed_from(tmp_path):
    tmp_path = tmp_path / "out"
    tmp_path.mkdir()
    make_checkpoint(tmp_path, 5)
    make_checkpoint(tmp_path, 6)
    torn = make_checkpoint(tmp_path, 7, complete=False)
    (tmp_path / "checkpoint-8").mkdir()
    (tmp_path / "checkpoint-8" / "trainer_state.json").write_text('{"log_hist')  # cut short
    assert [s for s, _ in complete_checkpoints(tmp_path)] == [5, 6]
    assert last_complete_checkpoint(tmp_path) == str(tmp_path / "checkpoint-6")
    CorralCallback(keep_last=3).apply_retention(tmp_path)
    assert not torn.exists()
    assert names(tmp_path) == ["checkpoint-5", "checkpoint-6"]


def test_no_checkpoint_means_start_fresh(tmp_path):
    tmp_path = tmp_path / "out"
    tmp_path.mkdir()
    assert last_complete_checkpoint(tmp_path / "missing") is None
    assert last_complete_checkpoint(tmp_path) is None


def test_a_checkpoint_without_an_evaluation_at_its_own_step_is_not_ranked_by_an_earlier_one(
    tmp_path,
):
    out = tmp_path / "out"
    make_checkpoint(out, 10, eval_loss=0.1)  # evaluated at step 10: the best so far
    for step in (20, 30, 40):
        # trainer_state.json of a later save carries the whole history, eval at 10 included
        path = make_checkpoint(out, step)
        history = [{"step": 10, "eval_loss": 0.1}, {"step": step, "loss": 1.0}]
        (path / "trainer_state.json").write_text(json.dumps({"log_history": history}))
    CorralCallback(keep_last=1, keep_best=1, metric="eval_loss").apply_retention(out)
    # checkpoint-20/30 must not inherit step 10's eval_loss (a tie that the newer would win)
    assert names(out) == ["checkpoint-10", "checkpoint-40"]


def test_the_checkpoint_just_saved_is_kept_even_below_newer_ones(tmp_path):
    out = tmp_path / "out"
    for step in (4, 10):
        make_checkpoint(out, step)
    make_checkpoint(out, 6)  # saved by a run that resumed from checkpoint-4
    CorralCallback(keep_last=1).apply_retention(out, just_saved=6)
    assert names(out) == ["checkpoint-6", "checkpoint-10"]


def test_callback_retention_comes_from_arguments_then_the_spec_environment(monkeypatch):
    for name in ("KEEP_LAST", "KEEP_BEST", "METRIC", "MODE"):
        monkeypatch.delenv(f"CORRAL_CHECKPOINT_{name}", raising=False)
    plain = CorralCallback()
    assert (plain.keep_last, plain.keep_best, plain.metric, plain.mode) == (3, 0, None, "min")
    monkeypatch.setenv("CORRAL_CHECKPOINT_KEEP_LAST", "2")
    monkeypatch.setenv("CORRAL_CHECKPOINT_KEEP_BEST", "1")
    monkeypatch.setenv("CORRAL_CHECKPOINT_METRIC", "eval_loss")
    monkeypatch.setenv("CORRAL_CHECKPOINT_MODE", "max")
    spec = CorralCallback()
    assert (spec.keep_last, spec.keep_best, spec.metric, spec.mode) == (2, 1, "eval_loss", "max")
    explicit = CorralCallback(keep_last=5, keep_best=0, mode="min")
    assert (explicit.keep_last, explicit.keep_best, explicit.mode) == (5, 0, "min")
    monkeypatch.setenv("CORRAL_CHECKPOINT_KEEP_BEST", "lots")
    with pytest.raises(BadInput, match="CORRAL_CHECKPOINT_KEEP_BEST"):
        CorralCallback()


def _save_event(callback: CorralCallback, out: Path, step: int) -> None:
    from types import SimpleNamespace

    make_checkpoint(out, step)
    args = SimpleNamespace(output_dir=str(out))
    state = SimpleNamespace(
        global_step=step, is_world_process_zero=True, best_model_checkpoint=None
    )
    callback.on_save(args, state, SimpleNamespace())


def test_each_checkpoint_gets_the_resolved_config_as_corral_config_json(tmp_path):
    from dataclasses import dataclass

    from corral.sdk import TrainingConfig, load_config
    from corral.sdk.integrations.hf import CONFIG_FILE

    @dataclass
    class Cfg(TrainingConfig):
        lr: float = 0.1

    out = tmp_path / "out"
    _save_event(CorralCallback(keep_last=5), out, 1)
    assert not (out / "checkpoint-1" / CONFIG_FILE).exists()  # no config loaded: no file

    load_config(Cfg, argv=["--set", "lr=0.25"])
    callback = CorralCallback(keep_last=5)
    for step in (2, 3):
        _save_event(callback, out, step)
        assert json.loads((out / f"checkpoint-{step}" / CONFIG_FILE).read_text()) == {"lr": 0.25}
    _save_event(CorralCallback(keep_last=5, config=Cfg(lr=1.0)), out, 4)
    assert json.loads((out / "checkpoint-4" / CONFIG_FILE).read_text()) == {"lr": 1.0}
