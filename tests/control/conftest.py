"""Fixtures of the controller's tests."""

from __future__ import annotations

from .standinkit import standin

__all__ = ["standin"]
