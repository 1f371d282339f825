"""Notifications: signed webhooks fed from the store's events (see ``docs/webhooks.md``).

Importing this package is cheap (standard library only); the dispatcher loads on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from corral.notify.signing import SignatureInvalid, sign, verify

if TYPE_CHECKING:
    from corral.notify.dispatcher import Dispatcher

__all__ = ["Dispatcher", "SignatureInvalid", "sign", "verify"]


def __getattr__(name: str) -> Any:
    if name == "Dispatcher":
        from corral.notify.dispatcher import Dispatcher

        return Dispatcher
    raise AttributeError(name)
