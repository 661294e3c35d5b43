"""GET /healthz: is the database reachable, which schema and app version run."""
from flask import Blueprint, jsonify

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
