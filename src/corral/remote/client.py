"""An HTTP client of ``corral server`` returning the service's views.

Errors come back as :class:`RemoteError`: the server's message and code, with the exit code
the same error has in a local CLI (a missing run exits 3 either way). A server that cannot be
reached is one line naming it, exit code 6.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx

from corral.errors import EXIT_BAD_INPUT, EXIT_STORE, BadInput, CorralError
from corral.remote import ENV_SERVER, ENV_TOKEN
from corral.service.run_view import RunView
from corral.service.runs import RunPage
from corral.service.submission import BudgetWarning, Submission
from corral.service.views import LogLine, RunDetails

#: seconds one request may take (a stream: between two events)
TIMEOUT_S = 30.0
#: seconds between two looks at a run that is waited for
WAIT_POLL_S = 1.0
#: bytes read at a time while uploading a bundle
UPLOAD_CHUNK = 1024 * 1024
#: fields of a ClientCode that stay on this machine (where the bundle lies here)
_LOCAL_ONLY = ("path", "size")

#: ``progress(done_bytes, total_bytes)`` while packing or uploading
Progress = Callable[[int, int], None]


#: codes only a server answers with, and the exit code they mean to a CLI user
_SERVER_CODES = {
    "unauthorized": EXIT_BAD_INPUT,  # the token (CORRAL_TOKEN) is missing, wrong or revoked
    "forbidden": EXIT_BAD_INPUT,  # a read-only token asked for a write
    "method_not_allowed": EXIT_STORE,
}


def _exit_code_of(code: str) -> int:
    """The exit code a local CLI uses for the error class with this ``code``."""
    import corral.storage.errors  # noqa: F401 - its classes (and codes) join the search

    if code in _SERVER_CODES:
        return _SERVER_CODES[code]
    todo: list[type[CorralError]] = [CorralError]
    while todo:
        cls = todo.pop()
        if cls.__dict__.get("code") == code:
            return cls.exit_code
        todo += cls.__subclasses__()
    return EXIT_STORE


class RemoteError(CorralError):
    """An error the server answered with (its code and message), or the server unreachable."""

    def __init__(
        self, message: str, *, code: str = "server_error", fields: dict[str, Any] | None = None
    ):
        super().__init__(message, code=code, fields=fields)
        self.exit_code = _exit_code_of(code)


class RemoteClient:
    """The API of one ``corral server`` at ``url``, with ``token``."""

    def __init__(
        self,
        url: str,
        token: str,
        *,
        http: httpx.Client | None = None,
        timeout: float = TIMEOUT_S,
    ):
        self.url = url.rstrip("/")
        self._http = http or httpx.Client(timeout=timeout)
        self._headers = {"Authorization": f"Bearer {token}", "User-Agent": "corral-cli"}

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> RemoteClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # --- plumbing --------------------------------------------------------------------------

    def _unreachable(self, exc: Exception) -> RemoteError:
        why = "timed out" if isinstance(exc, httpx.TimeoutException) else type(exc).__name__
        return RemoteError(
            f"corral server at {self.url} cannot be reached ({why}); check {ENV_SERVER}",
            code="server_unreachable",
        )

    @staticmethod
    def _raise_for(res: httpx.Response) -> None:
        if res.status_code < 400:
            return
        try:
            body = res.json()
        except ValueError:
            body = {}
        if not isinstance(body, dict) or "message" not in body:
            raise RemoteError(f"corral server answered {res.status_code} on {res.request.url.path}")
        code = str(body.get("code") or "server_error")
        if code == "unauthorized":
            message = f"{body['message']} (check {ENV_TOKEN})"
        else:
            message = str(body["message"])
        raise RemoteError(message, code=code, fields=body.get("fields"))

    def _call(self, method: str, path: str, **kw: Any) -> Any:
        try:
            res = self._http.request(method, self.url + path, headers=self._headers, **kw)
        except httpx.HTTPError as e:
            raise self._unreachable(e) from None
        self._raise_for(res)
        return res.json()

    # --- runs --------------------------------------------------------------------------------

    def submit(
        self,
        path: str | Path,
        *,
        overrides: Sequence[str] = (),
        pack_progress: Progress | None = None,
        upload_progress: Progress | None = None,
    ) -> Submission:
        """Pack the spec's workdir here, upload the bundle unless the server holds it already
        (see :meth:`send_bundle`), then send the spec's text naming that bundle: the server
        need not see this machine's files. Relative paths in the spec resolve against its
        directory as this machine names it. Code from git sends no bundle (only the
        ``files:``, if any); with ``code.local_changes: diff`` nothing is packed here and the
        server must see the checkout."""
        from corral.service.bundles import pack_for_server

        spec = Path(path)
        try:
            text = spec.read_text()
        except OSError as e:
            raise BadInput(f"{spec}: cannot read the spec ({e.strerror or e})") from None
        code = pack_for_server(spec, overrides=overrides, progress=pack_progress)
        body: dict[str, Any] = {
            "spec": text,
            "overrides": list(overrides),
            "base_dir": str(spec.resolve().parent),
        }
        notices: list[str] = []
        if code is not None:
            if code.sha256 is not None and code.path is not None:
                sent = self.send_bundle(code.path, code.sha256, code.size, upload_progress)
                notices.append(
                    f"code: {sent / 1e6:.1f} MB uploaded to {self.url}"
                    if sent
                    else f"code: {self.url} has it already, nothing uploaded"
                )
            fields = {k: v for k, v in dataclasses.asdict(code).items() if k not in _LOCAL_ONLY}
            body["code"] = fields
        got = self._call("POST", "/api/v1/runs", json=body)
        return Submission(
            run=RunView.from_json(got["run"]),
            warnings=[BudgetWarning(**w) for w in got.get("warnings") or []],
            notices=notices + [str(n) for n in got.get("notices") or []],
        )

    def send_bundle(
        self, path: Path, sha256: str, size: int, progress: Progress | None = None
    ) -> int:
        """Upload the bundle at ``path`` unless the server holds ``sha256`` already (it is
        content-addressed: an unchanged workdir is never sent twice). Returns the bytes
        sent. ``progress(done, total)`` follows the upload."""
        url = f"{self.url}/api/v1/bundles/{sha256}"
        try:
            res = self._http.head(url, headers=self._headers)
        except httpx.HTTPError as e:
            raise self._unreachable(e) from None
        if res.status_code == 200:
            return 0
        if res.status_code != 404:
            self._raise_for(res)
        sent = [0]

        def chunks() -> Iterator[bytes]:
            with open(path, "rb") as f:
                while data := f.read(UPLOAD_CHUNK):
                    sent[0] += len(data)
                    yield data
                    if progress is not None:
                        progress(sent[0], size)

        headers = {**self._headers, "Content-Length": str(size)}
        try:
            res = self._http.put(url, params={"size": size}, headers=headers, content=chunks())
        except httpx.HTTPError as e:
            raise self._unreachable(e) from None
        if res.status_code in (404, 405):
            raise RemoteError(
                f"corral server at {self.url} cannot receive code bundles (an older version): "
                "upgrade it, or launch from a directory it sees with code from git",
                code="method_not_allowed",
            )
        self._raise_for(res)
        return sent[0]

    def page_runs(
        self,
        *,
        states: Sequence[str] | None = None,
        active_only: bool = False,
        limit: int | None = None,
        offset: int = 0,
    ) -> RunPage:
        """One page of runs, newest first (``limit`` None: every run, page by page)."""
        params: dict[str, Any] = {"state": list(states or []), "active": active_only}
        runs: list[RunView] = []
        total = 0
        at = offset
        while True:
            size = 1000 if limit is None else min(1000, limit - len(runs))
            got = self._call("GET", "/api/v1/runs", params={**params, "limit": size, "offset": at})
            page = [RunView.from_json(r) for r in got["runs"]]
            runs += page
            total = int(got.get("total", at + len(page)))
            at += len(page)
            if len(page) < size or (limit is not None and len(runs) >= limit) or at >= total:
                return RunPage(runs, total, offset)

    def get_run(self, ref: str | None = None) -> RunDetails:
        """One run in detail (``ref`` None: the newest run)."""
        if not ref:
            newest = self.page_runs(limit=1).runs
            if not newest:
                raise RemoteError(
                    "no runs yet: start one with `corral launch corral.yaml`", code="not_found"
                )
            ref = newest[0].id
        return RunDetails.model_validate(self._call("GET", f"/api/v1/runs/{_q(ref)}"))

    def run(self, ref: str) -> RunView:
        return RunView.from_json(self._call("GET", f"/api/v1/runs/{_q(ref)}"))

    def request(self, ref: str, action: str, *, wait: bool = False) -> RunView:
        """Ask for a ``stop`` or a ``cancel``; with ``wait``, return once the run ended."""
        if action not in ("stop", "cancel"):
            raise BadInput(f"action {action!r}: expected cancel or stop")
        run = RunView.from_json(self._call("POST", f"/api/v1/runs/{_q(ref)}/{action}"))
        return self.wait_for_end(run.id) if wait else run

    def wait_for_end(self, ref: str, *, timeout_s: float | None = None) -> RunView:
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            run = self.run(ref)
            if run.terminal or (deadline is not None and time.monotonic() >= deadline):
                return run
            time.sleep(WAIT_POLL_S)

    # --- logs --------------------------------------------------------------------------------

    def log_lines(
        self, ref: str, *, stages: Sequence[str] = (), attempt: int | None = None
    ) -> tuple[str, list[LogLine]]:
        """(the run's id, every line of its copied stage logs), by attempt then time."""
        run = self.run(ref)
        files = self._call("GET", f"/api/v1/runs/{_q(run.id)}/logs")["files"]
        lines: list[LogLine] = []
        for f in files:
            if (stages and f["stage"] not in stages) or (attempt and f["attempt"] != attempt):
                continue
            offset = 0
            while True:
                params = {"stage": f["stage"], "attempt": f["attempt"], "offset": offset}
                chunk = self._call("GET", f"/api/v1/runs/{_q(run.id)}/logs", params=params)
                lines += _split(chunk["text"], int(f["attempt"]), str(f["stage"]))
                if chunk["next_offset"] <= offset or chunk["eof"]:
                    break
                offset = int(chunk["next_offset"])
        lines.sort(key=lambda line: (line.attempt, line.ts))
        return run.id, lines

    def follow(
        self, ref: str, *, stages: Sequence[str] = (), from_end: bool = False
    ) -> Iterator[LogLine | RunView]:
        """The run's log lines as the server copies them (server-sent events), then the run
        once it ended (the last item)."""
        params: dict[str, Any] = {"stage": list(stages), "from_end": from_end}
        url = f"{self.url}/api/v1/runs/{_q(ref)}/logs/stream"
        try:
            with self._http.stream("GET", url, headers=self._headers, params=params) as res:
                if res.status_code >= 400:
                    res.read()
                    self._raise_for(res)
                event = ""
                for raw in res.iter_lines():
                    if raw.startswith("event:"):
                        event = raw.split(":", 1)[1].strip()
                    elif raw.startswith("data:"):
                        data = json.loads(raw.split(":", 1)[1])
                        if event == "log":
                            yield LogLine.model_validate(data)
                        elif event == "end":
                            yield RunView.from_json(data)
                            return
        except httpx.HTTPError as e:
            raise self._unreachable(e) from None
        raise RemoteError(f"corral server at {self.url} closed the log stream before the run ended")

    # --- spending caps --------------------------------------------------------------------

    def caps(self) -> Any:
        """The server's spending caps (``CapList`` as JSON)."""
        return self._call("GET", "/api/v1/budget")

    def set_cap(self, body: dict[str, Any]) -> Any:
        return self._call("POST", "/api/v1/budget", json=body)

    def remove_cap(self, scope: str, subject: str | None) -> Any:
        where = "team" if scope == "team" else f"{scope}/{_q(subject or '')}"
        return self._call("DELETE", f"/api/v1/budget/{where}")


def _q(ref: str) -> str:
    from urllib.parse import quote

    return quote(ref, safe="")


def _split(text: str, attempt: int, stage: str) -> list[LogLine]:
    from corral.service.logs import parse_log

    return parse_log(text, attempt, stage)


def from_env(environ: Mapping[str, str] | None = None) -> RemoteClient | None:
    """The client ``CORRAL_SERVER`` and ``CORRAL_TOKEN`` name, or None when no server is set
    (the CLI then works on the local store). BadInput naming the variable when one is
    missing or malformed."""
    env = os.environ if environ is None else environ
    url = env.get(ENV_SERVER, "").strip()
    if not url:
        return None
    if not url.startswith(("http://", "https://")):
        raise BadInput(f"{ENV_SERVER}={url!r}: expected http(s)://host:port of a corral server")
    token = env.get(ENV_TOKEN, "").strip()
    if not token:
        raise BadInput(
            f"{ENV_SERVER} is set but {ENV_TOKEN} is not: set it to a token from `corral token create` on the server"
        )
    return RemoteClient(url, token)
