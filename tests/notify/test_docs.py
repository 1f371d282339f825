"""The receiver snippet in docs/webhooks.md really verifies what the dispatcher sends."""

from __future__ import annotations

import re
import threading
from http.server import HTTPServer
from pathlib import Path

from hookkit import SECRET, hooked_run

from corral.notify.dispatcher import Dispatcher

DOC = Path(__file__).parents[2] / "docs" / "webhooks.md"


def _snippet() -> str:
    text = DOC.read_text()
    match = re.search(r"<!-- receiver-snippet[^>]*-->\n```python\n(.*?)```", text, re.S)
    assert match, "the receiver snippet is gone from docs/webhooks.md"
    return match.group(1)


def test_the_documented_receiver_accepts_a_signed_delivery_and_rejects_a_wrong_secret(
    store, monkeypatch
):
    code = _snippet()
    assert len([line for line in code.splitlines() if line.strip()]) <= 10
    serve_line = code.strip().splitlines()[-1]
    assert serve_line.startswith("HTTPServer(")
    namespace: dict = {}
    exec(code.replace(serve_line, ""), namespace)  # everything but serve_forever on :8080
    server = HTTPServer(("127.0.0.1", 0), namespace["Hook"])
    threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
    ).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/"
    try:
        monkeypatch.setenv("CORRAL_WEBHOOK_SECRET", SECRET)  # what the snippet reads
        good = hooked_run(store, {"url": url, "secret": "GOOD"}, name="good")
        bad = hooked_run(store, {"url": url, "secret": "WRONG"}, name="bad")
        store.add_event(good, "run.started", "go")
        store.add_event(bad, "run.started", "go")
        secrets = {"GOOD": SECRET, "WRONG": "another-secret"}
        d = Dispatcher(store, secret_resolver=secrets.get)  # real clock: the snippet checks it
        d.tick()
        d.run_pending()
    finally:
        server.shutdown()
        server.server_close()
    assert [c.delivered for c in store.webhook_cursors(good)] == [1]
    (failed,) = store.events(bad, types=["webhook.failed"])
    assert failed.data["error"] == "HTTP 401"
