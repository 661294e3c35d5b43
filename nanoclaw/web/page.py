"""Set-up of the operator's page on the app: secret key, cookie rules, CSRF, blueprints."""
from __future__ import annotations

from datetime import timedelta

from flask import render_template
from flask_wtf.csrf import CSRFError, CSRFProtect

from ..config import install_secret
from . import admin, agents_page, auth, chat, links_page, memory_page, skills_page, spending  # noqa: F401  (routes of admin.bp)

csrf = CSRFProtect()


def secure_cookies(settings) -> bool:
    """The page is reached over HTTPS (NANOCLAW_PUBLIC_URL): the login cookie never travels in clear."""
    return (settings.public_url or "").lower().startswith("https://")


def configure(app, settings) -> None:
    app.config["SECRET_KEY"] = install_secret(settings)
    app.config.update(
        SESSION_COOKIE_HTTPONLY=True,       # no script reads it
        SESSION_COOKIE_SAMESITE="Lax",      # not sent on another site's POST (CSRF tokens guard forms too)
        SESSION_COOKIE_SECURE=secure_cookies(settings),
        SESSION_COOKIE_NAME="nanoclaw_session",
        PERMANENT_SESSION_LIFETIME=timedelta(hours=auth.SESSION_HOURS),
        # the token lives as long as the login session, which expires on its own; a page left
        # open on a phone for an hour must still be able to approve something
        WTF_CSRF_TIME_LIMIT=None,
    )


def register(app, exempt=()) -> None:
    csrf.init_app(app)
    for blueprint in exempt:
        csrf.exempt(blueprint)
    app.register_blueprint(auth.bp)
    app.register_blueprint(admin.bp)  # with the agent pages' routes (agents_page)
    app.register_blueprint(chat.bp)

    @app.errorhandler(CSRFError)
    def csrf_refused(exc):
        return render_template("error.html", title="Form refused",
                               message="This form's security token is missing or no longer valid. "
                                       "Reload the page and try again."), 400
