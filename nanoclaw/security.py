"""Folder-name rules and path containment (the v1 rules).

Pure functions: every agent- or user-supplied name or path passes through here
before it touches the filesystem.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

FOLDER_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
RESERVED_FOLDERS = frozenset({"global"})


class UnsafePath(ValueError):
    """A name or path that would leave its base directory or break a rule."""


def folder_problem(name: str) -> str | None:
    """Why `name` cannot be an agent folder, or None if it can."""
    if not name:
        return "the folder name is empty"
    if ".." in name or "/" in name or "\\" in name:
        return f"folder {name!r} may not contain '..', '/' or '\\'"
    if name.lower() in RESERVED_FOLDERS:
        return f"folder {name!r} is reserved"
    if not FOLDER_RE.match(name):
        return (f"folder {name!r} must start with a letter or digit and use only letters, digits, "
                "'_' and '-' (at most 64 characters)")
    return None


def validate_folder(name: str) -> str:
    problem = folder_problem(name)
    if problem:
        raise UnsafePath(problem)
    return name


def slugify(name: str) -> str:
    """A folder name derived from a display name: 'My Agent!' -> 'my-agent'."""
    slug = re.sub(r"[^a-z0-9_-]+", "-", name.strip().lower()).strip("-_")
    return slug[:64].rstrip("-_")


def contained(base: os.PathLike | str, candidate: os.PathLike | str) -> Path:
    """Resolve `candidate` (relative to `base` unless absolute), following
    symlinks, and return it only if it stays inside `base`."""
    base_path = Path(base).resolve()
    path = Path(candidate)
    if not path.is_absolute():
        path = base_path / path
    resolved = path.resolve()
    if resolved != base_path and base_path not in resolved.parents:
        raise UnsafePath(f"{str(candidate)!r} resolves outside {base_path}")
    return resolved
