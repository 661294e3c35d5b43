"""GET /healthz: is the database reachable, which schema and app version run.
GET /metrics: every program's counters and histograms in Prometheus text format (prometheus-client;
under `make run` in multiprocess mode, so the proxy's model requests are there too), plus what is
read at scrape time: sandboxes running and queued, items waiting for a decision. Only from loopback
with no proxy header (a reverse proxy in front forwards with one), or with NANOCLAW_METRICS_TOKEN as
a bearer token; never public by default."""
import hmac
import ipaddress

from flask import Blueprint, Response, current_app, jsonify, request
import os

from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.multiprocess import MultiProcessCollector

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
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        recorded = CollectorRegistry()
        MultiProcessCollector(recorded)
    else:
        recorded = REGISTRY
    now = CollectorRegistry()
    now.register(AtScrape(current_app.extensions.get("nanoclaw.background")))
    return Response(generate_latest(recorded) + generate_latest(now), mimetype=CONTENT_TYPE_LATEST)


class AtScrape:
    """Gauges read when /metrics is asked for (no process has to keep them up to date)."""

    def __init__(self, background):
        self.background = background

    def collect(self):
        manager = getattr(self.background, "manager", None)
        sandboxes = GaugeMetricFamily("nanoclaw_sandboxes", "Sandboxes of this install, by state.", labels=["state"])
        sandboxes.add_metric(["running"], len(manager.running()) if manager is not None else 0)
        sandboxes.add_metric(["queued"], len(manager.queue) if manager is not None else 0)
        yield sandboxes
        from ..models import (HelpRequest, PendingChannelApproval, PendingProposal, PendingQuestion,
                              PendingSenderApproval, utcnow)
        waiting = GaugeMetricFamily("nanoclaw_waiting_for_decision", "Items waiting for the owner or an admin.",
                                    labels=["kind"])
        for kind, count in (("sender", PendingSenderApproval.select().count()),
                            ("chat", PendingChannelApproval.select().count()),
                            ("question", PendingQuestion.select().where(PendingQuestion.answered_at.is_null(),
                                                                        PendingQuestion.expires_at > utcnow()).count()),
                            ("help", HelpRequest.select().where(HelpRequest.state == "open").count()),
                            ("proposal", PendingProposal.select().where(PendingProposal.state == "pending").count())):
            waiting.add_metric([kind], count)
        yield waiting
