"""The per-agent-group policy files the proxy enforces, and how they are read, reloaded and written.

    $NANOCLAW_DATA_DIR/policy/<folder>/egress.json       {"allow": ["api.github.com", "127.0.0.1:8443"]}
    $NANOCLAW_DATA_DIR/policy/<folder>/credentials.json  {"routes": [{"match", "upstream", "secret", ...}]}

Outside the proxy/<folder>/ directory a sandbox mounts, so no agent can read or touch them.

PolicyStore hands out an immutable GroupPolicy per folder. Every get() compares the files' stamps
(inode, mtime, size: two stat calls) and rebuilds the snapshot when one changed, so a file written
by an approval governs the very next request. A request in flight keeps the snapshot it started
with. A file that does not parse is reported and ignored: the last good policy stays live (for a
group never loaded before, that is the empty policy: nothing allowed). reload_all() (SIGHUP)
forgets every stamp and reads again.

Writers (the host) use write_json(): a temporary file renamed over the old one, so the proxy never
reads half a file.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path

import peewee

from ..db import database
from ..models import AuditLog, audit
from ..proposal_rules import RuleError, check_host_entry
from ..security import validate_folder, write_atomic
from .policy import GroupPolicy, check_route, parse_credentials, parse_egress

log = logging.getLogger("nanoclaw.proxy.policy")

EGRESS_FILE = "egress.json"
ROUTES_FILE = "credentials.json"
MAX_FILE_BYTES = 256 * 1024


def policy_root(settings) -> Path:
    return Path(settings.data_dir) / "policy"


def group_file(root: Path, folder: str, name: str) -> Path:
    return Path(root) / validate_folder(folder) / name


PARSERS: dict[str, Callable] = {EGRESS_FILE: parse_egress, ROUTES_FILE: parse_credentials}


def read_policy_file(path: Path):
    """Parse one file; a missing file is the empty policy. Raises RuleError for anything invalid."""
    parse = PARSERS[path.name]
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return parse({})
    except OSError as exc:
        raise RuleError(f"cannot read {path}: {exc.strerror or exc}") from None
    if len(raw) > MAX_FILE_BYTES:
        raise RuleError(f"{path} is larger than {MAX_FILE_BYTES} bytes")
    if not raw.strip():  # most likely caught mid-write by an editor; delete the file to clear a policy
        raise RuleError(f"{path.name} is empty")
    try:
        data = json.loads(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise RuleError(f"{path.name} is not valid JSON: {exc}") from None
    return parse(data)


def stamp(path: Path) -> tuple | None:
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    except OSError:
        return ("unreadable",)
    return (st.st_ino, st.st_mtime_ns, st.st_size)


# --- the store the proxy reads -------------------------------------------------------------

@dataclass
class _Entry:
    policy: GroupPolicy
    stamps: dict[str, tuple | None] = field(default_factory=dict)


def _empty() -> GroupPolicy:
    return GroupPolicy(parse_egress({}), parse_credentials({}))


class PolicyStore:
    """Folder -> GroupPolicy, reloaded when a file changes. Thread-safe; readers never block on I/O
    of another folder. on_change(folder, file name, old, new, error) is told about every reload."""

    def __init__(self, root: Path, *, on_change: Callable[..., None] | None = None,
                 logger: logging.Logger | None = None):
        self.root = Path(root)
        self.on_change = on_change
        self.log = logger or log
        self._entries: dict[str, _Entry] = {}
        self._lock = threading.Lock()

    def get(self, folder: str) -> GroupPolicy:
        entry = self._entries.get(folder)
        if entry is not None and all(stamp(group_file(self.root, folder, n)) == s for n, s in entry.stamps.items()):
            return entry.policy
        return self._reload(folder)

    def reload_all(self) -> None:
        """SIGHUP: read every known group's files again, whatever their stamps say."""
        with self._lock:
            for entry in self._entries.values():
                entry.stamps = {name: ("forced",) for name in entry.stamps}
        self.refresh()

    def refresh(self, folders=None) -> None:
        """Check known (and the given) groups now, so a change is applied and reported without a request."""
        for folder in set(self._entries) | set(folders or ()):
            try:
                self.get(folder)
            except Exception as exc:  # an invalid folder name from the list: nothing to load
                self.log.debug("policy refresh of %s skipped: %s", folder, exc)

    def forget(self, folder: str) -> None:
        with self._lock:
            self._entries.pop(folder, None)

    def _reload(self, folder: str) -> GroupPolicy:
        with self._lock:
            entry = self._entries.get(folder)
            current = entry.policy if entry else _empty()
            stamps = dict(entry.stamps) if entry else {}
            parts = {"egress": current.egress, "routes": current.routes}
            for name, attr in ((EGRESS_FILE, "egress"), (ROUTES_FILE, "routes")):
                path = group_file(self.root, folder, name)
                now = stamp(path)
                if name in stamps and stamps[name] == now:
                    continue
                stamps[name] = now
                try:
                    new = read_policy_file(path)
                except RuleError as exc:
                    self.log.error("proxy: %s for %s is invalid, the previous policy stays live: %s",
                                   name, folder, exc)
                    self._tell(folder, name, parts[attr], None, str(exc))
                    continue
                if new != parts[attr]:
                    if entry is not None:  # a change since the last load, not the first read
                        self.log.info("proxy: reloaded %s for %s", name, folder)
                        self._tell(folder, name, parts[attr], new, None)
                    parts[attr] = new
            unchanged = parts["egress"] is current.egress and parts["routes"] is current.routes
            policy = current if unchanged else GroupPolicy(parts["egress"], parts["routes"])
            self._entries[folder] = _Entry(policy, stamps)  # the swap: one assignment
            return policy

    def _tell(self, folder, name, old, new, error) -> None:
        if self.on_change is None:
            return
        try:
            self.on_change(folder, name, old, new, error)
        except Exception as exc:  # reporting must never break the door
            self.log.warning("policy change report failed: %s", exc)


# --- writing (the host) --------------------------------------------------------------------

def content_digest(text: bytes) -> str:
    return hashlib.sha256(text).hexdigest()


def write_json(path: Path, data: dict) -> None:
    """Atomic: the proxy sees the old file or the new one, never a mix. Each write is recorded
    (`policy.write`, the content's digest), so the proxy can tell NanoClaw's writes from hand edits."""
    path.parent.mkdir(parents=True, exist_ok=True)
    os.chmod(path.parent.parent, 0o700)
    body = (json.dumps(data, indent=2, sort_keys=True) + "\n").encode()
    try:
        with (database.connection_context() if database.is_closed() else nullcontext()):
            audit("nanoclaw", "policy.write", path.parent.name, file=path.name, sha256=content_digest(body))
    except Exception as exc:  # noqa: BLE001 - a write without its record reads as a hand edit, no worse
        log.warning("could not record the write of %s: %s", path, exc)
    write_atomic(path, lambda fh: fh.write(body))


def load_for_edit(root: Path, folder: str, name: str) -> dict:
    """The file's current content for a writer, checked first: an approval never builds on a broken file."""
    path = group_file(root, folder, name)
    read_policy_file(path)  # raises RuleError when the file on disk is invalid
    try:
        data = json.loads(path.read_text(encoding="utf-8") or "{}")
    except FileNotFoundError:
        data = {}
    return data


def add_egress(root: Path, folder: str, host: str) -> tuple[list[str], list[str]]:
    """Allow one more host; returns (before, after) lists of entries."""
    entry = str(check_host_entry(host))
    data = load_for_edit(root, folder, EGRESS_FILE)
    before = [str(check_host_entry(h)) for h in data.get("allow", [])]
    after = before if entry in before else before + [entry]
    if after != before:
        write_json(group_file(root, folder, EGRESS_FILE), {**data, "allow": after})
    return before, after


def remove_egress(root: Path, folder: str, host: str) -> tuple[list[str], list[str]]:
    entry = str(check_host_entry(host))
    data = load_for_edit(root, folder, EGRESS_FILE)
    before = [str(check_host_entry(h)) for h in data.get("allow", [])]
    after = [h for h in before if h != entry]
    if after != before:
        write_json(group_file(root, folder, EGRESS_FILE), {**data, "allow": after})
    return before, after


def put_route(root: Path, folder: str, route: dict) -> tuple[list[str], list[str]]:
    """Add or replace the route with this `match`; returns (before, after) readable lines."""
    new = check_route(route)
    data = load_for_edit(root, folder, ROUTES_FILE)
    existing = [check_route(r) for r in data.get("routes", [])]
    before = [r.describe() for r in existing]
    kept = [r for r in existing if r.match != new.match] + [new]
    after = [r.describe() for r in kept]
    if after != before:
        write_json(group_file(root, folder, ROUTES_FILE), {**data, "routes": [r.as_dict() for r in kept]})
    return before, after


def remove_route(root: Path, folder: str, match: str) -> tuple[list[str], list[str]]:
    """Remove the route with this `match`; returns (before, after) readable lines."""
    data = load_for_edit(root, folder, ROUTES_FILE)
    existing = [check_route(r) for r in data.get("routes", [])]
    kept = [r for r in existing if r.match != match]
    if len(kept) != len(existing):
        write_json(group_file(root, folder, ROUTES_FILE), {**data, "routes": [r.as_dict() for r in kept]})
    return [r.describe() for r in existing], [r.describe() for r in kept]


def diff_lines(before: list[str], after: list[str]) -> list[str]:
    """'+ added' / '- removed' lines, in a stable order. Policies hold names, never secret values."""
    return [f"- {x}" for x in before if x not in after] + [f"+ {x}" for x in after if x not in before]


def describe(policy_part) -> list[str]:
    """Readable lines for an EgressPolicy or CredentialRoutes (for diffs in logs and the audit log)."""
    if hasattr(policy_part, "entries"):
        return policy_part.as_list()
    return [r.describe() for r in getattr(policy_part, "routes", ())]


def audit_change(folder: str, name: str, old, new, error: str | None, root: Path | None = None) -> None:
    """The proxy program's on_change: every reload (or refused file) in the audit log, as a diff of
    names (hosts, routes, variable names), never a value; a file NanoClaw did not write (its digest
    matches no `policy.write`) is recorded as a hand edit."""
    with database.connection_context():
        if error:
            audit("proxy", "policy.invalid", folder, file=name, error=error[:500], kept="the previous policy")
            return
        action = "policy.reload" if root is None or written_by_us(root, folder, name) else "policy.hand_edit"
        audit("proxy", action, folder, file=name, diff=diff_lines(describe(old), describe(new)))


def written_by_us(root: Path, folder: str, name: str) -> bool:
    try:
        digest = content_digest(group_file(root, folder, name).read_bytes())
    except OSError:
        return True  # gone: nothing was edited by hand
    holds = peewee.NodeList((AuditLog.detail, peewee.SQL("LIKE"),
                             peewee.Value(f'%"sha256": "{digest}"%', converter=False)))
    return AuditLog.select().where(AuditLog.action == "policy.write", AuditLog.target == folder, holds).exists()
