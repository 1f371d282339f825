"""The agent's HTTP API: auth, status, events paging, logs, progress, stop."""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

from corral.wire import WIRE_VERSION

from .helpers import TOKEN, Client, make_plan
from .rawhttp import exchange, request_bytes

STAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z ")
SECRET = "hunter2-secret-value"


def test_every_endpoint_needs_the_token_and_no_answer_contains_it(tmp_path, start_agent):
    plan = make_plan(
        tmp_path,
        [{"name": "train", "run": "echo training"}],
        env={"API_KEY": SECRET},
        setup=["echo setup"],
    )
    client = start_agent(plan)
    client.wait_finished()
    paths = ["/status", "/events", "/logs", "/logs?stage=train", "/nope", "/artifacts/a.tar.gz"]
    for path in paths:
        for token in (None, "wrong", TOKEN + "x", ""):
            status, body = client.request("GET", path, token=token, raw=True)
            assert status == 401 and body == '{"error": "unauthorized"}', (path, token)
    status, _ = client.request("POST", "/stop", token="wrong")
    assert status == 401
    status, body = client.request("GET", "/health", token=f"{TOKEN} ", raw=True)
    assert status == 200 and '"run_id"' in body
    bodies = [client.request("GET", p, raw=True)[1] for p in [*paths, "/health", "/ready"]]
    bodies.append(client.request("POST", "/stop", raw=True)[1])
    for body in bodies:
        assert TOKEN not in body and SECRET not in body


def test_probes_answer_without_the_token_and_reveal_only_liveness(tmp_path, start_agent):
    plan = make_plan(tmp_path, [{"name": "train", "run": "sleep 30"}], env={"API_KEY": SECRET})
    client = start_agent(plan)
    port = _port(client)
    client.wait_until(lambda s: s["stages"][0]["state"] == "running")
    before = client.get("/status")  # an authenticated call
    api_seen = client.request("GET", "/health")[1]
    assert api_seen["run_id"] == plan.run_id  # the controller still gets the details
    for token in (None, "wrong", ""):
        answer = exchange(port, request_bytes("GET", "/health", token=token))
        assert (answer.status, answer.json()) == (200, {"ok": True}), token
        assert answer.headers["content-type"] == "application/json"
        answer = exchange(port, request_bytes("GET", "/ready", token=token))
        assert (answer.status, answer.json()) == (200, {"ready": True}), token
        head = exchange(port, request_bytes("HEAD", "/health", token=token), head_only=True)
        assert head.status == 200 and head.body == b""
        for body in (answer.body, head.body):
            assert plan.run_id.encode() not in body and SECRET.encode() not in body
    # a probe is not the controller: it never counts as a call (the node's idle clock)
    assert client.agent is not None and before["phase"] == "running"
    stamp = client.agent.api.last_request_at
    for _ in range(3):
        exchange(port, request_bytes("GET", "/health"))
    assert stamp is not None and client.agent.api.last_request_at == stamp


def test_health_ready_and_unknown_paths(tmp_path, start_agent):
    client = start_agent(make_plan(tmp_path, [{"name": "train", "run": "true"}]))
    health = client.get("/health")
    assert health["ok"] is True
    assert (health["run_id"], health["attempt"]) == ("run-1", 1)
    assert isinstance(health["pid"], int) and health["version"]
    assert client.get("/ready") == {"ready": True, "wire_version": WIRE_VERSION}
    assert client.request("GET", "/nope") == (404, {"error": "not found"})
    assert client.request("POST", "/status")[0] == 405
    assert client.request("GET", "/stop")[0] == 405
    assert client.request("GET", "/events?after=x")[0] == 400
    assert client.request("GET", "/logs?stage=train&limit=0")[0] == 400
    assert client.request("GET", "/logs?stage=other")[0] == 404


def test_ready_is_503_until_the_runner_starts(tmp_path):
    import threading

    from corral.agent.main import Agent
    from corral.agent.server import AgentServer

    agent = Agent(make_plan(tmp_path, [{"name": "train", "run": "true"}]), TOKEN)
    server = AgentServer(("127.0.0.1", 0), agent.api, TOKEN)  # serving, runner not started
    threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    ).start()
    try:
        client = Client(f"http://127.0.0.1:{server.port}")
        assert client.request("GET", "/ready") == (
            503,
            {"ready": False, "wire_version": WIRE_VERSION},
        )
        assert client.get("/health")["ok"] is True
    finally:
        server.shutdown()
        server.server_close()
    agent.start()
    try:
        assert Client(agent.url).get("/ready") == {"ready": True, "wire_version": WIRE_VERSION}
    finally:
        agent.close(timeout=10)


def test_status_reports_phase_stages_and_gpu_usage(tmp_path, start_agent, monkeypatch):
    monkeypatch.setenv("CORRAL_FAKE_GPUS", "L40S:2")
    plan = make_plan(tmp_path, [{"name": "train", "run": "sleep 30", "gpus": 2}], devices=None)
    client = start_agent(plan)
    status = client.wait_until(lambda s: s["phase"] == "running" and s["stages"][0]["pid"])
    assert status["gpus"] == [
        {"id": "0", "utilization_pct": 0.0, "memory_used_mb": 0, "memory_total_mb": 0},
        {"id": "1", "utilization_pct": 0.0, "memory_used_mb": 0, "memory_total_mb": 0},
    ]
    stage = status["stages"][0]
    assert (stage["state"], stage["gpus"], stage["exit_code"]) == ("running", ["0", "1"], None)
    assert STAMP.match(stage["started_at"] + " ") and stage["finished_at"] is None
    assert status["finished_at"] is None and status["last_checkpoint"] is None


def test_status_gpu_usage_never_fails_the_request(tmp_path, start_agent):
    def broken(ids):
        raise RuntimeError("NVML exploded")

    client = start_agent(make_plan(tmp_path, [{"name": "t", "run": "true"}]), usage=broken)
    assert client.get("/status")["gpus"] == []


def test_events_page_densely_and_match_the_events_file(tmp_path, start_agent):
    plan = make_plan(tmp_path, [{"name": f"s{i}", "run": "true"} for i in range(3)])
    client = start_agent(plan)
    client.wait_finished()
    collected, after = [], 0
    while True:
        page = client.get(f"/events?after={after}&limit=2")
        if not page["events"]:
            assert page["next"] == after
            break
        assert len(page["events"]) <= 2
        collected += page["events"]
        after = page["next"]
    assert [e["seq"] for e in collected] == list(range(1, len(collected) + 1))
    assert collected == client.events()
    for event in collected:
        assert set(event) == {"seq", "ts", "type", "stage", "data"}
        assert STAMP.match(event["ts"] + " ")
    import json

    lines = (Path(plan.state_dir) / "events.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in lines] == collected
    last = collected[-1]
    assert last["type"] == "attempt.finished"
    assert last["data"] == {
        "phase": "succeeded",
        "failed_stage": None,
        "exit_code": None,
        "reason": "",
    }


def test_logs_are_timestamped_and_read_in_chunks_by_offset(tmp_path, start_agent):
    script = (
        "for i in $(seq 1 40); do echo \"line $i é€😀\"; done; echo err >&2; printf 'no newline'"
    )
    plan = make_plan(tmp_path, [{"name": "train", "run": script}], setup=["echo prepared"])
    client = start_agent(plan)
    client.wait_finished()
    log_file = Path(plan.state_dir) / "logs" / "train.log"
    sizes = client.get("/logs")["stages"]
    assert sizes == {
        "_setup": (log_file.parent / "_setup.log").stat().st_size,
        "train": log_file.stat().st_size,
    }
    text, offset, chunks = "", 0, 0
    while True:
        chunk = client.get(f"/logs?stage=train&offset={offset}&limit=100")
        assert chunk["stage"] == "train" and chunk["offset"] == offset
        text += chunk["data"]
        offset = chunk["next_offset"]
        chunks += 1
        if chunk["eof"]:
            break
    assert chunks > 10 and offset == log_file.stat().st_size
    assert text == log_file.read_text()
    lines = text.splitlines()
    assert len(lines) == 42 and all(STAMP.match(line) for line in lines)
    assert [STAMP.sub("", line) for line in lines[:1] + lines[-2:]] == [
        "line 1 é€😀",
        "err",
        "no newline",
    ]
    beyond = client.get(f"/logs?stage=train&offset={offset}")
    assert (beyond["data"], beyond["next_offset"], beyond["eof"]) == ("", offset, True)
    setup = client.get("/logs?stage=_setup")
    assert STAMP.sub("", setup["data"]) == "prepared\n" and setup["eof"] is True


def test_logs_of_a_running_stage_are_not_at_eof(tmp_path, start_agent):
    plan = make_plan(tmp_path, [{"name": "train", "run": "echo started; sleep 30"}])
    client = start_agent(plan)
    client.wait_until(lambda s: s["stages"][0]["state"] == "running")
    chunk = client.get("/logs?stage=train")
    while "started" not in chunk["data"]:
        chunk = client.get("/logs?stage=train")
    assert chunk["eof"] is False


def test_progress_file_feeds_status_and_events(tmp_path, start_agent):
    script = (
        "from corral.sdk.progress_file import emit\n"
        "for step in range(1, 6):\n"
        "    emit('progress', step=step, total=20, loss=3.0 - step / 10, metrics={'lr': 0.1},\n"
        "         ts=1.7e9 + 4 * step)\n"  # one step per 4 s, as the job's clock says
        # (written by hand: emit()'s own 'path' parameter is the progress file's path)
        "import json, os, time\n"
        "record = {'ts': time.time(), 'kind': 'checkpoint', 'step': 5, 'path': '/ck/ckpt-5',\n"
        "          'metrics': {'cer': 0.4}}\n"
        "with open(os.environ['CORRAL_PROGRESS_FILE'], 'a') as f:\n"
        "    f.write(json.dumps(record) + '\\n')\n"
    )
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "train.py").write_text(script)
    plan = make_plan(
        tmp_path,
        [{"name": "train", "run": f"{sys.executable} train.py"}],
        progress_event_interval=60.0,
    )
    client = start_agent(plan)
    status = client.wait_finished()
    progress = client.stage(status, "train")["progress"]
    assert (progress["step"], progress["total"], progress["percent"]) == (5, 20, 25.0)
    assert progress["loss"] == 2.5 and progress["metrics"] == {"lr": 0.1}
    assert progress["steps_per_s"] == 0.25 and progress["eta_s"] == 15 * 4.0
    assert status["last_checkpoint"]["stage"] == "train"
    assert (status["last_checkpoint"]["step"], status["last_checkpoint"]["path"]) == (
        5,
        "/ck/ckpt-5",
    )
    events = client.events()
    progress_events = [e for e in events if e["type"] == "progress"]
    assert len(progress_events) == 1  # one per 60 s at most
    assert progress_events[0]["data"]["step"] == 1 and progress_events[0]["stage"] == "train"
    saved = [e for e in events if e["type"] == "checkpoint.saved"]
    assert saved[0]["data"] == {"step": 5, "path": "/ck/ckpt-5", "metrics": {"cer": 0.4}}
    types = [e["type"] for e in events]
    assert types.index("checkpoint.saved") < types.index("stage.finished")


def test_stop_ends_running_stages_gracefully_and_is_idempotent(tmp_path, start_agent):
    plan = make_plan(
        tmp_path,
        [
            {
                "name": "train",
                "run": "trap 'echo saving; exit 75' TERM; echo armed; sleep 30 & wait",
            },
            {"name": "evaluate", "run": "touch evaluated", "needs": ["train"]},
        ],
    )
    client = start_agent(plan)
    log = Path(plan.state_dir) / "logs" / "train.log"
    # the stage is running and its trap is set (a stop before that would find bash untrapped)
    client.wait_until(lambda s: log.exists() and "armed" in log.read_text())
    assert client.post("/stop") == (202, {"stopping": True})
    assert client.post("/stop") == (202, {"stopping": True})
    status = client.wait_finished(timeout=10)
    assert status["phase"] == "stopped" and status["failed_stage"] is None
    states = {s["name"]: (s["state"], s["exit_code"]) for s in status["stages"]}
    assert states == {"train": ("preempted", 75), "evaluate": ("cancelled", None)}
    assert "saving" in (Path(plan.state_dir) / "logs" / "train.log").read_text()
    assert not (Path(plan.workdir) / "evaluated").exists()
    types = [e["type"] for e in client.events()]
    assert types.count("stop.requested") == 1
    assert client.post("/stop") == (202, {"stopping": True})  # after the end: still fine
    assert client.get("/status")["phase"] == "stopped"


def test_stop_during_setup_stops_the_setup_command(tmp_path, start_agent):
    plan = make_plan(
        tmp_path, [{"name": "train", "run": "touch trained"}], setup=["sleep 30", "touch second"]
    )
    client = start_agent(plan)
    client.wait_until(lambda s: s["phase"] == "setup")
    children = Path(plan.state_dir) / "children.json"
    client.wait_until(lambda s: '"_setup"' in children.read_text())
    client.post("/stop")
    status = client.wait_finished(timeout=10)
    assert status["phase"] == "stopped" and status["stages"][0]["state"] == "cancelled"
    work = Path(plan.workdir)
    assert not (work / "second").exists() and not (work / "trained").exists()


def test_stop_keeps_the_exit_code_of_a_compound_commands_job(tmp_path, start_agent):
    """`cd x && python train.py`: bash waits for python; the stop reaches python, which exits
    75 (preempted), and bash reports that code instead of dying with 143."""
    script = tmp_path / "job.py"
    script.write_text(
        "import signal, sys, time\n"
        "signal.signal(signal.SIGTERM, lambda *a: sys.exit(75))\n"
        "print('up', flush=True)\ntime.sleep(30)\n"
    )
    plan = make_plan(tmp_path, [{"name": "train", "run": f"cd {tmp_path} && python {script}"}])
    client = start_agent(plan)
    client.wait_until(lambda s: s["stages"][0]["state"] == "running")
    time.sleep(0.5)  # python is up and has its handler
    client.post("/stop")
    status = client.wait_finished(timeout=10)
    [train] = status["stages"]
    assert (train["state"], train["exit_code"]) == ("preempted", 75)


def test_stop_ends_a_multi_command_run_and_does_not_count_it_succeeded(tmp_path, start_agent):
    """`a; sleep; b`: the stop ends the whole command at once (b never runs), and a stage that
    was stopped is "stopped" even if its command ends with code 0."""
    plan = make_plan(
        tmp_path,
        [
            {"name": "seq", "run": "echo first; sleep 20; echo second; sleep 2"},
            {"name": "polite", "run": "trap 'exit 0' TERM; sleep 20 & wait"},
        ],
    )
    client = start_agent(plan)
    client.wait_until(lambda s: all(st["state"] == "running" for st in s["stages"]))
    time.sleep(0.5)
    began = time.monotonic()
    client.post("/stop")
    status = client.wait_finished(timeout=10)
    assert time.monotonic() - began < 3  # no waiting for the grace period's SIGKILL
    states = {s["name"]: s["state"] for s in status["stages"]}
    assert states == {"seq": "stopped", "polite": "stopped"}
    assert "second" not in (Path(plan.state_dir) / "logs" / "seq.log").read_text()


def _port(client: Client) -> int:
    return int(client.url.rsplit(":", 1)[1])


def test_every_other_method_answers_a_json_405_with_or_without_the_token(tmp_path, start_agent):
    client = start_agent(make_plan(tmp_path, [{"name": "train", "run": "true"}]))
    port = _port(client)
    paths = ("/status", "/stop", "/nope", "/artifacts/results.tar.gz", "/health", "/ready")
    for method in ("PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "CONNECT", "BREW", "GETX"):
        for path in paths:
            for token in (None, "wrong", TOKEN):
                answer = exchange(port, request_bytes(method, path, token=token))
                assert answer.status == 405, (method, path, token, answer.body)
                assert answer.json() == {"error": "method not allowed"}
                assert answer.headers["content-type"] == "application/json"
    # HEAD: answered for the probes only, else the same 405 without a body
    assert exchange(port, request_bytes("HEAD", "/status"), head_only=True).status == 405
    head = exchange(port, request_bytes("HEAD", "/status", token=TOKEN), head_only=True)
    assert head.status == 405 and head.headers["allow"] == "GET"
    head = exchange(port, request_bytes("DELETE", "/health"))
    assert head.status == 405 and head.headers["allow"] == "GET, HEAD"
    # a known method on a known path still needs the token
    assert exchange(port, request_bytes("POST", "/stop")).status == 401
    # a request line or header the server cannot parse is a JSON 400 too
    for raw in (
        b"GET /a b HTTP/1.1\r\n\r\n",
        b"GET /status HTTP/9.9\r\n\r\n",
        b"GET /status HTTP/1.1\r\n" + b"X-Many: y\r\n" * 101 + b"\r\n",
        b"GET /status\r\n\r\n",  # HTTP/0.9
    ):
        answer = exchange(port, raw)
        assert answer.status in (400, 401, 431, 505) and "error" in answer.json(), raw


def test_a_bad_huge_or_unkept_content_length_is_a_json_400_within_the_body_timeout(
    tmp_path, start_agent
):
    from corral.agent.server import BODY_TIMEOUT, MAX_BODY

    client = start_agent(make_plan(tmp_path, [{"name": "train", "run": "sleep 30"}]))
    port = _port(client)
    bad = ["abc", "-5", "1e3", " ", "0x10", "99999999999999999999", str(MAX_BODY + 1), "٣"]
    for token in (TOKEN, None):
        for value in bad:
            answer = exchange(
                port, request_bytes("POST", "/stop", token=token, content_length=value)
            )
            assert answer.status == 400, (value, answer.body)
            assert "Content-Length" in answer.json()["error"]
            assert answer.seconds < 1.0
    # a body announced but never (fully) sent: answered once BODY_TIMEOUT is over, not held
    for sent in (b"", b'{"cau'):
        req = request_bytes("POST", "/stop", token=TOKEN, content_length="100", body=sent)
        answer = exchange(port, req, timeout=BODY_TIMEOUT + 3)
        assert answer.status == 400 and "did not arrive" in answer.json()["error"]
        assert answer.seconds < BODY_TIMEOUT + 1.5
    # two lengths that disagree, a chunked body: refused, not guessed
    dup = request_bytes(
        "POST",
        "/stop",
        token=TOKEN,
        headers={"Content-Length": "2"},
        content_length="3",
        body=b"{}",
    )
    assert exchange(port, dup).status == 400
    chunked = request_bytes(
        "POST", "/stop", token=TOKEN, headers={"Transfer-Encoding": "chunked"}, body=b""
    )
    assert exchange(port, chunked + b"2\r\n{}\r\n0\r\n\r\n").status == 400
    # nothing was stopped by any of it, and the API still answers
    assert client.get("/status")["phase"] == "running"
    assert client.post("/stop")[0] == 202


def test_answers_on_a_kept_alive_connection_arrive_whole_without_a_delayed_ack_stall(
    tmp_path, start_agent
):
    """Head and body leave in one write on a TCP_NODELAY socket: one read gets the whole
    answer, and a poll does not wait ~40 ms for the client's delayed ACK."""
    import socket

    client = start_agent(make_plan(tmp_path, [{"name": "train", "run": "sleep 30"}]))
    port = _port(client)
    request = (
        f"GET /status HTTP/1.1\r\nHost: agent\r\nAuthorization: Bearer {TOKEN}\r\n\r\n"
    ).encode()
    rounds = 30
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        start = time.monotonic()
        for _ in range(rounds):
            sock.sendall(request)
            data = sock.recv(1 << 20)  # one read: whatever the first segment carried
            head, sep, body = data.partition(b"\r\n\r\n")
            assert sep, data[:200]
            length = int(re.search(rb"(?i)content-length: *(\d+)", head).group(1))
            assert len(body) == length, (len(body), length)
            assert b'"phase"' in body
        elapsed = time.monotonic() - start
    assert elapsed < rounds * 0.030, f"{rounds} requests took {elapsed:.2f} s"


def test_an_ipv6_bind_answers_on_both_families(tmp_path, start_agent):
    import socket

    import pytest

    if not socket.has_ipv6:
        pytest.skip("no IPv6 on this machine")
    plan = make_plan(tmp_path, [{"name": "train", "run": "true"}], host="::", port=0)
    try:
        client = start_agent(plan)
    except OSError:
        pytest.skip("IPv6 is disabled here")
    assert client.url.startswith("http://[::]:")
    port = _port(client)
    assert exchange(port, request_bytes("GET", "/health")).status == 200  # over IPv4
    with socket.create_connection(("::1", port), timeout=5) as sock:
        sock.sendall(request_bytes("GET", "/health"))
        assert sock.recv(100).startswith(b"HTTP/1.")


def test_an_ipv6_bind_on_a_node_without_ipv6_serves_on_ipv4(tmp_path, start_agent, monkeypatch):
    import errno
    import socket

    from corral.agent import listen

    real = listen._bound
    families = []

    def no_ipv6(family, host, port):
        families.append(family)
        if family == socket.AF_INET6:
            raise OSError(errno.EADDRNOTAVAIL, "Cannot assign requested address")
        return real(family, host, port)

    monkeypatch.setattr(listen, "_bound", no_ipv6)
    client = start_agent(make_plan(tmp_path, [{"name": "train", "run": "true"}], host="::", port=0))
    assert families == [socket.AF_INET6, socket.AF_INET]
    assert exchange(_port(client), request_bytes("GET", "/health")).status == 200


def test_stopping_the_server_does_not_wait_out_its_poll_interval(tmp_path):
    """An exiting agent's server stops at once (its machine is free that much sooner), not
    at the end of ``serve_forever``'s wait; the port is closed after."""
    import socket
    import threading

    from corral.agent.main import Agent
    from corral.agent.server import AgentServer

    agent = Agent(make_plan(tmp_path, [{"name": "train", "run": "true"}]), TOKEN)
    server = AgentServer(("127.0.0.1", 0), agent.api, TOKEN)
    serving = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 30})
    serving.start()
    assert Client(f"http://127.0.0.1:{server.port}").get("/health")["ok"] is True
    began = time.monotonic()
    server.stop()
    serving.join(5)
    assert not serving.is_alive() and time.monotonic() - began < 5  # not the 30 s wait
    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", server.port)) != 0


def test_the_server_binds_without_a_reverse_dns_lookup(tmp_path, monkeypatch):
    """HTTPServer looks its host up by reverse DNS when it binds; on a node whose resolver
    does not answer that takes seconds. The agent's server never asks."""
    import socket

    from corral.agent.main import Agent
    from corral.agent.server import AgentServer

    def no_dns(*_args):
        raise AssertionError("the agent's server asked for a reverse DNS lookup")

    monkeypatch.setattr(socket, "getfqdn", no_dns)
    agent = Agent(make_plan(tmp_path, [{"name": "train", "run": "true"}]), TOKEN)
    server = AgentServer(("127.0.0.1", 0), agent.api, TOKEN)
    try:
        assert server.port > 0 and server.server_name == "127.0.0.1"
    finally:
        server.server_close()
