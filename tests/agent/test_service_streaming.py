"""A web UI served by a service stage, through the agent's port as a user's browser reaches
it (the IO.net guide's serving after training, a nanochat-style chat): a FastAPI app on
uvicorn whose page calls absolute paths, streams its answer token by token as server-sent
events, and talks over a websocket. Served at the root of the agent's port
(``service.root``) and at ``/services/<stage>/``; the agent's own API keeps its paths."""

from __future__ import annotations

import json
import socket
import sys
import time
from pathlib import Path

import httpx
import pytest
from websockets.sync.client import connect

from .helpers import TOKEN, make_plan

pytest.importorskip("uvicorn")

# the service: a chat page that loads /static/chat.js and posts to /chat/completions (absolute
# paths), an answer streamed a token every 0.3 s, a websocket echo, and what it was told
APP = """\
import asyncio, os, sys
from fastapi import FastAPI, Request, WebSocket
from fastapi.responses import HTMLResponse, PlainTextResponse, StreamingResponse
import uvicorn

app = FastAPI()

@app.get("/")
def page():
    return HTMLResponse('<script src="/static/chat.js"></script><div id=chat></div>')

@app.get("/static/chat.js")
def script():
    return PlainTextResponse("fetch('/chat/completions', {method: 'POST'})")

@app.post("/chat/completions")
async def chat(request: Request):
    prompt = (await request.json())["prompt"]
    async def tokens():
        for word in ["the", "answer", "to", prompt, "is", "42"]:
            yield f"data: {word}\\n\\n"
            await asyncio.sleep(0.3)
        yield "data: [DONE]\\n\\n"
    return StreamingResponse(tokens(), media_type="text/event-stream")

@app.get("/whoami")
def whoami(request: Request):
    return {
        "prefix": request.headers.get("x-forwarded-prefix", ""),
        "env": os.environ.get("CORRAL_SERVICE_PREFIX"),
        "auth": request.headers.get("authorization"),
    }

@app.websocket("/ws")
async def echo(ws: WebSocket):
    await ws.accept()
    while True:
        await ws.send_text("echo " + await ws.receive_text())

uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
"""


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _chat(tmp_path: Path, start_agent, *, root: bool, public: bool = True):
    port = _port()
    (tmp_path / "app.py").write_text(APP)
    plan = make_plan(
        tmp_path,
        [
            {"name": "train", "run": "true"},
            {
                "name": "chat",
                "run": f"exec {sys.executable} {tmp_path / 'app.py'} {port}",
                "needs": ["train"],
                "service": {"ports": [port], "health": "/whoami", "root": root, "public": public},
            },
        ],
    )
    client = start_agent(plan)
    client.wait_until(lambda s: s.get("services", [{}])[0].get("healthy") is True, timeout=60)
    return client


def _streamed(url: str, headers: dict[str, str] | None = None) -> list[tuple[float, str]]:
    """Each SSE data line of the answer with the time it arrived."""
    got: list[tuple[float, str]] = []
    with httpx.stream("POST", url, json={"prompt": "life"}, headers=headers, timeout=30) as answer:
        assert answer.status_code == 200
        assert answer.headers["content-type"].startswith("text/event-stream")
        for line in answer.iter_lines():
            if line.startswith("data: "):
                got.append((time.monotonic(), line[len("data: ") :]))
    return got


def test_a_chat_ui_at_the_root_streams_its_answer_and_talks_over_a_websocket(
    tmp_path, start_agent
) -> None:
    client = _chat(tmp_path, start_agent, root=True)
    base = client.url
    page = httpx.get(f"{base}/")
    assert page.status_code == 200 and '<script src="/static/chat.js">' in page.text
    assert "/chat/completions" in httpx.get(f"{base}/static/chat.js").text  # absolute path

    got = _streamed(f"{base}/chat/completions")
    assert [word for _, word in got] == ["the", "answer", "to", "life", "is", "42", "[DONE]"]
    # token by token as the service wrote them (1.8 s in all), not gathered at its end
    assert got[-1][0] - got[0][0] >= 1.2

    with connect(base.replace("http://", "ws://") + "/ws", open_timeout=10) as ws:
        for text in ("hello", "again"):
            ws.send(text)
            assert ws.recv(timeout=10) == f"echo {text}"

    who = httpx.get(f"{base}/whoami").json()
    assert who == {"prefix": "", "env": "", "auth": None}
    # the agent's own API keeps its paths
    assert httpx.get(f"{base}/health").json() == {"ok": True}
    assert httpx.get(f"{base}/status").status_code == 401  # the agent's, behind its token
    status = client.get("/status")
    assert status["services"][0]["stage"] == "chat"


def test_a_service_under_its_path_streams_tunnels_and_is_told_its_prefix(
    tmp_path, start_agent
) -> None:
    """``public: false``: the agent's token gets the caller in, the service never sees it."""
    client = _chat(tmp_path, start_agent, root=False, public=False)
    base = f"{client.url}/services/chat"
    auth = {"Authorization": f"Bearer {TOKEN}"}
    assert httpx.get(f"{base}/whoami").status_code == 401
    assert httpx.get(f"{base}/whoami", headers=auth).json() == {
        "prefix": "/services/chat",
        "env": "/services/chat",
        "auth": None,
    }
    got = _streamed(f"{base}/chat/completions", headers=auth)
    assert len(got) == 7 and got[-1][0] - got[0][0] >= 1.2
    ws_url = base.replace("http://", "ws://") + "/ws"
    with connect(ws_url, additional_headers=auth, open_timeout=10) as ws:
        ws.send("hi")
        assert ws.recv(timeout=10) == "echo hi"
    with pytest.raises(Exception, match="401"):  # no token: refused before any tunnel
        connect(ws_url, open_timeout=10)
    # without `root`, a path outside the agent's API is the agent's 404, not the service's
    assert httpx.get(f"{client.url}/static/chat.js", headers=auth).status_code == 404
    assert json.loads(httpx.get(f"{client.url}/health").text) == {"ok": True}
