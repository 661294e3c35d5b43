"""How a test talks to each platform's webhook: the settings that configure it, and a signed post.
One kit per platform of the registry; the contract test (test_contract.py) runs every kit against
the platform's real payloads in tests/fixtures/<name>/, so a new platform is checked by adding its
kit here and its fixtures there."""
from __future__ import annotations

import hashlib
import hmac
import json
import time
from dataclasses import dataclass, field
from typing import Callable
from urllib.parse import urlencode

from nacl.signing import SigningKey

def nothing_stored() -> bool:
    """A refused webhook left no trace: no event accepted, no message dropped, no session made."""
    from nanoclaw.models import AcceptedEvent, DroppedMessage, Session
    return AcceptedEvent.select().count() == 0 and DroppedMessage.select().count() == 0 and \
        Session.select().count() == 0


def rows(app, session) -> list[dict]:
    """The messages routed into a session's inbound.db, oldest first, each its content with its
    trigger and timestamp."""
    from nanoclaw.sessions import session_schema as schema
    path = app.config["NANOCLAW"].sessions_dir / session.agent_group.folder / session.id / "host" / schema.INBOUND
    conn = schema.connect(path, readonly=True)
    try:
        return [{"trigger": r["trigger"], "timestamp": r["timestamp"], **json.loads(r["content"])}
                for r in conn.execute("SELECT * FROM messages_in ORDER BY seq")]
    finally:
        conn.close()


MATRIX_INSTALL_SECRET = "contract-install-secret-0123456789abcdef"
TG_SECRET, SLACK_SECRET, WA_SECRET = "tg-secret_0123456789", "slack-signing-secret", "wa-app-secret"
DISCORD_KEY, OTHER_KEY = SigningKey.generate(), SigningKey.generate()
TG_BOT = "7000001"            # the Telegram bot of the fixtures (its token's prefix)
SLACK_BOT_USER = "U0BOTANDY"  # the Slack bot user of the fixtures


def _hmac(secret: str, data: bytes) -> str:
    return hmac.new(secret.encode(), data, hashlib.sha256).hexdigest()


def _slack(body: bytes, right: bool) -> dict:
    ts = str(int(time.time()))
    digest = _hmac(SLACK_SECRET if right else "not-the-signing-secret", f"v0:{ts}:".encode() + body)
    return {"X-Slack-Request-Timestamp": ts, "X-Slack-Signature": f"v0={digest}"}


def _discord(body: bytes, right: bool) -> dict:
    ts = str(int(time.time()))
    key = DISCORD_KEY if right else OTHER_KEY
    return {"X-Signature-Ed25519": key.sign(ts.encode() + body).signature.hex(), "X-Signature-Timestamp": ts}


def _signal(body: bytes, right: bool) -> dict:
    from nanoclaw.channels import handoff
    from nanoclaw.platforms.signal.adapter import EVENTS_KEY_PURPOSE
    secret = MATRIX_INSTALL_SECRET if right else "another-install-secret-0123456789abcdef"
    return handoff.signed_headers(handoff.purpose_key(secret, EVENTS_KEY_PURPOSE), body, time.time())


def _matrix(body: bytes, right: bool) -> dict:
    from nanoclaw.channels import handoff
    from nanoclaw.platforms.matrix.adapter import SYNC_KEY_PURPOSE
    secret = MATRIX_INSTALL_SECRET if right else "another-install-secret-0123456789abcdef"
    return handoff.signed_headers(handoff.purpose_key(secret, SYNC_KEY_PURPOSE), body, time.time())


@dataclass(frozen=True)
class Kit:
    name: str
    env: Callable[[str], dict]                  # its settings, its API at this (dead) address
    secret: str                                 # the setting that authenticates its webhooks
    sign: Callable[[bytes, bool], dict]         # headers for a body: signed right, or not
    paths: dict = field(default_factory=dict)   # kind -> webhook path ("" is the default kind)
    forms: tuple[str, ...] = ()                 # kinds whose payload is form-encoded

    def body(self, payload, kind: str = "") -> bytes:
        if isinstance(payload, bytes):
            return payload
        raw = json.dumps(payload)
        return urlencode({"payload": raw}).encode() if kind in self.forms else raw.encode()

    def post(self, client, payload, *, kind: str = "", right: bool = True, headers: dict | None = None,
             body: bytes | None = None):
        data = body if body is not None else self.body(payload, kind)
        signed = self.sign(self.body(payload, kind) if body is not None and payload is not None else data, right)
        content = "application/x-www-form-urlencoded" if kind in self.forms else "application/json"
        return client.post(self.paths[kind], data=data,
                           headers={**signed, "Content-Type": content} if headers is None else headers)


KITS = {kit.name: kit for kit in (
    Kit("telegram", lambda dead: {"TELEGRAM_BOT_TOKEN": f"{TG_BOT}:AAH-token", "TELEGRAM_WEBHOOK_SECRET": TG_SECRET,
                                  "TELEGRAM_API_BASE": dead},
        "TELEGRAM_WEBHOOK_SECRET",
        lambda _body, right: {"X-Telegram-Bot-Api-Secret-Token": TG_SECRET if right else TG_SECRET + "x"},
        {"": "/webhooks/telegram"}),
    Kit("slack", lambda dead: {"SLACK_BOT_TOKEN": "xoxb-1", "SLACK_SIGNING_SECRET": SLACK_SECRET,
                               "SLACK_API_BASE": dead, "SLACK_BOT_USER_ID": SLACK_BOT_USER},
        "SLACK_SIGNING_SECRET", _slack, {"": "/webhooks/slack/events", "actions": "/webhooks/slack/actions"},
        forms=("actions",)),
    Kit("whatsapp", lambda dead: {"WHATSAPP_TOKEN": "wa-token", "WHATSAPP_APP_SECRET": WA_SECRET,
                                  "WHATSAPP_VERIFY_TOKEN": "v", "WHATSAPP_PHONE_NUMBER_ID": "106540352242922",
                                  "WHATSAPP_API_BASE": dead},
        "WHATSAPP_APP_SECRET",
        lambda body, right: {"X-Hub-Signature-256": f"sha256={_hmac(WA_SECRET if right else 'x', body)}"},
        {"": "/webhooks/whatsapp"}),
    Kit("discord", lambda dead: {"DISCORD_BOT_TOKEN": "d-token",
                                 "DISCORD_PUBLIC_KEY": DISCORD_KEY.verify_key.encode().hex(),
                                 "DISCORD_APPLICATION_ID": "999", "DISCORD_API_BASE": dead},
        "DISCORD_PUBLIC_KEY", _discord, {"": "/webhooks/discord/interactions"}),
    # the matrix-sync program's hand-over, signed with a key from the install's secret
    Kit("matrix", lambda dead: {"MATRIX_HOMESERVER": dead, "MATRIX_USER_ID": "@andy:example.org",
                                "MATRIX_ACCESS_TOKEN": "syt_YW5keQ_contract_token", "NANOCLAW_SECRET_KEY":
                                MATRIX_INSTALL_SECRET},
        "MATRIX_ACCESS_TOKEN", _matrix, {"": "/webhooks/matrix/sync"}),
    # the signal-events program's hand-over, signed with a key from the install's secret
    Kit("signal", lambda dead: {"SIGNAL_ACCOUNT": "+4915100000001", "SIGNAL_CLI_URL": dead,
                                "NANOCLAW_SECRET_KEY": MATRIX_INSTALL_SECRET},
        "SIGNAL_ACCOUNT", _signal, {"": "/webhooks/signal/events"}),
)}
