"""Small helpers shared by the spec tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from corral.errors import SpecError
from corral.spec import JobSpec, load_spec_text

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "specs"


def load(text: str, overrides: tuple[str, ...] | list[str] = (), **kw: Any) -> JobSpec:
    return load_spec_text(text, source="corral.yaml", overrides=overrides, **kw)


def fail(text: str, overrides: tuple[str, ...] | list[str] = ()) -> SpecError:
    """The SpecError that loading ``text`` raises (the test fails if it loads)."""
    with pytest.raises(SpecError) as info:
        load(text, overrides)
    return info.value


def one(text: str, overrides: tuple[str, ...] | list[str] = ()) -> dict[str, Any]:
    """The single error dict of an invalid spec."""
    err = fail(text, overrides)
    assert len(err.errors) == 1, err.errors
    return err.errors[0]
