"""The store every request uses: the one the app was created with, held for its life."""

from __future__ import annotations

from fastapi import Request

from corral.service.session import Store


def store(request: Request) -> Store:
    held: Store = request.app.state.store
    return held
