"""Discord (Gateway and interactions in, REST out). The declaration."""
from __future__ import annotations

from .. import Listener, Platform, Setting, register

PLATFORM = register(Platform(
    name="discord", label="Discord",
    settings=(Setting("DISCORD_BOT_TOKEN", secret=True), Setting("DISCORD_PUBLIC_KEY"),
              Setting("DISCORD_APPLICATION_ID"), Setting("DISCORD_API_BASE", "https://discord.com/api/v10")),
    secret_prefixes=("DISCORD_",),
    adapter="adapter:DiscordAdapter",
    configured=lambda values: bool(values.get("DISCORD_BOT_TOKEN")),
    # a channel id says nothing of its kind: wire a server channel with --kind thread
    listeners=(Listener("discord-gateway", ("discord-gateway",), lambda values: bool(values.get("DISCORD_BOT_TOKEN")),
                        startsecs=5, stopwaitsecs=10),),
    commands="commands:COMMANDS",
    doctor="doctor:check",
), __name__)
