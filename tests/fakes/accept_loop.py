"""A listening socket served on a thread of its own, for the tests' relays and toy servers.

close() shuts the socket down before closing it and waits for the thread. A plain close() leaves a
thread blocked in accept() on the old socket; once that call is restarted by the kernel (after a
SIGSTOP and SIGCONT of the process, for one) it runs again on the same descriptor number, which by
then belongs to another test's listener, and takes that listener's connections (seen in CI: a
relay left by tests/agent/test_runner.py took the media test's transcription request, which then
hung). shutdown() wakes the blocked accept() with an error instead.
"""
from __future__ import annotations

import socket
import threading
from typing import Callable


class AcceptLoop:
    def __init__(self, sock: socket.socket, handle: Callable[[socket.socket], None], name: str = "accept-loop"):
        self.sock = sock
        self._handle = handle
        self.thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return  # shut down by close()
            try:
                self._handle(conn)
            except OSError:
                conn.close()  # the far side is gone (a stopped fake): this connection fails, the loop goes on

    def close(self, timeout: float = 5.0) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        self.thread.join(timeout)
