"""POST /hooks/<name>: a webhook the owner registered (nanoclaw/hooks/). Signed, so no CSRF; a page
session cookie means nothing here. Answers: 202 kept and the agent woken, 200 a ping or a redelivery,
4xx with the reason (404 unknown, 410 disabled, 401 signature, 413 size, 429 rate), never a 5xx for
anything a sender can send; 503 when the database cannot keep it (the sender retries)."""
from __future__ import annotations

import logging

import peewee
from flask import Blueprint, current_app, jsonify, request
from werkzeug.exceptions import RequestEntityTooLarge

from ..hooks import intake
from . import current_wake

log = logging.getLogger("nanoclaw.hooks")
bp = Blueprint("hooks", __name__)


@bp.post("/hooks/<name>")
def hook(name: str):
    try:
        body = request.get_data(cache=False)
    except RequestEntityTooLarge:
        return jsonify(error="the body is larger than 1 MiB"), 413
    try:
        answer = intake.receive(current_app.config["NANOCLAW"], name, request.headers, body, current_wake())
    except peewee.DatabaseError as exc:
        log.error("hook %s: the delivery could not be kept: %s", name[:64], exc)
        return jsonify(error="not kept; send it again"), 503, {"Retry-After": "30"}
    key = "ok" if answer.status < 300 else "error"
    return jsonify({key: answer.text}), answer.status
