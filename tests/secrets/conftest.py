"""Every test starts and ends with no registered secret values (they are process-wide).

This directory has no ``__init__.py`` on purpose: ``tests/`` is on ``sys.path`` under pytest,
and a ``tests/secrets`` package would shadow the standard library's ``secrets`` module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from corral.secrets import ENV_SECRET_KEY, forget_registered


@pytest.fixture(autouse=True)
def _fresh_redaction(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv(ENV_SECRET_KEY, raising=False)
    forget_registered()
    yield
    forget_registered()
