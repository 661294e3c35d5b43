"""Signing deliveries as GitHub and Standard Webhooks senders do (for the hook tests)."""
from __future__ import annotations

import base64
import hashlib
import hmac
import json
import uuid
from pathlib import Path

FIXTURES = Path(__file__).parent / "fixtures" / "github"
SECRET = "gh-hook-secret-0123456789"
TEMPLATE = ("A GitHub issue was {{ payload.action }} in {{ payload.repository.full_name }}: "
            "#{{ payload.issue.number }} {{ payload.issue.title }}. "
            "{% if payload.action == 'opened' %}Summarise it in one line for me.{% endif %}")


def github_delivery(body: bytes, event: str = "issues", secret: str = SECRET, delivery: str | None = None) -> dict:
    signature = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return {"X-Hub-Signature-256": signature, "X-GitHub-Event": event, "X-GitHub-Delivery": delivery or str(uuid.uuid4()),
            "Content-Type": "application/json", "User-Agent": "GitHub-Hookshot/abc123"}


def standard_delivery(body: bytes, secret: str, timestamp: int, msg_id: str = "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W") -> dict:
    key = base64.b64decode(secret.removeprefix("whsec_"))
    mac = hmac.new(key, f"{msg_id}.{timestamp}.".encode() + body, hashlib.sha256).digest()
    return {"webhook-id": msg_id, "webhook-timestamp": str(timestamp),
            "webhook-signature": "v1," + base64.b64encode(mac).decode(), "Content-Type": "application/json"}


def issue_body() -> bytes:
    return json.dumps(json.loads((FIXTURES / "issues-opened.json").read_text())).encode()
