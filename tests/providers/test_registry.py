"""The provider registry: names, lazy loading, helpful errors."""

from __future__ import annotations

import pytest

from corral.errors import BadInput
from corral.providers import registry
from corral.providers.base import Provider
from corral.providers.local import LocalProvider


def test_local_is_registered_and_built_with_keyword_arguments(corral_home):
    assert "local" in registry.provider_names()
    assert registry.provider_names() == sorted(registry.provider_names())
    assert registry.provider_class("local") is LocalProvider
    p = registry.get_provider("local", home=corral_home, gpus=[], price_per_hour=1.5)
    assert isinstance(p, LocalProvider) and isinstance(p, Provider)
    assert (p.name, p.price_per_hour, p.gpus) == ("local", 1.5, [])


def test_names_are_matched_without_case_or_surrounding_spaces():
    assert registry.provider_class(" Local ") is LocalProvider


def test_an_unknown_name_is_bad_input_with_a_suggestion():
    with pytest.raises(BadInput, match=r"unknown provider 'locl'; did you mean 'local'\?") as err:
        registry.get_provider("locl")
    assert err.value.fields["known"] == registry.provider_names()
    with pytest.raises(BadInput) as err:
        registry.provider_class("zzzzzz")
    assert (
        "did you mean" not in str(err.value)
        and "local" in str(err.value)
        and "known:" in str(err.value)
    )


def test_every_registered_provider_is_a_provider_subclass_named_as_registered():
    for name in registry.provider_names():
        cls = registry.provider_class(name)
        assert issubclass(cls, Provider) and cls.name == name


def test_an_entry_that_is_not_a_provider_is_refused(monkeypatch):
    monkeypatch.setitem(registry._PROVIDERS, "broken", "corral.paths:home")
    with pytest.raises(Exception, match="is not a Provider class"):
        registry.provider_class("broken")
