"""Provider settings from ``<PREFIX><FIELD>`` variables: a bad value names the variable it came
from, or the field when code gave it."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, Field, model_validator

from corral.errors import BadInput
from corral.providers.common.env_settings import read_settings, validated_settings

PREFIX = "CORRAL_TOY_"


class _Toy(BaseModel):
    port: int = Field(80, ge=1)
    zones: list[str] = Field(default_factory=list)
    rate_per_s: float | None = 2.0
    low: int = 0
    high: int = 10

    @model_validator(mode="after")
    def _ordered(self) -> _Toy:
        if self.low > self.high:
            raise ValueError("low must not exceed high")
        return self


def _read(env: dict[str, str], **overrides: object) -> _Toy:
    return read_settings(
        _Toy, env, PREFIX, overrides, what="toy settings", nullable=("rate_per_s",), item=str.upper
    )


def test_values_come_from_the_variables_then_the_overrides() -> None:
    env = {
        "CORRAL_TOY_PORT": "8080",
        "CORRAL_TOY_ZONES": " a, b ,,",
        "CORRAL_TOY_RATE_PER_S": "off",
    }
    assert _read(env) == _Toy(port=8080, zones=["A", "B"], rate_per_s=None)
    assert _read({**env, "CORRAL_TOY_LOW": ""}, port=9) == _Toy(
        port=9, zones=["A", "B"], rate_per_s=None
    )


def test_a_bad_exported_value_names_its_variable() -> None:
    with pytest.raises(BadInput) as err:
        _read({"CORRAL_TOY_PORT": "0"})
    assert str(err.value).startswith("toy settings: CORRAL_TOY_PORT: ")
    assert "\n" not in str(err.value)


def test_a_bad_override_names_its_field_even_over_a_variable() -> None:
    with pytest.raises(BadInput) as err:
        _read({"CORRAL_TOY_PORT": "8080"}, port="x")
    assert str(err.value).startswith("toy settings: port: ")


def test_an_error_of_the_whole_model_names_the_settings() -> None:
    with pytest.raises(BadInput, match=r"^toy settings: settings: .*low must not exceed high"):
        _read({"CORRAL_TOY_LOW": "11"})


def test_validated_settings_names_what_origin_says_else_the_field() -> None:
    origin = {"port": "argument 'port'"}
    with pytest.raises(BadInput, match=r"^toy: argument 'port': "):
        validated_settings(_Toy, {"port": 0}, what="toy", origin=origin)
    with pytest.raises(BadInput, match=r"^toy: low: "):
        validated_settings(_Toy, {"low": "x"}, what="toy", origin=origin)
