"""A delivery to `POST /hooks/<name>`: read the hook (the host's record), check size, rate and
signature, keep the delivery once, render it, and write it into the hook's own session; then the
answer goes to the hook's chat. Never a 5xx: what is wrong gets its own 4xx, logged once and counted.

`decide` is pure (given the hook, the headers, the body, the time and the rate window); `receive`
reads and acts. The 2xx comes only once the message is in the session's inbound.db (kept)."""
from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass
from datetime import timedelta

import peewee

from .. import metrics
from ..db import database
from ..lifecycle.housekeeping import register_job
from ..models import Session, utcnow
from ..proxy.host_secrets import HostSecrets
from ..sessions import store
from ..sessions.store import WEBHOOK_THREAD_PREFIX, Target
from . import verify
from .render import TemplateRefused, render
from .tables import Webhook, WebhookDelivery

log = logging.getLogger("nanoclaw.hooks")

MAX_BODY = 1 << 20
PER_MINUTE = 30
KEEP_DELIVERIES = timedelta(days=7)
_secrets = HostSecrets()


@dataclass(frozen=True)
class Answer:
    status: int
    text: str


class Window:
    """Deliveries a minute per hook (in this process: the web program is one)."""

    def __init__(self, limit: int = PER_MINUTE):
        self.limit, self._seen, self._lock = limit, {}, threading.Lock()

    def admit(self, name: str, now: float) -> bool:
        with self._lock:
            seen = self._seen.setdefault(name, deque())
            while seen and now - seen[0] >= 60:
                seen.popleft()
            if len(seen) >= self.limit:
                return False
            seen.append(now)
            return True


_window = Window()


def decide(hook: Webhook | None, secret: str | None, headers, body: bytes, now: float, admitted) -> Answer | None:
    """What to answer before anything is kept (pure); None: go on."""
    if hook is None:
        return Answer(404, "no such hook")
    if not hook.enabled:
        return Answer(410, "this hook is disabled")
    if len(body) > MAX_BODY:
        return Answer(413, "the body is larger than 1 MiB")
    if not secret:
        return Answer(401, f"the hook's secret ${hook.secret_env} is not set on the host")
    why = verify.check(hook.scheme, secret, body, headers, now)
    if why:
        return Answer(401, why)
    if not admitted():
        return Answer(429, f"at most {PER_MINUTE} deliveries a minute")
    return None


def receive(settings, name: str, headers, body: bytes, wake, now: float | None = None) -> Answer:
    now = time.time() if now is None else now
    with database.connection_context():
        hook = Webhook.get_or_none(Webhook.name == name)
        early = decide(hook, _secrets(hook.secret_env) if hook else None, headers, body, now,
                       lambda: _window.admit(name, time.monotonic()))
        if early is not None:
            if early.status in (401, 413, 429):
                log.warning("hook %s: refused (%d): %s", name[:64], early.status, early.text)
                metrics.WEBHOOKS_REFUSED.labels("hook", str(early.status)).inc()
            return Answer(early.status, early.text if early.status != 401 else "the signature does not match")
        event = headers.get("X-GitHub-Event") if hook.scheme == "github" else None
        if event == "ping":
            return Answer(200, "pong")
        # no id from the sender (a bearer hook without Idempotency-Key): each delivery is its own
        delivery = verify.delivery_id(hook.scheme, headers) or f"new:{uuid.uuid4().hex}"
        try:
            payload = json.loads(body)
        except (UnicodeDecodeError, ValueError) as exc:
            _seen(hook, delivery, "malformed")
            log.warning("hook %s: a signed delivery that is not JSON was answered and not kept: %s", name, exc)
            metrics.WEBHOOKS_MALFORMED.labels("hook", "json").inc()
            return Answer(400, "the body is not JSON")
        if event and hook.events and event not in hook.events:
            _seen(hook, delivery, "ignored")
            return Answer(202, f"the event {event} is not one this hook wakes the agent for")
        if not _seen(hook, delivery, "woke"):
            return Answer(200, "already received")
        try:
            text = render(hook.template, payload, hook=name, event=event)
        except TemplateRefused as exc:
            log.warning("hook %s: %s", name, exc)
            metrics.WEBHOOKS_MALFORMED.labels("hook", "template").inc()
            return Answer(422, str(exc))
        session = _write(settings, hook, text, delivery)
    wake(session)
    log.info("hook %s: delivery %s woke %s", name, delivery[:80], hook.agent_group.folder)
    return Answer(202, "received")


def _seen(hook: Webhook, delivery: str, outcome: str) -> bool:
    """Remember a delivery; False when it was seen already (a redelivery)."""
    try:
        with database.atomic():
            WebhookDelivery.create(hook=hook.id, delivery_id=delivery[:255], outcome=outcome)
        return True
    except peewee.IntegrityError:
        return False


def session_of(settings, hook: Webhook) -> tuple[Session, Target]:
    """The hook's own session in its chat (thread webhook:<name>): its memory is the chat's (memory/scopes)."""
    chat = hook.messaging_group
    thread = f"{WEBHOOK_THREAD_PREFIX}{hook.name}"
    session = Session.get_or_none(Session.agent_group == hook.agent_group_id, Session.messaging_group == chat.id,
                                  Session.thread_id == thread)
    if session is None:
        session = Session.create(id=store.new_session_id(), agent_group=hook.agent_group_id, messaging_group=chat.id,
                                 thread_id=thread)
    return session, Target(chat.channel_type, chat.platform_id)


def _write(settings, hook: Webhook, text: str, delivery: str) -> Session:
    session, target = session_of(settings, hook)
    path = store.session_path(settings.sessions_dir, hook.agent_group.folder, session.id)
    if not store.inbound_db(path).exists():
        store.prepare(path, target)
    store.write_message(path, content={"text": text, "sender": f"webhook:{hook.name}"}, target=target,
                        kind="webhook", trigger=True, message_id=f"webhook:{hook.name}:{delivery}"[:200])
    Session.update(last_active_at=utcnow()).where(Session.id == session.id).execute()
    return session


def forget_old(now=None) -> int:
    """Deliveries older than 7 days (a redelivery after that is a new one)."""
    cutoff = (now or utcnow()) - KEEP_DELIVERIES
    return WebhookDelivery.delete().where(WebhookDelivery.seen_at < cutoff).execute()


@register_job("webhook.deliveries", every_s=3600)
def forget_deliveries(settings, manager, now=None) -> int:
    return forget_old()
