"""ProxyServer: keeps one listener per agent group, following the list of groups.

In-process (threads) for tests and the `chat` command; `serve_forever` is the
blocking entry of the supervisord `proxy` program. Groups added later get a
socket within one rescan (~2 s, or at once on SIGHUP); deleted groups lose
theirs. If another live proxy already serves a group's socket, we leave it
alone and take over only once it stops answering.

Each group's egress allowlist and credential routes come from its policy files
(policy_files.py): read on use when they changed, checked on every rescan, and
read again on SIGHUP.
"""
from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from ..security import folder_problem
from .credentials import CredentialRelay
from .door import Door, Request, Route, RouteTable
from .egress import EgressGate, resolve
from ..internet.own import own_ports
from .model_api import ModelApi
from ..db import ChangeListener
from .policy_files import PolicyStore, policy_root
from .sockets import FolderListener, SocketInUse, is_live, prepare_dir, socket_path

# The look for new or removed agent groups and changed policy files: a safety net only, since each
# writer announces an agent group it creates or removes and a sandbox start announces a socket it
# waits for (db.py, topic "proxy"), and policy files are checked on each request anyway.
RESCAN_S = 30.0


def plan(wanted: Iterable[str], served: Iterable[str]) -> tuple[set[str], set[str]]:
    """(folders to open, folders to close). Pure, so the sync rule is testable alone."""
    wanted, served = set(wanted), set(served)
    return wanted - served, served - wanted


class ProxyServer:
    def __init__(self, settings, list_folders: Callable[[], Iterable[str]], *,
                 rescan_interval: float = RESCAN_S, logger: logging.Logger | None = None,
                 extra_routes: Iterable[tuple[str, Route]] = (), resolver: Callable = resolve,
                 secrets: Callable[[str], str | None] | None = None,
                 on_policy_change: Callable[..., None] | None = None):
        self.settings = settings
        self.proxy_dir = Path(settings.proxy_dir)
        self.list_folders = list_folders
        self.rescan_interval = rescan_interval
        self.log = logger or logging.getLogger("nanoclaw.proxy")
        self.model_api = ModelApi.from_settings(settings)
        self.policies = PolicyStore(policy_root(settings), on_change=on_policy_change, logger=self.log)
        self.credentials = CredentialRelay(secrets)
        # The group's credential routes are asked first, then this table in order.
        self.door = Door(RouteTable((*tuple(extra_routes), ("/v1/", self.model_api))),
                         egress=EgressGate(self.policies, resolver=resolver, own_ports=own_ports(settings)),
                         local_routes=self._credential_by_path, forward=self._credential_by_host,
                         logger=self.log)
        self._reload_policies = threading.Event()
        self._listeners: dict[str, FolderListener] = {}
        self._deferred: set[str] = set()  # served by another live process
        self._pinned: set[str] = set()  # ensure_socket() asked for these
        self._warned: set[str] = set()
        self._lock = threading.RLock()
        self._wake = threading.Event()
        self._scans = threading.Condition()
        self._scans_begun = self._scans_done = 0
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._changes: ChangeListener | None = None
        self.remote = None
        if settings.claude_code_oauth_token and not settings.anthropic_api_key:
            self.log.warning("model calls use CLAUDE_CODE_OAUTH_TOKEN: a subscription token may not be allowed by "
                             "the provider's terms for use outside its own apps; an API key (ANTHROPIC_API_KEY) is "
                             "the supported way")
        if not self.model_api.credential:
            self.log.warning("neither ANTHROPIC_API_KEY nor CLAUDE_CODE_OAUTH_TOKEN is set: "
                             "model calls go to %s without credentials", settings.anthropic_upstream_url)

    # -- lifecycle -----------------------------------------------------------------------

    def start(self) -> "ProxyServer":
        self.sync()
        if getattr(self.settings, "door_listen", None):  # sandboxes on other machines reach this door over TLS
            from ..remote.door import RemoteDoor  # noqa: E402 - only when sandboxes run elsewhere
            self.remote = RemoteDoor(self.settings, self.socket_path).start()
        self._thread = threading.Thread(target=self._rescan_loop, name="proxy-rescan", daemon=True)
        self._thread.start()
        self._changes = ChangeListener(self.settings.data_dir, {"proxy": self._wake.set}).start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._changes is not None:
            self._changes.stop()
        if self.remote is not None:
            self.remote.stop()
        self._wake.set()
        if self._thread and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        with self._lock:
            for folder in list(self._listeners):
                self._close(folder)
        self.model_api.close()
        self.credentials.close()

    def __enter__(self) -> "ProxyServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def rescan_now(self, wait_s: float = 0.0) -> bool:
        """Rescan without waiting for the next tick; with wait_s, until a scan begun after this call
        is done (False when none was within wait_s)."""
        if not wait_s:  # (also what SIGHUP's handler calls: no lock taken)
            self._wake.set()
            return True
        with self._scans:
            begun = self._scans_begun
        self._wake.set()
        with self._scans:
            return self._scans.wait_for(lambda: self._scans_done > begun, wait_s)

    def reload(self, wait_s: float = 0.0) -> bool:
        """SIGHUP: rescan the groups and read every policy file again."""
        self._reload_policies.set()
        return self.rescan_now(wait_s)

    # -- credential routes ---------------------------------------------------------------

    def _credential_by_path(self, request: Request) -> Route | None:
        route = self.policies.get(request.folder).routes.for_path(request.path)
        return self.credentials.route(route) if route else None

    def _credential_by_host(self, request: Request) -> Route | None:
        route = self.policies.get(request.folder).routes.for_host(request.authority or "")
        return self.credentials.route(route) if route else None

    # -- queries -------------------------------------------------------------------------

    def socket_path(self, folder: str) -> Path:
        return socket_path(self.proxy_dir, folder)

    @property
    def served(self) -> set[str]:
        with self._lock:
            return set(self._listeners)

    def ensure_socket(self, folder: str) -> Path:
        """Open this group's socket now (if no live proxy has it) and keep it while we run."""
        with self._lock:
            self._pinned.add(folder)
            self._open(folder)
        return self.socket_path(folder)

    def wait_ready(self, folder: str, timeout: float = 10.0) -> bool:
        """True once something accepts connections on this group's socket."""
        path = self.socket_path(folder)
        deadline = time.monotonic() + timeout
        while True:
            if path.exists() and is_live(path):
                return True
            if time.monotonic() >= deadline:
                return False
            self._wake.set()
            time.sleep(0.05)

    # -- sync ----------------------------------------------------------------------------

    def sync(self) -> None:
        """Make the open sockets match list_folders() (plus pinned folders)."""
        try:
            listed = list(self.list_folders())
        except Exception as exc:  # a DB hiccup must not close every group's door
            self.log.warning("proxy: cannot list agent groups (%s); keeping the current sockets", exc)
            return
        wanted = set()
        for folder in listed:
            problem = folder_problem(folder)
            if problem:
                if folder not in self._warned:
                    self._warned.add(folder)
                    self.log.warning("proxy: no socket for agent group: %s", problem)
                continue
            wanted.add(folder)
        with self._lock:
            wanted |= self._pinned
            # A listener whose file vanished (data dir wiped) is reopened; a deferred
            # folder is retried in case the other proxy went away.
            for folder, listener in list(self._listeners.items()):
                if not listener.still_ours():
                    self.log.warning("proxy: socket for %s disappeared; reopening", folder)
                    self._close(folder)
            to_open, to_close = plan(wanted, self._listeners)
            for folder in to_close:
                self._close(folder, remove_dir=True)
            self._deferred &= wanted
            for folder in to_open:
                self._open(folder)

    def _open(self, folder: str) -> None:
        if folder in self._listeners or self._stopping.is_set():
            return
        path = self.socket_path(folder)
        try:
            prepare_dir(self.proxy_dir, folder)
            listener = FolderListener(path, folder, self.door).start()
        except SocketInUse:
            if folder not in self._deferred:
                self._deferred.add(folder)
                self.log.warning("proxy: %s is served by another live proxy; leaving it alone", path)
            return
        except Exception as exc:
            self.log.error("proxy: cannot open the socket for %s: %s", folder, exc)
            return
        self._deferred.discard(folder)
        self._listeners[folder] = listener
        self.policies.get(folder)  # read its policy files now (a bad file is reported at once)
        self.log.info("proxy: listening for agent group %s on %s", folder, path)

    def _close(self, folder: str, remove_dir: bool = False) -> None:
        listener = self._listeners.pop(folder, None)
        if listener is None:
            return
        listener.stop()
        if remove_dir:
            try:
                listener.path.parent.rmdir()  # only if empty
            except OSError:
                pass
        self.log.info("proxy: closed the socket of agent group %s", folder)

    def _rescan_loop(self) -> None:
        while not self._stopping.is_set():
            self._wake.wait(self.rescan_interval)
            self._wake.clear()
            if self._stopping.is_set():
                return
            with self._scans:
                self._scans_begun += 1
            try:
                self.sync()
                if self._reload_policies.is_set():
                    self._reload_policies.clear()
                    self.policies.reload_all()
                self.policies.refresh(self.served)  # a changed file is applied (and reported) now
            except Exception:  # keep the door open whatever one scan did
                self.log.exception("proxy: rescan failed")
            with self._scans:
                self._scans_done += 1
                self._scans.notify_all()


def serve_forever(settings, list_folders: Callable[[], Iterable[str]],
                  logger: logging.Logger | None = None, *, rescan_interval: float = RESCAN_S,
                  on_policy_change: Callable[..., None] | None = None) -> None:
    """The supervisord `proxy` program: run until SIGTERM/SIGINT; SIGHUP rescans at once and
    reads every policy file again.

    Call from the main thread (signal handlers). list_folders is called from the
    rescan thread, so it must open its own DB connection if it needs one.
    """
    log = logger or logging.getLogger("nanoclaw.proxy")
    stop = threading.Event()
    server = ProxyServer(settings, list_folders, logger=log, rescan_interval=rescan_interval,
                         on_policy_change=on_policy_change)
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGHUP, signal.SIGTERM, signal.SIGINT)}
    signal.signal(signal.SIGHUP, lambda *_: server.reload())
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    server.start()
    log.info("proxy: serving %d agent group(s) under %s", len(server.served), server.proxy_dir)
    try:
        while not stop.wait(60):  # the signal handlers set it; the timeout only bounds a missed wake
            pass
    finally:
        server.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        log.info("proxy: stopped")
