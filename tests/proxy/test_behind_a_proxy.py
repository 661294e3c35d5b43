"""Deployed behind Caddy or nginx (docs/deploy.md): every request reaches the app from 127.0.0.1.
With NANOCLAW_TRUSTED_PROXIES=1 the client's own address (from the proxy's X-Forwarded-For) is what
login throttling and the audit log see; without it the header is not believed. The shipped Caddyfile
forwards exactly the public routes: never /metrics, /healthz or the helper programs' hand-offs."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from nanoclaw.app import create_app
from nanoclaw.db import database
from nanoclaw.migrate import apply_pending
from nanoclaw.models import AuditLog
from nanoclaw.web import auth
from tests.web.test_admin import OWNER, PASSWORD, csrf_of

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def site_for(make_settings, sqlite_url):
    made = []

    def make(**env):
        app = create_app(make_settings(DATABASE_URL=sqlite_url, **env))
        database.connect(reuse_if_open=True)
        apply_pending(database.obj, log=lambda _l: None)
        runner = app.test_cli_runner()
        assert runner.invoke(args=["nanoclaw", "user", "add", OWNER, "--role", "owner"]).exit_code == 0
        runner.invoke(args=["nanoclaw", "admin", "set-password", OWNER], input=f"{PASSWORD}\n{PASSWORD}\n")
        made.append(app)
        return app
    yield make
    database.close()


def log_in(app, client_ip: str, password: str, user_id: str = OWNER) -> int:
    client = app.test_client()
    headers = {"X-Forwarded-For": client_ip, "X-Forwarded-Proto": "https", "Referer": "https://localhost/login"}
    token = csrf_of(client.get("/login", headers=headers).get_data(as_text=True))
    return client.post("/login", headers=headers, data={"csrf_token": token, "user_id": user_id,
                                                         "password": password}).status_code


def test_behind_a_trusted_proxy_a_strangers_guesses_do_not_lock_the_owner_out(site_for):
    app = site_for(NANOCLAW_TRUSTED_PROXIES="1")
    for i in range(auth.FAILED_LIMIT_PER_ADDRESS):  # a stranger guessing user ids
        assert log_in(app, "203.0.113.9", "wrong", f"telegram:{i}") == 401
    assert log_in(app, "203.0.113.9", PASSWORD) == 429          # the guesser's address is throttled
    assert log_in(app, "198.51.100.7", PASSWORD) == 302         # the owner, from elsewhere, is not
    assert AuditLog.select().where(AuditLog.action == "web.login").get().detail["ip"] == "198.51.100.7"


def test_without_the_setting_the_forwarded_address_is_not_believed(site_for):
    app = site_for()
    for i in range(auth.FAILED_LIMIT_PER_ADDRESS):
        log_in(app, f"203.0.113.{i}", "wrong", f"telegram:{i}")  # inventing addresses does not dodge the limit
    assert log_in(app, "198.51.100.7", PASSWORD) == 429


def caddy_public_paths() -> list[str]:
    text = (ROOT / "deploy" / "Caddyfile").read_text()
    return re.search(r"@public path ([^\n]+)", text).group(1).split()


def caddy_forwards(path: str) -> bool:
    """Caddy's path matcher: exact, or a trailing * as a prefix."""
    return any(path.startswith(p[:-1]) if p.endswith("*") else path == p for p in caddy_public_paths())


@pytest.mark.parametrize("path, public", [
    ("/", True), ("/login", True), ("/login/link/abc", True), ("/logout", True), ("/admin", True),
    ("/admin/agents/andy", True), ("/chat", True), ("/chat/andy/messages.json", True), ("/static/app.css", True),
    ("/webhooks/telegram", True), ("/webhooks/slack/events", True), ("/webhooks/slack/actions", True),
    ("/webhooks/whatsapp", True), ("/webhooks/discord/interactions", True), ("/hooks/gh-issues", True),
    ("/metrics", False), ("/healthz", False), ("/webhooks/telegram/poll", False), ("/webhooks/slack/socket", False),
    ("/webhooks/discord/gateway", False), ("/admin-backdoor", False), ("/static", False),
])
def test_the_caddyfile_forwards_the_public_routes_only(path, public):
    assert caddy_forwards(path) is public


def test_every_route_of_the_app_is_either_forwarded_or_deliberately_private(make_settings):
    app = create_app(make_settings())
    private = {"/metrics", "/healthz", "/webhooks/<channel>/<kind>", "/webhooks/<channel>"}  # webhooks: per kind above
    for rule in app.url_map.iter_rules():
        if rule.rule in private:
            continue
        example = re.sub(r"<[^>]+>", "x", rule.rule)
        assert caddy_forwards(example), f"{rule.rule} is neither forwarded by deploy/Caddyfile nor listed as private"


def test_the_systemd_unit_runs_make_run_as_its_own_user_and_restarts_it():
    unit = (ROOT / "deploy" / "nanoclaw.service").read_text()
    assert re.search(r"^ExecStart=/usr/bin/make run$", unit, re.M)
    assert re.search(r"^User=nanoclaw$", unit, re.M) and re.search(r"^Restart=always$", unit, re.M)
    assert re.search(r"^WorkingDirectory=/srv/nanoclaw$", unit, re.M)  # where .env and data/ are found
