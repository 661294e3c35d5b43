"""Where a skill comes from, fetched by the host (issue 66, item 3): a local folder, a git repository at
a commit (`URL#COMMIT[:SUBDIR]`), or an archive URL with its sha256.

A skill is pinned to bytes, never to a name someone else can move: a git source names a full commit
(40 or 64 hex digits; a branch or a tag is refused), an archive its sha256. Git runs with no terminal
prompt, no credential helper, no system or user configuration, and only the protocols allowed (the
owner: https, ssh and local paths; what an agent names: https only). What git or the archive hands
back is unpacked by the host member by member: a link, a device or a path leaving the folder is
refused, never created, and `skill_format.read_folder` checks the result as it checks any folder.
"""
from __future__ import annotations

import hashlib
import io
import os
import re
import stat
import subprocess
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from .skill_format import MAX_FILE, MAX_FILES, MAX_TOTAL, SkillRefused

COMMIT_RE = re.compile(r"^(?:[0-9a-f]{40}|[0-9a-f]{64})$")
SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
GIT_TIMEOUT_S = 120
MAX_ARCHIVE = MAX_TOTAL * 2  # compressed or not, more than this is not a skill


@dataclass(frozen=True)
class Source:
    kind: str          # folder | git | archive
    location: str      # a path or a URL
    commit: str = ""
    subdir: str = ""
    sha256: str = ""

    def __str__(self) -> str:
        if self.kind == "git":
            return f"{self.location}#{self.commit}" + (f":{self.subdir}" if self.subdir else "")
        return self.location + (f" (sha256 {self.sha256})" if self.sha256 else "")


def parse(text: str, sha256: str | None = None) -> Source:
    """What SOURCE names (pure); SkillRefused with what to write instead."""
    text = text.strip()
    if not text or any(c in text for c in "\r\n\0"):
        raise SkillRefused("the source is empty or holds a line break")
    if "#" in text:
        location, _, pin = text.partition("#")
        commit, _, subdir = pin.partition(":")
        if not COMMIT_RE.match(commit):
            raise SkillRefused(f"{commit[:60]!r} is not a full commit id: a branch or tag name can be moved, so "
                               "a skill is pinned to a commit (40 hex digits: git rev-parse BRANCH)")
        return Source("git", location, commit=commit, subdir=_subdir(subdir))
    if re.match(r"^[a-z][a-z0-9+.-]*://", text, re.I):
        if not sha256 or not SHA256_RE.match(sha256.lower()):
            raise SkillRefused("an archive URL needs its sha256 (--sha256 HEX), so the bytes are pinned; "
                               "a git repository is named URL#COMMIT")
        if not text.lower().startswith("https://"):
            raise SkillRefused("an archive is fetched over https only")
        return Source("archive", text, sha256=sha256.lower())
    return Source("folder", text)


def _subdir(subdir: str) -> str:
    if not subdir:
        return ""
    path = PurePosixPath(subdir)
    if path.is_absolute() or ".." in path.parts or "\\" in subdir:
        raise SkillRefused(f"the folder {subdir[:60]!r} inside the repository must be a relative path without ..")
    return str(path)


def fetch_git(source: Source, into: Path, *, owner: bool, pin: tuple[str, int, str] | None = None,
              ca_file: str | None = None) -> Path:
    """Clone, check that the commit is the one named, and unpack its tree (or SUBDIR) into `into`.
    pin: (host, port, address) the host's address check chose; git connects only there and follows
    no redirect. ca_file: the certificates to trust instead of the system's (a private git server)."""
    protocols = "https,ssh,file" if owner else "https"
    if not owner and not source.location.lower().startswith("https://"):
        raise SkillRefused("an agent's source is fetched over https only")
    clone = into / "clone"
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(into), "GIT_TERMINAL_PROMPT": "0",
           "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_ASKPASS": "/bin/false",
           "SSH_ASKPASS": "/bin/false", "GIT_SSH_COMMAND": "ssh -oBatchMode=yes"}
    # tar.umask: the modes git records (644, 755) as a checkout with the usual umask has them, so the hash
    # of a commit is the hash `skill show` gives of its checkout
    config = ["-c", "credential.helper=", "-c", "protocol.allow=never", "-c", "core.hooksPath=/dev/null",
              "-c", "tar.umask=022"]
    for proto in protocols.split(","):
        config += ["-c", f"protocol.{proto}.allow=always"]
    if pin is not None:
        config += ["-c", f"http.curloptResolve={pin[0]}:{pin[1]}:{pin[2]}", "-c", "http.followRedirects=false"]
    if ca_file:
        config += ["-c", f"http.sslCAInfo={ca_file}"]

    def git(*args: str, cwd: Path | None = None) -> bytes:
        try:
            done = subprocess.run(["git", *config, *args], cwd=cwd, env=env, capture_output=True,
                                  timeout=GIT_TIMEOUT_S, stdin=subprocess.DEVNULL)
        except FileNotFoundError:
            raise SkillRefused("git is not installed on the host (apt-get install git)") from None
        except subprocess.TimeoutExpired:
            raise SkillRefused(f"git took longer than {GIT_TIMEOUT_S} s; nothing was added") from None
        if done.returncode:
            tail = done.stderr.decode("utf-8", "replace").strip().splitlines()
            raise SkillRefused(f"git {args[0]} failed: {(tail[-1] if tail else 'no reason given')[:200]}")
        return done.stdout

    git("clone", "--quiet", "--no-checkout", "--", source.location, str(clone))
    try:
        found = git("rev-parse", "--verify", "--quiet", f"{source.commit}^{{commit}}", cwd=clone).decode().strip()
    except SkillRefused:
        raise SkillRefused(f"the repository has no commit {source.commit}") from None
    if found != source.commit:
        raise SkillRefused(f"the repository has no commit {source.commit}")
    tree = git("archive", "--format=tar", source.commit, *([source.subdir] if source.subdir else []), cwd=clone)
    name = PurePosixPath(source.subdir).name if source.subdir else _repo_name(source.location)
    return unpack_tar(tree, into / "skill" / name, strip=source.subdir)


def fetch_archive(source: Source, into: Path, get) -> Path:
    """`get(url, limit) -> bytes` fetches; the bytes must hash as named before anything is unpacked."""
    data = get(source.location, MAX_ARCHIVE)
    digest = hashlib.sha256(data).hexdigest()
    if digest != source.sha256:
        raise SkillRefused(f"the archive's sha256 is {digest}, not {source.sha256}; nothing was added")
    name = re.sub(r"(\.tar\.gz|\.tgz|\.tar|\.zip)$", "", PurePosixPath(source.location.split("?")[0]).name)
    if data.startswith(b"PK\x03\x04"):
        return unpack_zip(data, into / "skill" / name)
    return unpack_tar(data, into / "skill" / name, strip="")


def _repo_name(location: str) -> str:
    return re.sub(r"\.git$", "", location.rstrip("/").rsplit("/", 1)[-1].rsplit(":", 1)[-1]) or "skill"


def _member_path(name: str, strip: str) -> str | None:
    """The member's path inside the skill, or None for the folders above it; SkillRefused when it leaves."""
    path = PurePosixPath(name)
    if path.is_absolute() or ".." in path.parts:
        raise SkillRefused(f"the archive holds a path outside its folder ({name[:80]!r})")
    rel = str(path)
    if strip:
        if rel == strip:
            return None
        if not rel.startswith(strip + "/"):
            return None
        rel = rel[len(strip) + 1:]
    return None if rel in ("", ".") else rel


def unpack_tar(data: bytes, dest: Path, *, strip: str) -> Path:
    dest.mkdir(parents=True)
    count = total = 0
    try:
        archive = tarfile.open(fileobj=io.BytesIO(data), mode="r:*")
    except tarfile.TarError as exc:
        raise SkillRefused(f"not a tar, tar.gz or zip archive ({exc})") from None
    with archive:
        for member in archive:
            if member.type == tarfile.XGLTYPE or member.name == "pax_global_header":
                continue  # git archive's commit note, not a file
            rel = _member_path(member.name, strip)
            if rel is None:
                continue
            if member.issym() or member.islnk():
                raise SkillRefused(f"{rel} is a link")
            if member.isdir():
                (dest / rel).mkdir(parents=True, exist_ok=True)
                continue
            if not member.isfile():
                raise SkillRefused(f"{rel} is not a plain file")
            count, total = count + 1, total + member.size
            _limits(rel, member.size, count, total)
            _write(dest / rel, archive.extractfile(member).read(), member.mode & 0o777)
    return dest


def unpack_zip(data: bytes, dest: Path) -> Path:
    dest.mkdir(parents=True)
    count = total = 0
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except zipfile.BadZipFile as exc:
        raise SkillRefused(f"not a zip archive ({exc})") from None
    with archive:
        for info in archive.infolist():
            rel = _member_path(info.filename, "")
            if rel is None:
                continue
            kind = (info.external_attr >> 16) & 0o170000
            if kind == 0o120000:
                raise SkillRefused(f"{rel} is a link")
            if info.is_dir():
                (dest / rel).mkdir(parents=True, exist_ok=True)
                continue
            count, total = count + 1, total + info.file_size
            _limits(rel, info.file_size, count, total)
            mode = (info.external_attr >> 16) & 0o777 or 0o644
            _write(dest / rel, archive.read(info)[:MAX_FILE + 1], mode)
    return dest


def _limits(rel: str, size: int, count: int, total: int) -> None:
    if size > MAX_FILE:
        raise SkillRefused(f"{rel} is larger than 1 MB")
    if count > MAX_FILES or total > MAX_TOTAL:
        raise SkillRefused(f"a skill holds at most {MAX_FILES} files and 5 MB")


def _write(path: Path, data: bytes, mode: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.chmod(path, mode)


def from_workspace(base: Path, rel: str, into: Path) -> Path:
    """Copy the folder `rel` of the agent's workspace `base` into `into/<its name>`, opened by
    descriptor from `base` down: a link at any level, a special file or a size past the limits is
    refused, so what the host checks afterwards is what it copied, whatever the agent changes meanwhile."""
    parts = PurePosixPath(rel).parts
    if not parts or PurePosixPath(rel).is_absolute() or ".." in parts:
        raise SkillRefused("the folder must be a path inside your working folder, without ..")
    fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        for part in parts:
            try:
                nxt = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            except OSError as exc:
                raise SkillRefused(f"{rel} is not a folder in your working folder (or a part of it is a link): "
                                   f"{exc.strerror}") from None
            os.close(fd)
            fd = nxt
        dest = into / parts[-1]
        dest.mkdir(parents=True)
        _copy_dir(fd, dest, "", [0, 0])
    finally:
        os.close(fd)
    return dest


def _copy_dir(dfd: int, dest: Path, rel: str, seen: list[int]) -> None:
    for name in sorted(os.listdir(dfd)):
        path = f"{rel}/{name}" if rel else name
        info = os.stat(name, dir_fd=dfd, follow_symlinks=False)
        if stat.S_ISLNK(info.st_mode):
            raise SkillRefused(f"{path} is a link")
        if stat.S_ISDIR(info.st_mode):
            child = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=dfd)
            try:
                (dest / name).mkdir()
                _copy_dir(child, dest / name, path, seen)
            finally:
                os.close(child)
            continue
        if not stat.S_ISREG(info.st_mode):
            raise SkillRefused(f"{path} is not a plain file")
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dfd)
        with os.fdopen(fd, "rb") as f:
            data = f.read(MAX_FILE + 1)
        seen[0], seen[1] = seen[0] + 1, seen[1] + len(data)
        _limits(path, len(data), seen[0], seen[1])
        _write(dest / name, data, stat.S_IMODE(info.st_mode))
