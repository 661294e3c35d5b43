"""What `doctor` checks for Slack: the bot token (auth.test). Nothing printed holds a secret."""
from __future__ import annotations

from .. import Finding, probe


def check(platform: dict) -> Finding | None:
    if not platform.get("SLACK_BOT_TOKEN"):
        return None
    status, body = probe(f"{platform.get('SLACK_API_BASE')}/auth.test", method="POST",
                        headers={"Authorization": f"Bearer {platform['SLACK_BOT_TOKEN']}"})
    if status != 200 or not body.get("ok"):
        return Finding(False, "Slack", f"the bot token was refused ({body.get('error') or status}); copy the "
                                       "Bot User OAuth Token into SLACK_BOT_TOKEN")
    how = "Socket Mode" if platform.get("SLACK_APP_TOKEN") else "webhooks"
    return Finding(True, "Slack", f"{body.get('user', '?')} in {body.get('team', '?')}, {how}")
