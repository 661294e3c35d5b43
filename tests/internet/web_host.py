"""A test web host on another network: a network namespace of its own, reached over a veth pair.

The host side of the link is 198.19.N.1, the web host 198.19.N.2 (198.18.0.0/15 is the benchmarking
range: not global, so refused unless the owner opens it; scripts/remote-engine.sh uses 198.18.0.0/30).
The web host serves on port 80 whatever `routes` says: path -> (status, headers, body), read again on
each request from a file, so a test may change them; GET and POST alike, each request's method, path
and body size logged (`requests()`). Root only (ip netns, nsenter).
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SERVER = r"""
import json, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
routes_file = sys.argv[3]
class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        self.do_GET(len(self.rfile.read(int(self.headers.get("Content-Length") or 0))))
    def do_GET(self, size=0):
        with open(routes_file + ".log", "a") as log:
            log.write(json.dumps([self.command, self.path, size]) + "\n")
        routes = json.load(open(routes_file))
        status, headers, body = routes.get(self.path.split("?")[0], [404, {"Content-Type": "text/plain"}, "not here"])
        data = body.encode()
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
    def log_message(self, *args):
        pass
server = ThreadingHTTPServer((sys.argv[1], int(sys.argv[2])), Handler)
server.daemon_threads = True
print("ready", flush=True)
server.serve_forever()
"""


def available() -> tuple[bool, str]:
    if os.geteuid() != 0:
        return False, "a network namespace needs root"
    if not (shutil.which("ip") and shutil.which("nsenter")):
        return False, "ip and nsenter are needed (iproute2, util-linux)"
    return True, ""


class NamespaceHost:
    def __init__(self):
        n = os.getpid() % 250 + 1
        self.ns, self.host_if, self.web_if = f"ncweb{os.getpid()}", f"ncw{os.getpid() % 100000}h", f"ncw{os.getpid() % 100000}w"
        self.host_side, self.address = f"198.19.{n}.1", f"198.19.{n}.2"
        self._dir = tempfile.TemporaryDirectory(prefix="nanoclaw-webhost-")
        self.routes_file = Path(self._dir.name) / "routes.json"
        self.routes: dict[str, tuple[int, dict, str]] = {}
        self._server: subprocess.Popen | None = None

    def set_routes(self, routes: dict[str, tuple[int, dict, str]]) -> None:
        self.routes = dict(routes)
        tmp = self.routes_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.routes))
        tmp.replace(self.routes_file)

    def requests(self) -> list[tuple[str, str, int]]:
        """Every request the web host answered: (method, path with its query, body bytes)."""
        log = Path(str(self.routes_file) + ".log")
        return [tuple(json.loads(line)) for line in log.read_text().splitlines()] if log.exists() else []

    def _ip(self, *args: str) -> None:
        subprocess.run(["ip", *args], check=True, capture_output=True)

    def __enter__(self) -> "NamespaceHost":
        self.set_routes(self.routes)
        self._teardown()  # what an earlier run of this process left
        self._ip("netns", "add", self.ns)
        self._ip("link", "add", self.host_if, "type", "veth", "peer", "name", self.web_if)
        self._ip("link", "set", self.web_if, "netns", self.ns)
        self._ip("addr", "add", f"{self.host_side}/30", "dev", self.host_if)
        self._ip("link", "set", self.host_if, "up")
        self._ip("-n", self.ns, "addr", "add", f"{self.address}/30", "dev", self.web_if)
        self._ip("-n", self.ns, "link", "set", self.web_if, "up")
        self._ip("-n", self.ns, "link", "set", "lo", "up")
        self._server = subprocess.Popen(["nsenter", f"--net=/var/run/netns/{self.ns}", sys.executable, "-c", SERVER,
                                         self.address, "80", str(self.routes_file)],
                                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        assert self._server.stdout.readline().strip() == "ready", "the web host in the namespace did not start"
        deadline = time.monotonic() + 10
        while True:  # the link comes up a moment after the addresses
            try:
                socket.create_connection((self.address, 80), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        return self

    def _teardown(self) -> None:
        if self._server is not None:
            self._server.kill()
            self._server.wait(10)
            self._server = None
        subprocess.run(["ip", "link", "del", self.host_if], capture_output=True)
        subprocess.run(["ip", "netns", "del", self.ns], capture_output=True)

    def __exit__(self, *exc) -> None:
        self._teardown()
        self._dir.cleanup()
