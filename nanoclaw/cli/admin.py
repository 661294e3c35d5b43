"""Access to the web page for owners and admins: a password, or a one-time login link."""
from __future__ import annotations

import sys

import click

from ..web.auth import AuthError, issue_login_link, require_operator, set_password
from .base import Mistake, group, parse_user_id, require_schema, settings


@group("admin")
def admin_group():
    """Access to the web page for owners and admins."""


@admin_group.command("set-password")
@click.argument("user_id")
@click.option("--password-stdin", is_flag=True, help="Read the password from the first line of stdin (scripts).")
def admin_set_password(user_id, password_stdin):
    """Set USER_ID's password for the web page (prompted twice; ends their open logins)."""
    require_schema()
    try:
        require_operator(parse_user_id(user_id))
        if password_stdin:
            password = sys.stdin.readline().rstrip("\n")
        else:
            password = click.prompt("New password", hide_input=True, confirmation_prompt=True)
        set_password(user_id, password)
    except AuthError as exc:
        raise Mistake(str(exc)) from None
    click.echo(f"password set for {user_id}; log in at {page_base()}/login")


def page_base() -> str:
    return settings().public_url or f"http://127.0.0.1:{settings().port}"


@admin_group.command("login-link")
@click.argument("user_id")
@click.option("--minutes", default=15, show_default=True, type=click.IntRange(1, 24 * 60),
              help="How long the link stays valid.")
@click.option("--base-url", default=None,
              help="Where the page is reached (default: NANOCLAW_PUBLIC_URL, else http://127.0.0.1:NANOCLAW_PORT).")
def admin_login_link(user_id, minutes, base_url):
    """Print a one-time login link for USER_ID (works once, for --minutes)."""
    require_schema()
    try:
        token = issue_login_link(parse_user_id(user_id), minutes=minutes)
    except AuthError as exc:
        raise Mistake(str(exc)) from None
    click.echo(f"{(base_url or page_base()).rstrip('/')}/login/link/{token}")
    click.echo(f"(valid once, for {minutes} minutes)", err=True)
