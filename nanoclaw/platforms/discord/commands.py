"""`flask --app app nanoclaw discord-gateway`: the Gateway program."""
from __future__ import annotations

from ...cli.base import Mistake, command, settings as current_settings
from .listener import run_gateway


@command("discord-gateway")
def discord_gateway_cmd():
    """Run the Discord Gateway client (supervisord's optional `discord-gateway` program): ordinary
    Discord messages arrive only over the Gateway; this feeds them into the same router."""
    if not current_settings().platform.get("DISCORD_BOT_TOKEN"):
        raise Mistake("DISCORD_BOT_TOKEN is not set; the Discord Gateway needs the bot token")
    run_gateway(current_settings())


COMMANDS = (discord_gateway_cmd,)
