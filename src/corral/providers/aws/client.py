"""A thin wrapper around boto3's EC2 (and SSM) clients: one client per region, corral's
User-Agent, bounded retries and timeouts, and every error mapped to a typed corral error
(:mod:`corral.providers.aws.errors`).

The boto3 session is injected (tests pass one bound to a moto server); credentials stay inside
it and never reach a message. ``endpoint_url`` (or boto3's own ``AWS_ENDPOINT_URL``) points the
clients elsewhere than AWS; ``endpoints`` does so for one service (the Price List API, which moto
lacks, is served by a fake of its own in the tests).

Every client validates its parameters against botocore's service model before sending
(``parameter_validation``, botocore's default, set here explicitly: a test fails if it is off),
so a request AWS would refuse as malformed never leaves this machine.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from typing import Any

from corral import __version__
from corral.errors import AuthFailed
from corral.providers.aws.errors import map_error

USER_AGENT = f"corral/{__version__}"


def _config() -> Any:
    from botocore.config import Config

    return Config(
        parameter_validation=True,
        user_agent_extra=USER_AGENT,
        retries={"mode": "standard", "max_attempts": 4},
        connect_timeout=5,
        read_timeout=30,
    )


class Ec2:
    """boto3 clients by region, with errors mapped. ``session``: a ``boto3.Session``."""

    def __init__(
        self,
        session: Any = None,
        endpoint_url: str | None = None,
        endpoints: Mapping[str, str] | None = None,
    ) -> None:
        if session is None:
            import boto3

            session = boto3.Session()
        self.session = session
        self.endpoint_url = endpoint_url
        self.endpoints = dict(endpoints or {})
        self._clients: dict[tuple[str, str], Any] = {}
        self._has_credentials: bool | None = None
        self._lock = threading.Lock()

    @property
    def default_region(self) -> str | None:
        return self.session.region_name

    def check_credentials(self) -> None:
        """:class:`AuthFailed` if the session has no credentials at all (looked up once)."""
        if self._has_credentials is None:
            try:
                self._has_credentials = self.session.get_credentials() is not None
            except Exception:  # a broken profile or credential process
                self._has_credentials = False
        if not self._has_credentials:
            raise AuthFailed(
                "aws: no usable AWS credentials (set AWS_PROFILE, or AWS_ACCESS_KEY_ID and "
                "AWS_SECRET_ACCESS_KEY, or run on a machine with an instance role)"
            )

    def client(self, region: str, service: str = "ec2") -> Any:
        with self._lock:
            c = self._clients.get((service, region))
            if c is None:
                kw: dict[str, Any] = {"region_name": region, "config": _config()}
                url = self.endpoints.get(service) or self.endpoint_url
                if url:
                    kw["endpoint_url"] = url
                c = self.session.client(service, **kw)
                self._clients[(service, region)] = c
            return c

    def call(self, region: str, op: str, service: str = "ec2", **kw: Any) -> dict[str, Any]:
        """``client.<op>(**kw)``; any failure is a :class:`~corral.errors.ProviderError`."""
        try:
            return getattr(self.client(region, service), op)(**kw)
        except Exception as exc:
            raise map_error(exc, op, region) from None

    def pages(
        self, region: str, op: str, key: str, service: str = "ec2", **kw: Any
    ) -> Iterator[dict[str, Any]]:
        """Every item under ``key`` of every page of ``op`` (paginated with ``NextToken``)."""
        try:
            paginator = self.client(region, service).get_paginator(op)
            for page in paginator.paginate(**kw):
                yield from page.get(key, [])
        except Exception as exc:
            raise map_error(exc, op, region) from None

    def instances(self, region: str, **kw: Any) -> list[dict[str, Any]]:
        """Every instance ``describe_instances(**kw)`` returns, flattened."""
        return [
            inst
            for reservation in self.pages(region, "describe_instances", "Reservations", **kw)
            for inst in reservation.get("Instances", [])
        ]
