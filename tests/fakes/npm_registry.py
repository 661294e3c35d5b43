"""A fake npm registry on 127.0.0.1: a package document (`GET /<name>`) and its tarball, built from
files given in the test, shaped like registry.npmjs.org's (dist.tarball, integrity, shasum)."""
from __future__ import annotations

import base64
import hashlib
import io
import json
import tarfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def tarball(files: dict[str, str | bytes]) -> bytes:
    """A package tarball as `npm pack` makes it (everything under package/)."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for name, data in files.items():
            data = data.encode() if isinstance(data, str) else data
            info = tarfile.TarInfo(f"package/{name}")
            info.size, info.mode = len(data), 0o755 if name.endswith(".js") else 0o644
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


class FakeNpmRegistry:
    def __init__(self):
        self.packages: dict[str, tuple[dict, bytes]] = {}  # name -> (package.json, tarball)
        self.requests: list[str] = []
        registry = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                registry.requests.append(self.path)
                name = self.path.strip("/").split("/-/")[0]
                found = registry.packages.get(name)
                if found is None:
                    return self._send(404, b'{"error":"Not found"}', "application/json")
                manifest, tgz = found
                if "/-/" in self.path:
                    return self._send(200, tgz, "application/octet-stream")
                version = manifest["version"]
                doc = {"name": name, "dist-tags": {"latest": version}, "versions": {version: {
                    **manifest, "dist": {
                        "tarball": f"{registry.url}/{name}/-/{name}-{version}.tgz",
                        "shasum": hashlib.sha1(tgz).hexdigest(),
                        "integrity": "sha512-" + base64.b64encode(hashlib.sha512(tgz).digest()).decode()}}}}
                self._send(200, json.dumps(doc).encode(), "application/json")

            def _send(self, status, body, ctype):
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_):
                pass
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_port}"

    def publish(self, manifest: dict, files: dict[str, str | bytes]) -> None:
        self.packages[manifest["name"]] = (manifest, tarball({"package.json": json.dumps(manifest), **files}))

    def __enter__(self):
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *_):
        self._server.shutdown()
        self._server.server_close()
