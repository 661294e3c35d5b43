"""A local HTTPS server with a throw-away self-signed certificate, for egress and credential tests.

    cert = make_cert(tmp_path)                      # cert.pem (also the CA to trust) + key.pem
    with HttpsServer(cert) as server:               # 127.0.0.1:<free port>
        ... https://127.0.0.1:{server.port}/anything ...
        server.requests[-1]["headers"]["authorization"]

Every request is recorded (method, path, lower-cased headers); the answer is JSON
{"ok": true, "path": ..., "authorized": <was an Authorization header sent>} and never echoes a header.
"""
from __future__ import annotations

import json
import ssl
import subprocess
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


@dataclass(frozen=True)
class Cert:
    cert: Path
    key: Path


def make_cert(directory: Path, hosts=("127.0.0.1", "localhost")) -> Cert:
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    san = ",".join(f"IP:{h}" if h[0].isdigit() or ":" in h else f"DNS:{h}" for h in hosts)
    cert, key = directory / "test-cert.pem", directory / "test-key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "2", "-subj", "/CN=nanoclaw-test",
                    "-addext", f"subjectAltName={san}"], check=True, capture_output=True)
    cert.chmod(0o644)
    return Cert(cert, key)


class HttpsServer:
    def __init__(self, cert: Cert, host: str = "127.0.0.1"):
        self.requests: list[dict] = []
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def _answer(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                headers = {k.lower(): v for k, v in self.headers.items()}
                recorder.requests.append({"method": self.command, "path": self.path, "headers": headers,
                                          "body": body})
                data = json.dumps({"ok": True, "path": self.path,
                                   "authorized": "authorization" in headers}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_DELETE = _answer

        self.server = ThreadingHTTPServer((host, 0), Handler)
        self.server.daemon_threads = True
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert.cert, cert.key)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        self.url = f"https://{host}:{self.port}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> "HttpsServer":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
