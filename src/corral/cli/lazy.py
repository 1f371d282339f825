"""A rich Console created on first use (importing rich costs ~30 ms a command)."""

from __future__ import annotations

from types import TracebackType
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

    # ``with console:`` (rich's Live renders inside one) looks the methods up on the type,
    # past __getattr__: they are passed on here
    def __enter__(self) -> Any:
        return self._get().__enter__()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._get().__exit__(exc_type, exc, tb)
