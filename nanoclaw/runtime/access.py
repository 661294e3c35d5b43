"""Who may write what in a session folder: the one-writer rule, enforced by the sandbox.

The host alone writes `inbound.db` (and its journal) and `inbox/`; the agent reads them.
Everything else in the session folder (outbound.db, heartbeat, outbox/, home/) is the agent's.
An agent able to rewrite inbound.db could forge messages or re-route its replies, so:

- Docker (agent = host uid 1000): when the host is root, the session folder stays the host's
  but gets the sandbox's group with mode 1770 (the agent can create files; the sticky bit stops
  it from deleting or renaming the host's), the host's entries stay the host's (0644), and the
  agent's entries and the group folder are chowned to the sandbox user.
- bubblewrap (agent = the host user inside a user namespace, so ownership cannot stop it):
  inbound.db and inbox/ are bind-mounted read-only over themselves (see bwrap.py). Not the
  journal: SQLite deletes and recreates it, and a bound stale copy would look like a hot journal.

Gap (for the session schema): with journal_mode DELETE the agent can still create an
`inbound.db-journal` of its own while none exists, which the host's next open would roll back
into inbound.db. journal_mode=TRUNCATE or PERSIST keeps the host's journal file in place and
closes that door under Docker (sticky folder); bwrap would then bind it read-only too.
"""
from __future__ import annotations

import os
import stat
from pathlib import Path

HOST_OWNED = ("inbound.db", "inbound.db-journal", "inbound.db-wal", "inbound.db-shm", "inbox")


def host_owned_entries(session_dir: Path) -> list[Path]:
    return [session_dir / n for n in HOST_OWNED if (session_dir / n).exists()]


def stable_host_entries(session_dir: Path) -> list[Path]:
    """The host's entries that keep their inode (safe to bind-mount read-only)."""
    return [session_dir / n for n in ("inbound.db", "inbound.db-journal", "inbox") if (session_dir / n).exists()]


def chown_tree(root: Path, uid: int, gid: int) -> None:
    """Give `root` and everything under it to uid:gid (only entries not theirs yet)."""
    for dirpath, dirnames, filenames in os.walk(root):
        for entry in [dirpath, *(os.path.join(dirpath, n) for n in dirnames + filenames)]:
            st = os.lstat(entry)
            if (st.st_uid, st.st_gid) != (uid, gid):
                os.lchown(entry, uid, gid)


def grant_to_sandbox_user(session_dir: Path, group_dir: Path, uid: int, gid: int) -> None:
    """Ownership for a sandbox whose user is host uid:gid (Docker). No-op unless the host is root:
    an unprivileged host user cannot chown, and is then usually the sandbox's uid anyway."""
    if os.geteuid() != 0:
        return
    host_uid = os.geteuid()
    os.chown(session_dir, host_uid, gid)
    os.chmod(session_dir, 0o1770)
    host_paths = set(host_owned_entries(session_dir))
    for entry in session_dir.iterdir():
        if entry in host_paths:
            _keep_hosts(entry, host_uid)
        elif entry.is_dir() and not entry.is_symlink():
            chown_tree(entry, uid, gid)
        else:
            os.lchown(entry, uid, gid)
    chown_tree(group_dir, uid, gid)


def _keep_hosts(path: Path, host_uid: int) -> None:
    """The host's entry: its own, readable by the agent, writable by no one else."""
    entries = [path]
    if path.is_dir() and not path.is_symlink():
        entries += [Path(d, n) for d, dirs, files in os.walk(path) for n in dirs + files]
    for entry in entries:
        st = os.lstat(entry)
        if stat.S_ISLNK(st.st_mode):
            continue
        if st.st_uid != host_uid:
            os.lchown(entry, host_uid, host_uid)
        os.chmod(entry, 0o755 if stat.S_ISDIR(st.st_mode) else 0o644)
