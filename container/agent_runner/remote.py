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
          gap, replacing ours by a rename. The runner's inotify watch sees either as the host's commit.
          When the door's tags of home/ and the group folder (sent with each change) differ from
          ours, what changed there is taken first (tree_sync.py), so a turn sees the host's files;
- up:     after each commit of ours (the store's nudge) or heartbeat, at most once a second unless a
          new row waits: new outbox files, then the new rows and what changed of the claims, the
          state and the current tool (nothing at all when nothing changed: an idle sandbox sends
          its heartbeat alone); and the files of home/ and the group folder that changed (when a
          turn begins and ends, every 5 s during one, so a kill mid-turn loses at most that, and
          every 30 s between turns) and the names of those removed here, each with the digest of
          the version this side last knew (the host settles a write over a version we never saw:
          trees.py); then what changed on the host since (another sandbox of the agent, the host).
At a stop, one last push and file upload. Nothing here is trusted by the host: it checks all of it.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import select
import sqlite3
import threading
import time
from pathlib import Path

from . import change_log, nudge
from . import session_schema as schema
from .door_link import DoorLink
from .tree_sync import extract, manifest, pack, plan_pull, remove_here, tree_tag

log = logging.getLogger("agent_runner.remote")

LONG_POLL_S = 25.0
PUSH_EVERY_S = 1.0
FILES_IN_TURN_S = 5.0  # during a turn, changed files go up at most this often: a kill loses no more
FILES_IDLE_S = 30.0    # between turns (a process the agent left running may still write)
BACKOFF_MAX_S = 5.0
BACKOFF_FIRST_S = 0.2
PUSH_BYTES = 8 << 20  # rows per push, as sent (a larger row goes as a note that it was too large)
ROW_CONTENT = 4 << 20  # one row's content, as the door takes it (mirror.MAX_CONTENT)
STREAM_PUSH_S = float(os.environ.get("NANOCLAW_PROGRESS_EDIT_S") or 3)  # the answer so far, at most this often
MAX_STREAM = 65536  # characters of it (the door's mirror.MAX_STREAM)
ACKS_PER_PUSH = 5000  # ack changes per push; the rest go with the next (the door takes 20,000)


def retry_after(failures: int, draw=random.random) -> float:
    """The wait after the `failures`-th failed request in a row: doubling from BACKOFF_FIRST_S up to
    BACKOFF_MAX_S, each drawn between half and all of that, so the thousands of sandboxes that lost
    the door at once (its restart) do not all come back in the same instant, again and again."""
    ceiling = min(BACKOFF_FIRST_S * 2 ** min(max(failures, 1) - 1, 16), BACKOFF_MAX_S)
    return ceiling * (0.5 + draw() / 2)


def too_large(row: dict, size: int) -> dict:
    """A row too large for any push goes as a note saying so (the door would refuse it for good)."""
    note = f"(a message of {size:,} bytes was too large to send from a remote sandbox: at most {PUSH_BYTES:,})"
    return {**row, "content": json.dumps({"op": "text", "text": note})}


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
        self._inbox: dict | None = None  # the door's mark of the inbox files we have (changed up to when)
        self._host_seq = 0
        self._confirmed: dict = {}  # state, container, keep_from_seq and heartbeat as the door last took them
        self._stream_pushed = 0.0  # when the answer so far last went up (STREAM_PUSH_S)
        self._sent_outbox: set[tuple[str, int]] = set()
        self._sent_files: dict[str, dict] = {}
        self._known: dict[str, dict[str, str]] = {}  # part -> rel -> sha256 of the content the host has from us
        self._files_at = 0.0
        self._files_due = False
        self._files_lock = threading.Lock()  # the up loop's sync and the down loop's pull of files
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
            try:
                os.chmod(folder, 0o555)
            except PermissionError:  # a pod's emptyDir itself is the kubelet's, not ours: what is in it is
                pass
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
        ask = json.dumps({"after": self._stamp, "wait": wait, "inbox": self._inbox,
                          "position": self._position}).encode()
        status, headers, data = self._down.request("POST", "/inbound", ask, timeout=wait + 30)
        if status == 204:
            return False
        self._expect(status, "inbound", data)
        self._take_host_files(headers.get("x-trees"))
        aside: dict[str, bytes | None] = {change_log.DELTA_NAME: None}
        extract(data, self.inbound_dir, aside)  # inbox files first in the stream, then the change or the file
        try:
            self._inbox = json.loads(headers.get("x-inbox") or "null")
        except ValueError:
            self._inbox = None
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
        failures = 0
        while not self._stop.is_set():
            try:
                self.pull(LONG_POLL_S)
                failures = 0
            except Exception as exc:  # noqa: BLE001 - the door restarts, the network blips: try again
                failures += 1
                pause = retry_after(failures)
                log.warning("inbound from the door failed (%s); again in %.1f s", exc, pause)
                self._stop.wait(pause)

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
                row = dict(row)
                cost = len(json.dumps(row, ensure_ascii=False).encode())  # as it goes on the wire
                if cost > PUSH_BYTES or len(row["content"] or "") > ROW_CONTENT:
                    row = too_large(row, cost)
                    cost = len(row["content"]) + 512
                size += cost
                if out and size > PUSH_BYTES:
                    break  # the rest goes with the next push (the door takes 10 MiB at most)
                out.append(row)
            # acks go up as changes since what the door confirmed (a busy chat keeps tens of thousands);
            # state, the current tool and the pruning point only when they changed since then
            changed, gone, upto = self._ack_changes()
            now = {
                "state": [dict(r) for r in conn.execute("SELECT * FROM session_state")],
                "container": self._container(conn),
                "keep_from_seq": conn.execute("SELECT MIN(seq) FROM messages_out").fetchone()[0],
            }
            moved = {k: v for k, v in now.items() if self._confirmed.get(k, ...) != v}
            beat = self._heartbeat()
            if not (out or changed or gone or moved or beat != self._confirmed.get("beat")):
                return  # nothing the door does not have: no request
            payload = {"out": out, "acks": changed, "acks_gone": gone, "acks_delta": True, "heartbeat": beat, **moved}
            status, _h, data = self._up.request("POST", "/outbound", json.dumps(payload, ensure_ascii=False).encode())
            self._expect(status, "outbound rows", data)
            self._host_seq = max(self._host_seq, json.loads(data).get("max_seq") or 0)
            self._confirmed.update(now, beat=beat)
            if upto:  # the door has these: a claim changed again meanwhile has a newer entry, kept
                self._out.execute("DELETE FROM changes WHERE seq <= ?", (upto,))
                self._files_due = True  # a turn began or ended: its files go up now

    def _container(self, conn) -> dict | None:
        """The container state to push: the answer so far (stream_for, stream_text) at most every
        STREAM_PUSH_S, as the host edits its live message no more often; the rest as it is."""
        row = next((dict(r) for r in conn.execute(
            "SELECT current_tool, tool_declared_timeout_ms, tool_started_at, tool_subject, stream_for, stream_text "
            "FROM container_state WHERE id = 1")), None)
        if row is None:
            return None
        row["stream_text"] = (row["stream_text"] or "")[:MAX_STREAM] or None
        sent = self._confirmed.get("container") or {}
        moved = (row["stream_for"], row["stream_text"]) != (sent.get("stream_for"), sent.get("stream_text"))
        if moved and row["stream_text"] and time.monotonic() - self._stream_pushed < STREAM_PUSH_S:
            row["stream_for"], row["stream_text"] = sent.get("stream_for"), sent.get("stream_text")
        elif moved:
            self._stream_pushed = time.monotonic()
        return row

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
        """Changed files of home/ and the group folder, up (each with the digest it had when this side
        last agreed with the host), then the removed ones; then what changed on the host. How many."""
        sent = 0
        with self._files_lock:
            for part, root in self.trees.items():
                now = manifest(root)
                before = self._sent_files.get(part, {})
                known = self._known.setdefault(part, {})
                changed = [rel for rel, sig in now.items() if before.get(rel) != sig]
                again: list[str] = []
                if changed:
                    digests: dict[str, str] = {}
                    body = pack(root, changed, digests, known, {rel: before[rel][0] for rel in changed if rel in before})
                    status, _h, data = self._up.request("PUT", f"/files/{part}", body,
                                                        content_type="application/x-tar", timeout=300)
                    self._expect(status, f"files {part}", data)
                    again = list(json.loads(data).get("again") or [])  # tails the host could not add to its copy
                    for rel in again:
                        digests.pop(rel, None)
                    known.update(digests)
                    sent += len(changed)
                removed = {rel: known[rel] for rel in before if rel not in now and rel in known}
                if removed:
                    status, _h, data = self._up.request("DELETE", f"/files/{part}",
                                                        json.dumps({"files": removed}).encode())
                    self._expect(status, f"removed files {part}", data)
                    for rel in removed:
                        known.pop(rel, None)
                    sent += len(removed)
                self._sent_files[part] = now
                for rel in again:
                    now.pop(rel, None)  # goes again, whole, with the next upload
                self._pull_part(self._up, part, root)
        self._files_at, self._files_due = time.monotonic(), False
        return sent

    def _take_host_files(self, header: str | None) -> None:
        """Before an inbound change applies, the host's files that changed (the host names its trees'
        tags with the change): what the host had when a message came, the turn it starts sees."""
        try:
            tags = json.loads(header) if header else {}
        except ValueError:
            return
        if not isinstance(tags, dict):
            return
        with self._files_lock:
            for part, root in self.trees.items():
                if tags.get(part) not in (None, tree_tag(self._known.get(part, {}))):
                    self._pull_part(self._down, part, root)

    def _pull_part(self, link, part: str, root: Path) -> int:
        """Take what changed on the host in one tree since this side last agreed with it, leaving
        whatever changed here meanwhile for the next upload; how many files changed here."""
        known = self._known.setdefault(part, {})
        sent = self._sent_files.setdefault(part, {})
        status, _h, data = link.request("POST", f"/files/{part}/manifest", json.dumps({"tag": tree_tag(known)}).encode())
        if status == 204:
            return 0
        self._expect(status, f"the manifest of {part}", data)
        host = json.loads(data)["files"]
        local = manifest(root)
        fetch, drop = plan_pull(host, known, local, sent)
        got: dict[str, str] = {}
        if fetch:
            status, headers, data = link.request("POST", f"/files/{part}/pick", json.dumps({"names": fetch}).encode(),
                                                 timeout=300)
            self._expect(status, f"files of {part}", data)
            if hashlib.sha256(data).hexdigest() != headers.get("x-digest"):
                raise RuntimeError(f"the files of {part} did not arrive whole (their digest differs)")
            got = extract(data, root, expect={rel: local.get(rel) for rel in fetch})
            known.update(got)
        gone = [rel for rel in drop if remove_here(root, rel, local.get(rel))]
        for rel in gone:
            known.pop(rel, None)
        for rel in drop:
            sent.pop(rel, None)
        after = manifest(root)
        for rel in got:
            if rel in after:
                sent[rel] = after[rel]
        if got or gone:
            log.info("from the host's %s: %d file(s) changed, %d removed", part, len(got), len(gone))
        return len(got) + len(gone)

    def _up_loop(self) -> None:
        try:
            watcher = nudge.Watcher((nudge.NUDGE, schema.HEARTBEAT))
            watcher.watch(self.session_dir)
        except (nudge.Unavailable, OSError):
            watcher = None
        failures = 0
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
                failures = 0
            except Exception as exc:  # noqa: BLE001 - as for the down loop
                failures += 1
                pause = retry_after(failures)
                log.warning("push to the door failed (%s); again in %.1f s", exc, pause)
                self._stop.wait(pause)
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
