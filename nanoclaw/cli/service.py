"""The service's own commands: migrate the schema, run the proxy program, talk to an agent locally."""
from __future__ import annotations

import sys

import functools

import click

from .. import migrate as migrations
from ..db import database
from ..models import AgentGroup
from ..proxy import serve_forever
from ..proxy.policy_files import audit_change, policy_root
from .base import Mistake, command, require_schema, settings
from .chat import ChatError, chat


@command("migrate")
@click.option("--status", is_flag=True, help="List applied and pending migrations; change nothing.")
def migrate_cmd(status):
    """Apply pending database migrations (safe to run again)."""
    db = database.obj
    try:
        db.connect(reuse_if_open=True)
        if status:
            applied = migrations.applied_versions(db)
            for m in migrations.discover():
                state = "applied" if m.version in applied else "pending"
                click.echo(f"{m.version:04d}_{m.name}  {state}")
            return
        done = migrations.apply_pending(db, log=lambda line: click.echo(line))
    except migrations.MigrationError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    except Exception as exc:  # an unreachable database is an operator problem, not a crash
        raise Mistake(f"cannot reach the database ({str(exc).splitlines()[0]}); check DATABASE_URL") from None
    click.echo(f"schema at version {migrations.current_version(db)}" + ("" if done else " (nothing to do)"))


@command("proxy")
def proxy_cmd():
    """Run the sandbox door: one unix socket per agent group (supervisord's `proxy` program).

    SIGHUP rescans agent groups and re-reads every policy file at once; SIGTERM stops and removes the sockets.
    """
    def list_folders():
        with database.connection_context():
            return [a.folder for a in AgentGroup.select(AgentGroup.folder)]
    serve_forever(settings(), list_folders,
                  on_policy_change=functools.partial(audit_change, root=policy_root(settings())))


@command("chat")
@click.argument("agent_folder")
@click.argument("message")
@click.option("--timeout", default=180.0, show_default=True, help="Seconds to wait for the reply.")
def chat_cmd(agent_folder, message, timeout):
    """Send MESSAGE to an agent as the owner (the local `cli` channel) and print the reply.

    Works with the service running or not: without it, this command opens the
    agent's door to the model itself and stops the sandbox when done.
    """
    require_schema()
    if not message.strip():
        raise Mistake("the message is empty")
    errors = []

    def show(reply):
        (errors.append(reply) if reply.error else None)
        click.echo(reply.text, err=reply.error)
    try:
        chat(settings(), agent_folder, message, timeout=timeout, echo=show)
    except ChatError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    if errors:
        sys.exit(1)
