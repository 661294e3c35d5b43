"""`flask --app app nanoclaw slack socket`: Socket Mode, no public URL needed."""
from __future__ import annotations

from ...cli.base import Mistake, group, settings as current_settings
from .listener import SocketBridge


@group("slack")
def slack_cli():
    """Slack: Socket Mode (no public URL) when SLACK_APP_TOKEN is set."""


@slack_cli.command("socket")
def slack_socket_command():
    """Run the Socket Mode client (supervisord's `slack-socket` program, started when SLACK_APP_TOKEN
    is set): events and button clicks arrive over a connection this program opens."""
    settings = current_settings()
    token = settings.platform.get("SLACK_APP_TOKEN")
    if not token:
        raise Mistake("SLACK_APP_TOKEN is not set; make an app-level token (xapp-…) with connections:write "
                      "under Basic Information → App-Level Tokens, and enable Socket Mode")
    if not token.startswith("xapp-"):
        raise Mistake("SLACK_APP_TOKEN must be an app-level token (it starts with xapp-), not the bot token")
    SocketBridge(settings).run()
