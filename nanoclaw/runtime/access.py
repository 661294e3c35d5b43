"""Who may write what in a session folder: the one-writer rule, enforced by the sandbox's mounts.

The session folder has two parts (session_schema). The host's part (inbound.db and its journal,
inbox/) is mounted read-only *as a folder*, so the agent can neither change inbound.db nor create
anything beside it (no -wal, -shm, journal, link or replacement), whatever the file permissions say
and whichever user the host runs as. The agent's part (outbound.db, heartbeat, outbox/, home/) is
mounted read-write; the host only reads from it, and never through a link (sessions/store.py).

Docker runs the agent as host uid 1000: when the host is root, the agent's part and the group
folder are given to that uid (entries only, links are never followed), and the host's part is
kept the host's, readable by all (0755 folders, 0644 files). bubblewrap maps the host user to the
sandbox's uid, so ownership needs no change there; the read-only mount is what protects.
"""
from __future__ import annotations

import os
import stat
from pathlib import Path

from ..security import walk_tree


def chown_tree(root: Path, uid: int, gid: int) -> None:
    """Give `root` and the folders and files under it to uid:gid (only those not theirs yet). The
    agent may be changing this tree right now (another sandbox of the same group shares its group
    folder), so it is walked by descriptors and changed through them: a folder swapped for a link
    mid-walk never makes the host chown what the link points at."""
    for entry in walk_tree(root, open_files=False):  # the host may have a session database open
        if (entry.st.st_uid, entry.st.st_gid) == (uid, gid):
            continue
        try:
            if entry.fd >= 0:
                os.fchown(entry.fd, uid, gid)
            else:  # in its folder's descriptor, a link itself if the name became one since
                os.chown(entry.name, uid, gid, dir_fd=entry.parent_fd, follow_symlinks=False)
        except FileNotFoundError:
            pass  # removed since it was seen


def keep_readable(root: Path) -> None:
    """The host's part: the host's own, readable by the sandbox user, writable by no one else."""
    host_uid = os.geteuid()
    for dirpath, dirnames, filenames in os.walk(root):
        for entry in [dirpath, *(os.path.join(dirpath, n) for n in dirnames + filenames)]:
            st = os.lstat(entry)
            if stat.S_ISLNK(st.st_mode):
                continue
            if st.st_uid != host_uid:
                os.lchown(entry, host_uid, host_uid)
            mode = 0o755 if stat.S_ISDIR(st.st_mode) else 0o644
            if stat.S_IMODE(st.st_mode) != mode:
                os.chmod(entry, mode)


def grant_to_sandbox_user(agent_part: Path, host_part: Path, group_dir: Path, uid: int, gid: int) -> None:
    """Ownership for a sandbox whose user is host uid:gid (Docker). No-op unless the host is root:
    an unprivileged host user cannot chown, and is then usually the sandbox's uid anyway."""
    if os.geteuid() != 0:
        return
    chown_tree(agent_part, uid, gid)
    keep_readable(host_part)
    chown_tree(group_dir, uid, gid)
