"""``format: slack | discord | teams``: a run's webhooks delivered to a loopback receiver per
format, each body checked against what the service publishes: Discord's OpenAPI document
(execute webhook), Microsoft's Adaptive Card schema inside Teams' message envelope, and Slack's
Block Kit limits (no machine-readable document: the assumption named in docs/webhooks.md).
One readable message per event, the run linked on the team server, no secret in any."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from hookkit import SECRET, FakeClock, hooked_run, simulate_run

from corral.notify import chat
from corral.notify.dispatcher import Dispatcher
from corral.store import Store
from support.openapi_contract import CONTRACTS, load

DISCORD_PATH = "/api/v10/webhooks/123456789012345678/t0ken"  # the document's server: /api/v10
#: Slack's Block Kit reference (api.slack.com/reference/block-kit/blocks): a section's text at
#: most 3,000 characters; a context block's elements at most 10; mrkdwn escapes &, < and >
SLACK_SECTION_MAX = 3000


def _adaptive_card_errors(card: dict[str, Any]) -> list[str]:
    schema = json.loads((CONTRACTS / "adaptive-card-1.5.json").read_text())
    validator = jsonschema.Draft6Validator(schema)
    return [e.message for e in validator.iter_errors(card)]


def teams_errors(body: dict[str, Any]) -> list[str]:
    """What Teams' webhook would refuse: the message envelope (Microsoft Learn, "Send Adaptive
    Cards using an Incoming Webhook"), then the card against the published schema."""
    if body.get("type") != "message" or not isinstance(body.get("attachments"), list):
        return ["not a message with attachments"]
    errors = []
    for a in body["attachments"]:
        if a.get("contentType") != "application/vnd.microsoft.card.adaptive":
            errors.append(f"contentType {a.get('contentType')!r}")
        card = a.get("content") or {}
        if card.get("type") != "AdaptiveCard" or not card.get("version"):
            errors.append("the top-level card needs type AdaptiveCard and a version")
        errors += _adaptive_card_errors(card)
    return errors


def discord_errors(body: bytes) -> list[str]:
    return load("discord-execute-webhook.json").check_request(
        "POST", DISCORD_PATH, headers={"Content-Type": "application/json"}, body=body
    )


def slack_errors(body: dict[str, Any]) -> list[str]:
    errors = []
    if not isinstance(body.get("text"), str) or not body["text"]:
        errors.append("text: a non-empty string (the notification's fallback)")
    for block in body.get("blocks") or []:
        if block.get("type") == "section":
            text = block["text"]
            if text.get("type") not in ("mrkdwn", "plain_text") or not text.get("text"):
                errors.append("section text: mrkdwn or plain_text, not empty")
            elif len(text["text"]) > SLACK_SECTION_MAX:
                errors.append("section text over 3000 characters")
            # mrkdwn: a bare < or > (not a <url|label> link) or a bare & is not escaped
            bare = re.sub(r"<https?://[^|>]+\|[^>]*>", "", text["text"])
            if re.search(r"[<>]|&(?!amp;|lt;|gt;)", bare):
                errors.append("section text: & < > not escaped")
        elif block.get("type") == "context":
            if not 1 <= len(block.get("elements") or []) <= 10:
                errors.append("context: 1 to 10 elements")
        else:
            errors.append(f"block type {block.get('type')!r} not sent by corral")
    return errors


@pytest.fixture
def delivered(store: Store, clock: FakeClock, receivers, monkeypatch):
    """A short run's webhooks in the three formats (and corral's), with the team server's
    address set: each format's accepted requests."""
    monkeypatch.setenv("CORRAL_PUBLIC_URL", "https://corral.team.example/")
    rx = {fmt: receivers(secret=SECRET) for fmt in ("slack", "discord", "teams", "corral")}
    hooks = [
        {"url": r.url, "secret": "HOOK_SECRET", **({} if fmt == "corral" else {"format": fmt})}
        for fmt, r in rx.items()
    ]
    run_id = hooked_run(store, *hooks, name="ocr <b>&</b>")
    store.create_attempt(run_id, 1, provider="fake", offer={}, price_per_hour=0.1)
    store.update_run(run_id, attempt=1, cost_usd=0.2)
    types = simulate_run(store, run_id, clock)
    d = Dispatcher(store, clock=clock, secret_resolver={"HOOK_SECRET": SECRET}.get)
    d.tick()
    d.run_pending()
    got = {fmt: r.accepted() for fmt, r in rx.items()}
    assert all(len(reqs) == len(types) for reqs in got.values()), {
        k: len(v) for k, v in got.items()
    }
    return run_id, types, got


def test_every_chat_payload_is_what_the_service_publishes(delivered) -> None:
    run_id, types, got = delivered
    link = f"https://corral.team.example/runs/{run_id}"
    for req in got["discord"]:
        assert discord_errors(req.body) == [], req.json
        [embed] = req.json["embeds"]
        assert embed["url"] == link and req.json["allowed_mentions"] == {"parse": []}
    for req in got["teams"]:
        assert teams_errors(req.json) == [], req.json
        card = req.json["attachments"][0]["content"]
        assert card["actions"][0]["url"] == link
    for req in got["slack"]:
        assert slack_errors(req.json) == [], req.json
        assert f"<{link}|ocr &lt;b&gt;&amp;&lt;/b&gt;>" in req.json["blocks"][0]["text"]["text"]
    # signed and deduplicable like every format
    assert all(r.signature_ok for reqs in got.values() for r in reqs)
    assert [r.headers["x-corral-event"] for r in got["slack"]] == types


def test_one_readable_message_per_event_the_same_in_every_format(delivered) -> None:
    _, types, got = delivered
    slack = [r.json["blocks"][0]["text"]["text"].split("\n", 1)[1] for r in got["slack"]]
    discord = [r.json["embeds"][0]["description"] for r in got["discord"]]
    teams = [r.json["attachments"][0]["content"]["body"][1]["text"] for r in got["teams"]]
    assert discord == teams
    assert slack == [
        m.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;") for m in teams
    ]
    by_type = dict(zip(types, discord, strict=True))
    assert by_type["progress"] == "train: 50.0% (step 5/10), loss 1.5"
    assert by_type["stage.started"] == "stage train started"
    assert by_type["run.finished"] == "run succeeded, cost $0.25: run.finished happened"
    titles = [r.json["embeds"][0]["title"] for r in got["discord"]]
    assert titles[types.index("run.finished")] == "ocr <b>&</b>: completed"
    assert titles[types.index("progress")] == "ocr <b>&</b>: progress"
    colours = {r.json["embeds"][0]["color"] for r in got["discord"]}
    assert 0x2EB67D in colours  # the completed run's green


def test_the_checks_refuse_what_the_services_would(delivered) -> None:
    """The checks can fail: a payload each service would refuse is caught."""
    _, _, got = delivered
    body = json.loads(got["discord"][0].body)
    body["embeds"][0]["title"] = "x" * 300  # Discord: an embed title of at most 256
    assert discord_errors(json.dumps(body).encode())
    body = json.loads(got["discord"][0].body)
    body["embeds"] = [body["embeds"][0]] * 11  # at most 10 embeds
    assert discord_errors(json.dumps(body).encode())
    card = json.loads(got["teams"][0].body)
    card["attachments"][0]["content"]["body"][0]["weight"] = "Heaviest"  # not an enum value
    assert teams_errors(card)
    slack = json.loads(got["slack"][0].body)
    slack["blocks"][0]["text"]["text"] = "a < b"
    assert slack_errors(slack)


def test_without_a_team_server_no_link_and_long_messages_are_cut() -> None:
    payload = {
        "id": "d1",
        "type": "run.finished",
        "ts": "2026-11-28T21:00:00.000Z",
        "run": {"id": "r1", "name": "x" * 400},
        "attempt": 2,
        "reason": "y" * 5000,
        "data": {"state": "FAILED", "cost_usd": 1.5},
    }
    d = chat.discord(payload)
    assert "url" not in d["embeds"][0]
    assert discord_errors(json.dumps(d).encode()) == []
    t = chat.teams(payload)
    assert "actions" not in t["attachments"][0]["content"] and teams_errors(t) == []
    s = chat.slack(payload)
    assert slack_errors(s) == [] and "<" not in s["blocks"][0]["text"]["text"]


def test_the_vendored_card_schema_is_microsofts() -> None:
    doc = json.loads(Path(CONTRACTS / "adaptive-card-1.5.json").read_text())
    assert doc["id"] == "http://adaptivecards.io/schemas/adaptive-card.json"
    assert {"AdaptiveCard", "TextBlock", "FactSet", "Action.OpenUrl"} <= set(doc["definitions"])
