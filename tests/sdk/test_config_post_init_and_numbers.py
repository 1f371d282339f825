"""Config edge cases found in review: whole numbers in scientific notation for int fields,
``__post_init__`` seeing the overrides, and experiment ``configure()`` mistakes as BadInput."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from corral.errors import BadInput
from corral.sdk import TrainingConfig, apply_overrides, load_config


@dataclass
class Model:
    layers: int = 2
    width: int = 64
    params: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        self.params = self.layers * self.width


@dataclass
class Cfg(TrainingConfig):
    lr: float = 1e-3
    steps: int = 100
    batch: int = 32
    accum: int = 1
    mix: int | float = 1
    effective_batch: int = field(init=False, default=0)
    model: Model = field(default_factory=Model)

    def __post_init__(self) -> None:
        if self.lr <= 0:
            raise ValueError(f"lr must be positive, got {self.lr}")
        self.effective_batch = self.batch * self.accum


@dataclass
class Plain(TrainingConfig):
    steps: int = 100
    lr: float = 1e-3
    model: Model = field(default_factory=Model)


def write_experiment(folder: Path, name: str, body: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.py").write_text(body)


@pytest.mark.parametrize(
    ("text", "expected"), [("1e5", 100_000), ("2.5e3", 2500), ("1E3", 1000), ("-1e2", -100)]
)
def test_a_whole_number_in_scientific_notation_sets_an_int_field(text, expected):
    cfg = apply_overrides(Plain(), [f"steps={text}"])
    assert cfg.steps == expected and type(cfg.steps) is int


@pytest.mark.parametrize("text", ["3e-4", "1.5", "100.0", "nan", "inf", "1e"])
def test_a_fraction_or_plain_decimal_is_still_not_an_integer(text):
    with pytest.raises(BadInput, match="config key 'steps': expected an integer"):
        apply_overrides(Plain(), [f"steps={text}"])


def test_an_experiment_file_may_write_steps_as_1e5(tmp_path):
    exps = tmp_path / "exps"
    write_experiment(exps, "long", 'overrides = {"steps": 1e5, "lr": 3}\n')
    cfg = load_config(Plain, experiment="long", experiments_dir=exps, save=False)
    assert cfg.steps == 100_000 and type(cfg.steps) is int
    assert cfg.lr == 3.0 and type(cfg.lr) is float
    write_experiment(exps, "frac", 'overrides = {"steps": 2.5}\n')
    with pytest.raises(BadInput, match="config key 'steps': expected an integer"):
        load_config(Plain, experiment="frac", experiments_dir=exps, save=False)


def test_numpy_numbers_from_an_experiment_file_are_accepted():
    np = pytest.importorskip("numpy")
    cfg = apply_overrides(Plain(), {"steps": np.int64(7), "lr": np.float32(0.5)})
    assert cfg.steps == 7 and type(cfg.steps) is int
    assert cfg.lr == 0.5 and type(cfg.lr) is float


def test_a_python_float_in_an_int_or_float_field_stays_a_float():
    cfg = apply_overrides(Cfg(), {"mix": 2.0})
    assert cfg.mix == 2.0 and type(cfg.mix) is float
    assert type(apply_overrides(Cfg(), ["mix=2.0"]).mix) is float
    assert type(apply_overrides(Cfg(), ["mix=2"]).mix) is int


def test_post_init_derives_from_the_overridden_values_not_the_defaults():
    cfg = apply_overrides(Cfg(), ["batch=64", "accum=4", "model.layers=10"])
    assert cfg.effective_batch == 256
    assert cfg.model.params == 640
    loaded = load_config(Cfg, argv=["--set", "accum=2", "--set", "model.width=8"], save=False)
    assert loaded.effective_batch == 64 and loaded.model.params == 16


def test_post_init_sees_the_experiment_and_the_argv_values(tmp_path):
    exps = tmp_path / "exps"
    write_experiment(exps, "big", 'overrides = {"batch": 128}\n')
    cfg = load_config(
        Cfg, experiment="big", experiments_dir=exps, argv=["--set", "accum=2"], save=False
    )
    assert cfg.effective_batch == 256


def test_a_check_in_post_init_rejects_an_override_as_bad_input():
    with pytest.raises(BadInput, match=r"config Cfg: ValueError: lr must be positive, got -0\.1"):
        apply_overrides(Cfg(), ["lr=-0.1"])
    with pytest.raises(BadInput, match="lr must be positive"):
        load_config(Cfg, argv=["--set", "lr=0"], save=False)


def test_a_field_computed_in_post_init_cannot_be_set():
    with pytest.raises(BadInput, match="config key 'effective_batch' is computed"):
        apply_overrides(Cfg(), ["effective_batch=3"])
    with pytest.raises(BadInput, match=r"config key 'model\.params' is computed"):
        apply_overrides(Cfg(), {"model.params": 3})


def test_the_saved_config_and_from_dict_carry_the_derived_values(sdk_sandbox):
    cfg = load_config(Cfg, argv=["--set", "accum=8"])
    saved = json.loads((sdk_sandbox / "corral-run" / "config.json").read_text())
    assert saved["effective_batch"] == 256
    assert Cfg.from_dict({"batch": 2, "accum": 3}).effective_batch == 6
    assert cfg.effective_batch == 256


def test_a_typo_in_configure_is_bad_input_not_silently_ignored(tmp_path):
    exps = tmp_path / "exps"
    write_experiment(exps, "typo", "def configure(cfg):\n    cfg.lrr = 1e-4\n")
    with pytest.raises(BadInput, match=r"experiment 'typo': .*unknown config key 'lrr'.*'lr'"):
        load_config(Plain, experiment="typo", experiments_dir=exps, save=False)
    write_experiment(exps, "deep", "def configure(cfg):\n    cfg.model.layres = 8\n")
    with pytest.raises(BadInput, match=r"unknown config key 'model.layres'.*'model.layers'"):
        load_config(Plain, experiment="deep", experiments_dir=exps, save=False)


def test_an_exception_in_configure_is_bad_input_naming_the_experiment(tmp_path):
    exps = tmp_path / "exps"
    write_experiment(exps, "boom", "def configure(cfg):\n    cfg.modle.layers = 3\n")
    with pytest.raises(
        BadInput, match=r"experiment 'boom': configure\(\) failed: AttributeError: .*modle"
    ) as info:
        load_config(Plain, experiment="boom", experiments_dir=exps, save=False)
    assert isinstance(info.value.__cause__, AttributeError)  # the traceback is kept


def test_an_experiment_file_may_define_dataclasses_under_future_annotations(tmp_path):
    exps = tmp_path / "exps"
    write_experiment(
        exps,
        "sub",
        "from __future__ import annotations\n"
        "import sys\n"
        "from dataclasses import dataclass\n"
        f"Model = sys.modules[{Model.__module__!r}].Model\n\n"
        "@dataclass\n"
        "class Wide(Model):\n"
        "    width: int = 1024\n\n"
        "def configure(cfg):\n"
        "    cfg.model = Wide()\n",
    )
    cfg = load_config(Plain, experiment="sub", experiments_dir=exps, save=False)
    assert cfg.model.width == 1024 and cfg.model.params == 2048
