"""The fake provider: a spot cloud simulated on this machine (offers, prices, capacity, launch
delay, scheduled or random preemptions with a notice), running corral's agent for real."""

from corral.providers.fake.cloud import (
    DEFAULT_CATALOG,
    ENV_FAKE_CLOUD,
    CatalogEntry,
    FakeCloud,
    ScheduledPreemption,
    load_cloud,
)
from corral.providers.fake.market import preemption_at
from corral.providers.fake.provider import FakeProvider

__all__ = [
    "DEFAULT_CATALOG",
    "ENV_FAKE_CLOUD",
    "CatalogEntry",
    "FakeCloud",
    "FakeProvider",
    "ScheduledPreemption",
    "load_cloud",
    "preemption_at",
]
