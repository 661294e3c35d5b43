"""One listening unix socket per agent group, and the filesystem rules around it.

Layout: `$NANOCLAW_DATA_DIR/proxy/` (0700: other host users cannot reach any
socket) / `<folder>/` (0755: this directory is what a sandbox mounts, at
/run/nanoclaw-proxy) / `proxy.sock` (0666: the sandbox's uid 1000 must be able
to connect; the mount is what limits who can).
"""
from __future__ import annotations

import os
import selectors
import socket
import socketserver
import stat
import threading
from pathlib import Path

from ..security import validate_folder
from .door import Door, DoorHandler

SOCKET_NAME = "proxy.sock"


class SocketInUse(RuntimeError):
    """A live listener (another proxy process) already answers on this path."""


def socket_path(proxy_dir: Path, folder: str) -> Path:
    return Path(proxy_dir) / validate_folder(folder) / SOCKET_NAME


def is_live(path: Path, timeout: float = 0.5) -> bool:
    """Does something accept connections on this socket path?"""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.connect(str(path))
        return True
    except OSError:
        return False
    finally:
        s.close()


def prepare_dir(proxy_dir: Path, folder: str) -> Path:
    proxy_dir = Path(proxy_dir)
    proxy_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(proxy_dir, 0o700)
    group_dir = proxy_dir / validate_folder(folder)
    group_dir.mkdir(exist_ok=True)
    if group_dir.is_symlink() or not group_dir.is_dir():
        raise RuntimeError(f"{group_dir} is not a plain directory; refusing to put a proxy socket there")
    os.chmod(group_dir, 0o755)
    return group_dir


class FolderListener(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    """The HTTP server on one group's socket. Its `folder` is the caller's identity."""
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = False
    request_queue_size = 128  # a sandbox opens many connections at once (npm, pip): never refuse one

    def __init__(self, path: Path, folder: str, door: Door):
        self.folder = folder
        self.door = door
        self.path = Path(path)
        self._conns: set[socket.socket] = set()
        self._conns_lock = threading.Lock()
        if self.path.exists() or self.path.is_symlink():
            if stat.S_ISSOCK(self.path.lstat().st_mode) and is_live(self.path):
                raise SocketInUse(f"another process already serves {self.path}")
            if self.path.is_dir() and not self.path.is_symlink():
                raise RuntimeError(f"{self.path} is a directory; remove it so the proxy can listen there")
            self.path.unlink()  # stale: left by a proxy that died
        super().__init__(str(self.path), DoorHandler)
        os.chmod(self.path, 0o666)
        self.inode = self.path.stat().st_ino
        self._closing = False
        self._wake_r, self._wake_w = os.pipe()  # stop() wakes the accept loop: it never polls
        self.thread = threading.Thread(target=self._serve, name=f"proxy-{folder}", daemon=True)

    def start(self) -> "FolderListener":
        self.thread.start()
        return self

    def still_ours(self) -> bool:
        """False if our socket file was removed or replaced underneath us."""
        try:
            return self.path.stat().st_ino == self.inode
        except OSError:
            return False

    def _serve(self) -> None:
        """socketserver's serve_forever without its poll: it sleeps until a connection or stop()
        (an idle proxy with a socket per agent woke five times a second per socket)."""
        with selectors.DefaultSelector() as selector:
            selector.register(self, selectors.EVENT_READ)
            selector.register(self._wake_r, selectors.EVENT_READ)
            while not self._closing:
                for key, _events in selector.select():
                    if key.fileobj is self and not self._closing:
                        self._handle_request_noblock()

    def process_request(self, request, client_address):
        with self._conns_lock:
            self._conns.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request):
        with self._conns_lock:
            self._conns.discard(request)
        super().shutdown_request(request)

    def stop(self) -> None:
        """Stop accepting, cut open keep-alive connections, remove our socket file."""
        if self._closing:
            return
        self._closing = True
        os.write(self._wake_w, b"x")
        if self.thread.is_alive() and self.thread is not threading.current_thread():
            self.thread.join()
        os.close(self._wake_r)
        os.close(self._wake_w)
        self.server_close()
        with self._conns_lock:
            conns = list(self._conns)
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if self.still_ours():
            try:
                self.path.unlink()
            except OSError:
                pass
