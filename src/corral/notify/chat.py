"""Webhook formats for the chat services a team reads (``notify.webhooks[].format``): their
incoming webhooks' own payloads, one readable message per event, with a link to the run on the
team server when ``CORRAL_PUBLIC_URL`` says where that is.

* ``slack``: ``{"text", "blocks"}``, a section in Slack's mrkdwn (the run's name linked, the
  message) and a context line (the event, the attempt); ``text`` is the notification's plain
  fallback. Slack's incoming webhooks publish no schema: the limits kept (section text at most
  3,000 characters, ``&``, ``<`` and ``>`` escaped) are those of its Block Kit reference, named
  in ``docs/webhooks.md``.
* ``discord``: an execute-webhook request (Discord's published OpenAPI document,
  ``contracts/discord-execute-webhook.json``): one embed (title, description, the run's link,
  a colour per status, fields, timestamp), ``username`` corral, and no mention parsed.
* ``teams``: a message with one Adaptive Card attachment (schema 1.5 in
  ``contracts/adaptive-card-1.5.json``; the card says version 1.4, what Teams renders
  everywhere), as Teams' Workflows webhooks take it: a title, the message, a fact set and an
  "Open the run" action.

The same event reads the same in every format (:mod:`corral.notify.describe`).
"""

from __future__ import annotations

from typing import Any

from corral.notify.describe import message_of, percent_of, status_of

#: Discord embed colours per status (24-bit RGB)
_COLOURS = {
    "completed": 0x2EB67D,
    "running": 0x3B82F6,
    "progress": 0x3B82F6,
    "recovering": 0xF59E0B,
    "warning": 0xF59E0B,
    "stopped": 0x8B5CF6,
    "cancelled": 0x6B7280,
    "failed": 0xE01E5A,
}
SLACK_SECTION_MAX = 3000
DISCORD_DESCRIPTION_MAX = 4096
DISCORD_TITLE_MAX = 256


def run_link(payload: dict[str, Any], public_url: str | None) -> str | None:
    """The run's page on the team server (``<CORRAL_PUBLIC_URL>/runs/<id>``), if known."""
    run_id = (payload.get("run") or {}).get("id")
    if not public_url or not run_id:
        return None
    return f"{public_url.rstrip('/')}/runs/{run_id}"


def _words(payload: dict[str, Any]) -> tuple[str, str, str, str]:
    """(run name, status, title, message) of the event."""
    kind = str(payload.get("type"))
    data = dict(payload.get("data") or {})
    status = status_of(kind, data)
    text = message_of(kind, data, payload.get("reason"), percent_of(data))
    name = str((payload.get("run") or {}).get("name") or "run")
    return name, status, f"{name}: {status}", text


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _slack_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def slack(payload: dict[str, Any], public_url: str | None = None) -> dict[str, Any]:
    name, status, title, text = _words(payload)
    link = run_link(payload, public_url)
    head = f"<{link}|{_slack_escape(name)}>" if link else _slack_escape(name)
    section = f"*{head}* {_slack_escape(status)}\n{_slack_escape(text)}"
    context = f"corral · {payload.get('type')} · attempt {payload.get('attempt') or '-'}"
    return {
        "text": _cut(f"{title}: {text}", SLACK_SECTION_MAX),
        "blocks": [
            {"type": "section", "text": {"type": "mrkdwn", "text": _cut(section, 3000)}},
            {"type": "context", "elements": [{"type": "mrkdwn", "text": context}]},
        ],
    }


def discord(payload: dict[str, Any], public_url: str | None = None) -> dict[str, Any]:
    _, status, title, text = _words(payload)
    run = payload.get("run") or {}
    embed: dict[str, Any] = {
        "title": _cut(title, DISCORD_TITLE_MAX),
        "description": _cut(text, DISCORD_DESCRIPTION_MAX),
        "color": _COLOURS.get(status, _COLOURS["running"]),
        "fields": [
            {"name": "run", "value": str(run.get("id") or "-"), "inline": True},
            {"name": "attempt", "value": str(payload.get("attempt") or "-"), "inline": True},
            {"name": "event", "value": str(payload.get("type")), "inline": True},
        ],
        "footer": {"text": "corral"},
    }
    if payload.get("ts"):
        embed["timestamp"] = payload["ts"]
    link = run_link(payload, public_url)
    if link:
        embed["url"] = link
    return {"username": "corral", "embeds": [embed], "allowed_mentions": {"parse": []}}


def teams(payload: dict[str, Any], public_url: str | None = None) -> dict[str, Any]:
    _, _status, title, text = _words(payload)
    run = payload.get("run") or {}
    card: dict[str, Any] = {
        "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
        "type": "AdaptiveCard",
        "version": "1.4",
        "body": [
            {
                "type": "TextBlock",
                "text": title,
                "weight": "Bolder",
                "size": "Medium",
                "wrap": True,
            },
            {"type": "TextBlock", "text": text, "wrap": True},
            {
                "type": "FactSet",
                "facts": [
                    {"title": "Run", "value": str(run.get("id") or "-")},
                    {"title": "Attempt", "value": str(payload.get("attempt") or "-")},
                    {"title": "Event", "value": str(payload.get("type"))},
                ],
            },
        ],
    }
    link = run_link(payload, public_url)
    if link:
        card["actions"] = [{"type": "Action.OpenUrl", "title": "Open the run", "url": link}]
    return {
        "type": "message",
        "attachments": [
            {
                "contentType": "application/vnd.microsoft.card.adaptive",
                "contentUrl": None,
                "content": card,
            }
        ],
    }
