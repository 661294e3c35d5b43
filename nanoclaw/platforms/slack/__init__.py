"""Slack (Events API or Socket Mode in, Web API out). The declaration."""
from __future__ import annotations

from .. import Listener, Platform, Setting, register

PLATFORM = register(Platform(
    name="slack", label="Slack",
    settings=(Setting("SLACK_BOT_TOKEN", secret=True), Setting("SLACK_SIGNING_SECRET", secret=True),
              Setting("SLACK_BOT_USER_ID"), Setting("SLACK_APP_TOKEN", secret=True),
              Setting("SLACK_API_BASE", "https://slack.com/api")),
    secret_prefixes=("SLACK_",),
    adapter="adapter:SlackAdapter",
    configured=lambda values: bool(values.get("SLACK_BOT_TOKEN")),
    # a DM's id starts with D; a channel is threaded: each top-level message starts a thread
    guess_kind=lambda chat_id: "dm" if chat_id.startswith("D") else "thread",
    listeners=(Listener("slack-socket", ("slack", "socket"), lambda values: bool(values.get("SLACK_APP_TOKEN"))),),
    commands="commands:slack_cli",
    doctor="doctor:check",
), __name__)
