"""GET /healthz."""
from nanoclaw import __version__
from nanoclaw.db import database
from nanoclaw.migrate import discover


def test_healthz_ok(app):
    response = app.test_client().get("/healthz")
    assert response.status_code == 200
    newest = max(m.version for m in discover())
    assert response.json == {"status": "ok", "database": "ok", "schema_version": newest, "app_version": __version__}


def test_healthz_503_when_database_unreachable(make_settings):
    from nanoclaw.app import create_app
    app = create_app(make_settings(DATABASE_URL="postgresql://nobody@127.0.0.1:1/none"))
    response = app.test_client().get("/healthz")
    assert response.status_code == 503
    assert response.json["database"] == "unreachable"
    assert response.json["status"] == "error"
    database.initialize(None)
