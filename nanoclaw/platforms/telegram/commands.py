"""`flask --app app nanoclaw telegram …`: the webhook (register, show, remove) or long polling."""
from __future__ import annotations

import click

from ...channels.base import DeliveryError, get_adapter
from ...cli.base import Mistake, group, settings as current_settings
from . import update_mode
from .adapter import ALLOWED_UPDATES, SECRET_RE
from .listener import Poller


def webhook_problem(platform: dict, url: str) -> str | None:
    """Why set-webhook cannot go ahead, as one line; None when it can."""
    if not platform.get("TELEGRAM_BOT_TOKEN"):
        return "TELEGRAM_BOT_TOKEN is not set; put the token from @BotFather in .env"
    secret = platform.get("TELEGRAM_WEBHOOK_SECRET")
    if not secret:
        return "TELEGRAM_WEBHOOK_SECRET is not set; put a random string (A-Z, a-z, 0-9, _ and -) in .env"
    if not SECRET_RE.fullmatch(secret):
        return "TELEGRAM_WEBHOOK_SECRET may only hold 1-256 of A-Z, a-z, 0-9, _ and -"
    if not url.startswith("https://"):
        return f"{url!r} is not an https:// URL; Telegram only calls webhooks over HTTPS"
    return None


@group("telegram")
def telegram_cli():
    """Telegram: long polling (no public URL) or a webhook; register, remove and show it."""


@telegram_cli.command("set-webhook")
@click.argument("url")
@click.option("--drop-pending", is_flag=True, help="Discard updates Telegram queued while no webhook answered.")
def set_webhook_command(url: str, drop_pending: bool):
    """Point the bot at URL (…/webhooks/telegram), with the secret header and the update types we use."""
    settings = current_settings()
    problem = webhook_problem(settings.platform, url)
    if problem:
        raise Mistake(problem)
    if not url.rstrip("/").endswith("/webhooks/telegram"):
        click.echo(f"note: {url} does not end in /webhooks/telegram, where NanoClaw listens", err=True)
    try:
        get_adapter("telegram", settings).set_webhook(url, drop_pending)
    except DeliveryError as exc:
        raise Mistake(f"Telegram refused the webhook: {exc}") from None
    click.echo(f"webhook set to {url} (updates: {', '.join(ALLOWED_UPDATES)}; secret token required)")


@telegram_cli.command("webhook-info")
def webhook_info_command():
    """What Telegram knows about our webhook: URL, pending updates, last error."""
    try:
        info = get_adapter("telegram", current_settings()).webhook_info()
    except DeliveryError as exc:
        raise Mistake(str(exc)) from None
    for key in ("url", "pending_update_count", "last_error_message", "allowed_updates"):
        if info.get(key) not in (None, ""):
            click.echo(f"{key}: {info[key]}")


@telegram_cli.command("delete-webhook")
@click.option("--drop-pending", is_flag=True, help="Also discard the updates Telegram queued.")
def delete_webhook_command(drop_pending: bool):
    """Remove the webhook, so long polling (TELEGRAM_MODE=poll or auto) can fetch updates."""
    if not current_settings().platform.get("TELEGRAM_BOT_TOKEN"):
        raise Mistake("TELEGRAM_BOT_TOKEN is not set; put the token from @BotFather in .env")
    try:
        get_adapter("telegram", current_settings()).delete_webhook(drop_pending)
    except DeliveryError as exc:
        raise Mistake(f"Telegram refused: {exc}") from None
    click.echo("webhook removed; updates are fetched by long polling (the telegram-poll program)")


@telegram_cli.command("poll")
def poll_command():
    """Run the long-polling client (supervisord's `telegram-poll` program, started when a bot
    token is set and TELEGRAM_MODE resolves to poll): no public URL needed."""
    settings = current_settings()
    mode = update_mode(settings.platform)
    if mode is None:
        raise Mistake("TELEGRAM_BOT_TOKEN is not set; put the token from @BotFather in .env")
    if mode != "poll":
        raise Mistake("TELEGRAM_MODE resolves to webhook (TELEGRAM_WEBHOOK_SECRET is set); set TELEGRAM_MODE=poll "
                      "to poll instead")
    Poller(settings).run()
