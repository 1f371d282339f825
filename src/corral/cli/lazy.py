"""A rich Console created on first use (importing rich costs ~30 ms a command)."""

from __future__ import annotations

from typing import Any


class LazyConsole:
    def __init__(self, **kwargs: Any):
        self._kwargs = kwargs
        self._console: Any = None

    def _get(self) -> Any:
        if self._console is None:
            from rich.console import Console

            self._console = Console(**self._kwargs)
        return self._console

    def __getattr__(self, name: str) -> Any:
        return getattr(self._get(), name)
