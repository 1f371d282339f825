"""``POST /attempt``: a node kept through a gang's repair takes the run's next attempt. The
agent process stays, its ended attempt's agent closes, and the next one serves on the same
address with the new token (the old one is refused); a hand-over while the attempt runs, of
another run, of an attempt not after this one, or without a token is refused in one line, and
only one hand-over is taken."""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from corral.agent.events import read_events_file
from support.waiting import wait_until

from .helpers import TOKEN, make_plan

NEXT_TOKEN = "next-attempt-token"


def _spawn(plan_path: Path, env: dict[str, str], *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "corral.agent", "--plan", str(plan_path), *args],
        env={**os.environ, "CORRAL_AGENT_TOKEN": TOKEN, **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def _call(url: str, token: str, method: str, path: str, body: dict | None = None):
    answer = httpx.request(
        method, url + path, json=body, headers={"Authorization": f"Bearer {token}"}, timeout=10
    )
    return answer.status_code, answer.json()


def test_a_kept_node_takes_the_next_attempt_on_its_address_with_the_new_token(tmp_path):
    gang = {"CORRAL_GANG_RANK": "1", "CORRAL_GANG_MASTER_ADDR": "127.0.0.1",
            "CORRAL_GANG_MASTER_PORT": "29400"}  # fmt: skip
    first = make_plan(
        tmp_path, [{"name": "train", "run": "sleep 1; echo one", "nodes": 2}], nodes=2
    )
    plan_path = tmp_path / "plan.json"
    first.dump(plan_path)
    proc = _spawn(plan_path, gang)
    try:
        info = tmp_path / "state" / "agent.json"
        wait_until(info.exists, 10, 0.02, "agent.json")
        url = json.loads(info.read_text())["url"]
        second = first.model_copy(
            update={"attempt": 2, "state_dir": str(tmp_path / "state2"),
                    "stages": [first.stages[0].model_copy(
                        update={"run": "echo two $CORRAL_NODE_RANK@$CORRAL_MASTER_ADDR:$CORRAL_MASTER_PORT"}
                    )]}
        )  # fmt: skip
        body = {"plan": second.model_dump(mode="json"), "token": NEXT_TOKEN,
                "gang": {"rank": 1, "master_addr": "10.0.0.9", "master_port": 29600}}  # fmt: skip
        code, said = _call(url, TOKEN, "POST", "/attempt", body)
        assert (code, said) == (409, {"error": "this attempt still runs: stop it first"})
        assert _call(url, TOKEN, "POST", "/gang/start")[0] == 202  # the gang is there

        def ended() -> bool:
            return _call(url, TOKEN, "GET", "/status")[1]["finished_at"] is not None

        wait_until(ended, 15, 0.05, "the first attempt's end")
        for bad, error in (
            ({**body, "plan": {**body["plan"], "attempt": 1}},
             "plan: attempt 1 is not after this node's 1"),
            ({**body, "plan": {**body["plan"], "run_id": "other"}},
             "plan: run other, this node runs run-1"),
            ({**body, "token": ""}, "token: expected the next attempt's token"),
            ({**body, "gang": {"rank": 5, "master_addr": "h", "master_port": 29600}},
             "CORRAL_GANG_RANK=5: the plan's gang has 2 node(s) (ranks 0..1)"),
        ):  # fmt: skip
            assert _call(url, TOKEN, "POST", "/attempt", bad) == (400, {"error": error})
        assert _call(url, TOKEN, "POST", "/attempt", body) == (202, {"attempt": 2})

        def serves_the_next() -> bool:
            try:
                return _call(url, NEXT_TOKEN, "GET", "/status")[0] == 200
            except httpx.HTTPError:
                return False

        wait_until(serves_the_next, 15, 0.05, "attempt 2 on the same address")
        assert _call(url, TOKEN, "GET", "/status")[0] == 401  # the old token is gone
        status = _call(url, NEXT_TOKEN, "GET", "/status")[1]
        assert (status["run_id"], status["attempt"]) == ("run-1", 2)
        assert _call(url, NEXT_TOKEN, "POST", "/gang/start")[0] == 202  # the repaired gang
        wait_until(lambda: _call(url, NEXT_TOKEN, "GET", "/status")[1]["finished_at"], 15, 0.05)
        assert proc.poll() is None  # one process throughout
        assert _call(url, NEXT_TOKEN, "POST", "/attempt", body) == (
            400,
            {"error": "plan: attempt 2 is not after this node's 2"},
        )
    finally:
        proc.kill()
        proc.communicate()
    # the second attempt's stage ran with its new place in the gang (the head moved)
    said = (tmp_path / "state2" / "logs" / "train.log").read_text()
    assert said.strip().endswith(" two 1@10.0.0.9:29600"), said  # (after the line's time)


def test_a_kept_node_s_next_attempt_keeps_its_events_and_logs_apart_in_the_node_s_state_dir(
    tmp_path,
):
    """A node whose launch gave it its state folder (``--state-dir``: the provider's, which
    reads ``agent.json`` and ``children.json`` there) keeps it through a hand-over, and the
    attempt handed over writes its events, stage logs and progress files in a folder of its
    own in it: its event feed and its logs from their start hold its own records only (the
    controller reads a new attempt's from their start), and the ended attempt's files stay
    as they were."""
    gang = {"CORRAL_GANG_RANK": "0", "CORRAL_GANG_MASTER_ADDR": "127.0.0.1",
            "CORRAL_GANG_MASTER_PORT": "29400"}  # fmt: skip
    said = "echo said by attempt $CORRAL_ATTEMPT; echo '{}' >> $CORRAL_PROGRESS_FILE"
    first = make_plan(tmp_path, [{"name": "train", "run": said, "nodes": 1}], nodes=2)
    plan_path = tmp_path / "plan.json"
    first.dump(plan_path)
    node = tmp_path / "node"  # the provider's folder for the machine
    proc = _spawn(plan_path, gang, "--state-dir", str(node))
    try:
        wait_until((node / "agent.json").exists, 10, 0.02, "agent.json")
        url = json.loads((node / "agent.json").read_text())["url"]
        wait_until(lambda: _call(url, TOKEN, "GET", "/status")[1]["finished_at"], 15, 0.05)
        ended = _call(url, TOKEN, "GET", "/events?after=0")[1]["events"]
        body = {"plan": first.model_copy(update={"attempt": 2}).model_dump(mode="json"),
                "token": NEXT_TOKEN,
                "gang": {"rank": 0, "master_addr": "127.0.0.1", "master_port": 29600}}  # fmt: skip
        assert _call(url, TOKEN, "POST", "/attempt", body) == (202, {"attempt": 2})

        def the_next_ended() -> bool:
            try:
                code, status = _call(url, NEXT_TOKEN, "GET", "/status")
            except httpx.HTTPError:
                return False
            return code == 200 and status["attempt"] == 2 and bool(status["finished_at"])

        wait_until(the_next_ended, 15, 0.05, "attempt 2's end on the same address")
        events = _call(url, NEXT_TOKEN, "GET", "/events?after=0")[1]["events"]
        log = _call(url, NEXT_TOKEN, "GET", "/logs?stage=train&offset=0")[1]["data"]
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.communicate()
    types = [e["type"] for e in events]
    assert types[0] == "attempt.started" and events[0]["seq"] == 1, types
    assert types.count("attempt.started") == types.count("attempt.finished") == 1, types
    assert "said by attempt 2" in log and "said by attempt 1" not in log, log
    # on the machine: the node's own files where its provider reads them (the running
    # attempt's), each attempt's records apart, the ended attempt's as it left them
    assert json.loads((node / "agent.json").read_text())["url"] == url
    assert (node / "children.json").exists()
    mine = node / "attempts" / "a2"
    assert [e["type"] for e in read_events_file(mine / "events.jsonl")] == types
    assert read_events_file(node / "events.jsonl") == ended
    assert "said by attempt 1" in (node / "logs" / "train.log").read_text()
    assert "said by attempt 2" not in (node / "logs" / "train.log").read_text()
    assert (node / "progress" / "train.jsonl").read_text() == "{}\n"
    assert (mine / "progress" / "train.jsonl").read_text() == "{}\n"


def test_a_hand_over_asked_again_is_answered_as_the_first_whoever_serves_the_address(tmp_path):
    """The controller's answer to ``POST /attempt`` lost (a timeout under load): it asks again
    with the ended attempt's token, before the node has switched (the ended attempt's agent
    answers) and after (the next attempt's agent, which knows the token it was handed over
    from, answers). The same hand-over is answered 202 both times; the ended attempt's token
    opens nothing else on the next attempt's agent (another token, another attempt, any other
    endpoint: 401), and a connection kept alive from before the switch is never answered by
    the ended attempt's agent again."""
    gang = {"CORRAL_GANG_RANK": "0", "CORRAL_GANG_MASTER_ADDR": "127.0.0.1",
            "CORRAL_GANG_MASTER_PORT": "29400"}  # fmt: skip
    first = make_plan(tmp_path, [{"name": "train", "run": "echo one", "nodes": 1}], nodes=2)
    plan_path = tmp_path / "plan.json"
    first.dump(plan_path)
    proc = _spawn(plan_path, gang)
    try:
        info = tmp_path / "state" / "agent.json"
        wait_until(info.exists, 10, 0.02, "agent.json")
        url = json.loads(info.read_text())["url"]
        wait_until(
            lambda: _call(url, TOKEN, "GET", "/status")[1]["finished_at"], 15, 0.05, "the end"
        )
        second = first.model_copy(
            update={"attempt": 2, "state_dir": str(tmp_path / "state2"),
                    "stages": [first.stages[0].model_copy(update={"run": "sleep 30"})]}
        )  # fmt: skip
        body = {"plan": second.model_dump(mode="json"), "token": NEXT_TOKEN,
                "gang": {"rank": 0, "master_addr": "127.0.0.1", "master_port": 29600}}  # fmt: skip
        host, port = url.removeprefix("http://").rsplit(":", 1)
        kept = http.client.HTTPConnection(host, int(port), timeout=10)  # kept alive throughout
        kept.request("GET", "/health", headers={"Authorization": f"Bearer {TOKEN}"})
        assert kept.getresponse().read()
        # the first answer lost: asked again, at once (the ended attempt's agent may answer)
        assert _call(url, TOKEN, "POST", "/attempt", body) == (202, {"attempt": 2})
        assert _call(url, TOKEN, "POST", "/attempt", body) == (202, {"attempt": 2})
        other = {**body, "token": "another-token"}
        code, said = _call(url, TOKEN, "POST", "/attempt", other)
        assert code in (409, 401), said  # (409: the ended attempt's agent; 401: the next one)

        def serves_the_next() -> bool:
            try:
                return _call(url, NEXT_TOKEN, "GET", "/status")[1].get("attempt") == 2
            except httpx.HTTPError:
                return False

        wait_until(serves_the_next, 15, 0.05, "attempt 2 on the same address")
        # asked again once the node switched: the next attempt's agent says it took it
        assert _call(url, TOKEN, "POST", "/attempt", body) == (202, {"attempt": 2})
        third = {**body, "plan": {**body["plan"], "attempt": 3}}
        for refused in (other, third, {**body, "token": ""}, {}):
            assert _call(url, TOKEN, "POST", "/attempt", refused) == (
                401,
                {"error": "unauthorized"},
            )
        for method, path in (("GET", "/status"), ("POST", "/stop"), ("GET", "/events")):
            assert _call(url, TOKEN, method, path)[0] == 401
        assert _call(url, "not-a-token", "POST", "/attempt", body)[0] == 401
        # the connection kept from before the switch: closed unanswered, never a 401 of the
        # ended attempt's agent for the new token (a client asks again on a new connection)
        kept.request("GET", "/status", headers={"Authorization": f"Bearer {NEXT_TOKEN}"})
        with pytest.raises(http.client.RemoteDisconnected):
            kept.getresponse()
        kept.close()
        status = _call(url, NEXT_TOKEN, "GET", "/status")[1]
        assert (status["attempt"], status["finished_at"]) == (2, None)  # it runs, untouched
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.communicate()


def test_a_gang_s_stages_on_several_nodes_wait_for_the_gang_s_start(tmp_path):
    """``POST /gang/start``: until the controller says every node is there, a node holds its
    stages on several nodes (``waiting``), while a stage of its own runs at once; a stop
    while they are held ends the attempt without them."""
    gang = {"CORRAL_GANG_RANK": "0", "CORRAL_GANG_MASTER_ADDR": "127.0.0.1",
            "CORRAL_GANG_MASTER_PORT": "29400"}  # fmt: skip
    plan = make_plan(
        tmp_path,
        [{"name": "train", "run": "echo trained", "nodes": 2},
         {"name": "prep", "run": "echo prepared", "nodes": 1}],
        nodes=2,
    )  # fmt: skip
    plan_path = tmp_path / "plan.json"
    plan.dump(plan_path)
    proc = _spawn(plan_path, gang)
    try:
        info = tmp_path / "state" / "agent.json"
        wait_until(info.exists, 10, 0.02, "agent.json")
        url = json.loads(info.read_text())["url"]

        def states() -> dict[str, str]:
            return {s["name"]: s["state"] for s in _call(url, TOKEN, "GET", "/status")[1]["stages"]}

        wait_until(lambda: states() == {"train": "waiting", "prep": "succeeded"}, 15, 0.05, "held")
        time.sleep(1.0)
        assert states()["train"] == "waiting"  # held, not failed as "could not start"
        # the gang's history (for the manifest) is checked: a bad one is refused, naming it
        bad = {"nodes": [{"rank": -1, "attempt": 1, "provider": "fake", "instance_id": "m-a"}]}
        code, said = _call(url, TOKEN, "POST", "/gang/start", bad)
        assert code == 400 and "nodes.0.rank" in json.dumps(said), said
        assert states()["train"] == "waiting"
        nodes = [{"rank": k, "attempt": 1, "provider": "fake", "instance_id": f"m-{k}"}
                 for k in (0, 1)]  # fmt: skip
        assert _call(url, TOKEN, "POST", "/gang/start", {"nodes": nodes}) == (
            202,
            {"started": True},
        )
        wait_until(lambda: states()["train"] == "succeeded", 15, 0.05, "the gang's stage")
        assert _call(url, TOKEN, "POST", "/gang/start") == (202, {"started": True})  # again: ok
    finally:
        proc.kill()
        proc.communicate()
