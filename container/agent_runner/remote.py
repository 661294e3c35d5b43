"""A sandbox on another machine keeps local copies of its session folders, synced with the host.

The runner itself is unchanged: its SessionStore reads inbound.db and writes outbound.db in local
folders as it does under a bind mount. This keeps those folders in step with the host's, through
the door's session channel (door_link.py), in three threads' worth of work:
- start:  home/ (the transcript), the group folder, the global folder and the agent's approved
          packages (their digest checked, then made read-only) come down; so does the
          host's copy of outbound.db, so a restarted sandbox carries on from the host's record
          (seq numbers, claims, the SDK session id) as a local one would from its file;
- down:   a long poll for the host's inbound.db; each change arrives (the person's new inbox files
          first) as the rows changed since our copy's position in the host's change log
          (change_log.py), applied in one transaction; the whole file only at the start or after a
          gap, replacing ours by a rename. The runner's inotify watch sees either as the host's commit;
- up:     after each commit of ours (the store's nudge) or heartbeat, at most once a second unless a
          new row waits: new outbox files, then the new rows and what changed of the claims, the
          state and the current tool (nothing at all when nothing changed: an idle sandbox sends
          its heartbeat alone); and the files of home/ and the group folder that changed (when a
          turn begins and ends, every 5 s during one, so a kill mid-turn loses at most that, and
          every 30 s between turns), and the names of those removed
          here, each with the digest of the content this side last knew: the host removes its
          copy only while it is still that content (another sandbox's later change stays).
At a stop, one last push and file upload. Nothing here is trusted by the host: it checks all of it.
"""
from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import select
import sqlite3
import stat
import tarfile
import threading
import time
from pathlib import Path, PurePosixPath

from . import change_log, nudge
from . import session_schema as schema
from .door_link import DoorLink

log = logging.getLogger("agent_runner.remote")

LONG_POLL_S = 25.0
PUSH_EVERY_S = 1.0
FILES_IN_TURN_S = 5.0  # during a turn, changed files go up at most this often: a kill loses no more
FILES_IDLE_S = 30.0    # between turns (a process the agent left running may still write)
BACKOFF_MAX_S = 5.0
PUSH_BYTES = 8 << 20  # rows' content per push (one row may be up to 4 MiB)
ACKS_PER_PUSH = 5000  # ack changes per push; the rest go with the next (the door takes 20,000)


def extract(data: bytes, root: Path, aside: dict[str, bytes | None] | None = None) -> dict[str, str]:
    """Plain files of a tar from the host below root (made as needed); name -> sha256 of each. A
    member named in `aside` is read into it instead of written."""
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
            os.replace(tmp, target)
            names[member.name] = digest.hexdigest()
    return names


def manifest(root: Path) -> dict[str, tuple[int, int]]:
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
            if stat.S_ISREG(st.st_mode) and not name.endswith((".part", "-wal", "-shm", "-journal")):
                found[os.path.relpath(path, root)] = (st.st_size, st.st_mtime_ns)
    return found


class _Hashing:
    """A file read through it leaves the sha256 of what was read (what the tar carries)."""

    def __init__(self, src):
        self.src, self.digest = src, hashlib.sha256()

    def read(self, size=-1):
        chunk = self.src.read(size)
        self.digest.update(chunk)
        return chunk


def pack(root: Path, names, digests: dict[str, str] | None = None) -> bytes:
    """A tar of the named plain files under root (never through a link); `digests` gets each one's."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:") as tar:
        for rel in names:
            try:
                fd = os.open(root / rel, os.O_RDONLY | os.O_NOFOLLOW)
            except OSError:
                continue
            with os.fdopen(fd, "rb") as src:
                st = os.fstat(src.fileno())
                info = tarfile.TarInfo(rel)
                info.size, info.mtime, info.mode = st.st_size, int(st.st_mtime), stat.S_IMODE(st.st_mode) & 0o755
                reader = _Hashing(src)
                tar.addfile(info, reader)
                if digests is not None:
                    digests[rel] = reader.digest.hexdigest()
    return out.getvalue()


class RemoteSession:
    def __init__(self, link: DoorLink, session_dir: Path, inbound_dir: Path, group_dir: Path, global_dir: Path,
                 packages_dir: Path | None = None):
        """packages_dir: where the agent's approved packages go (a folder of the sandbox's own, when
        the host gave it one: the agent has some)."""
        self.link = link
        self.packages_dir = Path(packages_dir) if packages_dir is not None else None
        self.session_dir, self.inbound_dir = Path(session_dir), Path(inbound_dir)
        self.trees = {"home": self.session_dir / "home", "group": Path(group_dir)}
        self.global_dir = Path(global_dir)
        self.outbox = self.session_dir / "outbox"
        self._stop = threading.Event()
        self._stamp: str | None = None
        self._position: dict | None = None  # where our inbound.db copy stands in the host's change log
        self.pulled = {"snapshot": 0, "delta": 0, "bytes": 0}
        self._inbox: set[tuple[str, int]] = set()
        self._host_seq = 0
        self._confirmed: dict = {}  # state, container, keep_from_seq and heartbeat as the door last took them
        self._sent_outbox: set[tuple[str, int]] = set()
        self._sent_files: dict[str, dict] = {}
        self._known: dict[str, dict[str, str]] = {}  # part -> rel -> sha256 of the content the host has from us
        self._files_at = 0.0
        self._files_due = False
        self._push_lock = threading.Lock()
        self._out: sqlite3.Connection | None = None
        self._threads: list[threading.Thread] = []
        self._down = link.session()
        self._up = link.session()

    # -- start -----------------------------------------------------------------------------------
    def bootstrap(self) -> None:
        started = time.monotonic()
        for part, root in (*self.trees.items(), ("global", self.global_dir)):
            root.mkdir(parents=True, exist_ok=True)
            status, _h, data = self._up.request("GET", f"/files/{part}")
            self._expect(status, f"files {part}", data)
            got = extract(data, root)
            if part in self.trees:
                self._sent_files[part] = manifest(root)
                self._known[part] = got
        if self.packages_dir is not None:
            self.fetch_packages()
        status, _h, data = self._up.request("GET", "/outbound")
        self._expect(status, "outbound copy", data)
        path = self.session_dir / schema.OUTBOUND
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
        path.write_bytes(data)
        self._out = schema.connect(path)  # our reading connection, open for the runner's whole life
        self._host_seq = self._out.execute("SELECT COALESCE(MAX(seq), 0) FROM messages_out").fetchone()[0]
        # Claims and outcomes go up as changes: ours are logged from here on (what came down is what
        # the door's copy holds), and each entry goes once the door confirmed it.
        change_log.track(self._out, only=("processing_ack",))
        self._sent_outbox = set(self._outbox_files())
        self.pull(wait=0)
        log.info("session fetched from the door in %.0f ms", (time.monotonic() - started) * 1000)

    def fetch_packages(self) -> int:
        """The agent's approved packages (the host's prefix, as the door sends it, its digest checked)
        into the sandbox's own folder for them, then made read-only; how many files."""
        status, headers, data = self._up.request("GET", "/files/packages", timeout=600)
        self._expect(status, "approved packages", data)
        if hashlib.sha256(data).hexdigest() != headers.get("x-digest"):
            raise RuntimeError("the approved packages did not arrive whole (their digest differs)")
        got = extract(data, self.packages_dir)
        for folder, dirs, files in os.walk(self.packages_dir):
            for name in files:
                os.chmod(os.path.join(folder, name), 0o444 | os.stat(os.path.join(folder, name)).st_mode & 0o111)
            os.chmod(folder, 0o555)
        log.info("approved packages: %d file(s) from the door", len(got))
        return len(got)

    @staticmethod
    def _expect(status: int, what: str, data: bytes) -> None:
        if status != 200:
            raise RuntimeError(f"the door refused {what}: {status} {data[:200]!r}")

    def start(self) -> "RemoteSession":
        for name, target in (("remote-down", self._down_loop), ("remote-up", self._up_loop)):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    # -- down ------------------------------------------------------------------------------------
    def pull(self, wait: float) -> bool:
        ask = json.dumps({"after": self._stamp, "wait": wait, "have": sorted(self._inbox),
                          "position": self._position}).encode()
        status, headers, data = self._down.request("POST", "/inbound", ask, timeout=wait + 30)
        if status == 204:
            return False
        self._expect(status, "inbound", data)
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
            members = tar.getmembers()
        self._inbox |= {(m.name[len("inbox/"):], m.size) for m in members if m.name.startswith("inbox/")}
        aside: dict[str, bytes | None] = {change_log.DELTA_NAME: None}
        extract(data, self.inbound_dir, aside)  # inbox files first in the stream, then the change or the file
        self.pulled[headers.get("x-inbound") or "snapshot"] += 1
        self.pulled["bytes"] += len(data)
        try:
            position = json.loads(headers.get("x-position") or "null")
            if aside[change_log.DELTA_NAME] is not None:
                position = self._apply(json.loads(aside[change_log.DELTA_NAME]))
            else:  # a whole inbound.db came, by a rename: its log is the host's business, not ours
                with sqlite3.connect(self.inbound_dir / schema.INBOUND, isolation_level=None) as conn:
                    change_log.untrack(conn)
                conn.close()
        except (sqlite3.Error, change_log.Gap, ValueError, KeyError, TypeError) as exc:
            log.warning("the host's change to inbound.db did not apply here (%s): asking for the whole file", exc)
            self._stamp = self._position = None
            return True
        self._stamp, self._position = headers.get("x-stamp") or None, position
        return True

    def _apply(self, delta: dict) -> dict:
        conn = sqlite3.connect(self.inbound_dir / schema.INBOUND, isolation_level=None, timeout=5)
        try:
            return change_log.apply(conn, delta)
        finally:
            conn.close()

    def _down_loop(self) -> None:
        pause = 0.2
        while not self._stop.is_set():
            try:
                self.pull(LONG_POLL_S)
                pause = 0.2
            except Exception as exc:  # noqa: BLE001 - the door restarts, the network blips: try again
                log.warning("inbound from the door failed (%s); again in %.1f s", exc, pause)
                self._stop.wait(pause)
                pause = min(pause * 2, BACKOFF_MAX_S)

    # -- up --------------------------------------------------------------------------------------
    def _outbox_files(self) -> list[tuple[str, int]]:
        try:
            return [(e.name, e.stat(follow_symlinks=False).st_size) for e in os.scandir(self.outbox)
                    if e.is_file(follow_symlinks=False) and not e.name.startswith(".")]
        except FileNotFoundError:
            return []

    def push(self) -> None:
        with self._push_lock:
            new = [f for f in self._outbox_files() if f not in self._sent_outbox]
            if new:
                status, _h, data = self._up.request("PUT", "/files/outbox", pack(self.outbox, [n for n, _ in new]),
                                                    content_type="application/x-tar")
                self._expect(status, "outbox files", data)
                self._sent_outbox |= set(new)
            conn = self._out
            out, size = [], 0
            for row in conn.execute("SELECT * FROM messages_out WHERE seq > ? ORDER BY seq LIMIT 500",
                                    (self._host_seq,)):
                size += len(row["content"] or "")
                if out and size > PUSH_BYTES:
                    break  # the rest goes with the next push (the door takes bodies of 16 MiB at most)
                out.append(dict(row))
            # acks go up as changes since what the door confirmed (a busy chat keeps tens of thousands);
            # state, the current tool and the pruning point only when they changed since then
            changed, gone, upto = self._ack_changes()
            now = {
                "state": [dict(r) for r in conn.execute("SELECT * FROM session_state")],
                "container": next((dict(r) for r in conn.execute(
                    "SELECT current_tool, tool_declared_timeout_ms, tool_started_at, tool_subject "
                    "FROM container_state WHERE id = 1")), None),
                "keep_from_seq": conn.execute("SELECT MIN(seq) FROM messages_out").fetchone()[0],
            }
            moved = {k: v for k, v in now.items() if self._confirmed.get(k, ...) != v}
            beat = self._heartbeat()
            if not (out or changed or gone or moved or beat != self._confirmed.get("beat")):
                return  # nothing the door does not have: no request
            payload = {"out": out, "acks": changed, "acks_gone": gone, "acks_delta": True, "heartbeat": beat, **moved}
            status, _h, data = self._up.request("POST", "/outbound", json.dumps(payload).encode())
            self._expect(status, "outbound rows", data)
            self._host_seq = max(self._host_seq, json.loads(data).get("max_seq") or 0)
            self._confirmed.update(now, beat=beat)
            if upto:  # the door has these: a claim changed again meanwhile has a newer entry, kept
                self._out.execute("DELETE FROM changes WHERE seq <= ?", (upto,))
                self._files_due = True  # a turn began or ended: its files go up now

    def _ack_changes(self) -> tuple[list[dict], list[str], int]:
        """Claims and outcomes changed since the door's last confirmation, at most ACKS_PER_PUSH
        (changed, released, the log's seq they reach)."""
        found = self._out.execute("SELECT seq, pk, gone FROM changes WHERE tbl = 'processing_ack' ORDER BY seq "
                                  "LIMIT ?", (ACKS_PER_PUSH,)).fetchall()
        changed, gone = [], []
        for _seq, pk, was_removed in found:
            message_id = json.loads(pk)[0]
            row = None if was_removed else self._out.execute(
                "SELECT status, status_changed FROM processing_ack WHERE message_id = ?", (message_id,)).fetchone()
            if row is None:
                gone.append(message_id)
            else:
                changed.append({"message_id": message_id, "status": row[0], "status_changed": row[1]})
        return changed, gone, found[-1][0] if found else 0

    def _has_new_rows(self) -> bool:
        return self._out.execute("SELECT COALESCE(MAX(seq), 0) FROM messages_out").fetchone()[0] > self._host_seq

    def _heartbeat(self) -> float | None:
        try:
            return os.stat(self.session_dir / schema.HEARTBEAT).st_mtime
        except OSError:
            return None

    def _turn_running(self) -> bool:
        return self._out.execute("SELECT 1 FROM processing_ack WHERE status = 'processing' LIMIT 1").fetchone() is not None

    def sync_files(self) -> int:
        """Changed files of home/ and the group folder, up, then the removed ones; how many."""
        sent = 0
        for part, root in self.trees.items():
            now = manifest(root)
            before = self._sent_files.get(part, {})
            known = self._known.setdefault(part, {})
            changed = [rel for rel, sig in now.items() if before.get(rel) != sig]
            if changed:
                digests: dict[str, str] = {}
                status, _h, data = self._up.request("PUT", f"/files/{part}", pack(root, changed, digests),
                                                    content_type="application/x-tar", timeout=300)
                self._expect(status, f"files {part}", data)
                known.update(digests)
                sent += len(changed)
            removed = {rel: known[rel] for rel in before if rel not in now and rel in known}
            if removed:
                status, _h, data = self._up.request("DELETE", f"/files/{part}", json.dumps({"files": removed}).encode())
                self._expect(status, f"removed files {part}", data)
                for rel in removed:
                    known.pop(rel, None)
                sent += len(removed)
            self._sent_files[part] = now
        self._files_at, self._files_due = time.monotonic(), False
        return sent

    def _up_loop(self) -> None:
        try:
            watcher = nudge.Watcher((nudge.NUDGE, schema.HEARTBEAT))
            watcher.watch(self.session_dir)
        except (nudge.Unavailable, OSError):
            watcher = None
        pause = 0.2
        pushed_at = 0.0
        pending, in_turn = True, False
        while not self._stop.is_set():
            # Awake while something waits to go up, or a turn runs (its files go up every few
            # seconds); idle, only our commits and heartbeats wake us, and a look for files now and then.
            if watcher is not None:
                wait = max(0.01, PUSH_EVERY_S - (time.monotonic() - pushed_at)) if pending else \
                    FILES_IN_TURN_S if in_turn else FILES_IDLE_S
                ready, _, _ = select.select([watcher], [], [], wait)
                if ready:
                    watcher.drain()
                    pending = True
            else:
                self._stop.wait(0.05)
                pending = True
            # A new row (an answer, a card) goes up at once; claims, state and heartbeats wait for the
            # next second's push: a push at the turn's start would take CPU from the turn itself.
            if pending and time.monotonic() - pushed_at < PUSH_EVERY_S and not self._has_new_rows():
                continue
            try:
                if pending:
                    pushed_at = time.monotonic()
                    self.push()
                    pending = False
                in_turn = self._turn_running()
                every = FILES_IN_TURN_S if in_turn else FILES_IDLE_S
                if self._files_due or time.monotonic() - self._files_at > every:
                    self.sync_files()
                pause = 0.2
            except Exception as exc:  # noqa: BLE001 - as for the down loop
                log.warning("push to the door failed (%s); again in %.1f s", exc, pause)
                self._stop.wait(pause)
                pause = min(pause * 2, BACKOFF_MAX_S)
        if watcher is not None:
            watcher.close()

    # -- stop ------------------------------------------------------------------------------------
    def finish(self) -> None:
        """Last push and file upload (the sandbox is stopping)."""
        self._stop.set()
        for thread in self._threads:
            if thread.name == "remote-up":  # (the down thread may sit in a long poll: not waited for)
                thread.join(5)
        started = time.monotonic()
        try:
            self.push()
            sent = self.sync_files()
            log.info("last upload to the door: %d file(s) in %.0f ms", sent, (time.monotonic() - started) * 1000)
        except Exception as exc:  # noqa: BLE001
            log.warning("the last upload to the door failed: %s", exc)
