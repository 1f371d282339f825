"""EC2 spot notices on the node: a node hook (:mod:`corral.wire.node`) that polls the instance
metadata service and stops the attempt gracefully (SIGTERM to the stages, the SDK checkpoints,
SIGKILL after the grace period) as soon as a spot interruption is announced, well inside EC2's
two-minute notice. The AWS provider names it (``userdata.NOTICE_HOOK``) in the node contribution of a spot
offer; the agent loads it by that reference. It imports corral.wire, corral.errors and httpx
only, never corral.agent.

Through IMDSv2:

1. ``PUT /latest/api/token`` (header ``X-aws-ec2-metadata-token-ttl-seconds``) gives a session
   token, reused until shortly before it expires; a 401 drops it and gets a new one.
2. Once: ``GET /latest/meta-data/instance-life-cycle``; ``on-demand`` means no spot notice can
   come, so polling stops (anything else, or no answer, keeps polling).
3. Every 5 s (``CORRAL_NOTICE_INTERVAL_S``): ``GET /latest/meta-data/spot/instance-action``
   (404: nothing scheduled; 200 ``{"action": "terminate"|"stop"|"hibernate", "time": ...}``) and
   ``GET /latest/meta-data/events/recommendations/rebalance`` (404, or 200
   ``{"noticeTime": ...}``).

An interruption notice requests the graceful stop (reason ``EC2 spot interruption notice:
...``; a notice that arrives during setup stops the attempt before its first stage). A
rebalance recommendation - an elevated risk, not a notice - is recorded and shown, but does not
stop the job: a stop on a machine that is not being reclaimed would end the run as STOPPED.
Both show in ``GET /status`` under ``notices``. The metadata service is
``http://169.254.169.254`` unless ``CORRAL_IMDS_URL`` says otherwise (tests point it at a fake).
Only the standard library and httpx are used; nothing here raises into the agent.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import httpx

from corral import __version__
from corral.errors import BadInput
from corral.wire.node import NodeContext, NodeRunner, iso
from corral.wire.outcome import StopCause

ENV_IMDS_URL = "CORRAL_IMDS_URL"
ENV_NOTICE_INTERVAL = "CORRAL_NOTICE_INTERVAL_S"
DEFAULT_IMDS_URL = "http://169.254.169.254"
INTERVAL_S = 5.0
TOKEN_TTL_S = 21600
#: a token is renewed this long before it expires
TOKEN_MARGIN_S = 60.0
USER_AGENT = f"corral-agent/{__version__}"

INSTANCE_ACTION = "meta-data/spot/instance-action"
REBALANCE = "meta-data/events/recommendations/rebalance"
LIFECYCLE = "meta-data/instance-life-cycle"


class ImdsError(Exception):
    """The metadata service could not be asked (unreachable, disabled, bad answer)."""


class Imds:
    """A small IMDSv2 client. ``client``: an injected ``httpx.Client`` (tests, proxies)."""

    def __init__(
        self,
        base_url: str = DEFAULT_IMDS_URL,
        *,
        client: httpx.Client | None = None,
        clock: Callable[[], float] = time.monotonic,
        ttl: int = TOKEN_TTL_S,
        timeout: float = 2.0,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._client = client or httpx.Client(timeout=timeout, trust_env=False)
        self._clock = clock
        self._ttl = ttl
        self._token: str | None = None
        self._expires = 0.0

    def _request(self, method: str, path: str, headers: dict[str, str]) -> httpx.Response:
        try:
            return self._client.request(
                method,
                f"{self.base_url}/latest/{path}",
                headers={"User-Agent": USER_AGENT, **headers},
            )
        except httpx.HTTPError as exc:
            raise ImdsError(f"metadata service unreachable ({type(exc).__name__})") from None

    def token(self) -> str:
        now = self._clock()
        if self._token is None or now >= self._expires - TOKEN_MARGIN_S:
            r = self._request(
                "PUT", "api/token", {"X-aws-ec2-metadata-token-ttl-seconds": str(self._ttl)}
            )
            if r.status_code != 200 or not r.text.strip():
                raise ImdsError(f"metadata token request answered HTTP {r.status_code}")
            self._token, self._expires = r.text.strip(), now + self._ttl
        return self._token

    def get(self, path: str) -> str | None:
        """The text at ``/latest/<path>``; None if it does not exist (404)."""
        for _ in range(2):
            r = self._request("GET", path, {"X-aws-ec2-metadata-token": self.token()})
            if r.status_code == 401:  # expired or revoked: a new token, once
                self._token = None
                continue
            if r.status_code == 404:
                return None
            if r.status_code != 200:
                raise ImdsError(f"GET {path} answered HTTP {r.status_code}")
            return r.text
        raise ImdsError(f"GET {path}: the metadata service refused a fresh token (HTTP 401)")

    def get_json(self, path: str) -> dict[str, Any] | None:
        text = self.get(path)
        if text is None:
            return None
        try:
            value = json.loads(text)
        except ValueError:
            raise ImdsError(f"GET {path}: not JSON") from None
        if not isinstance(value, dict):
            raise ImdsError(f"GET {path}: not a JSON object")
        return value

    def close(self) -> None:
        self._client.close()


class SpotNoticePoller:
    """Polls ``imds`` every ``interval`` seconds; calls ``on_interruption(notice)`` once for
    the first interruption notice and ``on_rebalance(notice)`` once for the first rebalance
    recommendation. ``check()`` is one round (tests call it directly)."""

    def __init__(
        self,
        imds: Imds,
        on_interruption: Callable[[dict[str, Any]], None],
        on_rebalance: Callable[[dict[str, Any]], None] | None = None,
        *,
        interval: float = INTERVAL_S,
        now: Callable[[], float] = time.time,
    ) -> None:
        self.imds = imds
        self.interval = interval
        self._on_interruption = on_interruption
        self._on_rebalance = on_rebalance
        self._now = now
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.lifecycle: str | None = None
        self.interruption: dict[str, Any] | None = None
        self.rebalance: dict[str, Any] | None = None
        self.polls = 0
        self.last_error: str | None = None
        self.active = True

    def check(self) -> None:
        """One round. Never raises: a failure is kept in ``last_error`` for ``status()``."""
        try:
            if self.lifecycle is None:
                self.lifecycle = (self.imds.get(LIFECYCLE) or "").strip() or "unknown"
                if self.lifecycle == "on-demand":
                    self.active = False
                    return
            action = self.imds.get_json(INSTANCE_ACTION)
            rebalance = self.imds.get_json(REBALANCE)
        except ImdsError as exc:
            with self._lock:
                self.last_error = str(exc)
            return
        with self._lock:
            self.polls += 1
            self.last_error = None
            first_action = action is not None and self.interruption is None
            if action is not None and first_action:
                self.interruption = {**action, "noticed_at": iso(self._now())}
            first_rebalance = rebalance is not None and self.rebalance is None
            if rebalance is not None and first_rebalance:
                self.rebalance = {**rebalance, "noticed_at": iso(self._now())}
        if first_action:
            self._on_interruption(dict(self.interruption or {}))
        if first_rebalance and self._on_rebalance is not None:
            self._on_rebalance(dict(self.rebalance or {}))

    def _loop(self) -> None:
        while self.active and not self._stop.is_set():
            self.check()
            if not self.active:
                break
            self._stop.wait(self.interval)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="notice-poller", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.imds.close()

    def status(self) -> dict[str, Any]:
        with self._lock:
            return {
                "poller": "aws",
                "polling": self.active and not self._stop.is_set(),
                "lifecycle": self.lifecycle,
                "interruption": self.interruption,
                "rebalance": self.rebalance,
                "polls": self.polls,
                "error": self.last_error,
            }


class NoticeHook:
    """The attempt hook that runs a :class:`SpotNoticePoller` for the whole life of the agent
    and turns an interruption notice into the runner's graceful stop."""

    name = "notices"

    def __init__(
        self,
        context: NodeContext,
        *,
        environ: Mapping[str, str] | None = None,
        client: httpx.Client | None = None,
    ) -> None:
        env = environ if environ is not None else (context.environ or os.environ)
        url = env.get(ENV_IMDS_URL) or DEFAULT_IMDS_URL
        try:
            interval = float(env.get(ENV_NOTICE_INTERVAL) or INTERVAL_S)
        except ValueError:
            raise BadInput(f"{ENV_NOTICE_INTERVAL} must be a number of seconds") from None
        if interval <= 0:
            raise BadInput(f"{ENV_NOTICE_INTERVAL} must be more than 0")
        self._lock = threading.Lock()
        self._runner: NodeRunner | None = None
        self._reason: str | None = None
        self.poller = SpotNoticePoller(
            Imds(url, client=client), self._interrupted, interval=interval
        )
        self.poller.start()

    def _interrupted(self, notice: dict[str, Any]) -> None:
        reason = (
            f"EC2 spot interruption notice: {notice.get('action', 'terminate')} "
            f"at {notice.get('time', 'an unknown time')}"
        )
        with self._lock:
            self._reason = reason
            runner = self._runner
        if runner is not None:
            runner.request_stop(reason, StopCause.PREEMPTION)

    def before_stages(self, runner: NodeRunner) -> str | None:
        with self._lock:
            self._runner = runner
            reason = self._reason
        if reason is not None:  # the notice came during setup
            runner.request_stop(reason, StopCause.PREEMPTION)
        return None

    def after_stages(self, runner: NodeRunner, phase: str) -> str | None:
        return None

    def status(self) -> dict[str, Any]:
        return {"notices": self.poller.status()}

    def close(self) -> None:
        self.poller.close()
