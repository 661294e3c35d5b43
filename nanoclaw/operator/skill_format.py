"""A skill as the owner sees it before anything is installed (issue 66, items 1, 3 and 6): the Agent
Skills format checked (a folder whose SKILL.md opens with YAML front matter `name` and `description`,
the name lowercase letters, digits and single hyphens, at most 64 characters, equal to the folder's
name), its files listed, its content hash computed, and what is refused or only flagged.

The content hash is sha256 over, for each file in byte order of its path (relative, '/'-separated):
`path NUL mode NUL size NUL bytes`, mode in octal and size in decimal, both as ASCII digits. It
pins the exact bytes: a skill is approved as those, never as a name someone else can move.

Refused (a reason, no card): a link, a device or other special file, an executable (ELF, Mach-O, PE),
an archive inside the skill, a file over 1 MB, more than 200 files or 5 MB in all, a missing or
malformed front matter, a name against the rule. Flagged (advice shown beside it, never a gate):
scripts that download and run, long base64 blobs, instructions that reach for credentials, CLAUDE.md,
the agent's memory or other skills. Reading follows no link and opens nothing outside the folder.
"""
from __future__ import annotations

import hashlib
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

import yaml

MAX_FILE = 1 << 20
MAX_TOTAL = 5 << 20
MAX_FILES = 200
MAX_NAME = 64
MAX_DESCRIPTION = 1024
NAME_RE = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
# magic numbers of what a skill may not carry: programs, and archives (whose contents nobody saw)
_REFUSED_MAGIC = (
    (b"\x7fELF", "an ELF executable"), (b"MZ", "a Windows executable"),
    (b"\xfe\xed\xfa\xce", "a Mach-O executable"), (b"\xfe\xed\xfa\xcf", "a Mach-O executable"),
    (b"\xce\xfa\xed\xfe", "a Mach-O executable"), (b"\xcf\xfa\xed\xfe", "a Mach-O executable"),
    (b"\xca\xfe\xba\xbe", "a Mach-O executable"), (b"PK\x03\x04", "a zip archive"), (b"\x1f\x8b", "a gzip archive"),
    (b"7z\xbc\xaf\x27\x1c", "a 7z archive"), (b"Rar!", "a rar archive"), (b"\xfd7zXZ", "an xz archive"),
    (b"BZh", "a bzip2 archive"),
)
_FLAGS = (
    (re.compile(r"(curl|wget)[^\n|]*\|\s*(sudo\s+)?(ba|z)?sh\b"), "downloads a script and runs it"),
    (re.compile(r"pip3?\s+install\s+[^\n]*https?://"), "installs a package from a URL"),
    (re.compile(r"[A-Za-z0-9+/]{200,}={0,2}"), "carries a long base64 blob"),
    (re.compile(r"\.ssh/|id_rsa|\.aws/|credentials|\.env\b|api[_-]?key|password", re.I), "reaches for credentials"),
    (re.compile(r"CLAUDE\.md|\.claude/|memory tool", re.I), "touches CLAUDE.md, memory or other skills"),
)


class SkillRefused(Exception):
    """Why the folder is not a skill that could be offered for approval (one line)."""


@dataclass(frozen=True)
class SkillFile:
    path: str     # relative, '/'-separated
    mode: int     # permission bits
    size: int


@dataclass(frozen=True)
class Skill:
    name: str
    description: str
    files: tuple[SkillFile, ...]
    hash: str
    flags: tuple[str, ...]   # "setup.sh: downloads a script and runs it", …


def front_matter(text: str) -> dict:
    """The SKILL.md's name and description (pure); SkillRefused when they are not there as the format says."""
    if not text.startswith("---\n"):
        raise SkillRefused("SKILL.md does not open with YAML front matter (a line of ---)")
    end = text.find("\n---", 4)
    if end < 0 or text[end + 4:end + 5] not in ("", "\n"):
        raise SkillRefused("SKILL.md's front matter has no closing line of ---")
    try:
        data = yaml.safe_load(text[4:end])
    except yaml.YAMLError as exc:
        raise SkillRefused(f"SKILL.md's front matter is not valid YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise SkillRefused("SKILL.md's front matter is not a mapping of name and description")
    name, description = data.get("name"), data.get("description")
    if not isinstance(name, str) or not name:
        raise SkillRefused("SKILL.md's front matter has no name")
    if not isinstance(description, str) or not description.strip():
        raise SkillRefused("SKILL.md's front matter has no description")
    if len(description) > MAX_DESCRIPTION:
        raise SkillRefused(f"the description is longer than {MAX_DESCRIPTION} characters")
    return {"name": name, "description": description.strip()}


def name_problem(name: str, folder: str) -> str | None:
    """What is wrong with a skill's name, given its folder's name (pure); None when nothing."""
    if len(name) > MAX_NAME:
        return f"the name {name[:70]!r} is longer than {MAX_NAME} characters"
    if not NAME_RE.match(name):
        return f"the name {name[:70]!r} is not lowercase letters, digits and single hyphens"
    if name != folder:
        return f"the name {name!r} is not the folder's name {folder[:70]!r}"
    return None


def refused_kind(data: bytes) -> str | None:
    """An executable or an archive, by its first bytes (pure)."""
    if len(data) > 262 and data[257:262] == b"ustar":
        return "a tar archive"
    return next((what for magic, what in _REFUSED_MAGIC if data.startswith(magic)), None)


def content_hash(files: list[tuple[str, int, bytes]]) -> str:
    """sha256 over (path, mode, bytes) of each file in byte order of its path (pure; see the module)."""
    digest = hashlib.sha256()
    for path, mode, data in sorted(files, key=lambda f: f[0].encode()):
        digest.update(b"\0".join((path.encode(), f"{mode:o}".encode(), str(len(data)).encode(), data)))
    return digest.hexdigest()


def flags_of(path: str, data: bytes) -> list[str]:
    """Advice about a text file's content (pure): what the owner should read before approving."""
    text = data.decode("utf-8", "replace")
    return [f"{path}: {why}" for pattern, why in _FLAGS if pattern.search(text)]


def read_folder(folder: Path, *, advice: bool = True) -> Skill:
    """The skill in `folder`, read without following any link; SkillRefused with the reason.
    advice=False: no flags (the check at each start needs only the hash)."""
    folder = Path(folder)
    if folder.is_symlink() or not folder.is_dir():
        raise SkillRefused(f"{folder} is not a folder")
    files: list[tuple[str, int, bytes]] = []
    total = 0
    for rel, info in _walk(folder):
        if stat.S_ISLNK(info.st_mode):
            raise SkillRefused(f"{rel} is a link")
        if not stat.S_ISREG(info.st_mode):
            raise SkillRefused(f"{rel} is not a plain file")
        if info.st_size > MAX_FILE:
            raise SkillRefused(f"{rel} is larger than 1 MB")
        total += info.st_size
        if len(files) >= MAX_FILES or total > MAX_TOTAL:
            raise SkillRefused(f"a skill holds at most {MAX_FILES} files and 5 MB")
        data = _read_nofollow(folder / rel)
        kind = refused_kind(data)
        if kind:
            raise SkillRefused(f"{rel} is {kind}")
        files.append((rel, stat.S_IMODE(info.st_mode), data))
    skill_md = next((data for rel, _mode, data in files if rel == "SKILL.md"), None)
    if skill_md is None:
        raise SkillRefused("there is no SKILL.md at the top of the folder")
    meta = front_matter(skill_md.decode("utf-8", "replace"))
    problem = name_problem(meta["name"], folder.name)
    if problem:
        raise SkillRefused(problem)
    flags = [flag for rel, _mode, data in files for flag in flags_of(rel, data)] if advice else []
    return Skill(meta["name"], meta["description"], tuple(SkillFile(p, m, len(d)) for p, m, d in
                                                          sorted(files, key=lambda f: f[0].encode())),
                 content_hash(files), tuple(flags))


def _walk(folder: Path):
    """(relative path, lstat) of everything below `folder`, never descending through a link."""
    todo = [""]
    while todo:
        rel_dir = todo.pop()
        with os.scandir(folder / rel_dir if rel_dir else folder) as entries:
            for entry in entries:
                rel = f"{rel_dir}/{entry.name}" if rel_dir else entry.name
                info = entry.stat(follow_symlinks=False)
                if stat.S_ISDIR(info.st_mode):
                    todo.append(rel)
                else:
                    yield rel, info


def _read_nofollow(path: Path) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        with os.fdopen(fd, "rb") as f:
            fd = -1
            return f.read(MAX_FILE + 1)
    finally:
        if fd >= 0:
            os.close(fd)
