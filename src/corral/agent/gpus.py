"""Hands out this node's GPUs to stages so that no two running stages share one.

Indices in a plan are logical: index ``i`` is ``devices[i]``, the i-th physical GPU id given
to this instance. A request is a count (any free GPUs, lowest indices first), explicit
indices, or ``"all"``; ``0`` asks for none. Requests are all-or-nothing: a stage gets every
GPU it asked for at once, or none and waits.
"""

from __future__ import annotations

from typing import Literal

GpuRequest = int | list[int] | Literal["all"]


class GpuPool:
    def __init__(self, devices: list[str]):
        self.devices = list(devices)
        self._holder: dict[int, str] = {}

    def problem(self, name: str, request: GpuRequest) -> str | None:
        """Why ``request`` can never be met on this node, or None if it can."""
        n = len(self.devices)
        if isinstance(request, list):
            bad = [i for i in request if i < 0 or i >= n]
            if bad:
                return f"stage {name!r} asks for GPU index {bad[0]} but this node has {n} GPU(s)"
            if len(set(request)) != len(request):
                return f"stage {name!r} lists a GPU index twice"
        elif isinstance(request, int) and request > n:
            return f"stage {name!r} needs {request} GPU(s) but this node has {n}"
        elif isinstance(request, int) and request < 0:
            return f"stage {name!r} asks for a negative number of GPUs"
        return None

    def free(self) -> list[int]:
        return [i for i in range(len(self.devices)) if i not in self._holder]

    def try_acquire(self, name: str, request: GpuRequest) -> list[int] | None:
        """Take the GPUs ``request`` names for stage ``name``; None if they are not all free."""
        free = self.free()
        if request == "all":
            wanted = list(range(len(self.devices)))
        elif isinstance(request, list):
            wanted = list(request)
        else:
            if len(free) < request:
                return None
            wanted = free[:request]
        if any(i in self._holder for i in wanted):
            return None
        for i in wanted:
            self._holder[i] = name
        return wanted

    def release(self, name: str) -> None:
        self._holder = {i: s for i, s in self._holder.items() if s != name}

    def physical(self, logical: list[int]) -> list[str]:
        return [self.devices[i] for i in logical]
