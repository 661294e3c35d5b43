"""TCP (127.0.0.1) -> unix socket relay: the sandbox has no network, only the proxy's socket.

The SDK's CLI speaks HTTP to ANTHROPIC_BASE_URL=http://127.0.0.1:<port>; each TCP connection is
piped byte for byte to a fresh connection on the proxy's unix socket, both directions, unbuffered
(SSE streams must not be held back).
"""
from __future__ import annotations

import logging
import socket
import threading

log = logging.getLogger("agent_runner.bridge")
_CHUNK = 65536


def _pump(src: socket.socket, dst: socket.socket) -> None:
    try:
        while True:
            data = src.recv(_CHUNK)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    finally:
        # Pass the half-close on so the other side sees end-of-request / end-of-response.
        try:
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass


def _relay(client: socket.socket, unix_path: str) -> None:
    upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        upstream.connect(unix_path)
    except OSError as e:
        log.warning("bridge: proxy socket unreachable: %s", e.strerror or e)
        client.close()
        upstream.close()
        return
    back = threading.Thread(target=_pump, args=(upstream, client), daemon=True)
    back.start()
    _pump(client, upstream)
    back.join()
    client.close()
    upstream.close()


class Bridge:
    """Listens on 127.0.0.1:<free port> until stop()."""

    def __init__(self, unix_path: str, host: str = "127.0.0.1", port: int = 0):
        self.unix_path = unix_path
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((host, port))
        self._sock.listen(64)
        self.port: int = self._sock.getsockname()[1]
        self._thread = threading.Thread(target=self._serve, name="bridge", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> "Bridge":
        self._thread.start()
        log.info("bridge: 127.0.0.1:%d -> %s", self.port, self.unix_path)
        return self

    def _serve(self) -> None:
        while True:
            try:
                client, _ = self._sock.accept()
            except OSError:
                return  # closed by stop()
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=_relay, args=(client, self.unix_path), daemon=True).start()

    def stop(self) -> None:
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()
