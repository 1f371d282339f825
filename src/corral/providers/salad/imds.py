"""SaladCloud's Instance Metadata Service, as seen from inside a container
(``shared/providers/salad.md`` §10): ``http://169.254.169.254`` with ``Metadata: true`` on
every request, never through a proxy. Used by the node hook and the boot's shutdown command;
it imports httpx and the standard library only, and never raises anything but
:class:`ImdsError`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx

from corral import __version__

ENV_IMDS_URL = "CORRAL_SALAD_IMDS_URL"
DEFAULT_IMDS_URL = "http://169.254.169.254"
#: SaladCloud's range of a deletion cost
MAX_DELETION_COST = 100000


class ImdsError(Exception):
    """The metadata service could not be asked (not on SaladCloud, unreachable, refused)."""


class Imds:
    def __init__(
        self, base_url: str = DEFAULT_IMDS_URL, *, client: httpx.Client | None = None
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._client = client or httpx.Client(timeout=2.0, trust_env=False)
        self._owns = client is None

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> Imds:
        return cls(environ.get(ENV_IMDS_URL) or DEFAULT_IMDS_URL)

    def __enter__(self) -> Imds:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._owns:
            self._client.close()

    def _call(self, method: str, path: str, body: Any = None) -> httpx.Response:
        try:
            resp = self._client.request(
                method,
                f"{self.base_url}{path}",
                json=body,
                headers={"Metadata": "true", "User-Agent": f"corral-agent/{__version__}"},
            )
        except httpx.HTTPError as exc:
            raise ImdsError(f"unreachable ({type(exc).__name__})") from None
        if not resp.is_success:
            raise ImdsError(f"{method} {path} answered HTTP {resp.status_code}")
        return resp

    def status(self) -> dict[str, Any]:
        """``{"ready": bool, "started": bool}``: the container's probes as SaladCloud sees them."""
        try:
            body = self._call("GET", "/v1/status").json()
        except ValueError:
            raise ImdsError("GET /v1/status: not JSON") from None
        if not isinstance(body, dict):
            raise ImdsError("GET /v1/status: not a JSON object")
        return {"ready": body.get("ready"), "started": body.get("started")}

    def set_deletion_cost(self, cost: int) -> None:
        """How much SaladCloud should prefer keeping this instance when it scales down."""
        cost = max(0, min(MAX_DELETION_COST, int(cost)))
        self._call("PUT", "/v1/deletion-cost", {"deletion_cost": cost})
