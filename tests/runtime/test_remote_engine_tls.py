"""A Docker engine behind TLS with its own CA (DOCKER_HOST=tcp://…, DOCKER_TLS_VERIFY, DOCKER_CERT_PATH)
is reached even where REQUESTS_CA_BUNDLE names another bundle, as on machines behind an intercepting
proxy: requests lets that variable override the CA the Docker SDK pins, and the handshake then fails
with "unable to get local issuer certificate". The engine here is an HTTPS server on 127.0.0.1 that
answers the Engine API's /_ping and /version, with a CA, a server and a client certificate made for
the test, and it insists on the client certificate, as `dockerd --tlsverify` does."""
from __future__ import annotations

import datetime
import ipaddress
import json
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from nanoclaw.runtime import docker as docker_rt


def _cert(subject: str, key, issuer_key=None, issuer=None, *, ca=False, server=False):
    now = datetime.datetime.now(datetime.timezone.utc)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    builder = (x509.CertificateBuilder().subject_name(name).issuer_name(issuer or name).public_key(key.public_key())
               .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=1))
               .not_valid_after(now + datetime.timedelta(hours=1))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if server:
        builder = builder.add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                                        critical=False)
    return builder.sign(issuer_key or key, hashes.SHA256())


def _pem(path, cert=None, key=None):
    if cert is not None:
        path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    else:
        path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))


class Engine(BaseHTTPRequestHandler):
    def log_message(self, *_args):
        pass

    def do_GET(self):
        path = self.path.split("?")[0]
        if path.endswith("/_ping"):
            body, kind = b"OK", "text/plain"
        elif path.endswith("/version"):
            body, kind = json.dumps({"ApiVersion": "1.45", "Version": "27.0.0", "MinAPIVersion": "1.24"}).encode(), \
                "application/json"
        else:
            self.send_response(404)
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def tls_engine(tmp_path):
    ca_key, server_key, client_key = (ec.generate_private_key(ec.SECP256R1()) for _ in range(3))
    ca = _cert("test engine CA", ca_key, ca=True)
    server = _cert("127.0.0.1", server_key, ca_key, ca.subject, server=True)
    client = _cert("nanoclaw", client_key, ca_key, ca.subject)
    certs = tmp_path / "certs"
    certs.mkdir()
    _pem(certs / "ca.pem", ca)
    _pem(certs / "cert.pem", client)
    _pem(certs / "key.pem", key=client_key)
    _pem(tmp_path / "server.pem", server)
    _pem(tmp_path / "server-key.pem", key=server_key)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tmp_path / "server.pem", tmp_path / "server-key.pem")
    context.load_verify_locations(certs / "ca.pem")
    context.verify_mode = ssl.CERT_REQUIRED  # as dockerd --tlsverify: no client certificate, no answer
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Engine)
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"tcp://127.0.0.1:{httpd.server_address[1]}", certs
    httpd.shutdown()


def test_a_tls_engine_with_its_own_ca_is_reached_despite_requests_ca_bundle(tls_engine, monkeypatch):
    url, certs = tls_engine
    monkeypatch.setenv("DOCKER_HOST", url)
    monkeypatch.setenv("DOCKER_TLS_VERIFY", "1")
    monkeypatch.setenv("DOCKER_CERT_PATH", str(certs))
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", ssl.get_default_verify_paths().cafile or "/etc/ssl/certs/ca-certificates.crt")
    monkeypatch.setenv("CURL_CA_BUNDLE", ssl.get_default_verify_paths().cafile or "/etc/ssl/certs/ca-certificates.crt")
    client, where = docker_rt.connect()
    assert client is not None, f"no engine at {where}"
    assert where == url and client.version()["ApiVersion"] == "1.45"


def test_without_the_client_certificate_the_engine_is_not_reached(tls_engine, monkeypatch, tmp_path):
    url, certs = tls_engine
    bare = tmp_path / "only-ca"
    bare.mkdir()
    (bare / "ca.pem").write_bytes((certs / "ca.pem").read_bytes())
    monkeypatch.setenv("DOCKER_HOST", url)
    monkeypatch.setenv("DOCKER_TLS_VERIFY", "1")
    monkeypatch.setenv("DOCKER_CERT_PATH", str(bare))
    client, _where = docker_rt.connect()
    assert client is None
