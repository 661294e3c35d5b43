"""The reading worker program (nanoclaw/reading/worker.py) through the web program's client: started on
the first read, several reads at once, gone when idle and started again by the next read."""
from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from nanoclaw.reading.client import Worker

PAGE = ("<html><head><title>Opening hours</title></head><body><nav>Menu Menu Menu</nav><main><h1>Opening hours</h1>"
        "<p>The library opens at nine on weekdays and at ten on Saturdays; it is closed on Sundays and holidays.</p>"
        "<p>Late opening until eight on Thursdays, for readers who work during the day.</p></main>"
        "<footer>Imprint and privacy</footer></body></html>").encode()


class Slowish(BaseHTTPRequestHandler):
    lock, inflight, most = threading.Lock(), 0, 0

    def do_GET(self):  # noqa: N802
        with Slowish.lock:
            Slowish.inflight += 1
            Slowish.most = max(Slowish.most, Slowish.inflight)
        time.sleep(0.3)  # long enough for reads asked together to overlap
        with Slowish.lock:
            Slowish.inflight -= 1
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(PAGE)))
        self.end_headers()
        self.wfile.write(PAGE)

    def log_message(self, *args):
        pass


@pytest.fixture
def site():
    server = ThreadingHTTPServer(("127.0.0.2", 0), Slowish)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()


def ask(worker, port, offset=0, limit=50_000):
    return worker.ask({"url": f"http://127.0.0.2:{port}/hours", "offset": offset, "limit": limit,
                       "allow_networks": ["127.0.0.2/32"], "allow_ports": [port], "own_ports": []}, 30)


def test_reads_run_at_once_and_the_idle_worker_goes_and_comes_back(site):
    worker = Worker(idle_s=1.0)
    try:
        answers = [None] * 4
        threads = [threading.Thread(target=lambda i=i: answers.__setitem__(i, ask(worker, site))) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert all(a["ok"] and "opens at nine" in a["text"] for a in answers), answers
        assert all("Menu" not in a["text"] and "Imprint" not in a["text"] for a in answers)
        assert answers[0]["title"] == "Opening hours"
        assert Slowish.most >= 2  # the worker read them together, not one after another
        first = worker._proc
        first.wait(30)  # idle for a second: it exits by itself
        part = ask(worker, site, offset=10, limit=20)  # and the next read starts another
        assert worker._proc is not first and part["ok"] and part["offset"] == 10 and len(part["text"]) == 20
        assert part["total"] > 100
    finally:
        worker.stop()


def test_a_refused_url_is_answered_with_the_reason(site):
    worker = Worker(idle_s=5.0)
    try:
        got = worker.ask({"url": "http://127.0.0.1:9/", "allow_networks": ["127.0.0.2/32"], "allow_ports": [9]}, 30)
        assert got == {"ok": False, "reason": got["reason"]} and "not a public address" in got["reason"]
    finally:
        worker.stop()


def pdf_with_text(text: str) -> bytes:
    """A one-page PDF whose page shows `text` (Helvetica), with a correct cross-reference table."""
    stream = f"BT /F1 24 Tf 72 700 Td ({text}) Tj ET".encode()
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
               b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
               b"/Resources << /Font << /F1 5 0 R >> >> >>",
               b"<< /Length " + str(len(stream)).encode() + b" >>\nstream\n" + stream + b"\nendstream",
               b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"]
    out, offsets = bytearray(b"%PDF-1.4\n"), []
    for n, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += f"{n} 0 obj\n".encode() + body + b"\nendobj\n"
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    out += b"".join(f"{o:010d} 00000 n \n".encode() for o in offsets)
    out += f"trailer << /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode()
    return bytes(out)


FEED = (b'<?xml version="1.0"?><rss version="2.0"><channel><title>Tea news</title><item><title>Harvest</title>'
        b'<link>https://tea.example/h</link><description>First flush is in.</description></item></channel></rss>')
LOOPING_PDF = (b"%PDF-1.7\n1 0 obj << /Type /Catalog /Pages 2 0 R >> endobj\n"
               + b"".join(b"%d 0 obj << /Type /Pages /Kids [%d 0 R] /Count 1 >> endobj\n" % (i, i + 1)
                          for i in range(2, 20_000))
               + b"20000 0 obj << /Type /Pages /Kids [2 0 R] /Count 1 >> endobj\ntrailer << /Root 1 0 R >>\n%%EOF\n")


class Files(BaseHTTPRequestHandler):
    bodies = {"/hours.pdf": ("application/pdf", pdf_with_text("Opening hours: nine to five")),
              "/news.rss": ("application/rss+xml", FEED), "/loop.pdf": ("application/pdf", LOOPING_PDF),
              "/data.json": ("application/json", b'{"open": [9, 17]}')}

    def do_GET(self):  # noqa: N802
        kind, body = self.bodies[self.path]
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_pdfs_feeds_and_json_are_read_as_text_and_a_looping_pdf_is_refused(tmp_path):
    server = ThreadingHTTPServer(("127.0.0.2", 0), Files)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    worker = Worker(idle_s=30.0)

    def read(path):
        return worker.ask({"url": f"http://127.0.0.2:{port}{path}", "allow_networks": ["127.0.0.2/32"],
                           "allow_ports": [port]}, 40)
    try:
        assert "Opening hours: nine to five" in read("/hours.pdf")["text"]
        news = read("/news.rss")
        assert news["title"] == "Tea news" and "1. Harvest (https://tea.example/h)" in news["text"]
        assert read("/data.json")["text"].replace(" ", "").replace("\n", "") == '{"open":[9,17]}'
        loop = read("/loop.pdf")
        assert loop["ok"] is False and "could not be read" in loop["reason"]
        assert "nine to five" in read("/hours.pdf")["text"]  # the worker goes on
    finally:
        worker.stop()
        server.shutdown()
