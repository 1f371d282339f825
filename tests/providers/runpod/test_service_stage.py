"""A service stage on a RunPod pod: reached through RunPod's HTTP proxy at the agent's
/services/<stage>/, with no port of its own opened on the pod."""

from __future__ import annotations

import socket
import sys
import uuid

import httpx

from corral.providers.base import Bootstrap, InstanceState
from support.waiting import wait_until

from ..contract import new_key, provider_plan, wait_state
from .helpers import L40S, offer


def test_a_service_stage_answers_through_the_pod_proxy(make_provider, fake, tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    provider = make_provider()
    chosen = offer(provider, spot=False, req=L40S)
    key = new_key()
    serve = f"cd {tmp_path} && exec {sys.executable} -m http.server {port} --bind 127.0.0.1"
    plan = provider_plan(
        provider,
        chosen,
        tmp_path,
        key,
        stages=[
            {"name": "train", "run": f"echo weights > {tmp_path}/model.txt"},
            {
                "name": "serve",
                "run": serve,
                "needs": ["train"],
                "service": {"ports": [port], "health": "/model.txt"},
            },
        ],
        run=None,
    )
    inst = provider.launch(chosen, Bootstrap(plan=plan, token=uuid.uuid4().hex), key)
    st = wait_state(provider, inst, InstanceState.RUNNING)
    url = f"{st.endpoint}/services/serve/model.txt"
    ua = {"User-Agent": "curl/8.5.0"}  # RunPod's CDN turns away python-httpx's default one
    answer = wait_until(
        lambda: (r := httpx.get(url, headers=ua, timeout=5)).status_code == 200 and r,
        message="the service through the proxy",
    )
    assert answer.text.strip() == "weights"
    provider.terminate(inst)
