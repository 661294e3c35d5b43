"""The sandbox's side of the folders a remote sandbox shares with the host (home/, the group folder):
tar in and out, what is here now, and what a pull from the host should change.

Each side keeps, per file, the sha256 of the content both last agreed on (`known`): what came down
or went up. A file goes up with that digest as its base (a pax header, BASE_KEY), so the host can
tell a change made over a version this sandbox never saw (a conflict, settled by the host: the
last write to arrive wins, the overwritten version is kept beside it). A pull takes from the host
only what changed there and not here since the last agreement (`plan_pull`): a change made here
waits for the next upload instead of being overwritten. Stdlib only (the host imports `tree_tag`).
"""
from __future__ import annotations

import hashlib
import io
import os
import stat
import tarfile
from collections.abc import Mapping
from pathlib import Path, PurePosixPath

BASE_KEY = "NANOCLAW.base"  # the sha256 this sandbox last knew of a file it uploads ("" for none)
OFFSET_KEY = "NANOCLAW.offset"  # the member is the file's tail from this byte: the rest is the base
SKIPPED = (".part", "-wal", "-shm", "-journal")  # half-written files and SQLite's side files stay
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC

Sig = tuple[int, int]  # (size, mtime_ns) of a file here


def tree_tag(digests: Mapping[str, str]) -> str:
    """One digest for a folder's files and their contents: equal on both sides when they agree."""
    h = hashlib.sha256()
    for rel in sorted(digests):
        h.update(f"{rel}\0{digests[rel]}\n".encode("utf-8", "surrogateescape"))
    return h.hexdigest()


def plan_pull(host: Mapping[str, str], known: Mapping[str, str], local: Mapping[str, Sig],
              sent: Mapping[str, Sig]) -> tuple[list[str], list[str]]:
    """(names to fetch, names to remove here) so this side takes the host's changes and keeps its own
    unsent ones (pure). `local` is what is here now, `sent` what was here at the last agreement."""
    untouched = lambda rel: local.get(rel) == sent.get(rel)  # noqa: E731
    fetch = sorted(rel for rel, digest in host.items() if known.get(rel) != digest and untouched(rel))
    remove = sorted(rel for rel in known if rel not in host and rel in local and untouched(rel))
    return fetch, remove


def extract(data: bytes, root: Path, aside: dict[str, bytes | None] | None = None,
            expect: Mapping[str, Sig | None] | None = None) -> dict[str, str]:
    """Plain files of a tar from the host below root (made as needed); name -> sha256 of each. A
    member named in `aside` is read into it instead of written; one named in `expect` is written only
    while the file here is still as expected (a change the agent made meanwhile stays)."""
    names = {}
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
        for member in tar:
            parts = PurePosixPath(member.name).parts
            if not member.isreg() or not parts or PurePosixPath(member.name).is_absolute() or ".." in parts:
                continue
            if aside is not None and member.name in aside:
                aside[member.name] = tar.extractfile(member).read()
                continue
            target = root.joinpath(*parts)
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = target.with_name(f".{target.name}.part")
            src = tar.extractfile(member)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600 | member.mode & 0o755)
            digest = hashlib.sha256()
            with os.fdopen(fd, "wb") as out:
                while chunk := src.read(1 << 20):
                    out.write(chunk)
                    digest.update(chunk)
            if expect is not None and member.name in expect and sig_of(target) != expect[member.name]:
                os.unlink(tmp)
                continue
            os.replace(tmp, target)
            names[member.name] = digest.hexdigest()
    return names


def sig_of(path: Path) -> Sig | None:
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return (st.st_size, st.st_mtime_ns) if stat.S_ISREG(st.st_mode) else None


def manifest(root: Path) -> dict[str, Sig]:
    """rel → (size, mtime_ns) of the plain files under root (links are not followed or sent)."""
    found = {}
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(folder, d))]
        for name in files:
            path = os.path.join(folder, name)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode) and not name.endswith(SKIPPED):
                found[os.path.relpath(path, root)] = (st.st_size, st.st_mtime_ns)
    return found


def pack(root: Path, names, sent: dict[str, str] | None = None, bases: Mapping[str, str] | None = None,
         grown_from: Mapping[str, int] | None = None) -> bytes:
    """A tar of the named plain files under root (never through a link); `sent` gets each one's
    sha256. With `bases`, each file carries the digest this side last knew of it (BASE_KEY); one that
    only grew since (its first `grown_from` bytes are still that version) goes as its new tail alone
    (OFFSET_KEY: where the tail starts), so a transcript costs a turn what the turn added to it."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:", format=tarfile.PAX_FORMAT) as tar:
        for rel in names:
            try:
                fd = os.open(root / rel, os.O_RDONLY | os.O_NOFOLLOW)
            except OSError:
                continue
            with os.fdopen(fd, "rb") as src:
                st = os.fstat(src.fileno())
                base = bases.get(rel, "") if bases is not None else None
                start = (grown_from or {}).get(rel, 0) if base else 0
                digest = hashlib.sha256()
                if not 0 < start < st.st_size or _prefix_digest(src, start, digest) != base:
                    start, digest = 0, hashlib.sha256()
                src.seek(start)
                info = tarfile.TarInfo(rel)
                info.size, info.mtime, info.mode = st.st_size - start, int(st.st_mtime), stat.S_IMODE(st.st_mode) & 0o755
                if base is not None:
                    info.pax_headers = {BASE_KEY: base, **({OFFSET_KEY: str(start)} if start else {})}
                tar.addfile(info, Hashing(src, digest))
                if sent is not None:
                    sent[rel] = digest.hexdigest()
        end = tar.offset + 2 * tarfile.BLOCKSIZE  # the end-of-archive blocks, without the padding
    return out.getvalue()[:end]                   # to 10 KiB records tar adds


def _prefix_digest(src, size: int, digest) -> str:
    """Feed the first `size` bytes of src to digest; the sha256 of them alone."""
    left = size
    while left > 0 and (chunk := src.read(min(left, 1 << 20))):
        digest.update(chunk)
        left -= len(chunk)
    return digest.copy().hexdigest() if left == 0 else ""


class Hashing:
    """A file read through it feeds `digest` what was read (what the tar carries)."""

    def __init__(self, src, digest):
        self.src, self.digest = src, digest

    def read(self, size=-1):
        chunk = self.src.read(size)
        self.digest.update(chunk)
        return chunk


def remove_here(root: Path, rel: str, expected: Sig | None) -> bool:
    """Remove a file the host no longer has, through folders opened without following a link, while
    it is still what this side last agreed on; whether it went."""
    parts = PurePosixPath(rel).parts
    if not parts or PurePosixPath(rel).is_absolute() or ".." in parts:
        return False
    fds = []
    try:
        dfd = os.open(root, _DIR)
        fds.append(dfd)
        for part in parts[:-1]:
            dfd = os.open(part, _DIR, dir_fd=dfd)
            fds.append(dfd)
        st = os.stat(parts[-1], dir_fd=dfd, follow_symlinks=False)
        if not stat.S_ISREG(st.st_mode) or (st.st_size, st.st_mtime_ns) != expected:
            return False
        os.unlink(parts[-1], dir_fd=dfd)
        return True
    except OSError:
        return False
    finally:
        for fd in fds:
            os.close(fd)
