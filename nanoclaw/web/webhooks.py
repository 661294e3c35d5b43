"""POST /webhooks/<channel>[/<kind>]: verify on the raw body, parse, accept (dedup + keep), ack.

The acknowledgement waits for one insert: routing runs after it on the process's intake thread
(nanoclaw/intake.py), and a wake starts a sandbox on yet another thread. Button clicks are
handled in the request: the platform shows their answer. CSRF does not apply here; the
platform's signature is the authentication.
"""
from __future__ import annotations

import logging

from flask import Blueprint, Response, current_app, jsonify, request
from flask.sessions import SecureCookieSessionInterface
from werkzeug.exceptions import RequestEntityTooLarge

from .. import metrics
from ..approvals import actions
from ..channels.base import DeliveryError, MalformedPayload, WebhookRefused, get_adapter
from ..inbound import intake, router

bp = Blueprint("webhooks", __name__)
PREFIX = "/webhooks/"


class PageSessions(SecureCookieSessionInterface):
    """The page's signed-cookie sessions, not opened for webhooks: a platform has no login
    cookie, and decoding one on every webhook is a cost with no use."""

    def open_session(self, app, request):
        if request.path.startswith(PREFIX):
            return self.make_null_session(app)
        return super().open_session(app, request)
log = logging.getLogger("nanoclaw.webhooks")


def _wake_async(app):
    waker = app.extensions.get("nanoclaw.waker")
    if waker is None:
        return None
    return lambda session: waker(session.agent_group.folder, session.id)


def malformed(adapter, channel: str, exc: MalformedPayload):
    """An authentic request whose payload does not fit: answered as the platform expects (so it
    does not retry what can never be read), one log line with its kind, counted; nothing routed."""
    log.warning("%s webhook: a malformed %s payload was acknowledged and not routed: %s", channel, exc.kind, exc)
    metrics.WEBHOOKS_MALFORMED.labels(channel, exc.kind).inc()
    answer = getattr(adapter, "malformed_answer", None)
    body, status = answer(exc) if answer is not None else ("", 200)
    return (jsonify(body), status) if isinstance(body, (dict, list)) else (body, status)


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
    for kind, why in parsed.skipped:
        log.warning("%s webhook: a malformed %s part was skipped, the rest routed: %s", channel, kind, why)
        metrics.WEBHOOKS_MALFORMED.labels(channel, kind).inc()
    accepted = []
    for event in parsed.events:
        if event.from_self:
            continue  # our own bot's message: never stored, never routed back in
        row_id = intake.accept(event)
        if row_id is None:
            log.info("%s event %s seen before; acknowledged and ignored", channel, event.event_id)
        else:
            accepted.append(row_id)
    if accepted:
        thread = current_app.extensions.get("nanoclaw.intake")
        if thread is not None:
            thread.submit(accepted)
        else:
            intake.route_accepted(accepted, settings, wake=_wake_async(current_app))
    for action in parsed.actions:
        # a platform's redelivery of the same click is not run twice, but still answered (with
        # nothing to say): Telegram redelivers when the first answer never arrived, and the
        # user's button spins until one does
        if action.event_id and not router.record_event(channel, f"action:{action.event_id}"):
            log.info("%s action %s seen before; acknowledged and ignored", channel, action.event_id)
            reply = None
        else:
            try:
                reply = actions.dispatch(action, settings)
            except Exception:
                log.exception("action %s failed", action.action_id)
                reply = "Something went wrong handling that button."
        if hasattr(adapter, "acknowledge_action"):
            answer = adapter.acknowledge_action(action, reply)
            if answer is not None:  # platforms that take the acknowledgement in the HTTP response (Discord)
                parsed.response = answer
    if parsed.response is not None:
        body, status = parsed.response
        if isinstance(body, (dict, list)):
            return jsonify(body), status
        # an echoed string (WhatsApp's hub.challenge) is plain text, never HTML a browser would render
        return Response(body, status, mimetype="text/plain")
    return "", 200
