"""The browser worker on its own (issue 62, item 4): at most --max browsers at once (others wait for a
free one), no profile kept from one browser to the next, and each browser, then the worker, gone after
the idle time, with its sandbox and its folder. Real Chromium in its bubblewrap sandbox; pages from a
server on 127.0.0.2, opened as an owner opens a home network."""
from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from conftest import require
from nanoclaw.config import Settings
from nanoclaw.reading.browser_sandbox import Where, where
from tests.internet.browser_processes import relays_under

PAGE = (b"<html><head><title>Jar</title></head><body><p id=p></p><script>"
        b"document.getElementById('p').textContent = 'remembered: ' + (localStorage.getItem('k') || 'nothing') + "
        b"', cookie: ' + (document.cookie || 'none'); localStorage.setItem('k', 'v1'); document.cookie = 'c=1; max-age=9999'"
        b"</script></body></html>")


class Page(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(PAGE)))
        self.end_headers()
        self.wfile.write(PAGE)

    def log_message(self, *args):
        pass


@pytest.fixture
def site():
    server = ThreadingHTTPServer(("127.0.0.2", 0), Page)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.2:{server.server_address[1]}/", server.server_address[1]
    server.shutdown()


class BrowserWorker:
    def __init__(self, port: int, *args: str):
        self.port = port
        self.proc = subprocess.Popen([sys.executable, "-m", "nanoclaw.reading.browser", *args], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.answers: dict[int, dict] = {}
        self.log: list[str] = []
        self._ids = iter(range(1, 10**6))
        self._cv = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()
        self._stderr = threading.Thread(target=lambda: self.log.extend(self.proc.stderr), daemon=True)
        self._stderr.start()

    def exited(self, timeout: float) -> int:
        """Wait for the worker to leave, and for its last log lines to be read (the pipe may still hold them)."""
        code = self.proc.wait(timeout)
        self._stderr.join(10)
        return code

    def _read(self):
        for line in self.proc.stdout:
            got = json.loads(line)
            with self._cv:
                if "id" in got:
                    self.answers[got["id"]] = got
                self._cv.notify_all()

    def send(self, **request) -> int:
        request_id = next(self._ids)
        self.proc.stdin.write(json.dumps({"id": request_id, "allow_networks": ["127.0.0.2/32"],
                                          "allow_ports": [self.port], **request}) + "\n")
        self.proc.stdin.flush()
        return request_id

    def answer(self, request_id: int, timeout: float = 60) -> dict:
        with self._cv:
            assert self._cv.wait_for(lambda: request_id in self.answers, timeout), f"no answer to {request_id}"
            return self.answers[request_id]


def test_one_browser_at_a_time_with_max_1_no_profile_kept_and_all_gone_when_idle(make_settings, site):
    sandbox = where(Settings.load({"NANOCLAW_RUNTIME": "bwrap", "NANOCLAW_DATA_DIR": str(make_settings().data_dir)}))
    require(isinstance(sandbox, Where), f"no browser here: {sandbox}")
    url, port = site
    worker = BrowserWorker(port, "--idle", "4", "--max", "1")
    try:
        first = worker.answer(worker.send(op="open", session="a/1", url=url))
        assert "remembered: nothing, cookie: none" in first["text"]
        again = worker.answer(worker.send(op="open", session="a/1", url=url))
        assert "remembered: v1, cookie: c=1" in again["text"]  # the same browser keeps them while it runs
        folders = [Path(line.split()[-1]) for line in worker.log if "browser folder" in line]

        waiting = worker.send(op="open", session="b/2", url=url)  # a second session: no browser free
        deadline = time.monotonic() + 30
        while not any("b/2 waits for a free browser" in line for line in worker.log):
            assert time.monotonic() < deadline, "the second session never waited"
            time.sleep(0.05)
        assert waiting not in worker.answers and relays_under() == 1  # it waits ...
        closed = worker.answer(worker.send(op="close", session="a/1"))
        assert closed["text"] == "The browser was closed."
        second = worker.answer(waiting)  # ... and gets the browser the first one left
        assert "remembered: nothing, cookie: none" in second["text"]  # a fresh profile, nothing carried over

        worker.exited(60)  # idle: the browser stops, then the worker leaves by itself
        assert worker.proc.returncode == 0 and relays_under() == 0
        assert folders and not any(f.exists() for f in folders)
        assert any("browser stopped for b/2" in line for line in worker.log)
    finally:
        if worker.proc.poll() is None:
            worker.proc.kill()
