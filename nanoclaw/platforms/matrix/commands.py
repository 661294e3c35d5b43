"""`flask --app app nanoclaw matrix …`: run the sync program, log the bot in, leave a room."""
from __future__ import annotations

import asyncio
import logging
import signal

import click

from ...channels.base import DeliveryError, get_adapter
from ...cli.base import Mistake, group, settings as current_settings
from . import account, configured
from .listener import SyncListener


def _ready(settings) -> None:
    if not configured(settings.platform):
        raise Mistake("Matrix is not set up: put MATRIX_HOMESERVER, MATRIX_USER_ID and MATRIX_ACCESS_TOKEN (or "
                      "MATRIX_PASSWORD) in .env")


@group("matrix")
def matrix_cli():
    """Matrix: the bot is a Matrix account; events come by /sync (no public URL needed)."""


@matrix_cli.command("sync")
def sync_command():
    """Run the sync client (supervisord's `matrix-sync` program, started when Matrix is set up)."""
    settings = current_settings()
    _ready(settings)
    listener = SyncListener(settings)

    async def main():
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, listener.stopped.set)
        await listener.run()
    logging.getLogger("mau").setLevel(logging.WARNING)  # mautrix logs each request at INFO
    asyncio.run(main())


@matrix_cli.command("login")
def login_command():
    """Log in with MATRIX_PASSWORD once and keep the token in data/matrix/account.json (owner-only),
    so the programs share one device. Not needed with MATRIX_ACCESS_TOKEN."""
    settings = current_settings()
    _ready(settings)
    if settings.platform.get("MATRIX_ACCESS_TOKEN"):
        raise Mistake("MATRIX_ACCESS_TOKEN is set: there is nothing to log in; remove it to use MATRIX_PASSWORD")
    listener = SyncListener(settings)

    async def main():
        client = await listener.connect()
        await client.api.session.close()
    try:
        asyncio.run(main())
    except Exception as exc:  # noqa: BLE001 - one line: refused, unreachable
        raise Mistake(f"could not log in to {listener.base}: {type(exc).__name__}: {str(exc)[:200]}") from None
    click.echo(f"logged in as {settings.platform['MATRIX_USER_ID']}; the token is in "
               f"{account.state_dir(settings) / 'account.json'}")


@matrix_cli.command("leave")
@click.argument("room_id")
def leave_command(room_id: str):
    """Leave ROOM_ID (!abc:example.org), e.g. after unwiring it; the room can invite the bot again."""
    settings = current_settings()
    _ready(settings)
    if not room_id.startswith("!") or ":" not in room_id:
        raise Mistake(f"{room_id!r} is not a room id; it looks like !abc:example.org")
    try:
        get_adapter("matrix", settings).leave(room_id)
    except DeliveryError as exc:
        raise Mistake(f"the homeserver refused: {exc}") from None
    click.echo(f"left {room_id}")
