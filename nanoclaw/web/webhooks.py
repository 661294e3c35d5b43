"""POST /webhooks/<channel>[/<kind>]: verify on the raw body, parse, accept (dedup + keep), ack.

The acknowledgement waits for one insert: routing runs after it on the process's intake thread
(nanoclaw/inbound/intake.py), and a wake starts a sandbox on yet another thread. Button clicks are
handled in the request: the platform shows their answer. CSRF does not apply here; the
platform's signature is the authentication.

When an event cannot be stored (a full disk, a database gone away) the answer is 503 with
Retry-After: every platform retries a webhook that was not acknowledged, and the dedup record
makes the retry count once. What was accepted before the failure is still routed.
"""
from __future__ import annotations

import logging
import threading
import time

import peewee
from flask import Blueprint, Response, current_app, jsonify, request
from flask.sessions import SecureCookieSessionInterface
from werkzeug.exceptions import RequestEntityTooLarge

from .. import metrics
from . import current_wake
from ..approvals import actions
from ..channels.base import DeliveryError, MalformedPayload, WebhookRefused, get_adapter
from ..inbound import dedup, intake

bp = Blueprint("webhooks", __name__)
PREFIX = "/webhooks/"


class PageSessions(SecureCookieSessionInterface):
    """The page's signed-cookie sessions, not opened for webhooks: a platform has no login
    cookie, and decoding one on every webhook is a cost with no use."""

    def open_session(self, app, request):
        if request.path.startswith((PREFIX, "/hooks/")):
            return self.make_null_session(app)
        return super().open_session(app, request)
log = logging.getLogger("nanoclaw.webhooks")


RETRY_AFTER_S = 30
STORE_FAILURES = (peewee.OperationalError, peewee.InterfaceError)  # disk full, database unreachable
_quiet = {"until": 0.0, "hidden": 0}
_quiet_lock = threading.Lock()


def unavailable(channel: str, exc: Exception):
    """The event could not be stored: 503 so the platform tries again later. One log line a
    minute at most (a full disk fails every request), saying how many were not logged."""
    metrics.WEBHOOKS_UNAVAILABLE.labels(channel).inc()
    with _quiet_lock:
        now = time.monotonic()
        speak = now >= _quiet["until"]
        hidden = _quiet["hidden"]
        _quiet.update(until=now + 60, hidden=0) if speak else _quiet.update(hidden=hidden + 1)
    if speak:
        log.error("%s webhook answered 503, the platform will retry: could not store the event (%s: %s)%s; "
                  "free disk space or check the database, service resumes by itself", channel,
                  type(exc).__name__, exc, f"; {hidden} more since the last line" if hidden else "")
    resp = jsonify(error="cannot store events right now; retry later")
    resp.headers["Retry-After"] = str(RETRY_AFTER_S)
    return resp, 503


def malformed(adapter, channel: str, exc: MalformedPayload, cause: Exception | None = None):
    """An authentic request whose payload does not fit: answered as the platform expects (so it
    does not retry what can never be read), one log line with its kind (and the traceback of a
    parser that raised, `cause`), counted; nothing routed."""
    log.warning("%s webhook: a malformed %s payload was acknowledged and not routed: %s", channel, exc.kind, exc,
                exc_info=cause)
    metrics.WEBHOOKS_MALFORMED.labels(channel, exc.kind).inc()
    answer = getattr(adapter, "malformed_answer", None)
    body, status = answer(exc) if answer is not None else ("", 200)
    return (jsonify(body), status) if isinstance(body, (dict, list)) else (body, status)


def submit(accepted: list[int], settings) -> None:
    thread = current_app.extensions.get("nanoclaw.intake")
    if thread is not None:
        thread.submit(accepted)
        return
    try:  # no intake thread (tests, the CLI): routed in the request
        intake.route_accepted(accepted, settings, current_wake())
    except STORE_FAILURES as exc:
        log.warning("routing %d accepted event(s) failed (%s); the recovery pass routes them later", len(accepted), exc)


def handle_action(adapter, channel: str, action, parsed, settings) -> None:
    # a platform's redelivery of the same click is not run twice, but still answered (with
    # nothing to say): Telegram redelivers when the first answer never arrived, and the
    # user's button spins until one does
    if action.event_id and dedup.record(channel, dedup.click_key(action.event_id)) is None:
        log.info("%s action %s seen before; acknowledged and ignored", channel, action.event_id)
        reply = None
    else:
        try:
            reply = actions.dispatch(action, settings, current_wake())
        except STORE_FAILURES:
            raise  # the click can be tried again: 503
        except Exception:
            log.exception("action %s failed", action.action_id)
            reply = "Something went wrong handling that button."
    if hasattr(adapter, "acknowledge_action"):
        answer = adapter.acknowledge_action(action, reply)
        if answer is not None:  # platforms that take the acknowledgement in the HTTP response (Discord)
            parsed.response = answer


@bp.route("/webhooks/<channel>", methods=["GET", "POST"], defaults={"kind": ""})
@bp.route("/webhooks/<channel>/<kind>", methods=["GET", "POST"])
def webhook(channel: str, kind: str):
    settings = current_app.config["NANOCLAW"]
    try:
        adapter = get_adapter(channel, settings)
    except DeliveryError:
        return jsonify(error=f"unknown channel {channel!r}"), 404
    if not hasattr(adapter, "handle_webhook") or channel == "cli":
        return jsonify(error=f"channel {channel!r} takes no webhooks"), 404
    try:
        body = request.get_data(cache=True)
    except RequestEntityTooLarge:
        log.warning("%s webhook refused: body over 1 MiB", channel)
        return jsonify(error="payload too large"), 413
    try:
        parsed = adapter.handle_webhook(kind, request.method, request.headers, request.args, body)
    except WebhookRefused as exc:
        log.warning("%s webhook refused (%d): %s", channel, exc.status, exc.reason)
        metrics.WEBHOOKS_REFUSED.labels(channel, str(exc.status)).inc()
        return jsonify(error=exc.reason), exc.status
    except MalformedPayload as exc:
        return malformed(adapter, channel, exc)
    except STORE_FAILURES as exc:
        return unavailable(channel, exc)
    except Exception as exc:
        # a payload no shape foresaw broke a parser: still one authentic request that can never be read,
        # so it is answered like any malformed one (a 5xx would have the platform, or our listener, offer
        # it again for ever); the traceback is logged with it, once, for the bug report
        return malformed(adapter, channel, MalformedPayload(f"the parser raised {type(exc).__name__}",
                                                            kind="parser-error"), cause=exc)
    for kind, why in parsed.skipped:
        log.warning("%s webhook: a malformed %s part was skipped, the rest routed: %s", channel, kind, why)
        metrics.WEBHOOKS_MALFORMED.labels(channel, kind).inc()
    accepted = []
    try:
        for event in parsed.events:
            if event.from_self:
                continue  # our own bot's message: never stored, never routed back in
            row_id = intake.accept(event)
            if row_id is None:
                log.info("%s event %s seen before; acknowledged and ignored", channel, event.event_id)
            else:
                accepted.append(row_id)
        for action in parsed.actions:
            handle_action(adapter, channel, action, parsed, settings)
    except STORE_FAILURES as exc:
        return unavailable(channel, exc)
    finally:
        if accepted:
            submit(accepted, settings)
    if parsed.response is not None:
        body, status = parsed.response
        if isinstance(body, (dict, list)):
            return jsonify(body), status
        # an echoed string (WhatsApp's hub.challenge) is plain text, never HTML a browser would render
        return Response(body, status, mimetype="text/plain")
    return "", 200
