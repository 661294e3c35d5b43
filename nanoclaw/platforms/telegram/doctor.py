"""What `doctor` checks for Telegram: the bot token, and whether updates can arrive the way
TELEGRAM_MODE says. Nothing printed holds a secret.
"""
from __future__ import annotations

from .. import Finding, probe
from . import update_mode


def check(platform: dict) -> Finding | None:
    mode = update_mode(platform)
    if mode is None:
        return None
    api = f"{platform.get('TELEGRAM_API_BASE')}/bot{platform['TELEGRAM_BOT_TOKEN']}"
    status, me = probe(f"{api}/getMe", method="POST")
    if status != 200 or not me.get("ok"):
        return Finding(False, "Telegram", f"the bot token was refused ({status or me.get('_error')}); copy it "
                                          "again from @BotFather into TELEGRAM_BOT_TOKEN")
    name = (me.get("result") or {}).get("username", "?")
    _status, info = probe(f"{api}/getWebhookInfo", method="POST")
    hook = (info.get("result") or {}).get("url") or ""
    if mode == "poll" and hook:
        return Finding(False, "Telegram", f"@{name}: a webhook is registered, so long polling gets nothing; run "
                                          "`flask --app app nanoclaw telegram delete-webhook`")
    if mode == "webhook" and not hook:
        return Finding(False, "Telegram", f"@{name}: webhook mode but no webhook registered; run "
                                          "`flask --app app nanoclaw telegram set-webhook https://…/webhooks/telegram`")
    return Finding(True, "Telegram", f"@{name}, {'long polling' if mode == 'poll' else 'webhook ' + hook}")
