"""Folders both ways between the host and a remote sandbox, as tar streams, with the host's limits.

Down (host → sandbox): the agent's home/ (its transcript), its group folder and the global folder,
read through descriptors without following a link at any level (security.walk_tree), so nothing
outside them can be pointed at. Up (sandbox → host): what the runner says changed in home/ and the
group folder. That stream is hostile: only plain files and folders are taken, each name contained
below its root and created through folder descriptors opened without following links, sizes and
counts capped; each file lands whole (a temporary name, then a rename), so the host's copy stays as
it was until its new content is complete.

Two sandboxes of one agent share its group folder. Each file (and each removal) comes with the
sha256 of the version its sandbox last knew (tree_sync.BASE_KEY); when the host's copy is no longer
that version, someone else changed it meanwhile: the last write to arrive wins, and the version it
overwrites or removes is kept beside it as `<name>.conflict-<session>-<time>` (the session that
wrote it, by `owner_of`); the caller tells that session (shared_files.py).
"""
from __future__ import annotations

import errno
import hashlib
import os
import secrets
import shutil
import stat
import tarfile
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import BinaryIO

from agent_runner.tree_sync import BASE_KEY, OFFSET_KEY, Hashing

from ..security import walk_tree

MAX_FILE = 64 << 20
MAX_TOTAL = 512 << 20
MAX_FILES = 20_000
MAX_DEPTH = 32
MAX_NAME = 255
MAX_PATH = 1024
SKIP_SUFFIXES = ("-wal", "-shm", "-journal", ".part")
OwnerOf = Callable[[str, "str | None"], "str | None"]  # (name, its digest on the host) -> the session that wrote it


def NO_OWNER(_name: str, _digest: str | None) -> None:
    """The conflict rule where one session writes (its own home/): a loser is named `local`."""
    return None
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


MAX_EXTENDED_HEADER = 64 << 10  # a pax or GNU long-name header (tarfile reads it whole into memory)


class BadTree(ValueError):
    """The upload is refused as a whole from this member on (what was written before stays)."""


class _CheckedInfo(tarfile.TarInfo):
    """Members whose header tarfile would read into memory (pax headers, GNU long names and links) are
    size-checked before a byte of it is read; sparse members are refused."""

    def _proc_member(self, tarfile_obj):
        if self.type in (tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.SOLARIS_XHDTYPE, tarfile.GNUTYPE_LONGNAME,
                         tarfile.GNUTYPE_LONGLINK) and self.size > MAX_EXTENDED_HEADER:
            raise BadTree(f"an extended header of {self.size} bytes (at most {MAX_EXTENDED_HEADER})")
        if self.type == tarfile.GNUTYPE_SPARSE:
            raise BadTree("a sparse member")
        return super()._proc_member(tarfile_obj)


@dataclass(frozen=True)
class Conflict:
    """A write or removal that arrived over a version its sandbox never saw."""
    name: str
    loser: str | None          # the session whose version lost (None: not one the door knows)
    kept_as: str | None        # where that version is now (None: it was a removal, nothing to keep)
    removed: bool = False      # the winning write was a removal


@dataclass
class Unpacked:
    files: int = 0
    bytes: int = 0
    skipped: list[str] = field(default_factory=list)
    written: dict[str, str] = field(default_factory=dict)   # name -> sha256 of what is there now
    conflicts: list[Conflict] = field(default_factory=list)
    again: list[str] = field(default_factory=list)   # tails whose base is no longer the host's copy


def conflict_name(name: str, session: str | None, when: float) -> str:
    """`<name>.conflict-<session>-<UTC time>`, within a file name's length (pure)."""
    tail = f".conflict-{session or 'local'}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime(when))}"
    room = MAX_NAME - len(tail.encode()) - 3  # and a "-NN" when two conflicts share a second
    head = name.encode()[:room].decode("utf-8", "ignore")
    return head + tail


def digest_at(dfd: int, name: str) -> str | None:
    """sha256 of the plain file `name` in the folder, opened without following a link; None if it is
    missing or not a plain file."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dfd)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            return None
        h = hashlib.sha256()
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def _keep_aside(dfd: int, name: str, session: str | None) -> str | None:
    """A second name for the version about to be overwritten or removed (a hard link: the file
    itself stays in place until the winner's rename); that name, or None if none could be made."""
    now = time.time()
    for n in range(100):
        aside = conflict_name(name, session, now) + (f"-{n}" if n else "")
        try:
            os.link(name, aside, src_dir_fd=dfd, dst_dir_fd=dfd, follow_symlinks=False)
            return aside
        except FileExistsError:
            continue
        except OSError:
            return None
    return None


def _settle(dfd: int, parts, base: str | None, new: str | None, owner_of: OwnerOf, done: Unpacked,
            removing: bool = False) -> None:
    """Before a write (new: its sha256) or a removal (new: None) over `base` replaces what the host
    has: keep the host's version aside when it is one the sandbox never saw."""
    if base is None:
        return
    name = "/".join(parts)
    current = digest_at(dfd, parts[-1])
    if current is not None and current not in (base, new):
        loser = owner_of(name, current)
        aside = _keep_aside(dfd, parts[-1], loser)
        kept = "/".join((*parts[:-1], aside)) if aside else None
        done.conflicts.append(Conflict(name, loser, kept, removing))
        if kept:
            done.written[kept] = current
    elif current is None and base and not removing:  # removed since this sandbox knew it
        done.conflicts.append(Conflict(name, owner_of(name, None), None))


def pack(root, out: BinaryIO, *, skip_names: tuple[str, ...] = (), only: set[str] | None = None) -> int:
    """Plain files under root (or those of them named in `only`) into a tar written to `out`; how many."""
    count = 0
    with tarfile.open(fileobj=out, mode="w|") as tar:
        for entry in walk_tree(root):
            if entry.is_dir or entry.rel in skip_names or entry.name.endswith(SKIP_SUFFIXES) or \
                    (only is not None and entry.rel not in only):
                continue
            if count >= MAX_FILES:
                break
            with tempfile.SpooledTemporaryFile(max_size=8 << 20) as copy:
                with os.fdopen(os.dup(entry.fd), "rb") as src:
                    shutil.copyfileobj(src, copy, )
                info = tarfile.TarInfo(entry.rel)
                info.size, info.mtime = copy.tell(), int(entry.st.st_mtime)
                info.mode = stat.S_IMODE(entry.st.st_mode) & 0o755
                copy.seek(0)
                tar.addfile(info, copy)
            count += 1
    return count


def member_path(name: str) -> tuple[str, ...]:
    """The parts of a member's name when it stays below the root, else BadTree (pure)."""
    if not isinstance(name, str) or not name or len(name) > MAX_PATH or "\x00" in name or "\\" in name:
        raise BadTree("a name is empty, too long or holds a NUL or a backslash")
    path = PurePosixPath(name)
    if path.is_absolute():
        raise BadTree(f"{name!r} is absolute")
    parts = tuple(p for p in path.parts if p != ".")
    if not parts or any(p == ".." or len(p.encode()) > MAX_NAME for p in parts) or len(parts) > MAX_DEPTH:
        raise BadTree(f"{name!r} does not stay below its folder")
    return parts


def _enter(dfd: int, name: str) -> int:
    try:
        os.mkdir(name, 0o755, dir_fd=dfd)
    except FileExistsError:
        pass
    return os.open(name, _DIR, dir_fd=dfd)  # ELOOP / ENOTDIR: a link or a file there, never followed


def unpack(root, stream: BinaryIO, *, max_total: int = MAX_TOTAL, uid: int | None = None,
           owner_of: OwnerOf | None = None) -> Unpacked:
    """Write the upload's plain files below root (made if missing). BadTree on a member that would
    leave it or break a limit; members before it stay written. With `owner_of`, a member that names
    the version its sandbox knew (BASE_KEY) is settled as the module says."""
    os.makedirs(root, exist_ok=True)
    done = Unpacked()
    top = os.open(root, _DIR)
    try:
        with tarfile.open(fileobj=stream, mode="r|", tarinfo=_CheckedInfo) as tar:
            for member in tar:
                parts = member_path(member.name)
                if member.isdir():
                    continue  # folders come with their files
                if not member.isreg():
                    done.skipped.append(member.name)
                    continue
                if member.size > MAX_FILE or done.bytes + member.size > max_total or done.files >= MAX_FILES:
                    raise BadTree(f"{member.name!r} goes past the limits ({MAX_FILE} bytes a file, {max_total} "
                                  f"in all, {MAX_FILES} files)")
                if parts[-1].endswith(SKIP_SUFFIXES):
                    continue
                base = member.pax_headers.get(BASE_KEY) if owner_of is not None else None
                offset = _offset(member, base)
                if offset and offset + member.size > MAX_FILE:
                    raise BadTree(f"{member.name!r} would grow past {MAX_FILE} bytes")
                _write_member(top, parts, tar.extractfile(member), member, done, uid,
                              (lambda dfd, new: _settle(dfd, parts, base, new, owner_of, done))
                              if base is not None and not offset else None, (offset, base) if offset else None)
    except tarfile.TarError as exc:
        raise BadTree(f"not a tar stream: {exc}") from None
    finally:
        os.close(top)
    return done


def _offset(member: tarfile.TarInfo, base: str | None) -> int:
    """Where a member that is a file's new tail starts (0: the member is the whole file)."""
    raw = member.pax_headers.get(OFFSET_KEY)
    if raw is None:
        return 0
    if not base or not raw.isdigit() or not 0 < int(raw) <= MAX_FILE:
        raise BadTree(f"{member.name!r}: a tail needs the digest of what it extends and an offset up to {MAX_FILE}")
    return int(raw)


def _copy_base(dfd: int, name: str, out, offset: int, base: str, digest) -> bool:
    """Copy the host's file into `out` (feeding digest) when it is `offset` bytes of content `base`:
    what a tail extends. Opened without following a link; whether it was."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dfd)
    except OSError:
        return False
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_size != offset:
            return False
        shutil.copyfileobj(Hashing(f, digest), out)
    return digest.hexdigest() == base


def _write_member(top: int, parts: tuple[str, ...], src, member, done: Unpacked, uid: int | None,
                  settle=None, tail: tuple[int, str] | None = None) -> None:
    fds = []
    try:
        dfd = top
        for part in parts[:-1]:
            try:
                dfd = _enter(dfd, part)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EEXIST):
                    done.skipped.append(member.name)
                    return
                raise
            fds.append(dfd)
        tmp = f".{parts[-1][:200]}.{secrets.token_hex(4)}.part"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     stat.S_IMODE(member.mode) & 0o755 | 0o600, dir_fd=dfd)
        try:
            digest = hashlib.sha256()
            with os.fdopen(fd, "wb") as out:
                if tail is not None and not _copy_base(dfd, parts[-1], out, *tail, digest):
                    out.close()
                    os.unlink(tmp, dir_fd=dfd)
                    done.again.append(member.name)
                    return
                written = _copy_capped(src, out, member.size, digest)
            if uid is not None:
                os.chown(tmp, uid, uid, dir_fd=dfd, follow_symlinks=False)
            if settle is not None:
                settle(dfd, digest.hexdigest())
            try:
                os.rename(tmp, parts[-1], src_dir_fd=dfd, dst_dir_fd=dfd)
            except OSError as exc:  # a folder of that name: the agent's folder stays
                if exc.errno not in (errno.EISDIR, errno.ENOTEMPTY, errno.EEXIST):
                    raise
                os.unlink(tmp, dir_fd=dfd)
                done.skipped.append(member.name)
                return
        except BaseException:
            try:
                os.unlink(tmp, dir_fd=dfd)
            except OSError:
                pass
            raise
        done.files += 1
        done.bytes += written
        done.written["/".join(parts)] = digest.hexdigest()
    finally:
        for fd in fds:
            os.close(fd)


def _copy_capped(src, out, size: int, digest) -> int:
    left = size
    while left > 0:
        chunk = src.read(min(left, 1 << 20))
        if not chunk:
            raise BadTree("the upload ended inside a file")
        out.write(chunk)
        digest.update(chunk)
        left -= len(chunk)
    return size


@dataclass
class Removed(Unpacked):
    removed: int = 0
    gone: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)   # not there, or not a plain file


def removals(body) -> dict[str, tuple[str, ...]]:
    """The removal request's names (sha256 by name) checked: name -> (its parts, its digest); BadTree
    on anything else (pure)."""
    files = body.get("files") if isinstance(body, dict) else None
    if not isinstance(files, dict) or len(files) > MAX_FILES:
        raise BadTree(f"a removal names its files as {{name: sha256}}, at most {MAX_FILES}")
    checked = {}
    for name, digest in files.items():
        if not isinstance(digest, str) or len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
            raise BadTree(f"{str(name)[:200]!r}: not a sha256")
        checked[name] = (*member_path(name), digest)
    return checked


def remove_known(root, files: dict[str, tuple[str, ...]], owner_of: OwnerOf = NO_OWNER) -> Removed:
    """Remove each named plain file below root, through folder descriptors opened without following
    links; a link or a folder stays. A file whose content is no longer the given sha256 (someone
    else changed it since the sandbox knew it) goes too, its version kept aside (the module's rule)."""
    done = Removed()
    try:
        top = os.open(root, _DIR)
    except FileNotFoundError:
        return done
    try:
        for name, (*parts, digest) in files.items():
            if _remove_one(top, parts, digest, owner_of, done):
                done.removed += 1
                done.gone.append(name)
            else:
                done.kept.append(name)
    finally:
        os.close(top)
    return done


def _remove_one(top: int, parts: list[str], digest: str, owner_of: OwnerOf, done: "Removed") -> bool:
    fds = []
    try:
        dfd = top
        for part in parts[:-1]:
            try:
                dfd = os.open(part, _DIR, dir_fd=dfd)
            except OSError:  # gone, a link or a file: nothing of ours to remove there
                return False
            fds.append(dfd)
        try:
            st = os.stat(parts[-1], dir_fd=dfd, follow_symlinks=False)
        except OSError:
            return False
        if not stat.S_ISREG(st.st_mode):  # a link, a folder, a FIFO, a device
            return False
        _settle(dfd, parts, digest, None, owner_of, done, removing=True)
        os.unlink(parts[-1], dir_fd=dfd)
        return True
    finally:
        for fd in fds:
            os.close(fd)
