"""The `signal-events` program when signal-cli is installed on this machine: it owns signal-cli.

signal-cli's HTTP daemon writes each envelope into the events stream and forgets it, whether or not a
reader is there: a listener that died loses the envelopes written after its death (the first write into
a dead TCP connection succeeds; the next fails and is dropped too). So here signal-cli runs as this
program's child, `signal-cli -a ACCOUNT -o json jsonRpc` on a pipe, and dies with it (PR_SET_PDEATHSIG):
- what reaches Signal's servers while the listener is down stays there (nobody takes it off), and what
  signal-cli had stored but not yet written is written again when it starts (its message cache);
- each envelope read from the pipe is put in the spool (spool.py, on disk) before the next is read, and
  handed to the web program from there, so a web program that is slow or restarting holds nothing in
  the pipe;
- signal-cli locks its account to one process, so this program also carries the web program's calls:
  it answers JSON-RPC at SIGNAL_CLI_URL (`/api/v1/rpc`, `/api/v1/check`) and passes each to the child.
What can still be lost at a SIGKILL: an envelope signal-cli wrote into the pipe in the moment before
the listener died, not yet in the spool (measured by tests/platforms/test_signal_owner_e2e.py).
"""
from __future__ import annotations

import ctypes
import itertools
import json
import logging
import os
import shutil
import signal as signals
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from . import DEFAULT_URL, host_port
from .listener import EventsListener, backoff
from .spool import Spool

log = logging.getLogger(__name__)

PR_SET_PDEATHSIG = 1
MAX_RPC_BYTES = 128 << 20   # a send carries its files as data: URIs
CALL_TIMEOUT_S = 120.0
CHILD_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "JAVA_HOME", "JAVA_OPTS", "TMPDIR", "XDG_DATA_HOME")


def _die_with_parent() -> None:
    """In the child, before exec: SIGKILL when the thread that started it (the main thread) dies."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signals.SIGKILL, 0, 0, 0)


class Child:
    """signal-cli on a pipe: notifications to `on_receive`, answers matched to their calls by id."""

    def __init__(self, argv: list[str], on_receive):
        self.argv, self.on_receive = argv, on_receive
        self.proc: subprocess.Popen | None = None
        self._write = threading.Lock()
        self._waiting: dict[str, tuple[threading.Event, list]] = {}
        self._ids = itertools.count(1)

    def start(self) -> None:
        env = {k: os.environ[k] for k in CHILD_ENV if k in os.environ}  # none of NanoClaw's secrets
        self.proc = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env,
                                     preexec_fn=_die_with_parent)
        threading.Thread(target=self._read, args=(self.proc,), name="signal-cli-out", daemon=True).start()

    def _read(self, proc: subprocess.Popen) -> None:
        for line in proc.stdout:
            try:
                message = json.loads(line)
            except ValueError:
                log.warning("signal-cli wrote a line that is not JSON (%d bytes); passed over", len(line))
                continue
            if not isinstance(message, dict):
                continue
            if message.get("method") == "receive" and isinstance(message.get("params"), dict):
                self.on_receive(json.dumps(message["params"], separators=(",", ":")))
            elif str(message.get("id")) in self._waiting:
                event, box = self._waiting[str(message.get("id"))]
                box.append(message)
                event.set()
        for event, _box in list(self._waiting.values()):
            event.set()  # the child ended: its callers are told now, not at their timeout

    def call(self, request: dict) -> dict | None:
        """signal-cli's answer to one JSON-RPC request (its own id given back), None if it gave none."""
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return None
        ident = f"nanoclaw-{next(self._ids)}"
        event, box = threading.Event(), []
        self._waiting[ident] = (event, box)
        try:
            line = json.dumps({**request, "id": ident}, separators=(",", ":")).encode() + b"\n"
            with self._write:
                proc.stdin.write(line)
                proc.stdin.flush()
            event.wait(CALL_TIMEOUT_S)
        except OSError:
            return None
        finally:
            self._waiting.pop(ident, None)
        return {**box[0], "id": request.get("id")} if box else None

    def wait(self) -> int:
        return self.proc.wait() if self.proc else 0

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                self.proc.stdin.close()  # signal-cli ends when its input does
                self.proc.wait(10)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()


class OwnedListener(EventsListener):
    def __init__(self, settings, *, web_url: str | None = None):
        super().__init__(settings, web_url=web_url)
        self.spool = Spool(settings.data_dir / "signal-spool.db")
        found = shutil.which("signal-cli")
        self.child = Child([found, "-a", self.account, "-o", "json", "jsonRpc"], self.spool.put)
        self.address = host_port(self.base) or host_port(DEFAULT_URL)
        self.server = ThreadingHTTPServer(self.address, _rpc_handler(self.child))
        self.server.daemon_threads = True

    def hand_over_spooled(self) -> None:
        while not self.stop.is_set():
            found = self.spool.first(timeout=60.0)  # a put or a halt wakes it: no timer at rest
            if found is None:
                continue
            ident, data = found
            self.deliver(data)
            if self.stop.is_set():
                return  # not taken: it stays for the next start
            self.spool.done(ident)

    def run(self) -> None:
        # no shutdown poll at rest: the program ends with run(), and the server's daemon thread with it
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 3600}, name="signal-rpc",
                         daemon=True).start()
        threading.Thread(target=self.hand_over_spooled, name="signal-hand-over", daemon=True).start()
        log.info("signal-cli runs as this program's child; its calls are answered at %s:%d; %d event(s) kept "
                 "from before", *self.address, len(self.spool))
        failures = 0
        while not self.stop.is_set():
            self.child.start()  # from the main thread: PDEATHSIG follows the thread that started it
            code = self.child.wait()
            if self.stop.is_set():
                break
            failures += 1
            wait = backoff(failures)
            log.warning("signal-cli ended (exit %s); starting it again in %.0f s", code, wait)
            self.stop.wait(wait)

    def halt(self) -> None:
        self.stop.set()
        self.spool.wake()
        threading.Thread(target=self.child.stop, daemon=True).start()


def _rpc_handler(child: Child):
    class Rpc(BaseHTTPRequestHandler):
        def do_GET(self):
            self._reply(200 if self.path.split("?")[0] == "/api/v1/check" else 404, None)

        def do_POST(self):
            if self.path.split("?")[0] != "/api/v1/rpc":
                return self._reply(404, None)
            if not self.headers.get("content-type", "").startswith("application/json"):
                return self._reply(415, None)
            size = int(self.headers.get("content-length") or 0)
            if size > MAX_RPC_BYTES:
                return self._reply(413, None)
            try:
                request = json.loads(self.rfile.read(size))
            except ValueError:
                request = None
            if not isinstance(request, dict):
                return self._reply(200, {"jsonrpc": "2.0", "error": {"code": -32700, "message": "Parse error"},
                                         "id": None})
            answer = child.call(request)
            self._reply(200, answer) if answer is not None else self._reply(503, None)

        def _reply(self, status: int, body) -> None:
            data = json.dumps(body).encode() if body is not None else b""
            self.send_response(status)
            if body is not None:
                self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass
    return Rpc
