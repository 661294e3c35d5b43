"""What `doctor` checks for Discord: the bot token. Nothing printed holds a secret."""
from __future__ import annotations

from .. import Finding, probe


def check(platform: dict) -> Finding | None:
    if not platform.get("DISCORD_BOT_TOKEN"):
        return None
    status, body = probe(f"{platform.get('DISCORD_API_BASE')}/users/@me",
                        headers={"Authorization": f"Bot {platform['DISCORD_BOT_TOKEN']}"})
    if status != 200:
        return Finding(False, "Discord", f"the bot token was refused ({status}); copy it into DISCORD_BOT_TOKEN")
    return Finding(True, "Discord", f"{body.get('username', '?')}")
