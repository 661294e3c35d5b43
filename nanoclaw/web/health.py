"""GET /healthz: is the database reachable, which schema and app version run.
GET /metrics: the web program's counters in Prometheus text format (prometheus-client). Only from
loopback with no proxy header (a reverse proxy in front forwards with one), or with
NANOCLAW_METRICS_TOKEN as a bearer token; never public by default. The proxy program's own model
requests are not in it (another process)."""
import hmac
import ipaddress

from flask import Blueprint, Response, current_app, jsonify, request
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

from .. import __version__
from ..db import database, is_reachable
from ..migrate import current_version

bp = Blueprint("health", __name__)


@bp.get("/healthz")
def healthz():
    ok, error = is_reachable()
    body = {"app_version": __version__, "database": "ok" if ok else "unreachable"}
    if not ok:
        body.update(status="error", error=error, schema_version=None)
        return jsonify(body), 503
    body.update(status="ok", schema_version=current_version(database.obj))
    return jsonify(body), 200


FORWARDING_HEADERS = ("X-Forwarded-For", "Forwarded", "X-Real-IP")


def metrics_refusal(remote: str | None, headers, token: str | None) -> tuple[int, str] | None:
    """Why /metrics is refused to this request (status, reason); None when it may read them."""
    if token:
        given = headers.get("Authorization", "")
        if hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
            return None
        return 401, "a bearer token (NANOCLAW_METRICS_TOKEN) is required"
    try:
        local = remote is not None and ipaddress.ip_address(remote).is_loopback
    except ValueError:
        local = False
    if not local or any(headers.get(h) for h in FORWARDING_HEADERS):
        return 403, "metrics are served to loopback only; set NANOCLAW_METRICS_TOKEN to read them from elsewhere"
    return None


@bp.get("/metrics")
def metrics():
    refusal = metrics_refusal(request.remote_addr, request.headers, current_app.config["NANOCLAW"].metrics_token)
    if refusal is not None:
        return jsonify(error=refusal[1]), refusal[0]
    return Response(generate_latest(REGISTRY), mimetype=CONTENT_TYPE_LATEST)
