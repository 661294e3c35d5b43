"""Telegram (Bot API): webhooks or long polling in, Bot API calls out. The declaration."""
from __future__ import annotations

from .. import Listener, Platform, Setting, register

MODES = ("auto", "poll", "webhook")


def update_mode(values: dict) -> str | None:
    """How updates arrive: 'webhook', 'poll' (getUpdates, no public URL needed), or None without a
    bot token. TELEGRAM_MODE=auto picks webhook when a webhook secret is set."""
    if not values.get("TELEGRAM_BOT_TOKEN"):
        return None
    mode = values.get("TELEGRAM_MODE", "auto")
    if mode == "auto":
        return "webhook" if values.get("TELEGRAM_WEBHOOK_SECRET") else "poll"
    return mode


def _check(values: dict) -> str | None:
    mode = values.get("TELEGRAM_MODE", "auto")
    if mode not in MODES:
        return (f"TELEGRAM_MODE={mode!r} is unknown; it accepts one of: {', '.join(MODES)} "
                "(auto: webhook when TELEGRAM_WEBHOOK_SECRET is set, else long polling)")
    return None


PLATFORM = register(Platform(
    name="telegram", label="Telegram",
    settings=(Setting("TELEGRAM_BOT_TOKEN", secret=True), Setting("TELEGRAM_WEBHOOK_SECRET", secret=True),
              Setting("TELEGRAM_API_BASE", "https://api.telegram.org"), Setting("TELEGRAM_MODE", "auto")),
    secret_prefixes=("TELEGRAM_",),
    adapter="adapter:TelegramAdapter",
    configured=lambda values: bool(values.get("TELEGRAM_BOT_TOKEN")),
    # a group's id is negative; a positive one is a person, and their DM's id is their own
    guess_kind=lambda chat_id: "group" if chat_id.startswith("-") else "dm",
    dm_is_user=True,
    listeners=(Listener("telegram-poll", ("telegram", "poll"), lambda values: update_mode(values) == "poll"),),
    commands="commands:telegram_cli",
    doctor="doctor:check",
    check=_check,
), __name__)
