"""A provider capability kept beside ``base.py``: the status of every machine in one call."""

from __future__ import annotations

from corral.providers.base import InstanceStatus


class SupportsStatusListing:
    """The status of every machine it holds for corral in one call (one listing), so the
    controller asks once for many runs instead of once per run (``control.census``)."""

    def statuses(self) -> dict[str, InstanceStatus]:  # pragma: no cover - interface
        """Launch key -> status, as :meth:`Provider.status` gives it, of every machine the
        provider holds for corral now. A machine missing from it is asked for alone."""
        raise NotImplementedError
