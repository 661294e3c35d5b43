"""`backup` and `restore`: one archive of an install, taken while it runs (lifecycle/backup.py)."""
from __future__ import annotations

import tarfile
from pathlib import Path

import click

from ..db import bind, database
from ..lifecycle import backup as bk
from ..lifecycle.restore import restore
from ..migrate import apply_pending
from .base import Mistake, command, require_schema, settings


@command("backup")
@click.argument("path", required=False, type=click.Path(path_type=Path))
@click.option("--with-secrets", is_flag=True, help="Also the page's secret key and .env (the archive is then 0600).")
@click.option("--keep", type=click.IntRange(1, 10000), help="Afterwards keep only the newest N archives there.")
def backup_cmd(path, with_secrets, keep):
    """Write one archive of this install while it runs: the databases (consistent copies), every
    session's files and transcripts, groups/, the egress and credential policies, the mount allowlist.

    \b
    Default PATH: $NANOCLAW_DATA_DIR/backups/nanoclaw-<local time>.tar.gz
    Nightly: 0 3 * * * cd /path/to/nanoclaw && .venv/bin/flask --app app nanoclaw backup --keep 14
    """
    require_schema()
    try:
        written = bk.write_backup(settings(), path, with_secrets=with_secrets)
    except (OSError, bk.BackupError) as exc:
        raise Mistake(f"backup failed: {exc}") from None
    counts = written.manifest["counts"]
    click.echo(f"wrote {written.path} ({written.path.stat().st_size // 1024} KiB): {counts['agents']} agent(s), "
               f"{counts['sessions']} session(s), {written.manifest['files']} file(s)")
    if written.manifest["database"] == "postgresql":
        click.echo("the central database is PostgreSQL: back it up with pg_dump (everything else is in the archive)")
    if with_secrets:
        click.echo("the archive holds secret values (secret key, .env): it is readable by you alone; keep it safe")
    if keep:
        for old in bk.prune(written.path.parent, keep):
            click.echo(f"removed {old.name}")


@command("restore")
@click.argument("archive", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--force", is_flag=True, help="Restore over a data folder that is not empty.")
def restore_cmd(archive, force):
    """Restore an archive into this install's (empty) data and groups folders, then bring its
    database up to this version's schema. Stop the service first.

    All or nothing: the archive is unpacked beside the live folders and swapped in only when all of
    it is there. With --force, what the folders held before is moved to
    $NANOCLAW_DATA_DIR/pre-restore-<time>/ (nothing is deleted)."""
    s = settings()
    try:
        manifest = restore(s, archive, force=force)
    except (OSError, tarfile.TarError, bk.BackupError) as exc:
        raise Mistake(f"restore failed: {exc}") from None
    if manifest.get("database") == "postgresql" or bk.sqlite_path(s.database_url) is None:
        click.echo("the central database was not restored: restore it with pg_restore/psql, then run "
                   "`flask --app app nanoclaw migrate`")
    else:
        database.close()
        bind(s.database_url)
        database.connect(reuse_if_open=True)
        for migration in apply_pending(database.obj, log=lambda _line: None):
            click.echo(f"migrated: {migration.version:04d}_{migration.name}")
        _history_after_restore(s)
    if manifest.get("moved_aside"):
        click.echo(f"what this install held before is kept in {manifest['moved_aside']}; remove it once all is well")
    counts = manifest.get("counts", {})
    click.echo(f"restored {archive.name} (taken {manifest.get('created_at')}): {counts.get('agents', 0)} agent(s), "
               f"{counts.get('sessions', 0)} session(s)")


def _history_after_restore(s) -> None:
    """An archive without the history index (taken before it existed) gets one made from what its
    sessions still hold; either way, say how far back it goes."""
    from ..memory import history
    from ..memory.rebuild import rebuild
    oldest = history.oldest()
    if oldest is None:
        added, oldest = rebuild(s)
        if added:
            click.echo(f"the history index was made anew from the sessions: {added} message(s)")
    click.echo(f"history agents can search goes back to {oldest[:10]}" if oldest else
               "there is no history to search yet")


@command("prune")
def prune_cmd():
    """Remove records past their keeping time now (the service does this once a day).

    \b
    NANOCLAW_KEEP_EVENTS_DAYS (14)   routed webhook events, dropped-message records
    NANOCLAW_KEEP_DECIDED_DAYS (90)  decided proposals, closed help requests, past questions
    NANOCLAW_KEEP_AUDIT_DAYS (365)   the audit log
    NANOCLAW_KEEP_MESSAGES_DAYS (30) each session's finished messages and delivered replies
    NANOCLAW_KEEP_HISTORY_DAYS (365) the history index agents search (search_history) and memory change records
    """
    from ..lifecycle.records import prune, prune_sessions
    from ..memory import history, notes
    require_schema()
    removed = prune(settings())
    messages, records = prune_sessions(settings())
    indexed = history.prune(settings().keep_history_days)
    changes = notes.prune_changes(settings().keep_history_days)
    click.echo("removed " + ", ".join(f"{n} {what}" for what, n in removed.items())
               + f"; from session databases {messages} finished messages, {records} delivery records; "
               f"{indexed} message(s) from the history index, {changes} memory change record(s)")
