"""Exact resume: N steps straight == N/2 steps, preempt, restore, N/2 more (bitwise)."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
import torch

from corral.sdk import (
    Checkpointer,
    CostMeter,
    capture_rng_state,
    restore_rng_state,
    restore_training_state,
    training_state,
)
from corral.sdk.checkpoint import CheckpointError

N = 24  # steps; 40 samples in batches of 8 -> 5 batches per epoch, so epochs roll over
SAMPLES, BATCH = 40, 8


class ShuffledBatches:
    """A DataLoader-like sampler: a seeded shuffle per epoch; its position is (epoch, batch)."""

    def __init__(self, n: int, batch: int, seed: int):
        self.n, self.batch, self.seed = n, batch, seed
        self.epoch, self.index = 0, 0

    def next_indices(self) -> torch.Tensor:
        if self.index * self.batch >= self.n:
            self.epoch, self.index = self.epoch + 1, 0
        order = torch.randperm(
            self.n, generator=torch.Generator().manual_seed(self.seed + self.epoch)
        )
        out = order[self.index * self.batch : (self.index + 1) * self.batch]
        self.index += 1
        return out

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "index": self.index}

    def load_state_dict(self, state: dict) -> None:
        self.epoch, self.index = state["epoch"], state["index"]


def build(seed: int):
    torch.manual_seed(seed)
    random.seed(seed)
    np.random.seed(seed)
    model = torch.nn.Sequential(
        torch.nn.Linear(6, 32), torch.nn.ReLU(), torch.nn.Dropout(0.3), torch.nn.Linear(32, 1)
    )
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=0.01, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=5, gamma=0.7)
    scaler = torch.amp.GradScaler("cpu", init_scale=256.0, growth_interval=3)
    return model, opt, sched, scaler, ShuffledBatches(SAMPLES, BATCH, seed=7)


DATA_X = torch.linspace(-1, 1, SAMPLES * 6).reshape(SAMPLES, 6)
DATA_Y = DATA_X.sum(dim=1, keepdim=True).sin()


def train(model, opt, sched, scaler, sampler, steps: range) -> None:
    for _ in steps:
        idx = sampler.next_indices()
        noise = torch.randn(len(idx), 1) * 0.01 + random.random() * 1e-3 + np.random.rand() * 1e-3
        loss = torch.nn.functional.mse_loss(model(DATA_X[idx]), DATA_Y[idx] + noise)
        opt.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        sched.step()


def straight_run():
    model, opt, sched, scaler, sampler = build(seed=0)
    train(model, opt, sched, scaler, sampler, range(N))
    return model, opt


def interrupted_run(tmp_path: Path, *, drop_rng: bool = False):
    model, opt, sched, scaler, sampler = build(seed=0)
    train(model, opt, sched, scaler, sampler, range(N // 2))
    cp = Checkpointer(tmp_path / "ck")
    state = training_state(
        model, opt, sched, scaler, step=N // 2, epoch=sampler.epoch, data_position=sampler,
        loop={"tokens": 123}, cost_usd=0.5, elapsed_s=12.0, best_metric=0.1, config={"lr": 0.01},
    )  # fmt: skip
    cp.save(state, N // 2)
    cp.wait()
    del model, opt, sched, scaler, sampler, state, cp  # "preempted": the process is gone

    model, opt, sched, scaler, sampler = build(seed=999)  # a new process, other random state
    state = Checkpointer(tmp_path / "ck").restore()
    if drop_rng:
        del state["rng"]
    info = restore_training_state(state, model, opt, sched, scaler)
    sampler.load_state_dict(info["data_position"])
    assert info["step"] == N // 2
    assert info["loop"] == {"tokens": 123} and info["config"] == {"lr": 0.01}
    assert (info["cost_usd"], info["elapsed_s"], info["best_metric"]) == (0.5, 12.0, 0.1)
    train(model, opt, sched, scaler, sampler, range(info["step"], N))
    return model, opt


@pytest.mark.torch
def test_resumed_torch_run_is_bitwise_identical_to_a_straight_run(tmp_path: Path):
    straight, straight_opt = straight_run()
    resumed, resumed_opt = interrupted_run(tmp_path)
    for a, b in zip(straight.parameters(), resumed.parameters(), strict=True):
        assert torch.equal(a, b)
    sa, sb = straight_opt.state_dict(), resumed_opt.state_dict()
    assert sa["param_groups"] == sb["param_groups"]
    for key in sa["state"]:
        for name in ("exp_avg", "exp_avg_sq", "step"):
            assert torch.equal(sa["state"][key][name], sb["state"][key][name])


@pytest.mark.torch
def test_resume_without_the_rng_state_diverges(tmp_path: Path):
    """The control: the bitwise test above can fail (dropout and noise draw from the RNGs)."""
    straight, _ = straight_run()
    resumed, _ = interrupted_run(tmp_path, drop_rng=True)
    assert not all(
        torch.equal(a, b) for a, b in zip(straight.parameters(), resumed.parameters(), strict=True)
    )


def numpy_train(model: dict, loop: dict, steps: range) -> None:
    """Linear regression with momentum SGD, dropout-like masks and a python-random shuffle."""
    x = np.linspace(-1, 1, 60).reshape(20, 3)
    y = x @ np.array([0.5, -1.0, 2.0]) + 0.3
    for _ in steps:
        if loop["pos"] >= len(loop["order"]):
            loop["order"] = list(range(20))
            random.shuffle(loop["order"])
            loop["pos"], loop["epoch"] = 0, loop["epoch"] + 1
        idx = loop["order"][loop["pos"] : loop["pos"] + 4]
        loop["pos"] += 4
        mask = (np.random.rand(3) > 0.2) / 0.8
        pred = x[idx] @ (model["w"] * mask) + model["b"]
        err = pred - y[idx]
        grad_w = x[idx].T @ err / len(idx) * mask
        model["m"] = 0.9 * model["m"] + grad_w
        model["w"] -= 0.1 * model["m"]
        model["b"] -= 0.1 * err.mean(keepdims=True)


def test_resumed_numpy_run_is_bitwise_identical_without_torch_state(tmp_path: Path):
    def fresh(seed: int):
        random.seed(seed)
        np.random.seed(seed)
        model = {"w": np.random.rand(3), "b": np.zeros(1), "m": np.zeros(3)}
        return model, {"order": [], "pos": 0, "epoch": -1}

    straight, loop = fresh(1)
    numpy_train(straight, loop, range(30))

    model, loop = fresh(1)
    numpy_train(model, loop, range(15))
    cp = Checkpointer(tmp_path / "ck", keep_last=1)
    cp.save(training_state(model, step=15, data_position=loop), 15)
    cp.wait()
    model, _ = fresh(5)
    w_array = model["w"]
    info = restore_training_state(Checkpointer(tmp_path / "ck").restore(), model)
    assert model["w"] is w_array  # arrays are updated in place
    numpy_train(model, info["data_position"], range(info["step"], 30))
    for key in straight:
        assert np.array_equal(straight[key], model[key]), key


def test_rng_state_round_trip_replays_the_same_numbers():
    random.seed(1)
    np.random.seed(1)
    torch.manual_seed(1)
    saved = capture_rng_state()
    first = (random.random(), np.random.rand(), torch.rand(1).item())
    random.seed(2)
    np.random.seed(2)
    torch.manual_seed(2)
    restore_rng_state(saved)
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == first


def test_training_state_accepts_a_cost_meter_and_a_dataclass_config():
    from dataclasses import dataclass

    @dataclass
    class Cfg:
        lr: float = 0.1

    meter = CostMeter(hourly_price=3600.0, offset_usd=2.0, clock=lambda: 10.0)
    state = training_state({"w": np.zeros(1)}, step=3, cost_usd=meter, config=Cfg())
    assert state["cost_usd"] == 2.0 and state["config"] == {"lr": 0.1}


def test_restore_training_state_rejects_foreign_or_incomplete_state():
    model = torch.nn.Linear(1, 1)
    with pytest.raises(CheckpointError, match="not a training state"):
        restore_training_state({"model": {}}, model)
    state = training_state(model, step=1)
    with pytest.raises(CheckpointError, match="no optimizer state"):
        restore_training_state(state, model, torch.optim.SGD(model.parameters(), lr=0.1))


def test_training_state_stores_the_config_load_config_returned_unless_given_one(tmp_path):
    from dataclasses import dataclass

    from corral.sdk import Checkpointer, TrainingConfig, load_config

    @dataclass
    class Cfg(TrainingConfig):
        lr: float = 0.1
        steps: int = 10

    assert training_state({"w": np.zeros(1)}, step=0)["config"] is None  # nothing loaded yet
    cfg = load_config(Cfg, argv=["--set", "lr=0.5"], save=False)
    cfg.steps = 99  # a later change to the script's object is not the resolved config
    cp = Checkpointer(tmp_path / "ck", async_save=False)
    cp.save(training_state({"w": np.zeros(1)}, step=1), 1)
    info = restore_training_state(cp.restore(), {"w": np.zeros(1)})
    assert info["config"] == {"lr": 0.5, "steps": 10}
    explicit = training_state({"w": np.zeros(1)}, step=2, config={"lr": 1.0})
    assert explicit["config"] == {"lr": 1.0}
