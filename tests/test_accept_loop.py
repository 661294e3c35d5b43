"""The tests' relays close for good: no thread is left in accept() to take a later test's connections."""
from __future__ import annotations

import os
import socket
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import requests

from fakes.accept_loop import AcceptLoop


def blocked_on(thread, fd: int) -> bool:
    """Whether the thread sits in a system call on descriptor fd (its accept())."""
    try:
        with open(f"/proc/self/task/{thread.native_id}/syscall") as f:
            fields = f.read().split()
    except OSError:
        return False
    return len(fields) > 1 and fields[0] != "running" and int(fields[1], 16) == fd


class Hello(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 - the standard library's name
        self.send_response(200)
        self.send_header("Content-Length", "5")
        self.end_headers()
        self.wfile.write(b"hello")

    def log_message(self, *args):
        pass


def test_a_closed_loop_leaves_no_thread_to_take_the_next_listeners_connections(tmp_path):
    taken = []
    relay = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    relay.bind(str(tmp_path / "relay.sock"))
    relay.listen(4)
    number = relay.fileno()
    loop = AcceptLoop(relay, taken.append)
    deadline = time.monotonic() + 10
    while not blocked_on(loop.thread, number):
        assert time.monotonic() < deadline, "the loop's thread never reached accept()"
        time.sleep(0.01)
    loop.close()
    assert not loop.thread.is_alive()

    # The next listener of this process (an HTTP fake, as the speech server) gets the same descriptor
    # number; a stop and continue of the process restarts any accept() still blocked on the old
    # socket, now on that number.
    with ThreadingHTTPServer(("127.0.0.1", 0), Hello) as server:
        assert server.fileno() == number, "precondition: the descriptor number is reused"
        threading.Thread(target=server.serve_forever, daemon=True).start()
        subprocess.run(["sh", "-c", f"kill -STOP {os.getpid()}; sleep 0.2; kill -CONT {os.getpid()}"], check=True)
        try:
            assert requests.get(f"http://127.0.0.1:{server.server_address[1]}/", timeout=10).text == "hello"
        finally:
            server.shutdown()
    assert taken == []
