"""Recovery strategies, registered by name (``recovery.strategy`` in the spec).

A strategy orders the available offers for the next attempt of a run that is recovering,
given the run's earlier attempts. It never launches anything; ``launching`` tries the offers
in the order returned, falling back down the list on ``NoCapacity``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, ClassVar

from corral.errors import BadInput
from corral.providers.base import Offer
from corral.store.records import AttemptRecord


def _same(offer: Offer, previous: dict[str, Any]) -> bool:
    return (
        offer.provider == previous.get("provider")
        and offer.offer_id == previous.get("offer_id")
        and offer.region == previous.get("region")
    )


class RecoveryStrategy(ABC):
    name: ClassVar[str]

    @abstractmethod
    def order(self, offers: list[Offer], attempts: Sequence[AttemptRecord]) -> list[Offer]:
        """The offers to try, best first. ``offers`` come sorted cheapest first;
        ``attempts`` are the run's earlier attempts, oldest first."""


class SameOffer(RecoveryStrategy):
    """Come back on the offer the last attempt ran on when it is available (same provider,
    region and machine type: a spot market that just reclaimed a machine often has another),
    else the cheapest available one."""

    name = "same-offer"

    def order(self, offers: list[Offer], attempts: Sequence[AttemptRecord]) -> list[Offer]:
        last = next((a.offer for a in reversed(attempts) if a.offer and a.instance_id), None)
        if not last:
            return list(offers)
        same = [o for o in offers if _same(o, last)]
        return same + [o for o in offers if not _same(o, last)]


class NextCheapest(RecoveryStrategy):
    """Avoid where the last attempt was preempted: the cheapest available offer in another
    region, or on another machine where a provider names its machines (``details["machine"]``);
    the preempted region or machine only as a last resort."""

    name = "next-cheapest"

    def order(self, offers: list[Offer], attempts: Sequence[AttemptRecord]) -> list[Offer]:
        last = next((a for a in reversed(attempts) if a.offer and a.instance_id), None)
        if last is None:
            return list(offers)
        prev = last.offer

        prev_machine = (prev.get("details") or {}).get("machine")

        def avoided(o: Offer) -> bool:
            if o.provider != prev.get("provider"):
                return False
            if prev_machine is not None:  # the provider names machines: avoid that one
                return o.details.get("machine") == prev_machine
            return o.region == prev.get("region")

        return [o for o in offers if not avoided(o)] + [o for o in offers if avoided(o)]


STRATEGIES: dict[str, type[RecoveryStrategy]] = {s.name: s for s in (SameOffer, NextCheapest)}


def get_strategy(name: str) -> RecoveryStrategy:
    try:
        return STRATEGIES[name]()
    except KeyError:
        raise BadInput(
            f"unknown recovery strategy {name!r} (known: {', '.join(sorted(STRATEGIES))})"
        ) from None
