"""The bundled CLI's own model requests pass the door's body check (issue 60, item 4): the door refuses
what would make the provider fetch or run things, and must not refuse what the CLI itself sends. The
real CLI runs a turn that uses WebFetch on a page (an HTTPS host reached through a CONNECT proxy, as a
sandbox reaches the web through the door), so its helper call (the page and the question, sent to a
small model with no tools) is among the requests replayed through the check with nothing allowed.
End-to-end turns elsewhere go through the real door; this one names the WebFetch helper explicitly."""
from __future__ import annotations

import glob
import json
import os
import select
import socket
import ssl
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from nanoclaw.proxy.model_body import refusal
from tests.fakes.model_api import FakeModel, Reply

HOST = "hours.example.test"
PAGE = b"<html><body><h1>Opening hours</h1><p>We open at nine.</p></body></html>"


class _Page(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("content-type", "text/html")
        self.send_header("content-length", str(len(PAGE)))
        self.end_headers()
        self.wfile.write(PAGE)

    def log_message(self, *args):
        pass


def _pipe(client: socket.socket, port: int) -> None:
    """One CONNECT: whatever host was asked for, the page server answers (its certificate names HOST)."""
    with client:
        head = b""
        while b"\r\n\r\n" not in head:
            piece = client.recv(4096)
            if not piece:
                return
            head += piece
        with socket.create_connection(("127.0.0.1", port)) as up:
            client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            while True:
                ready, _, _ = select.select([client, up], [], [], 30)
                if not ready:
                    return
                for side in ready:
                    data = side.recv(65536)
                    if not data:
                        return
                    (up if side is client else client).sendall(data)


@pytest.fixture
def web(tmp_path):
    """An HTTPS page for HOST and a CONNECT proxy to it: (proxy url, CA file)."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
                    str(cert), "-days", "1", "-subj", f"/CN={HOST}", "-addext", f"subjectAltName=DNS:{HOST}"],
                   check=True, capture_output=True)
    server = HTTPServer(("127.0.0.1", 0), _Page)
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert, key)
    server.socket = tls.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    listener = socket.create_server(("127.0.0.1", 0))

    def accept():
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=_pipe, args=(client, server.server_port), daemon=True).start()
    threading.Thread(target=accept, daemon=True).start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}", cert
    listener.close()
    server.shutdown()


def test_the_clis_requests_in_a_webfetch_turn_pass_the_doors_check(web, tmp_path):
    proxy_url, ca = web

    def script(req):
        tools = [t.get("name") for t in (req.body or {}).get("tools") or []]
        if not tools:  # WebFetch's helper: the page and the question, for a small model
            return Reply.say("They open at nine.")
        done = req.turn_tool_results()
        if not done:
            return Reply.call("WebFetch", url=f"https://{HOST}/hours", prompt="When do they open?")
        return Reply.say("Answer: " + done[-1].text)

    [cli] = glob.glob(os.path.join(os.path.dirname(__import__("claude_agent_sdk").__file__), "_bundled", "claude"))
    with FakeModel(script=script) as model:
        env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "ANTHROPIC_BASE_URL": model.url,
               "ANTHROPIC_API_KEY": "placeholder", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
               "DISABLE_TELEMETRY": "1", "DISABLE_AUTOUPDATER": "1", "NODE_EXTRA_CA_CERTS": str(ca),
               "HTTPS_PROXY": proxy_url, "NO_PROXY": "127.0.0.1"}
        run = subprocess.run([cli, "-p", "When does the shop open?", "--allowedTools", "WebFetch",
                              "--settings", json.dumps({"skipWebFetchPreflight": True})],
                             env=env, capture_output=True, text=True, timeout=180, cwd=tmp_path)
        calls = model.model_calls()
    assert "Answer: They open at nine." in run.stdout, (run.stdout, run.stderr[-2000:])
    helper = [c for c in calls if not c.body.get("tools")]
    assert helper and "We open at nine" in json.dumps(helper[0].body)  # the page went to the helper call
    refused = {c.body.get("model"): refusal(json.dumps(c.body).encode(), frozenset(), "andy") for c in calls}
    assert not any(refused.values()), refused
    assert len(calls) >= 3  # the turn's first call, the helper's, the answer
