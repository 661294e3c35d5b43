"""Who may use the page: owners and admins, by password or a one-time login link.

- Passwords: werkzeug's salted hash (set with `flask --app app nanoclaw admin set-password`).
- Login links: a random token printed by `admin login-link`; only its SHA-256 is stored; it
  works once, for a few minutes, and only after a click on the page it opens (a chat app's
  link preview must not spend it).
- Login sessions live on the server (web_sessions, token hashed): the cookie carries a random
  id only; they end after an idle time and after an absolute lifetime, and at logout.
- Repeated wrong passwords for one user id, or from one address, are refused for a while (counted
  in the audit log).
Every form on the page carries a CSRF token (Flask-WTF's CSRFProtect, set up in create_app).
"""
from __future__ import annotations

import functools
import hashlib
import json
import secrets
from datetime import timedelta
from functools import wraps
from urllib.parse import urlsplit

import peewee
from flask import (Blueprint, current_app, flash, g, jsonify, redirect, render_template, request, session,
                   url_for)
from werkzeug.security import check_password_hash, generate_password_hash

from ..db import database
from .scope import Scope
from ..models import (AgentGroup, AuditLog, User, UserRole, WebLoginToken, WebPassword, WebSession, audit,
                      utcnow)

bp = Blueprint("auth", __name__)

MIN_PASSWORD = 10
LINK_MINUTES = 15
IDLE_MINUTES = 120           # app.config["NANOCLAW_WEB_IDLE_MINUTES"] overrides
SESSION_HOURS = 12           # app.config["NANOCLAW_WEB_SESSION_HOURS"] overrides
FAILED_LIMIT = 5             # wrong passwords per user id …
FAILED_WINDOW_MINUTES = 15   # … within this window lock that user id out for the window
FAILED_LIMIT_PER_ADDRESS = 20  # wrong passwords from one address, whatever user ids it tries
TOUCH_EVERY_S = 60           # write last_seen_at at most this often
# How new passwords are hashed (werkzeug's default, named: a check follows the method its stored hash
# names). Only the test suite changes it, for a cheap one (tests/conftest.py).
PASSWORD_METHOD = "scrypt"


@functools.cache
def _dummy_hash(method: str) -> str:
    """A hash to check a password against when the user has none (made on the first login, not at
    import: scrypt costs ~0.15 s of CPU, which every command and worker start paid)."""
    return generate_password_hash("not-a-password-" + secrets.token_hex(8), method=method)


class AuthError(ValueError):
    """A one-line reason for the operator."""


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


# --- roles -----------------------------------------------------------------------------------

def is_owner(user_id: str) -> bool:
    return UserRole.select().where(UserRole.user == user_id, UserRole.role == "owner").exists()


def admin_scope(user_id: str) -> set[int] | None:
    """None: every agent (owner or global admin); else the agent group ids this admin administers
    (empty: not an admin at all)."""
    roles = list(UserRole.select().where(UserRole.user == user_id, UserRole.role.in_(("owner", "admin"))))
    if any(r.role == "owner" or r.agent_group_id is None for r in roles):
        return None
    return {r.agent_group_id for r in roles}


def scope_of(user_id: str) -> Scope:
    """What this user may change from the page (web/scope.py)."""
    agents = admin_scope(user_id)
    return Scope(user_id, None if agents is None else frozenset(agents))


def may_log_in(user_id: str) -> bool:
    scope = admin_scope(user_id)
    return scope is None or bool(scope)


def visible_agents(user_id: str):
    """AgentGroups this user may see and act on (a query)."""
    scope = admin_scope(user_id)
    query = AgentGroup.select().order_by(AgentGroup.folder)
    return query if scope is None else query.where(AgentGroup.id.in_(list(scope) or [-1]))


# --- passwords and links (the CLI calls these) ------------------------------------------------

def require_operator(user_id: str) -> User:
    user = User.get_or_none(User.id == user_id)
    if user is None:
        raise AuthError(f"no user {user_id!r}; add one: flask --app app nanoclaw user add {user_id} --role owner")
    if not may_log_in(user_id):
        raise AuthError(f"{user_id} is neither an owner nor an admin, so it may not log in to the page; "
                        f"make it one: flask --app app nanoclaw user add {user_id} --role admin")
    return user


def password_problem(password: str) -> str | None:
    if len(password) < MIN_PASSWORD:
        return f"the password is shorter than {MIN_PASSWORD} characters"
    if password.strip() != password:
        return "the password starts or ends with spaces"
    return None


def set_password(user_id: str, password: str, actor: str = "cli") -> None:
    """Set the page password and end the user's open login sessions."""
    require_operator(user_id)
    problem = password_problem(password)
    if problem:
        raise AuthError(problem)
    with database.atomic():
        digest = generate_password_hash(password, method=PASSWORD_METHOD)
        if WebPassword.update(password_hash=digest, updated_at=utcnow()).where(
                WebPassword.user == user_id).execute() == 0:
            WebPassword.create(user=user_id, password_hash=digest)
        WebSession.delete().where(WebSession.user == user_id).execute()
        audit(actor, "web.set_password", user_id)


def issue_login_link(user_id: str, minutes: int = LINK_MINUTES, actor: str = "cli") -> str:
    """A fresh one-time token for `user_id` (only its hash is kept)."""
    require_operator(user_id)
    token = secrets.token_urlsafe(32)
    now = utcnow()
    with database.atomic():
        WebLoginToken.create(token_hash=hash_token(token), user=user_id, created_at=now,
                             expires_at=now + timedelta(minutes=minutes))
        audit(actor, "web.login_link", user_id, minutes=minutes)
    return token


def link_problem(token: str) -> tuple[WebLoginToken | None, str | None]:
    row = WebLoginToken.get_or_none(WebLoginToken.token_hash == hash_token(token or ""))
    if row is None:
        return None, "This login link is not valid."
    if row.used_at is not None:
        return row, "This login link was already used. Ask for a new one."
    if row.expires_at <= utcnow():
        return row, "This login link has expired. Ask for a new one."
    return row, None


def consume_login_link(token: str) -> str | None:
    """The user id if the token is valid now; it is spent in the same atomic UPDATE (first use wins)."""
    now = utcnow()
    digest = hash_token(token or "")
    row = WebLoginToken.get_or_none(WebLoginToken.token_hash == digest)
    if row is None:
        return None
    spent = (WebLoginToken.update(used_at=now)
             .where(WebLoginToken.id == row.id, WebLoginToken.used_at.is_null(), WebLoginToken.expires_at > now)
             .execute())
    return row.user_id if spent == 1 and may_log_in(row.user_id) else None


def recent_failures(user_id: str) -> int:
    since = utcnow() - timedelta(minutes=FAILED_WINDOW_MINUTES)
    return AuditLog.select().where(AuditLog.action == "web.login_failed", AuditLog.target == user_id,
                                   AuditLog.at >= since).count()


def recent_failures_from(address: str | None) -> int:
    """Wrong passwords from this address in the window, for any user id (the audit entry's `ip`)."""
    if not address:
        return 0
    since = utcnow() - timedelta(minutes=FAILED_WINDOW_MINUTES)
    marker = json.dumps({"ip": address})[1:-1]  # '"ip": "<address>"', as the entry's sorted JSON holds it
    holds = peewee.NodeList((AuditLog.detail, peewee.SQL("LIKE"), peewee.Value(f"%{marker}%", converter=False)))
    return AuditLog.select().where(AuditLog.action == "web.login_failed", AuditLog.at >= since, holds).count()


def check_password(user_id: str, password: str) -> bool:
    # compare against a dummy hash when there is none, so the answer takes as long either way (made
    # before the lookup, for a known user too: the first answer is no quicker for either)
    dummy = _dummy_hash(PASSWORD_METHOD)
    row = WebPassword.get_or_none(WebPassword.user == user_id)
    ok = check_password_hash(row.password_hash if row else dummy, password or "")
    return bool(row) and ok and may_log_in(user_id)


# --- login sessions ---------------------------------------------------------------------------

def _lifetimes() -> tuple[timedelta, timedelta]:
    cfg = current_app.config
    return (timedelta(minutes=cfg.get("NANOCLAW_WEB_IDLE_MINUTES", IDLE_MINUTES)),
            timedelta(hours=cfg.get("NANOCLAW_WEB_SESSION_HOURS", SESSION_HOURS)))


def start_session(user_id: str) -> None:
    token = secrets.token_urlsafe(32)
    _, absolute = _lifetimes()
    now = utcnow()
    WebSession.create(token_hash=hash_token(token), user=user_id, created_at=now, last_seen_at=now,
                      expires_at=now + absolute)
    session.clear()  # no state from before the login survives it (session fixation)
    session.permanent = True
    session["sid"] = token


def end_session() -> None:
    token = session.get("sid")
    if token:
        WebSession.delete().where(WebSession.token_hash == hash_token(token)).execute()
    session.clear()


def session_user() -> User | None:
    """The logged-in user of this request, or None (expired sessions are deleted on sight)."""
    token = session.get("sid")
    if not token:
        return None
    row = WebSession.get_or_none(WebSession.token_hash == hash_token(token))
    if row is None:
        return None
    now = utcnow()
    idle, _ = _lifetimes()
    if row.expires_at <= now or row.last_seen_at + idle <= now or not may_log_in(row.user_id):
        row.delete_instance()
        return None
    if (now - row.last_seen_at).total_seconds() >= TOUCH_EVERY_S:
        WebSession.update(last_seen_at=now).where(WebSession.id == row.id).execute()
    return User.get_or_none(User.id == row.user_id)


def safe_next(target: str | None) -> str:
    """Only a path on this site: never `//evil` or `https://evil`."""
    if not target:
        return url_for("admin.waiting")
    parts = urlsplit(target)
    if parts.scheme or parts.netloc or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return url_for("admin.waiting")
    return target


def require_login():
    """A blueprint's before_request: load g.user or send the visitor to the login page."""
    user = session_user()
    if user is None:
        if request.path.endswith(".json") or request.accept_mimetypes.best == "application/json":
            return jsonify(error="not logged in"), 401
        return redirect(url_for("auth.login", next=request.full_path.rstrip("?")))
    g.user = user
    g.user_id = user.id
    g.is_owner = is_owner(user.id)
    return None


def login_required(view):
    @wraps(view)
    def wrapped(*args, **kwargs):
        answer = require_login()
        return answer if answer is not None else view(*args, **kwargs)
    return wrapped


# --- routes -----------------------------------------------------------------------------------

@bp.route("/login", methods=["GET", "POST"])
def login():
    nxt = request.values.get("next")
    if request.method == "GET":
        if session_user() is not None:
            return redirect(safe_next(nxt))
        return render_template("login.html", next=nxt, user_id="")
    user_id = (request.form.get("user_id") or "").strip()
    password = request.form.get("password") or ""
    if recent_failures_from(request.remote_addr) >= FAILED_LIMIT_PER_ADDRESS:
        flash(f"Too many wrong passwords from your address; try again in {FAILED_WINDOW_MINUTES} minutes "
              "or use a login link (flask --app app nanoclaw admin login-link USER_ID).", "error")
        return render_template("login.html", next=nxt, user_id=user_id), 429
    if recent_failures(user_id) >= FAILED_LIMIT:
        flash(f"Too many wrong passwords for {user_id}; try again in {FAILED_WINDOW_MINUTES} minutes "
              "or use a login link (flask --app app nanoclaw admin login-link USER_ID).", "error")
        return render_template("login.html", next=nxt, user_id=user_id), 429
    if not check_password(user_id, password):
        audit(user_id or "?", "web.login_failed", user_id or None, ip=request.remote_addr)
        flash("Wrong user id or password.", "error")
        return render_template("login.html", next=nxt, user_id=user_id), 401
    start_session(user_id)
    audit(user_id, "web.login", user_id, method="password", ip=request.remote_addr)
    return redirect(safe_next(nxt))


@bp.route("/login/link/<token>", methods=["GET", "POST"])
def login_link(token: str):
    if request.method == "GET":
        row, problem = link_problem(token)
        return render_template("login_link.html", token=token, problem=problem,
                               user_id=row.user_id if row and not problem else None), (410 if problem else 200)
    user_id = consume_login_link(token)
    if user_id is None:
        _, problem = link_problem(token)
        return render_template("login_link.html", token=token, problem=problem or "This login link is not valid.",
                               user_id=None), 410
    start_session(user_id)
    audit(user_id, "web.login", user_id, method="link", ip=request.remote_addr)
    flash("Logged in. Set a password for next time: flask --app app nanoclaw admin set-password "
          f"{user_id}" if not WebPassword.get_or_none(WebPassword.user == user_id) else "Logged in.", "ok")
    return redirect(url_for("admin.waiting"))


@bp.post("/logout")
def logout():
    user = session_user()
    end_session()
    if user is not None:
        audit(user.id, "web.logout", user.id)
    return redirect(url_for("auth.login"))
