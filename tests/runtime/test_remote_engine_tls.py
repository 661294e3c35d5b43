"""A Docker engine behind TLS with its own CA (DOCKER_HOST=tcp://…, DOCKER_TLS_VERIFY, DOCKER_CERT_PATH)
is reached even where REQUESTS_CA_BUNDLE names another bundle, as on machines behind an intercepting
proxy: requests lets that variable override the CA the Docker SDK pins, and the handshake then fails
with "unable to get local issuer certificate". The engine here is this machine's real Docker engine,
reached through a TLS front on 127.0.0.1 with a CA, a server and a client certificate made for the
test, which insists on the client certificate as `dockerd --tlsverify` does (a second dockerd with its
own TLS would take its own data root and some 20 s to start)."""
from __future__ import annotations

import datetime
import ipaddress
import socket
import socketserver
import ssl
import threading

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from conftest import require
from nanoclaw.runtime import docker as docker_rt

from agent_runner.bridge import _pump  # noqa: E402 - container/ is on sys.path (tests/conftest.py)


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


class TlsFront(socketserver.ThreadingTCPServer):
    """TLS on 127.0.0.1 in front of the engine's unix socket: each connection is checked (the client
    certificate is required) and then relayed byte for byte."""
    daemon_threads = True

    def __init__(self, context: ssl.SSLContext, engine_socket: str):
        self.context, self.engine_socket = context, engine_socket
        super().__init__(("127.0.0.1", 0), Relay)


class Relay(socketserver.BaseRequestHandler):
    def handle(self):
        try:
            conn = self.server.context.wrap_socket(self.request, server_side=True)
        except (ssl.SSLError, OSError):
            return  # no client certificate, or not one of the CA's: no answer
        engine = socket.socket(socket.AF_UNIX)
        engine.connect(self.server.engine_socket)
        back = threading.Thread(target=_pump, args=(engine, conn), daemon=True)
        back.start()
        _pump(conn, engine)
        back.join(30)
        conn.close()
        engine.close()


@pytest.fixture
def tls_engine(tmp_path):
    local, where = docker_rt.connect()
    require(local is not None and where.startswith("unix://"), f"no local Docker engine ({where})")
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
    front = TlsFront(context, where.removeprefix("unix://"))
    threading.Thread(target=front.serve_forever, daemon=True).start()
    yield f"tcp://127.0.0.1:{front.server_address[1]}", certs, local.version()["ApiVersion"]
    front.shutdown()
    front.server_close()
    local.close()


def test_a_tls_engine_with_its_own_ca_is_reached_despite_requests_ca_bundle(tls_engine, monkeypatch):
    url, certs, api_version = tls_engine
    monkeypatch.setenv("DOCKER_HOST", url)
    monkeypatch.setenv("DOCKER_TLS_VERIFY", "1")
    monkeypatch.setenv("DOCKER_CERT_PATH", str(certs))
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", ssl.get_default_verify_paths().cafile or "/etc/ssl/certs/ca-certificates.crt")
    monkeypatch.setenv("CURL_CA_BUNDLE", ssl.get_default_verify_paths().cafile or "/etc/ssl/certs/ca-certificates.crt")
    client, where = docker_rt.connect()
    assert client is not None, f"no engine at {where}"
    assert where == url and client.version()["ApiVersion"] == api_version
    assert client.images.list()  # the engine's own answers, over TLS (the agent image at least)


def test_without_the_client_certificate_the_engine_is_not_reached(tls_engine, monkeypatch, tmp_path):
    url, certs, _version = tls_engine
    bare = tmp_path / "only-ca"
    bare.mkdir()
    (bare / "ca.pem").write_bytes((certs / "ca.pem").read_bytes())
    monkeypatch.setenv("DOCKER_HOST", url)
    monkeypatch.setenv("DOCKER_TLS_VERIFY", "1")
    monkeypatch.setenv("DOCKER_CERT_PATH", str(bare))
    client, _where = docker_rt.connect()
    assert client is None
