"""``GET /poll``: the status, the events after a cursor and the new bytes of every stage log in
one answer (corral.wire.poll), read by the controller's client in one request."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

from corral.control.agent_client import AgentClient
from corral.wire.events import AgentEvent
from corral.wire.poll import PollAnswer, decode_offsets, encode_offsets

from .helpers import TOKEN, make_plan


def test_one_answer_carries_status_events_and_every_stage_logs_new_bytes(tmp_path, start_agent):
    plan = make_plan(
        tmp_path,
        [{"name": "a", "run": "echo alpha"}, {"name": "b", "run": "echo beta; echo gamma"}],
        setup=["echo prepared"],
    )
    client = start_agent(plan)
    client.wait_finished()
    answer = PollAnswer.model_validate(client.get("/poll"))
    assert answer.status.phase == "succeeded" and answer.status.run_id == "run-1"
    assert [e.model_dump() for e in answer.events] == client.events()
    assert answer.events_next == answer.events[-1].seq
    logs = Path(plan.state_dir) / "logs"
    assert set(answer.logs) == {"_setup", "a", "b"}
    for name, chunk in answer.logs.items():
        text = (logs / f"{name}.log").read_text()
        assert (chunk.offset, chunk.next_offset, chunk.data, chunk.eof) == (
            0,
            len(text.encode()),
            text,
            True,
        )
    assert answer.log_sizes == {n: (logs / f"{n}.log").stat().st_size for n in answer.logs}
    assert answer.more is False

    # from where the controller stands: nothing new
    offsets = {name: chunk.next_offset for name, chunk in answer.logs.items()}
    again = client.get(f"/poll?events_after={answer.events_next}&logs={encode_offsets(offsets)}")
    assert again["events"] == [] and again["logs"] == {} and again["more"] is False
    assert again["events_next"] == answer.events_next


def test_the_log_limit_spans_all_stages_cuts_at_line_ends_and_says_more(tmp_path, start_agent):
    script = 'for i in $(seq 1 30); do echo "line $i of the stage"; done'
    plan = make_plan(tmp_path, [{"name": "a", "run": script}, {"name": "b", "run": script}])
    client = start_agent(plan)
    client.wait_finished()
    logs = Path(plan.state_dir) / "logs"
    want = {n: (logs / f"{n}.log").read_text() for n in ("a", "b")}
    got = {"a": "", "b": ""}
    offsets = {"a": 0, "b": 0}
    polls = 0
    while True:
        polls += 1
        answer = client.get(f"/poll?log_limit=700&logs={encode_offsets(offsets)}")
        carried = sum(c["next_offset"] - c["offset"] for c in answer["logs"].values())
        assert carried <= 700
        for name, chunk in answer["logs"].items():
            assert chunk["offset"] == offsets[name] and chunk["data"].endswith("\n")
            got[name] += chunk["data"]
            offsets[name] = chunk["next_offset"]
        if not answer["more"]:
            break
        assert polls < 50
    assert got == want and polls > 3


def test_bad_poll_parameters_are_a_json_400_naming_them(tmp_path, start_agent):
    client = start_agent(make_plan(tmp_path, [{"name": "a", "run": "true"}]))
    for query, word in (
        ("events_after=-1", "events_after"),
        ("log_limit=0", "log_limit"),
        ("logs=a", "logs"),
        ("logs=a:x", "logs"),
    ):
        status, body = client.request("GET", f"/poll?{query}")
        assert status == 400 and word in body["error"], (query, status, body)


def test_offsets_travel_percent_encoded() -> None:
    offsets = {"a": 3, "with,comma:colon": 7, "_setup": 0}
    raw = encode_offsets(offsets)
    assert decode_offsets(raw) == offsets
    assert decode_offsets(quote("a") + ":12") == {"a": 12}


def test_the_controllers_client_reads_the_poll_answer_as_typed_models(tmp_path, start_agent):
    client = start_agent(make_plan(tmp_path, [{"name": "a", "run": "echo hi"}]))
    client.wait_finished()
    api = AgentClient(client.url, TOKEN)
    try:
        answer = api.poll(0, {})
        assert answer.status.phase == "succeeded" and answer.logs["a"].data.endswith("hi\n")
        assert all(isinstance(e, AgentEvent) for e in answer.events) and answer.events
        assert answer.events[0].seq == 1 and answer.events[0].type == "attempt.started"
        assert client.get("/health")["features"] == {"poll": 1}
        page = api.events(after=0)
        assert [e.seq for e in page.events] == [e.seq for e in answer.events]
        assert page.next == answer.events_next
        chunk = api.logs("a")
        assert chunk.stage == "a" and chunk.data == answer.logs["a"].data and chunk.eof
        assert api.log_sizes() == answer.log_sizes
    finally:
        api.close()


def test_the_agents_raw_poll_answer_validates_as_the_wire_model(tmp_path, start_agent):
    client = start_agent(make_plan(tmp_path, [{"name": "a", "run": "echo hi"}]))
    client.wait_finished()
    raw = client.get("/poll?events_after=0")
    answer = PollAnswer.model_validate(raw)  # strict: a key the model lacks would fail here
    assert answer.model_dump(mode="json") == raw
    assert {e.type for e in answer.events} >= {"attempt.started", "attempt.finished"}
