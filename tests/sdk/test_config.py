from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import pytest

from corral.errors import BadInput
from corral.sdk import TrainingConfig, apply_overrides, load_config
from corral.sdk.config import config_path, parse_argv


class Act(enum.Enum):
    GELU = "gelu"
    RELU = "relu"


@dataclass
class ModelCfg:
    layers: int = 2
    dropout: float = 0.1
    act: Act = Act.GELU


@dataclass
class OptimCfg:
    name: Literal["adamw", "sgd"] = "adamw"
    betas: tuple[float, float] = (0.9, 0.999)


@dataclass
class Cfg(TrainingConfig):
    lr: float = 1e-3
    steps: int = 100
    fp16: bool = False
    name: str = "run"
    warmup: int | None = None
    tags: list[str] = field(default_factory=list)
    sizes: list[int] = field(default_factory=lambda: [1, 2])
    schedule: dict[str, float] = field(default_factory=dict)
    data_dir: Path = Path("data")
    model: ModelCfg = field(default_factory=ModelCfg)
    optim: OptimCfg = field(default_factory=OptimCfg)


def test_overrides_are_parsed_to_the_field_types():
    cfg = apply_overrides(
        Cfg(),
        [
            "lr=3e-4",
            "steps=2_000",
            "fp16=true",
            "name='big run'",
            "warmup=50",
            "tags=a, b",
            "sizes=[3, 4]",
            'schedule={"decay": 0.5}',
            "data_dir=/data/x",
            "model.layers=4",
            "model.act=relu",
            "optim.name=sgd",
            "optim.betas=[0.8, 0.99]",
        ],
    )
    assert cfg.lr == 3e-4 and isinstance(cfg.lr, float)
    assert cfg.steps == 2000
    assert cfg.fp16 is True
    assert cfg.name == "big run"
    assert cfg.warmup == 50
    assert cfg.tags == ["a", "b"]
    assert cfg.sizes == [3, 4]
    assert cfg.schedule == {"decay": 0.5}
    assert cfg.data_dir == Path("/data/x")
    assert cfg.model.layers == 4 and cfg.model.act is Act.RELU
    assert cfg.optim.name == "sgd" and cfg.optim.betas == (0.8, 0.99)


def test_the_original_config_is_left_unchanged():
    base = Cfg()
    apply_overrides(base, ["model.layers=8", "lr=1"])
    assert base.model.layers == 2 and base.lr == 1e-3


def test_optional_accepts_none_and_null():
    cfg = apply_overrides(Cfg(warmup=10), ["warmup=none"])
    assert cfg.warmup is None
    assert apply_overrides(cfg, ["warmup=null"]).warmup is None


def test_an_int_is_a_valid_float_but_a_float_is_not_an_int():
    assert apply_overrides(Cfg(), ["lr=1"]).lr == 1.0
    with pytest.raises(BadInput, match=r"config key 'steps': expected an integer .* got '3e-4'"):
        apply_overrides(Cfg(), ["steps=3e-4"])


def test_unknown_key_names_the_key_and_suggests_the_closest():
    with pytest.raises(BadInput, match=r"unknown config key 'lrr' \(did you mean 'lr'\?\)"):
        apply_overrides(Cfg(), ["lrr=0.1"])
    with pytest.raises(
        BadInput, match=r"unknown config key 'model.layer' \(did you mean 'model.layers'\?\)"
    ):
        apply_overrides(Cfg(), ["model.layer=3"])


def test_a_scalar_is_not_a_section():
    with pytest.raises(BadInput, match="'lr' is not a section"):
        apply_overrides(Cfg(), ["lr.x=1"])


@pytest.mark.parametrize(
    ("item", "message"),
    [
        ("fp16=maybe", r"'fp16': expected a boolean"),
        ("optim.name=adam", r"'optim.name': expected one of 'adamw', 'sgd'"),
        ("sizes=1,x", r"'sizes': expected an integer"),
        ("model.act=tanh", r"'model.act': expected one of GELU, RELU"),
        ("optim.betas=[1]", r"'optim.betas': expected 2 items"),
        ("schedule=[1]", r"'schedule': expected a JSON object"),
        ("model=3", r"'model': expected ModelCfg"),
    ],
)
def test_wrong_types_are_bad_input_naming_the_key(item, message):
    with pytest.raises(BadInput, match=message):
        apply_overrides(Cfg(), [item])


def test_an_item_without_equals_is_bad_input():
    with pytest.raises(BadInput, match="expected KEY=VALUE"):
        apply_overrides(Cfg(), ["lr"])


def test_a_nested_section_can_be_set_from_json():
    cfg = apply_overrides(Cfg(), ['model={"layers": 6, "act": "relu"}'])
    assert cfg.model == ModelCfg(layers=6, dropout=0.1, act=Act.RELU)
    with pytest.raises(BadInput, match=r"unknown config key 'model\.layerz'"):
        apply_overrides(Cfg(), ['model={"layerz": 6}'])


def test_dict_overrides_take_python_values_and_check_them():
    cfg = apply_overrides(Cfg(), {"lr": 0.5, "model.layers": 3, "tags": ("x",)})
    assert (cfg.lr, cfg.model.layers, cfg.tags) == (0.5, 3, ["x"])
    with pytest.raises(BadInput, match="'steps': expected an integer"):
        apply_overrides(Cfg(), {"steps": 1.5})
    with pytest.raises(BadInput, match="'fp16': expected a boolean"):
        apply_overrides(Cfg(), {"fp16": 1})


def test_to_dict_is_json_ready_and_from_dict_round_trips():
    cfg = apply_overrides(Cfg(), ["model.act=relu", "data_dir=/d"])
    data = cfg.to_dict()
    assert data["model"] == {"layers": 2, "dropout": 0.1, "act": "relu"}
    assert data["data_dir"] == "/d"
    assert Cfg.from_dict(json.loads(json.dumps(data))) == cfg


def test_save_writes_json(tmp_path):
    path = Cfg(lr=0.25).save(tmp_path / "sub" / "config.json")
    assert json.loads(path.read_text())["lr"] == 0.25


def write_experiment(folder: Path, name: str, body: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.py").write_text(body)


def test_experiment_file_overrides_then_argv_overrides(tmp_path):
    exps = tmp_path / "configs" / "experiments"
    write_experiment(exps, "small", 'overrides = {"model.layers": 1, "lr": "3e-4"}\n')
    cfg = load_config(
        Cfg,
        argv=["--experiment", "small", "--set", "lr=0.1", "--other-flag", "x"],
        experiments_dir=exps,
        save=False,
    )
    assert cfg.model.layers == 1
    assert cfg.lr == 0.1  # argv wins over the experiment


def test_experiment_configure_function_is_called_and_type_checked(tmp_path):
    exps = tmp_path / "exps"
    write_experiment(
        exps,
        "deep",
        "def configure(cfg):\n    cfg.model.layers *= 4\n    cfg.tags.append('deep')\n",
    )
    cfg = load_config(Cfg, experiment="deep", experiments_dir=exps, save=False)
    assert cfg.model.layers == 8 and cfg.tags == ["deep"]
    write_experiment(exps, "broken", "def configure(cfg):\n    cfg.steps = 'many'\n")
    with pytest.raises(BadInput, match="experiment 'broken': config key 'steps'"):
        load_config(Cfg, experiment="broken", experiments_dir=exps, save=False)


def test_an_experiment_may_be_a_path_to_a_file(tmp_path):
    path = tmp_path / "mine.py"
    path.write_text('overrides = {"steps": 7}\n')
    assert load_config(Cfg, experiment=str(path), save=False).steps == 7


def test_an_unknown_experiment_lists_the_known_ones(tmp_path):
    exps = tmp_path / "exps"
    write_experiment(exps, "small", "overrides = {}\n")
    with pytest.raises(BadInput, match=r"experiment 'smal' not found.*did you mean 'small'"):
        load_config(Cfg, experiment="smal", experiments_dir=exps, save=False)


def test_an_experiment_with_a_bad_key_names_the_experiment(tmp_path):
    exps = tmp_path / "exps"
    write_experiment(exps, "typo", 'overrides = {"model.layerz": 2}\n')
    with pytest.raises(BadInput, match=r"experiment .typo.: unknown config key .model\.layerz."):
        load_config(Cfg, experiment="typo", experiments_dir=exps, save=False)


def test_load_config_saves_the_resolved_config_next_to_the_checkpoint_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("CORRAL_CHECKPOINT_DIR", str(tmp_path / "run" / "checkpoints"))
    cfg = load_config(Cfg, overrides=["steps=9"], argv=["--set=model.layers=5"])
    assert config_path() == tmp_path / "run" / "config.json"
    saved = json.loads((tmp_path / "run" / "config.json").read_text())
    assert saved == cfg.to_dict()
    assert saved["steps"] == 9 and saved["model"]["layers"] == 5


def test_without_corral_the_config_goes_to_the_local_run_dir(sdk_sandbox):
    load_config(Cfg)
    assert json.loads((sdk_sandbox / "corral-run" / "config.json").read_text())["lr"] == 1e-3


def test_parse_argv_reads_both_flag_forms_and_ignores_the_rest():
    assert parse_argv(["--experiment=x", "--set", "a=1", "--set=b=2", "pos", "--lr", "3"]) == (
        "x",
        ["a=1", "b=2"],
    )
    with pytest.raises(BadInput, match="--set needs a value"):
        parse_argv(["--set"])


def test_a_field_without_default_is_a_clear_error():
    @dataclass
    class NoDefault(TrainingConfig):
        lr: float

    with pytest.raises(BadInput, match="every config field needs a default"):
        load_config(NoDefault, save=False)


def _config_with_a_local_section():
    # This module uses `from __future__ import annotations`, so the annotation "Local" is a
    # string that names a class defined in this function: it cannot be resolved.
    @dataclass
    class Local:
        x: int = 1

    @dataclass
    class Cfg(TrainingConfig):
        lr: float = 0.1
        local: Local = field(default_factory=Local)

    return Cfg


def test_a_field_whose_type_cannot_be_resolved_is_bad_input_naming_it():
    cfg_cls = _config_with_a_local_section()
    with pytest.raises(BadInput, match=r"config key 'local': its type 'Local' cannot be resolved"):
        load_config(cfg_cls, save=False)
    with pytest.raises(BadInput, match=r"config key 'local': its type 'Local' cannot be"):
        apply_overrides(cfg_cls(), {"local": {"x": 2}})


def test_other_fields_stay_type_checked_when_one_type_cannot_be_resolved():
    cfg_cls = _config_with_a_local_section()
    with pytest.raises(BadInput, match=r"config key 'lr': expected a number"):
        apply_overrides(cfg_cls(), ["lr=fast"])
    assert apply_overrides(cfg_cls(), ["lr=0.5", "local.x=3"]).to_dict() == {
        "lr": 0.5,
        "local": {"x": 3},
    }


@dataclass
class BareCfg(TrainingConfig):
    extra: dict = field(default_factory=dict)
    items: list = field(default_factory=list)
    pair: tuple = ()
    words: set[str] = field(default_factory=set)
    anything: dict[str, object] = field(default_factory=dict)


def test_bare_dict_list_and_tuple_fields_take_json_and_comma_lists():
    cfg = apply_overrides(BareCfg(), ['extra={"a": 1, "b": [2]}', "items=a,b", "pair=[1, 2]"])
    assert cfg.extra == {"a": 1, "b": [2]}
    assert cfg.items == ["a", "b"]
    assert cfg.pair == (1, 2)
    assert apply_overrides(BareCfg(), ["items=[1, 2]"]).items == [1, 2]
    with pytest.raises(BadInput, match="'extra': expected a JSON object"):
        apply_overrides(BareCfg(), ["extra=[1]"])


def test_strings_inside_json_keep_their_type():
    cfg = apply_overrides(BareCfg(), ['anything={"id": "123", "flag": "true"}'])
    assert cfg.anything == {"id": "123", "flag": "true"}


def test_a_config_with_a_set_field_is_saved_as_a_sorted_list(tmp_path):
    cfg = apply_overrides(BareCfg(), ["words=b,a,c"])
    assert cfg.words == {"a", "b", "c"}
    assert cfg.to_dict()["words"] == ["a", "b", "c"]
    saved = json.loads(cfg.save(tmp_path / "config.json").read_text())
    assert BareCfg.from_dict(saved) == cfg


@dataclass
class WideModel:
    layers: int = 2
    width: int = 64


@dataclass
class TunedCfg(TrainingConfig):
    model: WideModel = field(default_factory=lambda: WideModel(layers=12, width=512))


def test_a_partial_section_changes_only_the_fields_it_names():
    cfg = apply_overrides(TunedCfg(), ['model={"width": 256}'])
    assert cfg.model == WideModel(layers=12, width=256)
    cfg = apply_overrides(TunedCfg(), ["model.layers=4", 'model={"width": 128}'])
    assert cfg.model == WideModel(layers=4, width=128)
    assert TunedCfg.from_dict({"model": {"width": 8}}).model == WideModel(layers=12, width=8)
    with pytest.raises(BadInput, match=r"unknown config key 'model.widht' \(did you mean"):
        apply_overrides(TunedCfg(), ['model={"widht": 1}'])


def test_configure_putting_the_wrong_section_type_in_a_field_is_bad_input(tmp_path):
    exps = tmp_path / "exps"
    write_experiment(exps, "swap", "def configure(cfg):\n    cfg.model = cfg.optim\n")
    with pytest.raises(BadInput, match="experiment 'swap': config key 'model': expected ModelCfg"):
        load_config(Cfg, experiment="swap", experiments_dir=exps, save=False)
    write_experiment(exps, "section", "def configure(cfg):\n    cfg.lr = cfg.model\n")
    with pytest.raises(BadInput, match="experiment 'section': config key 'lr': expected a number"):
        load_config(Cfg, experiment="section", experiments_dir=exps, save=False)
